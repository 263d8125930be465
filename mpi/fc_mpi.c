/* flowc's MPI communication layer (see fc_mpi.h). */
#include "fc_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names from model files are printed quoted: printable ASCII as is, any other byte (and the quote
 * and the backslash) as \xNN, at most NAME_MAX_BYTES bytes of them, then "...". */
#define NAME_MAX_BYTES 64
/* The longest message line: the fixed text, three quoted names and MPI_Error_string's text. */
#define LINE_LEN (1024 + MPI_MAX_ERROR_STRING)

typedef struct {
    char s[LINE_LEN];
    size_t n;
} line_t;

/* Fixed text (never a name from a model file). */
static void put(line_t *l, const char *text) {
    while (*text && l->n + 1 < LINE_LEN) l->s[l->n++] = *text++;
    l->s[l->n] = 0;
}

static void put_long(line_t *l, long v) {
    char num[32];
    snprintf(num, sizeof num, "%ld", v);
    put(l, num);
}

/* An untrusted name, escaped and bounded (see NAME_MAX_BYTES). */
static void put_name(line_t *l, const char *name) {
    size_t i;
    if (!name) name = "?";
    for (i = 0; name[i] && i < NAME_MAX_BYTES; ++i) {
        unsigned char c = (unsigned char)name[i];
        if (c >= 32 && c < 127 && c != '\\' && c != '\'') {
            char one[2];
            one[0] = (char)c;
            one[1] = 0;
            put(l, one);
        } else {
            char hex[8];
            snprintf(hex, sizeof hex, "\\x%02x", c);
            put(l, hex);
        }
    }
    if (name[i]) put(l, "...");
}

/* Text on one line: newlines, tabs and runs of spaces become one space, other control bytes \xNN. */
static void put_flat(line_t *l, const char *text) {
    int space = 0;
    for (; *text; ++text) {
        unsigned char c = (unsigned char)*text;
        if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
            space = 1;
            continue;
        }
        if (space && l->n > 0 && l->s[l->n - 1] != ' ') put(l, " ");
        space = 0;
        if (c < 32 || c == 127) {
            char hex[8];
            snprintf(hex, sizeof hex, "\\x%02x", c);
            put(l, hex);
        } else {
            char one[2];
            one[0] = (char)c;
            one[1] = 0;
            put(l, one);
        }
    }
}

/* MPI_Error_string's text on one line. MPICH's text is an error stack over several lines,
 *     Invalid rank, error stack:
 *     internal_Isend(131): MPI_Isend(buf=0x7ffc..., count=4, MPI_BYTE, 3, 9, comm=0x84000002, ...) failed
 *     internal_Isend(78).: Invalid rank has value 3 but must be nonnegative and less than 3
 * of which the class (first line) and the cause (the last frame's text) say what went wrong: those
 * two are printed ("Invalid rank has value 3 ..." alone when the cause repeats the class). Any other
 * text (Open MPI: "MPI_ERR_RANK: invalid rank") is printed whole. */
static void put_error(line_t *l, int err) {
    static const char STACK[] = ", error stack:";
    char text[MPI_MAX_ERROR_STRING + 1];
    char *stack, *cause, *end;
    int len = 0;
    if (MPI_Error_string(err, text, &len) != MPI_SUCCESS || len <= 0) {
        put(l, "MPI error code ");
        put_long(l, err);
        return;
    }
    if (len > MPI_MAX_ERROR_STRING) len = MPI_MAX_ERROR_STRING;
    text[len] = 0;
    stack = strstr(text, STACK);
    if (stack) {
        end = text + strlen(text);
        while (end > stack && (end[-1] == '\n' || end[-1] == ' ')) *--end = 0;
        cause = strrchr(stack, '\n');
        cause = cause ? strstr(cause, ": ") : NULL;
        if (cause && cause[2]) {
            *stack = 0; /* text: the class */
            cause += 2;
            if (strncmp(cause, text, (size_t)(stack - text)) != 0) {
                put_flat(l, text);
                put(l, ": ");
            }
            put_flat(l, cause);
            return;
        }
    }
    put_flat(l, text);
}

/* "<model>: rank <r>: " */
static void put_prefix(line_t *l, const char *model, int rank) {
    l->n = 0;
    l->s[0] = 0;
    put_name(l, model ? model : "flowc");
    put(l, ": rank ");
    put_long(l, rank);
    put(l, ": ");
}

/* The rank in MPI_COMM_WORLD, for messages from before the communicator is known. */
static int world_rank(void) {
    int flag = 0, finalized = 1, rank = -1;
    if (MPI_Initialized(&flag) == MPI_SUCCESS && flag && MPI_Finalized(&finalized) == MPI_SUCCESS &&
        !finalized && MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS)
        rank = -1;
    return rank;
}

/* Print the line, then abort the job through comm (MPI_COMM_WORLD when comm is null). */
static void die(line_t *l, MPI_Comm comm) {
    fprintf(stderr, "%s\n", l->s);
    fflush(stderr);
    MPI_Abort(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, 1);
    /* MPI_Abort does not return on any implementation we know; in case one does, make sure. */
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* "<op>[ of tensor '<name>'][ to|from rank <peer>]" */
static void put_op(line_t *l, const char *op, const char *kind, const char *name, const char *dir, int peer) {
    put(l, op);
    if (name) {
        put(l, kind ? kind : " of '");
        put_name(l, name);
        put(l, "'");
    }
    if (dir) {
        put(l, dir);
        put_long(l, peer);
    }
}

#define OF_TENSOR " of tensor '"
#define OF_WHAT " of '"

/* One line for an MPI call that returned err, then abort. */
static void fail(const fc_mpi *m, int err, const char *op, const char *kind, const char *name, const char *dir,
                 int peer) {
    line_t l;
    put_prefix(&l, m->model, m->rank);
    put_op(&l, op, kind, name, dir, peer);
    put(&l, " failed: ");
    put_error(&l, err);
    die(&l, m->comm);
}

/* A count that does not fit an MPI count (an int), or is negative: one line, then abort. */
static void check_count(const fc_mpi *m, long count, const char *unit, const char *op, const char *kind,
                        const char *name, const char *dir, int peer) {
    line_t l;
    if (count >= 0 && count <= INT_MAX) return;
    put_prefix(&l, m->model, m->rank);
    put_op(&l, op, kind, name, dir, peer);
    put(&l, ": ");
    put_long(&l, count);
    put(&l, unit);
    if (count < 0) {
        put(&l, " is negative");
    } else {
        put(&l, ", more than one MPI message holds (INT_MAX = ");
        put_long(&l, INT_MAX);
        put(&l, unit);
        put(&l, ")");
    }
    die(&l, m->comm);
}

double fc_mpi_now_us(void) { return MPI_Wtime() * 1e6; }

void fc_mpi_abort(fc_mpi *m, const char *message) {
    line_t l;
    size_t i;
    put_prefix(&l, m ? m->model : "flowc", m ? m->rank : world_rank());
    /* The message may quote names: escape control bytes so that it stays one line. */
    for (i = 0; message && message[i]; ++i) {
        unsigned char c = (unsigned char)message[i];
        char one[8];
        if (c < 32 || c == 127)
            snprintf(one, sizeof one, "\\x%02x", c);
        else
            one[0] = (char)c, one[1] = 0;
        put(&l, one);
    }
    die(&l, m ? m->comm : MPI_COMM_NULL);
}

/* A launcher's count of the job's processes, from its environment variable: Hydra (MPICH's mpiexec),
 * Intel MPI and srun --mpi=pmi2 set PMI_SIZE; Open MPI's mpiexec OMPI_COMM_WORLD_SIZE; MVAPICH's
 * mpirun_rsh MV2_COMM_WORLD_SIZE; srun SLURM_STEP_NUM_TASKS in a job step (not the batch script's:
 * its step ids are the special values at the top of the 32-bit range). */
static const struct {
    const char *size, *rank, *who;
} LAUNCHERS[] = {
    {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "Open MPI's mpiexec"},
    {"PMI_SIZE", "PMI_RANK", "a PMI launcher (MPICH's mpiexec, Intel MPI, srun --mpi=pmi2)"},
    {"MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MVAPICH's launcher"},
    {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "srun"},
};

static long env_long(const char *name) {
    const char *text = getenv(name);
    char *end;
    long v;
    if (!text || !*text) return -1;
    v = strtol(text, &end, 10);
    return *end ? -1 : v;
}

/* The launcher that started more processes than MPI sees in this one (a binary built against one
 * MPI started by another's mpiexec: each process a world of its own), or -1. Only a world of one
 * is judged: a larger world is a launch that worked, whatever the outer variables say. */
static int foreign_launcher(int world_size, long *count) {
    size_t i;
    if (world_size != 1) return -1;
    for (i = 0; i < sizeof LAUNCHERS / sizeof LAUNCHERS[0]; ++i) {
        *count = env_long(LAUNCHERS[i].size);
        if (LAUNCHERS[i].rank[0] == 'S') { /* a Slurm job step, not the batch script or the extern step */
            long step = env_long("SLURM_STEP_ID");
            if (step < 0 || step >= 4294967290L) continue;
        }
        if (*count > 1) return (int)i;
    }
    return -1;
}

/* "MPICH Version: 4.1.2" or "Open MPI v5.0.3": the first line of MPI_Get_library_version, up to a comma. */
static void put_library(line_t *l) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING + 1], *cut;
    int len = 0;
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS || len <= 0) {
        put(l, "unknown");
        return;
    }
    if (len > MPI_MAX_LIBRARY_VERSION_STRING) len = MPI_MAX_LIBRARY_VERSION_STRING;
    text[len] = 0;
    if ((cut = strchr(text, '\n')) != NULL) *cut = 0;
    if ((cut = strchr(text, ',')) != NULL) *cut = 0;
    if (strlen(text) > 60) text[60] = 0;
    put_flat(l, text);
}

int fc_mpi_init(fc_mpi *m, const void *comm_handle, int expected_size, const char *model) {
    MPI_Comm parent = comm_handle ? *(const MPI_Comm *)comm_handle : MPI_COMM_WORLD;
    MPI_Errhandler old;
    int flag = 0, finalized = 0, err, err2;
    line_t l;
    m->comm = MPI_COMM_NULL;
    m->rank = 0;
    m->size = 0;
    m->model = model ? model : "flowc";
    m->wait_us = 0.0;
    m->comm_us = 0.0;
    m->node = m->leaders = MPI_COMM_NULL;
    m->nodes = 1;
    m->n_pending = 0;
    if (MPI_Initialized(&flag) != MPI_SUCCESS || !flag || MPI_Finalized(&finalized) != MPI_SUCCESS ||
        finalized) {
        l.n = 0;
        put_name(&l, m->model);
        put(&l, finalized ? ": MPI is already finalized" : ": MPI is not initialized");
        put(&l, " (fc_mpi_init must come after MPI_Init and before MPI_Finalize)");
        fprintf(stderr, "%s\n", l.s);
        return 1;
    }
    m->rank = world_rank();
    if (parent == MPI_COMM_NULL) {
        put_prefix(&l, m->model, m->rank);
        put(&l, "fc_mpi_init: the communicator is MPI_COMM_NULL (this rank is not in it)");
        fprintf(stderr, "%s\n", l.s);
        return 1;
    }
    if ((err = MPI_Comm_rank(parent, &m->rank)) != MPI_SUCCESS) fail(m, err, "MPI_Comm_rank", 0, 0, 0, 0);
    if ((err = MPI_Comm_size(parent, &m->size)) != MPI_SUCCESS) fail(m, err, "MPI_Comm_size", 0, 0, 0, 0);
    if (!comm_handle) {
        long count = 0;
        int who = foreign_launcher(m->size, &count);
        if (who >= 0) {
            long rank = env_long(LAUNCHERS[who].rank);
            put_prefix(&l, m->model, rank >= 0 ? (int)rank : m->rank);
            put(&l, "MPI sees 1 process, but ");
            put(&l, LAUNCHERS[who].who);
            put(&l, " started ");
            put_long(&l, count);
            put(&l, " (");
            put(&l, LAUNCHERS[who].size);
            put(&l, "=");
            put_long(&l, count);
            put(&l, "): this binary's MPI (");
            put_library(&l);
            put(&l, ") is not the launcher's; start it with that MPI's mpiexec, or rebuild it with the launcher's mpicc");
            fprintf(stderr, "%s\n", l.s);
            fflush(stderr);
            return 1;
        }
    }
    if (expected_size > 0 && m->size != expected_size) {
        put_prefix(&l, m->model, m->rank);
        put(&l, "compiled for ");
        put_long(&l, expected_size);
        put(&l, expected_size == 1 ? " rank, run with " : " ranks, run with ");
        put_long(&l, m->size);
        put(&l, " (mpiexec -n ");
        put_long(&l, expected_size);
        put(&l, ")");
        fprintf(stderr, "%s\n", l.s);
        fflush(stderr);
        return 1;
    }
    /* The caller's communicator may abort on errors (MPI_COMM_WORLD does by default): while it is
     * duplicated, it returns them, so that a failing MPI_Comm_dup is reported like any other error. */
    if ((err = MPI_Comm_get_errhandler(parent, &old)) != MPI_SUCCESS)
        fail(m, err, "MPI_Comm_get_errhandler", 0, 0, 0, 0);
    if ((err = MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
        fail(m, err, "MPI_Comm_set_errhandler", 0, 0, 0, 0);
    err = MPI_Comm_dup(parent, &m->comm);
    if (err != MPI_SUCCESS) m->comm = MPI_COMM_NULL;
    if ((err2 = MPI_Comm_set_errhandler(parent, old)) != MPI_SUCCESS)
        fail(m, err2, "MPI_Comm_set_errhandler", 0, 0, 0, 0);
    if ((err2 = MPI_Errhandler_free(&old)) != MPI_SUCCESS) fail(m, err2, "MPI_Errhandler_free", 0, 0, 0, 0);
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Comm_dup", 0, 0, 0, 0);
    if ((err = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
        fail(m, err, "MPI_Comm_set_errhandler", 0, 0, 0, 0);
    return 0;
}

void fc_mpi_free(fc_mpi *m) {
    int err, finalized = 0;
    if (m->comm == MPI_COMM_NULL) return;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) { /* freed with MPI already */
        m->comm = m->node = m->leaders = MPI_COMM_NULL;
        return;
    }
    if (m->node != MPI_COMM_NULL && (err = MPI_Comm_free(&m->node)) != MPI_SUCCESS) fail(m, err, "MPI_Comm_free", 0, 0, 0, 0);
    if (m->leaders != MPI_COMM_NULL && (err = MPI_Comm_free(&m->leaders)) != MPI_SUCCESS)
        fail(m, err, "MPI_Comm_free", 0, 0, 0, 0);
    if ((err = MPI_Comm_free(&m->comm)) != MPI_SUCCESS) fail(m, err, "MPI_Comm_free", 0, 0, 0, 0);
    m->comm = MPI_COMM_NULL;
}

int fc_mpi_isend(fc_mpi *m, const void *buf, long nbytes, int peer, int tag, MPI_Request *req,
                 const char *tensor) {
    double t0 = MPI_Wtime();
    int err;
    check_count(m, nbytes, " bytes", "MPI_Isend", OF_TENSOR, tensor, " to rank ", peer);
    err = MPI_Isend(buf, (int)nbytes, MPI_BYTE, peer, tag, m->comm, req);
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Isend", OF_TENSOR, tensor, " to rank ", peer);
    m->comm_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}

int fc_mpi_irecv(fc_mpi *m, void *buf, long nbytes, int peer, int tag, MPI_Request *req, const char *tensor) {
    double t0 = MPI_Wtime();
    int err;
    check_count(m, nbytes, " bytes", "MPI_Irecv", OF_TENSOR, tensor, " from rank ", peer);
    err = MPI_Irecv(buf, (int)nbytes, MPI_BYTE, peer, tag, m->comm, req);
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Irecv", OF_TENSOR, tensor, " from rank ", peer);
    m->comm_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}

int fc_mpi_wait(fc_mpi *m, MPI_Request *req, const char *tensor) {
    double t0 = MPI_Wtime();
    int err = MPI_Wait(req, MPI_STATUS_IGNORE), k;
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Wait", OF_TENSOR, tensor, 0, 0);
    for (k = 0; k < m->n_pending; ++k) { /* a hierarchical reduction: its sum over the nodes, then on the node */
        if (m->pending[k].req != req) continue;
        if (m->leaders != MPI_COMM_NULL &&
            (err = MPI_Allreduce(MPI_IN_PLACE, m->pending[k].buf, m->pending[k].count, m->pending[k].type,
                                 m->pending[k].op, m->leaders)) != MPI_SUCCESS)
            fail(m, err, "MPI_Allreduce (between nodes)", OF_WHAT, tensor, 0, 0);
        if ((err = MPI_Bcast(m->pending[k].buf, m->pending[k].count, m->pending[k].type, 0, m->node)) != MPI_SUCCESS)
            fail(m, err, "MPI_Bcast (on the node)", OF_WHAT, tensor, 0, 0);
        m->pending[k] = m->pending[--m->n_pending];
        break;
    }
    m->wait_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}

/* One MPI_Wait per request rather than MPI_Waitall: an error inside MPI_Waitall is raised on the
 * error handler of MPI_COMM_WORLD by MPICH (MPI-4: MPI_COMM_SELF), which aborts by default before the
 * layer can name the request, whereas MPI_Wait raises it on the request's communicator (our duplicate,
 * errors return), so the line can name the request. Every request is posted already and a blocked
 * MPI_Wait progresses all of them, so waiting for them in order cannot deadlock. */
int fc_mpi_waitall(fc_mpi *m, int count, MPI_Request *reqs, const char *what) {
    double t0 = MPI_Wtime();
    int i, err;
    line_t l;
    if (count < 0) check_count(m, count, " requests", "MPI_Waitall", OF_WHAT, what, 0, 0);
    for (i = 0; i < count; ++i) {
        err = MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
        if (err == MPI_SUCCESS) continue;
        put_prefix(&l, m->model, m->rank);
        put_op(&l, "MPI_Waitall", OF_WHAT, what, 0, 0);
        put(&l, " (request ");
        put_long(&l, i);
        put(&l, " of ");
        put_long(&l, count);
        put(&l, ") failed: ");
        put_error(&l, err);
        die(&l, m->comm);
    }
    m->wait_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}

int fc_mpi_allreduce_sum_f32(fc_mpi *m, float *buf, long count, const char *tensor) {
    double t0 = MPI_Wtime();
    int err;
    check_count(m, count, " floats", "MPI_Allreduce", OF_TENSOR, tensor, 0, 0);
    err = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, m->comm);
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Allreduce", OF_TENSOR, tensor, 0, 0);
    m->comm_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}

int fc_mpi_iallreduce(fc_mpi *m, void *buf, long count, MPI_Datatype type, MPI_Op op, MPI_Request *req,
                      const char *what) {
    double t0 = MPI_Wtime();
    int err;
    check_count(m, count, " elements", "MPI_Iallreduce", OF_WHAT, what, 0, 0);
    if (m->node != MPI_COMM_NULL) { /* hierarchical: the node's sum on its first rank first */
        int first = m->leaders != MPI_COMM_NULL;
        if (m->n_pending == FC_MPI_PENDING) fc_mpi_abort(m, "more hierarchical reductions in flight than FC_MPI_PENDING");
        err = MPI_Ireduce(first ? MPI_IN_PLACE : buf, first ? buf : NULL, (int)count, type, op, 0, m->node, req);
        if (err != MPI_SUCCESS) fail(m, err, "MPI_Ireduce (on the node)", OF_WHAT, what, 0, 0);
        m->pending[m->n_pending].req = req;
        m->pending[m->n_pending].buf = buf;
        m->pending[m->n_pending].count = (int)count;
        m->pending[m->n_pending].type = type;
        m->pending[m->n_pending].op = op;
        ++m->n_pending;
    } else {
        err = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, type, op, m->comm, req);
        if (err != MPI_SUCCESS) fail(m, err, "MPI_Iallreduce", OF_WHAT, what, 0, 0);
    }
    m->comm_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}

int fc_mpi_hierarchy(fc_mpi *m, int node_ranks) {
    int err, node_rank = 0, node_size = 1, firsts = 0, mine;
    MPI_Comm node = MPI_COMM_NULL, leaders = MPI_COMM_NULL;
    if (node_ranks > 0)
        err = MPI_Comm_split(m->comm, m->rank / node_ranks, m->rank, &node);
    else
        err = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &node);
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Comm_split (the nodes)", 0, 0, 0, 0);
    if ((err = MPI_Comm_rank(node, &node_rank)) != MPI_SUCCESS) fail(m, err, "MPI_Comm_rank", 0, 0, 0, 0);
    if ((err = MPI_Comm_size(node, &node_size)) != MPI_SUCCESS) fail(m, err, "MPI_Comm_size", 0, 0, 0, 0);
    if ((err = MPI_Comm_split(m->comm, node_rank == 0 ? 0 : MPI_UNDEFINED, m->rank, &leaders)) != MPI_SUCCESS)
        fail(m, err, "MPI_Comm_split (the nodes' first ranks)", 0, 0, 0, 0);
    mine = node_rank == 0;
    if ((err = MPI_Allreduce(&mine, &firsts, 1, MPI_INT, MPI_SUM, m->comm)) != MPI_SUCCESS)
        fail(m, err, "MPI_Allreduce (the nodes)", 0, 0, 0, 0);
    m->nodes = firsts;
    if (firsts > 1 && firsts < m->size) {
        if (leaders != MPI_COMM_NULL) MPI_Comm_set_errhandler(leaders, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
        m->node = node, m->leaders = leaders;
        return firsts;
    }
    MPI_Comm_free(&node); /* one node, or a rank a node: the flat reductions are the same */
    if (leaders != MPI_COMM_NULL) MPI_Comm_free(&leaders);
    return firsts;
}

int fc_mpi_allreduce_max_f64(fc_mpi *m, double *buf, long count, const char *what) {
    double t0 = MPI_Wtime();
    int err;
    check_count(m, count, " doubles", "MPI_Allreduce", OF_WHAT, what, 0, 0);
    err = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_DOUBLE, MPI_MAX, m->comm);
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Allreduce", OF_WHAT, what, 0, 0);
    m->comm_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}

int fc_mpi_bcast(fc_mpi *m, void *buf, long nbytes, int root, const char *tensor) {
    double t0 = MPI_Wtime();
    int err;
    check_count(m, nbytes, " bytes", "MPI_Bcast", OF_TENSOR, tensor, " from rank ", root);
    err = MPI_Bcast(buf, (int)nbytes, MPI_BYTE, root, m->comm);
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Bcast", OF_TENSOR, tensor, " from rank ", root);
    m->comm_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}

int fc_mpi_barrier(fc_mpi *m) {
    double t0 = MPI_Wtime();
    int err = MPI_Barrier(m->comm);
    if (err != MPI_SUCCESS) fail(m, err, "MPI_Barrier", 0, 0, 0, 0);
    m->comm_us += (MPI_Wtime() - t0) * 1e6;
    return 0;
}
