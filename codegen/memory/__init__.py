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

The package: ``planner.py`` holds the records, the checker, the cheap algorithms, ``search``
(which checks its input and seed) and ``plan`` with its table ``ALGORITHMS``;
``exact_search.py`` the branch and bound behind ``search``, in Python and in C
(runtime_c/planner/memory_search.c, built with cffi); ``drawing.py`` the drawings.
"""

from .drawing import draw_png, draw_svg, draw_text
from .exact_search import DEFAULT_NODE_BUDGET, SEARCH_C
from .planner import (
    ALGORITHMS,
    BufferReq,
    Plan,
    PlanError,
    arena_bytes,
    check,
    greedy_by_conflicts,
    greedy_by_size,
    lower_bound,
    naive,
    plan,
    search,
)

__all__ = [
    "ALGORITHMS",
    "BufferReq",
    "Plan",
    "PlanError",
    "arena_bytes",
    "check",
    "draw_png",
    "draw_svg",
    "draw_text",
    "greedy_by_conflicts",
    "greedy_by_size",
    "lower_bound",
    "naive",
    "plan",
    "search",
]
