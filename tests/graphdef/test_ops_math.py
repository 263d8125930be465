"""More elementwise math, bitwise and cumulative ops against per-element Python, plus gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphdef as gd

GRADS_TESTED = {
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "mod",
    "cumsum",
}

FLOATS = ("float32", "float64", "float16")
INTS = ("int8", "uint8", "int32", "int64")


def _python(fn, *arrays, out_dtype):
    """Apply a scalar Python function to each broadcast element tuple."""
    bs = np.broadcast_arrays(*arrays)
    out = np.empty(bs[0].shape, dtype=object)
    for idx in np.ndindex(out.shape):
        out[idx] = fn(*(_py(b[idx]) for b in bs))
    return out.astype(out_dtype)


def _py(v):
    return v.item() if isinstance(v, np.generic) else v


def _round_half_even(v):
    return v if not math.isfinite(v) else float(round(v))  # Python's round: halves to even


# name -> (builder, Python function, domain of the random inputs)
UNARY = {
    "sin": (gd.sin, math.sin, (-4.0, 4.0)),
    "cos": (gd.cos, math.cos, (-4.0, 4.0)),
    "tan": (gd.tan, math.tan, (-1.4, 1.4)),
    "asin": (gd.asin, math.asin, (-0.99, 0.99)),
    "acos": (gd.acos, math.acos, (-0.99, 0.99)),
    "atan": (gd.atan, math.atan, (-5.0, 5.0)),
    "sinh": (gd.sinh, math.sinh, (-3.0, 3.0)),
    "cosh": (gd.cosh, math.cosh, (-3.0, 3.0)),
    "asinh": (gd.asinh, math.asinh, (-5.0, 5.0)),
    "acosh": (gd.acosh, math.acosh, (1.01, 5.0)),
    "atanh": (gd.atanh, math.atanh, (-0.99, 0.99)),
    "floor": (gd.floor, math.floor, (-5.0, 5.0)),
    "ceil": (gd.ceil, math.ceil, (-5.0, 5.0)),
    "round": (gd.round, _round_half_even, (-5.0, 5.0)),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4), (0, 2)], ids=str)
def test_float_unary(op, dt, shape, rng, run_op, tol):
    builder, scalar, (lo, hi) = UNARY[op]
    x = rng.uniform(lo, hi, shape).astype(dt)
    got = run_op(builder, x)
    want = _python(scalar, x.astype(np.float64), out_dtype=dt)
    assert got.dtype == np.dtype(dt) and got.shape == shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol(dt))


@pytest.mark.parametrize("op", sorted(UNARY))
def test_float_unary_refuses_integers(op):
    with gd.Graph("t"), pytest.raises(gd.ShapeError, match=f"op {op}.*expected one of float16"):
        UNARY[op][0](gd.placeholder("x", (2,), "int32"))


def test_round_halves_to_even_and_keeps_specials(run_op):
    x = np.array(
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 2.3, -4.5, 1e30, np.inf, -np.inf, np.nan, -0.3],
        np.float32,
    )
    got = run_op(gd.round, x)
    want = [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, 2.0, -4.0, 1e30, np.inf, -np.inf, np.nan, -0.0]
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert np.signbit(got[-1]) and np.signbit(got[3])


def test_floor_ceil_specials(run_op):
    x = np.array([-0.0, np.inf, -np.inf, np.nan, -1.5, 1.5], np.float64)
    np.testing.assert_array_equal(run_op(gd.floor, x), [-0.0, np.inf, -np.inf, np.nan, -2.0, 1.0])
    np.testing.assert_array_equal(run_op(gd.ceil, x), [-0.0, np.inf, -np.inf, np.nan, -1.0, 2.0])


def test_inverse_functions_outside_their_domain_give_nan(run_op):
    x = np.array([-2.0, 2.0], np.float32)
    for fn in (gd.asin, gd.acos, gd.atanh):
        assert np.isnan(run_op(fn, x)).all()
    assert np.isnan(run_op(gd.acosh, np.array([0.5, -1.0], np.float32))).all()
    np.testing.assert_array_equal(run_op(gd.atanh, np.array([1.0, -1.0], np.float64)), [np.inf, -np.inf])


# ----------------------------------------------------------------------------- isnan, isinf
SPECIALS = np.array([1.0, np.nan, np.inf, -np.inf, -0.0, 65504.0, -3.0])


@pytest.mark.parametrize("dt", FLOATS)
def test_isnan(dt, run_op):
    got = run_op(gd.isnan, SPECIALS.astype(dt))
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, [False, True, False, False, False, False, False])


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("pos", [True, False])
@pytest.mark.parametrize("neg", [True, False])
def test_isinf(dt, pos, neg, run_op):
    got = run_op(gd.isinf, SPECIALS.astype(dt), detect_positive=pos, detect_negative=neg)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, [False, False, pos, neg, False, False, False])


def test_isnan_isinf_refuse_integers():
    with gd.Graph("t"):
        x = gd.placeholder("x", (2,), "int64")
        for fn in (gd.isnan, gd.isinf):
            with pytest.raises(gd.ShapeError, match="expected one of float16"):
                fn(x)


# ----------------------------------------------------------------------------- mod
def _py_mod(a, b):
    """Python's %: sign of the divisor; floats follow np.mod's special cases."""
    if isinstance(a, int):
        return a % b
    if b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    if math.isinf(b):
        return a if a == 0 or (a < 0) == (b < 0) else b
    r = math.fmod(a, b)
    return r + b if r and (r < 0) != (b < 0) else (r if r else math.copysign(0.0, b))


def _py_fmod(a, b):
    """C's fmod / %: sign of the dividend."""
    if isinstance(a, int):
        q = abs(a) // abs(b)
        return a - (q if (a < 0) == (b < 0) else -q) * b
    if b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    return math.fmod(a, b)


def _mod_values(rng, shape, dt):
    if dt in FLOATS:
        return rng.uniform(-9.0, 9.0, shape).astype(dt)
    lo = 0 if dt == "uint8" else -100
    v = rng.integers(lo, 101, shape).astype(dt)
    v[v == 0] = 7
    return v


@pytest.mark.parametrize("fmod", [False, True])
@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((4, 1, 3), (2, 1)), ((), (5,))], ids=str)
def test_mod(fmod, dt, shapes, rng, run_op, tol):
    a = _mod_values(rng, shapes[0], dt)
    b = _mod_values(rng, shapes[1], dt)
    got = run_op(gd.mod, a, b, fmod=fmod)
    wide = (lambda v: v.astype(np.float64)) if dt in FLOATS else (lambda v: v.astype(object))
    want = _python(_py_fmod if fmod else _py_mod, wide(a), wide(b), out_dtype=dt)
    assert got.dtype == np.dtype(dt) and got.shape == np.broadcast_shapes(a.shape, b.shape)
    # float16 results are within one rounding of the remainder of the float16 inputs
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol(dt))


def test_mod_float_special_cases(run_op):
    a = np.array([0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, np.inf, -np.inf, 1.0, 1.0, np.nan, 1.0])
    b = np.array([-2.0, 2.0, 2.0, -2.0, np.inf, np.inf, -np.inf, -np.inf, 2.0, 2.0, 0.0, -0.0, 2.0, np.nan])
    got = run_op(gd.mod, a, b)
    np.testing.assert_array_equal(got[:8], [0.0, 0.0, 0.0, 0.0, np.inf, 3.0, -1.0, -np.inf])
    np.testing.assert_array_equal(np.signbit(got[:4]), [True, False, False, True])
    assert np.isnan(got[8:]).all()
    f = run_op(gd.mod, a, b, fmod=True)
    np.testing.assert_array_equal(f[4:8], [-3.0, 3.0, -1.0, 1.0])
    assert np.isnan(f[8:]).all()


def test_integer_mod_extremes_and_zero(run_op):
    a = np.array([-128, -128, 127, -7, 7], np.int8)
    b = np.array([-1, 3, -128, 2, -2], np.int8)
    np.testing.assert_array_equal(run_op(gd.mod, a, b), [0, 1, -1, 1, -1])
    np.testing.assert_array_equal(run_op(gd.mod, a, b, fmod=True), [0, -2, 127, -1, 1])
    big = np.array([np.iinfo(np.int64).min], np.int64)
    np.testing.assert_array_equal(run_op(gd.mod, big, np.array([-1], np.int64)), [0])
    with pytest.raises(gd.ExecutionError, match="modulo by zero"):
        run_op(gd.mod, np.array([1, 2], np.int32), np.array([1, 0], np.int32))


def test_mod_python_scalar_and_attribute(run_op):
    g = gd.Graph("t")
    with g:
        x = gd.placeholder("x", (4,), "int32")
        y = gd.mod(x, 3)
        z = gd.mod(-7, x, fmod=True)
    xv = np.array([1, 2, -3, -4], np.int32)
    got = gd.run(g, {"x": xv}, [y, z])
    np.testing.assert_array_equal(got[0], [1, 2, 0, 2])
    np.testing.assert_array_equal(got[1], [0, -1, -1, -3])
    assert g.node(y.name).attrs["fmod"] is False


def test_mod_refuses_mixed_dtypes():
    with gd.Graph("t"), pytest.raises(gd.ShapeError, match="dtypes differ"):
        gd.mod(gd.placeholder("a", (2,), "int32"), gd.placeholder("b", (2,), "int64"))


# ----------------------------------------------------------------------------- bitwise
BITS = {"int8": 8, "uint8": 8, "int32": 32, "int64": 64}


def _ints(rng, shape, dt):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt)


def _wrap(v, dt):
    """Python int -> the value of dtype ``dt`` with the same low bits."""
    bits = BITS[dt]
    v &= (1 << bits) - 1
    return v - (1 << bits) if np.iinfo(dt).min < 0 and v >> (bits - 1) else v


@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize(
    "op",
    [
        (gd.bitwise_and, lambda a, b: a & b),
        (gd.bitwise_or, lambda a, b: a | b),
        (gd.bitwise_xor, lambda a, b: a ^ b),
    ],
    ids=["and", "or", "xor"],
)
def test_bitwise_binary(dt, op, rng, run_op):
    builder, scalar = op
    a, b = _ints(rng, (3, 4), dt), _ints(rng, (4,), dt)
    got = run_op(builder, a, b)
    assert got.dtype == np.dtype(dt)
    np.testing.assert_array_equal(got, _python(lambda x, y: _wrap(scalar(x, y), dt), a, b, out_dtype=dt))


@pytest.mark.parametrize("dt", INTS)
def test_bitwise_not(dt, rng, run_op):
    a = _ints(rng, (2, 5), dt)
    np.testing.assert_array_equal(
        run_op(gd.bitwise_not, a), _python(lambda x: _wrap(~x, dt), a, out_dtype=dt)
    )


def _py_shift(x, s, direction, dt):
    bits = BITS[dt]
    if s < 0 or s >= bits:
        return -1 if direction == "right" and x < 0 else 0
    return _wrap(x << s, dt) if direction == "left" else x >> s  # Python's >> is arithmetic


@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("direction", ["left", "right"])
def test_bitshift(dt, direction, rng, run_op):
    bits = BITS[dt]
    x = _ints(rng, (3, 8), dt)
    lo = 0 if dt == "uint8" else -3
    s = rng.integers(lo, min(bits + 4, np.iinfo(dt).max), (8,)).astype(dt)
    s[:3] = [0, bits - 1, bits]
    got = run_op(gd.bitshift, x, s, direction=direction)
    want = _python(lambda a, b: _py_shift(a, b, direction, dt), x, s, out_dtype=dt)
    np.testing.assert_array_equal(got, want)


def test_bitshift_examples(run_op):
    x = np.array([1, 4, -8, -8, 64], np.int8)
    y = np.array([1, 1, 1, 9, 1], np.int8)
    np.testing.assert_array_equal(run_op(gd.bitshift, x, y, direction="right"), [0, 2, -4, -1, 32])
    np.testing.assert_array_equal(run_op(gd.bitshift, x, y, direction="left"), [2, 8, -16, 0, -128])
    with gd.Graph("t"), pytest.raises(gd.AttrError, match="must be one of left, right"):
        gd.bitshift(gd.placeholder("x", (2,), "uint8"), 1, direction="up")


def test_bitwise_ops_refuse_floats_and_bools():
    with gd.Graph("t"):
        f = gd.placeholder("f", (2,))
        b = gd.placeholder("b", (2,), "bool")
        for fn in (gd.bitwise_and, gd.bitwise_or, gd.bitwise_xor, gd.bitshift):
            with pytest.raises(gd.ShapeError, match="expected one of int8"):
                fn(f, f)
        with pytest.raises(gd.ShapeError, match="expected one of int8"):
            gd.bitwise_not(b)


# ----------------------------------------------------------------------------- cumulative
def _py_cumulative(x, axis, exclusive, reverse, op, identity):
    x = np.moveaxis(x, axis, -1)
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape[:-1]):
        row = [_py(v) for v in x[idx]]
        order = range(len(row) - 1, -1, -1) if reverse else range(len(row))
        acc = identity
        for k in order:
            if exclusive:
                out[idx + (k,)], acc = acc, op(acc, row[k])
            else:
                acc = op(acc, row[k])
                out[idx + (k,)] = acc
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative(op, dt, axis, exclusive, reverse, rng, run_op, tol):
    shape = (3, 4, 2)
    if dt in FLOATS:
        x = rng.uniform(0.5, 1.5, shape).astype(dt)
    else:
        x = rng.integers(0 if dt == "uint8" else -3, 4, shape).astype(dt)
    got = run_op(getattr(gd, op), x, axis=axis, exclusive=exclusive, reverse=reverse)
    fold, identity = (lambda a, b: a + b, 0) if op == "cumsum" else (lambda a, b: a * b, 1)
    exact = _py_cumulative(
        x.astype(np.float64) if dt in FLOATS else x.astype(object), axis, exclusive, reverse, fold, identity
    )
    want = (
        exact.astype(np.float64)
        if dt in FLOATS
        else np.vectorize(lambda v: _wrap(v, dt), otypes=[object])(exact)
    )
    assert got.dtype == np.dtype(dt) and got.shape == shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol(dt))


def test_cumulative_examples_and_wrapping(run_op):
    x = np.array([1.0, 2.0, 3.0], np.float32)
    assert run_op(gd.cumsum, x).tolist() == [1, 3, 6]
    assert run_op(gd.cumsum, x, exclusive=True).tolist() == [0, 1, 3]
    assert run_op(gd.cumsum, x, reverse=True).tolist() == [6, 5, 3]
    assert run_op(gd.cumsum, x, exclusive=True, reverse=True).tolist() == [5, 3, 0]
    assert run_op(gd.cumprod, x).tolist() == [1, 2, 6]
    assert run_op(gd.cumprod, x, exclusive=True, reverse=True).tolist() == [6, 3, 1]
    big = np.array([100, 100, 100], np.int8)
    np.testing.assert_array_equal(run_op(gd.cumsum, big), [100, -56, 44])
    np.testing.assert_array_equal(run_op(gd.cumprod, big), [100, 16, 64])
    assert run_op(gd.cumsum, np.zeros((2, 0), np.float32), axis=1).shape == (2, 0)


def test_cumulative_axis_is_checked_and_resolved():
    g = gd.Graph("t")
    with g:
        x = gd.placeholder("x", (2, 3))
        y = gd.cumsum(x, axis=-1)
        with pytest.raises(gd.ShapeError, match="axis 2 is out of range for rank 2"):
            gd.cumprod(x, axis=2)
        with pytest.raises(gd.ShapeError, match="expected one of"):
            gd.cumsum(gd.placeholder("b", (2,), "bool"))
    assert g.node(y.name).attrs["axis"] == 1


def test_cumprod_gradient_is_refused():
    with gd.Graph("t"):
        x = gd.placeholder("x", (3,), "float64")
        loss = gd.reduce_sum(gd.cumprod(x))
        with pytest.raises(gd.FlowcError, match="cumprod"):
            gd.gradients(loss, [x])


def test_compositions(run_op, tol):
    x = np.array([-30.0, -1.0, 0.0, 2.0, 40.0], np.float32)
    np.testing.assert_allclose(run_op(gd.reciprocal, np.array([2.0, -4.0], np.float32)), [0.5, -0.25])
    np.testing.assert_allclose(
        run_op(gd.softplus, x), np.logaddexp(0, x.astype(np.float64)), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(run_op(gd.softsign, x), x / (1 + np.abs(x)), rtol=1e-6)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(run_op(gd.swish, x), x64 / (1 + np.exp(-x64)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        run_op(gd.swish, x, alpha=0.5), x64 / (1 + np.exp(-0.5 * x64)), rtol=1e-6, atol=1e-7
    )


# ----------------------------------------------------------------------------- gradients
def check_gradients(build, *arrays, eps=1e-6, rtol=1e-5, atol=1e-8):
    """gd.gradients of sum(w * build(...)) against central differences, float64 inputs."""
    rng = np.random.default_rng(0)
    wrt = [i for i, a in enumerate(arrays) if a.dtype == np.float64]
    g = gd.Graph("grad")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
        out = build(*xs)
        loss = gd.reduce_sum(out * gd.constant(rng.uniform(0.5, 1.5, out.shape)))
        grads = gd.gradients(loss, [xs[i] for i in wrt])
    gd.verify(g)
    feeds = {f"in{i}": a for i, a in enumerate(arrays)}
    for i, got in zip(wrt, gd.run(g, feeds, list(grads))):
        x = arrays[i]
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[idx] += eps
            minus[idx] -= eps
            up = gd.run(g, {**feeds, f"in{i}": plus}, [loss])[0]
            down = gd.run(g, {**feeds, f"in{i}": minus}, [loss])[0]
            numeric[idx] = (up - down) / (2 * eps)
        assert got.shape == x.shape and got.dtype == x.dtype
        np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol, err_msg=f"input {i}")


@pytest.mark.parametrize("op", sorted(set(UNARY) & GRADS_TESTED))
def test_unary_gradients(op):
    builder, _, (lo, hi) = UNARY[op]
    x = np.random.default_rng(5).uniform(lo, hi, (2, 3))
    check_gradients(builder, x)


@pytest.mark.parametrize("fmod", [False, True])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((), (4,))], ids=str)
def test_mod_gradient(fmod, shapes):
    rng = np.random.default_rng(9)
    a = rng.uniform(-5.0, 5.0, shapes[0])
    b = rng.choice([-1.0, 1.0], shapes[1]) * rng.uniform(0.7, 2.0, shapes[1])
    # keep a / b away from integers, where the remainder jumps
    q = a / np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape))
    assert np.all(np.abs(q - np.round(q)) > 1e-3)
    check_gradients(lambda x, y: gd.mod(x, y, fmod=fmod), a, b)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_gradient(axis, exclusive, reverse):
    x = np.random.default_rng(3).uniform(-1.0, 1.0, (3, 4))
    check_gradients(lambda t: gd.cumsum(t, axis, exclusive, reverse), x)
