"""Every op of graphdef/ops/products.py, conv.py, pool.py and norm.py against an independent
numpy oracle.

The oracles here follow the ONNX definitions directly: explicit loops over output positions
and kernel offsets for windowed ops, per-element source coordinates for resize, einsum for
products, float64 for everything. They share no code with the op records' ``ref`` functions.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import graphdef as gd

FLOATS = ("float32", "float16", "float64")
TOL = {
    "float16": {"rtol": 5e-3, "atol": 5e-3},
    "float32": {"rtol": 2e-5, "atol": 2e-5},
    "float64": {"rtol": 1e-10, "atol": 1e-12},
}
RNG = np.random.default_rng(0)


def rand(shape, dtype="float32", lo=-2.0, hi=2.0):
    if np.dtype(dtype).kind == "f":
        return RNG.uniform(lo, hi, shape).astype(dtype)
    return RNG.integers(int(lo), int(hi) + 1, shape).astype(dtype)


def run(fn, *arrays, **attrs):
    """Build ``fn(placeholders..., **attrs)`` in a fresh graph, verify it and run it."""
    g = gd.Graph("t")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
        y = fn(*xs, **attrs)
    assert gd.verify(g) is g
    (out,) = gd.run(g, {f"in{i}": a for i, a in enumerate(arrays)}, [y])
    assert out.shape == y.shape and out.dtype == np.dtype(y.dtype)
    return out


def check(got, want, dtype):
    assert got.dtype == np.dtype(dtype)
    assert got.shape == np.shape(want)
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, **TOL[dtype])


def optional(*arrays):
    return [a for a in arrays if a is not None]


def max_pool_grad(x, gy, **attrs):  # the pool gradients have no builder function
    return gd.apply("max_pool_grad", [x, gy], **attrs)


def avg_pool_grad(gy, **attrs):
    return gd.apply("avg_pool_grad", [gy], **attrs)


# ----------------------------------------------------------------------------- matmul, gemm
def matmul_oracle(a, b):
    acc = np.int64 if a.dtype.kind in "iu" else np.float64
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    y = np.einsum("...ik,...kj->...ij", a2.astype(acc), b2.astype(acc))
    if a.ndim == 1:
        y = y[..., 0, :]
    if b.ndim == 1:
        y = y[..., 0]
    return y


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((1, 3, 4), (2, 4, 5)),
    ((5,), (2, 5, 3)),
    ((2, 3, 5), (5,)),
    ((3, 1), (1, 2)),
]


@pytest.mark.parametrize("dtype", FLOATS + ("int32", "int64"))
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul(sa, sb, dtype):
    a, b = rand(sa, dtype), rand(sb, dtype)
    check(run(gd.matmul, a, b), matmul_oracle(a, b), dtype)


def gemm_oracle(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    a, b = a.astype(np.float64), b.astype(np.float64)
    y = alpha * np.einsum("ik,kj->ij", a.T if trans_a else a, b.T if trans_b else b)
    return y if c is None else y + beta * c.astype(np.float64)


GEMM_CASES = [  # (m, k, n), c shape or None, attrs
    ((3, 4, 5), None, {}),
    ((3, 4, 5), (5,), {"alpha": 2.0, "beta": 3.0}),
    ((3, 4, 5), (3, 1), {"trans_a": True}),
    ((2, 3, 4), (), {"trans_b": True, "beta": -1.0}),
    ((4, 2, 3), (4, 3), {"trans_a": True, "trans_b": True, "alpha": 0.5}),
    ((1, 1, 1), (1, 1), {}),
]


@pytest.mark.parametrize("dtype", FLOATS + ("int32", "int64"))
@pytest.mark.parametrize("mkn,c_shape,attrs", GEMM_CASES)
def test_gemm(mkn, c_shape, attrs, dtype):
    m, k, n = mkn
    a = rand((k, m) if attrs.get("trans_a") else (m, k), dtype)
    b = rand((n, k) if attrs.get("trans_b") else (k, n), dtype)
    c = None if c_shape is None else rand(c_shape, dtype)
    want = gemm_oracle(a, b, c, **attrs)
    if dtype.startswith("int"):
        want = want.astype(dtype)  # alpha and beta are floats; the product is cast back
    check(run(gd.gemm, *optional(a, b, c), **attrs), want, dtype)


# ----------------------------------------------------------------------------- windows
def _defaults(sp, strides, pads, dilations):
    return (tuple(strides or (1,) * sp), tuple(pads or (0,) * (2 * sp)), tuple(dilations or (1,) * sp))


def _inside(pos, lo, hi):
    return all(lo[i] <= pos[i] < hi[i] for i in range(len(pos)))


def _taps(o, kernel, strides, pads, dilations):
    """(kernel offset, input position) of each tap of output position o, row-major."""
    for k in np.ndindex(*kernel):
        yield k, tuple(o[i] * strides[i] - pads[i] + k[i] * dilations[i] for i in range(len(o)))


def _out_len(size, k, s, pb, pe, d, ceil_mode=False):
    """ONNX/PyTorch: floor or ceil of the window count; a ceil window must start before the end pad."""
    q = (size + pb + pe - (d * (k - 1) + 1)) / s
    out = (math.ceil(q) if ceil_mode else math.floor(q)) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1
    return out


def conv_oracle(x, w, b=None, strides=None, pads=None, dilations=None, group=1):
    n, c, *size = x.shape
    m, cg, *kernel = w.shape
    sp = len(size)
    s, p, d = _defaults(sp, strides, pads, dilations)
    out = [_out_len(size[i], kernel[i], s[i], p[i], p[sp + i], d[i]) for i in range(sp)]
    xg = x.astype(np.float64).reshape(n, group, cg, *size)
    wg = w.astype(np.float64).reshape(group, m // group, cg, *kernel)
    y = np.zeros((n, group, m // group, *out))
    for o in np.ndindex(*out):
        for k, pos in _taps(o, kernel, s, p, d):
            if _inside(pos, [0] * sp, size):
                y[(..., *o)] += np.einsum("ngc,gmc->ngm", xg[(..., *pos)], wg[(..., *k)])
    y = y.reshape(n, m, *out)
    return y if b is None else y + b.astype(np.float64).reshape(m, *(1,) * sp)


def conv_transpose_oracle(
    x, w, b=None, strides=None, pads=None, dilations=None, group=1, output_padding=None
):
    """Scatter form: input cell i, kernel offset k -> output cell i * stride - pad + k * dilation."""
    n, c, *size = x.shape
    _, mg, *kernel = w.shape
    sp = len(size)
    s, p, d = _defaults(sp, strides, pads, dilations)
    op = output_padding or (0,) * sp
    out = [(size[i] - 1) * s[i] + d[i] * (kernel[i] - 1) + 1 - p[i] - p[sp + i] + op[i] for i in range(sp)]
    xg = x.astype(np.float64).reshape(n, group, c // group, *size)
    wg = w.astype(np.float64).reshape(group, c // group, mg, *kernel)
    y = np.zeros((n, group, mg, *out))
    for i in np.ndindex(*size):
        for k, pos in _taps(i, kernel, s, p, d):
            if _inside(pos, [0] * sp, out):
                y[(..., *pos)] += np.einsum("ngc,gcm->ngm", xg[(..., *i)], wg[(..., *k)])
    y = y.reshape(n, group * mg, *out)
    return y if b is None else y + b.astype(np.float64).reshape(-1, *(1,) * sp)


CONV_CASES = [  # x shape, w shape, attrs, with bias
    ((1, 2, 5), (3, 2, 2), {}, False),
    ((2, 3, 9), (4, 3, 3), {"strides": (2,), "pads": (1, 2), "dilations": (2,)}, True),
    ((1, 3, 5, 5), (2, 3, 1, 1), {}, False),
    ((2, 4, 7, 6), (6, 2, 3, 3), {"strides": (2, 1), "pads": (1, 0, 2, 1), "group": 2}, True),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"pads": (1, 1, 1, 1), "dilations": (2, 2), "group": 4}, True),
    ((1, 2, 6, 5), (4, 1, 2, 3), {"strides": (3, 2), "dilations": (1, 2), "group": 2}, False),
    ((1, 6, 7, 8), (3, 6, 2, 3), {"strides": (3, 2), "pads": (0, 2, 1, 0)}, False),
    ((1, 2, 4, 5, 4), (4, 1, 2, 3, 2), {"strides": (1, 2, 1), "pads": (0, 1, 1, 1, 0, 0), "group": 2}, True),
    ((2, 1, 3, 3, 3), (2, 1, 2, 2, 2), {"dilations": (2, 1, 1)}, False),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_CASES)
def test_conv(xs, ws, attrs, bias, dtype):
    x, w = rand(xs, dtype), rand(ws, dtype)
    b = rand(ws[0], dtype) if bias else None
    check(run(gd.conv, *optional(x, w, b), **attrs), conv_oracle(x, w, b, **attrs), dtype)


CONV_T_CASES = [  # x shape, w shape, attrs, with bias
    ((1, 2, 4), (2, 3, 3), {"strides": (2,), "pads": (1, 0), "output_padding": (1,)}, False),
    ((1, 1, 3), (1, 1, 2), {}, True),
    (
        (2, 4, 3, 3),
        (4, 2, 3, 2),
        {"strides": (2, 3), "pads": (1, 0, 0, 1), "output_padding": (1, 2), "group": 2},
        True,
    ),
    ((1, 3, 4, 3), (3, 2, 2, 3), {"dilations": (2, 1), "pads": (0, 1, 1, 0)}, False),
    (
        (1, 3, 3, 3),
        (3, 1, 3, 3),
        {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 1), "group": 3},
        True,
    ),
    ((1, 2, 3, 2), (2, 2, 2, 2), {"strides": (2, 2), "dilations": (2, 2), "output_padding": (1, 0)}, False),
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 3), {"strides": (2, 1, 2), "pads": (0, 1, 0, 1, 0, 1)}, True),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_T_CASES)
def test_conv_transpose(xs, ws, attrs, bias, dtype):
    x, w = rand(xs, dtype), rand(ws, dtype)
    b = rand(ws[1] * attrs.get("group", 1), dtype) if bias else None
    check(run(gd.conv_transpose, *optional(x, w, b), **attrs), conv_transpose_oracle(x, w, b, **attrs), dtype)


CONV2D_CASES = [  # x shape, w shape, helper kwargs, the explicit conv attrs they mean
    ((1, 2, 5, 6), (3, 2, 3, 3), {"padding": "same", "stride": 2}, {"pads": (1, 0, 1, 1), "strides": (2, 2)}),
    ((1, 2, 5, 6), (3, 2, 2, 2), {"padding": "same"}, {"pads": (0, 0, 1, 1)}),
    ((1, 2, 5, 6), (3, 2, 3, 3), {"padding": "valid", "dilation": (1, 2)}, {"dilations": (1, 2)}),
    ((1, 4, 5, 5), (4, 2, 3, 3), {"padding": 1, "groups": 2}, {"pads": (1, 1, 1, 1), "group": 2}),
    (
        (1, 2, 6, 5),
        (2, 2, 3, 2),
        {"padding": (2, 1), "stride": (2, 1)},
        {"pads": (2, 1, 2, 1), "strides": (2, 1)},
    ),
    ((1, 2, 6, 5), (2, 2, 3, 2), {"padding": (0, 1, 2, 0)}, {"pads": (0, 1, 2, 0)}),
]


@pytest.mark.parametrize("xs,ws,kw,attrs", CONV2D_CASES)
def test_conv2d(xs, ws, kw, attrs):
    x, w, b = rand(xs), rand(ws), rand(ws[0])
    check(run(gd.conv2d, x, w, b, **kw), conv_oracle(x, w, b, **attrs), "float32")


@pytest.mark.parametrize(
    "kw,attrs",
    [
        (
            {"stride": 2, "padding": 1, "output_padding": 1},
            {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 1)},
        ),
        (
            {"stride": (1, 2), "dilation": (2, 1), "groups": 2},
            {"strides": (1, 2), "dilations": (2, 1), "group": 2},
        ),
    ],
)
def test_conv_transpose2d(kw, attrs):
    x, w, b = rand((1, 4, 3, 4)), rand((4, 3, 3, 2)), rand(3 * attrs.get("group", 1))
    check(run(gd.conv_transpose2d, x, w, b, **kw), conv_transpose_oracle(x, w, b, **attrs), "float32")


# ----------------------------------------------------------------------------- pooling
def pool_windows(
    size, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=False, count_include_pad=False
):
    """Output spatial shape and, per output position, (position, input cells, divisor)."""
    sp = len(size)
    s, p, d = _defaults(sp, strides, pads, dilations)
    out = [_out_len(size[i], kernel_shape[i], s[i], p[i], p[sp + i], d[i], ceil_mode) for i in range(sp)]
    windows = []
    for o in np.ndindex(*out):
        taps = [pos for _, pos in _taps(o, kernel_shape, s, p, d)]
        cells = [pos for pos in taps if _inside(pos, [0] * sp, size)]
        padded = [
            pos
            for pos in taps
            if _inside(pos, [-v for v in p[:sp]], [size[i] + p[sp + i] for i in range(sp)])
        ]
        windows.append((o, cells, len(padded) if count_include_pad else len(cells)))
    return out, windows


def pool_oracle(kind, x, **attrs):
    out, windows = pool_windows(x.shape[2:], **attrs)
    y = np.zeros(x.shape[:2] + tuple(out))
    for o, cells, count in windows:
        vals = np.stack([x[(..., *c)] for c in cells], -1).astype(np.float64)
        y[(..., *o)] = vals.max(-1) if kind == "max" else vals.sum(-1) / count
    return y


def max_pool_grad_oracle(x, gy, **attrs):
    """gy of each window goes to the window's first maximum (row-major tap order)."""
    gx = np.zeros(x.shape)
    for o, cells, _ in pool_windows(x.shape[2:], **attrs)[1]:
        for nc in np.ndindex(*x.shape[:2]):
            best = cells[int(np.argmax([x[(*nc, *c)] for c in cells]))]
            gx[(*nc, *best)] += gy[(*nc, *o)]
    return gx


def avg_pool_grad_oracle(shape, gy, **attrs):
    gx = np.zeros(shape)
    for o, cells, count in pool_windows(shape[2:], **attrs)[1]:
        for c in cells:
            gx[(..., *c)] += gy[(..., *o)].astype(np.float64) / count
    return gx


POOL_CASES = [  # x shape, attrs
    ((2, 3, 10), {"kernel_shape": (3,), "strides": (2,), "pads": (1, 1)}),
    ((2, 3, 10), {"kernel_shape": (3,), "strides": (2,), "pads": (1, 1), "ceil_mode": True}),
    ((1, 2, 7, 7), {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": True}),
    ((2, 2, 6, 7), {"kernel_shape": (2, 3), "strides": (2, 2), "pads": (0, 1, 1, 0), "ceil_mode": True}),
    ((1, 2, 8, 7), {"kernel_shape": (2, 2), "strides": (1, 2), "pads": (1, 0, 0, 1), "dilations": (2, 3)}),
    ((1, 1, 5, 5), {"kernel_shape": (5, 5)}),
    # ceil_mode drops the last window along H (it would start in the end pad), not along W
    ((1, 1, 5, 6), {"kernel_shape": (3, 3), "strides": (3, 3), "pads": (1, 1, 1, 1), "ceil_mode": True}),
    (
        (1, 2, 4, 5, 4),
        {
            "kernel_shape": (2, 3, 2),
            "strides": (2, 1, 2),
            "pads": (1, 0, 0, 0, 1, 1),
            "dilations": (1, 2, 1),
            "ceil_mode": True,
        },
    ),
]


@pytest.mark.parametrize("dtype", FLOATS + ("int32", "int64"))
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_max_pool(xs, attrs, dtype):
    x = rand(xs, dtype, lo=-5, hi=-1)  # all negative: a zero-padded max would be wrong
    check(run(gd.max_pool, x, **attrs), pool_oracle("max", x, **attrs), dtype)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_avg_pool(xs, attrs, dtype, count_include_pad):
    x = rand(xs, dtype, lo=1, hi=3)
    attrs = {**attrs, "count_include_pad": count_include_pad}
    check(run(gd.avg_pool, x, **attrs), pool_oracle("avg", x, **attrs), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_max_pool_grad(xs, attrs, dtype):
    x = RNG.integers(-3, 0, xs).astype(dtype)  # few values: many tied maxima
    out, _ = pool_windows(xs[2:], **attrs)
    gy = rand(xs[:2] + tuple(out), dtype)
    check(run(max_pool_grad, x, gy, **attrs), max_pool_grad_oracle(x, gy, **attrs), dtype)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_avg_pool_grad(xs, attrs, dtype, count_include_pad):
    attrs = {**attrs, "count_include_pad": count_include_pad}
    out, _ = pool_windows(xs[2:], **attrs)
    gy = rand(xs[:2] + tuple(out), dtype)
    check(run(avg_pool_grad, gy, shape=xs, **attrs), avg_pool_grad_oracle(xs, gy, **attrs), dtype)


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_avg_pool_grad_is_adjoint(xs, attrs):
    """<avg_pool(x), gy> == <x, avg_pool_grad(gy)>: the grad is the transpose of the pool."""
    attrs = {**attrs, "count_include_pad": True}
    x = rand(xs, "float64")
    gy = rand(xs[:2] + tuple(pool_windows(xs[2:], **attrs)[0]), "float64")
    with gd.Graph("t") as g:
        y = gd.avg_pool(gd.constant(x), **attrs)
        gx = avg_pool_grad(gd.constant(gy), shape=xs, **attrs)
    gd.verify(g)
    yv, gxv = gd.run(g, {}, [y, gx])
    np.testing.assert_allclose(np.vdot(yv, gy), np.vdot(x, gxv), rtol=1e-12)


POOL2D_CASES = [  # x shape, helper kwargs, the explicit pool attrs they mean
    ((1, 2, 6, 7), {"kernel": 2}, {"kernel_shape": (2, 2), "strides": (2, 2)}),
    (
        (1, 2, 7, 7),
        {"kernel": 3, "stride": 2, "padding": 1, "ceil_mode": True},
        {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": True},
    ),
    (
        (1, 2, 5, 6),
        {"kernel": (3, 2), "stride": 1, "padding": "same"},
        {"kernel_shape": (3, 2), "pads": (1, 0, 1, 1)},
    ),
    (
        (1, 2, 5, 6),
        {"kernel": (3, 2), "stride": (1, 2), "padding": (0, 1, 2, 0)},
        {"kernel_shape": (3, 2), "strides": (1, 2), "pads": (0, 1, 2, 0)},
    ),
]


@pytest.mark.parametrize("xs,kw,attrs", POOL2D_CASES)
def test_pool2d_helpers(xs, kw, attrs):
    x = rand(xs, lo=-3, hi=-1)
    check(run(gd.max_pool2d, x, **kw), pool_oracle("max", x, **attrs), "float32")
    for cip in (False, True):
        want = pool_oracle("avg", x, **attrs, count_include_pad=cip)
        check(run(gd.avg_pool2d, x, **kw, count_include_pad=cip), want, "float32")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 2, 3, 4), (2, 1, 2, 3, 2)])
def test_global_pools(shape, dtype):
    x = rand(shape, dtype)
    axes = tuple(range(2, len(shape)))
    check(run(gd.global_avg_pool, x), x.astype(np.float64).mean(axes, keepdims=True), dtype)
    check(run(gd.global_max_pool, x), x.astype(np.float64).max(axes, keepdims=True), dtype)


# ----------------------------------------------------------------------------- normalization
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "shape,epsilon", [((2, 3), 1e-5), ((2, 3, 4), 1e-3), ((1, 3, 4, 5), 0.1), ((2, 2, 3, 2, 2), 1e-5)]
)
def test_batch_norm(shape, epsilon, dtype):
    c = shape[1]
    x, scale, bias, mean = rand(shape, dtype), rand(c, dtype), rand(c, dtype), rand(c, dtype)
    var = rand(c, dtype, lo=0.2, hi=2.0)
    ch = lambda v: v.astype(np.float64).reshape((1, c) + (1,) * (len(shape) - 2))  # noqa: E731
    want = (x - ch(mean)) / np.sqrt(ch(var) + epsilon) * ch(scale) + ch(bias)
    check(run(gd.batch_norm, x, scale, bias, mean, var, epsilon=epsilon), want, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "shape,axis,pshape,bias",
    [
        ((2, 3, 4), -1, (4,), True),
        ((2, 3, 4), 1, (3, 4), True),
        ((2, 3, 4), -2, (1, 4), False),
        ((4, 5), 0, (4, 5), True),
        ((2, 3, 4, 5), -3, (3, 1, 5), True),
        ((3, 6), -1, (), True),
    ],
)
def test_layer_norm(shape, axis, pshape, bias, dtype):
    x, scale = rand(shape, dtype), rand(pshape, dtype)
    b = rand(pshape, dtype) if bias else None
    axes = tuple(range(axis % len(shape), len(shape)))
    xf = x.astype(np.float64)
    mu = xf.mean(axes, keepdims=True)
    want = (xf - mu) / np.sqrt(((xf - mu) ** 2).mean(axes, keepdims=True) + 1e-3) * scale
    want = want if b is None else want + b
    check(run(gd.layer_norm, *optional(x, scale, b), axis=axis, epsilon=1e-3), want, dtype)


# ----------------------------------------------------------------------------- softmax
SOFTMAX_CASES = [
    ((5,), 0),
    ((3, 4), -1),
    ((3, 4), 0),
    ((2, 3, 4), -2),
    ((2, 3, 4), 1),
    ((2, 3, 4, 2), -4),
    ((2, 3, 4, 2), 3),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES)
def test_softmax_and_log_softmax(shape, axis, dtype):
    x = rand(shape, dtype, lo=-30, hi=30)  # exp would overflow float16/32 without the max shift
    xf = x.astype(np.float64)
    z = xf - xf.max(axis, keepdims=True)
    log_sum = np.log(np.exp(z).sum(axis, keepdims=True))
    check(run(gd.softmax, x, axis=axis), np.exp(z - log_sum), dtype)
    check(run(gd.log_softmax, x, axis=axis), z - log_sum, dtype)


# ----------------------------------------------------------------------------- resize
COORD_MODES = (
    "half_pixel",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "half_pixel_symmetric",
    "tf_half_pixel_for_nn",
)
NEAREST = {
    "round_prefer_floor": lambda v: math.ceil(v - 0.5),
    "round_prefer_ceil": lambda v: math.floor(v + 0.5),
    "floor": math.floor,
    "ceil": math.ceil,
}


def onnx_source_coord(x_resized, mode, scale, length_original, output_width, output_width_int):
    """The ONNX Resize coordinate_transformation_mode formulas, for one axis.

    ``output_width`` is the target length: the size when given by sizes, else
    ``scale * length_original``, which may be fractional (as in the ONNX conformance tests,
    align_corners and pytorch_half_pixel use it as the resized length).
    """
    if mode == "half_pixel":
        return (x_resized + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x_resized + 0.5) / scale - 0.5 if output_width > 1 else 0.0
    if mode == "align_corners":
        return 0.0 if output_width == 1 else x_resized * (length_original - 1) / (output_width - 1)
    if mode == "asymmetric":
        return x_resized / scale
    if mode == "tf_half_pixel_for_nn":
        return (x_resized + 0.5) / scale
    assert mode == "half_pixel_symmetric"
    offset = length_original / 2 * (1 - output_width_int / output_width)
    return offset + (x_resized + 0.5) / scale - 0.5


def resize_oracle(x, sizes, scales, mode, ctm, nearest_mode):
    if sizes is None:
        widths = [d * s for d, s in zip(x.shape, scales)]
        sizes = [math.floor(w) for w in widths]
    else:
        widths, scales = sizes, [s / d for d, s in zip(x.shape, sizes)]
    xf = x.astype(np.float64)
    y = np.zeros(sizes)
    for out in np.ndindex(*sizes):
        per_axis = []  # (input index, weight) taps along each axis
        for a, i in enumerate(out):
            n = x.shape[a]
            if sizes[a] == n and scales[a] == 1:  # ONNX leaves an unscaled axis alone
                per_axis.append([(i, 1.0)])
                continue
            c = onnx_source_coord(i, ctm, scales[a], n, widths[a], sizes[a])
            if mode == "nearest":
                per_axis.append([(min(max(NEAREST[nearest_mode](c), 0), n - 1), 1.0)])
            else:  # linear; outside [0, n - 1] the edge value is used
                c = min(max(c, 0.0), n - 1.0)
                lo = math.floor(c)
                per_axis.append([(lo, 1 - (c - lo)), (min(lo + 1, n - 1), c - lo)])
        y[out] = sum(
            math.prod(w for _, w in taps) * xf[tuple(i for i, _ in taps)]
            for taps in itertools.product(*per_axis)
        )
    return y


RESIZE_CASES = [  # x shape, sizes, scales
    ((1, 2, 3, 2), None, (1, 1, 2, 3)),
    ((1, 2, 4, 6), None, (1, 1, 0.5, 0.5)),
    ((1, 2, 4, 3), None, (1, 1, 0.75, 1.7)),  # fractional scale * length
    ((2, 3, 4), None, (1.5, 1, 0.5)),
    ((1, 2, 4, 6), (1, 2, 7, 3), None),
    ((1, 2, 3, 6), (1, 2, 1, 5), None),
    ((1, 1, 5), (1, 1, 2), None),
    # sizes / length * length is not exactly sizes in float64 here; ties must not move
    ((1, 1, 7), (1, 1, 29), None),
    ((1, 1, 22), (1, 1, 15), None),
    ((1, 1, 49), (1, 1, 1), None),
]


@pytest.mark.parametrize("nearest_mode", list(NEAREST))
@pytest.mark.parametrize("ctm", COORD_MODES)
@pytest.mark.parametrize("xs,sizes,scales", RESIZE_CASES)
def test_resize_nearest(xs, sizes, scales, ctm, nearest_mode):
    x = rand(xs)
    attrs = {"sizes": sizes, "scales": scales, "coordinate_transformation_mode": ctm}
    got = run(gd.resize, x, mode="nearest", nearest_mode=nearest_mode, **attrs)
    check(got, resize_oracle(x, sizes, scales, "nearest", ctm, nearest_mode), "float32")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ctm", COORD_MODES)
@pytest.mark.parametrize("xs,sizes,scales", RESIZE_CASES)
def test_resize_linear(xs, sizes, scales, ctm, dtype):
    x = rand(xs, dtype)
    got = run(gd.resize, x, sizes=sizes, scales=scales, mode="linear", coordinate_transformation_mode=ctm)
    check(got, resize_oracle(x, sizes, scales, "linear", ctm, None), dtype)


# ----------------------------------------------------------------------------- bad input
_NAMES = itertools.count()


def _ph(shape, dtype="float32"):
    return gd.placeholder(f"p{next(_NAMES)}", shape, dtype)


BAD = [  # op name, builder of the bad node (named "bad"), what the message mentions
    ("matmul", lambda: gd.matmul(_ph((2, 3)), _ph((4, 5)), name="bad"), "inner dimensions"),
    ("matmul", lambda: gd.matmul(_ph((2, 3, 4)), _ph((3, 4, 5)), name="bad"), "broadcast"),
    ("matmul", lambda: gd.matmul(_ph(()), _ph((3,)), name="bad"), "rank"),
    ("matmul", lambda: gd.matmul(_ph((2, 3)), _ph((3, 2), "float64"), name="bad"), "dtypes"),
    ("gemm", lambda: gd.gemm(_ph((2, 3)), _ph((2, 4)), name="bad"), "inner dimensions"),
    ("gemm", lambda: gd.gemm(_ph((2, 3)), _ph((3, 4)), _ph((3,)), name="bad"), "broadcast"),
    ("conv", lambda: gd.conv(_ph((1, 4, 5, 5)), _ph((2, 3, 3, 3)), name="bad"), "channels"),
    ("conv", lambda: gd.conv(_ph((1, 4, 5, 5)), _ph((3, 2, 3, 3)), group=2, name="bad"), "group"),
    ("conv", lambda: gd.conv(_ph((1, 1, 3, 3)), _ph((1, 1, 5, 5)), name="bad"), "larger"),
    ("conv", lambda: gd.conv(_ph((1, 1, 3, 3)), _ph((1, 1, 6, 2)), pads=(1, 0, 1, 0), name="bad"), "larger"),
    ("conv", lambda: gd.conv(_ph((1, 1, 5, 5)), _ph((1, 1, 3, 3)), dilations=(3, 1), name="bad"), "larger"),
    ("conv", lambda: gd.conv(_ph((1, 2, 5)), _ph((3, 2, 2)), _ph((2,)), name="bad"), "bias"),
    ("conv", lambda: gd.conv(_ph((1, 2, 5)), _ph((3, 2, 2, 2)), name="bad"), "rank"),
    ("conv", lambda: gd.conv(_ph((1, 2, 5), "int32"), _ph((3, 2, 2), "int32"), name="bad"), "dtype"),
    ("conv", lambda: gd.conv2d(_ph((1, 1, 3, 3)), _ph((1, 1, 3, 3)), stride=0, name="bad"), "strides"),
    ("conv_transpose", lambda: gd.conv_transpose(_ph((1, 3, 4)), _ph((2, 2, 3)), name="bad"), "channels"),
    (
        "conv_transpose",
        lambda: gd.conv_transpose(_ph((1, 3, 4)), _ph((3, 2, 3)), group=2, name="bad"),
        "group",
    ),
    (
        "conv_transpose",
        lambda: gd.conv_transpose(_ph((1, 1, 1)), _ph((1, 1, 1)), pads=(1, 1), name="bad"),
        "not positive",
    ),
    ("max_pool", lambda: gd.max_pool(_ph((1, 1, 3, 3)), (4, 2), name="bad"), "larger"),
    ("max_pool", lambda: gd.max_pool(_ph((1, 1, 3, 3)), (2, 2, 2), name="bad"), "kernel_shape"),
    ("max_pool", lambda: gd.max_pool(_ph((3, 3)), (2,), name="bad"), "rank"),
    ("avg_pool", lambda: gd.avg_pool(_ph((1, 1, 4)), (3,), pads=(1,), name="bad"), "pads"),
    ("avg_pool", lambda: gd.avg_pool(_ph((1, 1, 4), "int32"), (2,), name="bad"), "dtype"),
    (
        "max_pool_grad",
        lambda: max_pool_grad(_ph((1, 1, 4)), _ph((1, 1, 2)), kernel_shape=(2,), name="bad"),
        "gradient shape",
    ),
    (
        "avg_pool_grad",
        lambda: avg_pool_grad(_ph((1, 1, 2)), kernel_shape=(2,), shape=(1, 1, 4), name="bad"),
        "gradient shape",
    ),
    (
        "batch_norm",
        lambda: gd.batch_norm(*(_ph(s) for s in [(2, 3, 4), (3,), (3,), (4,), (3,)]), name="bad"),
        "mean shape",
    ),
    ("layer_norm", lambda: gd.layer_norm(_ph((2, 3, 4)), _ph((3,)), name="bad"), "broadcast"),
    (
        "layer_norm",
        lambda: gd.layer_norm(_ph((2, 3, 4)), _ph((3, 4)), _ph((2, 3, 4)), axis=1, name="bad"),
        "bias shape",
    ),
    ("softmax", lambda: gd.softmax(_ph((2, 3)), axis=2, name="bad"), "out of range"),
    ("log_softmax", lambda: gd.log_softmax(_ph((2, 3), "int32"), name="bad"), "dtype"),
    ("resize", lambda: gd.resize(_ph((1, 1, 4, 4)), scales=(2, 2), name="bad"), "scales"),
    ("resize", lambda: gd.resize(_ph((1, 1, 4, 4)), name="bad"), "sizes or scales"),
    (
        "resize",
        lambda: gd.resize(_ph((1, 1, 4, 4)), sizes=(1, 1, 8, 8), scales=(1, 1, 3, 3), name="bad"),
        "not both",
    ),
    (
        "max_pool",
        lambda: gd.max_pool(_ph((1, 1, 6, 6)), (2, 2), pads=(2, 0, 0, 0), name="bad"),
        "window span",
    ),
    ("layer_norm", lambda: gd.layer_norm(_ph((2, 3, 4)), _ph((2, 4)), name="bad"), "scale shape (2, 4)"),
]


@pytest.mark.parametrize("op,build,what", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_is_a_shape_error(op, build, what):
    with gd.Graph("t"), pytest.raises(gd.ShapeError) as info:
        build()
    msg = str(info.value)
    assert isinstance(info.value, gd.FlowcError)
    assert msg.startswith(f"node 'bad' (op {op}") and what in msg, msg
