"""Plain-data geometry for the C kernels: strides, merged loops, copy plans.

Nothing here emits C; these functions turn shapes and attributes into the sizes, strides
and tables that the templates in templates/c/ops/ pass to runtime_c kernels.
"""

from __future__ import annotations

import math

import numpy as np

from graphdef import dtypes

MAX_RANK = 8


def strides(shape) -> list[int]:
    """Row-major element strides of a contiguous tensor."""
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a contiguous ``shape`` read as ``out_shape`` (0 on broadcast axes)."""
    st = strides(shape)
    lead = len(out_shape) - len(shape)
    return [0] * lead + [0 if d == 1 and o != 1 else s for d, o, s in zip(shape, out_shape[lead:], st)]


def merge_dims(dims, *stride_lists):
    """Drop size-1 axes and merge neighbours that stay contiguous in every stride list.

    >>> merge_dims([2, 3, 4], [12, 4, 1], [12, 4, 1])
    ([24], [[1], [1]])
    """
    keep = [i for i, d in enumerate(dims) if d != 1]
    out_dims: list[int] = []
    out_strides: list[list[int]] = [[] for _ in stride_lists]
    for i in keep:
        if out_dims and all(s[-1] == st[i] * dims[i] for s, st in zip(out_strides, stride_lists)):
            out_dims[-1] *= dims[i]
            for s, st in zip(out_strides, stride_lists):
                s[-1] = st[i]
        else:
            out_dims.append(dims[i])
            for s, st in zip(out_strides, stride_lists):
                s.append(st[i])
    return out_dims, out_strides


def copy_plan(dims, y_strides, x_strides, y_offset=0, x_offset=0, itemsize=4) -> dict:
    """Context of one fc_copy_nd call (dims merged, rank <= MAX_RANK)."""
    d, (ys, xs) = merge_dims(list(dims), list(y_strides), list(x_strides))
    if len(d) > MAX_RANK:
        raise ValueError(f"copy of rank {len(d)} exceeds {MAX_RANK} after merging")
    return {
        "dims": d or [1],
        "y_strides": ys or [1],
        "x_strides": xs or [1],
        "rank": max(len(d), 1),
        "y_offset": y_offset,
        "x_offset": x_offset,
        "itemsize": itemsize,
        "count": math.prod(dims),
    }


def three(values, fill) -> list[int]:
    """Spatial values padded at the front to three axes."""
    values = list(values)
    return [fill] * (3 - len(values)) + values


def around(shape, axes) -> tuple[int, int, int]:
    """(outer, len, inner) sizes of a tensor viewed around a contiguous run of axes."""
    axes = sorted(axes)
    return (
        math.prod(shape[: axes[0]]) if axes else math.prod(shape),
        math.prod(shape[a] for a in axes) if axes else 1,
        math.prod(shape[axes[-1] + 1 :]) if axes else 1,
    )


def stored(lit, value, dtype: str) -> str:
    """A C literal of the value as stored in memory (float16: its bits)."""
    if dtype == "float16":
        return f"0x{int(np.float16(value).view(np.uint16)):04x}"
    return lit(value, dtype)


def itemsize(dtype: str) -> int:
    return dtypes.itemsize(dtype)
