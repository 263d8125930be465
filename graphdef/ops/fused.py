"""fused: several elementwise ops evaluated together, element by element, in one loop.

Only compilation passes create it (codegen.passes.fuse_elementwise). Its ``program`` is a
tuple of instructions ``(op, operands, attrs)``; operand ``i`` names input ``i`` when
``i < len(inputs)``, else the result of instruction ``i - len(inputs)``. The last
instruction gives the output. Each instruction is an ordinary registered elementwise op
(or ``fill`` with shape () for an inline scalar), so shape rules and references are reused.
"""

from __future__ import annotations

import math

from ..ir import Attrs
from ..registry import ELEMENTWISE, Attr, Example, NotDifferentiable, Sample, defop, get_op
from .elementwise import per_element


def run_program(program, values, facet: str):
    """The result ("ref": arrays) or type ("infer": TensorTypes) of an elementwise program
    applied to ``values`` (its inputs)."""
    values = list(values)
    for op, operands, attrs in program:
        opdef = get_op(op)
        args = [values[i] for i in operands]
        a = Attrs(attrs)
        values.append(opdef.infer_types(args, a)[0] if facet == "infer" else opdef.ref(args, a))
    return values[-1]


def program_of(node):
    """The instructions of an elementwise node: its program if fused, else itself alone."""
    if node.op == "fused":
        return node.attrs["program"]
    return ((node.op, tuple(range(len(node.inputs))), tuple(node.attrs.items())),)


_TWO = ("fill", (), (("dtype", "float32"), ("shape", ()), ("value", 2.0)))


defop(
    "fused",
    ("xs*",),
    lambda ts, a: run_program(a["program"], ts, "infer"),
    lambda xs, a: run_program(a["program"], xs, "ref"),
    NotDifferentiable(
        "fused nodes exist only inside the compiler; differentiate before compiling", error=True
    ),
    kind=ELEMENTWISE,
    attrs={"program": Attr("any")},
    flops=lambda ins, outs, a: outs[0].size * len(a["program"]),
    doc="elementwise ops fused into one loop; see the module docstring",
    examples=(
        # exp(in0 * in1)
        Example(
            (Sample((2, 3), "float32", -1.5, 1.5), Sample((2, 3), "float32", -1.5, 1.5)),
            {"program": (("mul", (0, 1), ()), ("exp", (2,), ()))},
            per_element(lambda a, b: math.exp(a * b)),
            grad=False,
        ),
        # in0 * 2 + in1, with the 2 an inline scalar, in1 broadcast over the rows
        Example(
            (Sample((2, 3)), Sample((3,))),
            {"program": (_TWO, ("mul", (0, 2), ()), ("add", (3, 1), ()))},
            per_element(lambda a, b: a * 2.0 + b),
            grad=False,
        ),
        # a bool intermediate: max(in0, in1) as where(in0 > in1, in0, in1), then relu
        Example(
            (Sample((4, 1)), Sample((1, 3))),
            {"program": (("greater", (0, 1), ()), ("where", (2, 0, 1), ()), ("relu", (3,), ()))},
            per_element(lambda a, b: max(a, b, 0.0)),
            grad=False,
        ),
        # float64 and int32 programs
        Example(
            (Sample((5,), "float64"),),
            {"program": (("tanh", (0,), ()), ("neg", (1,), ()))},
            per_element(lambda a: -math.tanh(a)),
            grad=False,
        ),
        Example(
            (Sample((2, 3), "int32", -9, 9), Sample((2, 3), "int32", -9, 9)),
            {"program": (("sub", (0, 1), ()), ("abs", (2,), ()), ("mul", (3, 0), ()))},
            per_element(lambda a, b: abs(a - b) * a),
            grad=False,
        ),
    ),
)
