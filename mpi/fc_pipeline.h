/* Pipeline-parallel training: one step of a training graph split into stages over MPI ranks,
 * its global batch run as microbatches (flowc compile --train --ranks N; codegen/pipeline_parallel.py
 * makes the stages' functions, codegen/backends/c/trainer.py the tables below).
 *
 * Rank s holds stage s: a forward, a backward and an update function (each a generated model).
 * A step on rank s: every receive of the step posted first (each value another stage sends here,
 * one slot per microbatch); then the stage's forwards and backwards on the K microbatches in the
 * schedule's order, each forward's or backward's values sent to the stages that read them as soon
 * as it returns, each received value waited for just before its first reader, each backward's
 * gradients summed; then the gradients scaled by 1 / K, the mean loss broadcast from the last
 * stage and the update run once on the stage's variables.
 *
 *   GPipe: F(0) .. F(K-1), then B(0) .. B(K-1): the activations of all K microbatches are kept.
 *   1F1B:  N - 1 - s forwards, then one forward and one backward in turn, then the last backwards:
 *          at most N - s microbatches' activations are kept on stage s.
 *
 * Both sum the gradients in microbatch order: their updates are bitwise equal. Messages between two
 * ranks of one value keep the microbatches' order (one tag per value; MPI does not overtake), so
 * every receive is posted before its send can block. A function that fails aborts the job (one
 * line naming the rank, the function and the status): its peers would otherwise wait. */
#ifndef FC_PIPELINE_H
#define FC_PIPELINE_H

#include <stddef.h>

#include "fc_mpi.h"

enum { FC_PIPE_BATCH, FC_PIPE_VAR, FC_PIPE_VALUE, FC_PIPE_GRAD, FC_PIPE_LOSS };
enum { FC_PIPE_1F1B, FC_PIPE_GPIPE };

/* One input or output of a function: BATCH index: the step's input (a microbatch's rows of it);
 * VAR: the byte offset of a variable in the stage's state; VALUE / GRAD: the table's entry;
 * LOSS: the microbatch's loss (the last forward's output), the step's mean loss (an update's). */
typedef struct {
    int kind;
    long index;
} fc_pipe_port;

typedef struct {
    const char *name; /* the model's C name, in messages */
    int (*run)(void *const *in, void *const *out, void *arena, void *state);
    const char *(*status_string)(int status);
    const fc_pipe_port *in, *out;
    int n_in, n_out;
    size_t arena_bytes;
} fc_pipe_fn;

typedef struct {
    const char *name;       /* the value's node, in messages (escaped) */
    size_t bytes;           /* one microbatch's */
    int stage, backward;    /* made by stage's forward (0) or backward (1) */
    unsigned long long readers, backward_readers; /* bit t: read on stage t (by its backward) */
} fc_pipe_value;

typedef struct {
    size_t bytes;
    int stage;
} fc_pipe_grad;

typedef struct fc_pipe_model {
    int stages;
    int shards;            /* > 0: data parallel over `shards` ranks (stages is 1), the optimizer's state
                            * sharded (ZeRO stage 1): every rank the forward and backward of its batch,
                            * each gradient summed on the rank that owns its update (grads[g].stage), each
                            * rank its update, then each updated variable broadcast from its owner */
    const fc_pipe_fn *fns; /* pipeline: stage s's forward, backward, update at 3s, 3s + 1, 3s + 2;
                            * sharded: the forward, the backward, then shard r's update at 2 + r */
    const fc_pipe_value *values;
    int n_values;
    const fc_pipe_grad *grads;
    int n_grads;
    const size_t *state_base; /* parts + 1 offsets (parts: stages, or shards): part p's variables in
                               * [base[p], base[p + 1]); a VAR port's index is its offset in the whole state */
    const size_t *replicas;   /* n_replicas x (parts + 1): a variable every part keeps, its bytes and its
                               * offset in each part's state (the checkpoint's is part 0's) */
    int n_replicas;
    const size_t *weights;    /* sharded: n_weights x 3: a variable the forward or backward reads, its offset,
                               * its bytes and the rank that updates it */
    int n_weights;
    int n_inputs;
    const size_t *row_bytes; /* one sample of each of the step's inputs */
    long batch;              /* the samples of one microbatch */
    int loss_stage;
    size_t align;
} fc_pipe_model;

typedef struct fc_pipe fc_pipe;

/* The ranks a model runs on: its stages, or its shards. */
#define FC_PIPE_RANKS(m) ((m)->shards > 0 ? (m)->shards : (m)->stages)

/* The pipeline of this rank (the communicator's size must be FC_PIPE_RANKS): K microbatches a step
 * in schedule's order (sharded: K microbatches of this rank's batch, their gradients summed). 0, or
 * 3 with msg (out of memory). */
int fc_pipe_open(fc_pipe **p, const fc_pipe_model *m, fc_mpi *mpi, long microbatches, int schedule, char *msg,
                 size_t len);
/* One step on batch[k], K x batch samples of input k (the same on every rank; sharded: this rank's):
 * updates this rank's stage in state (the whole model's variables, laid out by state_base) and sets
 * *loss, the mean of the microbatches' losses, on every rank (sharded: this rank's mean). */
void fc_pipe_step(fc_pipe *p, void *const *batch, float *loss, void *state);
/* The start (collective, before the first step): rank 0's state (initial, or read from a
 * checkpoint) to each stage's rank, each rank receiving its stage's variables only (with the
 * replicated ones, of which a checkpoint sets stage 0's copy), and the 8 bytes at global_step
 * (>= 0: stage 0's global step, which the driver reads on every rank). A rank touches no other
 * stage's memory: its state buffer's other pages are never made resident. */
void fc_pipe_scatter(const fc_pipe_model *m, fc_mpi *mpi, void *state, long global_step);
/* Write the initial variables of this rank's stage (rank 0: of every stage) with init, each
 * stage's update model's state_init; 0, or -1. */
int fc_pipe_state_init(const fc_pipe_model *m, int (*const *init)(void *state), void *state);
/* Every stage's variables to rank 0's state (collective: before rank 0 writes a checkpoint). */
void fc_pipe_gather(fc_pipe *p, void *state);
/* Seconds this rank spent waiting for values from other stages, and computing (since open). */
void fc_pipe_times(const fc_pipe *p, double *wait_s, double *compute_s);
void fc_pipe_close(fc_pipe *p);

#endif /* FC_PIPELINE_H */
