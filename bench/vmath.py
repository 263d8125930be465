"""kernels/vmath.h: accuracy and speed of each vectorizable float32 function against libm.

    python bench/vmath.py [--n 1048576] [--runs 9] [--only sin]

Accuracy: the largest error in ulp over the dense sweep of tests/runtime_c/test_vmath.py
(every 2^11-th float32 bit pattern plus the edge cases; sin and cos within their ulp range),
the larger of the scalar (-O1) and the vectorized build, next to the bound the test enforces.
Speed: nanoseconds per element of a loop over --n floats calling the flowc function
(test_vmath.SOURCE, vectorized build) and of the same loop calling libm's float functions
(expf, logf, sinf...), both with the host target's -O3 -march=native -ffp-contract=fast
-fno-math-errno; the libm calls stay scalar (glibc declares its vector variants only under
-ffast-math). The two alternate in rounds because the machine is shared; the table holds
medians. The inputs are uniform over a range typical of the function (the "inputs" column),
where libm takes its fast path.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime_c"))
import test_vmath as T  # noqa: E402
from conftest import CC, FLAGS, RUNTIME  # noqa: E402

FAST_FLAGS = (*T.VECTOR_FLAGS, "-fno-math-errno")

# the libm loop for each function of test_vmath.SOURCE, same numbering
LIBM_SOURCE = r"""
#include <math.h>
void run(int which, const float *x, float *y, long n) {
    long i;
    switch (which) {
    case 0: for (i = 0; i < n; i++) y[i] = expf(x[i]); break;
    case 1: for (i = 0; i < n; i++) y[i] = tanhf(x[i]); break;
    case 2: for (i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i])); break;
    case 3: for (i = 0; i < n; i++) {
        float a = x[i];
        y[i] = 0.5f * a * (1.0f + tanhf(0.7978845608f * (a + 0.044715f * a * a * a)));
    } break;
    case 4: for (i = 0; i < n; i++) y[i] = erff(x[i]); break;
    case 5: for (i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f)); break;
    case 6: for (i = 0; i < n; i++) y[i] = logf(x[i]); break;
    case 7: for (i = 0; i < n; i++) y[i] = log1pf(x[i]); break;
    case 8: for (i = 0; i < n; i++) y[i] = (x[i] > 0 ? x[i] : 0.0f) + log1pf(expf(-fabsf(x[i]))); break;
    case 9: for (i = 0; i < n; i++) y[i] = expm1f(x[i]); break;
    case 10: for (i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : expm1f(x[i]); break;
    case 11: for (i = 0; i < n; i++) y[i] = sinf(x[i]); break;
    default: for (i = 0; i < n; i++) y[i] = cosf(x[i]); break;
    }
}
"""

HEADER = "| function | max ulp (sweep) | bound | inputs | vectorized ns/elem | libm ns/elem | speed-up |"

# timing inputs: uniform over [lo, hi]
INPUTS = {
    "exp": (-10, 10),
    "tanh": (-5, 5),
    "sigmoid": (-10, 10),
    "gelu_tanh": (-5, 5),
    "erf": (-3, 3),
    "gelu": (-5, 5),
    "log": (1e-3, 1e3),
    "log1p": (-0.9, 10),
    "softplus": (-10, 10),
    "expm1": (-5, 5),
    "elu": (-5, 5),
    "sin": (-100, 100),
    "cos": (-100, 100),
}


def build(source: str, flags, workdir: Path, tag: str):
    """Compile ``source`` (cdef test_vmath.CDEF) with the tests' strict flags plus ``flags``."""
    import cffi

    src, lib = workdir / f"{tag}.c", workdir / f"{tag}.so"
    src.write_text(source)
    cmd = [CC, *FLAGS, *flags, f"-I{RUNTIME}", str(src), "-o", str(lib), "-lm"]
    subprocess.run(cmd, check=True)
    ffi = cffi.FFI()
    ffi.cdef(T.CDEF)
    return ffi, ffi.dlopen(str(lib))


def time_ns(libs, which: int, x: np.ndarray, runs: int) -> list[float]:
    """Median ns per element of each lib's loop, the libs alternating in rounds."""
    samples: list[list[float]] = [[] for _ in libs]
    for lib in libs:
        T.run(lib, which, x)  # warm up: page in the output, load the code
    for _ in range(runs):
        for i, lib in enumerate(libs):
            t0 = time.perf_counter()
            T.run(lib, which, x)
            samples[i].append((time.perf_counter() - t0) / x.size * 1e9)
    return [statistics.median(s) for s in samples]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 20, help="elements per timed loop")
    ap.add_argument("--runs", type=int, default=9, help="timed rounds (median)")
    ap.add_argument("--only", nargs="*", choices=list(T.FUNCTIONS), help="these functions only")
    args = ap.parse_args()

    cc = subprocess.run([CC, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        scalar = build(T.SOURCE, (), work, "vm_scalar")
        vector = build(T.SOURCE, FAST_FLAGS, work, "vm_vector")
        libm = build(LIBM_SOURCE, FAST_FLAGS, work, "libm")
        print(f"{cpu_name()}; {cc}; {' '.join(FAST_FLAGS)}; {args.n} floats, median of {args.runs}\n")
        print(HEADER)
        print("|---" * HEADER.count(" | ") + "|---|")
        names = args.only or list(T.FUNCTIONS)
        for name in names:
            which, _, bound = T.FUNCTIONS[name]
            err = max(T.max_ulp(lib, name)[0] for lib in (scalar, vector))
            if name in ("sin", "cos"):
                bound = f"{bound} (\\|x\\| <= 2^{np.log2(T.TRIG_ULP_RANGE):.0f})"
            lo, hi = INPUTS[name]
            x = rng.uniform(lo, hi, args.n).astype(np.float32)
            vm, lm = time_ns((vector, libm), which, x, args.runs)
            print(
                f"| {name} | {err:.2f} | {bound} | [{lo:g}, {hi:g}] | {vm:.2f} | {lm:.2f} | {lm / vm:.1f}x |"
            )
        for name in (n for n in names if n in ("sin", "cos")):
            parts = []
            for s, v in zip(*(T.trig_abs_errors(lib, name) for lib in (scalar, vector))):
                hi, bound, err = s[0], s[1], max(s[2], v[2])
                parts.append(
                    f"up to 2^{np.log2(hi):.0f}: 2^{np.log2(err):.1f} (bound 2^{np.log2(bound):.0f})"
                )
            print(
                f"\n{name} beyond 2^17, absolute error (every 64th float32): {', '.join(parts)}; NaN beyond"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
