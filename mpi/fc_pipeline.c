/* Pipeline-parallel training steps: fc_pipeline.h says what they do. */
#define _POSIX_C_SOURCE 200809L
#include "fc_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fc_pipe {
    const fc_pipe_model *m;
    fc_mpi *mpi;
    int rank, schedule;
    int stage;            /* this rank's stage (sharded: 0, every rank's) */
    const fc_pipe_fn *fwd, *bwd, *upd; /* this rank's functions */
    long K;
    void *arena;
    unsigned char **buf;  /* per value: its slots on this rank (NULL: none here) */
    long *slots;          /* per value: the slots of buf */
    MPI_Request *recv;    /* per value, per microbatch: the receive into its slot */
    MPI_Request *send;    /* per value, per microbatch, per stage: the send to it */
    unsigned char *waited; /* per value, per microbatch: its receive completed */
    float **acc, **part;  /* per gradient of this stage: the sum, and one microbatch's */
    float *losses;        /* per microbatch (the loss stage's) */
    float loss_out;       /* the update's output (its input, the mean loss) */
    void **in, **out;     /* a call's pointers */
    double wait_us, compute_us;
};

static int here(const fc_pipe *p, const fc_pipe_value *v) {
    return v->stage == p->stage || ((v->readers >> p->stage) & 1ULL);
}

static int sent(const fc_pipe *p, const fc_pipe_value *v) {
    return (v->readers & ~(1ULL << v->stage)) != 0ULL && p->m->stages > 1;
}

/* Wrapped MPI calls of the sharded mode (fc_mpi.h checks and names them). */
static void post_reduce(fc_pipe *p, float *buf, size_t bytes, int root, MPI_Request *req) {
    int err = MPI_Ireduce(p->rank == root ? MPI_IN_PLACE : buf, buf, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM,
                          root, p->mpi->comm, req);
    if (err != MPI_SUCCESS) fc_mpi_abort(p->mpi, "MPI_Ireduce of a gradient to the rank that updates it failed");
}

static void post_bcast(fc_pipe *p, void *buf, size_t bytes, int root, MPI_Request *req) {
    if (bytes > 2147483647UL) fc_mpi_abort(p->mpi, "a variable of more than INT_MAX bytes cannot be broadcast");
    if (MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, p->mpi->comm, req) != MPI_SUCCESS)
        fc_mpi_abort(p->mpi, "MPI_Ibcast of an updated variable failed");
}

static void *aligned(size_t align, size_t bytes) {
    void *ptr = NULL;
    if (posix_memalign(&ptr, align < sizeof(void *) ? sizeof(void *) : align, bytes ? bytes : 1) != 0) return NULL;
    return ptr;
}

int fc_pipe_open(fc_pipe **out, const fc_pipe_model *m, fc_mpi *mpi, long K, int schedule, char *msg, size_t len) {
    fc_pipe *p = (fc_pipe *)calloc(1, sizeof *p);
    size_t arena = 64, n_io = 1;
    int v, g, f;
    *out = p;
    if (!p) goto oom;
    p->m = m, p->mpi = mpi, p->rank = mpi->rank, p->K = K, p->schedule = schedule;
    p->stage = m->shards > 0 ? 0 : p->rank;
    p->fwd = m->shards > 0 ? &m->fns[0] : &m->fns[3 * p->rank];
    p->bwd = m->shards > 0 ? &m->fns[1] : &m->fns[3 * p->rank + 1];
    p->upd = m->shards > 0 ? &m->fns[2 + p->rank] : &m->fns[3 * p->rank + 2];
    for (f = 0; f < 3; ++f) {
        const fc_pipe_fn *fn = f == 0 ? p->fwd : f == 1 ? p->bwd : p->upd;
        if (fn->arena_bytes > arena) arena = fn->arena_bytes;
        if ((size_t)(fn->n_in + fn->n_out) > n_io) n_io = (size_t)(fn->n_in + fn->n_out);
    }
    p->arena = aligned(m->align, arena);
    p->in = (void **)calloc(n_io, sizeof(void *));
    p->out = (void **)calloc(n_io, sizeof(void *));
    p->buf = (unsigned char **)calloc((size_t)m->n_values + 1, sizeof *p->buf);
    p->slots = (long *)calloc((size_t)m->n_values + 1, sizeof *p->slots);
    p->recv = (MPI_Request *)malloc(((size_t)m->n_values * (size_t)K + (size_t)m->n_grads + (size_t)m->n_weights + 1) *
                                    sizeof(MPI_Request));
    p->send = (MPI_Request *)malloc(((size_t)m->n_values * (size_t)K * (size_t)m->stages + 1) * sizeof(MPI_Request));
    p->waited = (unsigned char *)calloc((size_t)m->n_values * (size_t)K + 1, 1);
    p->acc = (float **)calloc((size_t)m->n_grads + 1, sizeof(float *));
    p->part = (float **)calloc((size_t)m->n_grads + 1, sizeof(float *));
    p->losses = (float *)calloc((size_t)K, sizeof(float));
    if (!p->arena || !p->in || !p->out || !p->buf || !p->slots || !p->recv || !p->send || !p->waited || !p->acc ||
        !p->part || !p->losses)
        goto oom;
    for (v = 0; v < m->n_values; ++v) {
        const fc_pipe_value *val = &m->values[v];
        long i;
        if (!here(p, val)) continue;
        /* a value that travels, or that arrived: one slot per microbatch (its send or receive is in
         * flight until the step's end); one kept on its stage for the backward: as many slots as
         * microbatches in flight there */
        if (val->stage != p->stage || sent(p, val) || schedule == FC_PIPE_GPIPE)
            p->slots[v] = K;
        else
            p->slots[v] = K < m->stages - p->stage ? K : m->stages - p->stage;
        if (!(p->buf[v] = (unsigned char *)aligned(m->align, val->bytes * (size_t)p->slots[v]))) goto oom;
        for (i = 0; i < K; ++i) p->recv[(size_t)v * (size_t)K + (size_t)i] = MPI_REQUEST_NULL;
    }
    for (v = 0; v < m->n_values * (int)K * m->stages; ++v) p->send[v] = MPI_REQUEST_NULL;
    for (g = 0; g < m->n_grads; ++g) { /* this stage's gradients (sharded: all, for the sums) */
        if (m->shards == 0 && m->grads[g].stage != p->rank) continue;
        p->acc[g] = (float *)aligned(m->align, m->grads[g].bytes);
        p->part[g] = K > 1 ? (float *)aligned(m->align, m->grads[g].bytes) : NULL; /* the later microbatches' */
        if (!p->acc[g] || (K > 1 && !p->part[g])) goto oom;
    }
    return 0;
oom:
    snprintf(msg, len, "out of memory for the pipeline's buffers (%ld microbatches)", K);
    return 3;
}

void fc_pipe_close(fc_pipe *p) {
    int v, g;
    if (!p) return;
    for (v = 0; p->buf && v < p->m->n_values; ++v) free(p->buf[v]);
    for (g = 0; p->acc && g < p->m->n_grads; ++g) free(p->acc[g]), free(p->part[g]);
    free(p->buf), free(p->slots), free(p->recv), free(p->send), free(p->waited);
    free(p->acc), free(p->part), free(p->losses), free(p->in), free(p->out), free(p->arena);
    free(p);
}

static unsigned char *slot(const fc_pipe *p, int v, long mb) {
    return p->buf[v] + p->m->values[v].bytes * (size_t)(mb % p->slots[v]);
}

/* Wait for the values function `kind` (0 forward, 1 backward) of this stage reads on microbatch mb. */
static void arrive(fc_pipe *p, const fc_pipe_fn *fn, long mb) {
    int i;
    double t0 = fc_mpi_now_us();
    for (i = 0; i < fn->n_in; ++i) {
        int v = (int)fn->in[i].index;
        size_t at = (size_t)v * (size_t)p->K + (size_t)mb;
        if (fn->in[i].kind != FC_PIPE_VALUE || p->m->values[v].stage == p->stage || p->waited[at]) continue;
        fc_mpi_wait(p->mpi, &p->recv[at], p->m->values[v].name);
        p->waited[at] = 1;
    }
    p->wait_us += fc_mpi_now_us() - t0;
}

static void call(fc_pipe *p, const fc_pipe_fn *fn, long mb, void *const *batch, void *state, float *loss) {
    const fc_pipe_model *m = p->m;
    int i, status;
    double t0;
    for (i = 0; i < fn->n_in + fn->n_out; ++i) {
        const fc_pipe_port *port = i < fn->n_in ? &fn->in[i] : &fn->out[i - fn->n_in];
        int input = i < fn->n_in;
        void *ptr = NULL;
        switch (port->kind) {
        case FC_PIPE_BATCH:
            ptr = (unsigned char *)batch[port->index] + m->row_bytes[port->index] * (size_t)(m->batch * mb);
            break;
        case FC_PIPE_VAR:
            ptr = (unsigned char *)state + (size_t)port->index;
            break;
        case FC_PIPE_VALUE:
            ptr = slot(p, (int)port->index, mb);
            break;
        case FC_PIPE_GRAD: /* the backward's first microbatch writes the sum, the others a part */
            ptr = input || mb == 0 ? (void *)p->acc[port->index] : (void *)p->part[port->index];
            break;
        case FC_PIPE_LOSS: /* an update's: the mean in, its copy out (never the same buffer) */
            ptr = mb >= 0 ? (void *)&p->losses[mb] : input ? (void *)loss : (void *)&p->loss_out;
            break;
        }
        if (input)
            p->in[i] = ptr;
        else
            p->out[i - fn->n_in] = ptr;
    }
    t0 = fc_mpi_now_us();
    status = fn->run((void *const *)p->in, (void *const *)p->out, p->arena,
                     (unsigned char *)state + m->state_base[p->rank]); /* the update's part (F and B: unused) */
    p->compute_us += fc_mpi_now_us() - t0;
    if (status != 0) {
        char line[512];
        if (mb >= 0)
            snprintf(line, sizeof line, "%s_run failed on microbatch %ld: %s", fn->name, mb, fn->status_string(status));
        else
            snprintf(line, sizeof line, "%s_run failed: %s", fn->name, fn->status_string(status));
        fc_mpi_abort(p->mpi, line);
    }
}

/* After function fn (of kind: 0 forward, 1 backward) on microbatch mb: its values to their readers. */
static void depart(fc_pipe *p, const fc_pipe_fn *fn, long mb) {
    int i, t;
    for (i = 0; i < fn->n_out; ++i) {
        int v = (int)fn->out[i].index;
        const fc_pipe_value *val = &p->m->values[v];
        if (fn->out[i].kind != FC_PIPE_VALUE) continue;
        for (t = 0; t < p->m->stages; ++t) {
            size_t at = ((size_t)v * (size_t)p->K + (size_t)mb) * (size_t)p->m->stages + (size_t)t;
            if (t == p->stage || !((val->readers >> t) & 1ULL)) continue;
            fc_mpi_isend(p->mpi, slot(p, v, mb), (long)val->bytes, t, v, &p->send[at], val->name);
        }
    }
}

static void forward(fc_pipe *p, long mb, void *const *batch, void *state) {
    const fc_pipe_fn *fn = p->fwd;
    arrive(p, fn, mb);
    call(p, fn, mb, batch, state, NULL);
    depart(p, fn, mb);
}

static void backward(fc_pipe *p, long mb, void *const *batch, void *state) {
    const fc_pipe_model *m = p->m;
    const fc_pipe_fn *fn = p->bwd;
    int g;
    arrive(p, fn, mb);
    call(p, fn, mb, batch, state, NULL);
    depart(p, fn, mb);
    if (mb == 0) return;
    for (g = 0; g < m->n_grads; ++g) { /* the sum, in microbatch order */
        float *restrict acc = p->acc[g];
        const float *restrict part = p->part[g];
        size_t i, n = m->grads[g].bytes / sizeof(float);
        if (!acc) continue;
        for (i = 0; i < n; ++i) acc[i] += part[i];
    }
}

void fc_pipe_step(fc_pipe *p, void *const *batch, float *loss, void *state) {
    const fc_pipe_model *m = p->m;
    long K = p->K, mb, warm;
    int v, g;
    float mean = 0.0f;
    for (v = 0; v < m->n_values; ++v) { /* every receive of the step, in microbatch order */
        const fc_pipe_value *val = &m->values[v];
        if (val->stage == p->stage || !((val->readers >> p->stage) & 1ULL)) continue;
        for (mb = 0; mb < K; ++mb) {
            size_t at = (size_t)v * (size_t)K + (size_t)mb;
            p->waited[at] = 0;
            fc_mpi_irecv(p->mpi, slot(p, v, mb), (long)val->bytes, val->stage, v, &p->recv[at], val->name);
        }
    }
    if (p->schedule == FC_PIPE_GPIPE) {
        for (mb = 0; mb < K; ++mb) forward(p, mb, batch, state);
        for (mb = 0; mb < K; ++mb) backward(p, mb, batch, state);
    } else {
        warm = m->stages - 1 - p->stage < K ? m->stages - 1 - p->stage : K;
        for (mb = 0; mb < warm; ++mb) forward(p, mb, batch, state);
        for (mb = 0; mb < K; ++mb) {
            if (warm + mb < K) forward(p, warm + mb, batch, state);
            backward(p, mb, batch, state);
        }
    }
    {
        double t0 = fc_mpi_now_us();
        fc_mpi_waitall(p->mpi, m->n_values * (int)K * m->stages, p->send, "the pipeline's sends");
        p->wait_us += fc_mpi_now_us() - t0;
    }
    if (p->stage == m->loss_stage) {
        double sum = 0.0;
        for (mb = 0; mb < K; ++mb) sum += (double)p->losses[mb];
        mean = (float)(sum / (double)K);
    }
    if (m->shards > 0) { /* each gradient's sum over the ranks, on the rank that updates it */
        double t0 = fc_mpi_now_us();
        for (g = 0; g < m->n_grads; ++g) post_reduce(p, p->acc[g], m->grads[g].bytes, m->grads[g].stage, &p->recv[g]);
        fc_mpi_waitall(p->mpi, m->n_grads, p->recv, "the gradients' sums");
        p->wait_us += fc_mpi_now_us() - t0;
    } else {
        double t0 = fc_mpi_now_us();
        fc_mpi_bcast(p->mpi, &mean, (long)sizeof mean, m->loss_stage, "the loss");
        p->wait_us += fc_mpi_now_us() - t0;
    }
    for (g = 0; g < m->n_grads; ++g) { /* the mean gradient over the global batch */
        float *restrict acc = p->acc[g];
        float scale = 1.0f / (float)(K * (m->shards > 0 ? m->shards : 1));
        size_t i, n = m->grads[g].bytes / sizeof(float);
        if (m->grads[g].stage != p->rank || scale == 1.0f) continue;
        for (i = 0; i < n; ++i) acc[i] *= scale;
    }
    call(p, p->upd, -1, batch, state, &mean);
    if (m->shards > 0) { /* each updated variable from the rank that updated it */
        double t0 = fc_mpi_now_us();
        for (g = 0; g < m->n_weights; ++g) {
            const size_t *w = &m->weights[3 * (size_t)g];
            post_bcast(p, (unsigned char *)state + w[0], w[1], (int)w[2], &p->recv[g]);
        }
        fc_mpi_waitall(p->mpi, m->n_weights, p->recv, "the updated variables");
        p->wait_us += fc_mpi_now_us() - t0;
    }
    *loss = mean;
}

void fc_pipe_gather(fc_pipe *p, void *state) {
    const fc_pipe_model *m = p->m;
    unsigned char *base = (unsigned char *)state;
    int s;
    for (s = 1; s < FC_PIPE_RANKS(m); ++s) {
        MPI_Request req;
        long bytes = (long)(m->state_base[s + 1] - m->state_base[s]);
        if (p->rank == 0) {
            fc_mpi_irecv(p->mpi, base + m->state_base[s], bytes, s, 32000, &req, "a stage's variables");
            fc_mpi_wait(p->mpi, &req, "a stage's variables");
        } else if (p->rank == s) {
            fc_mpi_isend(p->mpi, base + m->state_base[s], bytes, 0, 32000, &req, "a stage's variables");
            fc_mpi_wait(p->mpi, &req, "a stage's variables");
        }
    }
}

void fc_pipe_times(const fc_pipe *p, double *wait_s, double *compute_s) {
    *wait_s = p->wait_us * 1e-6;
    *compute_s = p->compute_us * 1e-6;
}

int fc_pipe_state_init(const fc_pipe_model *m, int (*const *init)(void *state), void *state) {
    int s, rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (s = 0; s < FC_PIPE_RANKS(m); ++s)
        if ((rank == 0 || rank == s) && init[s]((unsigned char *)state + m->state_base[s]) != 0) return -1;
    return 0;
}

void fc_pipe_scatter(const fc_pipe_model *m, fc_mpi *mpi, void *state, long global_step) {
    unsigned char *base = (unsigned char *)state;
    int s, r, parts = FC_PIPE_RANKS(m);
    if (mpi->rank == 0) /* the replicated variables: part 0's copy is the one a checkpoint set */
        for (r = 0; r < m->n_replicas; ++r) {
            const size_t *rep = &m->replicas[(size_t)r * (size_t)(parts + 1)];
            for (s = 1; s < parts; ++s)
                memcpy(base + m->state_base[s] + rep[1 + s], base + m->state_base[0] + rep[1], rep[0]);
        }
    for (s = 1; s < parts; ++s) {
        MPI_Request req;
        long bytes = (long)(m->state_base[s + 1] - m->state_base[s]);
        if (mpi->rank == 0) {
            fc_mpi_isend(mpi, base + m->state_base[s], bytes, s, 32001, &req, "a stage's variables");
            fc_mpi_wait(mpi, &req, "a stage's variables");
        } else if (mpi->rank == s) {
            fc_mpi_irecv(mpi, base + m->state_base[s], bytes, 0, 32001, &req, "a stage's variables");
            fc_mpi_wait(mpi, &req, "a stage's variables");
        }
    }
    for (r = 0; r < m->n_weights; ++r) { /* sharded: every rank reads every variable */
        const size_t *w = &m->weights[3 * (size_t)r];
        fc_mpi_bcast(mpi, base + w[0], (long)w[1], 0, "a variable");
    }
    if (global_step >= 0) fc_mpi_bcast(mpi, base + global_step, 8, 0, "global_step");
}
