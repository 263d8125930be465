"""C lowering of reductions, arg reductions and running sums/products
(runtime_c/kernels/reduce.h, cumulative.h): each kernel walks one run of axes of a tensor
seen as (outer, len, inner)."""

from __future__ import annotations

from graphdef.builder import apply
from graphdef.ops.reduce import REDUCTIONS, reduced_shape, runs
from graphdef.ops.shape import reshape

from ....render import layout as L
from ....render.plans import reduce_view
from ....render.splits import Split, work
from ..op_table import Call, kernel, legalize


def _reduce_split(ins, outs, attrs):
    """A reduction splits by its outer slices (work: 32 operations an input value, as timed:
    about 0.4 ns each)."""
    outer, _, _ = reduce_view(ins[0], attrs["axes"])
    return Split(outer, work(ins, outs, 32 * ins[0].size))


ROW_KERNELS = {"reduce_sum": "fc_reduce_sum_rows_f32", "reduce_mean": "fc_reduce_mean_rows_f32"}
"""float32 sums and means over contiguous rows (inner 1) with vector accumulators (reduce.h)."""


@kernel(*REDUCTIONS, split=_reduce_split)
def _reduce(s):
    outer, length, inner = reduce_view(s.ins[0], s.attrs["axes"])
    args = [s.at(s.x[0], length * inner), s.at(s.y[0], inner), s.count(outer), length]
    if s.node.op == "reduce_sum" and s.outs[0].dtype != s.ins[0].dtype:  # int8/uint8/int16 into int32
        return Call(
            "reduce", {"fn": s.fn("fc_reduce_sum_wide"), "args": [*args, inner]}, ("kernels/reduce.h",)
        )
    if s.node.op in ROW_KERNELS and s.ins[0].dtype == "float32" and inner == 1 and length >= 16:
        return Call("reduce", {"fn": ROW_KERNELS[s.node.op], "args": args}, ("kernels/reduce.h",))
    return Call("reduce", {"fn": s.fn(f"fc_{s.node.op}"), "args": [*args, inner]}, ("kernels/reduce.h",))


@legalize(*REDUCTIONS)
def _one_run(op):
    """Several separate runs of reduced axes: one reduction per run (the kernel takes one)."""
    x = op.inputs[0]
    groups = runs(x.shape, op.attrs["axes"])
    if len(groups) <= 1:
        return None
    y = x
    for g in reversed(groups):  # (a sum into int32: the first widens, the others sum int32)
        wide = {"dtype": op.attrs["dtype"]} if op.node.op == "reduce_sum" and y is x else {}
        y = apply(op.node.op, [y], None, axes=tuple(g), keepdims=True, **wide)
    return (reshape(y, reduced_shape(x.shape, op.attrs["axes"], op.attrs["keepdims"])),)


@kernel("argmax", "argmin")
def _arg(s):
    outer, length, inner = L.around(s.ins[0].shape, [s.attrs["axis"]])
    return Call(
        "argreduce",
        {"fn": s.fn(f"fc_{s.node.op}"), "outer": outer, "len": length, "inner": inner,
         "last": int(s.attrs["select_last_index"])},
        ("kernels/reduce.h",),
    )  # fmt: skip


@kernel("cumsum", "cumprod")
def _cumulative(s):
    outer, length, inner = L.around(s.ins[0].shape, [s.attrs["axis"]])
    return Call(
        "cumulative",
        {"fn": s.fn(f"fc_{s.node.op}"), "outer": outer, "len": length, "inner": inner,
         "exclusive": int(s.attrs["exclusive"]), "reverse": int(s.attrs["reverse"])},
        ("kernels/cumulative.h",),
    )  # fmt: skip
