"""The planner: the records, the checker, the cheap algorithms, ``search`` and ``plan``.

``BufferReq``, ``Plan`` and ``PlanError``; the input checks, ``lower_bound``, ``arena_bytes``
and ``check``; ``naive``, ``greedy_by_size`` and ``greedy_by_conflicts``; ``search``, which
checks its input and seed and runs the branch and bound of exact_search.py; and
``ALGORITHMS`` with ``plan``, which picks among them by name.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from graphdef.errors import FlowcError

from .exact_search import DEFAULT_NODE_BUDGET, _search


class PlanError(FlowcError):
    """A bad planner input (sizes, lifetimes, alignment) or a plan that breaks an invariant."""


@dataclass(frozen=True)
class BufferReq:
    """One buffer to place: ``size`` bytes, live from step ``first`` through step ``last``."""

    size: int
    first: int
    last: int


@dataclass(frozen=True)
class Plan:
    """Offsets in the order of the input buffers, the arena they need, and who made them."""

    offsets: tuple[int, ...]
    arena_bytes: int
    algorithm: str


# ----------------------------------------------------------------------------------------------
# Input, bounds and the checker


def _int(v) -> int | None:
    """``v`` as a Python int if it is an integer (numpy ones too, bools not), else None."""
    if isinstance(v, bool):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def _reqs(buffers: Iterable) -> tuple[BufferReq, ...]:
    """Accepts ``BufferReq`` records or ``(size, first, last)`` triples; validates them."""
    out = []
    for i, b in enumerate(buffers):
        if not isinstance(b, BufferReq):
            try:
                b = BufferReq(*b)
            except TypeError:
                raise PlanError(f"buffer {i}: expected BufferReq or (size, first, last), got {b!r}") from None
        fields = (_int(b.size), _int(b.first), _int(b.last))
        if None in fields:
            raise PlanError(f"buffer {i}: size, first and last must be ints, got {b}")
        b = BufferReq(*fields)
        if b.size < 0:
            raise PlanError(f"buffer {i}: negative size {b.size}")
        if b.first > b.last:
            raise PlanError(f"buffer {i}: first step {b.first} is after last step {b.last}")
        out.append(b)
    return tuple(out)


def _alignment(alignment) -> int:
    a = _int(alignment)
    if a is None or a < 1:
        raise PlanError(f"alignment must be a positive int, got {alignment!r}")
    return a


def _round_up(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def arena_bytes(buffers, offsets: Sequence[int], alignment: int = 1) -> int:
    """The arena ``offsets`` need: the largest offset + rounded size (0 for no buffers)."""
    reqs, a = _reqs(buffers), _alignment(alignment)
    return max((o + _round_up(b.size, a) for b, o in zip(reqs, offsets) if b.size), default=0)


def lower_bound(buffers, alignment: int = 1) -> int:
    """The largest sum of (rounded) sizes of buffers live at one step; no plan needs less.

    >>> lower_bound([(10, 0, 1), (20, 1, 2), (30, 3, 3)])
    30
    >>> lower_bound([(10, 0, 1), (20, 1, 2)], alignment=16)
    48
    """
    reqs, a = _reqs(buffers), _alignment(alignment)
    events = sorted(
        [(b.first, 1, _round_up(b.size, a)) for b in reqs]
        + [(b.last + 1, 0, -_round_up(b.size, a)) for b in reqs]
    )
    live = best = 0
    for _, _, delta in events:  # at equal times the ends (kind 0) come first
        live += delta
        best = max(best, live)
    return best


def check(buffers, plan: Plan, alignment: int = 1) -> None:
    """Raises ``PlanError`` unless ``plan`` is a valid placement of ``buffers``.

    Valid: one offset per buffer, each a non-negative multiple of ``alignment``; the arena
    holds every offset + size; no two buffers live at a common step share a byte (zero-size
    buffers share nothing). Pairs are found by a sweep over time, so the cost is the number of
    pairs of buffers live together, not n squared.

    >>> check([(8, 0, 1), (8, 1, 2)], Plan((0, 4), 12, "by hand"))  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    codegen.memory.planner.PlanError: buffers 0 and 1 overlap: bytes [0, 8) and [4, 12)
        while both live at step 1
    """
    reqs, a = _reqs(buffers), _alignment(alignment)
    offsets = tuple(plan.offsets)
    if len(offsets) != len(reqs):
        raise PlanError(f"plan has {len(offsets)} offsets for {len(reqs)} buffers")
    if None in map(_int, offsets):
        i = list(map(_int, offsets)).index(None)
        raise PlanError(f"buffer {i}: offset {offsets[i]!r} is not an int")
    offsets = tuple(map(_int, offsets))
    for i, (b, o) in enumerate(zip(reqs, offsets)):
        if o < 0:
            raise PlanError(f"buffer {i}: negative offset {o}")
        if o % a:
            raise PlanError(f"buffer {i}: offset {o} is not a multiple of the alignment {a}")
        if b.size and o + b.size > plan.arena_bytes:
            raise PlanError(
                f"buffer {i}: offset {o} + size {b.size} exceeds the arena of {plan.arena_bytes} bytes"
            )
    live: list[int] = []  # buffers that started, ordered by start
    for i in sorted((i for i, b in enumerate(reqs) if b.size), key=lambda i: (reqs[i].first, i)):
        b, o = reqs[i], offsets[i]
        live = [j for j in live if reqs[j].last >= b.first]
        for j in live:
            p = offsets[j]
            if o < p + reqs[j].size and p < o + b.size:
                lo, hi = sorted((i, j))
                bytes_lo = f"[{offsets[lo]}, {offsets[lo] + reqs[lo].size})"
                bytes_hi = f"[{offsets[hi]}, {offsets[hi] + reqs[hi].size})"
                raise PlanError(
                    f"buffers {lo} and {hi} overlap: bytes {bytes_lo} and {bytes_hi} "
                    f"while both live at step {b.first}"
                )
        live.append(i)


# ----------------------------------------------------------------------------------------------
# Cheap algorithms


def naive(buffers, alignment: int = 1) -> tuple[int, ...]:
    """No reuse: buffers are laid end to end in input order.

    Steps: offset of buffer i = sum of the rounded sizes before it.
    Limits: the arena is the sum of all sizes; a baseline and a fallback, nothing more.

    >>> naive([(10, 0, 0), (6, 1, 1)], alignment=8)
    (0, 16)
    """
    reqs, a = _reqs(buffers), _alignment(alignment)
    offsets, at = [], 0
    for b in reqs:
        offsets.append(at)
        at += _round_up(b.size, a)
    return tuple(offsets)


def _time_overlaps(reqs: Sequence[BufferReq]) -> list[list[int]]:
    """For each nonzero buffer, the nonzero buffers live at a common step: a sweep in order of
    first step, so the cost is the number of such pairs, not n squared."""
    nonzero = sorted((i for i, b in enumerate(reqs) if b.size), key=lambda i: (reqs[i].first, i))
    out: list[list[int]] = [[] for _ in reqs]
    for p, i in enumerate(nonzero):
        last = reqs[i].last
        for q in range(p + 1, len(nonzero)):
            j = nonzero[q]
            if reqs[j].first > last:
                break
            out[i].append(j)
            out[j].append(i)
    return out


def _first_fit(reqs: Sequence[BufferReq], a: int, order: Sequence[int]) -> tuple[int, ...]:
    """Places buffers in ``order``, each at the lowest multiple of ``a`` that is free.

    Free means: no byte shared with an already placed buffer whose lifetime meets this one
    (those come from ``_time_overlaps``).
    """
    offsets = [0] * len(reqs)
    placed = [False] * len(reqs)
    overlaps = _time_overlaps(reqs)
    for i in order:
        b = reqs[i]
        size = _round_up(b.size, a)
        if size == 0:
            continue
        busy = sorted((offsets[j], offsets[j] + _round_up(reqs[j].size, a)) for j in overlaps[i] if placed[j])
        at = 0
        for lo, hi in busy:
            if at + size <= lo:
                break
            at = max(at, hi)  # offsets and rounded sizes are multiples of a: so is hi
        offsets[i] = at
        placed[i] = True
    return tuple(offsets)


def greedy_by_size(buffers, alignment: int = 1) -> tuple[int, ...]:
    """The TensorFlow Lite Micro greedy planner.

    Steps: visit buffers by decreasing rounded size (ties: input order); put each at the lowest
    aligned offset that shares no byte with an already placed buffer whose lifetime overlaps.
    Limits: O(p log p) for p pairs of buffers live together (n^2 when all are); one pass, no
    look-ahead. Usually within a few percent of the lower bound on real model traces, but it
    needs 1.23x-1.41x on the hard MiniMalloc instances.

    >>> greedy_by_size([(4, 0, 2), (8, 1, 3), (4, 3, 4)])
    (8, 0, 8)
    """
    reqs, a = _reqs(buffers), _alignment(alignment)
    order = sorted(range(len(reqs)), key=lambda i: (-_round_up(reqs[i].size, a), i))
    return _first_fit(reqs, a, order)


def greedy_by_conflicts(buffers, alignment: int = 1) -> tuple[int, ...]:
    """First fit in order of decreasing conflicts (as TVM USMP's ``greedy_by_conflicts``).

    Steps: for each buffer, sum the rounded sizes of the other buffers live with it at some
    step (with prefix sums: those started by its last step minus those ended before its first);
    visit buffers by decreasing sum (ties: larger size, then input order); place each at the
    lowest free aligned offset, as ``greedy_by_size`` does.
    Limits: O(p log p) for the placement (p pairs live together); one pass, no look-ahead. It wins over
    ``greedy_by_size`` on crowded buffers with long lifetimes and loses elsewhere, so
    ``plan("best")`` runs both.

    >>> greedy_by_conflicts([(4, 0, 2), (8, 1, 3), (4, 3, 4)])
    (8, 0, 8)
    """
    reqs, a = _reqs(buffers), _alignment(alignment)
    sizes = [_round_up(b.size, a) for b in reqs]
    by_first = sorted(range(len(reqs)), key=lambda i: reqs[i].first)
    by_last = sorted(range(len(reqs)), key=lambda i: reqs[i].last)
    firsts, lasts = [reqs[i].first for i in by_first], [reqs[i].last for i in by_last]
    started, ended = [0], [0]  # prefix sums of sizes in those two orders
    for i, j in zip(by_first, by_last):
        started.append(started[-1] + sizes[i])
        ended.append(ended[-1] + sizes[j])
    conflict = [
        started[bisect.bisect_right(firsts, b.last)] - ended[bisect.bisect_left(lasts, b.first)] - sizes[i]
        for i, b in enumerate(reqs)
    ]
    order = sorted(range(len(reqs)), key=lambda i: (-conflict[i], -sizes[i], i))
    return _first_fit(reqs, a, order)


# ----------------------------------------------------------------------------------------------
# The exact search: its entry (the search itself is in exact_search.py)


def search(
    buffers,
    alignment: int = 1,
    *,
    seed: Sequence[int] | None = None,
    node_budget: int = DEFAULT_NODE_BUDGET,
    time_limit: float | None = None,
    native: bool = True,
) -> tuple[int, ...]:
    """Exact branch and bound over canonical plans, after MiniMalloc (Moffitt, ASPLOS 2023).

    Steps: take ``seed`` (default: ``greedy_by_size``) as the best plan so far. Ask the
    decision search whether the buffers fit in the lower bound; then bisect between the
    smallest size not yet tried and the best arena found (a plan found for a size may need
    less), until the two are within 1/512 of the arena or the budget is spent. Each question
    tries the orders of ``_HEURISTICS`` in turn, doubling a node limit every round. The decision
    search (memory_search.c; ``_core_python`` makes the same decisions in Python):
      1. sections: the maximal sets of buffers live at one step; a buffer spans a run of them;
      2. depth first, place one buffer at a time in nondecreasing (offset, rank) order, each at
         its lowest offset (the top of the highest placed buffer it meets in time): any plan
         can be pushed down into this canonical form, so no solution is lost;
      3. cut when a section cannot hold what is left of it: the next offset must leave room for
         the largest unplaced section total, and some unplaced member of every section must be
         able to start low enough for all the others to fit above it;
      4. skip a buffer placed at or above the lowest top another unplaced buffer could reach
         now (that one would fit in the gap below: dominated); after a failed buffer that
         pushed no other buffer up, stop (it could stay where it is in any completion);
      5. when no unplaced buffer crosses the boundary between two sections, solve the two sides
         one after the other, re-ranking each by its unplaced section totals.
    Limits: exponential in the worst case. ``node_budget`` (nodes visited over all questions)
    bounds the work, so the result depends only on the input; ``time_limit`` (seconds of wall
    time) is a safety cut-off that can make it depend on the machine. The arena is exact when
    the lower bound is reached, otherwise the best found. Building the instance is O(pairs of
    overlapping buffers) in Python; above 10000 buffers the seed is returned as it is. The C
    core is built with cffi on first use (see ``_load_native``); without a compiler, or with
    ``native=False``, the Python core runs the same steps, tens of times slower.

    >>> search([(4, 0, 2), (4, 3, 8), (4, 0, 8), (4, 9, 20), (4, 0, 20)], 4)
    (0, 0, 4, 0, 8)
    """
    reqs, a = _reqs(buffers), _alignment(alignment)
    if seed is None:
        seed = greedy_by_size(reqs, a)
    seed = tuple(seed)
    check(reqs, Plan(seed, arena_bytes(reqs, seed, a), "seed"), a)
    return _search(reqs, a, seed, node_budget, time_limit, native)


# ----------------------------------------------------------------------------------------------
# Every algorithm by name, and plan


ALGORITHMS: dict[str, Callable[..., tuple[int, ...]]] = {
    "naive": naive,
    "greedy_by_size": greedy_by_size,
    "greedy_by_conflicts": greedy_by_conflicts,
    "search": search,
}
"""Every planner by name: ``f(buffers, alignment) -> offsets`` (input order)."""

_CHEAP = ("greedy_by_size", "greedy_by_conflicts", "naive")


def plan(
    buffers,
    algorithm: str = "best",
    alignment: int = 64,
    time_limit: float = 60.0,
    node_budget: int = DEFAULT_NODE_BUDGET,
) -> Plan:
    """Plans ``buffers`` (``BufferReq`` or ``(size, first, last)``) into one arena.

    ``algorithm`` names an entry of ``ALGORITHMS`` or is ``"best"``: run the cheap ones
    (greedy_by_size, greedy_by_conflicts, naive), stop if one reaches the lower bound, else
    run ``search`` seeded with the best so far; the smallest arena wins (ties: that order) and
    names itself in ``Plan.algorithm``. ``time_limit`` and ``node_budget`` bound the search
    only. Every plan is checked before it is returned.

    >>> plan([(100, 0, 1), (100, 1, 2), (100, 2, 3)]).offsets
    (0, 128, 0)
    """
    reqs, a = _reqs(buffers), _alignment(alignment)
    if algorithm != "best" and algorithm not in ALGORITHMS:
        raise PlanError(f"unknown memory planner '{algorithm}'; known: best, {', '.join(ALGORITHMS)}")
    if algorithm == "search":
        offsets = search(reqs, a, node_budget=node_budget, time_limit=time_limit)
        name = "search"
    elif algorithm != "best":
        offsets, name = ALGORITHMS[algorithm](reqs, a), algorithm
    else:
        bound = lower_bound(reqs, a)
        offsets, name = None, ""
        for candidate in _CHEAP:
            got = ALGORITHMS[candidate](reqs, a)
            if offsets is None or arena_bytes(reqs, got, a) < arena_bytes(reqs, offsets, a):
                offsets, name = got, candidate
            if arena_bytes(reqs, offsets, a) == bound:
                break
        if arena_bytes(reqs, offsets, a) > bound:
            better = _search(reqs, a, offsets, node_budget, time_limit, True)
            if arena_bytes(reqs, better, a) < arena_bytes(reqs, offsets, a):
                offsets, name = better, "search"
    result = Plan(tuple(offsets), arena_bytes(reqs, offsets, a), name)
    check(reqs, result, a)
    return result
