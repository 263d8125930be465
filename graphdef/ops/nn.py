"""Neural-network ops: matmul, gemm, convolution (any number of spatial axes), pooling,
normalization and softmax. Layout is channels-first (N, C, *spatial), as in ONNX.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import apply, constant, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import COMPOSITE, KERNEL, Attr, Example, NotDifferentiable, Sample, defop
from ._util import broadcast_shapes, broadcasts_to, check_dtype, resolve_axis, same_dtype, spatial
from .elementwise import add, div, exp, mul, neg, sqrt, sub, unbroadcast
from .reduce import reduce_max, reduce_mean, reduce_sum
from .shape import pad, reshape, slice_, transpose


def _acc(x: np.ndarray) -> np.ndarray:
    """Compute float16 in float32, as the C kernels do."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


# ----------------------------------------------------------------------------- shapes
def matmul_shapes(a, b):
    ash = (1,) + a.shape if a.rank == 1 else a.shape
    bsh = b.shape + (1,) if b.rank == 1 else b.shape
    return ash, bsh, broadcast_shapes(ash[:-2], bsh[:-2])


def _flops_matmul(ins, outs, attrs):
    ash, bsh, batch = matmul_shapes(*ins)
    return 2 * math.prod(batch) * ash[-2] * ash[-1] * bsh[-1]


def gemm_dims(ins, attrs):
    a, b = ins[:2]
    m, k = a.shape[::-1] if attrs["trans_a"] else a.shape
    return m, k, b.shape[0] if attrs["trans_b"] else b.shape[1]


def _flops_gemm(ins, outs, attrs):
    m, k, n = gemm_dims(ins, attrs)
    return 2 * m * n * k


def _flops_conv(ins, outs, attrs):
    w = ins[1]
    return 2 * outs[0].size * math.prod(w.shape[1:])


def _flops_conv_t(ins, outs, attrs):
    x, w = ins[:2]
    return 2 * x.size * math.prod(w.shape[1:])


def _flops_pool(ins, outs, attrs):
    return outs[0].size * math.prod(attrs["kernel_shape"])


# ----------------------------------------------------------------------------- matmul
def _einsum(spec: str, alpha=1.0):
    """An example's expectation: ``alpha`` times an explicit einsum, in float64 (int64)."""

    def expect(*arrays):
        acc = np.int64 if arrays[0].dtype.kind in "iu" else np.float64
        y = np.einsum(spec, *(a.astype(acc) for a in arrays))
        return y if alpha == 1 else alpha * y

    return expect


def _gemm_expect(spec, alpha=1.0, beta=1.0):
    def expect(a, b, c=None):
        y = _einsum(spec, alpha)(a, b)
        return y if c is None else y + beta * c.astype(y.dtype)

    return expect


def _matmul_infer(types, attrs):
    a, b = types
    dt = same_dtype(types, dtypes.NUMERIC)
    if a.rank == 0 or b.rank == 0:
        raise ShapeError("matmul needs inputs of rank >= 1")
    ash = (1,) + a.shape if a.rank == 1 else a.shape
    bsh = b.shape + (1,) if b.rank == 1 else b.shape
    if ash[-1] != bsh[-2]:
        raise ShapeError(f"inner dimensions differ: {a.shape} @ {b.shape}")
    batch = broadcast_shapes(ash[:-2], bsh[:-2])
    out = batch + (ash[-2], bsh[-1])
    if a.rank == 1:
        out = out[:-2] + out[-1:]
    if b.rank == 1:
        out = out[:-1]
    return TensorType(out, dt)


def _matmul_ref(xs, attrs):
    a, b = xs
    return np.matmul(_acc(a), _acc(b)).astype(a.dtype)


def _swap(t):
    perm = list(range(t.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return transpose(t, perm)


def _g_matmul(op, gys):
    a, b = op.inputs
    a2 = reshape(a, (1,) + a.shape) if a.rank == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.rank == 1 else b
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    g = reshape(gys[0], batch + (a2.shape[-2], b2.shape[-1]))
    return (
        op.want(0, lambda: reshape(unbroadcast(matmul(g, _swap(b2)), a2.shape), a.shape)),
        op.want(1, lambda: reshape(unbroadcast(matmul(_swap(a2), g), b2.shape), b.shape)),
    )


defop(
    "matmul",
    ("a", "b"),
    _matmul_infer,
    _matmul_ref,
    _g_matmul,
    flops=_flops_matmul,
    kind=KERNEL,
    doc="numpy matmul: batched, broadcast over leading axes, 1-D operands promoted",
    examples=(
        Example((Sample((3, 4)), Sample((4, 2))), expect=_einsum("ik,kj->ij")),
        Example((Sample((2, 1, 3, 4)), Sample((3, 4, 2))), expect=_einsum("...ik,...kj->...ij")),
        Example((Sample((4,), "float64"), Sample((2, 4, 3), "float64")), expect=_einsum("k,bkj->bj")),
        Example((Sample((3, 4), "int32", -9, 9), Sample((4,), "int32", -9, 9)), expect=_einsum("ik,k->i")),
    ),
)


def matmul(a, b, name=None):
    return apply("matmul", [operand(a), operand(b)], name)


def _gemm_infer(types, attrs):
    a, b = types[:2]
    dt = same_dtype(types, dtypes.NUMERIC)
    if a.rank != 2 or b.rank != 2:
        raise ShapeError("gemm needs 2-D a and b")
    m, k = a.shape[::-1] if attrs["trans_a"] else a.shape
    k2, n = b.shape[::-1] if attrs["trans_b"] else b.shape
    if k != k2:
        raise ShapeError(f"inner dimensions differ: {k} vs {k2}")
    if len(types) == 3 and not broadcasts_to(types[2].shape, (m, n)):
        raise ShapeError(f"c of shape {types[2].shape} does not broadcast to {(m, n)}")
    return TensorType((m, n), dt)


def _gemm_ref(xs, attrs):
    a, b = _acc(xs[0]), _acc(xs[1])
    a = a.T if attrs["trans_a"] else a
    b = b.T if attrs["trans_b"] else b
    y = attrs["alpha"] * (a @ b) if attrs["alpha"] != 1.0 else a @ b
    if len(xs) == 3:
        y = y + (attrs["beta"] * _acc(xs[2]) if attrs["beta"] != 1.0 else _acc(xs[2]))
    return np.asarray(y).astype(xs[0].dtype)


def _g_gemm(op, gys):
    a, b = op.inputs[:2]
    alpha, beta = op.attrs["alpha"], op.attrs["beta"]
    g = mul(gys[0], alpha) if alpha != 1.0 else gys[0]
    a_ = transpose(a) if op.attrs["trans_a"] else a
    b_ = transpose(b) if op.attrs["trans_b"] else b

    def ga():
        t = matmul(g, transpose(b_))
        return transpose(t) if op.attrs["trans_a"] else t

    def gb():
        t = matmul(transpose(a_), g)
        return transpose(t) if op.attrs["trans_b"] else t

    def gc():
        t = unbroadcast(gys[0], op.inputs[2].shape)
        return mul(t, beta) if beta != 1.0 else t

    return (op.want(0, ga), op.want(1, gb)) + ((op.want(2, gc),) if len(op.inputs) == 3 else ())


defop(
    "gemm",
    ("a", "b", "c?"),
    _gemm_infer,
    _gemm_ref,
    _g_gemm,
    attrs={
        "alpha": Attr("float", 1.0),
        "beta": Attr("float", 1.0),
        "trans_a": Attr("bool", False),
        "trans_b": Attr("bool", False),
    },
    flops=_flops_gemm,
    kind=KERNEL,
    doc="alpha * op(a) @ op(b) + beta * c, op = transpose if trans_*",
    examples=(
        Example(
            (Sample((4, 3)), Sample((2, 4)), Sample((2,))),
            {"trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 2.0},
            _gemm_expect("ki,jk->ij", 0.5, 2.0),
        ),
        Example(
            (Sample((4, 3)), Sample((4, 5)), Sample((3, 1))), {"trans_a": True}, _gemm_expect("ki,kj->ij")
        ),
        Example(
            (Sample((3, 4), "float64"), Sample((5, 4), "float64")),
            {"trans_b": True},
            _gemm_expect("ik,jk->ij"),
        ),
        Example(
            (Sample((3, 4), "int32", -9, 9), Sample((4, 2), "int32", -9, 9), Sample((3, 2), "int32", -9, 9)),
            {"alpha": 2.0, "beta": -1.0},
            _gemm_expect("ik,kj->ij", 2, -1),
        ),
    ),
)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False, name=None):
    inputs = [operand(a), operand(b)] + ([operand(c)] if c is not None else [])
    return apply("gemm", inputs, name, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)


# ----------------------------------------------------------------------------- windows
def window_out(size, k, stride, pad_b, pad_e, dilation, ceil_mode=False) -> int:
    """Output length of a sliding window (conv or pool) along one axis."""
    span = dilation * (k - 1) + 1
    room = size + pad_b + pad_e - span
    if room < 0:
        raise ShapeError(f"window of span {span} is larger than the padded input {size + pad_b + pad_e}")
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_b:
        out -= 1  # the last window must start inside the input or the leading pad
    return out


def _window_resolve(types, attrs, kernel=None):
    n = types[0].rank - 2
    if n < 1:
        raise ShapeError(f"expected (N, C, *spatial) input, got rank {types[0].rank}")
    out = dict(attrs)
    out["strides"] = spatial(attrs, "strides", n, 1)
    out["dilations"] = spatial(attrs, "dilations", n, 1)
    out["pads"] = spatial(attrs, "pads", 2 * n, 0)
    if any(s < 1 for s in out["strides"]) or any(d < 1 for d in out["dilations"]):
        raise ShapeError(f"strides {out['strides']} and dilations {out['dilations']} must be >= 1")
    if any(p < 0 for p in out["pads"]):
        raise ShapeError(f"pads {out['pads']} must be >= 0")
    if "kernel_shape" in attrs and len(attrs["kernel_shape"]) != n:
        raise ShapeError(f"kernel_shape {attrs['kernel_shape']} must have {n} values")
    return out


def _out_spatial(in_shape, kernel, attrs, ceil_mode=False):
    n = len(kernel)
    return tuple(
        window_out(
            in_shape[i],
            kernel[i],
            attrs["strides"][i],
            attrs["pads"][i],
            attrs["pads"][n + i],
            attrs["dilations"][i],
            ceil_mode,
        )
        for i in range(n)
    )


def _windows(in_spatial, kernel, attrs, out_spatial):
    """For each kernel offset: (offset tuple, slices into the padded input)."""
    s, d = attrs["strides"], attrs["dilations"]
    for k in np.ndindex(*kernel):
        yield (
            k,
            tuple(
                slice(k[i] * d[i], k[i] * d[i] + s[i] * (out_spatial[i] - 1) + 1, s[i])
                for i in range(len(kernel))
            ),
        )


def _padded(x, attrs, out_spatial, kernel, value):
    """x padded by pads, plus what ceil_mode windows reach past the end."""
    n = len(kernel)
    s, d, p = attrs["strides"], attrs["dilations"], attrs["pads"]
    width = [(0, 0), (0, 0)]
    for i in range(n):
        need = (out_spatial[i] - 1) * s[i] + d[i] * (kernel[i] - 1) + 1
        end = max(p[n + i], need - x.shape[2 + i] - p[i])
        width.append((p[i], end))
    return np.pad(x, width, mode="constant", constant_values=value)


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
    x, w = _acc(xs[0]), _acc(xs[1])
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
        out += _acc(xs[2]).reshape((1, m) + (1,) * len(kernel))
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
    x, gy = _acc(xs[0]), _acc(xs[1])
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
    ),
)


def conv(x, w, b=None, strides=None, pads=None, dilations=None, group=1, name=None):
    inputs = [operand(x), operand(w)] + ([operand(b)] if b is not None else [])
    return apply("conv", inputs, name, strides=strides, pads=pads, dilations=dilations, group=group)


def same_pads(in_spatial, kernel, strides, dilations, upper=True) -> tuple[int, ...]:
    """Pads for 'same' output size ceil(in / stride); the odd pixel goes at the end if upper."""
    begins, ends = [], []
    for i, k, s, d in zip(in_spatial, kernel, strides, dilations):
        total = max((-(-i // s) - 1) * s + d * (k - 1) + 1 - i, 0)
        small = total // 2
        begins.append(small if upper else total - small)
        ends.append(total - small if upper else small)
    return tuple(begins + ends)


def _pairs(v, n, what):
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    if len(v) != n:
        raise ShapeError(f"{what} {v} must have {n} values")
    return v


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
    x, w = _acc(xs[0]), _acc(xs[1])
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
        out += _acc(xs[2]).reshape((1, -1) + (1,) * sp)
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
    x = _acc(xs[0])
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
    gp = np.zeros(xp.shape, dtype=_acc(gy).dtype)
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
    gy = _acc(xs[0])
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
    x, scale, bias, mean, var = (_acc(v) for v in xs)
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
    x = _acc(xs[0])
    axes = tuple(range(attrs["axis"], x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    c = x - mu
    var = (c * c).mean(axis=axes, keepdims=True)
    y = c / np.sqrt(var + x.dtype.type(attrs["epsilon"])) * _acc(xs[1])
    if len(xs) == 3:
        y = y + _acc(xs[2])
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
    ),
)


def layer_norm(x, scale, bias=None, axis=-1, epsilon=1e-5, name=None):
    inputs = [operand(x), operand(scale)] + ([operand(bias)] if bias is not None else [])
    return apply("layer_norm", inputs, name, axis=axis, epsilon=epsilon)


# ----------------------------------------------------------------------------- softmax
def _softmax_ref(xs, attrs):
    x = _acc(xs[0])
    e = np.exp(x - x.max(axis=attrs["axis"], keepdims=True))
    return (e / e.sum(axis=attrs["axis"], keepdims=True)).astype(xs[0].dtype)


def _log_softmax_ref(xs, attrs):
    x = _acc(xs[0])
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
    ),
)


def softmax(x, axis=-1, name=None):
    return apply("softmax", [operand(x)], name, axis=axis)


def log_softmax(x, axis=-1, name=None):
    return apply("log_softmax", [operand(x)], name, axis=axis)


# the builders that graphdef exports (``gd.avg_pool`` ...)
__all__ = [
    "avg_pool",
    "avg_pool2d",
    "batch_norm",
    "conv",
    "conv2d",
    "conv_transpose",
    "conv_transpose2d",
    "gemm",
    "global_avg_pool",
    "global_max_pool",
    "layer_norm",
    "log_softmax",
    "lp_pool",
    "matmul",
    "max_pool",
    "max_pool2d",
    "softmax",
]
