"""Normalization and softmax: batch norm (folded into a scale and shift), layer norm, softmax
and log-softmax.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..builder import apply, operand
from ..errors import ShapeError
from ..registry import COMPOSITE, KERNEL, Attr, Example, Sample, defop
from ._util import broadcasts_to, check_dtype, resolve_axis, same_dtype, widen_half
from .elementwise import add, div, exp, mul, neg, sqrt, sub, unbroadcast
from .reduce import reduce_mean, reduce_sum
from .shape import reshape


# ----------------------------------------------------------------------------- normalization
def _bn_infer(types, attrs):
    x = types[0]
    same_dtype(types, dtypes.FLOATS)
    if x.rank < 2:
        raise ShapeError(f"batch_norm needs (N, C, ...) input, got {x.shape}")
    for name, t in zip(("scale", "bias", "mean", "var"), types[1:]):
        if t.shape != (x.shape[1],):
            raise ShapeError(f"{name} shape {t.shape} must be ({x.shape[1]},)")
    return x


def _channel(v, rank):
    return v.reshape((1, -1) + (1,) * (rank - 2))


def _bn_ref(xs, attrs):
    x, scale, bias, mean, var = (widen_half(v) for v in xs)
    r = x.ndim
    inv = 1 / np.sqrt(var + x.dtype.type(attrs["epsilon"]))
    y = (x - _channel(mean, r)) * _channel(inv * scale, r) + _channel(bias, r)
    return y.astype(xs[0].dtype)


def _g_bn(op, gys):
    x, scale, bias, mean, var = op.inputs
    g = gys[0]
    r = x.rank
    eps = op.attrs["epsilon"]
    shape = (1, x.shape[1]) + (1,) * (r - 2)
    axes = (0,) + tuple(range(2, r))
    inv = div(1.0, sqrt(add(var, eps)))

    def g_centered():
        return reduce_sum(mul(g, sub(x, reshape(mean, shape))), axes)

    return (
        op.want(0, lambda: mul(g, reshape(mul(inv, scale), shape))),
        op.want(1, lambda: mul(g_centered(), inv)),
        op.want(2, lambda: reduce_sum(g, axes)),
        op.want(3, lambda: neg(mul(reduce_sum(g, axes), mul(inv, scale)))),
        op.want(4, lambda: mul(g_centered(), mul(mul(scale, -0.5), mul(inv, mul(inv, inv))))),
    )


def _decompose_bn(op):
    """y = x * s + t per channel, s = scale / sqrt(var + eps), t = bias - mean * s.

    With constant parameters, constant folding turns s and t into two small constants
    and fusion makes the whole op one elementwise loop.
    """
    x, scale, bias, mean, var = op.inputs
    shape = (1, x.shape[1]) + (1,) * (x.rank - 2)
    s = div(scale, sqrt(add(var, op.attrs["epsilon"])))
    t = sub(bias, mul(mean, s))
    return (add(mul(x, reshape(s, shape)), reshape(t, shape)),)


defop(
    "batch_norm",
    ("x", "scale", "bias", "mean", "var"),
    _bn_infer,
    _bn_ref,
    _g_bn,
    attrs={"epsilon": Attr("float", 1e-5)},
    decompose=_decompose_bn,
    kind=COMPOSITE,
    doc="inference batch norm over axis 1: (x - mean) / sqrt(var + epsilon) * scale + bias",
    examples=(
        Example(
            (Sample((2, 3, 4, 4)), Sample((3,)), Sample((3,)), Sample((3,)), Sample((3,), low=0.5, high=2.0)),
        ),
        Example(
            (Sample((3, 2), "float64"),)
            + tuple(Sample((2,), "float64") for _ in range(3))
            + (Sample((2,), "float64", 0.5, 2.0),),
            {"epsilon": 1e-3},
        ),
        Example(
            (Sample((2, 3, 4), "float16"),)
            + tuple(Sample((3,), "float16") for _ in range(3))
            + (Sample((3,), "float16", 0.5, 2.0),),
            grad=False,
        ),
    ),
)


def batch_norm(x, scale, bias, mean, var, epsilon=1e-5, name=None):
    return apply("batch_norm", [operand(v) for v in (x, scale, bias, mean, var)], name, epsilon=epsilon)


def _ln_infer(types, attrs):
    x = types[0]
    same_dtype(types, dtypes.FLOATS)
    norm = x.shape[attrs["axis"] :]
    for name, t in zip(("scale", "bias"), types[1:]):
        if not broadcasts_to(t.shape, norm):
            raise ShapeError(f"{name} shape {t.shape} does not broadcast to the normalized shape {norm}")
    return x


def _ln_ref(xs, attrs):
    x = widen_half(xs[0])
    axes = tuple(range(attrs["axis"], x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    c = x - mu
    var = (c * c).mean(axis=axes, keepdims=True)
    y = c / np.sqrt(var + x.dtype.type(attrs["epsilon"])) * widen_half(xs[1])
    if len(xs) == 3:
        y = y + widen_half(xs[2])
    return y.astype(xs[0].dtype)


def _g_ln(op, gys):
    x, scale = op.inputs[:2]
    g = gys[0]
    axes = tuple(range(op.attrs["axis"], x.rank))
    mu = reduce_mean(x, axes, keepdims=True)
    c = sub(x, mu)
    inv = div(1.0, sqrt(add(reduce_mean(mul(c, c), axes, keepdims=True), op.attrs["epsilon"])))
    xhat = mul(c, inv)

    def gx():
        gxhat = mul(g, scale)
        return mul(
            inv,
            sub(
                sub(gxhat, reduce_mean(gxhat, axes, keepdims=True)),
                mul(xhat, reduce_mean(mul(gxhat, xhat), axes, keepdims=True)),
            ),
        )

    out = (op.want(0, gx), op.want(1, lambda: unbroadcast(mul(g, xhat), scale.shape)))
    if len(op.inputs) == 3:
        out += (op.want(2, lambda: unbroadcast(g, op.inputs[2].shape)),)
    return out


defop(
    "layer_norm",
    ("x", "scale", "bias?"),
    _ln_infer,
    _ln_ref,
    _g_ln,
    attrs={"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5)},
    resolve=resolve_axis,
    kind=KERNEL,
    doc="normalize over the axes from 'axis' on, then scale and shift",
    examples=(
        Example((Sample((2, 3, 4)), Sample((4,)), Sample((4,)))),
        Example((Sample((2, 3, 4), "float64"), Sample((3, 4), "float64")), {"axis": 1}),
        # scale and bias broadcast to the normalized shape (3, 4)
        Example((Sample((2, 3, 4)), Sample((4,)), Sample((3, 1))), {"axis": 1, "epsilon": 1e-3}),
        Example(
            (Sample((2, 3, 4), "float16"), Sample((3, 4), "float16"), Sample((4,), "float16")),
            {"axis": 1},
            grad=False,
        ),
    ),
)


def layer_norm(x, scale, bias=None, axis=-1, epsilon=1e-5, name=None):
    inputs = [operand(x), operand(scale)] + ([operand(bias)] if bias is not None else [])
    return apply("layer_norm", inputs, name, axis=axis, epsilon=epsilon)


# ----------------------------------------------------------------------------- softmax
def _softmax_ref(xs, attrs):
    x = widen_half(xs[0])
    e = np.exp(x - x.max(axis=attrs["axis"], keepdims=True))
    return (e / e.sum(axis=attrs["axis"], keepdims=True)).astype(xs[0].dtype)


def _log_softmax_ref(xs, attrs):
    x = widen_half(xs[0])
    z = x - x.max(axis=attrs["axis"], keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=attrs["axis"], keepdims=True))).astype(xs[0].dtype)


def _g_softmax(op, gys):
    y, g = op.outputs[0], gys[0]
    return (mul(y, sub(g, reduce_sum(mul(g, y), (op.attrs["axis"],), keepdims=True))),)


def _g_log_softmax(op, gys):
    y, g = op.outputs[0], gys[0]
    return (sub(g, mul(exp(y), reduce_sum(g, (op.attrs["axis"],), keepdims=True))),)


def _softmax_infer(types, attrs):
    check_dtype(types[0], dtypes.FLOATS)
    return types[0]


_SOFTMAX_ATTRS = {"axis": Attr("int", -1)}


def _softmax_expect(axis, log=False):
    """An example's expectation: exp(x) / sum(exp(x)) in float64, as defined (no shift)."""

    def expect(x):
        e = np.exp(x.astype(np.float64))
        y = e / e.sum(axis=axis, keepdims=True)
        return np.log(y) if log else y

    return expect


defop(
    "softmax",
    ("x",),
    _softmax_infer,
    _softmax_ref,
    _g_softmax,
    attrs=_SOFTMAX_ATTRS,
    resolve=resolve_axis,
    kind=KERNEL,
    doc="exp(x) / sum(exp(x)) along axis",
    examples=(
        Example((Sample((2, 3, 4)),), {"axis": 1}, _softmax_expect(1)),
        Example((Sample((3, 5), "float64"),), {}, _softmax_expect(-1)),
        Example((Sample((4, 2)),), {"axis": 0}, _softmax_expect(0)),
        Example((Sample((2, 5, 3), "float16"),), {"axis": 1}, _softmax_expect(1), grad=False),
    ),
)
defop(
    "log_softmax",
    ("x",),
    _softmax_infer,
    _log_softmax_ref,
    _g_log_softmax,
    attrs=_SOFTMAX_ATTRS,
    resolve=resolve_axis,
    kind=KERNEL,
    doc="log(softmax(x)) along axis, stably",
    examples=(
        Example((Sample((2, 3, 4)),), {"axis": 1}, _softmax_expect(1, log=True)),
        Example((Sample((3, 5), "float64"),), {}, _softmax_expect(-1, log=True)),
        Example((Sample((4, 2)),), {"axis": 0}, _softmax_expect(0, log=True)),
        Example((Sample((2, 5, 3), "float16"),), {"axis": 1}, _softmax_expect(1, log=True), grad=False),
    ),
)


def softmax(x, axis=-1, name=None):
    return apply("softmax", [operand(x)], name, axis=axis)


def log_softmax(x, axis=-1, name=None):
    return apply("log_softmax", [operand(x)], name, axis=axis)


# the builders that graphdef exports (``gd.avg_pool`` ...)
