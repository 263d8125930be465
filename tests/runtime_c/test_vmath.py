"""kernels/vmath.h: the vectorizable float32 exp, expm1, log, log1p, tanh, erf, sin and cos, and
through them fc_sigmoid_f32, fc_gelu_tanh_f32, fc_gelu_f32, fc_softplus_f32 and fc_elu_f32,
against numpy (math.erf) in float64 over a dense sweep of float32 inputs (every 2^11-th bit
pattern, 2^21 inputs: subnormals, both zeros, infinities and NaNs included, plus the range
limits; for sin and cos also the float32 values next to multiples of pi/2), each within its
stated bound in units in the last place, built scalar (-O1) and vectorized (-O3 -march=native);
the two builds agree within 2 ulp (contraction into FMA), so every ISA computes one function.
sin and cos keep their ulp bound for |x| <= 2^17, an absolute error bound up to 2^23, and are
NaN beyond.
Measured maxima (-O3, AVX-512; -O1 in parentheses where larger): exp 0.95, expm1 1.40, log 0.75,
log1p 0.76, tanh 1.21, sigmoid 2.14 (results under FLT_MIN flushed to 0), gelu_tanh 1.30,
erf 2.88 (2.93), gelu 2.33, softplus 1.42 (1.43), elu 0.81 (0.84), sin 2.64, cos 2.70 ulp; sin
and cos beyond 2^17: absolute 2^-22.9 (2^-22.6) up to 2^20, 2^-18.7 (2^-14.0) up to 2^23.
bench/vmath.py prints these with timings.
"""

from __future__ import annotations

import numpy as np
import pytest

CDEF = """
void run(int which, const float *x, float *y, long n);
"""
SOURCE = r"""
#include "kernels/scalar.h"
void run(int which, const float *x, float *y, long n) {
    long i;
    switch (which) {
    case 0: for (i = 0; i < n; i++) y[i] = fc_exp_f32(x[i]); break;
    case 1: for (i = 0; i < n; i++) y[i] = fc_tanh_f32(x[i]); break;
    case 2: for (i = 0; i < n; i++) y[i] = fc_sigmoid_f32(x[i]); break;
    case 3: for (i = 0; i < n; i++) y[i] = fc_gelu_tanh_f32(x[i]); break;
    case 4: for (i = 0; i < n; i++) y[i] = fc_erf_f32(x[i]); break;
    case 5: for (i = 0; i < n; i++) y[i] = fc_gelu_f32(x[i]); break;
    case 6: for (i = 0; i < n; i++) y[i] = fc_log_f32(x[i]); break;
    case 7: for (i = 0; i < n; i++) y[i] = fc_vm_log1pf(x[i]); break;
    case 8: for (i = 0; i < n; i++) y[i] = fc_softplus_f32(x[i]); break;
    case 9: for (i = 0; i < n; i++) y[i] = fc_vm_expm1f(x[i]); break;
    case 10: for (i = 0; i < n; i++) y[i] = fc_elu_f32(x[i], 1.0f); break;
    case 11: for (i = 0; i < n; i++) y[i] = fc_sin_f32(x[i]); break;
    default: for (i = 0; i < n; i++) y[i] = fc_cos_f32(x[i]); break;
    }
}
"""


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


# which, numpy float64 reference, max ulp; gelu_tanh in ulps of max(|y|, |x|): 1 + tanh(u)
# cancels for x below about -1 (the float32 formula loses the tail whatever tanh it uses)
FUNCTIONS = {
    "exp": (0, np.exp, 1),
    "tanh": (1, np.tanh, 2),
    "sigmoid": (2, lambda x: 1 / (1 + np.exp(-x)), 3),
    "gelu_tanh": (3, _gelu_tanh, 3),
    "erf": (4, lambda x: _erf(x), 3),
    "gelu": (5, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), 3),
    "log": (6, np.log, 1),
    "log1p": (7, np.log1p, 1),
    "softplus": (8, lambda x: np.logaddexp(0.0, x), 2),
    "expm1": (9, np.expm1, 2),
    "elu": (10, lambda x: np.where(x > 0, x, np.expm1(x)), 1),  # alpha 1
    "sin": (11, np.sin, 3),  # |x| <= TRIG_ULP_RANGE
    "cos": (12, np.cos, 3),
}
RELATIVE_TO_X = {"gelu_tanh", "gelu"}
# results below FLT_MIN are 0 (the subnormal tail flushed: subnormal arithmetic is slow on x86)
FLUSHES = {"sigmoid"}
FLT_MIN = float(np.finfo(np.float32).tiny)
# sin and cos keep their ulp bound for |x| <= 2^17; beyond, (up to |x|, absolute error bound)
# pairs (the reduced argument outgrows [-pi/4, pi/4] by the rounding of |x| 2/pi); beyond 2^23,
# where float32 values are 1 or more apart, they are NaN, as at +-inf
TRIG_ULP_RANGE = 2.0**17
TRIG_ABS_ERROR = ((2.0**20, 2.0**-22), (2.0**23, 2.0**-13))
TRIG_LIMIT = 2.0**23
# f(-0) = -0
KEEPS_NEGATIVE_ZERO = {"tanh", "gelu_tanh", "erf", "log1p", "expm1", "elu", "sin"}


def _erf(x):
    from math import erf

    return np.vectorize(erf, otypes=[np.float64])(x)


def sweep() -> np.ndarray:
    bits = np.arange(0, 2**32, 2**11, dtype=np.uint64).astype(np.uint32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72283, 88.72284, -103.97207, -103.97208,
                        0.625, -0.625, 0.62499994, 1e-45, -1e-45, 1.0, -1.0, -0.99999994, -1.0000001,
                        1.4142135, 1.4142137, 0.70710677, 0.7071067, -0.29289323, -0.2928932, 0.41421357,
                        0.4142135, 1.1754942e-38, 1.1754944e-38, 3.4028235e38, -3.4028235e38, -17.5, -18.0,
                        -18.000002, 8192.0, 8388608.0, 8388609.0, -8388608.0], np.float32)  # fmt: skip
    return np.concatenate([bits.view(np.float32), special])


def near_multiples_of_half_pi(limit: float = TRIG_ULP_RANGE) -> np.ndarray:
    """The float32 values next to k pi/2 for 0 < k pi/2 <= limit, both signs: where sin or cos
    is nearest zero and the reduction has to be exact to many bits (the closest, at 252.898,
    is 4.2e-9 from 161 pi/2)."""
    k = np.arange(1, int(limit / (np.pi / 2)) + 1, dtype=np.longdouble)
    near = (k * np.longdouble("1.57079632679489661923132169163975144")).astype(np.float32)
    x = np.concatenate([near, np.nextafter(near, np.float32(0)), np.nextafter(near, np.float32(np.inf))])
    x = x[x <= limit]
    return np.concatenate([x, -x])


def inputs(name: str) -> np.ndarray:
    """Where the ulp bound of ``name`` holds: the sweep, for sin and cos the part of it within
    TRIG_ULP_RANGE and the values next to multiples of pi/2."""
    if name in ("sin", "cos"):
        x = np.concatenate([sweep(), near_multiples_of_half_pi()])
        return x[~(np.abs(x) > TRIG_ULP_RANGE)]
    return sweep()


def ulp_error(got: np.ndarray, want64: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
    """|got - want| in units of the float32 spacing at want (at max(|want|, |x|) with ``x``);
    NaN and infinities: 0 when equal, inf when not."""
    with np.errstate(all="ignore"):
        return _ulp_error(got, want64, x)


def _ulp_error(got, want64, x):
    want = want64.astype(np.float32)
    at = np.abs(want) if x is None else np.maximum(np.abs(want), np.abs(np.where(np.isfinite(x), x, 0)))
    err = np.abs(got.astype(np.float64) - want64) / np.spacing(at).astype(np.float64)
    special = ~np.isfinite(want64) | ~np.isfinite(got)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    return np.where(special, np.where(same, 0.0, np.inf), err)


VECTOR_FLAGS = ("-O3", "-march=native", "-ffp-contract=fast")


@pytest.fixture(scope="module")
def builds(c_lib):
    """(scalar build at -O1, vectorized build at -O3 -march=native)."""
    return c_lib(CDEF, SOURCE), c_lib(CDEF, SOURCE, VECTOR_FLAGS)


def run(lib, which: int, x: np.ndarray) -> np.ndarray:
    """y = function ``which`` of SOURCE over the float32 array x, through the cffi ``lib``."""
    ffi, c = lib
    assert x.dtype == np.float32
    y = np.empty_like(x)
    c.run(which, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y), x.size)
    return y


def max_ulp(lib, name: str) -> tuple[float, float]:
    """(largest error in ulp over inputs(name) where the ulp bound applies, its argument)."""
    which, ref, _ = FUNCTIONS[name]
    x = inputs(name)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    got = run(lib, which, x)
    err = ulp_error(got, want, x if name in RELATIVE_TO_X else None)
    if name in FLUSHES:
        err = np.where((got == 0) & (np.abs(want) < FLT_MIN), 0.0, err)
    worst = int(np.argmax(err))
    return float(err[worst]), float(x[worst])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_ulp_bound_over_a_dense_sweep(builds, name):
    bound = FUNCTIONS[name][2]
    for lib in builds:
        err, at = max_ulp(lib, name)
        assert err <= bound, f"{name}({at!r}): {err} ulp"
    zeros = np.array([0.0, -0.0], np.float32)
    if name in KEEPS_NEGATIVE_ZERO:
        for lib in builds:
            assert np.array_equal(np.signbit(run(lib, FUNCTIONS[name][0], zeros)), [False, True])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vectorized_build_gives_the_scalar_bits(builds, name):
    which = FUNCTIONS[name][0]
    x = inputs(name)
    a, b = run(builds[0], which, x), run(builds[1], which, x)
    # contraction into FMA may move a result by an ulp (of max(|y|, |x|) for gelu_tanh)
    with np.errstate(all="ignore"):
        err = ulp_error(a, b.astype(np.float64), x if name in RELATIVE_TO_X else None)
    assert err.max() <= 2, x[err > 2][:5]


def trig_abs_errors(lib, name: str) -> list[tuple[float, float, float, float]]:
    """sin or cos beyond TRIG_ULP_RANGE, per TRIG_ABS_ERROR tier over every 64th float32 of
    both signs: (up to |x|, bound, largest absolute error, its argument)."""
    which, ref, _ = FUNCTIONS[name]
    out, lo = [], TRIG_ULP_RANGE
    for hi, bound in TRIG_ABS_ERROR:
        x = np.arange(np.float32(lo).view(np.int32), np.float32(hi).view(np.int32) + 1, 64, dtype=np.int32)
        x = np.concatenate([x.view(np.float32), -x.view(np.float32)])
        err = np.abs(run(lib, which, x) - ref(x.astype(np.float64)))
        worst = int(np.argmax(err))
        out.append((hi, bound, float(err[worst]), float(x[worst])))
        lo = hi
    return out


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_beyond_the_ulp_range(builds, name):
    """2^17 < |x| <= 2^23: absolute error within TRIG_ABS_ERROR; beyond 2^23, at +-inf and
    NaN: NaN."""
    huge = np.array([np.nextafter(np.float32(TRIG_LIMIT), np.float32(np.inf)), 1e10, 3.4028235e38, np.inf],
                    np.float32)  # fmt: skip
    huge = np.concatenate([huge, -huge, np.array([np.nan], np.float32)])
    for lib in builds:
        for _, bound, err, at in trig_abs_errors(lib, name):
            assert err <= bound, f"{name}({at!r}): {err}"
        assert np.isnan(run(lib, FUNCTIONS[name][0], huge)).all()


def test_sigmoid_flushes_below_flt_min_and_silu_stays_normal(builds):
    """sigmoid(x) for x below -87.33 (a true value under FLT_MIN) is 0, above it a normal float;
    x * sigmoid(x) never makes a subnormal."""
    x = np.array([-87.3, -87.33, -87.34, -90.0, -103.0, -200.0, -np.inf], np.float32)
    for lib in builds:
        y = run(lib, FUNCTIONS["sigmoid"][0], x)
        assert (y[:2] >= FLT_MIN).all() and (y[2:] == 0).all(), y
        silu = x[:-1] * y[:-1]  # -inf * 0 is NaN
        assert not ((silu != 0) & (np.abs(silu) < FLT_MIN)).any()
