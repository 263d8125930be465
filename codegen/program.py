"""The memory-plan stage: the storage's arena buffers placed at offsets, giving the Program
every backend renders (ordered steps, where each value lives, buffer offsets, constants).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from . import memory, schedule
from .storage import ALIGN, Loc, Storage


@dataclass
class Program(Storage):
    """A Storage whose arena values carry their offsets (``loc``), with the ``plan``, its
    lower bound, and the arena offset of each step's scratch memory."""

    plan: memory.Plan | None = None
    lower_bound: int = 0
    scratch: dict[str, int] = field(default_factory=dict)  # step -> arena offset of its scratch memory
    types: dict = field(
        default_factory=dict
    )  # ValueRef -> TensorType of every value (the renders read these)
    flops: list[int] = field(default_factory=list)  # each step's floating-point operations (schedule.cost)

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes

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
    parts = {f.name: getattr(storage, f.name) for f in dataclasses.fields(Storage)}
    return Program(
        **{**parts, "loc": loc},
        plan=plan,
        lower_bound=memory.lower_bound(storage.buffers, alignment=ALIGN),
        scratch={name: plan.offsets[b] for name, b in storage.scratch_buffer.items()},
        types={n.ref(i): t for n in storage.order for i, t in enumerate(n.outputs)},
        flops=[schedule.cost(storage.graph, n).flops for n in storage.steps],
    )
