"""The ops of graphdef/ops/math.py through generated C (one shared library) against the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(11)
FLOATS = ("float32", "float64", "float16")
INTS = ("int8", "uint8", "int32", "int64")
BITS = {"int8": 8, "uint8": 8, "int32": 32, "int64": 64}


def uniform(shape, dtype, lo, hi):
    return RNG.uniform(lo, hi, shape).astype(dtype)


def ints(shape, dtype, lo=None, hi=None):
    info = np.iinfo(dtype)
    return RNG.integers(
        info.min if lo is None else lo, info.max if hi is None else hi, shape, endpoint=True, dtype=dtype
    )


def nonzero(shape, dtype):
    v = ints(shape, dtype, 0 if dtype == "uint8" else -100, 100)
    v[v == 0] = 3
    return v


CASES: list[tuple[str, object, list[np.ndarray]]] = []


def case(cid, fn, *inputs):
    CASES.append((cid, fn, list(inputs)))


SPECIALS = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, -0.3, 6e4, np.inf, -np.inf, np.nan, 7.0, -3.75])

for dt in FLOATS:
    # each unary op in its own domain, summed so one loop holds them all
    case(
        f"trig-{dt}",
        lambda x: gd.sin(x) + gd.cos(x) * gd.tan(x) + gd.atan(x) + gd.sinh(x) - gd.cosh(x) + gd.asinh(x),
        uniform((3, 4), dt, -1.4, 1.4),
    )
    case(
        f"inverse-{dt}",
        lambda x: gd.asin(x) + gd.acos(x) + gd.atanh(x) + gd.acosh(x + 2.0),
        uniform((5, 2), dt, -0.95, 0.95),
    )
    case(
        f"rounding-{dt}",
        lambda x: (gd.floor(x), gd.ceil(x), gd.round(x), gd.round(x * 10.0)),
        SPECIALS.astype(dt),
    )
    case(
        f"classify-{dt}",
        lambda x: (
            gd.isnan(x),
            gd.isinf(x),
            gd.isinf(x, detect_negative=False),
            gd.isinf(x, detect_positive=False),
            gd.isinf(x, False, False),
        ),
        SPECIALS.astype(dt),
    )
    case(
        f"outside-domain-{dt}",
        lambda x: gd.asin(x) + gd.acosh(x) + gd.atanh(x),
        np.array([-3.0, 3.0, 1.0], dt),
    )
    for fmod in (False, True):
        case(
            f"mod-{fmod}-{dt}",
            lambda a, b, fmod=fmod: gd.mod(a, b, fmod=fmod),
            uniform((2, 3, 4), dt, -9.0, 9.0),
            uniform((3, 1), dt, -4.0, 4.0),
        )
        # the ONNX edge cases: signed zeros, infinities, NaN, division by zero
        case(
            f"mod-specials-{fmod}-{dt}",
            lambda a, b, fmod=fmod: gd.mod(a, b, fmod=fmod),
            np.array(
                [0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, np.inf, -np.inf, 1.0, 1.0, np.nan, 1.0], dt
            ),
            np.array(
                [-2.0, 2.0, 2.0, -2.0, np.inf, np.inf, -np.inf, -np.inf, 2.0, 2.0, 0.0, -0.0, 2.0, np.nan], dt
            ),
        )

for dt in INTS:
    for fmod in (False, True):
        case(
            f"mod-{fmod}-{dt}",
            lambda a, b, fmod=fmod: gd.mod(a, b, fmod=fmod),
            ints((4, 5), dt),
            nonzero((5,), dt),
        )
    if dt != "uint8":
        lo = int(np.iinfo(dt).min)
        extremes = np.array([lo, lo, lo, -7, 7, 5], dt)
        case(
            f"mod-extremes-{dt}",
            lambda a, b: (gd.mod(a, b), gd.mod(a, b, fmod=True)),
            extremes,
            np.array([-1, 3, lo, 2, -2, -5], dt),
        )
    case(
        f"bitwise-{dt}",
        lambda a, b: (gd.bitwise_and(a, b), gd.bitwise_or(a, b), gd.bitwise_xor(a, b), gd.bitwise_not(a)),
        ints((3, 4), dt),
        ints((4,), dt),
    )
    bits = BITS[dt]
    counts = np.array([0, 1, bits - 1, bits, bits + 5, 3, 2, 0 if dt == "uint8" else -1], dt)
    values = ints((3, 8), dt)
    values[0, :] = np.iinfo(dt).min
    values[1, :] = np.iinfo(dt).max
    case(
        f"bitshift-{dt}",
        lambda x, s: (gd.bitshift(x, s, "left"), gd.bitshift(x, s, "right")),
        values,
        counts,
    )

for dt in FLOATS + INTS:
    x = (
        uniform((3, 70, 5), dt, 0.8, 1.25)
        if dt in FLOATS
        else ints((3, 70, 5), dt, 0 if dt == "uint8" else -4, 4)
    )
    for axis in (0, 1, 2):
        case(
            f"cumulative-axis{axis}-{dt}",
            lambda t, axis=axis: tuple(
                fn(t, axis, exclusive, reverse)
                for fn in (gd.cumsum, gd.cumprod)
                for exclusive in (False, True)
                for reverse in (False, True)
            ),
            x,
        )
case("cumsum-long-inner", lambda t: gd.cumsum(t, 0, reverse=True), uniform((3, 150), "float32", -1, 1))
case(
    "cumsum-gradient",
    lambda t: gd.gradients(gd.reduce_sum(gd.cumsum(t, 1, exclusive=True) * t), [t])[0],
    uniform((2, 6), "float64", -1, 1),
)
case(
    "compositions",
    lambda t: gd.swish(t, 0.5) + gd.softplus(t) + gd.softsign(t) + gd.reciprocal(t + 5.0),
    uniform((4, 4), "float32", -3, 3),
)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_c_matches_interpreter(cid, built, c_outputs, tol):
    for name, g, w in c_outputs(built, cid):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, equal_nan=True, **tol[w.dtype.name], err_msg=name)
            # signed zeros (mod, round) and infinities match exactly
            exact = (w == 0) | np.isinf(w)
            np.testing.assert_array_equal(np.signbit(g[exact]), np.signbit(w[exact]), err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.fixture(scope="module")
def mod_models():
    graphs = []
    for dt in INTS:
        for fmod in (False, True):
            g = gd.Graph(f"modzero-{dt}-{fmod}")
            with g:
                a = gd.placeholder("a", (3,), dt)
                b = gd.placeholder("b", (3,), dt)
                g.set_outputs(gd.mod(a, b, fmod=fmod) + a)
            graphs.append((f"z_{dt}_{int(fmod)}", g))
    return dict(zip([n for n, _ in graphs], codegen.compile_many(graphs)))


@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("fmod", [False, True])
def test_integer_mod_by_zero_is_reported(dt, fmod, mod_models):
    m = mod_models[f"z_{dt}_{int(fmod)}"]
    (ok,) = m(a=np.array([5, 6, 7], dt), b=np.array([2, 4, 3], dt)).values()
    assert ok.tolist() == [6, 8, 8]
    with pytest.raises(gd.ExecutionError, match="division by zero"):
        m(a=np.array([5, 6, 7], dt), b=np.array([2, 0, 3], dt))
