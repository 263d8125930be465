"""Sizes against the target: what the generated C can address, checked before anything is
computed or allocated.

``check_graph`` (the pipeline's "limits" stage, right after the outputs are declared) refuses
a graph with a tensor whose bytes exceed the target's ``Arch.max_bytes``: 2^31 - 1 on 32-bit
targets (armv7, Cortex-M: the C code's ``long`` and ``size_t`` are 32 bits), 2^47 on 64-bit
ones. ``check_program`` (after the memory plan) does the same for the arena, the state and
the weights, whose offsets the C code holds. Each refusal is one FlowcError naming the tensor
(or block), its bytes and the limit.

>>> import graphdef as gd
>>> from codegen.target import Target
>>> with gd.Graph("g") as g:
...     _ = gd.relu(gd.placeholder("x", (65536, 65536)), name="y")
>>> check_graph(g, Target("armv7-linux"))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
graphdef.errors.FlowcError: tensor 'x' (float32[65536,65536]) needs 17179869184 bytes; armv7-linux ...
"""

from __future__ import annotations

from graphdef.errors import FlowcError
from graphdef.ir import Graph

from .target import Target


def _refuse(what: str, nbytes: int, target: Target) -> FlowcError:
    return FlowcError(f"{what} needs {nbytes} bytes; {target.arch} addresses at most {target.spec.max_bytes}")


def check_graph(graph: Graph, target: Target) -> Graph:
    """Every value of ``graph`` fits the target (see the module docstring); returns the graph."""
    limit = target.spec.max_bytes
    for node in graph.nodes:
        for i, t in enumerate(node.outputs):
            if t.nbytes > limit:
                name = node.name if len(node.outputs) == 1 else f"{node.name}:{i}"
                raise _refuse(f"tensor '{name}' ({t})", t.nbytes, target)
    return graph


def check_program(program, target: Target):
    """The arena, the state and the weights of a planned program fit the target."""
    for what, nbytes in (
        ("the arena", program.arena_bytes),
        ("the state (variables)", program.state_bytes),
        ("the weights", program.weight_bytes + 64 * len(program.constants)),  # with alignment padding
    ):
        if nbytes > target.spec.max_bytes:
            raise _refuse(f"model: {what}", nbytes, target)
    return program


def check_rank_ram(program, rank: int, max_ram: int):
    """A rank's arena fits ``max_ram`` bytes (--max-ram of a multi-rank build); the refusal
    names the rank, both sizes and the value of the largest arena buffer."""
    if program.arena_bytes <= max_ram:
        return program
    sizes = {
        loc.index: program.graph.type_of(ref).nbytes
        for ref, loc in program.loc.items()
        if loc.kind == "arena"
    }
    biggest = max(sizes, key=sizes.get, default=None)
    holder = next(
        (ref for ref, loc in program.loc.items() if loc.kind == "arena" and loc.index == biggest), None
    )
    node = program.graph.node(holder.node) if holder is not None else None
    what = f"; its largest buffer holds node '{node.name}' (op {node.op}, {sizes[biggest]} B)" if node else ""
    raise FlowcError(
        f"rank {rank} needs an arena of {program.arena_bytes} B, more than --max-ram {max_ram} B{what}"
    )
