"""The exact search behind ``search`` (planner.py): MiniMalloc-style branch and bound.

``_search`` bisects on the arena size and asks ``_decide`` whether the buffers fit in each
size; ``_decide`` runs the decision search under a node limit: the C core
(runtime_c/planner/memory_search.c, built with cffi on first use by ``_load_native``) or
``_core_python``, which makes the same decisions. ``search``'s docstring lists the steps.
The buffers come in checked (``BufferReq`` records); nothing else of the planner is needed.
"""

from __future__ import annotations

import bisect
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..cachedir import cache_root

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


def _instance(reqs: Sequence, a: int) -> _Instance:  # planner.BufferReq records
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
SEARCH_C = Path(__file__).resolve().parents[2] / "runtime_c" / "planner" / "memory_search.c"


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
