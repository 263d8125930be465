/* The float16 sum of a data-parallel training step's compressed gradient buckets
 * (templates/mpi/ops/allreduce_start.c.j2 with wire float16): an MPI user operation on
 * uint16 bits, each pair added in float32 and rounded to the nearest half. Commutative, so
 * every rank gets the same sum. Needs MPI and mpi/fc_mpi.h. */
#ifndef FC_MPI_ALLREDUCE_H
#define FC_MPI_ALLREDUCE_H

#include <mpi.h>

#include "fc_mpi.h"
#include "flowc_rt.h"

FC_INLINE void fc_sum_f16(void *in, void *inout, int *len, MPI_Datatype *type) {
    const fc_f16 *a = (const fc_f16 *)in;
    fc_f16 *b = (fc_f16 *)inout;
    int i;
    (void)type;
    for (i = 0; i < *len; ++i) b[i] = fc_f2h(fc_h2f(a[i]) + fc_h2f(b[i]));
}

/* Post the float16 sum of buf: the operation is freed at once (MPI completes the pending
 * reduction with it). */
FC_INLINE int fc_iallreduce_f16(fc_mpi *m, fc_f16 *buf, long count, MPI_Request *req, const char *what) {
    MPI_Op op;
    if (MPI_Op_create(fc_sum_f16, 1, &op) != MPI_SUCCESS) fc_mpi_abort(m, "MPI_Op_create of the float16 sum failed");
    fc_mpi_iallreduce(m, buf, count, MPI_UINT16_T, op, req, what);
    if (MPI_Op_free(&op) != MPI_SUCCESS) fc_mpi_abort(m, "MPI_Op_free of the float16 sum failed");
    return 0;
}

#endif /* FC_MPI_ALLREDUCE_H */
