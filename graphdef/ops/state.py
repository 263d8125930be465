"""Source ops (placeholder, constant, variable, fill) and the stateful assign ops.

Sources have no inputs; their type comes from their attributes. Constant and variable
arrays live in the graph (``graph.constants`` / ``graph.variables``), not in attributes.

Variable semantics in one run: every read sees the value the variable had when the run
started; an assign op computes the new value from that and stores it when it runs, so the
next run sees it. When several assigns to one variable run, the last in schedule order wins.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..builder import Tensor, apply, operand
from ..errors import FeedError, GraphError, ShapeError
from ..ir import TensorType
from ..registry import ELEMENTWISE, KERNEL, NOT_DIFFERENTIABLE, SOURCE, Attr, Example, Sample, Var, defop
from ._util import check_dtype

_TYPE_ATTRS = {"shape": Attr("ints"), "dtype": Attr("dtype", "float32")}


def _typed(types, attrs):
    return TensorType(attrs["shape"], attrs["dtype"])


def _fed(name):
    def ref(xs, attrs):
        raise FeedError(f"{name} node must be fed or read from the graph, not computed")

    return ref


defop(
    "placeholder",
    (),
    _typed,
    _fed("placeholder"),
    NOT_DIFFERENTIABLE,
    attrs=_TYPE_ATTRS,
    kind=SOURCE,
    doc="an input fed at run time",
)
defop(
    "constant",
    (),
    _typed,
    _fed("constant"),
    NOT_DIFFERENTIABLE,
    attrs=_TYPE_ATTRS,
    kind=SOURCE,
    doc="a constant array stored in graph.constants",
)
defop(
    "variable",
    (),
    _typed,
    _fed("variable"),
    NOT_DIFFERENTIABLE,
    attrs={**_TYPE_ATTRS, "trainable": Attr("bool", True)},
    kind=SOURCE,
    doc="a stateful array; initial value in graph.variables",
)


def _fill_ref(xs, attrs):
    return np.full(attrs["shape"], attrs["value"], dtype=dtypes.np_dtype(attrs["dtype"]))


defop(
    "fill",
    (),
    _typed,
    _fill_ref,
    NOT_DIFFERENTIABLE,
    attrs={**_TYPE_ATTRS, "value": Attr("float", 0.0)},
    kind=KERNEL,
    doc="a tensor of one repeated value",
    examples=(
        Example((), {"shape": (2, 3), "value": 1.5}, lambda: 1.5 * np.ones((2, 3))),
        Example((), {"shape": (4,), "value": -4, "dtype": "int32"}, lambda: [-4, -4, -4, -4]),
        Example((), {"shape": (), "value": 1, "dtype": "bool"}, lambda: True),
    ),
)


def _assign_infer(types, attrs, allowed=dtypes.ALL):
    var, value = types
    check_dtype(var, allowed, "variable")
    if var.dtype != value.dtype:
        raise ShapeError(f"value dtype {value.dtype} differs from variable dtype {var.dtype}")
    if var.shape != value.shape:
        raise ShapeError(f"value shape {value.shape} differs from variable shape {var.shape}")
    return var


def _checked(fn):
    def ref(xs, attrs):
        with np.errstate(all="ignore"):
            return fn(*xs).astype(xs[0].dtype, copy=False)

    return ref


_F32 = np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -2.5]], np.float32)
_EXAMPLES = {
    "assign": (
        Example((Var(_F32), Sample((2, 3))), {}, lambda v, x: x),
        Example((Var(np.array([1, -2, 3], np.int64)), Sample((3,), "int64", -9, 9)), {}, lambda v, x: x),
        Example((Var(np.array([True, False])), Sample((2,), "bool")), {}, lambda v, x: x),
    ),
    "assign_add": (
        Example((Var(_F32), Sample((2, 3))), {}, lambda v, x: v + x),
        Example(
            (Var(np.array([5, -7, 0, 100], np.int32)), Sample((4,), "int32", -9, 9)), {}, lambda v, x: v + x
        ),
    ),
    "assign_sub": (
        Example((Var(_F32), Sample((2, 3))), {}, lambda v, x: v - x),
        Example(
            (Var(np.array([1, 200, 3], np.uint8)), np.array([5, 100, 255], np.uint8)),
            {},
            lambda v, x: (v.astype(np.int64) - x) % 256,  # wraps around
        ),
    ),
}

for _name, _fn, _allowed, _doc in (
    ("assign", lambda v, x: x.copy(), dtypes.ALL, "variable := value"),
    ("assign_add", np.add, dtypes.NUMERIC, "variable := variable + value"),
    ("assign_sub", np.subtract, dtypes.NUMERIC, "variable := variable - value"),
):
    defop(
        _name,
        ("variable", "value"),
        lambda ts, a, allowed=_allowed: _assign_infer(ts, a, allowed),
        _checked(_fn),
        NOT_DIFFERENTIABLE,
        stateful=True,
        kind=ELEMENTWISE,
        doc=_doc + "; the output is the new value (stored when the run ends)",
        examples=_EXAMPLES[_name],
    )


def _assign(op, var, value, name):
    if not isinstance(var, Tensor) or var.op != "variable":
        raise GraphError(f"{op} needs a variable as its first input, got {var!r}")
    return apply(op, [var, operand(value, like=var)], name)


def assign(var, value, name=None):
    """Store ``value`` into ``var`` when this node runs; returns the new value."""
    return _assign("assign", var, value, name)


def assign_add(var, value, name=None):
    return _assign("assign_add", var, value, name)


def assign_sub(var, value, name=None):
    return _assign("assign_sub", var, value, name)


__all__ = ["assign", "assign_add", "assign_sub"]
