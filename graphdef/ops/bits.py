"""Bit reinterpretation: ``bitcast`` views the bytes of a tensor as another dtype.

Like numpy's ``x.view(dtype)`` (and ONNX BitCast, ``tf.bitcast``): no value is converted,
the bytes stay as they are. Between dtypes of one size the shape is unchanged; between
sizes the last axis is rescaled (``float32[2, 3]`` as ``uint8`` is ``uint8[2, 12]``, and
``uint8[2, 12]`` as ``float64`` needs a last axis divisible by 8 and gives ``float64[2, 1]``),
so rank-0 tensors change only between dtypes of one size. Bytes are read in the machine's
order; every flowc target (x86-64, AArch64, ARMv7, RISC-V, Cortex-M) is little endian, the
order ONNX specifies.

The op never produces ``bool`` (a byte other than 0 and 1 is no valid bool): the builder
``bitcast(x, "bool")`` is ``cast(bitcast(x, "uint8"), "bool")``, a nonzero byte is true.

>>> import numpy as np, graphdef as gd
>>> g = gd.Graph("m")
>>> with g:
...     x = gd.placeholder("x", (2,))
...     y = gd.bitcast(x, "int32")
>>> gd.run(g, {"x": np.array([1.0, -2.0], np.float32)}, [y])[0]
array([ 1065353216, -1073741824], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..builder import apply, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import KERNEL, Attr, Example, NotDifferentiable, Sample, defop

_TARGETS = tuple(d for d in dtypes.ALL if d != "bool")


def bitcast_shape(shape: tuple[int, ...], src: str, dst: str) -> tuple[int, ...]:
    """The shape of ``shape`` (of dtype ``src``) viewed as ``dst``, or a ShapeError."""
    a, b = dtypes.itemsize(src), dtypes.itemsize(dst)
    if a == b:
        return tuple(shape)
    if not shape:
        raise ShapeError(f"a scalar {src} cannot be viewed as {dst} ({a} vs {b} bytes)")
    if shape[-1] * a % b:
        raise ShapeError(
            f"last axis of {src}{list(shape)} ({shape[-1] * a} bytes) is not a multiple of {dst}'s {b} bytes"
        )
    return tuple(shape[:-1]) + (shape[-1] * a // b,)


def _infer(types, attrs):
    x, to = types[0], attrs["to"]
    return TensorType(bitcast_shape(x.shape, x.dtype, to), to)


def _ref(xs, attrs):
    x = xs[0]
    flat = np.ascontiguousarray(x).reshape(x.shape or (1,))  # .view needs a contiguous last axis
    return (
        flat.view(dtypes.np_dtype(attrs["to"]))
        .reshape(bitcast_shape(x.shape, x.dtype.name, attrs["to"]))
        .copy()
    )


def _bytes_as(x, dtype):
    """Expectation of the examples: the bytes of x, read back as dtype (little endian)."""
    out = np.frombuffer(x.astype(x.dtype.newbyteorder("<")).tobytes(), np.dtype(dtype).newbyteorder("<"))
    return out.reshape(x.shape[:-1] + (-1,)).astype(dtype)


defop(
    "bitcast",
    ("x",),
    _infer,
    _ref,
    NotDifferentiable("reinterpreting bits has no derivative"),
    attrs={"to": Attr("dtype", choices=_TARGETS)},
    kind=KERNEL,
    doc="the bytes of x viewed as dtype 'to' (numpy .view): same shape between equal sizes, "
    "else the last axis is rescaled; never bool",
    examples=(
        Example((Sample((2, 3)),), {"to": "int32"}, lambda x: _bytes_as(x, "int32")),
        Example((Sample((2, 2)),), {"to": "uint8"}, lambda x: _bytes_as(x, "uint8")),
        Example((Sample((3, 8), "uint8", 0, 255),), {"to": "float32"}, lambda x: _bytes_as(x, "float32")),
        Example((Sample((2, 4), "uint8", 0, 255),), {"to": "int16"}, lambda x: _bytes_as(x, "int16")),
    ),
)


def bitcast(x, dtype, name=None):
    """The bits of ``x`` as ``dtype`` (numpy ``x.view(dtype)``); see the module docstring.

    ``bitcast(x, "bool")`` views the bytes as uint8 and makes every nonzero byte true.
    """
    x = operand(x)
    to = dtypes.as_dtype(dtype)
    if to == "bool":
        from .elementwise import cast

        if x.dtype not in ("uint8", "bool"):
            x = apply("bitcast", [x], None, to="uint8")
        return cast(x, "bool", name=name)
    return apply("bitcast", [x], name, to=to)


# the builders that graphdef exports (``gd.bitcast`` ...)
__all__ = [
    "bitcast",
]
