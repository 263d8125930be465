/* The training binary's driver: fc_train.h says what it does. Every stage returns 0 or the exit
 * status after its one line on stderr; fc_train_main runs them in order and frees what they
 * took. The parts that need MPI are under FC_MPI. */
#define _POSIX_C_SOURCE 200809L
#include "fc_train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "driver.h"
#include "npz.h"
#include "timing.h"
#ifdef FC_MPI
#include <mpi.h>

#include "fc_mpi.h"
#include "fc_pipeline.h"
#include <pthread.h>
#include <time.h>
#endif

#define MAX_FILES 64
#define MSG 1200

/* One input's dataset array. */
typedef struct {
    const unsigned char *base; /* the array's samples (memory-mapped) */
    const char *file;          /* the --data file it came from */
} column;

typedef struct {
    const fc_train_model *m;
    /* the command line */
    const char *files[MAX_FILES], *names[MAX_FILES]; /* names[k]: NULL for an .npz, else the .npy's input */
    int nfiles;
    const char *checkpoint, *resume;
    long epochs, global_batch, seed, every, timeout, accumulate;
    long microbatches; /* a pipeline's (0: none given) */
    int schedule;      /* a pipeline's: FC_PIPE_1F1B or FC_PIPE_GPIPE */
    int hierarchical;  /* --allreduce hierarchical */
    long node_ranks;   /* --node-ranks N (0: the ranks that share memory) */
    long progress_us;  /* --progress US: a thread drives MPI every US microseconds (0: none) */
    void *pipe;        /* this rank's pipeline (fc_pipe), or NULL */
    int whole_batch;   /* a pipeline's stages: every rank reads the whole global batch */
    float *acc_apply, *acc_scale; /* the step's accumulation controls in the state (--accumulate) */
    int resume_auto; /* --resume auto: --checkpoint's file when it exists */
    /* the dataset, the steps and the buffers */
    fc_npz sets[MAX_FILES];
    column *cols; /* one per input */
    void **batch; /* one per input: this rank's slice of the global batch */
    long n, steps_per_epoch, total, first, ck_step;
    long *perm;
    void *arena, *state, *pool;
    void *ctx; /* the step's context (fc_train_model.open), or NULL */
    int pool_started, ctx_open;
    /* the ranks: this one prints (rank 0, or the only one) */
    int size, rank, rank0;
    void *mpi; /* the step's communication context, or NULL */
    char prefix[128]; /* "NAME train: error: " */
    char msg[MSG];
} trainer;

static volatile sig_atomic_t interrupted = 0; /* the signal that asks to stop, or 0 */
static volatile unsigned grace = 0; /* seconds the step under way may take once a stop is asked:
                                      * 10 + 3 x the longest step so far */
/* the lines the handlers write (composed before the first step: a handler only writes and exits) */
static char stuck_line[512], timeout_line[512];

static void say(const char *line) {
    size_t n = strlen(line);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, line, n);
        if (w <= 0) break;
        line += w, n -= (size_t)w;
    }
}

/* A stop signal: the step under way finishes and the checkpoint is written. If the step does not
 * finish within `grace` seconds (a peer stopped or is stuck in MPI), or a second signal comes, the
 * process exits at once (128 + the signal), its line saying that no checkpoint was written. */
static void on_stop(int sig) {
    if (interrupted) {
        say(stuck_line);
        _exit(128 + interrupted);
    }
    interrupted = sig;
    if (grace) alarm(grace);
}

/* SIGALRM: the step under way outlived --timeout, or the grace after a stop signal. */
static void on_alarm(int sig) {
    (void)sig;
    if (interrupted) {
        say(stuck_line);
        _exit(128 + interrupted);
    }
    say(timeout_line);
    _exit(6);
}

static const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

/* splitmix64: the generator of the shuffle */
static uint64_t next_random(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void fc_train_order(long *perm, long n, uint64_t seed, long epoch) {
    uint64_t s = seed ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ULL);
    long i;
    for (i = 0; i < n; ++i) perm[i] = i;
    for (i = n - 1; i > 0; --i) {
        long j = (long)(next_random(&s) % (uint64_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

/* An error every rank finds alike (the command line, the dataset's shapes): rank 0 says it. */
static int die(const trainer *t, int code, const char *msg) {
    if (t->rank0) fc_npy_error_line(t->prefix, msg);
    return code;
}

/* An error that may be this rank's alone (a file on its node): every rank says its own, naming
 * itself when there are several. */
static int die_here(const trainer *t, int code, const char *msg) {
    char prefix[160];
    if (t->size > 1)
        snprintf(prefix, sizeof prefix, "%s train: rank %d: error: ", t->m->name, t->rank);
    else
        snprintf(prefix, sizeof prefix, "%s", t->prefix);
    fc_npy_error_line(prefix, msg);
    return code;
}

static int parse_long(const char *text, long lo, long *out) {
    char *end;
    errno = 0;
    *out = strtol(text, &end, 10);
    return end != text && !*end && errno != ERANGE && *out >= lo;
}

#define USAGE "usage: %s train --data FILE.npz [--epochs E] [--batch B] [--seed S] [--checkpoint FILE.npz [--every N]] " \
              "[--resume FILE.npz|auto] [--timeout S] [--accumulate K] [--allreduce flat|hierarchical [--node-ranks N]] " \
              "[--progress US] [--microbatches K --schedule 1f1b|gpipe]"

/* --data FILE.npz, or --data NAME=FILE.npy naming one of the step's inputs */
static int data_arg(trainer *t, const char *spec) {
    const char *eq = strchr(spec, '=');
    int k;
    if (t->nfiles == MAX_FILES) return die(t, 2, "too many --data files");
    t->files[t->nfiles] = spec;
    t->names[t->nfiles] = NULL;
    if (eq && (strlen(spec) < 4 || strcmp(spec + strlen(spec) - 4, ".npz") != 0)) {
        for (k = 0; k < t->m->num_inputs; ++k) {
            const char *name = t->m->inputs[k].name;
            if (strlen(name) == (size_t)(eq - spec) && strncmp(name, spec, (size_t)(eq - spec)) == 0)
                t->names[t->nfiles] = name;
        }
        if (!t->names[t->nfiles]) {
            snprintf(t->msg, sizeof t->msg, "--data %s: the step has no input '%.*s' (its inputs: %s)", spec,
                     (int)(eq - spec), spec, t->m->input_names);
            return die(t, 2, t->msg);
        }
        t->files[t->nfiles] = eq + 1;
    }
    ++t->nfiles;
    return 0;
}

static int parse_args(trainer *t, int argc, char **argv) {
    int i, code;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            snprintf(t->msg, sizeof t->msg, "'%s' expects a value, or is not an option; " USAGE, a, t->m->name);
            return die(t, 2, t->msg);
        }
        if (strcmp(a, "--data") == 0) {
            if ((code = data_arg(t, argv[++i])) != 0) return code;
        } else if (strcmp(a, "--epochs") == 0) {
            if (!parse_long(argv[++i], 1, &t->epochs)) return die(t, 2, "--epochs expects a positive count");
        } else if (strcmp(a, "--batch") == 0) {
            if (!parse_long(argv[++i], 1, &t->global_batch)) return die(t, 2, "--batch expects a positive count");
        } else if (strcmp(a, "--seed") == 0) {
            if (!parse_long(argv[++i], 0, &t->seed)) return die(t, 2, "--seed expects a count of at least 0");
        } else if (strcmp(a, "--every") == 0) {
            if (!parse_long(argv[++i], 1, &t->every)) return die(t, 2, "--every expects a positive count of steps");
        } else if (strcmp(a, "--checkpoint") == 0) {
            t->checkpoint = argv[++i];
        } else if (strcmp(a, "--resume") == 0) {
            t->resume = argv[++i];
            t->resume_auto = strcmp(t->resume, "auto") == 0;
        } else if (strcmp(a, "--accumulate") == 0) {
            if (!parse_long(argv[++i], 1, &t->accumulate) || t->accumulate > 1000000L)
                return die(t, 2, "--accumulate expects a positive count of batches a step");
        } else if (strcmp(a, "--microbatches") == 0 || strcmp(a, "--schedule") == 0) {
            if (!t->m->pipeline) {
                snprintf(t->msg, sizeof t->msg, "%s: this binary's step is not pipeline parallel (compile it with --train "
                         "--ranks N)", a);
                return die(t, 2, t->msg);
            }
            if (a[2] == 'm' && (!parse_long(argv[++i], 1, &t->microbatches) || t->microbatches > 65536L))
                return die(t, 2, "--microbatches expects a count from 1 to 65536");
            if (a[2] == 's') {
                const char *v = argv[++i];
                if (strcmp(v, "1f1b") != 0 && strcmp(v, "gpipe") != 0)
                    return die(t, 2, "--schedule expects 1f1b or gpipe");
                t->schedule = strcmp(v, "gpipe") == 0;
            }
        } else if (strcmp(a, "--allreduce") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "flat") != 0 && strcmp(v, "hierarchical") != 0)
                return die(t, 2, "--allreduce expects flat or hierarchical");
            t->hierarchical = strcmp(v, "hierarchical") == 0;
        } else if (strcmp(a, "--progress") == 0) {
            if (!parse_long(argv[++i], 0, &t->progress_us) || t->progress_us > 1000000L)
                return die(t, 2, "--progress expects microseconds between a progress thread's polls (0: none)");
        } else if (strcmp(a, "--node-ranks") == 0) {
            if (!parse_long(argv[++i], 1, &t->node_ranks) || t->node_ranks > 1000000L)
                return die(t, 2, "--node-ranks expects a positive count of ranks a node");
        } else if (strcmp(a, "--timeout") == 0) {
            if (!parse_long(argv[++i], 1, &t->timeout) || t->timeout > 86400L * 365)
                return die(t, 2, "--timeout expects a positive count of seconds");
        } else {
            snprintf(t->msg, sizeof t->msg, "unexpected argument '%s'; " USAGE, a, t->m->name);
            return die(t, 2, t->msg);
        }
    }
    if (!t->nfiles) {
        snprintf(t->msg, sizeof t->msg, "missing --data FILE.npz (or --data NAME=FILE.npy for each of: %s)",
                 t->m->input_names);
        return die(t, 2, t->msg);
    }
    if (t->every && !t->checkpoint) return die(t, 2, "--every N writes checkpoints: give --checkpoint FILE.npz");
    if (t->node_ranks && !t->hierarchical) return die(t, 2, "--node-ranks N groups the ranks of --allreduce hierarchical");
    if (t->hierarchical && t->m->pipeline) return die(t, 2, "--allreduce: a pipeline-parallel step has no allreduce");
    if (t->m->pipeline && t->accumulate > 1)
        return die(t, 2, "--accumulate: a pipeline-parallel step accumulates its microbatches: give --microbatches K");
#ifdef FC_MPI
    if (t->m->pipeline && !t->microbatches) t->microbatches = t->m->pipeline->shards ? 1 : 4L * t->m->pipeline->stages;
    t->whole_batch = t->m->pipeline && !t->m->pipeline->shards;
#endif
    if (t->m->pipeline) t->accumulate = t->microbatches; /* the samples of a step: K microbatches */
    if (t->resume_auto && !t->checkpoint)
        return die(t, 2, "--resume auto resumes from --checkpoint's file when it exists: give --checkpoint FILE.npz");
    return 0;
}

/* The dataset: every input's array, memory-mapped, checked against the step's input; class
 * labels out of range found here, not as a failed step. */
static int open_dataset(trainer *t) {
    const fc_train_model *m = t->m;
    int j, k, i;
    for (j = 0; j < t->nfiles; ++j) {
        int failed = t->names[j] ? fc_npz_open_npy(t->files[j], t->names[j], &t->sets[j], t->msg, sizeof t->msg)
                                 : fc_npz_open(t->files[j], &t->sets[j], t->msg, sizeof t->msg);
        if (failed) return die_here(t, 2, t->msg);
    }
    for (k = 0; k < m->num_inputs; ++k) {
        const fc_train_input *d = &m->inputs[k];
        const fc_npz_member *a = NULL;
        const char *file = NULL;
        int same;
        for (j = t->nfiles - 1; j >= 0 && !a; --j)
            if ((a = fc_npz_find(&t->sets[j], d->name)) != NULL) file = t->files[j];
        if (!a) {
            snprintf(t->msg, sizeof t->msg, "the dataset has no array '%s' (the step's inputs: %s)", d->name,
                     m->input_names);
            return die(t, 2, t->msg);
        }
        same = strcmp(a->array.dtype, d->dtype) == 0 && a->array.rank == d->rank;
        for (i = 1; same && i < d->rank; ++i) same = a->array.shape[i] == d->shape[i];
        if (!same) {
            char got[256], want[256];
            fc_npy_describe(got, sizeof got, a->array.dtype, a->array.rank, a->array.shape, NULL);
            fc_npy_describe(want, sizeof want, d->dtype, d->rank, d->shape, "N");
            snprintf(t->msg, sizeof t->msg, "dataset array '%s' (%s) is %s; the step's input '%s' takes %s (N samples)",
                     d->name, file, got, d->name, want);
            return die(t, 2, t->msg);
        }
        if (t->n >= 0 && a->array.shape[0] != t->n) {
            snprintf(t->msg, sizeof t->msg, "dataset array '%s' (%s) has %ld samples; '%s' has %ld", d->name, file,
                     a->array.shape[0], m->inputs[0].name, t->n);
            return die(t, 2, t->msg);
        }
        t->n = a->array.shape[0];
        t->cols[k].base = (const unsigned char *)a->array.data;
        t->cols[k].file = file;
    }
    for (k = 0; k < m->num_inputs; ++k) {
        const fc_train_input *d = &m->inputs[k];
        size_t item = fc_npy_itemsize(d->dtype);
        long row_size = item ? (long)(d->row_bytes / item) : 0;
        if (d->labels && fc_drv_check_labels(t->cols[k].base, d->dtype, t->n, row_size, d->labels, d->name,
                                             t->cols[k].file, t->msg, sizeof t->msg) != 0)
            return die_here(t, 2, t->msg);
    }
    return 0;
}

/* The global batch, the steps of an epoch and of the whole run, and the checkpoint's path. */
static int plan(trainer *t) {
    long batch = t->m->batch * t->accumulate;
    int j, ranks = t->whole_batch ? 1 : t->size; /* a pipeline's ranks share each batch */
    if (t->whole_batch && t->global_batch && t->global_batch != batch) {
        snprintf(t->msg, sizeof t->msg, "--batch %ld: a step is %ld microbatches of %ld samples (the binary's), %ld in "
                 "all (give --microbatches %ld for %ld samples a step)", t->global_batch, t->microbatches, t->m->batch,
                 batch, t->global_batch / t->m->batch, t->global_batch / t->m->batch * t->m->batch);
        return die(t, 2, t->msg);
    }
    if (t->global_batch && t->global_batch != batch * ranks) {
        snprintf(t->msg, sizeof t->msg, "--batch %ld: the step takes %ld samples on each of %d rank(s)%s, a global "
                 "batch of %ld (compile the step for a batch of %ld / ranks, or --accumulate)", t->global_batch,
                 t->m->batch, t->size, t->accumulate > 1 ? " times --accumulate" : "", batch * t->size,
                 t->global_batch);
        return die(t, 2, t->msg);
    }
    t->global_batch = batch * ranks;
    t->steps_per_epoch = t->n / t->global_batch;
    if (t->steps_per_epoch < 1) {
        snprintf(t->msg, sizeof t->msg, "the dataset has %ld samples, fewer than one global batch (%ld)", t->n,
                 t->global_batch);
        return die(t, 2, t->msg);
    }
    if (t->epochs > LONG_MAX / t->steps_per_epoch) {
        snprintf(t->msg, sizeof t->msg, "--epochs %ld: %ld epochs of %ld steps are more steps than this binary counts "
                 "(%ld)", t->epochs, t->epochs, t->steps_per_epoch, LONG_MAX);
        return die(t, 2, t->msg);
    }
    t->total = t->steps_per_epoch * t->epochs;
    if (t->checkpoint && t->rank0) { /* before the first step, not after the last: only rank 0 writes it */
        for (j = 0; j < t->nfiles; ++j) {
            if (fc_file_same(t->checkpoint, t->files[j])) {
                snprintf(t->msg, sizeof t->msg, "--checkpoint %s names the dataset file %s: it would be written over",
                         t->checkpoint, t->files[j]);
                return die_here(t, 2, t->msg);
            }
        }
        if (fc_file_check_writable(t->checkpoint, t->msg, sizeof t->msg) != 0) {
            char why[MSG];
            snprintf(why, sizeof why, "--checkpoint: %.1100s", t->msg);
            return die_here(t, 2, why);
        }
        fc_file_sweep(t->checkpoint); /* what a killed run (SIGKILL) left half-written */
    }
    return 0;
}

/* The state's global_step: where a resumed run starts. */
static long global_step(const trainer *t) {
    return (long)*(const int64_t *)((const unsigned char *)t->state + t->m->global_step);
}

/* The shuffle, the arena, the state (initial, or from --resume) and the batches. */
static int set_up(trainer *t) {
    const fc_train_model *m = t->m;
    int k;
    t->perm = (long *)malloc(sizeof(long) * (size_t)t->n);
    if (!t->perm || posix_memalign(&t->arena, m->align, m->arena_bytes ? m->arena_bytes : 64) != 0 ||
        posix_memalign(&t->state, m->align, m->state_bytes) != 0)
        return die(t, 3, "out of memory");
    for (k = 0; k < m->num_inputs; ++k)
        if (posix_memalign(&t->batch[k], 64, m->inputs[k].row_bytes * (size_t)m->batch * (m->pipeline ? (size_t)t->accumulate : 1) + 64) != 0)
            return die(t, 3, "out of memory");
    if (m->open) { /* the initial values are the context's */
        t->ctx_open = 1;
        if (m->open(&t->ctx) != 0) return die(t, 3, m->error(t->ctx));
        if (m->state_read(t->ctx, t->state) != 0) return die(t, 3, m->error(t->ctx));
    } else if (m->state_init(t->state) != 0)
        return die(t, 3, "cannot set up the state");
    if (t->resume_auto) { /* rank 0 decides: its file, or none (the others take rank 0's state) */
        struct stat st;
        t->resume = t->rank0 && stat(t->checkpoint, &st) == 0 ? t->checkpoint : NULL;
        if (t->rank0) {
            printf("--resume auto: %s %s\n", t->resume ? "resuming from" : "no checkpoint yet at", t->checkpoint);
            fflush(stdout);
        }
    }
    if (t->resume && t->rank0) { /* rank 0 reads it; the others get its state (fc_train_main) */
        if (fc_ck_load(t->resume, m->vars, m->num_vars, t->state, 1, &t->ck_step, m->name, t->msg, sizeof t->msg) != 0)
            return die_here(t, 2, t->msg);
        if (m->global_step >= 0 && (t->first = global_step(t)) < 0) { /* the step indexes the shuffle: never trust it */
            snprintf(t->msg, sizeof t->msg, "--resume %s: its global_step is %ld; a step count is at least 0", t->resume,
                     t->first);
            return die_here(t, 2, t->msg);
        }
    }
    return 0;
}

static int save(trainer *t, long step) {
#ifdef FC_MPI
    if (t->pipe) fc_pipe_gather((fc_pipe *)t->pipe, t->state); /* every stage's variables on rank 0 */
#endif
    if (t->m->state_read && t->m->state_read(t->ctx, t->state) != 0) {
        snprintf(t->msg, sizeof t->msg, "cannot read the variables for the checkpoint: %s", t->m->error(t->ctx));
        return die(t, 3, t->msg);
    }
    if (t->rank0 && fc_ck_save(t->checkpoint, t->m->vars, t->m->num_vars, t->state, t->m->name, t->m->hash, step,
                               t->msg, sizeof t->msg) != 0) {
        int code = die(t, 4, t->msg);
#ifdef FC_MPI
        if (t->size > 1) fc_mpi_abort((fc_mpi *)t->mpi, "cannot write the checkpoint");
#endif
        return code;
    }
    t->ck_step = step;
    return 0;
}

/* The step's accumulation controls (data_parallel.accumulate: the state variables
 * fc_accumulate/apply and /scale), needed for --accumulate K above 1; 0, or the exit status. */
static int find_accumulation(trainer *t) {
    int v;
    for (v = 0; v < t->m->num_vars; ++v) {
        float *at = (float *)((unsigned char *)t->state + t->m->vars[v].offset);
        if (strcmp(t->m->vars[v].name, "fc_accumulate/apply") == 0) t->acc_apply = at;
        if (strcmp(t->m->vars[v].name, "fc_accumulate/scale") == 0) t->acc_scale = at;
    }
    if (!t->acc_apply || !t->acc_scale || t->m->open) t->acc_apply = t->acc_scale = NULL;
    if (t->accumulate > 1 && !t->acc_apply && !t->m->pipeline)
        return die(t, 2, "--accumulate: this binary's step applies every batch (compile it with --train --accumulate)");
    return 0;
}

/* The lines the handlers write, and SIGALRM's handler: the watchdog of --timeout (armed around the
 * start's collectives and each step) and the grace after a stop signal. */
static void watch(trainer *t) {
    struct sigaction sa;
    char who[160];
    if (t->size > 1)
        snprintf(who, sizeof who, "%s train: rank %d: error: ", t->m->name, t->rank);
    else
        snprintf(who, sizeof who, "%s", t->prefix);
    snprintf(stuck_line, sizeof stuck_line, "%sasked to stop, but the step under way did not end (a rank stopped or "
             "is stuck in MPI): exiting without writing a checkpoint\n", who);
    snprintf(timeout_line, sizeof timeout_line, "%sno progress for --timeout %ld s (a rank failed, stopped or is "
             "stuck in MPI): stopping the job\n", who, t->timeout);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
}

/* The steps from t->first to t->total; 0, or the exit status. */
static int train(trainer *t) {
    const fc_train_model *m = t->m;
    double t_start, t_last = 0.0, t_epoch, t_step, loss_sum = 0.0;
    long epoch_steps = 0, step;
    int k, tty, code;
    struct sigaction sa;

    grace = 10;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    tty = t->rank0 && isatty(STDOUT_FILENO);

    t_start = t_epoch = fc_now_us();
    for (step = t->first; step < t->total; ++step) {
        long epoch = step / t->steps_per_epoch, at = step % t->steps_per_epoch, micro;
        float loss = 0.0f;
        int status, stop;
        if (step == t->first || at == 0) fc_train_order(t->perm, t->n, (uint64_t)t->seed, epoch);
        t_step = fc_now_us();
        if (t->timeout && !interrupted) alarm((unsigned)t->timeout);
#ifdef FC_MPI
        if (t->pipe) { /* the whole global batch on every rank (sharded: this rank's K microbatches) */
            long rows = t->whole_batch ? t->global_batch : m->batch * t->accumulate;
            for (k = 0; k < m->num_inputs; ++k) {
                const long *idx = t->perm + at * t->global_batch + (t->whole_batch ? 0 : t->rank * rows);
                size_t row = m->inputs[k].row_bytes;
                unsigned char *dst = (unsigned char *)t->batch[k];
                long s;
                for (s = 0; s < rows; ++s)
                    memcpy(dst + (size_t)s * row, t->cols[k].base + (size_t)idx[s] * row, row);
            }
            fc_pipe_step((fc_pipe *)t->pipe, t->batch, &loss, t->state);
        }
#endif
        for (micro = 0; micro < t->accumulate && !t->pipe; ++micro) { /* one call, or K accumulating ones */
            float part = 0.0f;
            for (k = 0; k < m->num_inputs; ++k) { /* this rank's slice of the global batch */
                const long *idx = t->perm + at * t->global_batch + (micro * t->size + t->rank) * m->batch;
                size_t row = m->inputs[k].row_bytes;
                unsigned char *dst = (unsigned char *)t->batch[k];
                long s;
                for (s = 0; s < m->batch; ++s)
                    memcpy(dst + (size_t)s * row, t->cols[k].base + (size_t)idx[s] * row, row);
            }
            if (t->acc_apply) { /* the K-th call applies the update with the mean of the K gradients */
                *t->acc_apply = micro + 1 == t->accumulate ? 1.0f : 0.0f;
                *t->acc_scale = 1.0f / (float)t->accumulate;
            }
            status = m->run(t->batch, &part, t->arena, t->state, t->pool, t->mpi, t->ctx);
            if (status != 0) {
                snprintf(t->msg, sizeof t->msg, "step %ld: %s_run failed: %s", step, m->step,
                         m->error ? m->error(t->ctx) : m->status_string(status));
                return die(t, 3, t->msg);
            }
            loss += part / (float)t->accumulate;
        }
        stop = interrupted;
#ifdef FC_MPI
        if (t->size > 1) { /* the mean loss, and whether any rank was interrupted */
            float sums[3];
            sums[0] = loss;
            sums[1] = stop ? 1.0f : 0.0f; /* the ranks told to stop, and their signals' sum */
            sums[2] = (float)stop;
            fc_mpi_allreduce_sum_f32((fc_mpi *)t->mpi, sums, 3, "the loss");
            loss = sums[0] / (float)t->size;
            if (!stop && sums[1] > 0.0f) /* another rank was told to stop: by its signal (or the mean of theirs) */
                stop = (int)(sums[2] / sums[1] + 0.5f);
        }
#endif
        alarm(0); /* the step ended on every rank: no watchdog, no grace, while the checkpoint is written */
        t_step = (fc_now_us() - t_step) * 1e-6;
        if (10.0 + 3.0 * t_step > (double)grace) grace = (unsigned)(10.0 + 3.0 * t_step) + 1;
        if (!isfinite(loss)) {
            if (t->checkpoint && t->ck_step >= 0)
                snprintf(t->msg, sizeof t->msg, "the loss is %f at step %ld (epoch %ld): stopped; the last checkpoint, "
                         "%s (step %ld), is kept", (double)loss, step + 1, epoch + 1, t->checkpoint, t->ck_step);
            else
                snprintf(t->msg, sizeof t->msg, "the loss is %f at step %ld (epoch %ld): stopped%s", (double)loss,
                         step + 1, epoch + 1, t->checkpoint ? "; no checkpoint was written" : "");
            if (tty) printf("\n");
            return die(t, 5, t->msg);
        }
        loss_sum += loss;
        ++epoch_steps;
        if (tty && (fc_now_us() - t_last > 200000.0 || at + 1 == t->steps_per_epoch)) {
            double sec = (fc_now_us() - t_epoch) * 1e-6;
            t_last = fc_now_us();
            printf("\repoch %ld/%ld  step %ld/%ld  loss %.4f  %.0f samples/s   ", epoch + 1, t->epochs, step + 1,
                   t->total, (double)loss, sec > 0 ? (double)(epoch_steps * t->global_batch) / sec : 0.0);
            fflush(stdout);
        }
        if (at + 1 == t->steps_per_epoch) {
            double sec = (fc_now_us() - t_epoch) * 1e-6;
            if (t->rank0) {
                printf("%sepoch %ld/%ld: step %ld, mean loss %.6f, %.0f samples/s\n", tty ? "\r" : "", epoch + 1,
                       t->epochs, step + 1, loss_sum / (double)epoch_steps,
                       sec > 0 ? (double)(epoch_steps * t->global_batch) / sec : 0.0);
                fflush(stdout);
            }
            loss_sum = 0.0;
            epoch_steps = 0;
            t_epoch = fc_now_us();
        }
        if (t->checkpoint && (stop || step + 1 == t->total || (t->every && (step + 1) % t->every == 0)) &&
            (code = save(t, step + 1)) != 0)
            return code;
        if (stop) {
            if (t->rank0) {
                printf("%sinterrupted by %s at step %ld%s%s\n", tty ? "\n" : "", signal_name(stop), step + 1,
                       t->checkpoint ? ": wrote " : " (no --checkpoint)", t->checkpoint ? t->checkpoint : "");
                fflush(stdout);
            }
            return 128 + stop;
        }
    }
    {
        double sec = (fc_now_us() - t_start) * 1e-6;
#ifdef FC_MPI
        /* where the time went: waiting for the allreduces, posting them and the other MPI calls, the
         * rest computing (each the largest over the ranks) */
        double times[3] = {0.0, 0.0, 0.0}, stages[2 * 64];
        int s;
        if (t->size > 1) {
            times[0] = ((fc_mpi *)t->mpi)->wait_us * 1e-6;
            times[1] = ((fc_mpi *)t->mpi)->comm_us * 1e-6;
            times[2] = sec;
            fc_mpi_allreduce_max_f64((fc_mpi *)t->mpi, times, 3, "the ranks' times");
        }
        if (t->pipe) { /* each stage's computing and waiting for its peers (a stage's own slot of the max) */
            int n = t->size < 64 ? t->size : 64;
            for (s = 0; s < 2 * n; ++s) stages[s] = 0.0;
            if (t->rank < 64) fc_pipe_times((const fc_pipe *)t->pipe, &stages[2 * t->rank + 1], &stages[2 * t->rank]);
            fc_mpi_allreduce_max_f64((fc_mpi *)t->mpi, stages, 2 * n, "the stages' times");
            if (t->rank0 && m->pipeline->shards)
                printf("optimizer state sharded over %d ranks, %ld microbatch(es) of %ld a rank: per rank, seconds "
                       "computing / waiting for the sums and broadcasts:", t->size, t->microbatches, m->batch);
            else if (t->rank0)
                printf("pipeline of %d stages, %ld microbatches of %ld (%s): per stage, seconds computing / waiting for "
                       "peers:", t->size, t->microbatches, m->batch, t->schedule ? "GPipe" : "1F1B");
            if (t->rank0) {
                for (s = 0; s < n; ++s) printf(" %.3f / %.3f", stages[2 * s], stages[2 * s + 1]);
                printf("\n");
            }
        }
#endif
        if (t->rank0) {
            printf("trained %ld step(s) of %ld samples in %.3f s: %.1f samples/s on %d rank(s)%s%s\n",
                   t->total - t->first, t->global_batch, sec,
                   sec > 0 ? (double)((t->total - t->first) * t->global_batch) / sec : 0.0, t->size,
                   t->checkpoint ? "; checkpoint " : "", t->checkpoint ? t->checkpoint : "");
#ifdef FC_MPI
            if (t->size > 1 && times[2] > 0 && !t->pipe)
                printf("time on the slowest rank: %.3f s waiting for allreduces (%.1f%%), %.3f s in other MPI calls "
                       "(%.1f%%), the rest computing\n", times[0], 100.0 * times[0] / times[2], times[1],
                       100.0 * times[1] / times[2]);
#endif
        }
    }
    return 0;
}

/* From the step the state is at to the last: the thread pool, then the steps. */
static int run_steps(trainer *t) {
    const fc_train_model *m = t->m;
    if (m->global_step >= 0)
        t->first = global_step(t);
    else
        t->first = t->ck_step < 0 ? 0 : t->ck_step; /* -1 unless resumed (rank 0's, on every rank) */
    if (t->first >= t->total) {
        if (t->rank0)
            printf("nothing to train: the state is at step %ld; %ld epoch(s) of %ld steps end at step %ld\n", t->first,
                   t->epochs, t->steps_per_epoch, t->total);
        return 0;
    }
    if (m->pool_bytes) {
        if (posix_memalign(&t->pool, 64, m->pool_bytes()) != 0 || m->pool_start(t->pool) != 0) {
            snprintf(t->msg, sizeof t->msg, "cannot start %d threads", m->threads);
            return die(t, 3, t->msg);
        }
        t->pool_started = 1;
    }
    if (m->state_write && m->state_write(t->ctx, t->state) != 0) return die(t, 3, m->error(t->ctx));
#ifdef FC_MPI
    if (m->pipeline && fc_pipe_open((fc_pipe **)&t->pipe, m->pipeline, (fc_mpi *)t->mpi, t->microbatches, t->schedule,
                                    t->msg, sizeof t->msg) != 0)
        return die_here(t, 3, t->msg);
#endif
    return train(t);
}

#ifdef FC_MPI
/* What every rank must agree on before the first step (an MPMD launch gives each rank its own
 * command line, a node its own dataset file): else the ranks would run different step counts and
 * one would wait forever in the step's allreduce. Rank 0 names the first difference; 2, or 0. */
static int agree_plan(trainer *t, fc_mpi *ctx) {
    static const char *what[] = {"the dataset's samples (--data)", "--epochs", "--seed", "--every",
                                 "--checkpoint (given or not)", "--resume (given or not)", "--timeout",
                                 "the step's batch (the binary)", "the step's state (the binary)",
                                 "--accumulate (or --microbatches)", "--schedule", "--allreduce", "--node-ranks"};
    enum { N = sizeof what / sizeof what[0] };
    double v[2 * N];
    long mine[N];
    int k;
    mine[0] = t->n, mine[1] = t->epochs, mine[2] = t->seed, mine[3] = t->every;
    mine[4] = t->checkpoint != NULL, mine[5] = t->resume != NULL || t->resume_auto, mine[6] = t->timeout;
    mine[7] = t->m->batch, mine[8] = (long)t->m->state_bytes, mine[9] = t->accumulate, mine[10] = t->schedule;
    mine[11] = t->hierarchical, mine[12] = t->node_ranks;
    for (k = 0; k < N; ++k) v[2 * k] = (double)mine[k], v[2 * k + 1] = -(double)mine[k];
    fc_mpi_allreduce_max_f64(ctx, v, 2 * N, "the ranks' options");
    for (k = 0; k < N; ++k) {
        if (v[2 * k] != -v[2 * k + 1]) {
            snprintf(t->msg, sizeof t->msg, "the ranks disagree on %s: from %.0f to %.0f (every rank must be given the "
                     "same options, and a dataset of the same size)", what[k], -v[2 * k + 1], v[2 * k]);
            return die(t, 2, t->msg);
        }
    }
    return 0;
}
#endif

/* What the stages took (each pointer NULL or its own). */
static void release(trainer *t) {
    int j, k;
    for (j = 0; j < t->nfiles; ++j) fc_npz_close(&t->sets[j]);
    for (k = 0; t->batch && k < t->m->num_inputs; ++k) free(t->batch[k]);
    free(t->batch);
    free(t->cols);
    free(t->perm);
    free(t->arena);
    free(t->state);
    if (t->pool_started) t->m->pool_stop(t->pool);
    free(t->pool);
    if (t->ctx_open) t->m->close(t->ctx);
#ifdef FC_MPI
    fc_pipe_close((fc_pipe *)t->pipe);
#endif
}

#ifdef FC_MPI
/* --progress US: a thread that enters MPI every US microseconds (a probe on a communicator of its
 * own), so that a posted allreduce goes on while the step computes (MPICH and Open MPI progress
 * a nonblocking collective only inside MPI calls). It takes a core's share: for ranks with a spare
 * core (or hyperthread). */
static volatile sig_atomic_t progress_stop = 0;

static void *progress_loop(void *arg) {
    const trainer *t = (const trainer *)arg;
    MPI_Comm comm = ((fc_mpi *)t->mpi)->comm;
    struct timespec pause;
    int flag;
    pause.tv_sec = t->progress_us / 1000000L;
    pause.tv_nsec = (t->progress_us % 1000000L) * 1000L;
    while (!progress_stop) {
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* Whether argv asks for --progress above 0 (read before MPI_Init_thread). */
static int wants_progress(int argc, char **argv) {
    int i;
    for (i = 1; i + 1 < argc; ++i)
        if (strcmp(argv[i], "--progress") == 0 && atol(argv[i + 1]) > 0) return 1;
    return 0;
}
#endif

int fc_train_main(const fc_train_model *m, int argc, char **argv) {
    trainer t;
    int code;
#ifdef FC_MPI
    fc_mpi ctx;
#endif
    memset(&t, 0, sizeof t);
    t.m = m;
    t.epochs = 1;
    t.accumulate = 1;
    t.n = -1;
    t.steps_per_epoch = 1;
    t.ck_step = -1;
    t.size = 1;
    t.rank0 = 1;
    snprintf(t.prefix, sizeof t.prefix, "%s train: error: ", m->name);
#ifdef FC_MPI
    int threaded = wants_progress(argc, argv), provided = MPI_THREAD_SINGLE, progress_started = 0;
    pthread_t progress_thread;
    if ((threaded ? MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) : MPI_Init(&argc, &argv)) != MPI_SUCCESS)
        return die(&t, 3, "MPI_Init failed");
    if (fc_mpi_init(&ctx, NULL, m->pipeline ? FC_PIPE_RANKS(m->pipeline) : 0, m->name) != 0) {
        MPI_Finalize();
        return 3;
    }
    t.mpi = &ctx;
    t.size = ctx.size;
    t.rank = ctx.rank;
    t.rank0 = t.rank == 0;
#else
    if (getenv("PMI_SIZE") && atoi(getenv("PMI_SIZE")) > 1) /* MPICH's mpiexec */
        return die(&t, 2, "this binary was built without MPI: it trains on one process (rebuild where mpicc is found)");
    if (getenv("OMPI_COMM_WORLD_SIZE") && atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1) /* Open MPI's */
        return die(&t, 2, "this binary was built without MPI: it trains on one process (rebuild where mpicc is found)");
#endif
    t.cols = (column *)calloc((size_t)m->num_inputs, sizeof *t.cols);
    t.batch = (void **)calloc((size_t)m->num_inputs, sizeof *t.batch);
    if (!t.cols || !t.batch)
        code = die(&t, 3, "out of memory");
    else if ((code = parse_args(&t, argc, argv)) == 0 && (code = open_dataset(&t)) == 0 && (code = plan(&t)) == 0 &&
             (code = set_up(&t)) == 0)
        code = find_accumulation(&t);
    watch(&t);
#ifdef FC_MPI
    if (t.timeout) alarm((unsigned)t.timeout); /* (--timeout when the command line was read) */
    if (t.size > 1) { /* one verdict for all: a rank that cannot start stops every rank, none waits */
        double v = code;
        fc_mpi_allreduce_max_f64(&ctx, &v, 1, "the start-up status");
        if (!code && v > 0) code = (int)v;
    }
    if (!code && t.size > 1) code = agree_plan(&t, &ctx);
    if (!code && t.hierarchical) { /* the nodes: one rank each in the allreduces between them */
        int nodes = fc_mpi_hierarchy(&ctx, (int)t.node_ranks);
        if (t.rank0) {
            printf("--allreduce hierarchical: %d node(s) of %d rank(s)%s\n", nodes, t.size,
                   ctx.node == MPI_COMM_NULL ? " (one node, or a rank a node: the reductions stay flat)" : "");
            fflush(stdout);
        }
    }
    /* one start for all: rank 0's variables (and slots, and step), and its checkpoint's step */
    if (!code && m->pipeline) /* a pipeline: each rank its stage's variables only */
        fc_pipe_scatter(m->pipeline, &ctx, t.state, m->global_step);
    else if (!code)
        fc_mpi_bcast(&ctx, t.state, (long)m->state_bytes, 0, "the variables");
    if (!code) fc_mpi_bcast(&ctx, &t.ck_step, (long)sizeof t.ck_step, 0, "the checkpoint's step");
    alarm(0);
#endif
#ifdef FC_MPI
    if (!code && t.progress_us > 0) {
        if (provided < MPI_THREAD_MULTIPLE) {
            snprintf(t.msg, sizeof t.msg, "--progress: this MPI does not run MPI calls from two threads at once "
                     "(MPI_THREAD_MULTIPLE)");
            code = die_here(&t, 2, t.msg);
        } else if (pthread_create(&progress_thread, NULL, progress_loop, &t) != 0) {
            code = die_here(&t, 3, "--progress: cannot start the progress thread");
        } else {
            progress_started = 1;
        }
    }
#endif
    if (!code) code = run_steps(&t);
#ifdef FC_MPI
    if (progress_started) {
        progress_stop = 1;
        pthread_join(progress_thread, NULL);
    }
#endif
    release(&t);
#ifdef FC_MPI
    fc_mpi_free(&ctx);
    MPI_Finalize();
#endif
    return code;
}
