"""Data movement: reshape, flatten, squeeze, unsqueeze, transpose, concat, split, slice,
gather / scatter_add, pad, expand, tile, identity and stop_gradient.

Every attribute is resolved to explicit, static values when the node is built (``-1`` in a
reshape, default axes, slice bounds), so later stages never reinterpret them.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import Tensor, apply, operand
from ..errors import ExecutionError, GradientError, ShapeError
from ..ir import TensorType
from ..registry import ALIAS, KERNEL, NOT_DIFFERENTIABLE, Attr, Example, Sample, defop
from ._util import broadcast_shapes, check_dtype, norm_axes, norm_axis, resolve_axis, same_dtype


def _same(types, attrs):
    return types[0]


def _g_reshape_back(op, gys):
    return (reshape(gys[0], op.inputs[0].shape),)


# ----------------------------------------------------------------------------- reshape family
def _reshape_resolve(types, attrs):
    x, shape = types[0], list(attrs["shape"])
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape target {tuple(shape)} has more than one -1")
    if any(d < -1 for d in shape):
        raise ShapeError(f"reshape target {tuple(shape)} has a negative dimension")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {x} ({x.size} elements) to {tuple(shape)}")
        shape[shape.index(-1)] = x.size // known
    return {**attrs, "shape": tuple(shape)}


def _reshape_infer(types, attrs):
    x, shape = types[0], attrs["shape"]
    if math.prod(shape) != x.size:
        raise ShapeError(f"cannot reshape {x} ({x.size} elements) to {shape}")
    return TensorType(shape, x.dtype)


defop(
    "reshape",
    ("x",),
    _reshape_infer,
    lambda xs, a: xs[0].reshape(a["shape"]),
    _g_reshape_back,
    attrs={"shape": Attr("ints")},
    resolve=_reshape_resolve,
    kind=ALIAS,
    doc="same elements in row-major order, new static shape ('-1' is resolved when built)",
    examples=(
        Example((Sample((2, 3, 4)),), {"shape": (4, -1)}),
        Example((Sample((6,), "int32", -9, 9),), {"shape": (2, 1, 3)}),
        Example((Sample((2, 2), "bool"),), {"shape": (4,)}),
    ),
)


def reshape(x, shape, name=None):
    return apply("reshape", [operand(x)], name, shape=tuple(shape))


def _flatten_resolve(types, attrs):
    rank = types[0].rank
    axis = attrs["axis"]
    if not -rank <= axis <= rank:
        raise ShapeError(f"flatten axis {axis} is out of range for rank {rank}")
    return {**attrs, "axis": axis + rank if axis < 0 else axis}


def _flatten_shape(shape, axis):
    return (math.prod(shape[:axis]), math.prod(shape[axis:]))


defop(
    "flatten",
    ("x",),
    lambda ts, a: TensorType(_flatten_shape(ts[0].shape, a["axis"]), ts[0].dtype),
    lambda xs, a: xs[0].reshape(_flatten_shape(xs[0].shape, a["axis"])),
    _g_reshape_back,
    attrs={"axis": Attr("int", 1)},
    resolve=_flatten_resolve,
    kind=ALIAS,
    doc="2-D view: dims before axis, times dims from axis on",
    examples=(
        Example((Sample((2, 3, 4)),)),
        Example((Sample((2, 3, 4)),), {"axis": 0}),
        Example((Sample((2, 3, 4), "int64", -9, 9),), {"axis": -1}),
    ),
)


def flatten(x, axis=1, name=None):
    return apply("flatten", [operand(x)], name, axis=axis)


def _squeeze_resolve(types, attrs):
    x = types[0]
    if attrs["axes"] is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = norm_axes(attrs["axes"], x.rank)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of shape {x.shape}: its size is not 1")
    return {**attrs, "axes": tuple(sorted(axes))}


defop(
    "squeeze",
    ("x",),
    lambda ts, a: TensorType(tuple(d for i, d in enumerate(ts[0].shape) if i not in a["axes"]), ts[0].dtype),
    lambda xs, a: np.squeeze(xs[0], axis=a["axes"]),
    _g_reshape_back,
    attrs={"axes": Attr("ints", None)},
    resolve=_squeeze_resolve,
    kind=ALIAS,
    doc="remove size-1 axes (all of them when axes is absent)",
    examples=(
        Example((Sample((2, 1, 3, 1)),), {}, lambda x: x[:, 0, :, 0]),
        Example((Sample((1, 3, 1), "int32", -9, 9),), {"axes": (-1,)}, lambda x: x[:, :, 0]),
        Example((Sample((1, 2), "bool"),), {"axes": (0,)}, lambda x: x[0]),
    ),
)


def squeeze(x, axes=None, name=None):
    return apply("squeeze", [operand(x)], name, axes=(axes,) if isinstance(axes, int) else axes)


def _unsqueeze_resolve(types, attrs):
    rank = types[0].rank + len(attrs["axes"])
    return {**attrs, "axes": tuple(sorted(norm_axes(attrs["axes"], rank)))}


def _unsqueeze_shape(shape, axes):
    out, it = [], iter(shape)
    for i in range(len(shape) + len(axes)):
        out.append(1 if i in axes else next(it))
    return tuple(out)


defop(
    "unsqueeze",
    ("x",),
    lambda ts, a: TensorType(_unsqueeze_shape(ts[0].shape, a["axes"]), ts[0].dtype),
    lambda xs, a: xs[0].reshape(_unsqueeze_shape(xs[0].shape, a["axes"])),
    _g_reshape_back,
    attrs={"axes": Attr("ints")},
    resolve=_unsqueeze_resolve,
    kind=ALIAS,
    doc="insert size-1 axes at the given positions of the output",
    examples=(
        Example((Sample((2, 3)),), {"axes": (0, 3)}, lambda x: x[None, :, :, None]),
        Example((Sample((3,), "int8", -9, 9),), {"axes": (-1,)}, lambda x: x[:, None]),
        Example((Sample((2, 2), "bool"),), {"axes": (1,)}, lambda x: x[:, None, :]),
    ),
)


def unsqueeze(x, axes, name=None):
    return apply("unsqueeze", [operand(x)], name, axes=(axes,) if isinstance(axes, int) else axes)


# ----------------------------------------------------------------------------- transpose
def _transpose_resolve(types, attrs):
    rank = types[0].rank
    perm = tuple(reversed(range(rank))) if attrs["perm"] is None else attrs["perm"]
    if sorted(p % rank if rank else p for p in perm) != list(range(rank)) or len(perm) != rank:
        raise ShapeError(f"perm {perm} is not a permutation of {rank} axes")
    return {**attrs, "perm": tuple(p % rank for p in perm)}


def _g_transpose(op, gys):
    inverse = tuple(np.argsort(op.attrs["perm"]).tolist())
    return (transpose(gys[0], inverse),)


defop(
    "transpose",
    ("x",),
    lambda ts, a: TensorType(tuple(ts[0].shape[p] for p in a["perm"]), ts[0].dtype),
    lambda xs, a: np.asarray(np.transpose(xs[0], a["perm"]), order="C"),
    _g_transpose,
    attrs={"perm": Attr("ints", None)},
    resolve=_transpose_resolve,
    kind=KERNEL,
    doc="permute axes (reverse them when perm is absent)",
    examples=(
        Example((Sample((2, 3, 4)),), {}, lambda x: np.einsum("ijk->kji", x)),
        Example((Sample((2, 3, 4)),), {"perm": (1, 2, 0)}, lambda x: np.moveaxis(x, 0, -1)),
        Example((Sample((2, 3), "int32", -9, 9),), {"perm": (-1, 0)}, lambda x: np.einsum("ij->ji", x)),
        Example((Sample((2, 2, 3), "bool"),), {"perm": (0, 2, 1)}, lambda x: np.swapaxes(x, 1, 2)),
        # the copy kernels move elements by size: 2 and 8 bytes too (4: float32, 1: bool)
        Example(
            (Sample((2, 3, 4), "float16"),),
            {"perm": (2, 0, 1)},
            lambda x: np.transpose(x, (2, 0, 1)),
            grad=False,
        ),
        Example(
            (Sample((2, 3, 4), "int64", -9, 9),), {"perm": (2, 1, 0)}, lambda x: np.transpose(x, (2, 1, 0))
        ),
    ),
)


def transpose(x, perm=None, name=None):
    return apply("transpose", [operand(x)], name, perm=perm)


# ----------------------------------------------------------------------------- concat / split
def _concat_infer(types, attrs):
    dt = same_dtype(types)
    first = types[0]
    axis = norm_axis(attrs["axis"], first.rank)
    for t in types[1:]:
        if t.rank != first.rank or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            raise ShapeError(f"shapes {first.shape} and {t.shape} differ outside axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return TensorType(tuple(shape), dt)


def _g_concat(op, gys):
    sizes = tuple(t.shape[op.attrs["axis"]] for t in op.inputs)
    parts = split(gys[0], sizes, axis=op.attrs["axis"])
    return (parts,) if isinstance(parts, Tensor) else parts


def _joined(xs, axis):
    """Expectation of concat: every input placed into its block of the output."""
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out, at = np.empty(shape, xs[0].dtype), 0
    for x in xs:
        index = [slice(None)] * x.ndim
        index[axis] = slice(at, at + x.shape[axis])
        out[tuple(index)] = x
        at += x.shape[axis]
    return out


defop(
    "concat",
    ("xs*",),
    _concat_infer,
    lambda xs, a: np.concatenate(xs, axis=a["axis"]),
    _g_concat,
    attrs={"axis": Attr("int", 0)},
    resolve=resolve_axis,
    kind=KERNEL,
    doc="join along axis",
    examples=(
        Example((Sample((2, 3)), Sample((1, 3)), Sample((3, 3))), {}, lambda *xs: _joined(xs, 0)),
        Example(
            (Sample((2, 2), "int32", -9, 9), Sample((2, 3), "int32", -9, 9)),
            {"axis": -1},
            lambda *xs: _joined(xs, 1),
        ),
        Example((Sample((3,), "bool"), Sample((2,), "bool")), {}, lambda *xs: _joined(xs, 0)),
        Example(
            (Sample((2, 3), "float16"), Sample((2, 2), "float16")),
            {"axis": 1},
            lambda *xs: _joined(xs, 1),
            grad=False,
        ),
        Example(
            (Sample((1, 3), "int64", -9, 9), Sample((2, 3), "int64", -9, 9)), {}, lambda *xs: _joined(xs, 0)
        ),
    ),
)


def concat(values, axis=0, name=None):
    return apply("concat", [operand(v) for v in values], name, axis=axis)


def _split_infer(types, attrs):
    x, axis, sizes = types[0], attrs["axis"], attrs["sizes"]
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise ShapeError(f"split sizes {sizes} do not add up to {x.shape[axis]} (axis {axis} of {x.shape})")
    return tuple(TensorType(x.shape[:axis] + (s,) + x.shape[axis + 1 :], x.dtype) for s in sizes)


def _split_ref(xs, attrs):
    cuts = np.cumsum(attrs["sizes"])[:-1]
    return tuple(np.asarray(p, order="C") for p in np.split(xs[0], cuts, axis=attrs["axis"]))


def _g_split(op, gys):
    parts = [g if g is not None else _zeros(o.shape, o.dtype) for g, o in zip(gys, op.outputs)]
    return (concat(parts, axis=op.attrs["axis"]),)


def _zeros(shape, dtype):
    from ..builder import fill

    return fill(shape, 0, dtype)


defop(
    "split",
    ("x",),
    _split_infer,
    _split_ref,
    _g_split,
    attrs={"axis": Attr("int", 0), "sizes": Attr("ints")},
    resolve=resolve_axis,
    kind=KERNEL,
    doc="cut along axis into pieces of the given sizes",
    examples=(
        Example((Sample((5, 4)),), {"sizes": (2, 3)}, lambda x: (x[:2], x[2:])),
        Example(
            (Sample((2, 6), "int32", -9, 9),),
            {"axis": -1, "sizes": (1, 2, 3)},
            lambda x: (x[:, :1], x[:, 1:3], x[:, 3:]),
        ),
        Example((Sample((2, 3, 2)),), {"axis": 1, "sizes": (3,)}, lambda x: (x,)),
        # 1, 2 and 8 bytes an element
        Example(
            (Sample((2, 4, 2), "int8", -9, 9),), {"axis": 1, "sizes": (1, 3)}, lambda x: (x[:, :1], x[:, 1:])
        ),
        Example((Sample((5, 4), "float16"),), {"sizes": (2, 3)}, lambda x: (x[:2], x[2:]), grad=False),
        Example(
            (Sample((2, 6), "int64", -9, 9),),
            {"axis": -1, "sizes": (1, 2, 3)},
            lambda x: (x[:, :1], x[:, 1:3], x[:, 3:]),
        ),
    ),
)


def split(x, num_or_sizes, axis=0, name=None):
    """Split into ``num`` equal pieces or pieces of the given sizes; returns a tuple."""
    x = operand(x)
    if isinstance(num_or_sizes, int):
        dim = x.shape[norm_axis(axis, x.rank)]
        if num_or_sizes <= 0 or dim % num_or_sizes:
            raise ShapeError(
                f"op split (input {x.type}): cannot split axis {axis} into {num_or_sizes} equal parts"
            )
        sizes = (dim // num_or_sizes,) * num_or_sizes
    else:
        sizes = tuple(num_or_sizes)
    out = apply("split", [x], name, axis=axis, sizes=sizes)
    return out if isinstance(out, tuple) else (out,)


# ----------------------------------------------------------------------------- slice
def slice_plan(shape, attrs) -> list[tuple[int, int, int]]:
    """(start, step, count) per axis for resolved slice attributes."""
    plan = [(0, 1, d) for d in shape]
    for a, s, e, st in zip(attrs["axes"], attrs["starts"], attrs["ends"], attrs["steps"]):
        lo, hi, step = slice(s, e, st).indices(shape[a])
        plan[a] = (lo, step, len(range(lo, hi, step)))
    return plan


def _slice_resolve(types, attrs):
    """Canonical form: every axis listed, starts in range, ends just past the last element
    (``-(dim + 1)`` when a negative step runs through index 0), so resolving is idempotent."""
    x = types[0]
    starts, ends = attrs["starts"], attrs["ends"]
    axes = tuple(range(len(starts))) if attrs["axes"] is None else attrs["axes"]
    steps = (1,) * len(starts) if attrs["steps"] is None else attrs["steps"]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"slice starts {starts}, ends {ends}, axes {axes}, steps {steps} differ in length")
    axes = norm_axes(axes, x.rank)
    if 0 in steps:
        raise ShapeError("slice step 0")
    plan = slice_plan(x.shape, {"axes": axes, "starts": starts, "ends": ends, "steps": steps})
    out_ends = tuple(s + c * st if s + c * st >= 0 else -(d + 1) for (s, st, c), d in zip(plan, x.shape))
    return {
        "starts": tuple(s for s, _, _ in plan),
        "ends": out_ends,
        "axes": tuple(range(x.rank)),
        "steps": tuple(st for _, st, _ in plan),
    }


def _slice_ref(xs, attrs):
    index = tuple(
        slice(s, s + c * st if s + c * st >= 0 else None, st) for s, st, c in slice_plan(xs[0].shape, attrs)
    )
    return np.asarray(xs[0][index], order="C")


def _g_slice(op, gys):
    g = gys[0]
    x = op.inputs[0]
    for axis, (start, step, count) in enumerate(slice_plan(x.shape, op.attrs)):
        dim = x.shape[axis]
        if (start, step, count) == (0, 1, dim):
            continue
        if step < 0:  # reverse, then place as a positive-step slice
            g = slice_(g, [-1], [-(count + 1)], [axis], [-1]) if count else g
            start, step = start + (count - 1) * step, -step
        g = _place(g, axis, start, step, count, dim)
    return (g,)


def _place(g, axis, start, step, count, dim):
    """Inverse of a positive-step slice along one axis: scatter g into zeros of size dim."""
    if step > 1 and count:
        g = unsqueeze(g, axis + 1)
        pads = [0] * (2 * g.rank)
        pads[g.rank + axis + 1] = step - 1
        g = pad(g, pads)
        shape = list(g.shape)
        g = reshape(g, shape[:axis] + [count * step] + shape[axis + 2 :])
    pads = [0] * (2 * g.rank)
    pads[axis] = start
    pads[g.rank + axis] = dim - start - g.shape[axis]
    return pad(g, pads)


defop(
    "slice",
    ("x",),
    lambda ts, a: TensorType(tuple(c for _, _, c in slice_plan(ts[0].shape, a)), ts[0].dtype),
    _slice_ref,
    _g_slice,
    attrs={
        "starts": Attr("ints"),
        "ends": Attr("ints"),
        "axes": Attr("ints", None),
        "steps": Attr("ints", None),
    },
    resolve=_slice_resolve,
    kind=KERNEL,
    doc="strided slice with ONNX/numpy clamping; resolved to start, end, step on every axis",
    examples=(
        Example((Sample((4, 6)),), {"starts": (1, 1), "ends": (3, -1)}, lambda x: x[1:3, 1:5]),
        Example(
            (Sample((5, 6)),),
            {"starts": (1, -1), "ends": (100, -100), "axes": (1, 0), "steps": (2, -2)},
            lambda x: x[[4, 2, 0]][:, [1, 3, 5]],
        ),
        Example(
            (Sample((3, 4, 2), "int32", -9, 9),),
            {"starts": (1,), "ends": (3,), "axes": (-2,)},
            lambda x: x[:, 1:3, :],
        ),
        # 1, 2 and 8 bytes an element
        Example(
            (Sample((3, 4, 5), "int8", -9, 9),),
            {"starts": (-1, 1, 0), "ends": (-100, 100, 100), "steps": (-1, 1, 2)},
            lambda x: x[::-1, 1:, ::2],
        ),
        Example(
            (Sample((4, 6), "float16"),),
            {"starts": (1, 1), "ends": (3, -1)},
            lambda x: x[1:3, 1:5],
            grad=False,
        ),
        Example(
            (Sample((3, 4, 2), "int64", -9, 9),),
            {"starts": (1,), "ends": (3,), "axes": (-2,)},
            lambda x: x[:, 1:3, :],
        ),
    ),
)


def slice_(x, starts, ends, axes=None, steps=None, name=None):
    return apply("slice", [operand(x)], name, starts=starts, ends=ends, axes=axes, steps=steps)


# ----------------------------------------------------------------------------- gather / scatter
def _gather_shape(data, indices, axis):
    return data.shape[:axis] + indices.shape + data.shape[axis + 1 :]


def _gather_infer(types, attrs):
    data, indices = types
    check_dtype(indices, dtypes.INDEX, "indices")
    if data.rank == 0:
        raise ShapeError("cannot gather from a scalar")
    return TensorType(_gather_shape(data, indices, attrs["axis"]), data.dtype)


def _checked_indices(indices, dim):
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        bad = indices[(indices < -dim) | (indices >= dim)].flat[0]
        raise ExecutionError(f"index {bad} is out of range for an axis of size {dim}")
    return np.where(indices < 0, indices + dim, indices).astype(np.int64)


def _gather_ref(xs, attrs):
    data, indices = xs
    axis = attrs["axis"]
    return np.take(data, _checked_indices(indices, data.shape[axis]), axis=axis)


def _g_gather(op, gys):
    data, indices = op.inputs
    return scatter_add(_zeros(data.shape, data.dtype), indices, gys[0], axis=op.attrs["axis"]), None


defop(
    "gather",
    ("data", "indices"),
    _gather_infer,
    _gather_ref,
    _g_gather,
    attrs={"axis": Attr("int", 0)},
    resolve=resolve_axis,
    check_constants=lambda ts, a, c: _checked_indices(c[1], ts[0].shape[a["axis"]]) if 1 in c else None,
    kind=KERNEL,
    doc="take entries along axis; negative indices count from the end",
    examples=(
        Example((Sample((5, 3)), np.array([4, 0, -1, 2], np.int64)), {}, lambda d, i: d[i]),
        Example(
            (Sample((2, 4, 3)), np.array([[1, -4], [3, 3]], np.int32)), {"axis": 1}, lambda d, i: d[:, i]
        ),
        Example((Sample((3, 4), "int32", -9, 9), np.array(-1, np.int64)), {"axis": -1}, lambda d, i: d[:, 3]),
        Example((Sample((4, 2), "bool"), np.array([3, 0], np.int64)), {}, lambda d, i: d[i]),
    ),
)


def gather(data, indices, axis=0, name=None):
    return apply("gather", [operand(data), operand(indices)], name, axis=axis)


def _scatter_infer(types, attrs):
    data, indices, updates = types
    check_dtype(indices, dtypes.INDEX, "indices")
    same_dtype([data, updates])
    want = _gather_shape(data, indices, attrs["axis"])
    if updates.shape != want:
        raise ShapeError(f"updates shape {updates.shape} must be {want}")
    return data


def _scatter_ref(xs, attrs):
    data, indices, updates = xs
    axis = attrs["axis"]
    idx = _checked_indices(indices, data.shape[axis]).ravel()
    out = _acc_copy(data)
    u = updates.reshape(data.shape[:axis] + (idx.size,) + data.shape[axis + 1 :])
    np.add.at(np.moveaxis(out, axis, 0), idx, np.moveaxis(u, axis, 0).astype(out.dtype))
    return out.astype(data.dtype)


def _acc_copy(x):
    return x.astype(np.float32) if x.dtype == np.float16 else x.copy()


def _g_scatter(op, gys):
    _, indices, _ = op.inputs
    return gys[0], None, op.want(2, lambda: gather(gys[0], indices, axis=op.attrs["axis"]))


def _scattered(axis):
    """Expectation of scatter_add: each update added in a Python loop over the indices."""

    def expect(data, indices, updates):
        out = data.copy()
        for pos in np.ndindex(indices.shape):
            i = int(indices[pos]) % data.shape[axis]
            out[(slice(None),) * axis + (i,)] += updates[(slice(None),) * axis + pos]
        return out

    return expect


defop(
    "scatter_add",
    ("data", "indices", "updates"),
    _scatter_infer,
    _scatter_ref,
    _g_scatter,
    attrs={"axis": Attr("int", 0)},
    resolve=resolve_axis,
    check_constants=lambda ts, a, c: _checked_indices(c[1], ts[0].shape[a["axis"]]) if 1 in c else None,
    kind=KERNEL,
    doc="data with updates added at the gathered positions (the transpose of gather)",
    examples=(
        Example((Sample((5, 3)), np.array([0, 2, 0, -1], np.int64), Sample((4, 3))), {}, _scattered(0)),
        Example(
            (Sample((2, 4)), np.array([[3, 1], [1, -4]], np.int32), Sample((2, 2, 2))),
            {"axis": 1},
            _scattered(1),
        ),
        Example(
            (Sample((4,), "int32", -9, 9), np.array([1, 1, 3], np.int64), Sample((3,), "int32", -9, 9)),
            {},
            _scattered(0),
        ),
    ),
)


def scatter_add(data, indices, updates, axis=0, name=None):
    return apply("scatter_add", [operand(data), operand(indices), operand(updates)], name, axis=axis)


# ----------------------------------------------------------------------------- pad
def _pad_infer(types, attrs):
    x, pads, mode = types[0], attrs["pads"], attrs["mode"]
    if len(pads) != 2 * x.rank:
        raise ShapeError(f"pads {pads} must have 2 x rank = {2 * x.rank} values")
    shape = []
    for i, d in enumerate(x.shape):
        b, e = pads[i], pads[x.rank + i]
        if d + b + e < 0:
            raise ShapeError(f"pads {pads} remove more than axis {i} of size {d} holds")
        inner = d + min(b, 0) + min(e, 0)
        if mode == "reflect" and max(b, e) > 0 and max(b, e) > inner - 1:
            raise ShapeError(
                f"reflect pad {max(b, e)} needs an axis longer than {max(b, e)}, axis {i} has {inner}"
            )
        if mode == "edge" and max(b, e) > 0 and inner == 0:
            raise ShapeError(f"edge pad of empty axis {i}")
        shape.append(d + b + e)
    return TensorType(tuple(shape), x.dtype)


def _pad_ref(xs, attrs):
    x, pads, rank = xs[0], attrs["pads"], xs[0].ndim
    crop = tuple(slice(max(-pads[i], 0), x.shape[i] - max(-pads[rank + i], 0)) for i in range(rank))
    x = x[crop]
    width = [(max(pads[i], 0), max(pads[rank + i], 0)) for i in range(rank)]
    if attrs["mode"] == "constant":
        return np.pad(x, width, mode="constant", constant_values=np.asarray(attrs["value"]).astype(x.dtype))
    return np.pad(x, width, mode=attrs["mode"])


def _g_pad(op, gys):
    if op.attrs["mode"] != "constant":
        raise GradientError(
            f"gradient of pad with mode={op.attrs['mode']} is not implemented (node '{op.node.name}')"
        )
    return (pad(gys[0], [-p for p in op.attrs["pads"]]),)


def _padded_constant(x, value=1.5):
    """Expectation of the constant pad examples: pads (1, -1, 0, 2), x of shape (2, 4)."""
    out = np.full((3, 5), value, x.dtype)
    out[1:, :3] = x[:, 1:]
    return out


def _edged(x):
    """Expectation of the edge pad examples: pads (1, -1, 0, 2), x of shape (2, 3)."""
    return x[[0, 0, 1]][:, [1, 2, 2, 2]]


def _reflected(x):
    """Expectation of the reflect pad examples: pads (2, 1, 0, 2), x of shape (3, 4)."""
    return x[[2, 1, 0, 1, 2]][:, [1, 0, 1, 2, 3, 2, 1]]


defop(
    "pad",
    ("x",),
    _pad_infer,
    _pad_ref,
    _g_pad,
    attrs={
        "pads": Attr("ints"),
        "mode": Attr("str", "constant", ("constant", "reflect", "edge")),
        "value": Attr("float", 0.0),
    },
    kind=KERNEL,
    doc="pads = begins of every axis, then ends; negative values crop",
    examples=(
        Example((Sample((2, 4)),), {"pads": (1, -1, 0, 2), "value": 1.5}, _padded_constant),
        Example((Sample((2, 3), "int32", -9, 9),), {"pads": (1, -1, 0, 2), "mode": "edge"}, _edged),
        Example(
            (Sample((3, 4)),),
            {"pads": (2, 1, 0, 2), "mode": "reflect"},
            _reflected,
            grad=False,  # no gradient rule for reflect padding
        ),
        # 1, 2 and 8 bytes an element, the fill value stored as each type stores it
        Example(
            (Sample((2, 4), "float16"),), {"pads": (1, -1, 0, 2), "value": 1.5}, _padded_constant, grad=False
        ),
        Example(
            (Sample((2, 4), "bool"),),
            {"pads": (1, -1, 0, 2), "value": 1.0},
            lambda x: _padded_constant(x, True),
        ),
        Example((Sample((3, 4), "int8", -9, 9),), {"pads": (2, 1, 0, 2), "mode": "reflect"}, _reflected),
        Example((Sample((2, 3), "int64", -9, 9),), {"pads": (1, -1, 0, 2), "mode": "edge"}, _edged),
        *(
            Example(
                (Sample((2, 4), dt, -9, 9),),
                {"pads": (1, -1, 0, 2), "value": -7.0},
                lambda x: _padded_constant(x, -7),
            )
            for dt in ("int8", "int64")
        ),
    ),
)


def pad(x, pads, mode="constant", value=0.0, name=None):
    return apply("pad", [operand(x)], name, pads=pads, mode=mode, value=value)


# ----------------------------------------------------------------------------- expand / tile
def _g_expand(op, gys):
    from .elementwise import unbroadcast

    return (unbroadcast(gys[0], op.inputs[0].shape),)


defop(
    "expand",
    ("x",),
    lambda ts, a: TensorType(broadcast_shapes(ts[0].shape, a["shape"]), ts[0].dtype),
    lambda xs, a: np.broadcast_to(xs[0], broadcast_shapes(xs[0].shape, a["shape"])).copy(),
    _g_expand,
    attrs={"shape": Attr("ints")},
    kind=KERNEL,
    doc="broadcast x against shape (both ways, as in ONNX Expand)",
    examples=(
        Example((Sample((3, 1)),), {"shape": (2, 1, 4)}, lambda x: x + np.zeros((2, 3, 4), x.dtype)),
        Example(
            (Sample((1, 3), "int32", -9, 9),), {"shape": (2, 1)}, lambda x: x + np.zeros((2, 3), x.dtype)
        ),
        Example((Sample((3,), "bool"),), {"shape": (2, 1)}, lambda x: x | np.zeros((2, 3), bool)),
        Example(
            (Sample((3, 1), "float16"),),
            {"shape": (2, 1, 4)},
            lambda x: np.broadcast_to(x, (2, 3, 4)),
            grad=False,
        ),
        Example((Sample((1, 3), "int64", -9, 9),), {"shape": (2, 1)}, lambda x: np.broadcast_to(x, (2, 3))),
    ),
)


def expand(x, shape, name=None):
    return apply("expand", [operand(x)], name, shape=tuple(shape))


def _tile_infer(types, attrs):
    x, reps = types[0], attrs["repeats"]
    if len(reps) != x.rank or any(r < 0 for r in reps):
        raise ShapeError(f"repeats {reps} must be {x.rank} non-negative values")
    return TensorType(tuple(d * r for d, r in zip(x.shape, reps)), x.dtype)


def _g_tile(op, gys):
    from .reduce import reduce_sum

    x, reps = op.inputs[0], op.attrs["repeats"]
    inter = [v for r, d in zip(reps, x.shape) for v in (r, d)]
    g = reshape(gys[0], inter)
    g = reduce_sum(g, axes=tuple(range(0, 2 * x.rank, 2)))
    return (reshape(g, x.shape),)


defop(
    "tile",
    ("x",),
    _tile_infer,
    lambda xs, a: np.tile(xs[0], a["repeats"]),
    _g_tile,
    attrs={"repeats": Attr("ints")},
    kind=KERNEL,
    doc="repeat x along each axis",
    examples=(
        Example((Sample((2, 3)),), {"repeats": (2, 1)}, lambda x: np.concatenate([x, x], 0)),
        Example(
            (Sample((1, 2, 2), "int32", -9, 9),),
            {"repeats": (3, 1, 2)},
            lambda x: np.concatenate([np.concatenate([x, x], 2)] * 3, 0),
        ),
        Example((Sample((3,), "bool"),), {"repeats": (2,)}, lambda x: np.concatenate([x, x])),
        Example((Sample((2, 3), "float16"),), {"repeats": (1, 2)}, lambda x: np.tile(x, (1, 2)), grad=False),
        Example((Sample((3,), "int64", -9, 9),), {"repeats": (2,)}, lambda x: np.concatenate([x, x])),
    ),
)


def tile(x, repeats, name=None):
    return apply("tile", [operand(x)], name, repeats=tuple(repeats))


# ----------------------------------------------------------------------------- identity
defop(
    "identity",
    ("x",),
    _same,
    lambda xs, a: xs[0].copy(),
    lambda op, gys: (gys[0],),
    kind=ALIAS,
    doc="x unchanged",
    examples=(
        Example((Sample((2, 3)),), {}, lambda x: x),
        Example((Sample((4,), "int64", -9, 9),), {}, lambda x: x),
        Example((Sample((2, 2), "bool"),), {}, lambda x: x),
    ),
)
defop(
    "stop_gradient",
    ("x",),
    _same,
    lambda xs, a: xs[0].copy(),
    NOT_DIFFERENTIABLE,
    kind=ALIAS,
    doc="x unchanged; gradients do not flow through it",
    examples=(
        Example((Sample((2, 3)),), {}, lambda x: x),
        Example((Sample((4,), "int32", -9, 9),), {}, lambda x: x),
        Example((Sample((2, 2), "bool"),), {}, lambda x: x),
    ),
)


def identity(x, name=None):
    return apply("identity", [operand(x)], name)


def stop_gradient(x, name=None):
    return apply("stop_gradient", [operand(x)], name)


# ----------------------------------------------------------------------------- indexing sugar
def getitem(x: Tensor, key) -> Tensor:
    """``x[1:3, ::2, None, 0]``: slices, ints, ``None`` and ``...`` (numpy basic indexing)."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise ShapeError("an index can only have one '...'")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > x.rank:
        raise ShapeError(f"too many indices ({used}) for tensor '{x.name}' of rank {x.rank}")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (x.rank - used) + key[i + 1 :]
    starts, ends, axes, steps, drop, new = [], [], [], [], [], []
    axis = out_axis = 0
    for k in key:
        if k is None:
            new.append(out_axis)
            out_axis += 1
            continue
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            dim = x.shape[axis]
            if not -dim <= k < dim:
                raise ShapeError(f"index {k} is out of range for axis {axis} of size {dim}")
            k = k % dim
            starts.append(k), ends.append(k + 1), axes.append(axis), steps.append(1)
            drop.append(axis)
        elif isinstance(k, slice):
            step = 1 if k.step is None else k.step
            big = 2**62
            starts.append(k.start if k.start is not None else (0 if step > 0 else big))
            ends.append(k.stop if k.stop is not None else (big if step > 0 else -big))
            axes.append(axis), steps.append(step)
            out_axis += 1
        else:
            raise ShapeError(f"unsupported index {k!r}; use gd.gather for tensor indices")
        axis += 1
    y = slice_(x, starts, ends, axes, steps) if axes else x
    if drop:
        y = squeeze(y, drop)
    if new:
        y = unsqueeze(y, new)
    return y


# the builders that graphdef exports (``gd.concat`` ...)
__all__ = [
    "concat",
    "expand",
    "flatten",
    "gather",
    "identity",
    "pad",
    "reshape",
    "scatter_add",
    "slice_",
    "split",
    "squeeze",
    "stop_gradient",
    "tile",
    "transpose",
    "unsqueeze",
]
