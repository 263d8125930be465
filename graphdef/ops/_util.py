"""Shape and dtype helpers shared by the op records."""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import ShapeError
from ..ir import TensorType


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """numpy broadcasting of static shapes, or a ShapeError naming them."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"cannot broadcast shapes {' and '.join(map(str, shapes))}") from None


def broadcasts_to(shape, target) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without changing it (one direction)."""
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(shape[::-1], target[::-1]))


def check_dtype(t: TensorType, allowed, what: str = "input") -> str:
    if t.dtype not in allowed:
        raise ShapeError(f"{what} has dtype {t.dtype}; expected one of {', '.join(allowed)}")
    return t.dtype


def same_dtype(types, allowed=dtypes.ALL) -> str:
    kinds = {t.dtype for t in types}
    if len(kinds) > 1:
        raise ShapeError(f"dtypes differ: {', '.join(t.dtype for t in types)}")
    return check_dtype(types[0], allowed)


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def norm_axes(axes, rank: int, what: str = "axes") -> tuple[int, ...]:
    out = tuple(norm_axis(a, rank, what) for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"{what} {tuple(axes)} repeat an axis")
    return out


def resolve_axis(types, attrs) -> dict:
    """The ``resolve`` hook of ops with one ``axis`` attribute: make it non-negative."""
    return {**attrs, "axis": norm_axis(attrs["axis"], types[0].rank)}


def spatial(attrs, key: str, n: int, fill: int) -> tuple[int, ...]:
    """An n-tuple attribute, ``fill`` repeated when absent."""
    v = attrs.get(key)
    if v is None:
        return (fill,) * n
    if len(v) != n:
        raise ShapeError(f"{key} {v} must have {n} values")
    return tuple(v)


def ints(v) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


def widen_half(x: np.ndarray) -> np.ndarray:
    """Compute float16 in float32, as the C kernels do."""
    return x.astype(np.float32) if x.dtype == np.float16 else x
