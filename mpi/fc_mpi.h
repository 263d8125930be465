/* flowc's MPI communication layer: the calls a generated multi-rank model makes (point-to-point
 * transfers of tensors between ranks, allreduce, broadcast), each checked, timed and reported in
 * one line that names the model, the rank, the operation, the peer and the tensor.
 *
 * Usage (a model compiled for 4 ranks):
 *
 *     fc_mpi m;
 *     MPI_Init(&argc, &argv);
 *     if (fc_mpi_init(&m, NULL, 4, "net")) { MPI_Finalize(); return 1; }
 *     fc_mpi_irecv(&m, h, 4096, 0, 7, &req, "h");   ... compute ...   fc_mpi_wait(&m, &req, "h");
 *     fc_mpi_free(&m);
 *     MPI_Finalize();
 *
 * Errors: every MPI call is checked. On a failure the layer prints ONE line to stderr, e.g.
 *     net: rank 1: MPI_Irecv of tensor 'h' from rank 0 failed: <MPI_Error_string's text>
 * and calls MPI_Abort on the communicator, so that no rank waits forever on a dead peer. The int
 * returns exist for symmetry: 0 on success (a failure does not return). Only fc_mpi_init returns
 * non-zero, when the communicator's size differs from the one the model was compiled for (every
 * rank prints the line and returns, so that all can finalize and exit non-zero) or when MPI is not
 * initialized.
 *
 * Names (model, tensors) come from model files: they are printed through "%s" only, printable
 * ASCII as is, any other byte (and the quote and the backslash) as \xNN, at most 64 bytes.
 *
 * No call allocates memory: the hot paths are plain MPI calls plus two MPI_Wtime readings.
 * Messages are at most INT_MAX bytes (an MPI count is an int); a larger one aborts naming the
 * tensor. Requires C99 and MPI (any implementation: MPICH, Open MPI, ...). */
#ifndef FC_MPI_H
#define FC_MPI_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FC_MPI_PENDING 64 /* hierarchical reductions in flight at once */

typedef struct fc_mpi {
    MPI_Comm comm;     /* a duplicate of the communicator given to fc_mpi_init (MPI_Comm_dup), errors return */
    int rank, size;
    const char *model; /* the model's name, for messages */
    double wait_us;    /* microseconds spent in fc_mpi_wait / fc_mpi_waitall since init (or reset) */
    double comm_us;    /* microseconds spent in the other calls (posting sends/receives, collectives) */
    /* the hierarchical allreduce (fc_mpi_hierarchy): this node's ranks and, on each node's first
     * rank, the nodes' first ranks; MPI_COMM_NULL while the reductions are flat */
    MPI_Comm node, leaders;
    int nodes;
    int n_pending; /* the reductions posted on the node, completed by fc_mpi_wait */
    struct {
        MPI_Request *req;
        void *buf;
        int count;
        MPI_Datatype type;
        MPI_Op op;
    } pending[FC_MPI_PENDING];
} fc_mpi;

/* comm_handle: a pointer to an MPI_Comm (e.g. the address mpi4py's MPI._addressof(comm) gives), or
 * NULL for MPI_COMM_WORLD. Sets MPI_ERRORS_RETURN on the duplicate. expected_size > 0: refuse (one
 * line naming the model, both sizes, e.g. "net: rank 0: compiled for 4 ranks, run with 2
 * (mpiexec -n 4)", return non-zero) when the communicator's size differs. With MPI_COMM_WORLD, a
 * world of one process that a launcher started among several (its PMI_SIZE, OMPI_COMM_WORLD_SIZE,
 * MV2_COMM_WORLD_SIZE or, in a Slurm job step, SLURM_STEP_NUM_TASKS says more: a binary built
 * against one MPI started by another's mpiexec runs as independent copies) is refused first, in
 * one line naming both counts, the variable and this binary's MPI library. MPI must already be
 * initialized (the caller's job). */
int fc_mpi_init(fc_mpi *m, const void *comm_handle, int expected_size, const char *model);
void fc_mpi_free(fc_mpi *m); /* MPI_Comm_free of the duplicate (nothing once MPI is finalized) */
int fc_mpi_isend(fc_mpi *m, const void *buf, long nbytes, int peer, int tag, MPI_Request *req,
                 const char *tensor);
int fc_mpi_irecv(fc_mpi *m, void *buf, long nbytes, int peer, int tag, MPI_Request *req, const char *tensor);
int fc_mpi_wait(fc_mpi *m, MPI_Request *req, const char *tensor);
int fc_mpi_waitall(fc_mpi *m, int count, MPI_Request *reqs, const char *what);
int fc_mpi_allreduce_sum_f32(fc_mpi *m, float *buf, long count, const char *tensor); /* in place, MPI_SUM */
/* Post the in-place reduction over the ranks of count elements of type with op (e.g. MPI_FLOAT,
 * MPI_SUM): nonblocking, completed by fc_mpi_wait. */
int fc_mpi_iallreduce(fc_mpi *m, void *buf, long count, MPI_Datatype type, MPI_Op op, MPI_Request *req,
                      const char *what);
int fc_mpi_allreduce_max_f64(fc_mpi *m, double *buf, long count, const char *what);  /* in place, MPI_MAX */
int fc_mpi_bcast(fc_mpi *m, void *buf, long nbytes, int root, const char *tensor);
int fc_mpi_barrier(fc_mpi *m);
/* Make fc_mpi_iallreduce hierarchical: each node's ranks reduce to the node's first rank, those
 * ranks allreduce among the nodes, and each broadcasts the sum on its node (fc_mpi_wait runs the
 * last two), so that only one rank a node sends over the network. A node is the ranks that share
 * memory (MPI_Comm_split_type) or, with node_ranks > 0, each run of node_ranks consecutive ranks.
 * Collective. Returns the number of nodes; with one node, or one rank on every node, the
 * reductions stay flat. The sums add the same values in another order than the flat ones. */
int fc_mpi_hierarchy(fc_mpi *m, int node_ranks);
double fc_mpi_now_us(void); /* MPI_Wtime in microseconds */
void fc_mpi_abort(fc_mpi *m, const char *message); /* print "net: rank R: <message>" and MPI_Abort */

#ifdef __cplusplus
}
#endif

#endif /* FC_MPI_H */
