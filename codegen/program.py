"""The memory-plan stage: the storage's arena buffers placed at offsets, giving the Program
every backend renders (ordered steps, where each value lives, buffer offsets, constants).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graphdef.ir import Graph, Node, TensorType, ValueRef

from . import memory
from .storage import ALIGN, Loc, Storage


@dataclass
class Program:
    graph: Graph
    order: list[Node]  # every node, in schedule order
    steps: list[Node]  # the nodes that become code, in order
    inplace: set[str]  # steps that write over one of their inputs
    loc: dict[ValueRef, Loc]  # arena values with their offsets
    inputs: list[tuple[str, ValueRef, TensorType]]  # (name, ref, type) per graph input
    outputs: list[tuple[str, ValueRef, TensorType]]  # (name, ref, type) per graph output
    constants: list[str]  # constant node names, in Loc index order
    variables: list[str]  # state variable node names, in Loc index order
    state_offsets: list[int]
    state_bytes: int
    buffers: list[memory.BufferReq]
    plan: memory.Plan
    lower_bound: int
    output_copies: list[tuple[int, ValueRef]] = field(default_factory=list)  # (output index, value)
    state_updates: list[tuple[str, ValueRef]] = field(default_factory=list)  # (variable, new value)
    scratch: dict[str, int] = field(default_factory=dict)  # step -> arena offset of its scratch memory

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes

    @property
    def weight_bytes(self) -> int:
        return sum(self.graph.node(c).outputs[0].nbytes for c in self.constants)

    def describe(self) -> str:
        p = self.plan
        head = (
            f"memory plan: {len(self.buffers)} buffers, arena {p.arena_bytes} B, lower bound "
            f"{self.lower_bound} B, algorithm {p.algorithm}; outputs and inputs live outside the arena"
        )
        return head + ("\n" + memory.draw_text(self.buffers, p) if self.buffers else "")


def place(storage: Storage, algorithm: str = "best", time_limit: float = 5.0) -> Program:
    """Plan the arena (``memory.plan`` with the named algorithm) and give every arena value
    and scratch buffer its offset."""
    plan = memory.plan(storage.buffers, algorithm=algorithm, alignment=ALIGN, time_limit=time_limit)
    loc = {
        v: Loc("arena", p.index, plan.offsets[p.index]) if p.kind == "arena" else p
        for v, p in storage.loc.items()
    }
    return Program(
        storage.graph,
        storage.order,
        storage.steps,
        storage.inplace,
        loc,
        storage.inputs,
        storage.outputs,
        storage.constants,
        storage.variables,
        storage.state_offsets,
        storage.state_bytes,
        storage.buffers,
        plan,
        memory.lower_bound(storage.buffers, alignment=ALIGN),
        storage.output_copies,
        storage.state_updates,
        {name: plan.offsets[b] for name, b in storage.scratch_buffer.items()},
    )
