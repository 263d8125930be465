"""Drawings of a plan, time across and memory up: ``draw_text`` (ASCII) and ``draw_svg``."""

from __future__ import annotations

from .planner import Plan, _reqs

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
