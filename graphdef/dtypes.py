"""Element types: canonical names, numpy mapping, and the classes ops check against."""

from __future__ import annotations

import numpy as np

from .errors import ShapeError

FLOATS = ("float16", "float32", "float64")
SIGNED_INTS = ("int8", "int16", "int32", "int64")
UNSIGNED_INTS = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED_INTS + UNSIGNED_INTS
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ("bool",)
INDEX = ("int32", "int64")

_NP = {name: np.dtype(name) for name in ALL}


def as_dtype(x) -> str:
    """Canonical dtype name for a name, numpy dtype or scalar type.

    >>> as_dtype(np.float32), as_dtype("int64"), as_dtype(bool)
    ('float32', 'int64', 'bool')
    """
    try:
        name = np.dtype(x).name
    except TypeError:
        raise ShapeError(f"unknown dtype {x!r}; flowc supports {', '.join(ALL)}") from None
    if name not in _NP:
        raise ShapeError(f"unsupported dtype {name}; flowc supports {', '.join(ALL)}")
    return name


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype for a canonical name."""
    return _NP[name]


def itemsize(name: str) -> int:
    return _NP[name].itemsize


def is_float(name: str) -> bool:
    return name in FLOATS


def is_int(name: str) -> bool:
    return name in INTS
