"""C lowering of resize (runtime_c/kernels/resize.h): one kernel call per resized axis, with
the axis's table of source indices and weights as static arrays."""

from __future__ import annotations

import numpy as np

from graphdef.builder import apply
from graphdef.ops.resize import axis_roi, axis_table, is_lerp, resize_axes

from ....render import layout as L
from ..op_table import Call, kernel, legalize


@kernel("resize")
def _resize(s):
    """Two-tap tables (nearest, linear) go to fc_resize_axis, wider ones to fc_resize_taps."""
    x, attrs = s.ins[0], s.attrs
    axes = resize_axes(x.shape, attrs) or [0]
    a = axes[0]
    idx, w = axis_table(x.shape, attrs, a)
    outer, _, inner = L.around(x.shape, [a])
    wtype = "float64" if x.dtype == "float64" else "float32"
    ctype = "double" if wtype == "float64" else "float"
    n = attrs["sizes"][a]
    common = [str(outer), str(x.shape[a]), str(n), str(inner)]
    if is_lerp(attrs, attrs["scales"][a]) and not (idx < 0).any():
        i1 = idx[:, -1]
        w1 = w[:, 1] if w.shape[1] == 2 else np.zeros(n)
        tables = [
            {"ctype": "int32_t", "name": "i0", "data": [int(v) for v in idx[:, 0]] or [0]},
            {"ctype": "int32_t", "name": "i1", "data": [int(v) for v in i1] or [0]},
            {
                "ctype": ctype,
                "name": "w",
                "data": [s.lit(float(v), wtype) for v in w1] or [s.lit(0.0, wtype)],
            },
        ]
        k = {"fn": s.fn("fc_resize_axis"), "tables": tables, "args": [*common, "i0", "i1", "w"]}
    else:
        tables = [
            {"ctype": "int32_t", "name": "idx", "data": [int(v) for v in idx.ravel()] or [0]},
            {"ctype": ctype, "name": "w",
             "data": [s.lit(float(v), wtype) for v in w.ravel()] or [s.lit(0.0, wtype)]},
        ]  # fmt: skip
        args = [*common, str(w.shape[1]), "idx", "w", s.lit(attrs["extrapolation_value"], wtype)]
        k = {"fn": s.fn("fc_resize_taps"), "tables": tables, "args": args}
    return Call("resize", k, ("kernels/resize.h",))


@legalize("resize")
def _resize_per_axis(op):
    """More than one axis changes: one resize per axis (the kernel resizes one axis)."""
    x = op.inputs[0]
    axes = resize_axes(x.shape, op.attrs)
    if len(axes) <= 1:
        return None
    y = x
    for a in axes:
        sizes = list(y.shape)
        sizes[a] = op.attrs["sizes"][a]
        scales = [1.0] * x.rank
        scales[a] = op.attrs["scales"][a]
        roi = ()
        if op.attrs["roi"]:
            roi = [0.0] * x.rank + [1.0] * x.rank
            roi[a], roi[a + x.rank] = axis_roi(op.attrs, a, x.rank)
        attrs = {**op.attrs, "sizes": tuple(sizes), "scales": tuple(scales), "roi": tuple(roi)}
        y = apply("resize", [y], None, **attrs)
    return (y,)
