"""ONNX converters for indexing ops: GatherElements, ScatterElements (and the older Scatter),
GatherND, ScatterND, TopK, and the compositions OneHot, Trilu, Hardmax, EyeLike, Compress,
ReverseSequence, SpaceToDepth and DepthToSpace.

NonZero and Unique have outputs whose shapes depend on the input's values; flowc compiles
static shapes, so they are converted only when their input is known at import time (the
importer then evaluates them right away). Compress needs a constant condition for the same
reason.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import constant
from ..ops import elementwise as E
from ..ops import index as X
from ..ops import reduce as R
from ..ops import shape as S
from .importer import converter, onnx_dtype

_DATA_DEPENDENT = "output shape depends on input values; only a constant input is supported"


def _scalar_int(node, i: int, what: str) -> int:
    v = node.const(i, f"({what}) ")
    if v.size != 1:
        raise node.unsupported(f"{what} must hold one value, got shape {list(v.shape)}")
    return int(v.reshape(-1)[0])


def _axis(node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise node.unsupported(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


# ----------------------------------------------------------------------------- gathers / scatters


@converter("GatherElements", 11)
def _gather_elements(node):
    return X.gather_elements(node.tensor(0), node.tensor(1), node.attr("axis", 0))


def _scatter_elements(node):
    return X.scatter_elements(
        node.tensor(0), node.tensor(1), node.tensor(2), node.attr("axis", 0), node.attr("reduction", "none")
    )


converter("ScatterElements", 11)(_scatter_elements)
converter("Scatter", 9)(_scatter_elements)  # deprecated alias of ScatterElements (no reduction)


@converter("GatherND", 11)
def _gather_nd(node):
    return X.gather_nd(node.tensor(0), node.tensor(1), node.attr("batch_dims", 0))


@converter("ScatterND", 11)
def _scatter_nd(node):
    return X.scatter_nd(node.tensor(0), node.tensor(1), node.tensor(2), node.attr("reduction", "none"))


# ----------------------------------------------------------------------------- topk


@converter("TopK", 1)
def _topk(node):
    x = node.tensor(0)
    k = node.attr("k") if node.opset < 10 else _scalar_int(node, 1, "K")
    if k is None:
        raise node.unsupported("attribute 'k' is missing")
    axis = _axis(node, node.attr("axis", -1), x.rank)
    if not 0 <= k <= x.shape[axis]:
        raise node.unsupported(
            f"k {k} must lie in [0, {x.shape[axis]}] (axis {axis} of shape {list(x.shape)})"
        )
    largest = bool(node.attr("largest", 1)) if node.opset >= 11 else True
    return list(X.topk(x, k, axis, largest, bool(node.attr("sorted", 1))))


# ----------------------------------------------------------------------------- one-hot family


@converter("OneHot", 9)
def _one_hot(node):
    indices = node.tensor(0)
    depth_v = node.const(1, "(depth) ").reshape(-1)
    if depth_v.size != 1 or not depth_v[0] >= 1:
        raise node.unsupported(f"depth must be one positive value, got {depth_v.tolist()}")
    depth = int(depth_v[0])
    # compare in a wide type, so that large depths fit (int8 indices, float16 indices)
    wide = "float64" if dtypes.is_float(indices.dtype) else "int64"
    if indices.dtype != wide:
        indices = E.cast(indices, wide)
    values = node.inputs[2]
    if math.prod(node.shape(2)) != 2:
        raise node.unsupported(f"values must hold [off, on], got shape {list(node.shape(2))}")
    if isinstance(values, np.ndarray):
        flat = values.reshape(-1)
        off, on = constant(flat[0]), constant(flat[1])
    else:
        flat = S.reshape(values, (2,))
        off, on = S.reshape(S.slice_(flat, [0], [1]), ()), S.reshape(S.slice_(flat, [1], [2]), ())
    axis = node.attr("axis", -1)
    if not -(indices.rank + 1) <= axis <= indices.rank:
        raise node.unsupported(f"axis {axis} is out of range for output rank {indices.rank + 1}")
    return X.one_hot(indices, depth, axis, on, off)


def _hardmax(node, x, axis: int):
    """1 at the first maximum along axis, 0 elsewhere (one-hot of argmax)."""
    if x.shape[axis] == 0:
        return S.identity(x)
    node.check_size((x.shape[axis],), "int64", "the position range")
    best = R.argmax(x, axis, keepdims=True)
    positions = np.arange(x.shape[axis], dtype=np.int64).reshape((-1,) + (1,) * (x.rank - axis - 1))
    zero, one = (constant(np.asarray(v, dtypes.np_dtype(x.dtype))) for v in (0, 1))
    return E.where(E.equal(best, constant(positions)), one, zero)


@converter("Hardmax", 1)
def _hardmax_legacy(node):
    # before opset 13 the input is seen as 2-D: [prod(shape[:axis]), prod(shape[axis:])]
    x = node.tensor(0)
    axis = _axis(node, node.attr("axis", 1), max(x.rank, 1)) if x.rank else 0
    flat = S.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
    return S.reshape(_hardmax(node, flat, 1), x.shape)


@converter("Hardmax", 13)
def _hardmax13(node):
    x = node.tensor(0)
    if x.rank == 0:
        raise node.unsupported("input must have rank >= 1")
    return _hardmax(node, x, _axis(node, node.attr("axis", -1), x.rank))


@converter("Trilu", 14)
def _trilu(node):
    x = node.tensor(0)
    if x.rank < 2:
        raise node.unsupported(f"input must have rank >= 2, got shape {list(x.shape)}")
    n, m = x.shape[-2:]
    node.check_size((n, m), "int64", "the triangle mask")
    offset = np.arange(m)[None, :] - np.arange(n)[:, None]  # column - row
    zero = constant(np.zeros((), dtypes.np_dtype(x.dtype)))
    if node.has(1) and not node.is_const(1):  # k known only at run time: compare with it
        k = E.cast(node.tensor(1), "int64")
        keep = (
            E.greater_equal(constant(offset), k)
            if node.attr("upper", 1)
            else E.less_equal(constant(offset), k)
        )
        return E.where(keep, x, zero)
    k = _scalar_int(node, 1, "k") if node.has(1) else 0
    keep = offset >= k if node.attr("upper", 1) else offset <= k
    return E.where(constant(keep), x, zero)


@converter("EyeLike", 9)
def _eye_like(node):
    shape = node.shape(0)
    if len(shape) != 2:
        raise node.unsupported(f"input must be 2-D, got shape {list(shape)}")
    dt = node.attr("dtype")
    dtype = onnx_dtype(dt, f"{node.where()} attribute 'dtype'") if dt is not None else node.dtype(0)
    node.check_size(shape, dtype, "the identity matrix")
    return np.eye(shape[0], shape[1], k=node.attr("k", 0), dtype=dtypes.np_dtype(dtype))


# ----------------------------------------------------------------------------- selections


@converter("Compress", 9)
def _compress(node):
    if not node.is_const(1):
        raise node.unsupported(f"the condition is not constant: {_DATA_DEPENDENT.split(';')[0]}")
    cond = node.const(1).reshape(-1).astype(bool)
    x = node.tensor(0)
    axis = node.attr("axis")
    if axis is None:
        x, axis = S.reshape(x, (math.prod(x.shape),)), 0
    else:
        axis = _axis(node, axis, x.rank)
    dim = x.shape[axis]
    if cond[dim:].any():
        raise node.unsupported(
            f"condition selects index {int(np.flatnonzero(cond)[-1])} past axis {axis} of size {dim}"
        )
    picked = np.flatnonzero(cond[:dim]).astype(np.int64)
    return S.gather(x, constant(picked), axis)


@converter("NonZero", 9)
def _nonzero(node):
    if not node.is_const(0):
        raise node.unsupported(_DATA_DEPENDENT)
    x = node.const(0)
    if x.ndim == 0:
        return np.zeros((0, int(x != 0)), np.int64)
    node.check_size((x.ndim, int(np.count_nonzero(x))), "int64", "the indices of the non-zero entries")
    return np.stack(np.nonzero(x)).astype(np.int64).reshape(x.ndim, -1)


@converter("Unique", 11)
def _unique(node):
    if not node.is_const(0):
        raise node.unsupported(_DATA_DEPENDENT)
    x = node.const(0)
    axis = node.attr("axis")
    if axis is None:
        x, axis = x.reshape(-1), 0
    else:
        axis = _axis(node, axis, x.ndim)
    y, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not node.attr("sorted", 1):  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y, first, counts, inverse = np.take(y, order, axis=axis), first[order], counts[order], rank[inverse]
    outs = [np.ascontiguousarray(y)] + [a.astype(np.int64) for a in (first, inverse, counts)]
    return outs[: node.num_outputs]


# ----------------------------------------------------------------------------- rearrangements


@converter("ReverseSequence", 10)
def _reverse_sequence(node):
    x = node.tensor(0)
    if x.rank < 2:
        raise node.unsupported(f"input must have rank >= 2, got shape {list(x.shape)}")
    batch_axis, time_axis = node.attr("batch_axis", 1), node.attr("time_axis", 0)
    if {batch_axis, time_axis} != {0, 1}:
        raise node.unsupported(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1")
    batch, steps = x.shape[batch_axis], x.shape[time_axis]
    if node.shape(1) != (batch,):
        raise node.unsupported(f"sequence_lens shape {list(node.shape(1))} must be [{batch}]")
    node.check_size((batch, steps), "int64", "the source indices")
    t = np.arange(steps).reshape((steps, 1) if time_axis == 0 else (1, steps))
    if node.is_const(1):
        lens = node.const(1).astype(np.int64).reshape((1, batch) if time_axis == 0 else (batch, 1))
        if (lens < 0).any() or (lens > steps).any():
            raise node.unsupported(f"sequence_lens {lens.reshape(-1).tolist()} must lie in [0, {steps}]")
        # flat row of (d0, d1) that each output row reads, in the input's own layout
        source = np.where(t < lens, lens - 1 - t, t)
        rows = (
            source * batch + np.arange(batch)[None, :]
            if time_axis == 0
            else np.arange(batch)[:, None] * steps + source
        )
        flat = S.reshape(x, (x.shape[0] * x.shape[1],) + x.shape[2:])
        return S.reshape(S.gather(flat, constant(rows.reshape(-1).astype(np.int64))), x.shape)
    # runtime lengths: one time index per element, checked against the axis by gather_elements
    lens = E.cast(node.tensor(1), "int64")
    lens = S.reshape(lens, (1, batch) if time_axis == 0 else (batch, 1))
    tt = constant(t.astype(np.int64))
    source = E.where(E.less(tt, lens), E.sub(E.sub(lens, 1), tt), tt)
    source = S.expand(S.reshape(source, source.shape + (1,) * (x.rank - 2)), x.shape)
    return X.gather_elements(x, source, time_axis)


def _blocksize(node, x):
    if x.rank != 4:
        raise node.unsupported(f"input must be 4-D (N, C, H, W), got shape {list(x.shape)}")
    b = node.attr("blocksize")
    if b is None or b < 1:
        raise node.unsupported(f"blocksize must be a positive integer, got {b}")
    return b


@converter("SpaceToDepth", 1)
def _space_to_depth(node):
    x = node.tensor(0)
    b = _blocksize(node, x)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise node.unsupported(f"spatial dims {h}x{w} are not multiples of blocksize {b}")
    mode = node.attr("mode", "DCR")
    perm = {"DCR": (0, 3, 5, 1, 2, 4), "CRD": (0, 1, 3, 5, 2, 4)}.get(mode)
    if perm is None:
        raise node.unsupported(f"mode '{mode}' is not DCR or CRD")
    y = S.transpose(S.reshape(x, (n, c, h // b, b, w // b, b)), perm)
    return S.reshape(y, (n, c * b * b, h // b, w // b))


@converter("DepthToSpace", 1)
def _depth_to_space(node):
    x = node.tensor(0)
    b = _blocksize(node, x)
    n, c, h, w = x.shape
    if c % (b * b):
        raise node.unsupported(f"channels {c} are not a multiple of blocksize^2 = {b * b}")
    mode = node.attr("mode", "DCR") if node.opset >= 11 else "DCR"
    if mode == "DCR":
        y = S.transpose(S.reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        y = S.transpose(S.reshape(x, (n, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    else:
        raise node.unsupported(f"mode '{mode}' is not DCR or CRD")
    return S.reshape(y, (n, c // (b * b), h * b, w * b))
