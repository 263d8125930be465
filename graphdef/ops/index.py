"""Indexing: gather_elements / scatter_elements (one index per element, along an axis),
gather_nd / scatter_nd (index tuples addressing slices), topk, and the one_hot composition.

Index inputs are int32 or int64; a negative index counts from the end of its axis, and an
index outside ``[-dim, dim)`` is an ``ExecutionError`` in the interpreter and
``FC_ERR_INDEX`` from the C kernels (checked before anything is written). Scatters apply
their updates in row-major order of the index tensor, so with ``reduction="none"`` and
repeated indices the last update wins (as the ONNX reference does).

>>> import numpy as np, graphdef as gd
>>> with gd.Graph("g") as g:
...     x = gd.constant(np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], np.float32))
...     values, indices = gd.topk(x, 2)
>>> gd.run(g, {}, [values, indices])
[array([[5., 3.],
       [6., 4.]], dtype=float32), array([[1, 2],
       [2, 0]])]
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import Tensor, apply, constant, fill, operand
from ..errors import ExecutionError, GradientError, ShapeError
from ..ir import TensorType
from ..registry import KERNEL, NOT_DIFFERENTIABLE, Attr, Example, Sample, defop
from ._util import check_dtype, norm_axis, resolve_axis, same_dtype
from .elementwise import add, equal, less, where
from .shape import concat, expand, unsqueeze

REDUCTIONS = ("none", "add", "mul", "max", "min")
_AT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


# ----------------------------------------------------------------------------- helpers
def _normalized(indices: np.ndarray, dim: int) -> np.ndarray:
    """Indices made non-negative (int64), or an ExecutionError naming the first bad one."""
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        bad = indices[(indices < -dim) | (indices >= dim)].flat[0]
        raise ExecutionError(f"index {bad} is out of range for an axis of size {dim}")
    return np.where(indices < 0, indices + dim, indices).astype(np.int64)


def _check_element_indices(types, attrs, consts) -> None:
    """Constant indices of gather_elements / scatter_elements in range (checked when compiled)."""
    if 1 in consts:
        _normalized(consts[1], types[0].shape[attrs["axis"]])


def _check_nd_indices(types, attrs, consts) -> None:
    """Constant index tuples of gather_nd / scatter_nd in range (checked when compiled)."""
    if 1 in consts:
        _nd_rows(types[0].shape, consts[1], attrs.get("batch_dims", 0))


def _apply_updates(flat_out: np.ndarray, targets: np.ndarray, updates: np.ndarray, reduction: str):
    """flat_out[targets[i]] = f(flat_out[targets[i]], updates[i]) for i in order.

    ``targets`` is 1-D; ``updates`` has targets.size rows (of any trailing shape).
    """
    if reduction == "none":
        # numpy leaves the order of repeated fancy assignments open: pick the last writer
        last = targets.size - 1 - np.unique(targets[::-1], return_index=True)[1]
        flat_out[targets[last]] = updates[last]
    else:
        _AT[reduction].at(flat_out, targets, updates)


def _check_reduction(dtype: str, reduction: str) -> None:
    if dtype == "bool" and reduction != "none":
        raise ShapeError(f"reduction '{reduction}' needs numeric data, got bool")


def _zeros(shape, dtype):
    return fill(shape, 0, dtype)


# ----------------------------------------------------------------------------- examples
# Expectations of the examples: element-by-element (or slice-by-slice) loops over the
# indices, in row-major order, independent of the vectorized references above.
_COMBINE = {
    "none": lambda old, new: new,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _i64(rows):
    return np.array(rows, np.int64)


def _i32(rows):
    return np.array(rows, np.int32)


def _at(position, axis, index) -> tuple:
    """``position`` with its ``axis`` coordinate replaced by ``index``."""
    out = list(position)
    out[axis] = int(index)
    return tuple(out)


def _expect_gather_elements(axis):
    def expect(data, indices):
        out = np.empty(indices.shape, data.dtype)
        for pos in np.ndindex(indices.shape):
            out[pos] = data[_at(pos, axis, indices[pos])]
        return out

    return expect


def _expect_scatter_elements(axis, reduction):
    def expect(data, indices, updates):
        out = data.copy()
        for pos in np.ndindex(indices.shape):
            dst = _at(pos, axis, indices[pos])
            with np.errstate(over="ignore"):  # integers wrap
                out[dst] = _COMBINE[reduction](out[dst], updates[pos])
        return out

    return expect


def _expect_gather_nd(batch_dims=0):
    def expect(data, indices):
        lead, k = indices.shape[:-1], indices.shape[-1]
        rows = [data[pos[:batch_dims] + tuple(int(i) for i in indices[pos])] for pos in np.ndindex(lead)]
        return np.array(rows, data.dtype).reshape(lead + data.shape[batch_dims + k :])

    return expect


def _expect_scatter_nd(reduction):
    def expect(data, indices, updates):
        out = data.copy()
        for pos in np.ndindex(indices.shape[:-1]):
            dst = tuple(int(i) for i in indices[pos])
            with np.errstate(over="ignore"):  # integers wrap
                out[dst] = _COMBINE[reduction](out[dst], updates[pos])
        return out

    return expect


def _expect_topk(k, axis=-1, largest=True):
    """Best first, NaN above every number, equal values by the smaller index: each line
    sorted by Python on (value, index)."""

    def rank(v):
        return (1, 0.0) if v != v else (0, v)  # NaN above every number

    def expect(x):
        lines = np.moveaxis(x, axis, -1)
        idx = np.empty(lines.shape[:-1] + (k,), np.int64)
        for lead in np.ndindex(lines.shape[:-1]):
            line = [rank(v) for v in lines[lead].tolist()]
            if largest:
                order = sorted(range(len(line)), key=lambda j: (-line[j][0], -line[j][1], j))
            else:
                order = sorted(range(len(line)), key=lambda j: (line[j], j))
            idx[lead] = order[:k]
        idx = np.moveaxis(idx, -1, axis)
        return np.take_along_axis(x, idx, axis=axis), idx

    return expect


# The scatters' kernels are instantiated per type (runtime_c/kernels/gather_nd.inc: bool data
# uses uint8's): the examples below add every other type with each reduction, on repeated
# targets ("none": distinct ones, as in the first examples); the gathers' kernels move
# elements by size, so those add 1, 2 and 8 bytes.
_OTHER_TYPES = ("float64", "float16", "int8", "uint8", "int32", "int64")


def _reduced_types():
    """(dtype, reduction) pairs of the scatter examples below: all but those of both ops' first
    examples (float32 add, mul and min, int32 max)."""
    first = {("float32", "add"), ("float32", "mul"), ("float32", "min"), ("int32", "max")}
    return [(dt, r) for dt in ("float32",) + _OTHER_TYPES for r in REDUCTIONS[1:] if (dt, r) not in first]


def _scatter_elements_more() -> tuple[Example, ...]:
    out = [
        Example(
            (Sample((4, 3), dt), _i64([[0, 2, -1], [3, -4, 1], [-3, 1, 0]]), Sample((3, 3), dt)),
            {"axis": 0, "reduction": "none"},
            _expect_scatter_elements(0, "none"),
            grad=False,
        )
        for dt in _OTHER_TYPES + ("bool",)
    ]
    for dt, red in _reduced_types():
        if (dt, red) == ("float64", "add"):  # rank 4, along an inner axis
            ins = (Sample((2, 3, 4, 5), dt), Sample((2, 2, 6, 3), "int64", -4, 3), Sample((2, 2, 6, 3), dt))
            out.append(
                Example(ins, {"axis": 2, "reduction": red}, _expect_scatter_elements(2, red), grad=False)
            )
            continue
        ins = (Sample((3, 5), dt, -9, 9), Sample((3, 7), "int32", -5, 4), Sample((3, 7), dt, -9, 9))
        out.append(
            Example(ins, {"axis": -1, "reduction": red}, _expect_scatter_elements(-1, red), grad=False)
        )
    return tuple(out)


def _scatter_nd_more() -> tuple[Example, ...]:
    out = [
        Example(
            (Sample((4, 3), dt), _i64([[-1], [1], [0]]), Sample((3, 3), dt)),
            {"reduction": "none"},
            _expect_scatter_nd("none"),
            grad=False,
        )
        for dt in _OTHER_TYPES + ("bool",)
    ]
    # no index tuple at all: data unchanged
    empty = (Sample((3, 4)), np.zeros((0, 1), np.int64), Sample((0, 4)))
    out.append(Example(empty, {}, _expect_scatter_nd("none"), grad=False))
    tuples = _i32([[0, 1], [2, -1], [0, 1], [-3, 3], [1, 0], [2, 3]])  # (0, 1) and (2, 3) twice
    for dt, red in _reduced_types():
        ins = (Sample((3, 4, 2), dt, -9, 9), tuples, Sample((6, 2), dt, -9, 9))
        out.append(Example(ins, {"reduction": red}, _expect_scatter_nd(red), grad=False))
    return tuple(out)


# ----------------------------------------------------------------------------- gather_elements
def _elements_check(data: TensorType, indices: TensorType, axis: int) -> None:
    check_dtype(indices, dtypes.INDEX, "indices")
    if data.rank == 0:
        raise ShapeError("cannot index a scalar")
    if indices.rank != data.rank:
        raise ShapeError(f"indices {indices.shape} must have the rank of data {data.shape}")
    for d, (i, n) in enumerate(zip(indices.shape, data.shape)):
        if d != axis and i > n:
            raise ShapeError(f"indices {indices.shape} exceed data {data.shape} on axis {d}")


def _elements_coords(data_shape, indices: np.ndarray, axis: int) -> tuple:
    coords = list(np.indices(indices.shape, sparse=True))
    coords[axis] = _normalized(indices, data_shape[axis])
    return tuple(np.broadcast_to(c, indices.shape) for c in coords)


def _gather_elements_infer(types, attrs):
    data, indices = types
    _elements_check(data, indices, attrs["axis"])
    return TensorType(indices.shape, data.dtype)


def _gather_elements_ref(xs, attrs):
    data, indices = xs
    return data[_elements_coords(data.shape, indices, attrs["axis"])]


def _g_gather_elements(op, gys):
    data, indices = op.inputs
    zeros = _zeros(data.shape, data.dtype)
    return scatter_elements(zeros, indices, gys[0], axis=op.attrs["axis"], reduction="add"), None


defop(
    "gather_elements",
    ("data", "indices"),
    _gather_elements_infer,
    _gather_elements_ref,
    _g_gather_elements,
    attrs={"axis": Attr("int", 0)},
    resolve=resolve_axis,
    check_constants=_check_element_indices,
    kind=KERNEL,
    doc="y[i, j, k] = data[i, indices[i, j, k], k] (for axis 1): one index per output element",
    examples=(
        Example((Sample((3, 4)), _i64([[0, 3], [-1, 1], [2, -4]])), {"axis": 1}, _expect_gather_elements(1)),
        Example(
            (Sample((3, 2, 2)), _i32([[[0], [2]], [[-1], [1]], [[1], [0]], [[2], [-3]]])),
            {"axis": 0},
            _expect_gather_elements(0),
        ),
        Example(
            (Sample((2, 5), "int32", -9, 9), _i64([[4, 0, -5], [1, 1, 3]])),
            {"axis": -1},
            _expect_gather_elements(-1),
        ),
        # 8, 2 and 1 bytes an element; index axes merged (the last two), an index smaller
        # than data on the other axes, an index axis of size 1
        Example(
            (Sample((5, 2, 3), "float64"), Sample((7, 2, 3), "int32", -5, 4)),
            {"axis": 0},
            _expect_gather_elements(0),
            grad=False,
        ),
        Example(
            (Sample((4, 5, 6), "float16"), Sample((2, 3, 9), "int64", -6, 5)),
            {"axis": 2},
            _expect_gather_elements(2),
            grad=False,
        ),
        Example(
            (Sample((3, 4), "int8", -9, 9), _i64([[3], [-4], [1]])), {"axis": 1}, _expect_gather_elements(1)
        ),
    ),
)


def gather_elements(data, indices, axis=0, name=None):
    """Take one element of ``data`` per element of ``indices`` (ONNX GatherElements,
    ``torch.gather``); the result has the shape of ``indices``."""
    return apply("gather_elements", [operand(data), operand(indices)], name, axis=axis)


# ----------------------------------------------------------------------------- scatter_elements
def _scatter_elements_infer(types, attrs):
    data, indices, updates = types
    _elements_check(data, indices, attrs["axis"])
    same_dtype([data, updates])
    _check_reduction(data.dtype, attrs["reduction"])
    if updates.shape != indices.shape:
        raise ShapeError(f"updates shape {updates.shape} must be the indices shape {indices.shape}")
    return data


def _scatter_elements_ref(xs, attrs):
    data, indices, updates = xs
    out = data.copy()
    targets = np.ravel_multi_index(_elements_coords(data.shape, indices, attrs["axis"]), data.shape)
    _apply_updates(out.reshape(-1), targets.reshape(-1), updates.reshape(-1), attrs["reduction"])
    return out


def _winners(scatter, gather, indices, ids, data_shape):
    """Bool mask over the updates: True for the update that a 'none' scatter keeps."""
    owner = scatter(fill(data_shape, -1, "int64"), indices, ids)
    return equal(gather(owner, indices), ids)


def _g_scatter_elements(op, gys):
    data, indices, updates = op.inputs
    axis, reduction = op.attrs["axis"], op.attrs["reduction"]
    g = gys[0]
    if reduction == "add":
        return g, None, op.want(2, lambda: gather_elements(g, indices, axis))
    if reduction != "none":
        raise GradientError(
            f"gradient of scatter_elements with reduction={reduction} is not implemented "
            f"(node '{op.node.name}')"
        )

    def d_updates():
        ids = constant(np.arange(math.prod(indices.shape), dtype=np.int64).reshape(indices.shape))
        keep = _winners(
            lambda d, i, u: scatter_elements(d, i, u, axis),
            lambda d, i: gather_elements(d, i, axis),
            indices,
            ids,
            data.shape,
        )
        return where(keep, gather_elements(g, indices, axis), 0.0)

    return (
        op.want(0, lambda: scatter_elements(g, indices, _zeros(updates.shape, updates.dtype), axis)),
        None,
        op.want(2, d_updates),
    )


defop(
    "scatter_elements",
    ("data", "indices", "updates"),
    _scatter_elements_infer,
    _scatter_elements_ref,
    _g_scatter_elements,
    attrs={"axis": Attr("int", 0), "reduction": Attr("str", "none", REDUCTIONS)},
    resolve=resolve_axis,
    check_constants=_check_element_indices,
    kind=KERNEL,
    doc="data with updates[i, j, k] written to (or combined into) [i, indices[i, j, k], k] "
    "(for axis 1), in row-major order of indices",
    examples=(
        # "none": no two updates of a column share a target (the result would depend on order)
        Example(
            (Sample((3, 4)), _i64([[0, 2, -1, 1], [2, 0, 1, -3]]), Sample((2, 4))),
            {"axis": 0, "reduction": "none"},
            _expect_scatter_elements(0, "none"),
        ),
        Example(
            (Sample((2, 5)), _i32([[1, 1, -1], [0, 4, 0]]), Sample((2, 3))),
            {"axis": 1, "reduction": "add"},
            _expect_scatter_elements(1, "add"),
        ),
        Example(
            (
                Sample((3, 3), "float32", 0.5, 2.0),
                _i64([[0, 1, 2], [0, -2, 2]]),
                Sample((2, 3), "float32", 0.5, 2.0),
            ),
            {"axis": 0, "reduction": "mul"},
            _expect_scatter_elements(0, "mul"),
            grad=False,
        ),
        Example(
            (Sample((4,), "int32", -9, 9), _i64([3, 0, 3, -1, 1]), Sample((5,), "int32", -9, 9)),
            {"axis": 0, "reduction": "max"},
            _expect_scatter_elements(0, "max"),
        ),
        Example(
            (Sample((2, 3)), _i32([[0, 2, 2, -3], [1, 1, 0, 2]]), Sample((2, 4))),
            {"axis": -1, "reduction": "min"},
            _expect_scatter_elements(-1, "min"),
            grad=False,
        ),
    )
    + _scatter_elements_more(),
)


def scatter_elements(data, indices, updates, axis=0, reduction="none", name=None):
    """The inverse of ``gather_elements`` (ONNX ScatterElements): a copy of ``data`` with each
    update stored at (``reduction="none"``) or combined (add, mul, max, min) into its place."""
    return apply(
        "scatter_elements",
        [operand(data), operand(indices), operand(updates)],
        name,
        axis=axis,
        reduction=reduction,
    )


# ----------------------------------------------------------------------------- gather_nd
def _nd_check(data: TensorType, indices: TensorType, batch_dims: int) -> int:
    """k, the length of the index tuples, after checking the ranks."""
    check_dtype(indices, dtypes.INDEX, "indices")
    if data.rank == 0 or indices.rank == 0:
        raise ShapeError("data and indices need rank >= 1")
    if not 0 <= batch_dims < min(data.rank, indices.rank):
        raise ShapeError(f"batch_dims {batch_dims} must lie in [0, {min(data.rank, indices.rank)})")
    if data.shape[:batch_dims] != indices.shape[:batch_dims]:
        raise ShapeError(f"batch dims of data {data.shape} and indices {indices.shape} differ")
    k = indices.shape[-1]
    if not 1 <= k <= data.rank - batch_dims:
        raise ShapeError(
            f"index tuples of length {k} (last dim of indices {indices.shape}) must be 1 to "
            f"{data.rank - batch_dims} long for data {data.shape}"
        )
    return k


def _nd_rows(data_shape, indices: np.ndarray, batch_dims: int) -> np.ndarray:
    """Row of each index tuple in data seen as (prod(shape[:b + k]), slice), shape (B, N)."""
    k = indices.shape[-1]
    batches = math.prod(data_shape[:batch_dims])
    count = math.prod(indices.shape[batch_dims:-1])
    tuples = indices.reshape(batches, count, k)
    comps = [_normalized(tuples[..., j], data_shape[batch_dims + j]) for j in range(k)]
    batch = np.broadcast_to(np.arange(batches)[:, None], (batches, count))
    return np.ravel_multi_index((batch, *comps), (batches,) + tuple(data_shape[batch_dims : batch_dims + k]))


def _gather_nd_shape(data, indices, batch_dims):
    k = indices.shape[-1]
    return indices.shape[:-1] + data.shape[batch_dims + k :]


def _gather_nd_infer(types, attrs):
    data, indices = types
    _nd_check(data, indices, attrs["batch_dims"])
    return TensorType(_gather_nd_shape(data, indices, attrs["batch_dims"]), data.dtype)


def _gather_nd_ref(xs, attrs):
    data, indices = xs
    b = attrs["batch_dims"]
    k = indices.shape[-1]
    rows = _nd_rows(data.shape, indices, b)
    table = data.reshape((math.prod(data.shape[: b + k]),) + data.shape[b + k :])
    return table[rows.reshape(-1)].reshape(_gather_nd_shape(data, indices, b))


def _batch_coordinates(indices, batch_dims):
    """indices with the coordinates of its batch dims prepended to every tuple."""
    if batch_dims == 0:
        return indices
    lead = indices.shape[:-1]
    grid = np.stack(np.indices(lead)[:batch_dims], axis=-1).astype(dtypes.np_dtype(indices.dtype))
    return concat([constant(grid), indices], axis=-1)


def _g_gather_nd(op, gys):
    data, indices = op.inputs
    full = _batch_coordinates(indices, op.attrs["batch_dims"])
    return scatter_nd(_zeros(data.shape, data.dtype), full, gys[0], reduction="add"), None


defop(
    "gather_nd",
    ("data", "indices"),
    _gather_nd_infer,
    _gather_nd_ref,
    _g_gather_nd,
    attrs={"batch_dims": Attr("int", 0)},
    check_constants=_check_nd_indices,
    kind=KERNEL,
    doc="the slices of data addressed by the index tuples in the last axis of indices, after "
    "batch_dims shared leading axes",
    examples=(
        Example((Sample((3, 4)), _i64([[0, 1], [2, -1], [-3, 3]])), {}, _expect_gather_nd()),
        Example((Sample((4, 2, 3)), _i32([[[1], [-1]], [[0], [1]]])), {}, _expect_gather_nd()),
        Example(
            (Sample((2, 3, 4)), _i64([[[2, 0], [-1, 3]], [[0, -4], [1, 1]]])),
            {"batch_dims": 1},
            _expect_gather_nd(1),
        ),
        Example(
            (Sample((2, 3, 2), "int32", -9, 9), _i32([[[1], [0], [2]], [[-1], [0], [0]]])),
            {"batch_dims": 1},
            _expect_gather_nd(1),
        ),
        # 8, 2 and 1 bytes an element: with a batch axis, whole elements of 3-D data, rows
        Example(
            (Sample((2, 3, 4), "float64"), Sample((2, 2, 1), "int64", -3, 2)),
            {"batch_dims": 1},
            _expect_gather_nd(1),
            grad=False,
        ),
        Example(
            (Sample((3, 4, 5), "float16"), _i32([[[0, 1, 2], [-1, -4, 4]], [[2, 3, -5], [1, 0, 0]]])),
            {},
            _expect_gather_nd(),
            grad=False,
        ),
        Example((Sample((6, 5), "bool"), Sample((4, 1), "int32", -6, 5)), {}, _expect_gather_nd()),
    ),
)


def gather_nd(data, indices, batch_dims=0, name=None):
    """Slices of ``data`` addressed by index tuples (ONNX GatherND): the result has shape
    ``indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:]``."""
    return apply("gather_nd", [operand(data), operand(indices)], name, batch_dims=batch_dims)


# ----------------------------------------------------------------------------- scatter_nd
def _scatter_nd_infer(types, attrs):
    data, indices, updates = types
    same_dtype([data, updates])
    _nd_check(data, indices, 0)
    _check_reduction(data.dtype, attrs["reduction"])
    want = _gather_nd_shape(data, indices, 0)
    if updates.shape != want:
        raise ShapeError(f"updates shape {updates.shape} must be {want}")
    return data


def _scatter_nd_ref(xs, attrs):
    data, indices, updates = xs
    k = indices.shape[-1]
    out = data.copy()
    rows = _nd_rows(data.shape, indices, 0).reshape(-1)
    table = out.reshape((math.prod(data.shape[:k]), math.prod(data.shape[k:])))
    _apply_updates(table, rows, updates.reshape(rows.size, table.shape[1]), attrs["reduction"])
    return out


def _g_scatter_nd(op, gys):
    data, indices, updates = op.inputs
    reduction = op.attrs["reduction"]
    g = gys[0]
    if reduction == "add":
        return g, None, op.want(2, lambda: gather_nd(g, indices))
    if reduction != "none":
        raise GradientError(
            f"gradient of scatter_nd with reduction={reduction} is not implemented (node '{op.node.name}')"
        )

    def d_updates():
        lead = indices.shape[:-1]
        ids = np.arange(math.prod(lead), dtype=np.int64).reshape(lead + (1,) * (updates.rank - len(lead)))
        ids = expand(constant(ids), updates.shape)
        keep = _winners(scatter_nd, gather_nd, indices, ids, data.shape)
        return where(keep, gather_nd(g, indices), 0.0)

    return (
        op.want(0, lambda: scatter_nd(g, indices, _zeros(updates.shape, updates.dtype))),
        None,
        op.want(2, d_updates),
    )


defop(
    "scatter_nd",
    ("data", "indices", "updates"),
    _scatter_nd_infer,
    _scatter_nd_ref,
    _g_scatter_nd,
    attrs={"reduction": Attr("str", "none", REDUCTIONS)},
    check_constants=_check_nd_indices,
    kind=KERNEL,
    doc="data with each update slice written to (or combined into) the slice its index tuple "
    "addresses, in row-major order of the tuples",
    examples=(
        # "none": the index tuples address distinct slices (the result would depend on order)
        Example(
            (Sample((4, 3)), _i64([[-1], [1]]), Sample((2, 3))),
            {"reduction": "none"},
            _expect_scatter_nd("none"),
        ),
        Example(
            (Sample((2, 3, 2)), _i32([[1, 2], [0, 0], [1, -3]]), Sample((3, 2))),
            {},
            _expect_scatter_nd("none"),
        ),
        Example(
            (Sample((2, 3)), _i64([[0, 1], [1, -1], [0, 1]]), Sample((3,))),
            {"reduction": "add"},
            _expect_scatter_nd("add"),
        ),
        Example(
            (
                Sample((2, 2, 2), "float32", 0.5, 2.0),
                _i32([[1, 0], [1, 0], [0, -1]]),
                Sample((3, 2), "float32", 0.5, 2.0),
            ),
            {"reduction": "mul"},
            _expect_scatter_nd("mul"),
            grad=False,
        ),
        Example(
            (Sample((5,), "int32", -9, 9), _i64([[4], [0], [-1]]), Sample((3,), "int32", -9, 9)),
            {"reduction": "max"},
            _expect_scatter_nd("max"),
        ),
        Example(
            (Sample((3, 2)), _i64([[2], [-3], [2]]), Sample((3, 2))),
            {"reduction": "min"},
            _expect_scatter_nd("min"),
            grad=False,
        ),
    )
    + _scatter_nd_more(),
)


def scatter_nd(data, indices, updates, reduction="none", name=None):
    """The inverse of ``gather_nd`` (ONNX ScatterND): a copy of ``data`` with the slices that
    the index tuples address replaced by (or combined with) ``updates``."""
    return apply("scatter_nd", [operand(data), operand(indices), operand(updates)], name, reduction=reduction)


# ----------------------------------------------------------------------------- topk
def _topk_infer(types, attrs):
    x = types[0]
    check_dtype(x, dtypes.NUMERIC)
    if x.rank == 0:
        raise ShapeError("topk needs rank >= 1")
    axis, k = attrs["axis"], attrs["k"]
    if not 0 <= k <= x.shape[axis]:
        raise ShapeError(f"k {k} must lie in [0, {x.shape[axis]}] (axis {axis} of {x.shape})")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    return TensorType(shape, x.dtype), TensorType(shape, "int64")


def _topk_ref(xs, attrs):
    x, axis, k = xs[0], attrs["axis"], attrs["k"]
    if attrs["largest"]:
        # descending, equal values by the smaller index, NaN first: a stable ascending sort
        # of the reversed axis, read backwards
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    order = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, order, axis=axis), order


def _g_topk(op, gys):
    x = op.inputs[0]
    if gys[0] is None:
        return (None,)
    zeros = _zeros(x.shape, x.dtype)
    return (scatter_elements(zeros, op.outputs[1], gys[0], axis=op.attrs["axis"], reduction="add"),)


def _flops_topk(ins, outs, attrs):
    return ins[0].size * max(1, math.ceil(math.log2(max(attrs["k"], 2))))


defop(
    "topk",
    ("x",),
    _topk_infer,
    _topk_ref,
    _g_topk,
    attrs={
        "k": Attr("int"),
        "axis": Attr("int", -1),
        "largest": Attr("bool", True),
        "sorted": Attr("bool", True),
    },
    resolve=resolve_axis,
    flops=_flops_topk,
    kind=KERNEL,
    doc="the k largest (or smallest) values along axis, best first, and their int64 indices; "
    "equal values by the smaller index, NaN above every number (always sorted, whatever 'sorted')",
    examples=(
        Example((Sample((3, 5)),), {"k": 2}, _expect_topk(2)),
        Example((Sample((4, 3)),), {"k": 3, "axis": 0, "largest": False}, _expect_topk(3, 0, False)),
        Example((Sample((2, 4, 3)),), {"k": 2, "axis": 1}, _expect_topk(2, 1)),
        Example((Sample((2, 3)),), {"k": 3, "largest": False}, _expect_topk(3, -1, False)),
        # ties: equal values by the smaller index
        Example((_i32([[3, 1, 3, 2], [5, 5, 5, 0], [0, 2, 0, 2]]),), {"k": 3, "axis": 1}, _expect_topk(3, 1)),
        Example(
            (_i32([[3, 1, 3, 2], [5, 5, 5, 0], [0, 2, 0, 2]]),),
            {"k": 2, "axis": 0, "largest": False},
            _expect_topk(2, 0, False),
        ),
        # the other types (the kernel is instantiated per type): NaN and infinities with every
        # element kept; NaN among ties; k the whole axis; k = 1 of a long axis; many of a longer one
        Example(
            (np.array([[1, np.nan, -np.inf, 2, np.nan, 1, np.inf]], np.float64),),
            {"k": 7, "largest": False},
            _expect_topk(7, -1, False),
            grad=False,
        ),
        Example(
            (np.array([[3, np.nan, 1, 3, np.inf, 1, 2], [0, 0, -1, np.nan, np.nan, 2, 0]], np.float16),),
            {"k": 5},
            _expect_topk(5),
            grad=False,
        ),
        Example((Sample((6, 4), "int8", 0, 4),), {"k": 6, "axis": 0}, _expect_topk(6, 0)),
        Example((Sample((3, 100), "uint8", 0, 255),), {"k": 1}, _expect_topk(1)),
        Example(
            (Sample((2, 257), "int64", 0, 29),), {"k": 40, "largest": False}, _expect_topk(40, -1, False)
        ),
    ),
)


def topk(x, k, axis=-1, largest=True, sorted=True, name=None):  # noqa: A002 - ONNX's name
    """``(values, indices)`` of the ``k`` largest (or smallest) entries along ``axis``."""
    return apply("topk", [operand(x)], name, k=k, axis=axis, largest=largest, sorted=sorted)


# ----------------------------------------------------------------------------- check_index
def _check_index_infer(types, attrs):
    (x,) = types
    check_dtype(x, ("int32", "int64"), "check_index: x")
    if attrs["depth"] < 1:
        raise ShapeError(f"check_index: depth must be at least 1, got {attrs['depth']}")
    return (x,)


def _check_index_values(x: np.ndarray, depth: int) -> None:
    bad = (x < 0) | (x >= depth)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ExecutionError(f"index {int(x[at])} at {list(at)} is outside [0, {depth})")


def _check_index_ref(xs, attrs):
    _check_index_values(xs[0], attrs["depth"])
    return xs[0].copy()


defop(
    "check_index",
    ("x",),
    _check_index_infer,
    _check_index_ref,
    NOT_DIFFERENTIABLE,
    attrs={"depth": Attr("int")},
    check_constants=lambda types, attrs, consts: 0 in consts and _check_index_values(consts[0], **attrs),
    kind=KERNEL,
    doc="x itself when every element lies in [0, depth) (class labels, positions); otherwise an "
    "error (ExecutionError; FC_ERR_INDEX from C) instead of a silent wrong result",
    examples=(
        Example((_i64([[0, 2], [1, 2]]),), {"depth": 3}, lambda x: x),
        Example((_i32([4, 0, 3]),), {"depth": 5}, lambda x: x),
    ),
)


def check_index(x, depth: int, name=None):
    """``x`` (int32 or int64) unchanged when every element lies in ``[0, depth)``; a value
    outside is an error when the graph runs (the interpreter's ExecutionError, the C run's
    FC_ERR_INDEX) or when it is compiled (a constant ``x``). Guards class labels, whose
    comparisons would otherwise drop an out-of-range label without a word."""
    return apply("check_index", [operand(x)], name, depth=int(depth))


# ----------------------------------------------------------------------------- one_hot
def one_hot(indices, depth: int, axis: int = -1, on_value=1.0, off_value=0.0, dtype="float32", name=None):
    """``on_value`` where the (wrapped) index equals the position along the new ``axis`` of
    size ``depth``, else ``off_value`` (ONNX OneHot): a composition of ``equal`` and ``where``.

    Negative indices in ``[-depth, 0)`` count from the end; others out of range give a row of
    ``off_value``. ``on_value``/``off_value`` may be scalars (of ``dtype``) or scalar Tensors.
    """
    indices = operand(indices)
    if indices.dtype == "bool":
        raise ShapeError(f"one_hot: indices '{indices.name}' are bool, expected a number type")
    axis = norm_axis(axis, indices.rank + 1)
    ndt = dtypes.np_dtype(indices.dtype)
    wrapped = where(less(indices, 0), add(indices, constant(np.asarray(depth, ndt))), indices)
    positions = np.arange(depth).astype(ndt).reshape((depth,) + (1,) * (indices.rank - axis))
    hit = equal(unsqueeze(wrapped, axis), constant(positions))
    on, off = (
        v if isinstance(v, Tensor) else constant(np.asarray(v, dtypes.np_dtype(dtype)))
        for v in (on_value, off_value)
    )
    return where(hit, on, off, name=name)


# the builders that graphdef exports (``gd.gather_elements`` ...)
__all__ = [
    "check_index",
    "gather_elements",
    "gather_nd",
    "one_hot",
    "scatter_elements",
    "scatter_nd",
    "topk",
]
