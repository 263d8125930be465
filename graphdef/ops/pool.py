"""Pooling: max, average and Lp pooling over any number of spatial axes, global pooling, and
the gradients of max and average pooling.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import apply, constant, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import KERNEL, Attr, Example, NotDifferentiable, Sample, defop
from ._util import check_dtype, same_dtype, widen_half
from .elementwise import mul
from .reduce import reduce_max, reduce_mean
from .windows import _out_spatial, _padded, _pairs, _window_resolve, _windows, same_pads


def _flops_pool(ins, outs, attrs):
    return outs[0].size * math.prod(attrs["kernel_shape"])



# ----------------------------------------------------------------------------- pooling
_POOL_ATTRS = {
    "kernel_shape": Attr("ints"),
    "strides": Attr("ints", None),
    "pads": Attr("ints", None),
    "dilations": Attr("ints", None),
    "ceil_mode": Attr("bool", False),
}


def _pool_infer(types, attrs):
    x = types[0]
    check_dtype(x, dtypes.FLOATS if "count_include_pad" in attrs else dtypes.NUMERIC)
    n = len(attrs["kernel_shape"])
    for i, k in enumerate(attrs["kernel_shape"]):
        span = attrs["dilations"][i] * (k - 1) + 1
        if max(attrs["pads"][i], attrs["pads"][n + i]) >= span:
            raise ShapeError(f"pads {attrs['pads']} must be smaller than the window span {span} on axis {i}")
    return TensorType(
        x.shape[:2] + _out_spatial(x.shape[2:], attrs["kernel_shape"], attrs, attrs["ceil_mode"]), x.dtype
    )


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_ref(xs, attrs):
    x = xs[0]
    kernel = attrs["kernel_shape"]
    out_sp = _out_spatial(x.shape[2:], kernel, attrs, attrs["ceil_mode"])
    xp = _padded(x, attrs, out_sp, kernel, _lowest(x.dtype))
    out = None
    for _, sl in _windows(x.shape[2:], kernel, attrs, out_sp):
        v = xp[(slice(None), slice(None)) + sl]
        out = v.copy() if out is None else np.maximum(out, v)
    return out


def _pool_counts(in_spatial, attrs, out_sp):
    """Divisor of each average window: cells inside the input (or inside input + pads)."""
    kernel = attrs["kernel_shape"]
    n = len(kernel)
    p = attrs["pads"]
    ones = np.ones((1, 1) + tuple(in_spatial), dtype=np.float64)
    if attrs["count_include_pad"]:
        ones = np.pad(ones, [(0, 0), (0, 0)] + [(p[i], p[n + i]) for i in range(n)], constant_values=1)
        a = {**attrs, "pads": (0,) * (2 * n)}
    else:
        a = attrs
    mp = _padded(ones, a, out_sp, kernel, 0)
    count = 0
    for _, sl in _windows(in_spatial, kernel, a, out_sp):
        count = count + mp[(slice(None), slice(None)) + sl]
    return count


def _avg_pool_ref(xs, attrs):
    x = widen_half(xs[0])
    kernel = attrs["kernel_shape"]
    out_sp = _out_spatial(x.shape[2:], kernel, attrs, attrs["ceil_mode"])
    xp = _padded(x, attrs, out_sp, kernel, 0)
    total = 0
    for _, sl in _windows(x.shape[2:], kernel, attrs, out_sp):
        total = total + xp[(slice(None), slice(None)) + sl]
    return (total / _pool_counts(x.shape[2:], attrs, out_sp)).astype(xs[0].dtype)


def _g_max_pool(op, gys):
    return (apply("max_pool_grad", [op.inputs[0], gys[0]], None, **op.attrs),)


def _g_avg_pool(op, gys):
    return (apply("avg_pool_grad", [gys[0]], None, shape=op.inputs[0].shape, **op.attrs),)


defop(
    "max_pool",
    ("x",),
    _pool_infer,
    _max_pool_ref,
    _g_max_pool,
    attrs=_POOL_ATTRS,
    resolve=_window_resolve,
    flops=_flops_pool,
    kind=KERNEL,
    doc="max over sliding windows; pads never win",
    examples=(
        Example((Sample((1, 2, 5, 5)),), {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
        Example(
            (Sample((2, 1, 6, 5)),),
            {"kernel_shape": (2, 3), "strides": (2, 2), "dilations": (2, 1), "ceil_mode": True},
        ),
        Example((Sample((2, 2, 7), "float64"),), {"kernel_shape": (3,), "strides": (2,), "pads": (1, 1)}),
        Example(
            (Sample((1, 2, 3, 4, 4), "int32", -9, 9),),
            {"kernel_shape": (2, 2, 2), "strides": (1, 2, 2), "pads": (0, 1, 0, 0, 1, 0)},
        ),
    )
    # the other types (runtime_c instantiates the kernel per type; pads start at its lowest
    # value), uneven pads and a last partial window
    + tuple(
        Example(
            (Sample((2, 2, 6, 5), dt, -9, 9),),
            {"kernel_shape": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 1), "ceil_mode": True},
            grad=False,
        )
        for dt in dtypes.NUMERIC
        if dt not in ("float32", "float64", "int32")
    ),
)
defop(
    "avg_pool",
    ("x",),
    _pool_infer,
    _avg_pool_ref,
    _g_avg_pool,
    attrs={**_POOL_ATTRS, "count_include_pad": Attr("bool", False)},
    resolve=_window_resolve,
    flops=_flops_pool,
    kind=KERNEL,
    doc="mean over sliding windows; pads count only if count_include_pad",
    examples=(
        Example((Sample((1, 2, 5, 5)),), {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
        Example(
            (Sample((2, 1, 5, 6)),),
            {
                "kernel_shape": (2, 2),
                "strides": (2, 2),
                "pads": (1, 0, 0, 1),
                "ceil_mode": True,
                "count_include_pad": True,
            },
        ),  # fmt: skip
        Example((Sample((2, 2, 8)),), {"kernel_shape": (3,), "dilations": (2,), "pads": (2, 1)}),
        Example(
            (Sample((1, 2, 3, 4, 4), "float64"),),
            {"kernel_shape": (2, 2, 2), "strides": (1, 2, 2), "pads": (0, 1, 0, 0, 1, 0)},
        ),
        Example(
            (Sample((1, 2, 6, 6), "float16"),),
            {
                "kernel_shape": (3, 3),
                "strides": (2, 2),
                "pads": (1, 1, 1, 1),
                "ceil_mode": True,
                "count_include_pad": True,
            },
            grad=False,
        ),
    ),
)


def _max_pool_grad_infer(types, attrs):
    x, gy = types
    same_dtype(types, dtypes.FLOATS)
    want = _pool_infer([x], attrs)
    if gy.shape != want.shape:
        raise ShapeError(f"gradient shape {gy.shape} must be {want.shape}")
    return x


def _max_pool_grad_ref(xs, attrs):
    x, gy = xs
    kernel = attrs["kernel_shape"]
    out_sp = gy.shape[2:]
    xp = _padded(x, attrs, out_sp, kernel, _lowest(x.dtype))
    best = best_k = None
    windows = list(_windows(x.shape[2:], kernel, attrs, out_sp))
    for j, (_, sl) in enumerate(windows):
        v = xp[(slice(None), slice(None)) + sl]
        if best is None:
            best, best_k = v.copy(), np.zeros(v.shape, np.int64)
        else:
            better = v > best
            best = np.where(better, v, best)
            best_k = np.where(better, j, best_k)
    gp = np.zeros(xp.shape, dtype=widen_half(gy).dtype)
    for j, (_, sl) in enumerate(windows):
        gp[(slice(None), slice(None)) + sl] += np.where(best_k == j, gy, 0)
    n = len(kernel)
    crop = tuple(slice(attrs["pads"][i], attrs["pads"][i] + x.shape[2 + i]) for i in range(n))
    return gp[(slice(None), slice(None)) + crop].astype(x.dtype)


defop(
    "max_pool_grad",
    ("x", "gy"),
    _max_pool_grad_infer,
    _max_pool_grad_ref,
    NotDifferentiable("second-order gradients of max_pool are not implemented", error=True),
    attrs=_POOL_ATTRS,
    resolve=_window_resolve,
    kind=KERNEL,
    doc="gradient of max_pool: gy routed to the first maximum of each window",
    examples=(
        Example(
            (Sample((1, 2, 5, 5)), Sample((1, 2, 3, 3))),
            {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
        ),
        Example(
            (Sample((2, 2, 7), "float64"), Sample((2, 2, 4), "float64")),
            {"kernel_shape": (3,), "strides": (2,), "pads": (1, 1)},
        ),
        Example(
            (Sample((1, 2, 4, 4), "float16"), Sample((1, 2, 2, 2), "float16")),
            {"kernel_shape": (2, 2), "strides": (2, 2)},
            grad=False,
        ),
    ),
)


def _avg_pool_grad_infer(types, attrs):
    gy = types[0]
    x = TensorType(attrs["shape"], gy.dtype)
    want = _pool_infer([x], attrs)
    if gy.shape != want.shape:
        raise ShapeError(f"gradient shape {gy.shape} must be {want.shape}")
    return x


def _avg_pool_grad_ref(xs, attrs):
    gy = widen_half(xs[0])
    shape = attrs["shape"]
    kernel = attrs["kernel_shape"]
    out_sp = gy.shape[2:]
    g = gy / _pool_counts(shape[2:], attrs, out_sp)
    gp = _padded(np.zeros(shape, gy.dtype), attrs, out_sp, kernel, 0)
    for _, sl in _windows(shape[2:], kernel, attrs, out_sp):
        gp[(slice(None), slice(None)) + sl] += g
    n = len(kernel)
    crop = tuple(slice(attrs["pads"][i], attrs["pads"][i] + shape[2 + i]) for i in range(n))
    return gp[(slice(None), slice(None)) + crop].astype(xs[0].dtype)


def _g_avg_pool_grad(op, gys):
    a = {k: v for k, v in op.attrs.items() if k != "shape"}
    return (apply("avg_pool", [gys[0]], None, **a),)


def _avg_pool_grad_resolve(types, attrs):
    return _window_resolve([TensorType(attrs["shape"], types[0].dtype)], attrs)


defop(
    "avg_pool_grad",
    ("gy",),
    _avg_pool_grad_infer,
    _avg_pool_grad_ref,
    _g_avg_pool_grad,
    attrs={**_POOL_ATTRS, "count_include_pad": Attr("bool", False), "shape": Attr("ints")},
    resolve=_avg_pool_grad_resolve,
    kind=KERNEL,
    doc="gradient of avg_pool: each window's share spread back over its cells",
    examples=(
        Example(
            (Sample((1, 2, 3, 3)),),
            {"shape": (1, 2, 5, 5), "kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
        ),
        Example(
            (Sample((2, 2, 4), "float64"),),
            {
                "shape": (2, 2, 7),
                "kernel_shape": (2,),
                "strides": (2,),
                "ceil_mode": True,
                "count_include_pad": True,
            },
        ),  # fmt: skip
        Example(
            (Sample((2, 1, 3, 3)),),
            {
                "shape": (2, 1, 5, 6),
                "kernel_shape": (2, 2),
                "strides": (2, 2),
                "pads": (1, 0, 0, 1),
                "ceil_mode": True,
                "count_include_pad": True,
            },
        ),  # fmt: skip
        Example(
            (Sample((1, 2, 4, 4), "float16"),),
            {"shape": (1, 2, 4, 4), "kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)},
            grad=False,
        ),
    ),
)


def _lp_pool_infer(types, attrs):
    check_dtype(types[0], dtypes.FLOATS)
    return _pool_infer(types, attrs)


def _lp_pool_ref(xs, attrs):
    x, p = xs[0], attrs["p"]
    kernel = attrs["kernel_shape"]
    out_sp = _out_spatial(x.shape[2:], kernel, attrs, attrs["ceil_mode"])
    xp = _padded(np.abs(x.astype(np.float64)) ** p, attrs, out_sp, kernel, 0)
    total = 0
    for _, sl in _windows(x.shape[2:], kernel, attrs, out_sp):
        total = total + xp[(slice(None), slice(None)) + sl]
    return (total ** (1.0 / p)).astype(x.dtype)


def _g_lp_pool(op, gys):
    """y = s ** (1/p) with s the window sums of |x| ** p: gx = sign(x) |x| ** (p-1) times the
    window sums (over the windows holding x) of gy * y ** (1-p); a window sum is avg_pool's
    gradient of gy times each window's cell count."""
    from .elementwise import abs, pow, sign

    x, y, g = op.inputs[0], op.outputs[0], gys[0]
    p = op.attrs["p"]
    a = {k: v for k, v in op.attrs.items() if k != "p"}
    counts = _pool_counts(x.shape[2:], {**a, "count_include_pad": False}, y.shape[2:])
    w = mul(g, constant(counts.astype(dtypes.np_dtype(x.dtype))))
    w = w if p == 1 else mul(w, pow(y, 1.0 - p))
    spread = apply("avg_pool_grad", [w], None, shape=x.shape, count_include_pad=False, **a)
    return (mul(spread, sign(x) if p == 1 else mul(sign(x), pow(abs(x), p - 1.0))),)


defop(
    "lp_pool",
    ("x",),
    _lp_pool_infer,
    _lp_pool_ref,
    _g_lp_pool,
    attrs={**_POOL_ATTRS, "p": Attr("float", 2.0)},
    resolve=_window_resolve,
    flops=_flops_pool,
    kind=KERNEL,
    doc="(sum of |x| ** p over each window's input cells) ** (1/p); pads add nothing (ONNX LpPool)",
    examples=(
        Example((Sample((1, 2, 5, 5)),), {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
        Example((Sample((2, 2, 7), "float64"),), {"kernel_shape": (3,), "p": 3.0, "ceil_mode": True}),
        Example((Sample((1, 1, 4, 4)),), {"kernel_shape": (2, 2), "p": 1.0, "dilations": (2, 1)}),
    ),
)


def lp_pool(x, kernel_shape, p=2.0, strides=None, pads=None, dilations=None, ceil_mode=False, name=None):
    """The p-norm of every window (ONNX LpPool)."""
    return apply(
        "lp_pool",
        [operand(x)],
        name,
        kernel_shape=kernel_shape,
        p=p,
        strides=strides,
        pads=pads,
        dilations=dilations,
        ceil_mode=ceil_mode,
    )


def max_pool(x, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=False, name=None):
    return apply(
        "max_pool",
        [operand(x)],
        name,
        kernel_shape=kernel_shape,
        strides=strides,
        pads=pads,
        dilations=dilations,
        ceil_mode=ceil_mode,
    )


def avg_pool(
    x,
    kernel_shape,
    strides=None,
    pads=None,
    dilations=None,
    ceil_mode=False,
    count_include_pad=False,
    name=None,
):
    return apply(
        "avg_pool",
        [operand(x)],
        name,
        kernel_shape=kernel_shape,
        strides=strides,
        pads=pads,
        dilations=dilations,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
    )


def _pool2d_args(x, kernel, stride, padding):
    x = operand(x)
    if x.rank != 4:
        raise ShapeError(f"2-D pooling needs a 4-D input, got {x.shape}")
    kernel = _pairs(kernel, 2, "kernel")
    strides = kernel if stride is None else _pairs(stride, 2, "stride")
    if padding == "same":
        pads = same_pads(x.shape[2:], kernel, strides, (1, 1))
    elif padding == "valid":
        pads = (0, 0, 0, 0)
    else:
        pads = _pairs(padding, 2, "padding") * 2 if isinstance(padding, int) or len(padding) == 2 else padding
    return x, kernel, strides, pads


def max_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False, name=None):
    """2-D max pooling; stride defaults to the kernel size (as in PyTorch)."""
    x, kernel, strides, pads = _pool2d_args(x, kernel, stride, padding)
    return max_pool(x, kernel, strides, pads, None, ceil_mode, name)


def avg_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=False, name=None):
    x, kernel, strides, pads = _pool2d_args(x, kernel, stride, padding)
    return avg_pool(x, kernel, strides, pads, None, ceil_mode, count_include_pad, name)


def global_avg_pool(x, name=None):
    """Mean over all spatial axes, kept as size 1: a composition of reduce_mean."""
    x = operand(x)
    return reduce_mean(x, axes=tuple(range(2, x.rank)), keepdims=True, name=name)


def global_max_pool(x, name=None):
    """Max over all spatial axes, kept as size 1: a composition of reduce_max."""
    x = operand(x)
    return reduce_max(x, axes=tuple(range(2, x.rank)), keepdims=True, name=name)
