"""C lowering of the element-wise and N-d gathers and scatters and of topk
(runtime_c/kernels/gather_nd.h, topk.h)."""

from __future__ import annotations

import math

from graphdef.ops.index import REDUCTIONS

from ....render import layout as L
from ....render.spelling import SUFFIX
from ..op_table import Call, kernel

HEADERS = ("kernels/gather_nd.h",)
RED_CODE = {name: i for i, name in enumerate(REDUCTIONS)}  # FC_RED_* of kernels/gather_nd.h


def _scatter_sfx(dtype: str) -> str:
    """Kernel suffix of the scatters: bool data uses the u8 kernels (same storage)."""
    return "u8" if dtype == "bool" else SUFFIX[dtype]


def _elements(data, indices, axis: int) -> dict:
    """Merged index dims with their data strides (0 on the indexed axis)."""
    ds = L.strides(data.shape)
    base = [0 if d == axis else ds[d] for d in range(data.rank)]
    dims, (strides,) = L.merge_dims(list(indices.shape), base)
    return {
        "rank": max(len(dims), 1),
        "dims": dims or [1],
        "strides": strides or [0],
        "n": indices.size,
        "axis_dim": data.shape[axis],
        "axis_stride": ds[axis],
    }


@kernel("check_index")
def _check_index(s):
    (x,) = s.ins
    k = {"n": x.size, "depth": s.attrs["depth"], "fn": f"fc_check_index_{x.sfx}"}
    return Call("check_index", k, ("kernels/gather_axis.h",))


@kernel("gather_elements")
def _gather_elements(s):
    data, indices = s.ins
    k = {**_elements(data, indices, s.attrs["axis"]), "itemsize": L.itemsize(data.dtype)}
    return Call("gather_elements", {**k, "fn": s.fn("fc_gather_elements", indices.dtype)}, HEADERS)


@kernel("scatter_elements")
def _scatter_elements(s):
    data, indices = s.ins[:2]
    return Call(
        "scatter_elements",
        {**_elements(data, indices, s.attrs["axis"]),
         "fn": f"fc_scatter_elements_{_scatter_sfx(data.dtype)}_{indices.sfx}",
         "op": RED_CODE[s.attrs["reduction"]], "nbytes": data.nbytes},
        HEADERS,
    )  # fmt: skip


@kernel("gather_nd")
def _gather_nd(s):
    data, indices = s.ins
    b = s.attrs["batch_dims"]
    k = indices.shape[-1]
    return Call(
        "gather_nd",
        {"fn": s.fn("fc_gather_nd", indices.dtype), "batches": math.prod(data.shape[:b]),
         "count": math.prod(indices.shape[b:-1]), "k": k, "dims": list(data.shape[b : b + k]),
         "strides": L.strides(data.shape)[b : b + k], "batch_stride": math.prod(data.shape[b:]),
         "slice": math.prod(data.shape[b + k :]), "itemsize": L.itemsize(data.dtype)},
        HEADERS,
    )  # fmt: skip


@kernel("scatter_nd")
def _scatter_nd(s):
    data, indices = s.ins[:2]
    k = indices.shape[-1]
    return Call(
        "scatter_nd",
        {"fn": f"fc_scatter_nd_{_scatter_sfx(data.dtype)}_{indices.sfx}",
         "count": math.prod(indices.shape[:-1]), "k": k, "dims": list(data.shape[:k]),
         "strides": L.strides(data.shape)[:k],
         "slice": math.prod(data.shape[k:]), "op": RED_CODE[s.attrs["reduction"]], "nbytes": data.nbytes},
        HEADERS,
    )  # fmt: skip


@kernel("topk")
def _topk(s):
    outer, dim, inner = L.around(s.ins[0].shape, [s.attrs["axis"]])
    return Call(
        "topk",
        {"fn": s.fn("fc_topk"), "outer": outer, "dim": dim, "inner": inner, "k": s.attrs["k"],
         "largest": int(s.attrs["largest"])},
        ("kernels/topk.h",),
    )  # fmt: skip
