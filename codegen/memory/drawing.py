"""Drawings of a plan, time across and memory up: ``draw_text`` (ASCII), ``draw_svg`` and
``draw_png`` (the same picture)."""

from __future__ import annotations

import colorsys
import io

from graphdef.errors import FlowcError

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


def _rgb(i: int) -> tuple[int, int, int]:
    """Buffer i's fill: hues the golden angle apart (written as rgb(): an hsl() fill renders
    black in common converters, cairosvg among them)."""
    r, g, b = colorsys.hls_to_rgb((i * 137 % 360) / 360, 0.70, 0.60)
    return round(r * 255), round(g * 255), round(b * 255)


def _ticks(t0: int, t1: int, most: int = 16) -> list[int]:
    """Step numbers for the time axis: t0, t1 and round steps between, at most ``most``."""
    span = max(t1 - t0, 1)
    rounds = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10**4, 10**5, 10**6)
    step = next((s for s in rounds if span / s <= most), rounds[-1])
    return sorted(
        {t0, t1, *(t for t in range((t0 // step + 1) * step, t1, step) if min(t - t0, t1 - t) * 2 >= step)}
    )


def _layout(buffers, plan: Plan, width: int, height: int, labels) -> tuple[int, int, list[tuple]]:
    """(width, height, shapes) of a plan's picture: ("rect", x, y, w, h, rgb, tooltip or None),
    ("text", x, y, text, anchor, size), ("line", x1, y1, x2, y2) and ("group", id) (what
    follows, to the end, is that group), in drawing order, for draw_svg and draw_png alike."""
    reqs = _reqs(buffers)
    names = [f"buffer {i}" for i in range(len(reqs))] if labels is None else [str(s) for s in labels]
    arena = max(plan.arena_bytes, 1)
    left, pad = 12 + 7 * len(str(plan.arena_bytes)), 24
    t0 = min((b.first for b in reqs), default=0)
    t1 = max((b.last for b in reqs), default=0)
    sx, sy = width / (t1 - t0 + 1), height / arena
    full_w, col_w = left + width + pad, 300
    cols = max(1, full_w // col_w)
    rows = -(-len(reqs) // cols)
    legend_y = height + 2 * pad + 30
    full_h = legend_y + 14 * rows + pad
    shapes: list[tuple] = [
        ("rect", 0, 0, full_w, full_h, (255, 255, 255), None),
        ("rect", left, pad, width, height, (250, 250, 250), None),
    ]
    for i, (b, o) in enumerate(zip(reqs, plan.offsets)):
        x, y = left + (b.first - t0) * sx, pad + height - (o + b.size) * sy
        w, h = (b.last - b.first + 1) * sx, max(b.size * sy, 0.5)
        what = f"buffer {i}" + (f" ({names[i]})" if labels is not None else "")
        tip = f"{what}: {b.size} bytes at offset {o}, steps {b.first}..{b.last}"
        shapes.append(("rect", x, y, w, h, _rgb(i), tip))
        fit = int((w - 4) // 6.6)  # characters of its label that fit inside
        if h >= 12 and fit >= 3:
            text = f"{i} {names[i]}"
            shapes.append(
                ("text", x + 2, y + 11, text if len(text) <= fit else text[: fit - 1] + "~", "start", 10)
            )
    axis = pad + height
    for t in _ticks(t0, t1):
        x = left + (t - t0 + 0.5) * sx
        shapes += [("line", x, axis, x, axis + 4), ("text", x, axis + 15, str(t), "middle", 11)]
    shapes += [
        ("text", left - 4, pad + 4, str(plan.arena_bytes), "end", 11),
        ("text", left - 4, axis, "0", "end", 11),
        ("text", left, pad - 8, "offset in the arena (bytes) up, time (steps) across", "start", 11),
        ("text", left + width, axis + 28, "step", "end", 11),
    ]
    shapes.append(("group", "legend"))  # (draw_svg: the legend's elements in <g id="legend">)
    shapes.append(("text", left, legend_y - 8, "buffers: index, what it holds, bytes, steps", "start", 11))
    for i, b in enumerate(reqs):
        cx, cy = left + (i // rows) * col_w, legend_y + 14 * (i % rows)
        entry = f"{i} {names[i]} {b.size} B {b.first}..{b.last}"
        shapes += [
            ("rect", cx, cy, 10, 10, _rgb(i), None),
            ("text", cx + 14, cy + 9, entry if len(entry) <= 44 else entry[:43] + "~", "start", 11),
        ]
    return full_w, full_h, shapes


def draw_svg(buffers, plan: Plan, width: int = 800, height: int = 400, labels=None) -> str:
    """A standalone SVG of ``plan``: one rectangle per buffer, x = lifetime, y = offset.

    The plot area is ``width`` x ``height`` pixels with offset 0 at the bottom; the margins
    carry the arena size, 0, and the time axis in steps (ticks at round steps). Each rectangle
    has a plain rgb fill picked from its index, its label written inside where it fits and a
    ``<title>`` tooltip (label, size, offset, steps); zero-size buffers are drawn as a hairline.
    ``labels``: per buffer, what it holds (the tensors, the step that makes them; default
    "buffer i"). A legend under the plot lists every buffer with its colour, label, size and
    steps, in as many columns as fit. Output depends only on the inputs.
    """
    reqs = _reqs(buffers)
    full_w, full_h, shapes = _layout(buffers, plan, width, height, labels)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{full_w}" height="{full_h}" '
        f'viewBox="0 0 {full_w} {full_h}" font-family="monospace" font-size="11">',
        f"<title>memory plan: {len(reqs)} buffers, arena {plan.arena_bytes} bytes, "
        f"algorithm {_xml(plan.algorithm)}</title>",
    ]
    for s in shapes:
        if s[0] == "group":
            out.append(f'<g id="{s[1]}">')
        elif s[0] == "rect":
            _, x, y, w, h, (r, g, b), tip = s
            body = f"<title>{_xml(tip)}</title></rect>" if tip else "</rect>"
            out.append(
                f'<rect x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}" fill="rgb({r},{g},{b})" '
                f'stroke="rgb(51,51,51)" stroke-width="0.5">{body}'
            )
        elif s[0] == "text":
            _, x, y, text, anchor, size = s
            out.append(
                f'<text x="{x:.2f}" y="{y:.2f}" text-anchor="{anchor}" font-size="{size}">{_xml(text)}</text>'
            )
        else:
            _, x1, y1, x2, y2 = s
            out.append(
                f'<line x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" stroke="rgb(68,68,68)"/>'
            )
    out += ["</g>", "</svg>"]
    return "\n".join(out) + "\n"


def draw_png(buffers, plan: Plan, width: int = 800, height: int = 400, labels=None) -> bytes:
    """``draw_svg``'s picture as PNG bytes, drawn with Pillow from the same shapes (no SVG
    renderer needed)."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise FlowcError("a PNG needs Pillow (pip install pillow); --svg needs nothing") from None
    full_w, full_h, shapes = _layout(buffers, plan, width, height, labels)
    img = Image.new("RGB", (int(full_w), int(full_h)), (255, 255, 255))
    pen = ImageDraw.Draw(img)
    for s in shapes:
        if s[0] == "rect":
            _, x, y, w, h, rgb, _ = s
            pen.rectangle([x, y, x + max(w, 1), y + max(h, 1)], fill=rgb, outline=(51, 51, 51))
        elif s[0] == "group":
            continue
        elif s[0] == "text":
            _, x, y, text, anchor, _ = s
            dx = {"start": 0, "middle": pen.textlength(text) / 2, "end": pen.textlength(text)}[anchor]
            pen.text((x - dx, y - 10), text, fill=(0, 0, 0))
        else:
            pen.line([s[1], s[2], s[3], s[4]], fill=(68, 68, 68))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _xml(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
