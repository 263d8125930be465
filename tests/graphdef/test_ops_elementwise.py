"""Elementwise ops against per-element Python math, over shapes, dtypes and broadcasting."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest

import graphdef as gd

BROADCAST = [
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((3,), (2, 3)),
    ((4, 1, 3), (2, 1)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((1,), (5,)),
    ((2, 1, 4), (1, 3, 1)),
    ((0, 3), (3,)),
    ((1, 1, 1, 2), (2, 1)),
]


def _values(rng, shape, dtype, positive=False, nonzero=False):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "f":
        v = rng.uniform(0.1, 3.0, shape) if positive else rng.uniform(-3.0, 3.0, shape)
    elif dt.kind == "u":
        v = rng.integers(1 if nonzero else 0, 12, shape)
    else:
        v = rng.integers(1 if positive else -9, 10, shape)
        if nonzero:
            v[v == 0] = 3
    return np.asarray(v).astype(dt)


def _elementwise(fn, *arrays, out_dtype):
    """Apply a scalar Python function to each broadcast element tuple."""
    bs = np.broadcast_arrays(*arrays)
    out = np.empty(bs[0].shape, dtype=object)
    for idx in np.ndindex(out.shape):
        out[idx] = fn(*(_py(b[idx]) for b in bs))
    return out.astype(out_dtype)


def _py(v):
    return v.item() if isinstance(v, np.generic) else v


def _trunc_div(a, b):
    if isinstance(a, int):
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    return a / b


BINARY = {
    "add": (gd.add, operator.add, ("float32", "float16", "float64", "int8", "uint8", "int32", "int64")),
    "sub": (gd.sub, operator.sub, ("float32", "float64", "int32", "int64")),
    "mul": (gd.mul, operator.mul, ("float32", "float16", "int32", "int64")),
    "div": (gd.div, _trunc_div, ("float32", "float64", "int32", "int64")),
    "maximum": (gd.maximum, max, ("float32", "int8", "int64", "uint8")),
    "minimum": (gd.minimum, min, ("float32", "float16", "int32")),
}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST, ids=str)
def test_binary_arithmetic(op, shapes, rng, run_op, tol):
    builder, scalar, dts = BINARY[op]
    for dt in dts:
        a = _values(rng, shapes[0], dt)
        b = _values(rng, shapes[1], dt, nonzero=op == "div")
        got = run_op(builder, a, b)
        want = _elementwise(
            scalar,
            a.astype(np.float64) if dt.startswith("float") else a,
            b.astype(np.float64) if dt.startswith("float") else b,
            out_dtype=dt,
        )
        assert got.dtype == np.dtype(dt) and got.shape == np.broadcast_shapes(a.shape, b.shape)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol(dt))


def test_integer_arithmetic_wraps_like_c(run_op):
    a = np.array([120, -128, 7], np.int8)
    b = np.array([10, -1, -2], np.int8)
    np.testing.assert_array_equal(run_op(gd.add, a, b), np.array([-126, 127, 5], np.int8))
    np.testing.assert_array_equal(
        run_op(gd.div, np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)), [3, -3, -3, 3]
    )


def test_integer_division_by_zero_is_an_error(run_op):
    with pytest.raises(gd.ExecutionError, match="division by zero"):
        run_op(gd.div, np.array([1, 2], np.int32), np.array([1, 0], np.int32))


@pytest.mark.parametrize("shapes", BROADCAST[:6], ids=str)
@pytest.mark.parametrize("dt", ["float32", "float64", "int64"])
def test_pow(shapes, dt, rng, run_op, tol):
    a = _values(rng, shapes[0], dt, positive=True)
    b = _values(rng, shapes[1], dt) if dt.startswith("float") else rng.integers(0, 4, shapes[1]).astype(dt)
    got = run_op(gd.pow, a, b)
    want = _elementwise(
        lambda x, y: x**y,
        a.astype(object) if dt == "int64" else a.astype(np.float64),
        b.astype(object) if dt == "int64" else b.astype(np.float64),
        out_dtype=dt,
    )
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol(dt))


COMPARE = {
    "equal": (gd.equal, operator.eq),
    "less": (gd.less, operator.lt),
    "greater": (gd.greater, operator.gt),
    "less_equal": (gd.less_equal, operator.le),
    "greater_equal": (gd.greater_equal, operator.ge),
}


@pytest.mark.parametrize("op", sorted(COMPARE))
@pytest.mark.parametrize("dt", ["float32", "int32", "uint8", "float16"])
@pytest.mark.parametrize("shapes", BROADCAST[:8], ids=str)
def test_comparisons(op, dt, shapes, rng, run_op):
    builder, scalar = COMPARE[op]
    a = _values(rng, shapes[0], dt)
    b = a[..., :1] if a.ndim and shapes[0] == shapes[1] else _values(rng, shapes[1], dt)
    got = run_op(builder, a, b)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, _elementwise(scalar, a, b, out_dtype=bool))


def test_equal_on_bool(run_op):
    a = np.array([True, False, True])
    np.testing.assert_array_equal(run_op(gd.equal, a, np.array([True])), [True, False, True])


LOGICAL = {
    "logical_and": (gd.logical_and, lambda x, y: x and y),
    "logical_or": (gd.logical_or, lambda x, y: x or y),
    "logical_xor": (gd.logical_xor, lambda x, y: x != y),
}


@pytest.mark.parametrize("op", sorted(LOGICAL))
@pytest.mark.parametrize("shapes", BROADCAST, ids=str)
def test_logical(op, shapes, rng, run_op):
    builder, scalar = LOGICAL[op]
    a, b = rng.random(shapes[0]) < 0.5, rng.random(shapes[1]) < 0.5
    np.testing.assert_array_equal(run_op(builder, a, b), _elementwise(scalar, a, b, out_dtype=bool))


def test_logical_not(rng, run_op):
    a = rng.random((3, 4)) < 0.5
    np.testing.assert_array_equal(run_op(gd.logical_not, a), _elementwise(lambda x: not x, a, out_dtype=bool))


@pytest.mark.parametrize(
    "shapes",
    [((2, 3), (2, 3), (2, 3)), ((3,), (2, 3), ()), ((2, 1), (1, 4), (4,)), ((), (2,), (2,))],
    ids=str,
)
@pytest.mark.parametrize("dt", ["float32", "int64", "bool"])
def test_where(shapes, dt, rng, run_op):
    c = rng.random(shapes[0]) < 0.5
    a, b = _values(rng, shapes[1], dt), _values(rng, shapes[2], dt)
    want = _elementwise(lambda cc, x, y: x if cc else y, c, a, b, out_dtype=dt)
    np.testing.assert_array_equal(run_op(gd.where, c, a, b), want)


def _gelu_tanh(x):
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


UNARY = {
    "neg": (gd.neg, operator.neg, ("float32", "int8", "int32", "int64", "float16"), False),
    "abs": (gd.abs, abs, ("float32", "int32", "uint8", "int64"), False),
    "sign": (gd.sign, lambda x: (x > 0) - (x < 0), ("float32", "int32", "int8"), False),
    "exp": (gd.exp, math.exp, ("float32", "float16", "float64"), False),
    "log": (gd.log, math.log, ("float32", "float64"), True),
    "sqrt": (gd.sqrt, math.sqrt, ("float32", "float16"), True),
    "rsqrt": (gd.rsqrt, lambda x: 1 / math.sqrt(x), ("float32", "float64"), True),
    "tanh": (gd.tanh, math.tanh, ("float32", "float16"), False),
    "sigmoid": (gd.sigmoid, lambda x: 1 / (1 + math.exp(-x)), ("float32", "float64", "float16"), False),
    "relu": (gd.relu, lambda x: x if x > 0 else 0, ("float32", "int32", "int8", "float16"), False),
    "erf": (gd.erf, math.erf, ("float32", "float64"), False),
    "gelu": (gd.gelu, lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))), ("float32", "float64"), False),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 1, 4), (0, 2)], ids=str)
def test_unary(op, shape, rng, run_op, tol):
    builder, scalar, dts, positive = UNARY[op]
    for dt in dts:
        x = _values(rng, shape, dt, positive=positive)
        got = run_op(builder, x)
        exact = dt.startswith("float")
        want = _elementwise(scalar, x.astype(np.float64) if exact else x.astype(object), out_dtype=dt)
        assert got.dtype == np.dtype(dt) and got.shape == x.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol(dt))


def test_unary_extremes(run_op):
    x = np.array([-100.0, -20.0, 0.0, 20.0, 100.0], np.float32)
    np.testing.assert_allclose(run_op(gd.sigmoid, x), [0, 2.0611537e-09, 0.5, 1, 1], rtol=1e-6, atol=1e-30)
    assert np.isnan(run_op(gd.log, np.array([-1.0], np.float32)))[0]
    np.testing.assert_array_equal(run_op(gd.exp, np.array([1000.0], np.float32)), [np.inf])


@pytest.mark.parametrize("alpha", [0.01, 0.2])
def test_leaky_relu_and_elu(alpha, rng, run_op):
    x = rng.uniform(-3, 3, (4, 5)).astype(np.float32)
    np.testing.assert_allclose(
        run_op(gd.leaky_relu, x, alpha=alpha),
        _elementwise(lambda v: v if v > 0 else alpha * v, x, out_dtype=np.float32),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        run_op(gd.elu, x, alpha=alpha),
        _elementwise(lambda v: v if v > 0 else alpha * (math.exp(v) - 1), x, out_dtype=np.float32),
        rtol=1e-6,
    )


def test_gelu_tanh(rng, run_op):
    x = rng.uniform(-4, 4, (3, 7)).astype(np.float32)
    np.testing.assert_allclose(
        run_op(gd.gelu, x, approximate="tanh"),
        _elementwise(_gelu_tanh, x.astype(np.float64), out_dtype=np.float32),
        rtol=1e-6,
        atol=1e-7,
    )


@pytest.mark.parametrize(
    "dt,lo,hi",
    [
        ("float32", -1.0, 0.5),
        ("float32", 0.0, math.inf),
        ("float32", 1.0, -1.0),
        ("int32", 2.5, -1.5),
        ("int32", -2, 3),
        ("float16", -0.5, 0.5),
        ("uint8", 2, 7),
    ],
)
def test_clip(dt, lo, hi, rng, run_op):
    x = _values(rng, (3, 4), dt)
    want = _elementwise(lambda v: min(max(v, lo), hi), x, out_dtype=dt)
    np.testing.assert_array_equal(run_op(gd.clip, x, min=lo, max=hi), want)
    assert np.isnan(run_op(gd.clip, np.array([np.nan], np.float32), min=0.0, max=1.0))[0]


CASTS = [
    ("float32", "int32", [1.7, -1.7, 0.2, -0.0], [1, -1, 0, 0]),
    ("float32", "uint8", [3.9, 200.5, 0.0, 1.0], [3, 200, 0, 1]),
    ("float32", "bool", [0.0, -0.0, 2.0, np.nan], [False, False, True, True]),
    ("int64", "float32", [1, -5, 2**24, 7], [1.0, -5.0, 16777216.0, 7.0]),
    ("int32", "int8", [1, 127, -128, 5], [1, 127, -128, 5]),
    ("bool", "float16", [True, False, True, True], [1.0, 0.0, 1.0, 1.0]),
    ("float64", "float16", [1.0, 65504.0, 1e-8, 0.5], [1.0, 65504.0, 0.0, 0.5]),
    ("uint8", "int64", [0, 255, 17, 3], [0, 255, 17, 3]),
    ("int32", "bool", [0, 3, -1, 0], [False, True, True, False]),
]


@pytest.mark.parametrize("src,dst,values,want", CASTS)
def test_cast(src, dst, values, want, run_op):
    got = run_op(gd.cast, np.array(values, src), dtype=dst)
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got, np.array(want, dst))


def test_python_scalars_take_the_tensor_dtype(run_op):
    assert run_op(lambda x: x + 1, np.array([1, 2], np.int8)).dtype == np.int8
    assert run_op(lambda x: 2.5 * x, np.array([1, 2], np.float16)).dtype == np.float16
    np.testing.assert_array_equal(run_op(lambda x: 1 - x, np.array([1, 2], np.int64)), [0, -1])
    np.testing.assert_allclose(run_op(lambda x: 1.0 / x, np.array([4.0], np.float32)), [0.25])


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda x, y: x + y, "cannot broadcast shapes"),
        (lambda x, y: gd.add(x, gd.cast(y, "int32")), "dtypes differ"),
        (lambda x, y: gd.logical_and(x, y), "dtype float32"),
        (lambda x, y: gd.exp(gd.cast(x, "int32")), "dtype int32"),
        (lambda x, y: gd.where(x, x, y), "condition"),
    ],
)
def test_bad_operands_raise_at_build_time(build, match):
    with gd.Graph("bad"):
        x = gd.placeholder("x", (2, 3))
        y = gd.placeholder("y", (4,))
        with pytest.raises(gd.ShapeError, match=match) as err:
            build(x, y)
    assert "(op " in str(err.value) and "\n" not in str(err.value)


def test_shape_error_names_node_op_and_both_shapes():
    with gd.Graph("bad"):
        x = gd.placeholder("x", (2, 3))
        y = gd.placeholder("y", (4,))
        with pytest.raises(gd.ShapeError) as err:
            gd.add(x, y, name="sum")
    msg = str(err.value)
    assert "node 'sum'" in msg and "op add" in msg and "float32[2,3]" in msg and "float32[4]" in msg


def test_int_tensor_with_fractional_scalar_is_refused():
    with gd.Graph("bad"):
        x = gd.placeholder("x", (2,), "int32")
        with pytest.raises(gd.ShapeError, match="float scalar 1.5"):
            _ = x + 1.5
