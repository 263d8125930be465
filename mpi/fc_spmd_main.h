/* The SPMD program's main over MPI ranks, the same for every model: a generated main.c
 * (templates/mpi/main.c.j2) describes the model over all ranks in an fc_spmd_program and calls
 * fc_spmd_main:
 *
 *   mpiexec -n R net --in NAME=FILE.npy [--in ...] --out-dir DIR [--microbatches K] [--bench N]
 *
 * Every rank runs this program and its own part of the model. A rank reads the inputs it owns
 * (a .npy file each, dtype and shape checked) and writes the outputs it computes to DIR/<output>.npy
 * (to fresh temporaries first, put in place only when every rank has written all of its own; when
 * one rank fails, every rank puts back the files that were there).
 * --microbatches K: every input and output holds K times the compiled batch (axis 0); the
 * model runs on each slice in turn, so that while rank i works on slice j, rank i+1 works on
 * slice j-1. --bench N: N more steps, each timed from a common start to the slowest rank's end;
 * rank 0 prints "median_us=<float>" and each rank's mean compute, wait and communication time.
 * Errors: one line on stderr naming the rank; every rank exits non-zero (2 arguments and input
 * files, 3 memory and threads, 4 the output files; 1 when MPI or the model's context cannot
 * start). A failure while the ranks run (a transfer, a step) aborts the whole job (MPI_Abort).
 *
 * It lives beside the MPI layer (it calls MPI and fc_mpi.h; runtime_c builds without MPI) and
 * shares the model's description and the command line with the one-process binary's main
 * (runtime_c/main_driver.h). */
#ifndef FC_SPMD_MAIN_H
#define FC_SPMD_MAIN_H

#include <stddef.h>

#include "main_driver.h"

typedef struct {
    const fc_main_model *model;       /* a tensor's owner: the rank that reads or writes it; the
                                       * run's args.ctx: the rank's context (fc_mpi *) */
    int ranks;                        /* the model's; mpiexec -n must match (start refuses others) */
    size_t (*arena_bytes)(int rank);  /* <name>_arena_bytes */
    int (*start)(void *mpi, const void *comm); /* <name>_mpi_start: one line and non-zero if refused */
    void (*stop)(void *mpi);          /* <name>_mpi_stop */
} fc_spmd_program;

/* The program: see the top of this header. Initializes and finalizes MPI; returns the exit code. */
int fc_spmd_main(const fc_spmd_program *p, int argc, char **argv);

#endif /* FC_SPMD_MAIN_H */
