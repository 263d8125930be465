"""Converters for ONNX ops that are compositions of flowc's core ops: attention, the
normalizations, losses, composite reductions, Einsum, Lp pooling, crops and grids.

None of them adds an op to the registry: each is written with elementwise math, matmul,
reductions, softmax, shape ops and, where the data decides nothing, numpy constants built at
import time (causal masks, one-hot class ranges, identity kernels). Attributes that the
composition cannot honour are refused with a reason, never approximated.
"""

from __future__ import annotations

import math
import string

import numpy as np

from .. import dtypes
from ..builder import Tensor, constant
from ..ops import elementwise as E
from ..ops import nn as N
from ..ops import reduce as R
from ..ops import shape as S
from .importer import converter
from .ops_basic import window_pads

# ONNX TensorProto element types accepted as a computation precision (stash_type,
# softmax_precision); bfloat16 (16) has no flowc dtype.
_PRECISION = {1: "float32", 10: "float16", 11: "float64"}


# ----------------------------------------------------------------------------- helpers


def _floats(node, x: Tensor, what: str = "input") -> str:
    if x.dtype not in dtypes.FLOATS:
        raise node.unsupported(f"{what} has dtype {x.dtype}; only float16/32/64 are supported")
    return x.dtype


def _const(value, dtype: str) -> Tensor:
    return constant(np.asarray(value, dtype=dtypes.np_dtype(dtype)))


def _cast(x: Tensor, dtype: str) -> Tensor:
    return x if x.dtype == dtype else E.cast(x, dtype)


def _precision(node, code, what: str) -> str:
    if code not in _PRECISION:
        raise node.unsupported(f"{what}={code} is not supported (1 float, 10 float16 and 11 double are)")
    return _PRECISION[code]


def _stash(node, x: Tensor) -> str:
    """The stage-one precision of the normalizations: stash_type, never below the input's."""
    want = _precision(node, node.attr("stash_type", 1), "stash_type")
    return "float64" if "float64" in (want, x.dtype) else want


def _standardize(x: Tensor, axes, epsilon: float):
    """(x - mean) / sqrt(var + epsilon) over axes (kept as size 1); also the mean and 1/std."""
    mean = R.reduce_mean(x, axes, keepdims=True)
    d = E.sub(x, mean)
    var = R.reduce_mean(E.mul(d, d), axes, keepdims=True)
    inv = E.div(1.0, E.sqrt(E.add(var, epsilon)))
    return E.mul(d, inv), mean, inv


def _channel_shaped(p: Tensor, rank: int) -> Tensor:
    """A per-channel vector (C,) as (C, 1, ..., 1) to broadcast over (N, C, *spatial)."""
    return S.reshape(p, (p.shape[0],) + (1,) * (rank - 2))


# ----------------------------------------------------------------------------- normalization


@converter("LayerNormalization", 17)
def _layer_norm(node):
    """All three outputs; Y alone (float32 stash) uses the layer_norm kernel."""
    x, scale = node.tensor(0), node.tensor(1)
    bias = node.tensor(2) if node.has(2) else None
    axis, eps = node.attr("axis", -1), node.attr("epsilon", 1e-5)
    dt = _floats(node, x)
    if not -x.rank <= axis < x.rank:
        raise node.unsupported(f"axis {axis} is out of range for rank {x.rank}")
    axis %= x.rank
    stash = _stash(node, x)
    if node.num_outputs == 1 and stash == ("float64" if dt == "float64" else "float32") \
            and scale.dtype == dt and (bias is None or bias.dtype == dt):
        return N.layer_norm(x, scale, bias, axis, eps)
    normed, mean, inv = _standardize(_cast(x, stash), tuple(range(axis, x.rank)), eps)
    y = E.mul(_cast(normed, dt), _cast(scale, dt))
    if bias is not None:
        y = E.add(y, _cast(bias, dt))
    return [y, mean, inv][: node.num_outputs]


@converter("RMSNormalization", 23)
def _rms_norm(node):
    x, scale = node.tensor(0), node.tensor(1)
    axis, eps = node.attr("axis", -1), node.attr("epsilon", 1e-5)
    _floats(node, x)
    _floats(node, scale, "scale")
    if not -x.rank <= axis < x.rank:
        raise node.unsupported(f"axis {axis} is out of range for rank {x.rank}")
    xs = _cast(x, _stash(node, x))
    ms = R.reduce_mean(E.mul(xs, xs), tuple(range(axis % x.rank, x.rank)), keepdims=True)
    normed = E.div(xs, E.sqrt(E.add(ms, eps)))
    return E.mul(_cast(_cast(normed, x.dtype), scale.dtype), scale)


def _group_norm(node, per_group: bool):
    x, scale, bias = node.tensor(0), node.tensor(1), node.tensor(2)
    dt = _floats(node, x)
    groups = node.attr("num_groups")
    if x.rank < 2 or groups is None or groups <= 0 or x.shape[1] % groups:
        raise node.unsupported(f"num_groups {groups} must divide the channels of input {x.shape}")
    n, c = x.shape[:2]
    xs = _cast(x, _stash(node, x) if node.opset >= 21 else dt)
    grouped = S.reshape(xs, (n, groups, -1))
    normed, _, _ = _standardize(grouped, (2,), node.attr("epsilon", 1e-5))
    normed = _cast(normed, dt)
    if scale.shape == (c,) and bias.shape == (c,):
        y = S.reshape(normed, x.shape)
        return E.add(E.mul(y, _channel_shaped(scale, x.rank)), _channel_shaped(bias, x.rank))
    if per_group and scale.shape == (groups,) and bias.shape == (groups,):  # opset 18: one value per group
        y = E.add(E.mul(normed, S.reshape(scale, (groups, 1))), S.reshape(bias, (groups, 1)))
        return S.reshape(y, x.shape)
    raise node.unsupported(f"scale {scale.shape} and bias {bias.shape} must have one value per channel ({c})")


converter("GroupNormalization", 18)(lambda node: _group_norm(node, per_group=True))
converter("GroupNormalization", 21)(lambda node: _group_norm(node, per_group=False))


@converter("InstanceNormalization", 1)
def _instance_norm(node):
    x, scale, bias = node.tensor(0), node.tensor(1), node.tensor(2)
    _floats(node, x)
    if x.rank < 3:
        raise node.unsupported(f"input {x.shape} needs rank >= 3 (N, C, spatial...)")
    normed, _, _ = _standardize(x, tuple(range(2, x.rank)), node.attr("epsilon", 1e-5))
    return E.add(E.mul(normed, _channel_shaped(scale, x.rank)), _channel_shaped(bias, x.rank))


@converter("MeanVarianceNormalization", 9)
def _mvn(node):
    """(x - mean) / (std + 1e-9) over axes (default 0, 2, 3); the variance of the centred values."""
    x = node.tensor(0)
    _floats(node, x)
    axes = tuple(node.attr("axes", [0, 2, 3]))
    if any(not -x.rank <= a < x.rank for a in axes):
        raise node.unsupported(f"axes {list(axes)} are out of range for rank {x.rank}")
    mean = R.reduce_mean(x, axes, keepdims=True)
    d = E.sub(x, mean)
    std = E.sqrt(R.reduce_mean(E.mul(d, d), axes, keepdims=True))
    return E.div(d, E.add(std, 1e-9))


@converter("LpNormalization", 1)
def _lp_norm(node):
    x = node.tensor(0)
    _floats(node, x)
    p, axis = node.attr("p", 2), node.attr("axis", -1)
    if p not in (1, 2):
        raise node.unsupported(f"p={p}; only 1 and 2 are defined")
    if not -x.rank <= axis < x.rank:
        raise node.unsupported(f"axis {axis} is out of range for rank {x.rank}")
    norm = R.reduce_sum(E.abs(x) if p == 1 else E.mul(x, x), (axis,), keepdims=True)
    if p == 2:
        norm = E.sqrt(norm)
    zero = E.equal(norm, 0.0)  # an all-zero slice gives 0, not 0/0
    return E.where(zero, 0.0, E.div(x, E.where(zero, 1.0, norm)))


@converter("LRN", 1)
def _lrn(node):
    """x / (bias + alpha/size * sum of squares over a channel window) ** beta; the window sum
    is a matmul with a constant band matrix."""
    x = node.tensor(0)
    dt = _floats(node, x)
    size = node.attr("size")
    if x.rank < 3 or not size or size <= 0:
        raise node.unsupported(f"needs rank >= 3 and a positive size (got {x.shape}, size {size})")
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    n, c = x.shape[:2]
    lo, hi = (size - 1) // 2, math.ceil((size - 1) / 2)
    node.check_size((c, c), "int64", "the channel window matrix")
    idx = np.arange(c)
    band = (idx[None, :] >= idx[:, None] - lo) & (idx[None, :] <= idx[:, None] + hi)
    sq = S.reshape(E.mul(x, x), (n, c, -1))
    window = S.reshape(N.matmul(_const(band, dt), sq), x.shape)
    denom = E.pow(E.add(E.mul(window, alpha / size), bias), _const(beta, dt))
    return E.div(x, denom)


# ----------------------------------------------------------------------------- losses


def _nll(node, logp: Tensor, target: Tensor, weight: Tensor | None):
    """Negative log-likelihood of log-probabilities (N, C, d...) at int targets (N, d...).

    The class pick is a one-hot select: target == range(C) along axis 1, summed. Targets equal
    to ignore_index (or outside [0, C)) pick nothing and weigh 0.
    """
    dt = _floats(node, logp)
    if logp.rank < 2 or target.shape != (logp.shape[0],) + logp.shape[2:]:
        raise node.unsupported(f"target {target.shape} does not fit input {logp.shape} (N, C, d1...)")
    if target.dtype not in dtypes.INDEX:
        raise node.unsupported(f"target has dtype {target.dtype}; int32 or int64 expected")
    reduction = node.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise node.unsupported(f"reduction '{reduction}' is not supported")
    c = logp.shape[1]
    node.check_size((c,), target.dtype, "the class range")
    classes = np.arange(c, dtype=dtypes.np_dtype(target.dtype)).reshape((1, c) + (1,) * (logp.rank - 2))
    hot = E.equal(S.unsqueeze(target, (1,)), constant(classes))
    loss = E.neg(R.reduce_sum(E.where(hot, logp, 0.0), (1,)))
    w = None  # the weight of each sample, when not all 1
    if weight is not None:
        if weight.shape != (c,):
            raise node.unsupported(f"weight {weight.shape} must have one value per class ({c})")
        per_class = S.reshape(_cast(weight, dt), classes.shape)
        w = R.reduce_sum(E.where(hot, per_class, 0.0), (1,))
    ignore = node.attr("ignore_index")
    if ignore is not None:
        valid = E.logical_not(E.equal(target, ignore))
        w = E.where(valid, w, 0.0) if w is not None else E.cast(valid, dt)
        loss = E.where(valid, loss, 0.0)
    if weight is not None:
        loss = E.mul(loss, w)
    if reduction == "none":
        return loss
    total = R.reduce_sum(loss)
    if reduction == "sum":
        return total
    return E.div(total, R.reduce_sum(w)) if w is not None else R.reduce_mean(loss)


@converter("NegativeLogLikelihoodLoss", 12)
def _nll_loss(node):
    return _nll(node, node.tensor(0), node.tensor(1), node.tensor(2) if node.has(2) else None)


@converter("SoftmaxCrossEntropyLoss", 12)
def _softmax_cross_entropy(node):
    x = node.tensor(0)
    _floats(node, x)
    if x.rank < 2:
        raise node.unsupported(f"scores {x.shape} need rank >= 2 (N, C, d1...)")
    logp = N.log_softmax(x, axis=1)
    loss = _nll(node, logp, node.tensor(1), node.tensor(2) if node.has(2) else None)
    return [loss, logp][: node.num_outputs]


# ----------------------------------------------------------------------------- reductions


def _reduce_axes(node, rank: int):
    """(sorted non-negative axes, all when none are given; keepdims), or None for a no-op."""
    keep = bool(node.attr("keepdims", 1))
    if node.opset >= 18:
        axes = [int(a) for a in node.const(1, "(axes) ")] if node.has(1) else []
        if not axes and node.attr("noop_with_empty_axes", 0):
            return None
    else:
        axes = list(node.attr("axes") or [])
    if any(not -rank <= a < rank for a in axes):
        raise node.unsupported(f"axes {axes} are out of range for rank {rank}")
    return (tuple(sorted({a % rank for a in axes})) if axes else tuple(range(rank))), keep


def _composite_reduce(op_type, pre, post, empty):
    """A reduction as ``post(reduce_sum(pre(x)))``; ``empty`` is the value over no elements."""

    @converter(op_type, 1)
    def convert(node):
        x = node.tensor(0)
        if x.dtype == "bool" or (dtypes.is_int(x.dtype) and op_type == "ReduceLogSum"):
            raise node.unsupported(f"{x.dtype} input is not supported")
        # integer square roots go through float64 and truncate back, as the reference does
        xw = _cast(x, "float64" if op_type == "ReduceL2" and dtypes.is_int(x.dtype) else x.dtype)
        plan = _reduce_axes(node, x.rank)
        if plan is None:  # noop_with_empty_axes: only the elementwise steps
            return _cast(post(pre(xw)), x.dtype)
        axes, keep = plan
        if any(x.shape[a] == 0 for a in axes):
            return node.full(R.reduced_shape(x.shape, axes, keep), empty, x.dtype)
        return _cast(post(R.reduce_sum(pre(xw), axes, keepdims=keep)), x.dtype)

    return convert


_composite_reduce("ReduceL1", E.abs, lambda s: s, 0)
_composite_reduce("ReduceL2", lambda x: E.mul(x, x), E.sqrt, 0)
_composite_reduce("ReduceSumSquare", lambda x: E.mul(x, x), lambda s: s, 0)
_composite_reduce("ReduceLogSum", lambda x: x, E.log, -math.inf)


@converter("ReduceLogSumExp", 1)
def _reduce_log_sum_exp(node):
    """log(sum(exp(x - m))) + m with m the (finite) maximum, so exp never overflows."""
    x = node.tensor(0)
    dt = _floats(node, x)
    plan = _reduce_axes(node, x.rank)
    if plan is None:
        return S.identity(x)
    axes, keep = plan
    if any(x.shape[a] == 0 for a in axes):
        return node.full(R.reduced_shape(x.shape, axes, keep), -math.inf, dt)
    m = R.reduce_max(x, axes, keepdims=True)
    m = E.where(E.equal(E.abs(m), math.inf), 0.0, m)  # all -inf (or an inf) along the axes: no shift
    y = E.add(E.log(R.reduce_sum(E.exp(E.sub(x, m)), axes, keepdims=True)), m)
    return y if keep else S.reshape(y, R.reduced_shape(x.shape, axes, False))


# ----------------------------------------------------------------------------- elementwise


@converter("Shrink", 9)
def _shrink(node):
    x = node.tensor(0)
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    if x.dtype == "bool":
        raise node.unsupported("bool input is not supported")
    xf = _cast(x, x.dtype if dtypes.is_float(x.dtype) else "float64")
    y = E.where(E.less(xf, -lambd), E.add(xf, bias), E.where(E.greater(xf, lambd), E.sub(xf, bias), 0.0))
    return _cast(y, x.dtype)


@converter("SwiGLU", 28)
def _swiglu(node):
    a, b = node.tensor(0), node.tensor(1)
    _floats(node, a)
    if a.shape != b.shape or a.dtype != b.dtype:
        raise node.unsupported(f"A ({a.dtype}{list(a.shape)}) and B ({b.dtype}{list(b.shape)}) must have the "
                               "same shape and type")
    alpha = node.attr("alpha", 1.0)
    gate = E.sigmoid(E.mul(a, alpha) if alpha != 1.0 else a)
    return E.mul(E.mul(a, gate), b)


# ----------------------------------------------------------------------------- pooling


def _lp(x: Tensor, p):
    ax = E.abs(x)
    if p == 1:
        return ax
    if p == 2:
        return E.mul(x, x)
    return E.pow(ax, _const(p, x.dtype))


def _lp_root(s: Tensor, p):
    if p == 1:
        return s
    if p == 2:
        return E.sqrt(s)
    return E.pow(s, _const(1.0 / p, s.dtype))


def _p_attr(node):
    p = node.attr("p", 2.0 if node.opset < 2 else 2)
    if not p or p <= 0:
        raise node.unsupported(f"p={p} must be positive")
    return p


@converter("LpPool", 1)
def _lp_pool(node):
    x = node.tensor(0)
    _floats(node, x)
    kernel = tuple(node.attr("kernel_shape") or ())
    if not kernel or x.rank != len(kernel) + 2:
        raise node.unsupported(f"kernel_shape {list(kernel)} does not fit input {x.shape}")
    n = len(kernel)
    strides = tuple(node.attr("strides", [1] * n))
    dilations = tuple(node.attr("dilations", [1] * n))
    pads = window_pads(node, x.shape[2:], kernel, strides, dilations)
    return N.lp_pool(x, kernel, _p_attr(node), strides, pads, dilations, bool(node.attr("ceil_mode", 0)))


@converter("GlobalLpPool", 1)
def _global_lp_pool(node):
    x = node.tensor(0)
    _floats(node, x)
    if x.rank < 3:
        raise node.unsupported(f"input {x.shape} needs rank >= 3 (N, C, spatial...)")
    p = _p_attr(node)
    return _lp_root(R.reduce_sum(_lp(x, p), tuple(range(2, x.rank)), keepdims=True), p)


# ----------------------------------------------------------------------------- shapes and grids


@converter("CenterCropPad", 18)
def _center_crop_pad(node):
    x = node.tensor(0)
    target = [int(v) for v in node.const(1, "(shape) ")]
    axes = node.attr("axes")
    axes = list(range(x.rank)) if axes is None else list(axes)
    if len(axes) != len(target) or any(not -x.rank <= a < x.rank for a in axes) or any(t < 0 for t in target):
        raise node.unsupported(f"shape {target} and axes {axes} do not fit input {x.shape}")
    pads = [0] * (2 * x.rank)
    for a, t in zip(axes, target):
        a %= x.rank
        diff = t - x.shape[a]  # > 0: pad (extra pixel at the end); < 0: crop (window start rounded down)
        begin = diff // 2 if diff >= 0 else -((-diff) // 2)
        pads[a], pads[x.rank + a] = begin, diff - begin
    return S.pad(x, pads) if any(pads) else S.identity(x)


@converter("Col2Im", 18)
def _col2im(node):
    """Column blocks back into an image: a transposed convolution of the blocks laid out on
    their grid, with one identity kernel per channel (group = C)."""
    x = node.tensor(0)
    image = [int(v) for v in node.const(1, "(image_shape) ")]
    block = [int(v) for v in node.const(2, "(block_shape) ")]
    n = len(image)
    strides = list(node.attr("strides", [1] * n))
    dilations = list(node.attr("dilations", [1] * n))
    pads = list(node.attr("pads", [0] * (2 * n)))
    if x.rank != 3 or len(block) != n or len(strides) != n or len(dilations) != n or len(pads) != 2 * n \
            or min(block + strides + dilations + [1]) <= 0:
        raise node.unsupported(f"input {x.shape} (N, C*prod(block), L) does not fit image_shape {image}, "
                               f"block_shape {block}, strides, dilations or pads")
    k = math.prod(block)
    span = [dilations[i] * (block[i] - 1) + 1 for i in range(n)]
    blocks = [(image[i] + pads[i] + pads[n + i] - span[i]) // strides[i] + 1 for i in range(n)]
    if x.shape[1] % k or min(blocks) <= 0 or math.prod(blocks) != x.shape[2]:
        raise node.unsupported(f"input {x.shape} does not hold C*{k} channels of {blocks} blocks for image "
                               f"{image}")
    c = x.shape[1] // k
    node.check_size((k, k), x.dtype, "the identity kernel")
    node.check_size((c * k, 1, *block), x.dtype, "the identity kernel")
    eye = np.eye(k, dtype=dtypes.np_dtype(x.dtype)).reshape((k, 1, *block))
    w = np.tile(eye, (c,) + (1,) * (n + 1))
    full = [(blocks[i] - 1) * strides[i] + span[i] for i in range(n)]
    extra = [image[i] + pads[i] + pads[n + i] - full[i] for i in range(n)]
    grid = S.reshape(x, (x.shape[0], x.shape[1], *blocks))
    return N.conv_transpose(grid, constant(w), None, strides, pads, dilations, c, extra)


@converter("AffineGrid", 20)
def _affine_grid(node):
    theta = node.tensor(0)
    dt = _floats(node, theta)
    size = [int(v) for v in node.const(1, "(size) ")]
    spatial = size[2:]
    n = len(spatial)
    if n not in (2, 3) or theta.shape != (size[0], n, n + 1):
        raise node.unsupported(f"theta {theta.shape} and size {size} must be (N, 2, 3) with (N, C, H, W) "
                               "or (N, 3, 4) with (N, C, D, H, W)")
    align = bool(node.attr("align_corners", 0))
    node.check_size((*spatial, n + 1), "float64", "the sampling grid")

    def coords(m):
        if align:
            return np.linspace(-1.0, 1.0, m) if m > 1 else np.full(m, -1.0)
        return (2.0 * np.arange(m) + 1.0) / m - 1.0

    axes = np.meshgrid(*[coords(m) for m in spatial], indexing="ij")  # D, H, W order
    base = np.stack([*axes[::-1], np.ones(spatial)], axis=-1).reshape(-1, n + 1)  # (x, y, [z,] 1)
    grid = N.matmul(constant(base.astype(dtypes.np_dtype(dt))), S.transpose(theta, (0, 2, 1)))
    return S.reshape(grid, (size[0], *spatial, n))


@converter("RotaryEmbedding", 23)
def _rotary(node):
    x, cos, sin = node.tensor(0), node.tensor(1), node.tensor(2)
    _floats(node, x)
    if x.rank == 4:
        b, heads, s, d = x.shape
        work = x  # (B, H, S, D); the caches get a head axis at 1
        head_axis = 1
    elif x.rank == 3:
        heads = node.attr("num_heads")
        b, s, hidden = x.shape
        if not heads or hidden % heads:
            raise node.unsupported(f"3-D input {x.shape} needs num_heads dividing its hidden size")
        d = hidden // heads
        work = S.reshape(x, (b, s, heads, d))
        head_axis = 2
    else:
        raise node.unsupported(f"input {x.shape} must be 3-D or 4-D")
    rd = node.attr("rotary_embedding_dim", 0) or d
    if rd > d or rd % 2:
        raise node.unsupported(f"rotary_embedding_dim {rd} must be even and at most the head size {d}")
    half = rd // 2
    if node.has(3):
        pos = node.tensor(3)
        if pos.shape != (b, s) or cos.rank != 2:
            raise node.unsupported(f"position_ids {pos.shape} must be (batch, seq) = ({b}, {s}) over caches "
                                   f"(max_pos, {half})")
        cos, sin = S.gather(cos, pos, 0), S.gather(sin, pos, 0)
    if cos.shape != (b, s, half) or sin.shape != (b, s, half):
        raise node.unsupported(f"caches {cos.shape}, {sin.shape} must give (batch, seq, rotary_dim/2) = "
                               f"({b}, {s}, {half})")
    cos, sin = S.unsqueeze(_cast(cos, x.dtype), (head_axis,)), S.unsqueeze(_cast(sin, x.dtype), (head_axis,))
    last = work.rank - 1
    if node.attr("interleaved", 0):
        x1 = S.slice_(work, [0], [rd], [last], [2])
        x2 = S.slice_(work, [1], [rd], [last], [2])
    else:
        x1 = S.slice_(work, [0], [half], [last])
        x2 = S.slice_(work, [half], [rd], [last])
    real = E.sub(E.mul(cos, x1), E.mul(sin, x2))
    imag = E.add(E.mul(sin, x1), E.mul(cos, x2))
    if node.attr("interleaved", 0):
        pairs = S.concat([S.unsqueeze(real, (last + 1,)), S.unsqueeze(imag, (last + 1,))], last + 1)
        rotated = S.reshape(pairs, work.shape[:-1] + (rd,))
    else:
        rotated = S.concat([real, imag], last)
    if rd < d:
        rotated = S.concat([rotated, S.slice_(work, [rd], [d], [last])], last)
    return S.reshape(rotated, x.shape) if x.rank == 3 else rotated


# ----------------------------------------------------------------------------- einsum


def _einsum_parse(node, equation: str, ranks: list[int]):
    """Terms as lists of labels (ellipsis dims become private labels) and the output term."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node.unsupported(f"equation '{equation}' has {len(terms)} terms for {len(ranks)} inputs")
    letters = set(string.ascii_letters)
    ell_rank = 0
    for t, r in zip(terms, ranks):
        if t.count("...") > 1 or set(t.replace("...", "")) - letters:
            raise node.unsupported(f"equation '{equation}' is not a valid einsum equation")
        if "..." in t:
            ell_rank = max(ell_rank, r - len(t.replace("...", "")))
    ell = [f"#{i}" for i in range(ell_rank)]  # never an ASCII letter
    parsed = []
    for t, r in zip(terms, ranks):
        head, dots, tail = t.partition("...")
        own = r - len(head) - len(tail)
        if (not dots and own != 0) or own < 0:
            raise node.unsupported(f"term '{t}' of '{equation}' does not fit an input of rank {r}")
        parsed.append(list(head) + (ell[ell_rank - own:] if dots else []) + list(tail))
    if arrow:
        if rhs.count("...") > 1 or set(rhs.replace("...", "")) - letters:
            raise node.unsupported(f"output term '{rhs}' of '{equation}' is not valid")
        head, dots, tail = rhs.partition("...")
        out = list(head) + (ell if dots else []) + list(tail)
        if not dots and ell_rank:
            raise node.unsupported(f"equation '{equation}' drops the '...' dimensions from the output")
    else:
        counts: dict = {}
        for t in parsed:
            for lab in t:
                counts[lab] = counts.get(lab, 0) + 1
        out = ell + sorted(lab for lab, c in counts.items() if c == 1 and not lab.startswith("#"))
    seen = {lab for t in parsed for lab in t}
    if len(set(out)) != len(out) or set(out) - seen:
        raise node.unsupported(f"output of '{equation}' repeats a label or names one no input has")
    return parsed, out


def _einsum_diagonal(node, x: Tensor, labels: list):
    """Take the diagonal of every label repeated within one term."""
    while len(set(labels)) != len(labels):
        lab = next(lab for lab in labels if labels.count(lab) > 1)
        a = labels.index(lab)
        b = labels.index(lab, a + 1)
        n = x.shape[a]
        if x.shape[b] != n:
            raise ValueError(f"label '{lab}' has sizes {n} and {x.shape[b]}")
        shape = [1] * x.rank
        shape[a] = shape[b] = n
        node.check_size((n, n), "bool", f"the diagonal mask of label '{lab}'")
        mask = constant(np.eye(n, dtype=bool).reshape(shape))
        x = R.reduce_sum(E.where(mask, x, _const(0, x.dtype)), (b,))
        labels = labels[:b] + labels[b + 1:]
    return x, labels


def _einsum_sum_out(x: Tensor, labels: list, keep: set):
    drop = [i for i, lab in enumerate(labels) if lab not in keep]
    if not drop:
        return x, labels
    return R.reduce_sum(x, tuple(drop)), [lab for lab in labels if lab in keep]


def _einsum_pair(a: Tensor, la: list, b: Tensor, lb: list, keep: set, sizes: dict):
    """Contract two operands with one batched matmul: (batch, A-only, shared) @ (batch, shared, B-only)."""
    a, la = _einsum_sum_out(a, la, keep | set(lb))
    b, lb = _einsum_sum_out(b, lb, keep | set(la))
    batch = [lab for lab in la if lab in lb and lab in keep]
    summed = [lab for lab in la if lab in lb and lab not in keep]
    a_free = [lab for lab in la if lab not in lb]
    b_free = [lab for lab in lb if lab not in la]

    def arrange(x, labels, order, free_first):
        """x as (batch dims..., free, summed) or (batch dims..., summed, free)."""
        x = S.transpose(x, tuple(labels.index(lab) for lab in order))
        dims = list(x.shape)
        full = [sizes[lab] if lab in summed else d for lab, d in zip(order, dims)]
        if full != dims:
            x = S.expand(x, full)  # a contracted label of size 1 here, broadcast against the other side
        nb = len(batch)
        free = math.prod(full[nb:len(order) - len(summed)] if free_first else full[nb + len(summed):])
        inner = (free, math.prod(sizes[lab] for lab in summed))
        return S.reshape(x, tuple(full[:nb]) + (inner if free_first else inner[::-1])), x.shape

    a2, ash = arrange(a, la, batch + a_free + summed, True)
    b2, bsh = arrange(b, lb, batch + summed + b_free, False)
    y = N.matmul(a2, b2)
    nb = len(batch)
    free_dims = tuple(ash[nb:nb + len(a_free)]) + tuple(bsh[nb + len(summed):])
    return S.reshape(y, y.shape[:-2] + free_dims), batch + a_free + b_free


@converter("Einsum", 12)
def _einsum(node):
    xs = [node.tensor(i) for i in range(len(node.inputs)) if node.has(i)]
    dts = {x.dtype for x in xs}
    if len(dts) != 1 or "bool" in dts:
        raise node.unsupported(f"inputs must share one numeric dtype (got {', '.join(sorted(dts))})")
    equation = node.attr("equation", "")
    terms, out = _einsum_parse(node, equation, [x.rank for x in xs])
    sizes: dict = {}
    for x, t in zip(xs, terms):
        for lab, d in zip(t, x.shape):
            prev = sizes.get(lab, 1)
            if d != prev and 1 not in (d, prev):
                raise node.unsupported(f"label '{lab}' of '{equation}' has sizes {prev} and {d}")
            sizes[lab] = max(prev, d) if lab in sizes else d
    try:
        ops = [_einsum_diagonal(node, x, list(t)) for x, t in zip(xs, terms)]
    except ValueError as e:
        raise node.unsupported(f"'{equation}': {e}") from None
    x, labels = ops[0]
    for i in range(1, len(ops)):
        later = {lab for _, t in ops[i + 1:] for lab in t}
        x, labels = _einsum_pair(x, labels, ops[i][0], ops[i][1], set(out) | later, sizes)
    x, labels = _einsum_sum_out(x, labels, set(out))
    if labels != out:
        x = S.transpose(x, tuple(labels.index(lab) for lab in out))
    full = tuple(sizes[lab] for lab in out)
    return S.expand(x, full) if x.shape != full else x


# ----------------------------------------------------------------------------- attention


def _heads(x: Tensor, heads: int) -> Tensor:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = x.shape
    return S.transpose(S.reshape(x, (b, s, heads, hidden // heads)), (0, 2, 1, 3))


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a & b
    return E.logical_and(_tensor(a), _tensor(b))


def _tensor(v) -> Tensor:
    return v if isinstance(v, Tensor) else constant(v)


def _attention_allowed(node, offset, sq, skv, batch):
    """Which keys each query may see under is_causal and the window attributes, as a bool
    array (static offset) or tensor (per-batch offset from nonpad_kv_seqlen), or None."""
    causal = bool(node.attr("is_causal", 0))
    left = node.attr("left_window_size", -1) if node.opset >= 25 else -1
    right = node.attr("right_window_size", -1) if node.opset >= 25 else -1
    if left < -1 or right < -1:
        raise node.unsupported(f"window sizes ({left}, {right}) must be -1 or non-negative")
    if not causal and left < 0 and right < 0:
        return None
    node.check_size((sq, skv), "int64", "the attention mask")
    rel = np.arange(sq)[:, None] - np.arange(skv)[None, :]  # i - j; allowed when rel + offset ...
    if isinstance(offset, int):
        diff = rel + offset
        allowed = np.ones((sq, skv), bool)
        if causal:
            allowed &= diff >= 0
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        return allowed
    diff = E.add(constant(rel.reshape(1, 1, sq, skv).astype(np.int64)), S.reshape(offset, (batch, 1, 1, 1)))
    allowed = None
    if causal:
        allowed = _and(allowed, E.greater_equal(diff, 0))
    if left >= 0:
        allowed = _and(allowed, E.less_equal(diff, left))
    if right >= 0:
        allowed = _and(allowed, E.greater_equal(diff, -right))
    return allowed


def _attention_mask(node, dt: str, skv: int, batch: int):
    """attn_mask as (bool part, float part), its key axis padded to skv (False / -inf)."""
    if not node.has(3):
        return None, None
    mask = node.inputs[3]
    kind = mask.dtype.name if isinstance(mask, np.ndarray) else mask.dtype
    if kind != "bool" and kind not in dtypes.FLOATS:
        raise node.unsupported(f"attn_mask has dtype {kind}; bool or float expected")
    shape = tuple(mask.shape)
    if not shape or shape[-1] > skv:
        raise node.unsupported(f"attn_mask {shape} has more keys than the {skv} of K")
    fill = False if kind == "bool" else -math.inf
    node.check_size(shape[:-1] + (skv,), "float64", "the padded attn_mask")
    if isinstance(mask, np.ndarray):
        mask = np.concatenate([mask, np.full(shape[:-1] + (skv - shape[-1],), fill, mask.dtype)], -1)
        return (mask, None) if kind == "bool" else (None, mask.astype(dtypes.np_dtype(dt)))
    if shape[-1] < skv:
        filler = np.full(shape[:-1] + (skv - shape[-1],), fill, dtypes.np_dtype(kind))
        mask = S.concat([mask, constant(filler)], -1)
    return (mask, None) if kind == "bool" else (None, _cast(mask, dt))


@converter("Attention", 23)
def _attention(node):
    """Scaled dot-product attention (MHA, GQA, MQA) with masks, KV cache, softcap, windows.

    Keys and queries are scaled by sqrt(scale) each; grouped query heads share a key head by
    folding the group into the query rows, so K and V are never repeated. The mask is one
    additive bias: the float attn_mask plus -inf wherever the bool mask, causality, the window
    or nonpad_kv_seqlen forbid a key; rows with no allowed key give zeros, not NaN.
    """
    q, k, v = node.tensor(0), node.tensor(1), node.tensor(2)
    dt = _floats(node, q)
    if k.dtype != dt or v.dtype != dt:
        raise node.unsupported(f"Q, K and V must share a dtype (got {dt}, {k.dtype}, {v.dtype})")
    rank = q.rank
    if rank not in (3, 4) or k.rank != rank or v.rank != rank:
        raise node.unsupported(f"Q {q.shape}, K {k.shape} and V {v.shape} must all be 3-D or all 4-D")
    if rank == 3:
        hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if not hq or not hkv or q.shape[2] % hq or k.shape[2] % hkv or v.shape[2] % hkv:
            raise node.unsupported(f"3-D inputs need q_num_heads and kv_num_heads dividing the hidden sizes "
                                   f"(Q {q.shape}, K {k.shape}, V {v.shape})")
        q, k, v = _heads(q, hq), _heads(k, hkv), _heads(v, hkv)
    b, hq, sq, d = q.shape
    hkv = k.shape[1]
    if (k.shape[0], k.shape[3], v.shape[0], v.shape[1], v.shape[2]) != (b, d, b, hkv, k.shape[2]) or hq % hkv:
        raise node.unsupported(f"shapes Q {q.shape}, K {k.shape}, V {v.shape} (B, heads, seq, size) do not "
                               "fit: K and V need Q's batch, K Q's head size, Q's heads a multiple of K's")
    if node.has(4) != node.has(5):
        raise node.unsupported("past_key and past_value must be given together")
    nonpad = node.tensor(6) if node.opset >= 24 and node.has(6) else None
    past = node.has(4)
    if past and nonpad is not None:
        raise node.unsupported("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    if past:
        pk, pv = node.tensor(4), node.tensor(5)
        if pk.shape[:2] != (b, hkv) or pv.shape[:2] != (b, hkv) or pk.shape[3] != d \
                or pv.shape[3] != v.shape[3] or pk.shape[2] != pv.shape[2]:
            raise node.unsupported(f"past_key {pk.shape} / past_value {pv.shape} do not fit K {k.shape}, "
                                   f"V {v.shape}")
        k, v = S.concat([_cast(pk, dt), k], 2), S.concat([_cast(pv, dt), v], 2)
    present_k, present_v = k, v
    skv, dv = k.shape[2], v.shape[3]
    # float16 attention computes in float32 and rounds once at the end: rounding every
    # intermediate (scores, probabilities) to half loses a bit or two against exact results
    acc = "float32" if dt == "float16" else dt
    q, k, v = _cast(q, acc), _cast(k, acc), _cast(v, acc)

    scale = node.attr("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    root = math.sqrt(scale)
    rep = hq // hkv
    qg = S.reshape(E.mul(q, root), (b, hkv, rep * sq, d))
    scores = S.reshape(N.matmul(qg, S.transpose(E.mul(k, root), (0, 1, 3, 2))), (b, hq, sq, skv))
    raw = scores
    softcap = node.attr("softcap", 0.0) or 0.0
    if softcap > 0:
        scores = E.mul(E.tanh(E.div(scores, softcap)), softcap)
    capped = scores

    # the additive bias
    if nonpad is not None:
        if nonpad.shape != (b,) or nonpad.dtype not in dtypes.INDEX:
            raise node.unsupported(f"nonpad_kv_seqlen {nonpad.shape} {nonpad.dtype} must be ({b},) int64")
        nonpad = _cast(nonpad, "int64")
        offset = E.sub(nonpad, sq)
    else:
        offset = pk.shape[2] if past else 0
    allowed_mask, float_mask = _attention_mask(node, acc, skv, b)
    allowed = _and(allowed_mask, _attention_allowed(node, offset, sq, skv, b))
    if nonpad is not None:
        node.check_size((skv,), "int64", "the key positions")
        keys = constant(np.arange(skv, dtype=np.int64).reshape(1, 1, 1, skv))
        allowed = _and(allowed, E.less(keys, S.reshape(nonpad, (b, 1, 1, 1))))
    bias = None
    if allowed is not None:
        if isinstance(allowed, np.ndarray):
            bias = np.where(allowed, 0.0, -np.inf).astype(dtypes.np_dtype(acc))
        else:
            bias = E.where(allowed, _const(0, acc), _const(-math.inf, acc))
    if float_mask is not None:
        if bias is None:
            bias = float_mask
        elif isinstance(bias, np.ndarray) and isinstance(float_mask, np.ndarray):
            node.check_size(np.broadcast_shapes(bias.shape, float_mask.shape), acc, "the attention bias")
            bias = bias + float_mask
        else:
            bias = E.add(_tensor(float_mask), _tensor(bias))
    empty_rows = None  # rows whose every key is forbidden
    if bias is not None:
        full = np.broadcast_shapes(tuple(bias.shape), (b, hq, sq, skv)) if len(bias.shape) <= 4 else None
        if full != (b, hq, sq, skv):
            raise node.unsupported(f"attn_mask {tuple(node.inputs[3].shape)} does not broadcast to the "
                                   f"scores ({b}, {hq}, {sq}, {skv})")
        # the softmax sees bias 0 on an empty row (so no all -inf row, no NaN); the row is
        # zeroed after it
        if isinstance(bias, np.ndarray):
            rows = np.isneginf(bias.max(axis=-1, keepdims=True)) if bias.size else np.zeros((1,), bool)
            biased = E.add(scores, constant(bias)) if bias.any() else scores
            if rows.any():
                empty_rows = constant(rows)
                safe = np.where(rows, bias.dtype.type(0), bias)
                logits = E.add(scores, constant(safe)) if safe.any() else scores
            else:
                logits = biased
        else:
            empty_rows = E.equal(R.reduce_max(bias, (bias.rank - 1,), keepdims=True), -math.inf)
            biased = E.add(scores, bias)
            logits = E.add(scores, E.where(empty_rows, _const(0, acc), bias))
    else:
        biased = logits = scores
    mode = node.attr("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        raise node.unsupported(f"qk_matmul_output_mode {mode} is not one of 0, 1, 2, 3")
    qk_out = {0: raw, 1: capped, 2: biased}.get(mode)
    precision = node.attr("softmax_precision")
    work = _precision(node, precision, "softmax_precision") if precision is not None else acc
    probs = N.softmax(_cast(logits, work), -1)
    if empty_rows is not None:
        probs = E.where(empty_rows, _const(0, work), probs)
    probs = _cast(probs, acc)
    if mode == 3:
        qk_out = probs
    y = N.matmul(S.reshape(probs, (b, hkv, rep * sq, skv)), v)
    y = S.reshape(y, (b, hq, sq, dv))
    if rank == 3:
        y = S.reshape(S.transpose(y, (0, 2, 1, 3)), (b, sq, hq * dv))
    return [_cast(y, dt), present_k, present_v, _cast(qk_out, dt)][: node.num_outputs]
