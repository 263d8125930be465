"""float32 GEMM: runtime_c/kernels/sgemm.h against numpy's sgemm, one thread.

    python bench/gemm.py [--flags="-O3 -march=native"] [--peak 220] [--seconds 0.4] [--only 1024]

--flags="-O3 -mavx2 -mfma" times the AVX2 kernel, --flags=-O2 the compiler's default target
(SSE2 on x86-64), --flags="-O2 -DFC_NO_VECTOR" the portable C one.

Each shape gets a `static const fc_sgemm_plan` from codegen/backends/c/sgemm.make_plan, as
generated code would; constant operands (the weights of a dense layer or a convolution) are
packed in Python by pack_a / pack_b, the others are raw row-major arrays (a raw B is packed
at run time, a raw A read in place).
Timing runs inside C (clock_gettime around each call); flowc and numpy alternate in rounds
so that both see the same machine noise, and the median of all samples is reported. The
header line also prints a one-core FMA-loop peak measured at that moment with the kernel's
own vector type (the machine is shared: compare columns of the same run).
OPENBLAS_NUM_THREADS=1 (and friends) is set before numpy is imported.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codegen.backends.c.sgemm import isa_from_macros, make_plan, pack_a, pack_b  # noqa: E402

# (m, n, k, which operand is a constant packed at compile time, what it is)
SHAPES = [
    (1024, 1024, 1024, "none", "square, both raw"),
    (1, 512, 784, "b", "dense, batch 1"),
    (32, 512, 784, "b", "dense, batch 32"),
    (64, 3136, 576, "a", "conv 3x3 64->64 @56x56"),
    (128, 784, 1152, "a", "conv 3x3 128 @28x28"),
    (256, 196, 2304, "a", "conv 3x3 256 @14x14"),
    (512, 49, 4608, "a", "conv 3x3 512 @7x7"),
    (128, 128, 512, "none", "attention-like, raw"),
    (256, 1024, 256, "b", "dense 256->1024, batch 256"),
]

SOURCE_HEAD = """
#define _POSIX_C_SOURCE 200112L
#include <time.h>
#include "kernels/sgemm.h"
static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}
const char *isa(void) { return FC_SGEMM_ISA; }

/* FMA throughput of one core with the kernel's own vector type: 12 independent chains. */
double peak_gflops(void) {
    const fc_sgemm_v x = FC_SG_SPLAT(0.999999f), y = FC_SG_SPLAT(1e-7f);
    fc_sgemm_v c0 = FC_SG_SPLAT(0.0f), c1 = FC_SG_SPLAT(1.0f), c2 = FC_SG_SPLAT(2.0f);
    fc_sgemm_v c3 = FC_SG_SPLAT(3.0f), c4 = FC_SG_SPLAT(4.0f), c5 = FC_SG_SPLAT(5.0f);
    fc_sgemm_v c6 = FC_SG_SPLAT(6.0f), c7 = FC_SG_SPLAT(7.0f), c8 = FC_SG_SPLAT(8.0f);
    fc_sgemm_v c9 = FC_SG_SPLAT(9.0f), c10 = FC_SG_SPLAT(10.0f), c11 = FC_SG_SPLAT(11.0f);
    double best = 1e30, sink;
    long r;
    int rep;
    for (rep = 0; rep < 15; rep++) {
        double t0 = now_us();
        for (r = 0; r < 100000; r++) {
#define FC_B_FMA(c) c = FC_SG_FMA(c, x, y);
            FC_B_FMA(c0) FC_B_FMA(c1) FC_B_FMA(c2) FC_B_FMA(c3) FC_B_FMA(c4) FC_B_FMA(c5)
            FC_B_FMA(c6) FC_B_FMA(c7) FC_B_FMA(c8) FC_B_FMA(c9) FC_B_FMA(c10) FC_B_FMA(c11)
        }
        t0 = now_us() - t0;
        best = t0 < best ? t0 : best;
    }
    c0 = ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)) + ((c8 + c9) + (c10 + c11));
    memcpy(&sink, &c0, sizeof sink < sizeof c0 ? sizeof sink : sizeof c0);
    return (sink == 12345.0 ? 0.0 : 1.0) * 12.0 * 2.0 * FC_SGEMM_VL * 100000 / best * 1e-3;
}
"""

SOURCE_CASE = """
static const fc_sgemm_plan plan{i} = {init};
void run{i}(const float *a, const float *b, float *c, void *scratch, int reps, double *us) {{
    int r;
    for (r = 0; r < reps; r++) {{
        double t0 = now_us();
        fc_sgemm(&plan{i}, a, b, c, NULL, NULL, NULL, scratch, 0, 1);
        us[r] = now_us() - t0;
    }}
}}
unsigned long scratch{i}(void) {{ return (unsigned long)fc_sgemm_scratch_bytes(&plan{i}); }}
"""


def build(plans, flags: list[str], tmp: Path):
    import cffi

    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    src = SOURCE_HEAD + "".join(SOURCE_CASE.format(i=i, init=p.c_init()) for i, p in enumerate(plans))
    (tmp / "bench.c").write_text(src)
    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", *flags, "-fPIC", "-shared",
           f"-I{ROOT / 'runtime_c'}", str(tmp / "bench.c"), "-o", str(tmp / "bench.so")]  # fmt: skip
    subprocess.run(cmd, check=True)
    ffi = cffi.FFI()
    ffi.cdef(
        "const char *isa(void); double peak_gflops(void);"
        + "".join(
            f"void run{i}(const float *, const float *, float *, void *, int, double *);"
            f"unsigned long scratch{i}(void);"
            for i in range(len(plans))
        )
    )
    return ffi, ffi.dlopen(str(tmp / "bench.so"))


def target_isa(flags: list[str]) -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    out = subprocess.run([cc, *flags, "-dM", "-E", "-"], input="", capture_output=True, text=True)
    return isa_from_macros(out.stdout)


WIDTHS = (18, 6, 9, 7, 6, 9, 7, 6, 8)


def row(*cells) -> str:
    """One markdown table row, numbers right-aligned to WIDTHS."""
    return "| " + " | ".join(f"{c:>{w}}" for c, w in zip(cells, WIDTHS + (0,))) + " |"


def time_numpy(a, b, c, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flags", default="-O3 -march=native", help="compiler flags for the kernel")
    ap.add_argument("--peak", type=float, default=220.0, help="one-core fp32 peak, GFLOP/s")
    ap.add_argument("--seconds", type=float, default=0.4, help="time per shape per side")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", help="only the shapes whose 'M, N, K' contains this text")
    args = ap.parse_args()
    flags = args.flags.split()
    isa = target_isa(flags)
    rng = np.random.default_rng(0)
    plans, cases = [], []
    for m, n, k, const, what in SHAPES:
        if args.only and args.only not in f"{m}, {n}, {k}":
            continue
        plan = make_plan(m, n, k, isa=isa, a="packed" if const == "a" else "row",
                         b="packed" if const == "b" else "row")  # fmt: skip
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        plans.append(plan)
        cases.append((m, n, k, const, what, a, b))
    with tempfile.TemporaryDirectory() as tmp:
        ffi, lib = build(plans, flags, Path(tmp))
        print(f"kernel: {ffi.string(lib.isa()).decode()} ({' '.join(flags)}), numpy "
              f"{np.__version__} one thread; % of the {args.peak:.0f} GFLOP/s reference peak; "
              f"FMA loop measured now: {lib.peak_gflops():.0f} GFLOP/s")  # fmt: skip
        print(row("M, N, K", "packed", "flowc us", "GFLOP/s", "% peak", "numpy us", "GFLOP/s", "% peak",
                  "vs numpy", "what"))  # fmt: skip
        print(row(*(["-" * w for w in WIDTHS] + ["---"])))
        for i, (m, n, k, const, what, a, b) in enumerate(cases):
            plan = plans[i]
            pa = pack_a(a, plan) if plan.a_packed else a
            pb = pack_b(b, plan) if plan.b_packed else b
            c = np.empty((m, n), np.float32)
            scratch = np.empty(max(int(getattr(lib, f"scratch{i}")()), 1), np.uint8)
            run = getattr(lib, f"run{i}")
            ptr = ffi.from_buffer
            args_c = (ptr("float[]", pa), ptr("float[]", pb), ptr("float[]", c), ptr(scratch))
            run(*args_c, 1, ffi.new("double[1]"))
            ref = a.astype(np.float64) @ b.astype(np.float64)
            err = np.abs(c - ref).max() / max(np.abs(ref).max(), 1e-30)
            assert err < 1e-4, f"wrong result for {(m, n, k)}: relative error {err}"
            flop = 2.0 * m * n * k
            est = max(flop / (args.peak * 1e3 * 0.5), 1.0)  # us, a first guess
            reps = int(min(5000, max(10, args.seconds * 1e6 / args.rounds / est)))
            ours, theirs = [], []
            buf = ffi.new(f"double[{reps}]")
            cn = np.empty((m, n), np.float32)
            for _ in range(args.rounds):
                run(*args_c, reps, buf)
                ours += list(buf)
                theirs += time_numpy(a, b, cn, reps)
            us, nus = float(np.median(ours)), float(np.median(theirs))
            g, ng = flop / us * 1e-3, flop / nus * 1e-3
            packed = {"a": "A", "b": "B", "none": "-"}[const]
            pct = lambda x: f"{100 * x / args.peak:.0f}%"  # noqa: E731
            print(row(f"{m}, {n}, {k}", packed, f"{us:.1f}", f"{g:.1f}", pct(g), f"{nus:.1f}",
                      f"{ng:.1f}", pct(ng), f"{nus / us:.2f}x", what))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
