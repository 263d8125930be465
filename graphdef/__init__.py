"""graphdef: dataflow graphs in Python, their op registry, and the numpy interpreter.

>>> import numpy as np, graphdef as gd
>>> g = gd.Graph("mlp")
>>> with g:
...     x = gd.placeholder("x", (1, 4))
...     w = gd.variable("w", np.ones((4, 2), np.float32))
...     y = gd.softmax(gd.relu(gd.matmul(x, w) + 1.0), name="y")
>>> gd.run(g, {"x": np.zeros((1, 4), np.float32)}, ["y"])[0]
array([[0.5, 0.5]], dtype=float32)
"""

from __future__ import annotations

from . import ops as _ops  # registers every op
from . import train
from .autodiff import gradients
from .builder import (
    Graph,
    Tensor,
    apply,
    constant,
    control_dependencies,
    device,
    fill,
    get_default_graph,
    name_scope,
    ones,
    placeholder,
    variable,
    zeros,
)
from .dtypes import as_dtype
from .errors import (
    AttrError,
    ExecutionError,
    FeedError,
    FlowcError,
    GradientError,
    GraphError,
    SerializationError,
    ShapeError,
    ToolchainError,
    UnsupportedError,
)
from .interpret import Session, run, session
from .ir import Attrs, Node, TensorType, ValueRef
from .ops import elementwise as _elementwise
from .ops import nn as _nn
from .ops import shape as _shape
from .ops.bits import *  # noqa: F403  (see bits.__all__)
from .ops.control import *  # noqa: F403  (see control.__all__)
from .ops.elementwise import *  # noqa: F403  (see elementwise.__all__)
from .ops.index import *  # noqa: F403  (see index.__all__)
from .ops.math import *  # noqa: F403  (see math.__all__)
from .ops.nn import *  # noqa: F403  (see nn.__all__)
from .ops.reduce import *  # noqa: F403  (see reduce.__all__)
from .ops.resize import *  # noqa: F403  (see resize.__all__)
from .ops.shape import *  # noqa: F403  (see shape.__all__)
from .ops.state import *  # noqa: F403  (see state.__all__)
from .registry import all_ops, get_op
from .serialize import load, save
from .verify import verify

slice = _shape.slice_  # noqa: A001 - gd.slice mirrors the op name


def load_onnx(
    path,
    shapes: dict | None = None,
    name: str | None = None,
    values: dict | None = None,
    trainable=False,
    **limits,
) -> Graph:
    """Import an ONNX model (needs the ``onnx`` package); see ``graphdef.onnx.load_onnx`` (also
    for ``trainable``, the initializers as variables to fine-tune, and ``limits``: fold_limit,
    const_limit)."""
    from .onnx import load_onnx as _load

    return _load(path, shapes, name, values, trainable=trainable, **limits)


def load_tflite(path, name: str | None = None) -> Graph:
    """Import a .tflite model (needs the ``tflite`` package); see ``graphdef.tflite``."""
    from .tflite import load_tflite as _load

    return _load(path, name)


def _bind_operators() -> None:
    E, N, S = _elementwise, _nn, _shape

    def binary(fn):
        return lambda a, b: fn(a, b), lambda a, b: fn(b, a)

    for names, fn in (
        (("__add__", "__radd__"), E.add),
        (("__sub__", "__rsub__"), E.sub),
        (("__mul__", "__rmul__"), E.mul),
        (("__truediv__", "__rtruediv__"), E.div),
        (("__pow__", "__rpow__"), E.pow),
        (("__matmul__", "__rmatmul__"), N.matmul),
        (("__and__", "__rand__"), E.logical_and),
        (("__or__", "__ror__"), E.logical_or),
        (("__xor__", "__rxor__"), E.logical_xor),
    ):
        fwd, rev = binary(fn)
        setattr(Tensor, names[0], fwd)
        setattr(Tensor, names[1], rev)
    Tensor.__lt__ = lambda a, b: E.less(a, b)
    Tensor.__le__ = lambda a, b: E.less_equal(a, b)
    Tensor.__gt__ = lambda a, b: E.greater(a, b)
    Tensor.__ge__ = lambda a, b: E.greater_equal(a, b)
    Tensor.__neg__ = lambda a: E.neg(a)
    Tensor.__abs__ = lambda a: E.abs(a)
    Tensor.__invert__ = lambda a: E.logical_not(a)
    Tensor.__getitem__ = S.getitem
    Tensor.T = property(lambda a: S.transpose(a))


_bind_operators()
