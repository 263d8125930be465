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
from .ops.bits import bitcast
from .ops.elementwise import (
    abs,
    add,
    cast,
    clip,
    div,
    elu,
    equal,
    erf,
    exp,
    gelu,
    greater,
    greater_equal,
    leaky_relu,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mul,
    neg,
    pow,
    relu,
    rsqrt,
    sigmoid,
    sign,
    sqrt,
    sub,
    tanh,
    where,
)
from .ops.index import gather_elements, gather_nd, one_hot, scatter_elements, scatter_nd, topk
from .ops.math import *  # noqa: F403  (sin, cos, ..., mod, bitwise ops, cumsum: see math.__all__)
from .ops.nn import (
    avg_pool,
    avg_pool2d,
    batch_norm,
    conv,
    conv2d,
    conv_transpose,
    conv_transpose2d,
    gemm,
    global_avg_pool,
    global_max_pool,
    layer_norm,
    log_softmax,
    matmul,
    max_pool,
    max_pool2d,
    resize,
    softmax,
)
from .ops.reduce import argmax, argmin, reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_sum
from .ops.shape import (
    concat,
    expand,
    flatten,
    gather,
    identity,
    pad,
    reshape,
    scatter_add,
    slice_,
    split,
    squeeze,
    stop_gradient,
    tile,
    transpose,
    unsqueeze,
)
from .ops.state import assign, assign_add, assign_sub
from .registry import all_ops, get_op
from .serialize import load, save
from .verify import verify

slice = slice_  # noqa: A001 - gd.slice mirrors the op name


def load_onnx(path, shapes: dict | None = None, name: str | None = None, values: dict | None = None) -> Graph:
    """Import an ONNX model (needs the ``onnx`` package); see ``graphdef.onnx.load_onnx``."""
    from .onnx import load_onnx as _load

    return _load(path, shapes, name, values)


def _bind_operators() -> None:
    from .ops.shape import getitem

    def binary(fn):
        return lambda a, b: fn(a, b), lambda a, b: fn(b, a)

    for names, fn in (
        (("__add__", "__radd__"), add),
        (("__sub__", "__rsub__"), sub),
        (("__mul__", "__rmul__"), mul),
        (("__truediv__", "__rtruediv__"), div),
        (("__pow__", "__rpow__"), pow),
        (("__matmul__", "__rmatmul__"), matmul),
        (("__and__", "__rand__"), logical_and),
        (("__or__", "__ror__"), logical_or),
        (("__xor__", "__rxor__"), logical_xor),
    ):
        fwd, rev = binary(fn)
        setattr(Tensor, names[0], fwd)
        setattr(Tensor, names[1], rev)
    Tensor.__lt__ = lambda a, b: less(a, b)
    Tensor.__le__ = lambda a, b: less_equal(a, b)
    Tensor.__gt__ = lambda a, b: greater(a, b)
    Tensor.__ge__ = lambda a, b: greater_equal(a, b)
    Tensor.__neg__ = lambda a: neg(a)
    Tensor.__abs__ = lambda a: abs(a)
    Tensor.__invert__ = lambda a: logical_not(a)
    Tensor.__getitem__ = getitem
    Tensor.T = property(lambda a: transpose(a))


_bind_operators()
