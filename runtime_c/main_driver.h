/* The standalone binary's main, the same for every model: a generated main.c
 * (templates/build/main.c.j2) describes its model in an fc_main_binary and calls fc_main:
 *
 *     static const fc_main_model model = {.name = "net", .inputs = inputs, .run = run, ...};
 *     static const fc_main_binary binary = {.model = &model, .arena_bytes = NET_ARENA_BYTES, ...};
 *     int main(int argc, char **argv) { return fc_main(&binary, argc, argv); }
 *
 *   net --in NAME=FILE.npy [--in ...] --out-dir DIR [--bench N] [--checkpoint FILE.npz]
 *
 * fc_main reads every input from a .npy file (a regular file: files.h), checks its dtype and
 * shape, runs the model, and writes DIR/<output>.npy for each output: every output to a fresh
 * temporary file first (created with O_EXCL, never through an existing path or link), then all
 * put in place together (fc_files_commit): when one fails, every path keeps the file it had. An
 * output is never written over one of the input files. --bench N (at most FC_MAIN_MAX_BENCH) times
 * N more runs and prints "median_us=<float>" (and, with a profile, each step's mean time).
 * --checkpoint FILE.npz (a model with state): the variables from a checkpoint
 * (graphdef/checkpoint.py; a training checkpoint's optimizer slots are left out) instead of their
 * initial values. Errors: one line on stderr (bytes other than printable ASCII escaped as \xNN)
 * and the exit code: 2 arguments and input files, 3 memory, threads, a context or the run,
 * 4 the output files, 5 a CPU without an instruction set the build uses (cpu_check.h, x86-64).
 *
 * The SPMD program over MPI ranks has its own main, beside the MPI layer (mpi/fc_spmd_main.h); it
 * shares the model's description (fc_main_model) and the helpers at the end of this header. */
#ifndef FLOWC_MAIN_DRIVER_H
#define FLOWC_MAIN_DRIVER_H

#include <stddef.h>

#include "checkpoint.h"
#include "driver.h"

#define FC_MAIN_MAX_BENCH 100000000L /* the timing buffer, sizeof(double) * N bytes, fits 32 bits */

/* One input or output of the model (its tensor table: the model's <name>_inputs, _outputs). */
typedef struct {
    const char *name;  /* the tensor's name in the model (untrusted text: escaped when printed) */
    const char *dtype; /* float32, int64, ... */
    int rank;
    long shape[8];     /* of one run (one microbatch) */
    long nbytes;       /* of one run */
    const char *file;  /* an output's file in --out-dir ("y.npy"); NULL for an input */
    int owner;         /* the MPI rank that reads or writes it (0 in a one-process program) */
    int bound;         /* an input of run-time length: 1 + its axis (driver.h); 0: a fixed shape */
    int length;        /* 1 + the index of the input that gets its length; 0: none */
} fc_main_tensor;

/* What a run gets: the model's generated adapter passes these to its run function. */
typedef struct {
    const void *const *in; /* one per input: its data (NULL: another rank's) */
    void *const *out;      /* one per output */
    void *arena;
    void *state;
    void *pool;            /* the thread pool, or NULL */
    void *ctx;             /* the model's context (fc_main_binary.open), or the rank's MPI context */
} fc_main_args;

/* The model as both mains see it: its tensors, its run and its thread pool. */
typedef struct {
    const char *name; /* the model's name (a C identifier): prefixes every message */
    int n_in, n_out;
    const fc_main_tensor *inputs, *outputs;
    int (*run)(const fc_main_args *a);      /* <name>_run on a's buffers: 0, or a status */
    const char *(*status_string)(int status);
    size_t align;                           /* of the arena and the state */
    int threads;                            /* > 1: the run takes a pool of this many threads */
    size_t (*pool_bytes)(void);             /* NULL when threads is 1 */
    int (*pool_start)(void *pool);
    void (*pool_stop)(void *pool);
} fc_main_model;

/* The step times of a profiling build (-DFC_PROFILE: the model's <name>_profile_*). */
typedef struct {
    double *us;
    const char *const *steps;
    const int *count;
} fc_main_profile;

/* The standalone binary: the model and what only a one-process program has. */
typedef struct {
    const fc_main_model *model;
    size_t arena_bytes;               /* allocated by the driver unless the model opens a context */
    size_t state_bytes;
    int (*state_init)(void *state);   /* the variables' initial values; NULL: none, or a context's */
    const fc_ck_var *vars;            /* the state's variables, for --checkpoint */
    int n_vars;
    /* a model that keeps its memory in a context of its own (CUDA: on the GPU), else NULL */
    int (*open)(void **ctx);          /* sets *ctx, also when it fails; 0 or a status */
    const char *(*error)(void *ctx);  /* why the last call failed (instead of status_string) */
    void (*close)(void *ctx);
    int (*bench)(const fc_main_args *a); /* a run again on the same inputs (NULL: run) */
    /* a context's state (state_init NULL): read into host memory, and written back after
     * --checkpoint's values are loaded there */
    int (*state_read)(void *ctx, void *state);
    int (*state_write)(void *ctx, const void *state);
    int (*train_main)(int argc, char **argv); /* `<name> train ...`: the training driver, or NULL */
    const fc_main_profile *profile;   /* NULL unless built with -DFC_PROFILE */
} fc_main_binary;

/* The program: see the top of this header. Returns the exit code. */
int fc_main(const fc_main_binary *b, int argc, char **argv);

/* ---- shared with the SPMD program's main (mpi/fc_spmd_main.c) */

/* The buffers of one program run: the driver's views of the tensors, the inputs' paths and data,
 * the outputs, their files. */
typedef struct {
    fc_drv_tensor *ins, *outs; /* mine: owned by this process's rank */
    const char **in_path;
    fc_npy *in;
    void **out;
    const void **in_data;      /* a run's inputs and outputs (fc_main_args) */
    void **out_data;
    fc_file_set *put;
    char **out_path;
} fc_main_io;

/* The buffers for model m on rank me, zeroed. 0, or -1 when out of memory (then close them). */
int fc_main_io_open(fc_main_io *io, const fc_main_model *m, int me);
/* Remove the temporaries left, free what the buffers hold and the buffers. */
void fc_main_io_close(fc_main_io *io, const fc_main_model *m);

/* The options both programs take. */
typedef struct {
    const char *out_dir;
    long bench;        /* 0: no --bench */
    long microbatches; /* 1 unless the program takes --microbatches */
    const char *checkpoint;
    int help;          /* --help (-h): print the usage (fc_main_usage) and exit 0 */
} fc_main_options;

/* Parse the arguments into o and io->in_path: --in, --out-dir and --bench; --checkpoint when
 * checkpoint is set; --microbatches in an SPMD program of ranks > 0 ranks (0: one process), whose
 * usage line names mpiexec; --help. 0, or 2 with the reason in msg. */
int fc_main_parse(const fc_main_model *m, int argc, char **argv, int checkpoint, int ranks, fc_main_io *io,
                  fc_main_options *o, char *msg, size_t len);

/* The usage on stdout: the command line, each input and output with its dtype and shape (names
 * escaped as in the error lines), the options and the exit codes. */
void fc_main_usage(const fc_main_model *m, int checkpoint, int ranks);

/* Allocate this rank's outputs, microbatches runs each: 0, or -1. */
int fc_main_alloc_outputs(const fc_main_model *m, fc_main_io *io, long microbatches);

/* One line on stderr: "<name>: error: <msg>" (rank < 0) or "<name>: rank R: error: <msg>". Returns
 * code. */
int fc_main_error(const char *name, int rank, int code, const char *msg);

#endif /* FLOWC_MAIN_DRIVER_H */
