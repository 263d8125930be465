"""Ping-pong between 2 MPI ranks through flowc's communication layer (mpi/fc_mpi.c), and the
alpha-beta model of one message fitted to it.

    python bench/pingpong.py [--max-bytes 67108864] [--seconds 0.25] [--json fit.json]
                             [--mpicc PATH] [--mpiexec PATH]

A small C program, built with mpicc (-O2 and the strict flags of generated C), runs under
``mpiexec -n 2``: for each message size (0 B, then 1 B .. 64 MiB in powers of 4), rank 0 posts the
receive of the reply, sends the message (fc_mpi_irecv, fc_mpi_isend, fc_mpi_waitall) and rank 1
sends it back as soon as it arrives (fc_mpi_irecv, fc_mpi_wait, fc_mpi_isend, fc_mpi_wait). Each
size runs a few warm-up round trips, then as many timed ones as fit in --seconds (at least 10, at
most 100,000); the median round trip is reported, and half of it is the one-way time.

The fit is t(n) = alpha + n / beta over the one-way medians, least squares on the relative
error (each residual divided by the measured time), so that 1-byte latencies and 64 MiB transfers
weigh alike: plain least squares would fit the large messages only and leave alpha to noise.
It prints a table (bytes, one-way us, GB/s = bytes / one-way time / 1e9) and
"alpha = X us, beta = Y GB/s"; --json FILE writes the fit and the points:

    {"alpha_us": ..., "beta_GBps": ..., "alpha_s": ..., "beta_bytes_per_s": ...,
     "model": "t(n) = alpha + n / beta", "mpi": "mpich", "points": [{"bytes", "one_way_us", ...}]}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codegen.backends.c.toolchain import (  # noqa: E402
    STRICT,
    find_mpicc,
    find_mpiexec,
    mpi_flavor,
    mpiexec_command,
    run,
)

PROGRAM = r"""
#include "fc_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *alloc(fc_mpi *m, long n) {
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p) fc_mpi_abort(m, "out of memory");
    memset(p, 1, n > 0 ? (size_t)n : 1); /* touch every page before timing */
    return p;
}

/* One round trip of n bytes: rank 0 pings, rank 1 pongs. */
static void round_trip(fc_mpi *m, unsigned char *out, unsigned char *in, long n) {
    MPI_Request req[2];
    if (m->rank == 0) {
        fc_mpi_irecv(m, in, n, 1, 2, &req[0], "pong");
        fc_mpi_isend(m, out, n, 1, 1, &req[1], "ping");
        fc_mpi_waitall(m, 2, req, "ping-pong");
    } else {
        fc_mpi_irecv(m, in, n, 0, 1, &req[0], "ping");
        fc_mpi_wait(m, &req[0], "ping");
        fc_mpi_isend(m, in, n, 0, 2, &req[1], "pong");
        fc_mpi_wait(m, &req[1], "pong");
    }
}

int main(int argc, char **argv) {
    fc_mpi m;
    long max_bytes, n, i, iters, warm;
    double seconds, *t, t0, est;
    unsigned char *out, *in;
    enum { MIN_ITERS = 10, MAX_ITERS = 100000, WARM = 5 };
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
    if (fc_mpi_init(&m, NULL, 2, "pingpong")) {
        MPI_Finalize();
        return 1;
    }
    if (argc != 3) fc_mpi_abort(&m, "usage: pingpong MAX_BYTES SECONDS_PER_SIZE");
    max_bytes = atol(argv[1]);
    seconds = atof(argv[2]);
    out = alloc(&m, max_bytes);
    in = alloc(&m, max_bytes);
    t = alloc(&m, (long)sizeof(double) * MAX_ITERS);
    for (n = 0; n <= max_bytes; n = n ? n * 4 : 1) {
        fc_mpi_barrier(&m);
        t0 = fc_mpi_now_us();
        for (warm = 0; warm < WARM; ++warm) round_trip(&m, out, in, n);
        est = (fc_mpi_now_us() - t0) / WARM;
        iters = (long)(seconds * 1e6 / (est > 0.01 ? est : 0.01));
        iters = iters < MIN_ITERS ? MIN_ITERS : iters > MAX_ITERS ? MAX_ITERS : iters;
        fc_mpi_bcast(&m, &iters, sizeof iters, 0, "iters"); /* rank 0's estimate decides */
        for (i = 0; i < iters; ++i) {
            t0 = fc_mpi_now_us();
            round_trip(&m, out, in, n);
            t[i] = fc_mpi_now_us() - t0;
        }
        if (m.rank == 0) {
            qsort(t, (size_t)iters, sizeof *t, cmp);
            double median = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
            printf("%ld %ld %.4f %.4f\n", n, iters, median, t[0]);
            fflush(stdout);
        }
    }
    free(out);
    free(in);
    free(t);
    fc_mpi_free(&m);
    MPI_Finalize();
    return 0;
}
"""


def build(mpicc: str, folder: Path) -> Path:
    (folder / "pingpong.c").write_text(PROGRAM)
    mpi = ROOT / "mpi"
    cmd = [*shlex.split(mpicc), *STRICT, "-O2", f"-I{mpi}", "pingpong.c", str(mpi / "fc_mpi.c")]
    run([*cmd, "-o", "pingpong"], cwd=folder)
    return folder / "pingpong"


def fit(sizes: np.ndarray, one_way_us: np.ndarray) -> tuple[float, float]:
    """(alpha in us, beta in bytes per us) of t(n) = alpha + n / beta, least squares on the
    relative error: minimize sum(((alpha + n / beta) - t) / t) ** 2), linear in (alpha, 1 / beta).

    >>> n = np.array([0.0, 1e3, 1e6]); a, b = fit(n, 2.0 + n / 5e3)
    >>> round(a, 6), round(b, 3)
    (2.0, 5000.0)
    """
    a = np.stack([np.ones_like(sizes), sizes], axis=1) / one_way_us[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(a, np.ones_like(one_way_us), rcond=None)
    return float(alpha), float(1.0 / inv_beta) if inv_beta > 0 else float("inf")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-bytes", type=int, default=64 << 20, help="largest message (default 64 MiB)")
    ap.add_argument("--seconds", type=float, default=0.25, help="timed round trips per size, in seconds")
    ap.add_argument("--json", type=Path, help="write the fit and the points here")
    ap.add_argument("--mpicc", help="MPI C compiler (default: $MPICC, beside Python, PATH)")
    ap.add_argument("--mpiexec", help="MPI launcher (default: $MPIEXEC, beside Python, PATH)")
    args = ap.parse_args(argv)

    mpicc, mpiexec = find_mpicc(args.mpicc), find_mpiexec(args.mpiexec)
    with tempfile.TemporaryDirectory(prefix="flowc-pingpong-") as tmp:
        exe = build(mpicc, Path(tmp))
        cmd = [*mpiexec_command(mpiexec, 2), str(exe), str(args.max_bytes), str(args.seconds)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if res.returncode:
        print(f"pingpong failed (exit {res.returncode}): {' '.join(cmd)}\n{res.stderr}", file=sys.stderr)
        return 1
    rows = [line.split() for line in res.stdout.splitlines() if line.strip()]
    sizes = np.array([float(r[0]) for r in rows])
    one_way = np.array([float(r[2]) / 2 for r in rows])
    alpha, beta = fit(sizes, one_way)

    flavor = mpi_flavor(mpicc)
    print(f"ping-pong, 2 ranks, {flavor} ({mpicc}), {platform.node()}, {os.cpu_count()} CPUs")
    print(f"{'bytes':>10} {'iters':>7} {'one-way us':>12} {'min us':>10} {'GB/s':>8} {'fit us':>10}")
    points = []
    for (n, iters, _median, lo), t in zip(rows, one_way):
        n = int(n)
        gbps = n / t / 1e3 if t > 0 else 0.0
        model = alpha + n / beta
        print(f"{n:>10} {int(iters):>7} {t:>12.3f} {float(lo) / 2:>10.3f} {gbps:>8.3f} {model:>10.3f}")
        points.append(
            {"bytes": n, "iters": int(iters), "one_way_us": t, "min_one_way_us": float(lo) / 2, "GBps": gbps}
        )
    print(f"alpha = {alpha:.3f} us, beta = {beta / 1e3:.3f} GB/s")
    if args.json:
        report = {
            "model": "t(n) = alpha + n / beta (one-way time of an n-byte message)",
            "fit": "least squares on the relative error, over the median one-way times",
            "alpha_us": alpha,
            "beta_GBps": beta / 1e3,
            "alpha_s": alpha * 1e-6,
            "beta_bytes_per_s": beta * 1e6,
            "mpi": flavor,
            "mpicc": mpicc,
            "mpiexec": mpiexec,
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "points": points,
        }
        tmp = args.json.with_name(f".{args.json.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
