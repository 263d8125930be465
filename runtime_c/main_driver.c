/* The standalone binary's main: see main_driver.h. */
#define _POSIX_C_SOURCE 200809L
#include "main_driver.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timing.h"

#define MAX_MICROBATCHES 1000000L

int fc_main_error(const char *name, int rank, int code, const char *msg) {
    char prefix[128]; /* a model's name is at most 63 bytes */
    if (rank < 0)
        snprintf(prefix, sizeof prefix, "%s: error: ", name);
    else
        snprintf(prefix, sizeof prefix, "%s: rank %d: error: ", name, rank);
    fc_npy_error_line(prefix, msg);
    return code;
}

/* The driver's view of one tensor (driver.h): this process's when rank me owns it. */
static void view(fc_drv_tensor *d, const fc_main_tensor *t, int me) {
    d->name = t->name;
    d->dtype = t->dtype;
    d->rank = t->rank;
    d->shape = t->shape;
    d->file = t->file;
    d->mine = t->owner == me;
    d->bound = t->bound;
    d->length = t->length;
}

int fc_main_io_open(fc_main_io *io, const fc_main_model *m, int me) {
    size_t n_in = (size_t)m->n_in + 1, n_out = (size_t)m->n_out + 1;
    int j;
    memset(io, 0, sizeof *io);
    io->ins = (fc_drv_tensor *)calloc(n_in, sizeof *io->ins);
    io->outs = (fc_drv_tensor *)calloc(n_out, sizeof *io->outs);
    io->in_path = (const char **)calloc(n_in, sizeof *io->in_path);
    io->in = (fc_npy *)calloc(n_in, sizeof *io->in);
    io->out = (void **)calloc(n_out, sizeof *io->out);
    io->in_data = (const void **)calloc(n_in, sizeof *io->in_data);
    io->out_data = (void **)calloc(n_out, sizeof *io->out_data);
    io->put = (fc_file_set *)calloc(n_out, sizeof *io->put);
    io->out_path = (char **)calloc(n_out, sizeof *io->out_path);
    if (!io->ins || !io->outs || !io->in_path || !io->in || !io->out || !io->in_data || !io->out_data ||
        !io->put || !io->out_path)
        return -1;
    for (j = 0; j < m->n_in; ++j) view(&io->ins[j], &m->inputs[j], me);
    for (j = 0; j < m->n_out; ++j) view(&io->outs[j], &m->outputs[j], me);
    return 0;
}

void fc_main_io_close(fc_main_io *io, const fc_main_model *m) {
    int j;
    if (io->put) fc_files_finish(io->put, m->n_out);
    for (j = 0; j < m->n_out && io->out_path; ++j) free(io->out_path[j]);
    for (j = 0; j < m->n_in && io->in; ++j) fc_npy_free(&io->in[j]);
    for (j = 0; j < m->n_out && io->out; ++j) free(io->out[j]);
    free(io->ins);
    free(io->outs);
    free((void *)io->in_path);
    free(io->in);
    free(io->out);
    free((void *)io->in_data);
    free(io->out_data);
    free(io->put);
    free(io->out_path);
    memset(io, 0, sizeof *io);
}

int fc_main_parse(const fc_main_model *m, int argc, char **argv, int checkpoint, int ranks, fc_main_io *io,
                  fc_main_options *o, char *msg, size_t len) {
    int i, j, code = 0;
    o->out_dir = NULL;
    o->bench = 0;
    o->microbatches = 1;
    o->checkpoint = NULL;
    o->help = 0;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            o->help = 1;
            return 0;
        } else if (strcmp(argv[i], "--in") == 0 && i + 1 < argc) {
            if (fc_drv_in_arg(argv[++i], io->ins, m->n_in, io->in_path, msg, len) != 0) return 2;
        } else if (strcmp(argv[i], "--out-dir") == 0 && i + 1 < argc) {
            o->out_dir = argv[++i];
        } else if (checkpoint && strcmp(argv[i], "--checkpoint") == 0 && i + 1 < argc) {
            o->checkpoint = argv[++i];
        } else if (strcmp(argv[i], "--bench") == 0 && i + 1 < argc) {
            if (fc_drv_count_arg("--bench", argv[++i], FC_MAIN_MAX_BENCH, &o->bench, msg, len) != 0) return 2;
        } else if (ranks > 0 && strcmp(argv[i], "--microbatches") == 0 && i + 1 < argc) {
            if (fc_drv_count_arg("--microbatches", argv[++i], MAX_MICROBATCHES, &o->microbatches, msg, len) != 0)
                return 2;
        } else if (i + 1 < argc && fc_drv_scalar_arg(argv[i], argv[i + 1], io->ins, m->n_in, &code, msg, len)) {
            if (code != 0) return code;
            ++i;
        } else {
            if (ranks > 0)
                snprintf(msg, len, "unexpected argument '%s'; usage: mpiexec -n %d %s --in NAME=FILE.npy ... "
                         "--out-dir DIR [--microbatches K] [--bench N]", argv[i], ranks, m->name);
            else
                snprintf(msg, len, "unexpected argument '%s'; usage: %s --in NAME=FILE.npy ... --out-dir DIR "
                         "[--bench N]", argv[i], m->name);
            return 2;
        }
    }
    if (!o->out_dir) {
        snprintf(msg, len, "missing --out-dir DIR");
        return 2;
    }
    if (fc_drv_inputs_named(io->ins, m->n_in, io->in_path, msg, len) != 0) return 2;
    for (j = 0; j < m->n_in + m->n_out && o->microbatches > 1; ++j) { /* they split axis 0 */
        const fc_main_tensor *t = j < m->n_in ? &m->inputs[j] : &m->outputs[j - m->n_in];
        if (t->rank < 1) {
            snprintf(msg, len, "--microbatches splits axis 0, but %s '%s' is a scalar", j < m->n_in ? "input" : "output",
                     t->name);
            return 2;
        }
        if (t->shape[0] > 0 && o->microbatches > (long)(INT32_MAX / t->shape[0])) {
            snprintf(msg, len, "--microbatches %ld makes axis 0 of '%s' too long", o->microbatches, t->name);
            return 2;
        }
    }
    return 0;
}

static void put_escaped(const char *text) {
    const unsigned char *p;
    for (p = (const unsigned char *)text; *p; ++p) {
        if (*p >= 32 && *p < 127)
            putchar(*p);
        else
            printf("\\x%02x", *p);
    }
}

/* one tensor's line; of = the input whose length it is (NULL: none) */
static void put_tensor(const fc_main_tensor *t, const fc_main_tensor *of) {
    int d;
    printf("  ");
    put_escaped(t->name);
    printf(" %s[", t->dtype);
    for (d = 0; d < t->rank; ++d) printf(d ? ", %ld" : "%ld", t->shape[d]);
    printf("]");
    if (t->bound) printf(" (any length up to %ld on axis %d)", t->shape[t->bound - 1], t->bound - 1);
    if (of) {
        printf(" (set by the program: the length of ");
        put_escaped(of->name);
        printf("; leave it out)");
    }
    if (t->file) {
        printf(" -> DIR/");
        put_escaped(t->file);
    }
    printf("\n");
}

void fc_main_usage(const fc_main_model *m, int checkpoint, int ranks) {
    int j;
    if (ranks > 0)
        printf("usage: mpiexec -n %d %s --in NAME=FILE.npy ... --out-dir DIR [--microbatches K] [--bench N]\n", ranks,
               m->name);
    else
        printf("usage: %s --in NAME=FILE.npy ... --out-dir DIR [--bench N]%s\n", m->name,
               checkpoint ? " [--checkpoint FILE.npz]" : "");
    printf("inputs (--in NAME=FILE.npy, each a .npy of this dtype and shape; a scalar also as --NAME VALUE):\n");
    for (j = 0; j < m->n_in; ++j) {
        const fc_main_tensor *of = NULL;
        int i;
        for (i = 0; i < m->n_in; ++i)
            if (m->inputs[i].bound && m->inputs[i].length == j + 1) of = &m->inputs[i];
        put_tensor(&m->inputs[j], of);
    }
    printf("outputs (written to --out-dir, created if missing):\n");
    for (j = 0; j < m->n_out; ++j) put_tensor(&m->outputs[j], NULL);
    printf("--bench N: N more runs timed, their median printed (median_us=...)\n");
    if (checkpoint) printf("--checkpoint FILE.npz: the variables' values from a checkpoint\n");
    if (ranks > 0) printf("--microbatches K: K inputs stacked along axis 0, pipelined over the ranks\n");
    printf("exit codes: 0 done, 2 arguments and input files, 3 memory, threads or the run, 4 the output files, "
           "5 the CPU\n");
}

int fc_main_alloc_outputs(const fc_main_model *m, fc_main_io *io, long microbatches) {
    int j;
    for (j = 0; j < m->n_out; ++j) {
        size_t n = (size_t)m->outputs[j].nbytes * (size_t)microbatches;
        if (io->outs[j].mine && posix_memalign(&io->out[j], 64, n ? n : 64) != 0) return -1;
    }
    return 0;
}

/* --bench: n more runs, timed; the median, and each step's mean time from a profiling build. */
static int bench(const fc_main_binary *b, const fc_main_args *a, long n) {
    int (*again)(const fc_main_args *) = b->bench ? b->bench : b->model->run;
    double *times = (double *)malloc(sizeof(double) * (size_t)n);
    long r;
    int k;
    if (!times) return -1;
    for (r = 0; r < n; ++r) {
        double t0 = fc_now_us();
        (void)again(a); /* the first run's status was checked; these time the same run */
        times[r] = fc_now_us() - t0;
    }
    printf("median_us=%.3f\n", fc_median(times, n));
    free(times);
    for (k = 0; b->profile && k < *b->profile->count; ++k)
        printf("step %-28s %10.2f us\n", b->profile->steps[k], b->profile->us[k] / (double)(n + 1));
    return 0;
}

int fc_main(const fc_main_binary *b, int argc, char **argv) {
    const fc_main_model *m = b->model;
    fc_main_io io;
    fc_main_options o;
    fc_main_args a;
    void *arena = NULL, *state = NULL, *pool = NULL, *ctx = NULL;
    int j, status, pool_started = 0, code = 0;
    size_t made = (size_t)-1; /* of --out-dir: what fc_drv_make_out_dir created (none yet) */
    char msg[1024];

    if (b->train_main && argc > 1 && strcmp(argv[1], "train") == 0) return b->train_main(argc - 1, argv + 1);
    msg[0] = 0;
    memset(&o, 0, sizeof o);
    if (fc_main_io_open(&io, m, 0) != 0) {
        code = fc_main_error(m->name, -1, 3, "out of memory");
        goto done;
    }
    fc_file_cleanup_on_signals(); /* a signal in the middle of the writes leaves no temporary */
    if ((code = fc_main_parse(m, argc, argv, b->state_init || b->state_read, 0, &io, &o, msg, sizeof msg)) == 0 &&
        o.help) {
        fc_main_usage(m, b->state_init || b->state_read, 0);
        goto done;
    }
    if (code != 0 || (code = fc_drv_load_inputs(io.ins, m->n_in, io.in_path, 1, io.in, msg, sizeof msg)) != 0 ||
        (code = fc_drv_make_out_dir(o.out_dir, &made, msg, sizeof msg)) != 0) { /* (before any run or --bench) */
        fc_main_error(m->name, -1, code, msg);
        goto done;
    }
    if (fc_main_alloc_outputs(m, &io, 1) != 0) {
        code = fc_main_error(m->name, -1, 3, "out of memory");
        goto done;
    }
    if (b->open) {
        if (b->open(&ctx) != 0) {
            code = fc_main_error(m->name, -1, 3, b->error(ctx));
            goto done;
        }
    } else if (posix_memalign(&arena, m->align, b->arena_bytes ? b->arena_bytes : 64) != 0) {
        code = fc_main_error(m->name, -1, 3, "out of memory for the arena");
        goto done;
    }
    /* the state: the driver's (initial values, or the checkpoint's); a context's is its own, read
     * and written back around the checkpoint's values */
    if (b->state_init || (b->state_read && o.checkpoint)) {
        long step;
        if (posix_memalign(&state, m->align, b->state_bytes) != 0 ||
            (b->state_init ? b->state_init(state) : b->state_read(ctx, state)) != 0) {
            code = fc_main_error(m->name, -1, 3, b->state_init ? "cannot set up the state" : b->error(ctx));
            goto done;
        }
        if (o.checkpoint &&
            fc_ck_load(o.checkpoint, b->vars, b->n_vars, state, 0, &step, m->name, msg, sizeof msg) != 0) {
            code = fc_main_error(m->name, -1, 2, msg);
            goto done;
        }
        if (b->state_write && b->state_write(ctx, state) != 0) {
            code = fc_main_error(m->name, -1, 3, b->error(ctx));
            goto done;
        }
    }
    if (m->threads > 1) {
        if (posix_memalign(&pool, 64, m->pool_bytes()) != 0) {
            code = fc_main_error(m->name, -1, 3, "out of memory for the thread pool");
            goto done;
        }
        if (m->pool_start(pool) != 0) {
            snprintf(msg, sizeof msg, "cannot start %d threads", m->threads);
            code = fc_main_error(m->name, -1, 3, msg);
            goto done;
        }
        pool_started = 1;
    }
    for (j = 0; j < m->n_in; ++j) io.in_data[j] = io.in[j].data;
    a.in = io.in_data;
    a.out = io.out;
    a.arena = arena;
    a.state = state;
    a.pool = pool;
    a.ctx = ctx;
    status = m->run(&a);
    if (status != 0) {
        snprintf(msg, sizeof msg, "%s_run failed: %s", m->name, b->error ? b->error(ctx) : m->status_string(status));
        code = fc_main_error(m->name, -1, 3, msg);
        goto done;
    }
    if (o.bench > 0 && bench(b, &a, o.bench) != 0) {
        code = fc_main_error(m->name, -1, 3, "out of memory");
        goto done;
    }
    /* every output to a fresh temporary first; put in place only when all are written */
    if ((j = fc_drv_write_temps(o.out_dir, io.outs, m->n_out, io.out, 1, io.ins, m->n_in, io.in_path, io.put,
                                io.out_path, msg, sizeof msg)) != 0) {
        code = fc_main_error(m->name, -1, j, msg);
        goto done;
    }
    if (fc_files_commit(io.put, m->n_out, msg, sizeof msg) != 0) code = fc_main_error(m->name, -1, 4, msg);
done:
    fc_main_io_close(&io, m);
    if (code != 0 && o.out_dir) fc_drv_unmake_out_dir(o.out_dir, made); /* a failure leaves no folder */
    if (b->close) b->close(ctx);
    free(arena);
    free(state);
    if (pool_started) m->pool_stop(pool);
    free(pool);
    return code;
}
