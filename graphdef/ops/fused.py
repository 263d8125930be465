"""fused: several elementwise ops evaluated together, element by element, in one loop.

Only compilation passes create it (codegen.passes.fuse_elementwise). Its ``program`` is a
tuple of instructions ``(op, operands, attrs)``; operand ``i`` names input ``i`` when
``i < len(inputs)``, else the result of instruction ``i - len(inputs)``. The last
instruction gives the output. Each instruction is an ordinary registered elementwise op
(or ``fill`` with shape () for an inline scalar), so shape rules and references are reused.
"""

from __future__ import annotations

from ..ir import Attrs
from ..registry import ELEMENTWISE, Attr, NotDifferentiable, defop, get_op


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
)
