"""One step's lowering: what the op table (op_table.py, ops/) makes of one node of a Program.

``lower_step`` gives the ``Step`` a lowering sees (types and C spellings of its tensors, the
names of its pointers, its function, the GEMM ISA, how many parts of the thread pool run it)
and the ``Call`` it makes (elementwise steps share one loop, ops/elementwise.py; the others
their kernel's lowering), with the step's work split and whether it takes step-local memory.
The C backend's emit renders it; the CUDA backend runs it for the steps it has no kernel for.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphdef.ir import Node, TensorType
from graphdef.registry import ELEMENTWISE, get_op

from ...render.spelling import TensorCtx
from ...render.splits import Split, part_bounds, parts_for
from .op_table import Call, Step, kernel_of, part_scratch, split_of
from .ops.elementwise import elementwise_step

# a kernel step of at least this many floating-point operations calls the drivers compiled apart
# with the tile kernels (fc_sgemm_apart, fc_cd_part_apart, fc_wino_*_apart: kernels/sgemm.h),
# where the build has them apart: their time beside the work is nothing, and inlined into every
# large step they were most of a model's compile time; a smaller step inlines them, its sizes
# constants there (a 16 -> 16 channel 3x3 convolution on 14x14, 0.9 MFLOP, ran 20% slower apart)
APART_FLOPS = 20_000_000


@dataclass
class Lowered:
    step: Step
    call: Call
    split: Split | None  # how its work divides over threads (None: it does not)
    scratch: bool  # it takes step-local memory (placed in the arena)
    part_scratch: int = 0  # split in parts: scratch bytes of one part (op_table.part_scratch)
    bounds: list[int] | None = None  # split in parts: their unit bounds (splits.part_bounds)
    apart: bool = False  # it calls the drivers compiled apart (APART_FLOPS)


def lower_step(
    node: Node,
    in_t: list[TensorType],
    func: str,
    isa: str = "scalar",
    threads: int = 1,
    parts: int | None = None,
) -> Lowered:
    """The step of ``node`` (input types ``in_t``) as the C function ``func``, on a build for
    GEMM kernel ``isa`` with ``threads`` threads; ``parts``, when given, overrides how many
    parts run it (more than 1: the lowering renders a range [lo, hi) of the step's units)."""
    elementwise = get_op(node.op).kind == ELEMENTWISE
    kernel = None if elementwise else kernel_of(node.op)
    split = split_of(node, in_t, elementwise)
    if parts is None:
        parts = parts_for(split, threads)
    step = Step(
        node=node,
        ins=[TensorCtx.of(t) for t in in_t],
        outs=[TensorCtx.of(t) for t in node.outputs],
        x=[f"x{j}" for j in range(len(in_t))],
        y=[f"y{j}" for j in range(len(node.outputs))],
        func=func,
        isa=isa,
        parts=parts,
    )
    call = elementwise_step(step) if kernel is None else kernel.lower(step)
    scratch = kernel is not None and kernel.scratch is not None
    flops = get_op(node.op).flops
    apart = kernel is not None and flops is not None and flops(in_t, node.outputs, node.attrs) >= APART_FLOPS
    if parts <= 1:
        return Lowered(step, call, split, scratch, apart=apart)
    per_part = part_scratch(node, step.ins, isa, parts) if scratch else 0
    return Lowered(step, call, split, scratch, per_part, part_bounds(split, parts), apart)
