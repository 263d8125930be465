"""C lowering of data movement: strided copies (transpose, slice, expand, tile, bitcast),
block copies (concat, split), gather / scatter_add, pad and fill (runtime_c/kernels/copy.h,
gather_axis.h)."""

from __future__ import annotations

from graphdef import dtypes
from graphdef.ops.shape import slice_plan

from ....render import layout as L
from ..op_table import Call, kernel

COPY_H = ("kernels/copy.h",)


def _copy(plan: dict) -> Call:
    return Call("copy", plan, COPY_H)


@kernel("transpose")
def _transpose(s):
    x, perm = s.ins[0], s.attrs["perm"]
    xs = L.strides(x.shape)
    y = s.outs[0]
    return _copy(
        L.copy_plan(y.shape, L.strides(y.shape), [xs[p] for p in perm], itemsize=L.itemsize(x.dtype))
    )


@kernel("slice")
def _slice(s):
    x, y = s.ins[0], s.outs[0]
    xs = L.strides(x.shape)
    plan = slice_plan(x.shape, s.attrs)
    offset = sum(start * st for (start, _, _), st in zip(plan, xs))
    return _copy(
        L.copy_plan(
            y.shape,
            L.strides(y.shape),
            [step * st for (_, step, _), st in zip(plan, xs)],
            x_offset=offset,
            itemsize=L.itemsize(x.dtype),
        )
    )


@kernel("expand")
def _expand(s):
    x, y = s.ins[0], s.outs[0]
    return _copy(
        L.copy_plan(
            y.shape, L.strides(y.shape), L.broadcast_strides(x.shape, y.shape), itemsize=L.itemsize(x.dtype)
        )
    )


@kernel("tile")
def _tile(s):
    x = s.ins[0]
    view = [v for r, d in zip(s.attrs["repeats"], x.shape) for v in (r, d)]
    xs = [v for st in L.strides(x.shape) for v in (0, st)]
    return _copy(L.copy_plan(view, L.strides(view), xs, itemsize=L.itemsize(x.dtype)))


@kernel("bitcast")
def _bitcast(s):
    """One memcpy of the bytes (not an alias: the typed pointers of x and y disagree)."""
    return _copy(L.copy_plan([s.outs[0].nbytes], [1], [1], itemsize=1))


def _block_copies(parts, whole, axis, reading):
    """One copy per part, placed at its offset along axis inside the whole tensor."""
    ws = L.strides(whole.shape)
    out, offset = [], 0
    for part in parts:
        ps = L.strides(part.shape)
        at = offset * ws[axis]
        plan = (
            L.copy_plan(part.shape, ps, ws, x_offset=at, itemsize=L.itemsize(part.dtype))
            if reading
            else L.copy_plan(part.shape, ws, ps, y_offset=at, itemsize=L.itemsize(part.dtype))
        )
        out.append(plan)
        offset += part.shape[axis]
    return out


@kernel("concat")
def _concat(s):
    copies = _block_copies(s.ins, s.outs[0], s.attrs["axis"], False)
    return Call("copies", {"copies": [dict(c, x=s.x[i], y=s.y[0]) for i, c in enumerate(copies)]}, COPY_H)


@kernel("split")
def _split(s):
    copies = _block_copies(s.outs, s.ins[0], s.attrs["axis"], True)
    return Call("copies", {"copies": [dict(c, x=s.x[0], y=s.y[i]) for i, c in enumerate(copies)]}, COPY_H)


@kernel("gather")
def _gather(s):
    data, indices = s.ins
    outer, dim, inner = L.around(data.shape, [s.attrs["axis"]])
    return Call(
        "gather",
        {"fn": s.fn("fc_gather", indices.dtype), "outer": outer, "dim": dim,
         "inner_bytes": inner * L.itemsize(data.dtype), "n_idx": indices.size},
        ("kernels/gather_axis.h",),
    )  # fmt: skip


@kernel("scatter_add")
def _scatter_add(s):
    data, indices, _ = s.ins
    outer, dim, inner = L.around(data.shape, [s.attrs["axis"]])
    fn = f"fc_scatter_add_{data.sfx}_{indices.sfx}"
    return Call(
        "scatter_add",
        {"fn": fn, "outer": outer, "dim": dim, "inner": inner, "n_idx": indices.size, "nbytes": data.nbytes},
        ("kernels/gather_axis.h",),
    )


def pad_sources(dim, begin, end, mode) -> list[int]:
    """Input index for each output position along one axis, or -1 for fill.

    Negative pads crop first; the positive ones then pad the cropped run (as the reference).
    """
    lo, hi = max(-begin, 0), max(-end, 0)
    inner = dim - lo - hi
    out = []
    for o in range(dim + begin + end):
        i = o - max(begin, 0)
        if 0 <= i < inner:
            out.append(lo + i)
        elif mode == "constant":
            out.append(-1)
        elif mode == "edge":
            out.append(lo + min(max(i, 0), inner - 1))
        else:  # reflect, without repeating the edge element
            period = 2 * (inner - 1)
            j = abs(i) % period if period else 0
            out.append(lo + (j if j < inner else period - j))
    return out


@kernel("pad")
def _pad(s):
    x, y = s.ins[0], s.outs[0]
    r = x.rank
    pads = s.attrs["pads"]
    tables = [pad_sources(x.shape[d], pads[d], pads[r + d], s.attrs["mode"]) for d in range(r)]
    return Call(
        "pad",
        {"rank": r, "out_dims": list(y.shape), "x_strides": L.strides(x.shape), "tables": tables,
         "fill": L.stored(s.lit, s.attrs["value"], x.dtype), "itemsize": L.itemsize(x.dtype)},
        COPY_H,
    )  # fmt: skip


@kernel("fill")
def _fill(s):
    dtype = s.attrs["dtype"]
    return Call(
        "fill",
        {"count": s.outs[0].size, "value": L.stored(s.lit, s.attrs["value"], dtype),
         "itemsize": dtypes.itemsize(dtype)},
        COPY_H,
    )  # fmt: skip
