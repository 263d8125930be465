"""Convolution and transposed convolution over any number of spatial axes (channels-first,
N, C, *spatial, as in ONNX), their weight and bias gradients.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import apply, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import KERNEL, Attr, Example, NotDifferentiable, Sample, defop
from ._util import same_dtype, spatial, widen_half
from .reduce import reduce_sum
from .shape import pad, reshape, slice_, transpose
from .windows import _out_spatial, _padded, _pairs, _window_resolve, _windows, same_pads


def _flops_conv(ins, outs, attrs):
    w = ins[1]
    return 2 * outs[0].size * math.prod(w.shape[1:])


def _flops_conv_t(ins, outs, attrs):
    x, w = ins[:2]
    return 2 * x.size * math.prod(w.shape[1:])


# ----------------------------------------------------------------------------- conv
_CONV_ATTRS = {
    "strides": Attr("ints", None),
    "pads": Attr("ints", None),
    "dilations": Attr("ints", None),
    "group": Attr("int", 1),
}


def _conv_infer(types, attrs):
    x, w = types[:2]
    dt = same_dtype(types, dtypes.FLOATS)
    g = attrs["group"]
    if w.rank != x.rank:
        raise ShapeError(f"weight rank {w.rank} differs from input rank {x.rank}")
    if g < 1 or x.shape[1] != w.shape[1] * g or w.shape[0] % g:
        raise ShapeError(f"channels: input {x.shape[1]}, weight {w.shape[:2]}, group {g} do not match")
    if len(types) == 3 and types[2].shape != (w.shape[0],):
        raise ShapeError(f"bias shape {types[2].shape} must be ({w.shape[0]},)")
    return TensorType((x.shape[0], w.shape[0]) + _out_spatial(x.shape[2:], w.shape[2:], attrs), dt)


def conv_ref(xs, attrs):
    x, w = widen_half(xs[0]), widen_half(xs[1])
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    g = attrs["group"]
    kernel = w.shape[2:]
    out_sp = _out_spatial(x.shape[2:], kernel, attrs)
    xp = _padded(x, attrs, out_sp, kernel, 0)
    wg = w.reshape((g, m // g, cg) + kernel)
    out = np.zeros((n, g, m // g, math.prod(out_sp)), dtype=x.dtype)
    for k, sl in _windows(x.shape[2:], kernel, attrs, out_sp):
        patch = xp[(slice(None), slice(None)) + sl].reshape(n, g, cg, -1)
        out += np.einsum("ngcp,gmc->ngmp", patch, wg[(...,) + k])
    out = out.reshape((n, m) + out_sp)
    if len(xs) == 3:
        out += widen_half(xs[2]).reshape((1, m) + (1,) * len(kernel))
    return out.astype(xs[0].dtype)


def _conv_weight_grad(x, gy, kernel, attrs):
    """d(conv)/d(weight), itself a convolution of x with gy (strides and dilations swap)."""
    g = attrs["group"]
    n, c = x.shape[:2]
    m = gy.shape[1]
    sp = len(kernel)
    # x: (N, G*Cg, *I) -> (Cg, G*N, *I);  gy: (N, G*Mg, *O) -> (G*Mg, N, *O)
    xt = reshape(x, (n, g, c // g) + x.shape[2:])
    xt = transpose(xt, (2, 1, 0) + tuple(range(3, 3 + sp)))
    xt = reshape(xt, (c // g, g * n) + x.shape[2:])
    gt = reshape(gy, (n, g, m // g) + gy.shape[2:])
    gt = transpose(gt, (1, 2, 0) + tuple(range(3, 3 + sp)))
    gt = reshape(gt, (m, n) + gy.shape[2:])
    dw = conv(
        xt, gt, strides=attrs["dilations"], pads=attrs["pads"], dilations=attrs["strides"], group=g
    )  # (Cg, M, K')
    dw = slice_(dw, [0] * sp, list(kernel), list(range(2, 2 + sp)))
    return transpose(dw, (1, 0) + tuple(range(2, 2 + sp)))


def _conv_wgrad_infer(types, attrs):
    x, gy = types
    dt = same_dtype(types, dtypes.FLOATS)
    g, kernel = attrs["group"], tuple(attrs["kernel"])
    if x.rank != gy.rank or x.rank != len(kernel) + 2 or x.shape[0] != gy.shape[0]:
        raise ShapeError(f"conv_weight_grad of x {x.shape} and gy {gy.shape} with kernel {kernel}")
    if g < 1 or x.shape[1] % g or gy.shape[1] % g:
        raise ShapeError(f"channels: x {x.shape[1]}, gy {gy.shape[1]}, group {g} do not match")
    if _out_spatial(x.shape[2:], kernel, attrs) != gy.shape[2:]:
        raise ShapeError(f"gy {gy.shape} is not the output of a {kernel} conv of x {x.shape}")
    return TensorType((gy.shape[1], x.shape[1] // g) + kernel, dt)


def _conv_wgrad_ref(xs, attrs):
    x, gy = widen_half(xs[0]), widen_half(xs[1])
    n, c = x.shape[:2]
    m, g, kernel = gy.shape[1], attrs["group"], tuple(attrs["kernel"])
    out_sp = gy.shape[2:]
    xp = _padded(x, attrs, out_sp, kernel, 0)
    gg = gy.reshape(n, g, m // g, -1)
    dw = np.zeros((g, m // g, c // g) + kernel, dtype=x.dtype)
    for k, sl in _windows(x.shape[2:], kernel, attrs, out_sp):
        patch = xp[(slice(None), slice(None)) + sl].reshape(n, g, c // g, -1)
        dw[(...,) + k] = np.einsum("ngmp,ngcp->gmc", gg, patch)
    return dw.reshape((m, c // g) + kernel).astype(xs[0].dtype)


defop(
    "conv_weight_grad",
    ("x", "gy"),
    _conv_wgrad_infer,
    _conv_wgrad_ref,
    NotDifferentiable("second derivatives of a convolution are not built", error=True),
    attrs={**{k: Attr("ints") for k in ("kernel", "strides", "pads", "dilations")}, "group": Attr("int", 1)},
    flops=lambda ins, outs, attrs: 2 * ins[1].size * outs[0].size // max(ins[1].shape[1], 1),
    kind=KERNEL,
    doc="the weight gradient of conv(x, w) given the output's gradient gy: (M, C/group, *kernel)",
    examples=(
        Example(
            (Sample((2, 3, 5, 5)), Sample((2, 4, 5, 5))),
            {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)},
        ),
        Example(
            (Sample((1, 4, 7, 6)), Sample((1, 6, 3, 3))),
            {"kernel": (2, 3), "strides": (2, 1), "pads": (0, 0, 0, 1), "dilations": (1, 2), "group": 2},
        ),
    ),
)


def _g_conv(op, gys):
    x, w = op.inputs[:2]
    gy = gys[0]
    a = op.attrs
    sp = len(w.shape) - 2
    kernel = w.shape[2:]
    out_pad = [
        x.shape[2 + i]
        - (
            (gy.shape[2 + i] - 1) * a["strides"][i]
            + a["dilations"][i] * (kernel[i] - 1)
            + 1
            - a["pads"][i]
            - a["pads"][sp + i]
        )
        for i in range(sp)
    ]
    return (
        op.want(
            0,
            lambda: conv_transpose(
                gy,
                w,
                strides=a["strides"],
                pads=a["pads"],
                group=a["group"],
                dilations=a["dilations"],
                output_padding=out_pad,
            ),
        ),
        op.want(1, lambda: _weight_grad(x, gy, kernel, a)),
    ) + _bias_grad(op, gy)


def _weight_grad(x, gy, kernel, a):
    """float32: the conv_weight_grad op (the C backend's GEMM over each image's im2col);
    other float types: the same as a convolution of x by gy."""
    if x.dtype == "float32" and gy.dtype == "float32":
        attrs = {k: a[k] for k in ("strides", "pads", "dilations", "group")}
        return apply("conv_weight_grad", [x, gy], None, kernel=tuple(kernel), **attrs)
    return _conv_weight_grad(x, gy, kernel, a)


def _bias_grad(op, gy):
    if len(op.inputs) < 3:
        return ()
    return (op.want(2, lambda: reduce_sum(gy, axes=(0,) + tuple(range(2, gy.rank)))),)


defop(
    "conv",
    ("x", "w", "b?"),
    _conv_infer,
    conv_ref,
    _g_conv,
    attrs=_CONV_ATTRS,
    resolve=_window_resolve,
    flops=_flops_conv,
    kind=KERNEL,
    doc="cross-correlation; x (N, C, *I), w (M, C/group, *K), pads = begins then ends",
    examples=(
        Example(
            (Sample((1, 4, 4, 5)), Sample((4, 2, 2, 3)), Sample((4,))),
            {"strides": (2, 1), "pads": (1, 0, 1, 1), "group": 2},
        ),
        # depthwise (group == channels, one input channel per group), channel multiplier 2
        Example(
            (Sample((1, 2, 5, 5)), Sample((4, 1, 3, 3)), Sample((4,))),
            {"strides": (2, 2), "pads": (1, 1, 1, 1), "group": 2},
        ),
        Example(
            (Sample((2, 3, 7), "float64"), Sample((2, 3, 3), "float64")), {"pads": (1, 2), "dilations": (2,)}
        ),
        Example((Sample((1, 2, 3, 3, 4)), Sample((2, 2, 2, 2, 2))), {"pads": (0, 1, 0, 0, 0, 1)}),
        # dilated and grouped with weights computed at run time, float32 (the fast GEMM) and
        # float16; a grouped 1-D conv and a strided 3-D one in float32
        *(
            Example(
                (Sample((1, 4, 7, 6), dt), Sample((6, 2, 3, 2), dt), Sample((6,), dt)),
                {"strides": (2, 2), "pads": (1, 0, 0, 1), "dilations": (1, 2), "group": 2},
                grad=False,
            )
            for dt in ("float32", "float16")
        ),
        Example((Sample((2, 6, 9)), Sample((3, 2, 3))), {"pads": (1, 1), "group": 3}, grad=False),
        Example((Sample((1, 2, 4, 5, 3)), Sample((2, 2, 2, 2, 2))), {"strides": (1, 2, 1)}, grad=False),
    ),
)


def conv(x, w, b=None, strides=None, pads=None, dilations=None, group=1, name=None):
    inputs = [operand(x), operand(w)] + ([operand(b)] if b is not None else [])
    return apply("conv", inputs, name, strides=strides, pads=pads, dilations=dilations, group=group)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1, name=None):
    """2-D convolution. padding: int, (ph, pw), (top, left, bottom, right), 'same' or 'valid'."""
    x, w = operand(x), operand(w)
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"conv2d needs 4-D input and weight, got {x.shape} and {w.shape}")
    strides, dilations = _pairs(stride, 2, "stride"), _pairs(dilation, 2, "dilation")
    if padding == "same":
        pads = same_pads(x.shape[2:], w.shape[2:], strides, dilations)
    elif padding == "valid":
        pads = (0, 0, 0, 0)
    elif isinstance(padding, int) or len(padding) == 2:
        pads = _pairs(padding, 2, "padding") * 2
    else:
        pads = tuple(padding)
    return conv(x, w, b, strides, pads, dilations, groups, name)


def _conv_t_out(in_shape, kernel, attrs):
    n = len(kernel)
    s, d, p, op = attrs["strides"], attrs["dilations"], attrs["pads"], attrs["output_padding"]
    out = tuple(
        (in_shape[i] - 1) * s[i] + d[i] * (kernel[i] - 1) + 1 - p[i] - p[n + i] + op[i] for i in range(n)
    )
    if any(o < 1 for o in out):
        raise ShapeError(f"output size {out} is not positive")
    return out


def _conv_t_resolve(types, attrs):
    out = _window_resolve(types, attrs)
    out["output_padding"] = spatial(attrs, "output_padding", types[0].rank - 2, 0)
    if any(p < 0 for p in out["output_padding"]):
        raise ShapeError(f"output_padding {out['output_padding']} must be >= 0")
    return out


def _conv_t_infer(types, attrs):
    x, w = types[:2]
    dt = same_dtype(types, dtypes.FLOATS)
    g = attrs["group"]
    if w.rank != x.rank:
        raise ShapeError(f"weight rank {w.rank} differs from input rank {x.rank}")
    if g < 1 or x.shape[1] != w.shape[0] or w.shape[0] % g:
        raise ShapeError(f"channels: input {x.shape[1]}, weight {w.shape[:2]}, group {g} do not match")
    m = w.shape[1] * g
    if len(types) == 3 and types[2].shape != (m,):
        raise ShapeError(f"bias shape {types[2].shape} must be ({m},)")
    return TensorType((x.shape[0], m) + _conv_t_out(x.shape[2:], w.shape[2:], attrs), dt)


def _conv_t_ref(xs, attrs):
    x, w = widen_half(xs[0]), widen_half(xs[1])
    n, c = x.shape[:2]
    mg = w.shape[1]
    g = attrs["group"]
    kernel = w.shape[2:]
    sp = len(kernel)
    in_sp = x.shape[2:]
    s, d = attrs["strides"], attrs["dilations"]
    full_sp = tuple((in_sp[i] - 1) * s[i] + d[i] * (kernel[i] - 1) + 1 for i in range(sp))
    full = np.zeros((n, g, mg) + full_sp, dtype=x.dtype)
    xg = x.reshape((n, g, c // g, -1))
    wg = w.reshape((g, c // g, mg) + kernel)
    for k in np.ndindex(*kernel):
        contrib = np.einsum("ngcp,gcm->ngmp", xg, wg[(...,) + k]).reshape((n, g, mg) + in_sp)
        sl = tuple(slice(k[i] * d[i], k[i] * d[i] + s[i] * (in_sp[i] - 1) + 1, s[i]) for i in range(sp))
        full[(slice(None),) * 3 + sl] += contrib
    full = full.reshape((n, g * mg) + full_sp)
    out_sp = _conv_t_out(in_sp, kernel, attrs)
    out = np.zeros((n, g * mg) + out_sp, dtype=x.dtype)
    p = attrs["pads"]
    src = tuple(slice(p[i], min(p[i] + out_sp[i], full_sp[i])) for i in range(sp))
    dst = tuple(slice(0, max(min(p[i] + out_sp[i], full_sp[i]) - p[i], 0)) for i in range(sp))
    out[(slice(None),) * 2 + dst] = full[(slice(None),) * 2 + src]
    if len(xs) == 3:
        out += widen_half(xs[2]).reshape((1, -1) + (1,) * sp)
    return out.astype(xs[0].dtype)


def _g_conv_t(op, gys):
    x, w = op.inputs[:2]
    gy = gys[0]
    a = op.attrs
    sp = len(w.shape) - 2
    kernel = w.shape[2:]
    full = [
        (x.shape[2 + i] - 1) * a["strides"][i] + a["dilations"][i] * (kernel[i] - 1) + 1 for i in range(sp)
    ]
    # gy covers full[pads_begin : pads_begin + out]; bring it back to the full extent.
    tail = [full[i] - a["pads"][i] - gy.shape[2 + i] for i in range(sp)]
    g_full = pad(gy, [0, 0] + list(a["pads"][:sp]) + [0, 0] + tail)
    ca = {**a, "pads": (0,) * (2 * sp)}
    return (
        op.want(0, lambda: conv(g_full, w, strides=a["strides"], dilations=a["dilations"], group=a["group"])),
        # the weight gradient of "conv(g_full) -> x" has w's layout (C, M/group, *K)
        op.want(1, lambda: _weight_grad(g_full, x, kernel, ca)),
    ) + _bias_grad(op, gy)


defop(
    "conv_transpose",
    ("x", "w", "b?"),
    _conv_t_infer,
    _conv_t_ref,
    _g_conv_t,
    attrs={**_CONV_ATTRS, "output_padding": Attr("ints", None)},
    resolve=_conv_t_resolve,
    flops=_flops_conv_t,
    kind=KERNEL,
    doc="transposed convolution; w (C, M/group, *K); output cropped by pads, grown by output_padding",
    examples=(
        Example(
            (Sample((1, 2, 3, 3)), Sample((2, 3, 3, 3)), Sample((3,))),
            {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 1)},
        ),
        Example(
            (Sample((1, 4, 3, 3)), Sample((4, 1, 2, 2))),
            {"group": 2, "dilations": (2, 1), "pads": (0, 1, 0, 0)},
        ),
        Example(
            (Sample((2, 2, 4), "float64"), Sample((2, 2, 3), "float64"), Sample((2,), "float64")),
            {"strides": (3,), "output_padding": (1,)},
        ),
        Example(
            (Sample((1, 3, 4, 3), "float16"), Sample((3, 2, 3, 3), "float16"), Sample((2,), "float16")),
            {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 1)},
            grad=False,
        ),
    ),
)


def conv_transpose(
    x, w, b=None, strides=None, pads=None, dilations=None, group=1, output_padding=None, name=None
):
    inputs = [operand(x), operand(w)] + ([operand(b)] if b is not None else [])
    return apply(
        "conv_transpose",
        inputs,
        name,
        strides=strides,
        pads=pads,
        dilations=dilations,
        group=group,
        output_padding=output_padding,
    )


def conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1, name=None):
    x = operand(x)
    if x.rank != 4:
        raise ShapeError(f"conv_transpose2d needs 4-D input, got {x.shape}")
    pads = _pairs(padding, 2, "padding") * 2 if isinstance(padding, int) or len(padding) == 2 else padding
    return conv_transpose(
        x,
        w,
        b,
        _pairs(stride, 2, "stride"),
        pads,
        _pairs(dilation, 2, "dilation"),
        groups,
        _pairs(output_padding, 2, "output_padding"),
        name,
    )
