"""Work splits: how a step's work divides over a build's threads (``Split``, ``parts_for``,
``part_bounds``) and the cost model's work estimates (``work``, ``PART_WORK``,
``TRANSCENDENTAL``). Which ops split, and how, is each backend's kernel table's (C:
op_table.split_of); the arithmetic of parts is the same for every backend."""

from __future__ import annotations

from dataclasses import dataclass

from graphdef.ir import Node, TensorType

PARALLEL_FLOPS = 200_000
"""A product is split over the model's threads from this many floating-point operations on
(handing work to the pool costs about a microsecond)."""


@dataclass(frozen=True)
class Split:
    """A step's work as ``units`` independent pieces along its outer range (elements, rows,
    planes), each computed the same way whatever part takes it, so a split step's results are
    bitwise those of one thread. ``grain``: part bounds fall on multiples of this many units
    (elementwise loops: 16 elements, a 64-byte line of float32, so that the parts' vector loops
    start where one thread's do); ``work``: the cost model's estimate of the whole step, bytes
    read and written plus arithmetic operations (see ``PART_WORK``)."""

    units: int
    work: int
    grain: int = 1


PART_WORK = 196_608
"""The least work (``Split.work``) worth a part of its own: a step is split over n threads
only when each of its n parts gets at least this much, so a split step does at least 384 Ki.

Measured on the 2-core Xeon this was tuned on (gcc 12, -O3 -march=native, AVX-512):
- handing a step to the pool and waiting for it (fc_pool_run of a task whose two parts must
  meet, workers spinning) costs 1.2 us (median; tenth percentile 0.9 us);
- with the work estimates below, one thread does about 150 units a nanosecond (adds, dwconv
  3x3, layer norm, softmax; a step whose estimate is low for its time splits later, never
  earlier);
- steps timed alone at 1 and 2 threads (standalone builds, best of 40 interleaved runs, split
  forced): 1.2 us steps gain nothing (an add of 16 Ki floats: 0.95x), 2.2 to 2.5 us steps gain
  1.4x (layer norm of 16 x 768, an add of 32 Ki floats), 4 to 5 us ones 1.3x to 1.6x (tanh of
  4 Ki floats, softmax of 128 x 64, layer norm of 32 x 768), 9 us and more 1.5x to 1.9x.
So a split step starts at about 2.6 us, twice the time where splitting stops paying. When the
other core is busy the calling thread runs every part itself: then a split step costs 1% to
6% more than a whole one (medians of the same runs)."""


TRANSCENDENTAL = 64
"""Work of one exp, log, tanh, erf, trigonometric or similar value: about 0.5 to 1 ns each on
one core, 64 to 150 units (adds and multiplies: 1; measured over 64 Ki floats)."""


_TRANSCENDENTAL_OPS = frozenset(
    "exp log tanh sigmoid softplus elu gelu erf pow sin cos tan asin acos atan sinh cosh asinh "
    "acosh atanh".split()
)


def work(ins: list[TensorType], outs: list[TensorType], ops: int) -> int:
    """The cost model's work of a step: its bytes read and written plus ``ops`` operations."""
    return sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs) + int(ops)


def element_ops(node: Node) -> int:
    """Operations of one element of an elementwise step (a fused program: of each instruction)."""
    ops = [op for op, _, _ in node.attrs["program"]] if node.op == "fused" else [node.op]
    return sum(TRANSCENDENTAL if op in _TRANSCENDENTAL_OPS else 1 for op in ops)


def parts_for(split: Split | None, threads: int) -> int:
    """Parts of a step: as many as threads, as long as each gets ``PART_WORK`` and a grain."""
    if split is None or threads <= 1:
        return 1
    blocks = -(-split.units // split.grain)
    parts = min(threads, blocks, split.work // PART_WORK)
    return parts if parts > 1 else 1


def part_bounds(split: Split, parts: int) -> list[int]:
    """The parts' bounds: part k computes units [bounds[k], bounds[k + 1]), whole grains
    (the last one may be short), as even as grains allow."""
    blocks = -(-split.units // split.grain)
    return [min(split.units, blocks * k // parts * split.grain) for k in range(parts + 1)]
