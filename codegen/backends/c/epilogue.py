"""The per-element code of a product's epilogue (templates/c/ops/epilogue.c.j2): what the GEMM,
direct-convolution, depthwise and pwdw steps apply to each output tile while it is in L1."""

from __future__ import annotations

from .ops.elementwise import program_locals
from .sgemm import plan_of


def epilogue_context(node, ins, first: int | None = None) -> dict | None:
    """The per-element code of a product's epilogue: the product's value is ``cr[j]`` in a tile
    row, epilogue input q is read through pointer ``e<q>`` (templates/c/ops/epilogue.c.j2);
    ``first``: the node's first epilogue input (default: after the operands and the plan's bias)."""
    if not node.attrs["epilogue"]:
        return None
    if first is None:
        first = 3 if plan_of(node.attrs).bias else 2
    return program_context(node.attrs["epilogue"], list(ins[first:]), node.outputs[0], first)


def program_context(epilogue, extra_types, out, first: int = 0) -> dict:
    """``epilogue_context`` of an epilogue ``(program, slot, layouts)`` whose extra inputs have
    ``extra_types`` (starting at the node's input ``first``), on a product of type ``out``."""
    program, slot, layouts = epilogue
    extras = []
    for q, (rs, cs, strides) in enumerate(layouts):
        load = f"e{q}[j]" if cs == 1 else f"e{q}[j * {cs}]" if cs else f"e{q}[0]"
        extras.append({"i": q, "rs": rs, "cs": cs, "strides": strides, "load": load})
    loads = [e["load"] for e in extras]
    loads.insert(slot, "cr[j]")
    types = list(extra_types)
    types.insert(slot, out)
    values = [{"ctype": "float", "name": f"a{j}", "expr": load} for j, load in enumerate(loads)]
    program_locals(program, types, values)
    return {
        "extras": extras,
        "locals": values,
        "may_fail": any("&err" in v["expr"] for v in values),
        "store": values[-1]["name"],
        "first": first,
        "unused": [] if extras else ["arg", "i0", "j0"],
    }
