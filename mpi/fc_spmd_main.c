/* The SPMD program's main over MPI ranks: see fc_spmd_main.h. */
#define _POSIX_C_SOURCE 200809L
#include "fc_spmd_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_mpi.h"
#include "timing.h"

/* The same verdict on every rank: the largest code any rank reached (0: all went well). */
static int agree(fc_mpi *ctx, int code) {
    double v = code;
    fc_mpi_allreduce_max_f64(ctx, &v, 1, "the ranks' status");
    return (int)v;
}

/* The command lines' verdict, the same on every rank (an MPMD launch gives each rank its own):
 * when every rank failed alike rank 0 says why, else each failing rank says its own; ranks that
 * parsed but disagree on --microbatches, --bench or --help are refused by rank 0 (they would run
 * different numbers of steps, one waiting for the other forever). 0, or the exit status. */
static int agree_options(const fc_main_model *m, fc_mpi *ctx, int code, const fc_main_options *o, const char *msg) {
    static const char *what[] = {"--microbatches", "--bench", "--help"};
    double v[8];
    long mine[3];
    char line[160];
    int k;
    mine[0] = code ? 0 : o->microbatches, mine[1] = code ? 0 : o->bench, mine[2] = code ? 0 : o->help;
    v[0] = code, v[1] = -code;
    for (k = 0; k < 3; ++k) v[2 + 2 * k] = (double)mine[k], v[3 + 2 * k] = -(double)mine[k];
    fc_mpi_allreduce_max_f64(ctx, v, 8, "the ranks' command lines");
    if (v[0] > 0) { /* some rank cannot start */
        if (code && (ctx->rank == 0 || v[0] != -v[1])) fc_main_error(m->name, ctx->rank, code, msg);
        return (int)v[0];
    }
    for (k = 0; k < 3; ++k) {
        if (v[2 + 2 * k] != -v[3 + 2 * k]) {
            snprintf(line, sizeof line, "the ranks were given different %s (from %.0f to %.0f): give every rank the "
                     "same options", what[k], -v[3 + 2 * k], v[2 + 2 * k]);
            if (ctx->rank == 0) fc_main_error(m->name, 0, 2, line);
            return 2;
        }
    }
    return 0;
}

/* One step: the model on every microbatch in turn, each run on its slice of the tensors this rank
 * owns (NULL for the others); a failed run aborts the job. */
static void step(const fc_main_model *m, fc_main_io *io, const fc_main_args *a, long microbatches, fc_mpi *ctx) {
    char msg[1024];
    long mb;
    int j, status;
    for (mb = 0; mb < microbatches; ++mb) {
        for (j = 0; j < m->n_in; ++j)
            io->in_data[j] = io->in[j].data ? (const char *)io->in[j].data + (size_t)mb * (size_t)m->inputs[j].nbytes
                                            : NULL;
        for (j = 0; j < m->n_out; ++j)
            io->out_data[j] = io->out[j] ? (char *)io->out[j] + (size_t)mb * (size_t)m->outputs[j].nbytes : NULL;
        status = m->run(a);
        if (status != 0) {
            snprintf(msg, sizeof msg, "%s_run failed on microbatch %ld: %s", m->name, mb, m->status_string(status));
            fc_mpi_abort(ctx, msg);
        }
    }
}

/* --bench: n more steps, each from a common start (a barrier) to the slowest rank's end; rank 0
 * prints their median and each rank's mean compute, wait and communication time. */
static void bench(const fc_spmd_program *p, fc_main_io *io, const fc_main_args *a, long microbatches, long n,
                  fc_mpi *ctx) {
    double *times = (double *)malloc(sizeof(double) * (size_t)n);
    double *stats = (double *)calloc(3 * (size_t)p->ranks, sizeof(double));
    double wait = 0.0, comm = 0.0, local = 0.0;
    long r;
    int k, me = ctx->rank;
    if (!times || !stats) fc_mpi_abort(ctx, "out of memory for --bench");
    for (r = 0; r < n; ++r) {
        double t0, t, w0, c0;
        fc_mpi_barrier(ctx);
        w0 = ctx->wait_us, c0 = ctx->comm_us; /* the step's own, not the barrier's */
        t0 = fc_mpi_now_us();
        step(p->model, io, a, microbatches, ctx);
        t = fc_mpi_now_us() - t0;
        local += t, wait += ctx->wait_us - w0, comm += ctx->comm_us - c0;
        fc_mpi_allreduce_max_f64(ctx, &t, 1, "the step time");
        times[r] = t;
    }
    stats[3 * me + 1] = wait / (double)n;
    stats[3 * me + 2] = comm / (double)n;
    stats[3 * me] = local / (double)n - stats[3 * me + 1] - stats[3 * me + 2];
    if (stats[3 * me] < 0) stats[3 * me] = 0;
    fc_mpi_allreduce_max_f64(ctx, stats, 3 * p->ranks, "the ranks' times");
    if (me == 0) {
        printf("median_us=%.3f\n", fc_median(times, n));
        for (k = 0; k < p->ranks; ++k)
            printf("rank %d: compute_us=%.3f wait_us=%.3f comm_us=%.3f\n", k, stats[3 * k], stats[3 * k + 1],
                   stats[3 * k + 2]);
        fflush(stdout);
    }
    free(times);
    free(stats);
}

/* Write this rank's outputs, all or none over every rank: temporaries first, then put in place
 * (files.h: fc_files_commit); when any rank fails, every rank puts back the files it had. */
static int write_outputs(const fc_main_model *m, fc_mpi *ctx, fc_main_io *io, const fc_main_options *o, char *msg,
                         size_t len) {
    int code = fc_drv_write_temps(o->out_dir, io->outs, m->n_out, io->out, o->microbatches, io->ins, m->n_in,
                                  io->in_path, io->put, io->out_path, msg, len);
    if (code) fc_main_error(m->name, ctx->rank, code, msg);
    code = agree(ctx, code);
    if (!code && fc_files_commit(io->put, m->n_out, msg, len) != 0) code = fc_main_error(m->name, ctx->rank, 4, msg);
    if (agree(ctx, code)) { /* this rank or another failed: every rank puts back what it had */
        fc_files_rollback(io->put, m->n_out);
        if (!code) code = 4;
    }
    fc_files_finish(io->put, m->n_out);
    return code;
}

int fc_spmd_main(const fc_spmd_program *p, int argc, char **argv) {
    const fc_main_model *m = p->model;
    fc_main_io io;
    fc_main_options o;
    fc_main_args a;
    fc_mpi ctx;
    void *arena = NULL, *pool = NULL;
    char msg[1024];
    int provided, me, code, pool_started = 0;
    size_t arena_bytes;

    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "%s: error: MPI_Init_thread failed\n", m->name);
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (p->start(&ctx, NULL) != 0) { /* e.g. mpiexec -n other than the model's ranks: one line each */
        MPI_Finalize();
        return 1;
    }
    msg[0] = 0;
    if (fc_main_io_open(&io, m, me) != 0) fc_mpi_abort(&ctx, "out of memory");
    fc_file_cleanup_on_signals();
    code = fc_main_parse(m, argc, argv, 0, p->ranks, &io, &o, msg, sizeof msg);
    if ((code = agree_options(m, &ctx, code, &o, msg)) != 0) goto done;
    if (o.help) {
        if (me == 0) fc_main_usage(m, 0, p->ranks);
        goto done;
    }
    code = fc_drv_load_inputs(io.ins, m->n_in, io.in_path, o.microbatches, io.in, msg, sizeof msg);
    if (code) fc_main_error(m->name, me, code, msg);
    if (!code && fc_main_alloc_outputs(m, &io, o.microbatches) != 0)
        code = fc_main_error(m->name, me, 3, "out of memory for the outputs");
    arena_bytes = p->arena_bytes(me);
    if (!code && posix_memalign(&arena, m->align, arena_bytes ? arena_bytes : 64) != 0)
        code = fc_main_error(m->name, me, 3, "out of memory for the arena");
    if (!code) memset(arena, 0, arena_bytes ? arena_bytes : 64); /* a part on a GPU keeps its context there */
    if (m->threads > 1) {
        if (!code && (posix_memalign(&pool, 64, m->pool_bytes()) != 0 || m->pool_start(pool) != 0)) {
            snprintf(msg, sizeof msg, "cannot start %d threads", m->threads);
            code = fc_main_error(m->name, me, 3, msg);
        }
        pool_started = !code;
    }
    code = agree(&ctx, code); /* one rank that cannot start stops all */
    if (code) goto done;

    a.in = io.in_data;
    a.out = io.out_data;
    a.arena = arena;
    a.state = NULL;
    a.pool = pool;
    a.ctx = &ctx;
    step(m, &io, &a, o.microbatches, &ctx);
    if (o.bench > 0) bench(p, &io, &a, o.microbatches, o.bench, &ctx);
    code = write_outputs(m, &ctx, &io, &o, msg, sizeof msg);
done:
    fc_main_io_close(&io, m);
    free(arena);
    if (pool_started) m->pool_stop(pool);
    free(pool);
    p->stop(&ctx);
    MPI_Finalize();
    return code;
}
