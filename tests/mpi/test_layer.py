"""mpi/fc_mpi.c, the communication layer of multi-rank models: small C programs built with mpicc
(-std=c99 -Wall -Wextra -Werror) and run under mpiexec with 2, 3 and 4 ranks.

The working cases check every byte received; the failing cases check that each prints its one
line (model, rank, operation, peer, tensor) and that the job ends non-zero without hanging.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from codegen.backends.c.toolchain import STRICT

pytestmark = pytest.mark.mpi

MPI_DIR = Path(__file__).resolve().parents[2] / "mpi"
TIMEOUT = 120  # seconds for one mpiexec run; a hang fails the test instead of the session
QUICK = 60  # a failing job must end within this many seconds (the layer aborts it)

PROGRAM = r"""
#include "fc_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me; /* rank in MPI_COMM_WORLD */

#define CHECK(c)                                                                           \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "rank %d: check failed, line %d: %s\n", me, __LINE__, #c);     \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                  \
        }                                                                                  \
    } while (0)

static const long SIZES[] = {0, 1, 7, 4096, 65539, 1048581};
#define NSIZES 6
#define NMANY 40 /* small messages to one peer */

static unsigned char pat(int src, int dst, int k, long i) {
    return (unsigned char)((src * 31 + dst * 17 + k * 7 + i * 13 + i / 251) & 0xff);
}

static void *alloc(long n) {
    void *p = malloc((size_t)n + 1);
    CHECK(p != NULL);
    return p;
}

/* Every ordered pair of ranks exchanges one message of each size, each with its own tag; the
 * receives are posted in reverse tag order, then all the sends, then one waitall. Then NMANY
 * small messages around the ring, received in reverse order. */
static void p2p(fc_mpi *m) {
    int n = m->size, r = m->rank, p, k, nreq = 0;
    long i;
    MPI_Request *reqs = alloc((long)sizeof(MPI_Request) * 2 * (n * NSIZES + NMANY));
    unsigned char **sbuf = alloc((long)sizeof(void *) * n * NSIZES);
    unsigned char **rbuf = alloc((long)sizeof(void *) * n * NSIZES);
    int msend[NMANY], mrecv[NMANY];
    for (p = 0; p < n; ++p) {
        if (p == r) continue;
        for (k = NSIZES - 1; k >= 0; --k) {
            int idx = p * NSIZES + k, tag = 1000 + (p * n + r) * NSIZES + k;
            rbuf[idx] = alloc(SIZES[k]);
            memset(rbuf[idx], 0xEE, (size_t)SIZES[k] + 1);
            CHECK(fc_mpi_irecv(m, rbuf[idx], SIZES[k], p, tag, &reqs[nreq++], "in") == 0);
        }
    }
    for (p = 0; p < n; ++p) {
        if (p == r) continue;
        for (k = 0; k < NSIZES; ++k) {
            int idx = p * NSIZES + k, tag = 1000 + (r * n + p) * NSIZES + k;
            sbuf[idx] = alloc(SIZES[k]);
            for (i = 0; i < SIZES[k]; ++i) sbuf[idx][i] = pat(r, p, k, i);
            CHECK(fc_mpi_isend(m, sbuf[idx], SIZES[k], p, tag, &reqs[nreq++], "out") == 0);
        }
    }
    for (k = NMANY - 1; k >= 0; --k)
        fc_mpi_irecv(m, &mrecv[k], sizeof(int), (r + n - 1) % n, k, &reqs[nreq++], "ring");
    for (k = 0; k < NMANY; ++k) {
        msend[k] = r * 1000 + k;
        fc_mpi_isend(m, &msend[k], sizeof(int), (r + 1) % n, k, &reqs[nreq++], "ring");
    }
    CHECK(fc_mpi_waitall(m, nreq, reqs, "exchange") == 0);
    for (k = 0; k < nreq; ++k) CHECK(reqs[k] == MPI_REQUEST_NULL);
    for (p = 0; p < n; ++p) {
        if (p == r) continue;
        for (k = 0; k < NSIZES; ++k) {
            int idx = p * NSIZES + k;
            for (i = 0; i < SIZES[k]; ++i) CHECK(rbuf[idx][i] == pat(p, r, k, i));
            CHECK(rbuf[idx][SIZES[k]] == 0xEE); /* nothing written past the message */
            free(rbuf[idx]);
            free(sbuf[idx]);
        }
    }
    for (k = 0; k < NMANY; ++k) CHECK(mrecv[k] == ((r + n - 1) % n) * 1000 + k);
    CHECK(fc_mpi_waitall(m, 0, NULL, "nothing") == 0);
    CHECK(m->wait_us > 0.0 && m->comm_us > 0.0);
    free(reqs);
    free(sbuf);
    free(rbuf);
}

/* Post the receive, post the send, compute, then wait for each: the pattern of a pipeline stage. */
static void overlap(fc_mpi *m) {
    const long N = 1 << 20;
    int n = m->size, r = m->rank, left = (r + n - 1) % n, right = (r + 1) % n;
    unsigned char *in = alloc(N), *out = alloc(N);
    MPI_Request rr, sr;
    volatile double acc = 0.0;
    long i;
    double wait0, comm0;
    for (i = 0; i < N; ++i) out[i] = pat(r, right, 3, i);
    m->wait_us = m->comm_us = 0.0; /* reset */
    CHECK(fc_mpi_irecv(m, in, N, left, 5, &rr, "h") == 0);
    CHECK(fc_mpi_isend(m, out, N, right, 5, &sr, "h") == 0);
    comm0 = m->comm_us;
    CHECK(comm0 > 0.0 && m->wait_us == 0.0);
    for (i = 0; i < 2000000; ++i) acc += (double)i * 0.5;
    wait0 = m->wait_us;
    CHECK(fc_mpi_wait(m, &rr, "h") == 0);
    CHECK(fc_mpi_wait(m, &sr, "h") == 0);
    CHECK(rr == MPI_REQUEST_NULL && sr == MPI_REQUEST_NULL);
    CHECK(m->wait_us > wait0 && m->comm_us == comm0);
    CHECK(fc_mpi_wait(m, &rr, "h") == 0); /* a null request is done at once */
    for (i = 0; i < N; ++i) CHECK(in[i] == pat(left, r, 3, i));
    CHECK(fc_mpi_now_us() > 0.0);
    free(in);
    free(out);
}

static void reduce(fc_mpi *m) {
    int n = m->size, r = m->rank, i;
    const long BIG = 1 << 20;
    float f[1000], *g = alloc(BIG * (long)sizeof(float));
    double d[5];
    for (i = 0; i < 1000; ++i) f[i] = (float)(r + 1) * (float)(i % 10);
    CHECK(fc_mpi_allreduce_sum_f32(m, f, 1000, "grad") == 0);
    for (i = 0; i < 1000; ++i) CHECK(f[i] == (float)(n * (n + 1) / 2) * (float)(i % 10));
    for (i = 0; i < 5; ++i) d[i] = (r == n / 2 ? 100.0 : r * 1.5) - i;
    CHECK(fc_mpi_allreduce_max_f64(m, d, 5, "timing") == 0);
    for (i = 0; i < 5; ++i) CHECK(d[i] == 100.0 - i);
    for (i = 0; i < BIG; ++i) g[i] = (float)(i % 3) + (float)r;
    CHECK(fc_mpi_allreduce_sum_f32(m, g, BIG, "big") == 0);
    for (i = 0; i < BIG; ++i) CHECK(g[i] == (float)(n * (i % 3) + n * (n - 1) / 2));
    CHECK(fc_mpi_allreduce_sum_f32(m, f, 0, "empty") == 0);
    free(g);
}

static void bcast(fc_mpi *m) {
    const long N = 100003;
    unsigned char *buf = alloc(N);
    int root;
    long i;
    for (root = 0; root < m->size; ++root) {
        for (i = 0; i < N; ++i) buf[i] = m->rank == root ? pat(root, 0, 0, i) : 0;
        CHECK(fc_mpi_bcast(m, buf, N, root, "w") == 0);
        for (i = 0; i < N; ++i) CHECK(buf[i] == pat(root, 0, 0, i));
    }
    CHECK(fc_mpi_bcast(m, buf, 0, 0, "none") == 0);
    CHECK(fc_mpi_barrier(m) == 0);
    free(buf);
}

/* The layer on a sub-communicator (split by parity, in reverse rank order) and on a duplicate of
 * MPI_COMM_WORLD, each passed as a pointer; the caller's communicators stay usable and keep their
 * error handler. */
static void subcomm(void) {
    fc_mpi m;
    MPI_Comm sub, dup;
    MPI_Errhandler eh;
    int n, sr, ss, i, expect = 0, x, peer, cmp;
    MPI_Request reqs[2];
    int got = -1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    CHECK(MPI_Comm_split(MPI_COMM_WORLD, me % 2, -me, &sub) == MPI_SUCCESS);
    MPI_Comm_rank(sub, &sr);
    MPI_Comm_size(sub, &ss);
    CHECK(fc_mpi_init(&m, &sub, ss, "sub") == 0);
    CHECK(m.rank == sr && m.size == ss);
    CHECK(MPI_Comm_compare(m.comm, sub, &cmp) == MPI_SUCCESS && cmp == MPI_CONGRUENT);
    CHECK(MPI_Comm_get_errhandler(m.comm, &eh) == MPI_SUCCESS && eh == MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh);
    CHECK(MPI_Comm_get_errhandler(sub, &eh) == MPI_SUCCESS && eh == MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&eh);
    x = me;
    for (i = me % 2; i < n; i += 2) expect += i;
    {
        float f = (float)x;
        CHECK(fc_mpi_allreduce_sum_f32(&m, &f, 1, "ranks") == 0);
        CHECK(f == (float)expect);
    }
    peer = (sr + 1) % ss;
    fc_mpi_irecv(&m, &got, sizeof got, (sr + ss - 1) % ss, 3, &reqs[0], "ring");
    fc_mpi_isend(&m, &x, sizeof x, peer, 3, &reqs[1], "ring");
    fc_mpi_waitall(&m, 2, reqs, "ring");
    {
        int left_sub = (sr + ss - 1) % ss, left_world = 0;
        MPI_Group gs, gw;
        MPI_Comm_group(sub, &gs);
        MPI_Comm_group(MPI_COMM_WORLD, &gw);
        MPI_Group_translate_ranks(gs, 1, &left_sub, gw, &left_world);
        CHECK(got == left_world);
        MPI_Group_free(&gs);
        MPI_Group_free(&gw);
    }
    fc_mpi_free(&m);
    CHECK(m.comm == MPI_COMM_NULL);
    fc_mpi_free(&m); /* twice: nothing */
    CHECK(MPI_Barrier(sub) == MPI_SUCCESS);
    MPI_Comm_free(&sub);

    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup) == MPI_SUCCESS);
    CHECK(fc_mpi_init(&m, &dup, 0, "dup") == 0); /* 0: any size */
    CHECK(m.rank == me && m.size == n);
    x = me == 0 ? 4242 : 0;
    fc_mpi_bcast(&m, &x, sizeof x, 0, "x");
    CHECK(x == 4242);
    fc_mpi_free(&m);
    MPI_Comm_free(&dup);

    CHECK(fc_mpi_init(&m, NULL, n, NULL) == 0); /* no model name: "flowc" */
    CHECK(strcmp(m.model, "flowc") == 0);
    fc_mpi_free(&m);
}

int main(int argc, char **argv) {
    fc_mpi m;
    const char *mode = argc > 1 ? argv[1] : "";
    int n, cmp;
    char evil[128];
    MPI_Request req;
    MPI_Errhandler eh;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 9;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (strcmp(mode, "subcomm") == 0) {
        subcomm();
    } else {
        if (fc_mpi_init(&m, NULL, strcmp(mode, "mismatch") == 0 ? n + 1 : n, "net")) {
            MPI_Finalize();
            return 3;
        }
        CHECK(m.rank == me && m.size == n && m.wait_us == 0.0 && m.comm_us == 0.0);
        CHECK(MPI_Comm_compare(m.comm, MPI_COMM_WORLD, &cmp) == MPI_SUCCESS && cmp == MPI_CONGRUENT);
        CHECK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh) == MPI_SUCCESS && eh == MPI_ERRORS_ARE_FATAL);
        MPI_Errhandler_free(&eh);
        if (strcmp(mode, "p2p") == 0) {
            p2p(&m);
        } else if (strcmp(mode, "overlap") == 0) {
            overlap(&m);
        } else if (strcmp(mode, "reduce") == 0) {
            reduce(&m);
        } else if (strcmp(mode, "bcast") == 0) {
            bcast(&m);
        } else if (strcmp(mode, "badpeer") == 0) { /* rank 0 sends to rank n: out of range */
            if (me == 0) fc_mpi_isend(&m, &n, sizeof n, n, 9, &req, "h");
            fc_mpi_barrier(&m);
        } else if (strcmp(mode, "badrecv") == 0) { /* the last rank receives from rank n + 3 */
            if (me == n - 1) fc_mpi_irecv(&m, &n, sizeof n, n + 3, 9, &req, "h");
            fc_mpi_barrier(&m);
        } else if (strcmp(mode, "badtag") == 0) { /* a negative tag */
            if (me == 0) fc_mpi_isend(&m, &n, sizeof n, 1, -7, &req, "h");
            fc_mpi_barrier(&m);
        } else if (strcmp(mode, "badname") == 0) { /* a hostile tensor name, a bad peer */
            memset(evil, 'x', sizeof evil - 1);
            evil[sizeof evil - 1] = 0;
            memcpy(evil, "evil\n'%s%n\\\x01\xc3\xa9", 14);
            if (me == 0) fc_mpi_isend(&m, &n, sizeof n, n, 9, &req, evil);
            fc_mpi_barrier(&m);
        } else if (strcmp(mode, "toolarge") == 0) {
#if LONG_MAX > INT_MAX
            if (me == 0) fc_mpi_isend(&m, &n, (long)INT_MAX + 1, 1, 0, &req, "huge");
#else
            if (me == 0) fc_mpi_isend(&m, &n, -1L, 1, 0, &req, "huge");
#endif
            fc_mpi_barrier(&m);
        } else if (strcmp(mode, "truncate") == 0 || strcmp(mode, "truncwait") == 0) {
            /* rank 0 sends NMANY messages of 4 bytes to rank 1, the last one of 8 bytes; rank 1's
             * buffers hold 4: the last receive fails in the wait */
            int k, small[NMANY], big[2] = {1, 2};
            MPI_Request reqs[NMANY];
            int wait = strcmp(mode, "truncwait") == 0;
            for (k = 0; k < NMANY; ++k) {
                small[k] = k;
                if (me == 0) fc_mpi_isend(&m, k == NMANY - 1 ? big : &small[k], k == NMANY - 1 ? 8 : 4, 1, k,
                                          &reqs[k], "t");
                if (me == 1) fc_mpi_irecv(&m, &small[k], 4, 0, k, &reqs[k], "t");
            }
            if (me == 1 && wait)
                for (k = 0; k < NMANY; ++k) fc_mpi_wait(&m, &reqs[k], k == NMANY - 1 ? "last" : "t");
            if (me <= 1) fc_mpi_waitall(&m, NMANY, reqs, "stage 2");
            fc_mpi_barrier(&m);
        } else if (strcmp(mode, "abort") == 0) {
            if (me == n - 1) fc_mpi_abort(&m, "stopped\nhere");
            fc_mpi_barrier(&m);
        } else {
            CHECK(!"unknown mode");
        }
        fc_mpi_free(&m);
        CHECK(m.comm == MPI_COMM_NULL);
    }
    printf("ok %s rank %d\n", mode, me);
    MPI_Finalize();
    return 0;
}
"""


@pytest.fixture(scope="session")
def program(toolchain, tmp_path_factory) -> Path:
    """The test program, built with this toolchain's mpicc and the strict flags of generated C."""
    from codegen.backends.c.toolchain import run

    folder = tmp_path_factory.mktemp(f"mpi-{toolchain.flavor}")
    (folder / "layer_test.c").write_text(PROGRAM)
    exe = folder / "layer_test"
    run(
        [
            *shlex.split(toolchain.mpicc),
            *STRICT,
            "-pedantic",
            "-O2",
            f"-I{MPI_DIR}",
            "layer_test.c",
            str(MPI_DIR / "fc_mpi.c"),
            "-o",
            exe.name,
        ],
        cwd=folder,
    )
    return exe


def mpirun(toolchain, n: int, *args: str, timeout: float = TIMEOUT) -> tuple:
    return toolchain.run(n, *args, timeout=timeout)


def ok_lines(res, mode: str, n: int) -> None:
    assert res.returncode == 0, res.stderr[-3000:]
    got = sorted(re.findall(r"ok \S+ rank \d+", res.stdout))  # ranks' lines may interleave
    assert got == sorted(f"ok {mode} rank {r}" for r in range(n)), res.stdout + res.stderr[-3000:]


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("mode", ["p2p", "overlap", "reduce", "bcast", "subcomm"])
def test_works(program, toolchain, mode, n):
    res, _ = mpirun(toolchain, n, str(program), mode)
    ok_lines(res, mode, n)


def failing(toolchain, program, n, mode) -> tuple[list[str], subprocess.CompletedProcess]:
    """Run a case that must fail: non-zero, quickly; the lines of stderr."""
    res, took = mpirun(toolchain, n, str(program), mode)
    assert res.returncode != 0, res.stdout + res.stderr
    assert took < QUICK, f"{mode} took {took:.1f} s to fail"
    assert not re.findall(r"ok \S+ rank \d+", res.stdout)
    return res.stderr.splitlines(), res


@pytest.mark.parametrize("n", [2, 3, 4])
def test_size_mismatch_refused_by_every_rank(program, toolchain, n):
    lines, res = failing(toolchain, program, n, "mismatch")
    for r in range(n):
        want = f"net: rank {r}: compiled for {n + 1} ranks, run with {n} (mpiexec -n {n + 1})"
        assert ours(lines, f"net: rank {r}: ") == [want], res.stderr


def ours(lines: list[str], prefix: str) -> list[str]:
    """The lines of ours, from prefix on: the launcher may put text before them on the same line
    (Open MPI's abort notice ends in a space without a newline)."""
    return [ln[ln.index(prefix) :] for ln in lines if prefix in ln]


def one_line(lines: list[str], prefix: str) -> str:
    """The one line of ours starting with prefix."""
    found = ours(lines, prefix)
    assert len(found) == 1, "\n".join(lines)
    return found[0]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_send_to_a_rank_out_of_range_aborts(program, toolchain, n):
    lines, _ = failing(toolchain, program, n, "badpeer")
    line = one_line(lines, "net: rank 0: ")
    assert line.startswith(f"net: rank 0: MPI_Isend of tensor 'h' to rank {n} failed: "), line
    assert len(line) > len(f"net: rank 0: MPI_Isend of tensor 'h' to rank {n} failed: ") + 5


@pytest.mark.parametrize("n", [2, 3])
def test_receive_from_a_rank_out_of_range_aborts(program, toolchain, n):
    lines, _ = failing(toolchain, program, n, "badrecv")
    line = one_line(lines, f"net: rank {n - 1}: ")
    assert line.startswith(f"net: rank {n - 1}: MPI_Irecv of tensor 'h' from rank {n + 3} failed: "), line


def test_negative_tag_aborts(program, toolchain):
    lines, _ = failing(toolchain, program, 2, "badtag")
    line = one_line(lines, "net: rank 0: ")
    assert line.startswith("net: rank 0: MPI_Isend of tensor 'h' to rank 1 failed: "), line


def test_hostile_tensor_name_is_escaped(program, toolchain):
    lines, res = failing(toolchain, program, 2, "badname")
    line = one_line(lines, "net: rank 0: ")
    name = r"evil\x0a\x27%s%n\x5c\x01\xc3\xa9" + "x" * (64 - 14) + "..."
    assert line.startswith(f"net: rank 0: MPI_Isend of tensor '{name}' to rank 2 failed: "), line
    assert "xxx" not in line.split("...", 1)[1]


def test_message_larger_than_int_max_refused(program, toolchain):
    lines, _ = failing(toolchain, program, 2, "toolarge")
    line = one_line(lines, "net: rank 0: ")
    assert re.fullmatch(
        r"net: rank 0: MPI_Isend of tensor 'huge' to rank 1: 2147483648 bytes, more than one MPI message "
        r"holds \(INT_MAX = 2147483647 bytes\)",
        line,
    ), line


@pytest.mark.parametrize("n", [2, 3])
def test_truncated_message_in_waitall_names_the_request(program, toolchain, n):
    lines, _ = failing(toolchain, program, n, "truncate")
    line = one_line(lines, "net: rank 1: ")
    assert line.startswith("net: rank 1: MPI_Waitall of 'stage 2' (request 39 of 40) failed: "), line
    assert "trunc" in line.lower(), line


def test_truncated_message_in_wait(program, toolchain):
    lines, _ = failing(toolchain, program, 2, "truncwait")
    line = one_line(lines, "net: rank 1: ")
    assert line.startswith("net: rank 1: MPI_Wait of tensor 'last' failed: "), line
    assert "trunc" in line.lower(), line


@pytest.mark.parametrize("n", [2, 4])
def test_abort_prints_one_line(program, toolchain, n):
    lines, _ = failing(toolchain, program, n, "abort")
    assert one_line(lines, f"net: rank {n - 1}: ") == rf"net: rank {n - 1}: stopped\x0ahere"


MPI4PY_SCRIPT = r"""
import ctypes, sys
from mpi4py import MPI

lib = ctypes.CDLL(sys.argv[1])
world = MPI.COMM_WORLD
sub = world.Split(world.rank % 2, -world.rank)
got = lib.sub_sum(ctypes.c_void_p(MPI._addressof(sub)), sub.size)
want = sum(r for r in range(world.size) if r % 2 == world.rank % 2)
assert got == want, (got, want)
assert lib.sub_sum(None, world.size) == sum(range(world.size))
sys.stdout.write(f"ok mpi4py rank {world.rank}\n")
"""

MPI4PY_LIB = r"""
#include "fc_mpi.h"
int sub_sum(const void *comm_handle, int size);
/* The sum of the world ranks of the communicator's members, through the layer. */
int sub_sum(const void *comm_handle, int size) {
    fc_mpi m;
    float x;
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    x = (float)me;
    if (fc_mpi_init(&m, comm_handle, size, "py")) return -1;
    fc_mpi_allreduce_sum_f32(&m, &x, 1, "x");
    fc_mpi_free(&m);
    return (int)x;
}
"""


@pytest.mark.parametrize("n", [2, 3])
def test_init_from_mpi4py_communicator(toolchain, tmp_path, n):
    """comm_handle as mpi4py gives it: MPI._addressof(comm) of a split communicator."""
    from codegen.backends.c.toolchain import run

    python = toolchain.python
    if python is None or subprocess.run([python, "-c", "import mpi4py"], capture_output=True).returncode:
        pytest.skip(f"no mpi4py beside {toolchain.mpicc}")
    (tmp_path / "sub.c").write_text(MPI4PY_LIB)
    (tmp_path / "script.py").write_text(MPI4PY_SCRIPT)
    cmd = [*shlex.split(toolchain.mpicc), *STRICT, "-fPIC", "-shared", f"-I{MPI_DIR}", "sub.c"]
    run([*cmd, str(MPI_DIR / "fc_mpi.c"), "-o", "libsub.so"], cwd=tmp_path)
    res, _ = mpirun(toolchain, n, python, str(tmp_path / "script.py"), str(tmp_path / "libsub.so"))
    ok_lines(res, "mpi4py", n)


# ----------------------------------------------------------------------------- the float16 wire
F16_PROGRAM = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fc_allreduce.h"

/* the vector forms against the scalar fc_f2h / fc_h2f: every half, 65536 floats of every range */
int main(void) {
    static float f[65536], g[65536];
    static fc_f16 h[65536], h2[65536], a[65536], b[65536];
    unsigned s = 1;
    long i, bad = 0;
    int n = 65535; /* an odd count: the scalar tail too */
    for (i = 0; i < 65536; ++i) h[i] = (fc_f16)i;
    fc_h2f_scale_n(f, h, 65536, 0.5f);
    for (i = 0; i < 65536; ++i) {
        float w = fc_h2f(h[i]) * 0.5f;
        bad += memcmp(&w, &f[i], 4) != 0 && !(isnan(w) && isnan(f[i]));
    }
    for (i = 0; i < 65536; ++i) {
        unsigned r;
        s = s * 1103515245u + 12345u;
        r = s ^ (s << 7) ^ (s >> 3);
        memcpy(&g[i], &r, 4);
        if (i % 3 == 0) g[i] = (float)((int)(r % 200000) - 100000) * 1e-6f; /* gradients' range */
        if (i % 3 == 1) g[i] = (float)((int)(r % 200000) - 100000) * 1e-9f; /* half subnormals */
    }
    fc_f2h_n(h2, g, 65535);
    for (i = 0; i < 65535; ++i) bad += fc_f2h(g[i]) != h2[i] && !isnan(g[i]);
    for (i = 0; i < 65536; ++i) a[i] = h2[i], b[i] = h2[(i * 7) & 65535];
    memcpy(h, b, sizeof b);
    fc_sum_f16(a, b, &n, NULL);
    for (i = 0; i < 65535; ++i) {
        fc_f16 w = fc_f2h(fc_h2f(a[i]) + fc_h2f(h[i]));
        bad += w != b[i] && !isnan(fc_h2f(w));
    }
    printf("%ld\n", bad);
    return bad != 0;
}
"""


def test_float16_wire_vector_forms_equal_the_scalar_ones(tmp_path):
    """fc_allreduce.h's packing, summing and unpacking on F16C (AVX-512 and AVX2 widths) and on
    AArch64 NEON give the bits of the scalar conversions; the build without them uses those."""
    from codegen.backends.c.toolchain import find_mpicc

    mpicc = find_mpicc()
    (tmp_path / "t.c").write_text(F16_PROGRAM)
    runtime = MPI_DIR.parent / "runtime_c"
    include = ["-I", str(MPI_DIR), "-I", str(runtime)]
    builds = {"scalar": ["-mno-f16c"], "avx2": ["-mavx2", "-mf16c"]}
    if "avx512f" in Path("/proc/cpuinfo").read_text():
        builds["avx512"] = ["-mavx512f", "-mf16c"]
    for name, flags in builds.items():
        exe = tmp_path / name
        cmd = [*shlex.split(mpicc), *STRICT, "-O2", *flags, *include, str(tmp_path / "t.c"), "-o", str(exe)]
        cmd.append("-lm")
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        res = subprocess.run([str(exe)], capture_output=True, text=True)
        assert res.returncode == 0 and res.stdout.strip() == "0", (name, res.stdout)
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    mpi_h = Path(shutil.which(shlex.split(mpicc)[0]) or "/").resolve().parents[1] / "include"
    if cross and qemu and (mpi_h / "mpi.h").is_file():
        exe = tmp_path / "neon"
        cmd = [cross, *STRICT, "-O2", "-static", *include, "-I", str(mpi_h), str(tmp_path / "t.c")]
        cmd += ["-o", str(exe)]
        subprocess.run([*cmd, "-lm"], check=True, capture_output=True, text=True)
        res = subprocess.run([qemu, str(exe)], capture_output=True, text=True)
        assert res.returncode == 0 and res.stdout.strip() == "0", ("neon", res.stdout)
