/* The training binary's driver, the same for every model (codegen/backends/c/trainer.py):
 *
 *   NAME train --data FILE.npz | --data NAME=FILE.npy ... [--epochs E] [--batch B] [--seed S]
 *              [--checkpoint FILE.npz [--every N]] [--resume FILE.npz|auto] [--timeout S]
 *              [--accumulate K] [--allreduce flat|hierarchical [--node-ranks N]] [--progress US]
 *              [--microbatches K] [--schedule 1f1b|gpipe]
 *   mpiexec -n R NAME train ...      (built with FC_MPI defined: each rank its slice of every batch)
 *
 * The generated train.c (templates/train/train.c.j2) describes the model's training step in one
 * fc_train_model: the step's inputs, its state variables and its entry points; fc_train_main
 * does the rest. Each step runs the step model: forward, backward and the optimizer's update of
 * the variables in the state buffer. The dataset's arrays (one per input of the step) are
 * memory-mapped, never copied whole (npz.h): each has the samples on its first axis. Every epoch
 * visits them in the order of a seeded shuffle (fc_train_order, the same on every rank; order()
 * in codegen/backends/c/trainer.py is its Python twin), in global batches of B = batch x R
 * samples (R ranks; the last incomplete batch is left out); rank r takes samples
 * [r * batch, (r + 1) * batch) of each.
 *
 * Built with MPI (FC_MPI defined, mpi/ on the include path, MPI's compiler), the step averages
 * the gradients over the ranks (allreduce, in buckets, while backward goes on), so every rank
 * holds the same variables: rank 0's start (its own, or the --resume checkpoint, which rank 0
 * alone reads) is broadcast first, and rank 0 writes the checkpoints and the progress. Every rank
 * reads --data. Before the first step the ranks agree on their start (one failing rank stops all,
 * each failing rank naming itself) and on what decides the step count (the dataset's samples,
 * --epochs, --seed, --every, --checkpoint, --resume, --timeout, the binary's batch and state: an
 * MPMD launch giving ranks different values is refused). Without MPI, a run under mpiexec with
 * more than one process is refused.
 *
 * --accumulate K (a step built with --train --accumulate: codegen/data_parallel.py accumulate):
 * each step is K calls on K batches of the step's size on each rank, the gradients summed and the
 * update applied on the K-th, so that one binary trains with the same global batch (batch x R x K)
 * at any rank count R; the driver steers the calls through two state variables
 * (fc_accumulate/apply and /scale).
 *
 * A pipeline-parallel binary (--train --ranks N; mpi/fc_pipeline.h) runs on exactly N ranks, each its
 * stage, every rank reading the same global batch of K microbatches (--microbatches K, default 4 x N;
 * --schedule 1f1b (default) or gpipe); before each checkpoint the stages' variables are gathered on
 * rank 0, which writes it; a checkpoint is the same as one process's.
 *
 * --allreduce hierarchical: each gradient bucket summed on its node's first rank, between those
 * ranks, then broadcast on the node (fc_mpi_hierarchy; nodes: the ranks sharing memory, or runs of
 * --node-ranks N). --progress US: a thread enters MPI every US microseconds while the steps compute
 * (MPI_THREAD_MULTIPLE), so that posted sums go on.
 *
 * --timeout S: a watchdog for a rank that makes no progress (a peer crashed, hung or stopped):
 * when the start's collectives or one step take longer than S seconds, the rank ends the job
 * (exit 6, one line naming itself). --resume auto: resume from --checkpoint's file when rank 0
 * finds it, else start from the initial values (the same command line restarts a killed run).
 * A checkpoint's temporary that a killed run (SIGKILL) left is removed at the next start
 * (files.h fc_file_sweep).
 *
 * Progress: on a terminal one line, rewritten (epoch, step, loss, samples/s); one line per epoch
 * in any case. --checkpoint: written every N steps (--every), at the end, and when SIGINT,
 * SIGTERM (what cluster schedulers send), SIGHUP or SIGUSR1 (SLURM's --signal) arrives: the
 * step under way finishes, the checkpoint is written and the exit status is 128 + the signal's
 * number (130 for SIGINT). If the step under way cannot end (a peer is gone or stuck) within
 * 10 s + 3 x the longest step so far, or a second signal comes, the process exits at once without
 * a checkpoint, saying so. Each write is atomic (files.h). The checkpoint's path is checked
 * before the first step: its folder must take a new file, and it must not name a file of --data.
 * Every value read from --resume is checked before use (global_step in range). --resume
 * continues from a checkpoint's step (same --data, --batch and --seed: the losses are those of a
 * run that never stopped). A loss that is not finite stops training (exit 5) and keeps the last
 * checkpoint. Errors: one line on stderr ("NAME train: error: ..."), non-zero exit (2: the
 * command line or the data, 3: memory, threads or a failed step, 4: the checkpoint could not be
 * written, 6: --timeout), no checkpoint written. */
#ifndef FLOWC_FC_TRAIN_H
#define FLOWC_FC_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"

/* One input of the training step, and the dataset's array of the same name. */
typedef struct {
    const char *name;  /* the input's name in the model (untrusted text: escaped when printed) */
    const char *dtype; /* float32, int64, ... */
    int rank;
    const long *shape; /* rank entries; shape[0]: the samples of one step on one rank */
    size_t row_bytes;  /* one sample's bytes */
    long labels;       /* class labels: the number of classes (checked before the first step); 0: not labels */
} fc_train_input;

/* What the driver knows of a model: data, and the step model's entry points. */
typedef struct {
    const char *name;        /* the program, in messages ("net train: error: ...") and checkpoints */
    const char *step;        /* the step model's name, in messages ("net_train_run failed") */
    const char *input_names; /* the inputs' names for messages: "x, labels" */
    const fc_train_input *inputs;
    int num_inputs;
    const fc_ck_var *vars;   /* the state's variables, as checkpoints hold them */
    int num_vars;
    long batch;              /* the samples of one step on one rank */
    const char *hash;        /* the variables' hash in a checkpoint's header (graphdef/checkpoint.py) */
    long global_step;        /* the offset of the state's int64 global_step; -1: the state has none */
    size_t arena_bytes;      /* the step's arena and state, and their alignment */
    size_t state_bytes;
    size_t align;
    int threads;             /* the step's threads: > 1 starts its pool (the pool_* functions) */
    int (*state_init)(void *state); /* NULL for a step that keeps its state in a context */
    /* One step on batch[k], the batch of input k: the loss (the train op's value) in *loss; 0, or
     * a status status_string describes. pool, mpi and ctx: NULL when the step takes none. */
    int (*run)(void *const *batch, float *loss, void *arena, void *state, void *pool, void *mpi, void *ctx);
    const char *(*status_string)(int status);
    size_t (*pool_bytes)(void); /* NULL when threads is 1 */
    int (*pool_start)(void *pool);
    void (*pool_stop)(void *pool);
    /* A step that keeps its memory in a context of its own (CUDA: the arena and the state on the
     * GPU), else NULL. The driver keeps a host copy of the state for checkpoints: state_read
     * fills it from the context (the initial values after open, the trained ones before each
     * checkpoint), state_write puts it there before the first step (after --resume). */
    int (*open)(void **ctx);          /* sets *ctx, also when it fails; 0 or a status */
    const char *(*error)(void *ctx);  /* why the last call failed (instead of status_string) */
    void (*close)(void *ctx);
    int (*state_read)(void *ctx, void *state);
    int (*state_write)(void *ctx, const void *state);
    /* A pipeline-parallel step (flowc compile --train --ranks N: mpi/fc_pipeline.h), else NULL: run is
     * unused, batch is one microbatch's samples, and the state holds every stage's variables. */
    const struct fc_pipe_model *pipeline;
} fc_train_model;

/* NAME train ...: argv[0] is "train", the options follow. The exit status of the program. */
int fc_train_main(const fc_train_model *model, int argc, char **argv);

/* The order of epoch `epoch` (from 0) with --seed seed: Fisher-Yates over 0..n-1 driven by
 * splitmix64, seeded by seed and epoch. */
void fc_train_order(long *perm, long n, uint64_t seed, long epoch);

#endif /* FLOWC_FC_TRAIN_H */
