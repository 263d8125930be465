"""Static memory planning: buffer lifetimes in, one arena of offsets out.

The middle layer of the planner (STYLE.md, item 6). The analysis before it turns a schedule
into plain ``BufferReq(size, first, last)`` records, where ``first`` and ``last`` are the
inclusive schedule steps during which the buffer must hold its bytes; an algorithm (a pure
function chosen by name from ``ALGORITHMS``) turns them into offsets; ``plan`` wraps the result
in a ``Plan`` and checks it. Two buffers live at a common step must not share a byte.

Sizes are rounded up to the alignment before planning, so every offset is a multiple of the
alignment and ``arena_bytes`` counts the rounded sizes; ``lower_bound`` is the largest sum of
rounded sizes live at one step, which no algorithm can beat.

>>> p = plan([(4, 0, 2), (4, 3, 8), (4, 0, 8), (4, 9, 20), (4, 0, 20)], alignment=1)
>>> p.arena_bytes, lower_bound([(4, 0, 2), (4, 3, 8), (4, 0, 8), (4, 9, 20), (4, 0, 20)])
(12, 12)
>>> check([(4, 0, 2), (4, 3, 8), (4, 0, 8), (4, 9, 20), (4, 0, 20)], p)  # raises if wrong

Drawings (``draw_text``, ``draw_svg``) show a plan with time across and memory up.
"""

from __future__ import annotations

import bisect
import hashlib
import importlib.machinery
import importlib.util
import operator
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from graphdef.errors import FlowcError

from .cachedir import cache_root

__all__ = [
    "ALGORITHMS",
    "BufferReq",
    "Plan",
    "PlanError",
    "arena_bytes",
    "check",
    "draw_svg",
    "draw_text",
    "greedy_by_conflicts",
    "greedy_by_size",
    "lower_bound",
    "naive",
    "plan",
    "search",
]


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

    >>> check([(8, 0, 1), (8, 1, 2)], Plan((0, 4), 12, "by hand"))
    Traceback (most recent call last):
    ...
    codegen.memory.PlanError: buffers 0 and 1 overlap: bytes [0, 8) and [4, 12) while both live at step 1
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
# The exact search (MiniMalloc-style branch and bound)

DEFAULT_NODE_BUDGET = 6_000_000
"""Nodes ``search`` may visit over all its questions: at most ~30 s of the C core on the hardest
MiniMalloc instances (400 buffers), far less when the lower bound is reached early."""

_FOUND, _NOT_FOUND, _NODE_LIMIT, _TIME_LIMIT, _NO_MEMORY = 1, 0, -1, -2, -3

# Tie-breaking orders, tried in turn: each letter is a key, largest first, then input order.
# T = the largest unplaced total of the buffer's sections (recomputed whenever the search splits
# in time), W = lifetime in steps, A = W * size, Z = size, O = number of buffers it overlaps.
_HEURISTICS = ("TWA", "TAW", "TOA", "WAT")
_KEY_LETTERS = "WAZO"  # static key rows passed to the core; T is computed there


@dataclass(frozen=True)
class _Instance:
    """The search's view of a problem: nonzero buffers, sizes in alignment units, sections.

    A section is a maximal set of buffers live at one step (a maximal clique of the interval
    graph); buffer i belongs to sections ``slo[i]`` to ``shi[i] - 1``, and two buffers overlap
    in time exactly when they share a section. ``index`` maps back to the input; ``keys`` holds
    one row per letter of ``_KEY_LETTERS``.
    """

    index: tuple[int, ...]
    size: tuple[int, ...]
    slo: tuple[int, ...]
    shi: tuple[int, ...]
    nsec: int
    overlaps: tuple[tuple[int, ...], ...]
    members: tuple[tuple[int, ...], ...]
    lower: int
    keys: tuple[tuple[int, ...], ...]


def _instance(reqs: Sequence[BufferReq], a: int) -> _Instance:
    index = tuple(i for i, b in enumerate(reqs) if b.size)
    size = tuple(-(-reqs[i].size // a) for i in index)
    first = [reqs[i].first for i in index]
    last = [reqs[i].last for i in index]
    n = len(index)
    starts = sorted(first)
    times: list[int] = []
    prev = None
    for t in sorted(set(last)):  # keep a step only if some buffer started since the last kept one
        if prev is None or bisect.bisect_right(starts, t) > bisect.bisect_right(starts, prev):
            times.append(t)
        prev = t
    slo = tuple(bisect.bisect_left(times, f) for f in first)
    shi = tuple(bisect.bisect_right(times, t) for t in last)
    members: list[list[int]] = [[] for _ in times]
    total = [0] * len(times)
    for i in range(n):
        for x in range(slo[i], shi[i]):
            members[x].append(i)
            total[x] += size[i]
    overlaps: list[list[int]] = [[] for _ in range(n)]
    by_start = sorted(range(n), key=lambda i: (slo[i], i))
    for p, i in enumerate(by_start):  # a sweep: the cost is the number of overlapping pairs
        for q in range(p + 1, n):
            j = by_start[q]
            if slo[j] >= shi[i]:
                break
            overlaps[i].append(j)
            overlaps[j].append(i)
    width = [last[i] - first[i] + 1 for i in range(n)]
    rows = {
        "W": width,
        "A": [width[i] * size[i] for i in range(n)],
        "Z": list(size),
        "O": [len(o) for o in overlaps],
    }
    return _Instance(
        index=index,
        size=size,
        slo=slo,
        shi=shi,
        nsec=len(times),
        overlaps=tuple(tuple(sorted(o)) for o in overlaps),
        members=tuple(tuple(m) for m in members),
        lower=max(total, default=0),
        keys=tuple(tuple(rows[c]) for c in _KEY_LETTERS),
    )


def _heuristic_rows(heuristic: str) -> tuple[int, ...]:
    return tuple(-1 if c == "T" else _KEY_LETTERS.index(c) for c in heuristic)


class _Stop(Exception):
    def __init__(self, status: int):
        self.status = status


def _core_python(inst: _Instance, heuristic: str, capacity: int, node_limit: int, time_limit: float | None):
    """The search core in Python: the decisions and node counts of memory_search.c.

    The C core adds shortcuts that save work without changing any decision (low counts kept
    up to date instead of recounted, a pre-check that skips placements place() would reject);
    a test runs both on random instances. Returns ``(status, offsets in units or None, nodes)``.
    """
    n, nsec, size, slo, shi = len(inst.size), inst.nsec, inst.size, inst.slo, inst.shi
    heur = _heuristic_rows(heuristic)
    off, minoff, sol, rank = [-1] * n, [0] * n, [0] * n, [0] * n
    total, cuts = [0] * nsec, [0] * max(nsec, 1)
    for i in range(n):
        for x in range(slo[i], shi[i]):
            total[x] += size[i]
        for x in range(slo[i], shi[i] - 1):
            cuts[x] += 1
    trail: list[tuple[list, int, int]] = []
    nodes = 0
    deadline = time.monotonic() + time_limit if time_limit and time_limit > 0 else None

    def count_low(x: int) -> int:
        limit = capacity - total[x]
        return sum(1 for c in inst.members[x] if off[c] < 0 and minoff[c] <= limit)

    low = [count_low(x) for x in range(nsec)]

    def place(b: int, o: int) -> tuple[int, bool]:
        top, raised, dead = o + size[b], 0, False
        trail.append((off, b, -1))
        off[b] = sol[b] = o
        for x in range(slo[b], shi[b]):
            trail.append((total, x, total[x]))
            total[x] -= size[b]
        for c in inst.overlaps[b]:
            was = minoff[c]
            if off[c] >= 0 or was >= top:
                continue
            trail.append((minoff, c, was))
            minoff[c] = top
            raised += 1
            for x in range(slo[c], shi[c]):
                limit = capacity - total[x]
                if not slo[b] <= x < shi[b] and was <= limit < top:
                    trail.append((low, x, low[x]))
                    low[x] -= 1
                    dead = dead or low[x] == 0
        for x in range(slo[b], shi[b]):
            trail.append((low, x, low[x]))
            low[x] = count_low(x)
            dead = dead or (low[x] == 0 and total[x] > 0)
        for x in range(slo[b], shi[b] - 1):
            trail.append((cuts, x, cuts[x]))
            cuts[x] -= 1
        return raised, dead

    def undo(mark: int) -> None:
        while len(trail) > mark:
            array, i, old = trail.pop()
            array[i] = old

    def rerank(sub: list[int]) -> None:
        def key(b):
            ks = [max(total[slo[b] : shi[b]]) if h < 0 else inst.keys[h][b] for h in heur]
            return tuple(-k for k in ks) + (b,)

        for r, b in enumerate(sorted(sub, key=key)):
            trail.append((rank, b, rank[b]))
            rank[b] = r

    def solve_range(part, lo, hi, last_off) -> bool:
        sub = [b for b in part if off[b] < 0 and slo[b] < hi and shi[b] > lo]
        if not sub:
            return True
        mark = len(trail)
        rerank(sub)
        try:
            return dfs(sub, lo, hi, last_off, -1)
        finally:
            undo(mark)

    def descend(part, lo, hi, o, b) -> bool:
        splits = [x for x in range(slo[b], shi[b] - 1) if cuts[x] == 0]
        if not splits:
            return dfs(part, lo, hi, o, rank[b])
        bounds = [lo] + [x + 1 for x in splits] + [hi]
        return all(solve_range(part, s, e, o) for s, e in zip(bounds, bounds[1:]))

    def dfs(part, lo, hi, last_off, last_rank) -> bool:
        nonlocal nodes
        nodes += 1
        if nodes > node_limit:
            raise _Stop(_NODE_LIMIT)
        if deadline is not None and nodes % 1024 == 0 and time.monotonic() > deadline:
            raise _Stop(_TIME_LIMIT)
        left = [b for b in part if off[b] < 0]
        if not left:
            return True
        min_top = min(minoff[b] + size[b] for b in left)
        max_off = capacity - max(total[lo:hi])
        cands = sorted(
            (minoff[b], rank[b], b)
            for b in left
            if minoff[b] < min_top and minoff[b] <= max_off and (minoff[b], rank[b]) > (last_off, last_rank)
        )
        for o, _, b in cands:
            mark = len(trail)
            raised, dead = place(b, o)
            ok = not dead and descend(part, lo, hi, o, b)
            undo(mark)
            if ok:
                return True
            if not raised:  # hatless: b fits at o in any completion, so later candidates fail too
                return False
        return False

    if any(c == 0 for c in low):
        return _NOT_FOUND, None, 0
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * n + 200))
    try:
        bounds = [0] + [x + 1 for x in range(nsec - 1) if cuts[x] == 0] + [nsec]
        found = all(solve_range(range(n), s, e, 0) for s, e in zip(bounds, bounds[1:]))
    except _Stop as stop:
        return stop.status, None, nodes
    finally:
        sys.setrecursionlimit(limit)
    return (_FOUND, tuple(sol), nodes) if found else (_NOT_FOUND, None, nodes)


_CDEF = """
int flowc_mem_search(int32_t n, int32_t nsec, const int64_t *size, const int32_t *slo,
                     const int32_t *shi, const int32_t *ov_start, const int32_t *ov_list,
                     const int32_t *sec_start, const int32_t *sec_list, const int64_t *keys,
                     const int32_t *heur, int32_t nheur, int64_t capacity, int64_t node_limit,
                     double time_limit_s, int64_t *out_offsets, int64_t *out_nodes);
"""

_native_cache: list = []  # [(ffi, lib) or None], filled on first use


# the search core in C, beside flowc's other C (runtime_c/README.md); built here, not in models
SEARCH_C = Path(__file__).resolve().parents[1] / "runtime_c" / "planner" / "memory_search.c"


def _load_native():
    """Builds memory_search.c once with cffi (API mode) into the build cache and loads it.

    The module name carries a hash of the C source, the declarations and the interpreter's
    extension suffix, so an edited source or another Python gets its own build. A build goes
    to a temporary folder and is renamed into place, so concurrent first uses do not clash.
    Returns ``(ffi, lib)``, or ``None`` (with a warning, once) when no compiler is available:
    the search then runs its pure-Python core, the same algorithm, tens of times slower.
    """
    if _native_cache:
        return _native_cache[0]
    result = None
    try:
        import cffi

        source = SEARCH_C.read_text()
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        key = hashlib.sha256("\0".join((source, _CDEF, suffix, cffi.__version__)).encode()).hexdigest()[:16]
        name = f"_flowc_memory_search_{key}"
        cache = cache_root()
        target = cache / (name + suffix)
        if not target.exists():
            cache.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                ffi = cffi.FFI()
                ffi.cdef(_CDEF)
                ffi.set_source(name, source, extra_compile_args=["-O2", "-std=c99"])
                built = ffi.compile(tmpdir=tmp, verbose=False)
                os.replace(built, target)
        spec = importlib.util.spec_from_file_location(name, target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        result = (module.ffi, module.lib)
    except Exception as e:  # no compiler, no cffi, unwritable cache: all mean "use Python"
        warnings.warn(
            f"flowc: the C core of the memory search is unavailable ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:200]}); using the pure-Python search, tens of times slower",
            RuntimeWarning,
            stacklevel=3,
        )
    _native_cache.append(result)
    return result


def _core_native(native, inst: _Instance, heuristic: str, capacity: int, node_limit: int, time_limit):
    ffi, lib = native
    n = len(inst.size)
    ov_start, sec_start = [0], [0]
    for o in inst.overlaps:
        ov_start.append(ov_start[-1] + len(o))
    for m in inst.members:
        sec_start.append(sec_start[-1] + len(m))
    heur = _heuristic_rows(heuristic)
    offsets = ffi.new("int64_t[]", max(n, 1))
    nodes = ffi.new("int64_t *")
    status = lib.flowc_mem_search(
        n,
        inst.nsec,
        ffi.new("int64_t[]", list(inst.size) or [0]),
        ffi.new("int32_t[]", list(inst.slo) or [0]),
        ffi.new("int32_t[]", list(inst.shi) or [0]),
        ffi.new("int32_t[]", ov_start),
        ffi.new("int32_t[]", [c for o in inst.overlaps for c in o] or [0]),
        ffi.new("int32_t[]", sec_start),
        ffi.new("int32_t[]", [c for m in inst.members for c in m] or [0]),
        ffi.new("int64_t[]", [v for row in inst.keys for v in row] or [0]),
        ffi.new("int32_t[]", list(heur) or [0]),
        len(heur),
        capacity,
        node_limit,
        float(time_limit or 0.0),
        offsets,
        nodes,
    )
    if status == _NO_MEMORY:
        raise MemoryError("the C memory search ran out of memory")
    return status, (tuple(offsets[0:n]) if status == _FOUND else None), nodes[0]


def _decide(inst: _Instance, capacity: int, node_budget: int, deadline: float | None, native):
    """Does the instance fit in ``capacity`` units? Tries each heuristic in turn, doubling the
    node limit each round (small limits first: one heuristic often finds a plan at once).

    Returns ``("found", offsets)``, ``("infeasible", None)`` (proven), or ``("unknown", None)``
    when the budget or the deadline ran out; and the nodes spent.
    """
    spent, limit = 0, max(1024, 8 * len(inst.size))
    while True:
        for heuristic in _HEURISTICS:
            step = min(limit, node_budget - spent)
            left = None if deadline is None else deadline - time.monotonic()
            if step <= 0 or (left is not None and left <= 0):
                return "unknown", None, spent
            if native is not None:
                status, offsets, used = _core_native(native, inst, heuristic, capacity, step, left)
            else:
                status, offsets, used = _core_python(inst, heuristic, capacity, step, left)
            spent += used
            if status == _FOUND:
                return "found", offsets, spent
            if status == _NOT_FOUND:
                return "infeasible", None, spent
            if status == _TIME_LIMIT:
                return "unknown", None, spent
        limit *= 2


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


_SHARE = 10  # each question may use 1/10 of the node budget
_TOLERANCE = 512  # stop bisecting when the gap is at most 1/512 of the best arena
_MAX_BUFFERS = 10_000  # larger instances keep the seed: the C core recurses ~3 frames per buffer


def _search(reqs, a: int, seed, node_budget: int, time_limit, native: bool) -> tuple[int, ...]:
    if sum(1 for b in reqs if b.size) > _MAX_BUFFERS:
        return tuple(seed)
    inst = _instance(reqs, a)
    best = [seed[i] // a for i in inst.index]
    hi = max((o + s for o, s in zip(best, inst.size)), default=0)
    lo = inst.lower
    lib = _load_native() if native and hi > lo else None
    deadline = None if time_limit is None else time.monotonic() + time_limit
    spent, first = 0, True
    while hi - lo > hi // _TOLERANCE and spent < node_budget:
        target = lo if first else lo + (hi - 1 - lo) // 2
        share = min(max(node_budget // _SHARE, 1), node_budget - spent)
        answer, offsets, used = _decide(inst, target, share, deadline, lib)
        spent, first = spent + used, False
        if answer == "found":
            best = list(offsets)
            hi = max(o + s for o, s in zip(best, inst.size))
        else:
            lo = target + 1  # proven, or given up on: either way not asked again
            if deadline is not None and time.monotonic() >= deadline:
                break
    out = [0] * len(reqs)
    for i, o in zip(inst.index, best):
        out[i] = o * a
    return tuple(out)


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


# ----------------------------------------------------------------------------------------------
# Drawings

_GLYPHS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _glyph(i: int) -> str:
    return _GLYPHS[i % len(_GLYPHS)]


def draw_text(buffers, plan: Plan, width: int = 80, height: int = 16) -> str:
    """An ASCII picture of ``plan``: steps left to right, offsets bottom to top.

    Each cell shows the buffer that holds the cell's middle byte at the cell's middle step,
    as one character of 0-9A-Za-z (buffer index modulo 62), or '.' when no buffer does.
    Columns and rows are scaled to fit ``width`` x ``height``; a buffer smaller than a cell
    may not show. The first line is a summary; offsets label the rows, steps the last line.

    >>> print(draw_text([(4, 0, 1), (4, 2, 3), (8, 1, 2)], Plan((0, 0, 4), 12, "demo"), 20, 3), end="")
    3 buffers, arena 12 bytes, algorithm demo, steps 0..3
      8 |.22.
      4 |.22.
      0 |0011
        +----
         0  3
    """
    reqs = _reqs(buffers)
    head = f"{len(reqs)} buffers, arena {plan.arena_bytes} bytes, algorithm {plan.algorithm}"
    if not reqs or plan.arena_bytes <= 0:
        return head + "\n"
    t0 = min(b.first for b in reqs)
    t1 = max(b.last for b in reqs)
    label = len(str(plan.arena_bytes))
    cols = max(1, min(t1 - t0 + 1, width - label - 3))
    rows = max(1, min(height, plan.arena_bytes))
    steps = t1 - t0 + 1
    lines = [f"{head}, steps {t0}..{t1}"]
    for r in range(rows - 1, -1, -1):
        lo_byte = r * plan.arena_bytes // rows
        mid_byte = (2 * r + 1) * plan.arena_bytes // (2 * rows)
        row = []
        for c in range(cols):
            t = t0 + (2 * c + 1) * steps // (2 * cols)
            cell = "."
            for i, (b, o) in enumerate(zip(reqs, plan.offsets)):
                if b.first <= t <= b.last and o <= mid_byte < o + b.size:
                    cell = _glyph(i)
                    break
            row.append(cell)
        lines.append(f"{lo_byte:>{label + 1}} |{''.join(row)}")
    lines.append(" " * (label + 2) + "+" + "-" * cols)
    axis = str(t0).ljust(cols)
    if cols >= len(str(t0)) + len(str(t1)) + 1:
        axis = axis[: cols - len(str(t1))] + str(t1)
    lines.append(" " * (label + 3) + axis.rstrip())
    return "\n".join(lines) + "\n"


def draw_svg(buffers, plan: Plan, width: int = 800, height: int = 400) -> str:
    """A standalone SVG of ``plan``: one rectangle per buffer, x = lifetime, y = offset.

    The plot area is ``width`` x ``height`` pixels with offset 0 at the bottom; the margins
    carry the arena size, 0, and the first and last step. Each rectangle has a ``<title>``
    tooltip (index, size, offset, steps) and a fill colour picked from its index; zero-size
    buffers are drawn as a hairline. Output depends only on the inputs.
    """
    reqs = _reqs(buffers)
    arena = max(plan.arena_bytes, 1)
    left, pad = 12 + 7 * len(str(plan.arena_bytes)), 24
    t0 = min((b.first for b in reqs), default=0)
    t1 = max((b.last for b in reqs), default=0)
    sx, sy = width / (t1 - t0 + 1), height / arena
    full_w, full_h = left + width + pad, height + 2 * pad
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{full_w}" height="{full_h}" '
        f'viewBox="0 0 {full_w} {full_h}" font-family="monospace" font-size="11">',
        f"<title>memory plan: {len(reqs)} buffers, arena {plan.arena_bytes} bytes, "
        f"algorithm {_xml(plan.algorithm)}</title>",
        f'<rect x="{left}" y="{pad}" width="{width}" height="{height}" fill="#fafafa" stroke="#888"/>',
    ]
    for i, (b, o) in enumerate(zip(reqs, plan.offsets)):
        x, y = left + (b.first - t0) * sx, pad + height - (o + b.size) * sy
        w, h = (b.last - b.first + 1) * sx, max(b.size * sy, 0.5)
        out.append(
            f'<rect x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}" '
            f'fill="hsl({i * 137 % 360},60%,70%)" stroke="#333" stroke-width="0.5">'  # golden angle
            f"<title>buffer {i}: {b.size} bytes at offset {o}, steps {b.first}..{b.last}</title></rect>"
        )
    out += [
        f'<text x="{left - 4}" y="{pad + 4}" text-anchor="end">{plan.arena_bytes}</text>',
        f'<text x="{left - 4}" y="{pad + height}" text-anchor="end">0</text>',
        f'<text x="{left}" y="{pad + height + 16}">step {t0}</text>',
        f'<text x="{left + width}" y="{pad + height + 16}" text-anchor="end">{t1}</text>',
        f'<text x="{left}" y="{pad - 8}">offset (bytes)</text>',
        "</svg>",
    ]
    return "\n".join(out) + "\n"


def _xml(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
