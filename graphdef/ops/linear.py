"""Compiler-internal products on the fast float32 GEMM (runtime_c/kernels/sgemm.h).

``codegen.passes.lower_linear`` rewrites float32 matmul, gemm and conv into these ops for a
given instruction set, packing constant operands at compile time in the exact layout of the
kernel's micro-tile (graphdef/ops/_sgemm_pack.py). Their references rebuild the logical
operands from the packed data, so the interpreter and ``verify`` still check every rewrite.

- ``sgemm(a, b, bias?)``: one product per batch entry, C = alpha * A @ B (+ bias), with A and
  B raw (strided) or packed, as the ``plan`` (the fields of fc_sgemm_plan) says.
- ``conv_gemm(x, w, bias?)``: a convolution as one product per image and group, weights
  packed, the input read directly (1x1 kernels) or through im2col into step scratch memory.

Both may carry an elementwise ``epilogue`` (``codegen.passes.fuse_epilogues`` moves the one
elementwise consumer of a product into it): ``(program, slot, layouts)`` where ``program`` is
that consumer's instructions (see ``fused``), ``slot`` the position of the product among its
inputs, and the other inputs follow bias as extra inputs of the node, each read at matrix
position (i, j) of batch entry (b0, b1, ...) as ``x[i*rs + j*cs + b0*s0 + b1*s1 ...]``
with ``layouts[q] = (rs, cs, (s0, s1, ...))``. The C kernel applies it to each output tile
while the tile is in L1, so bias, activation and residual add make no extra pass over memory.
``parts`` > 1 splits the product over that many threads of the model's pool.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..ir import TensorType
from ..registry import Attr, CKernel, NotDifferentiable, defop
from ._sgemm_pack import SgemmPlan, unpack_a, unpack_b
from ._util import check_dtype

_INTERNAL = NotDifferentiable("compiler-internal op: differentiate the graph before compiling", error=True)


def plan_of(attrs) -> SgemmPlan:
    return SgemmPlan(*attrs["plan"])


def _logical(flat, plan: SgemmPlan, which: str, offset: int) -> np.ndarray:
    """The logical A (m x k) or B (k x n) of one batch entry, from raw strides or packing."""
    if which == "a":
        if plan.a_packed:
            return unpack_a(flat[offset : offset + plan.packed_a_floats()], plan)
        i, p = np.ix_(np.arange(plan.m), np.arange(plan.k))
        return flat[offset + i * plan.a_rs + p * plan.a_cs].astype(np.float32)
    if plan.b_packed:
        return unpack_b(flat[offset : offset + plan.packed_b_floats()], plan)
    p, j = np.ix_(np.arange(plan.k), np.arange(plan.n))
    return flat[offset + p * plan.b_rs + j * plan.b_cs].astype(np.float32)


def split_inputs(xs, attrs):
    """(bias or None, epilogue inputs) of an sgemm or conv_gemm node, from its inputs after
    the two operands."""
    rest = list(xs[2:])
    bias = rest.pop(0) if plan_of(attrs).bias else None
    return bias, rest


def _epilogue(c, extras, attrs, facet: str):
    """The epilogue's result (``facet`` "ref") or type ("infer") for product ``c``."""
    from .fused import _run

    if not attrs["epilogue"]:
        return c
    program, slot = attrs["epilogue"][:2]
    values = list(extras)
    values.insert(slot, c)
    return _run(program, values, facet)


def _check_epilogue(out: TensorType, extras, attrs) -> TensorType:
    layouts = attrs["epilogue"][2] if attrs["epilogue"] else ()
    if len(extras) != len(layouts):
        raise ShapeError(f"{len(extras)} epilogue inputs for {len(layouts)} layouts")
    t = _epilogue(out, extras, attrs, "infer")
    if t != out:
        raise ShapeError(f"epilogue changes the product's type {out} to {t}")
    return t


def part_scratch(plan: SgemmPlan, isa: str) -> int:
    """Scratch bytes of one thread's part of a product, rounded to 64."""
    return -(-plan.scratch_bytes(isa) // 64) * 64


def _batch_offsets(batch):
    """(a, b, c) element offsets of every batch entry; ``batch`` lists (size, a, b, c) steps,
    innermost first."""
    count = math.prod(size for size, *_ in batch)
    for index in range(count):
        rem, off = index, [0, 0, 0]
        for size, *steps in batch:
            for q in range(3):
                off[q] += (rem % size) * steps[q]
            rem //= size
        yield off


# ----------------------------------------------------------------------------- sgemm
def _sgemm_infer(types, attrs):
    for t in types:
        check_dtype(t, ("float32",))
    p = plan_of(attrs)
    bias, extras = split_inputs(types, attrs)
    if bias is not None and bias.size != (p.m if p.bias == 1 else p.n):
        raise ShapeError(f"bias of {bias.size} values does not fit the plan's bias mode {p.bias}")
    count = math.prod(size for size, *_ in attrs["batch"])
    if math.prod(attrs["shape"]) != count * p.m * p.n:
        raise ShapeError(f"output shape {attrs['shape']} does not hold {count} products of {p.m} x {p.n}")
    return _check_epilogue(TensorType(attrs["shape"], "float32"), extras, attrs)


def _sgemm_ref(xs, attrs):
    p = plan_of(attrs)
    a, b = (np.asarray(x, np.float32).reshape(-1) for x in xs[:2])
    out = np.zeros(math.prod(attrs["shape"]), np.float64)
    bias, extras = split_inputs(xs, attrs)
    bias = None if bias is None else np.asarray(bias, np.float64).reshape(-1)
    for ao, bo, co in _batch_offsets(attrs["batch"]):
        c = p.alpha * (
            _logical(a, p, "a", ao).astype(np.float64) @ _logical(b, p, "b", bo).astype(np.float64)
        )
        if bias is not None:
            c = c + (bias[:, None] if p.bias == 1 else bias[None, :])
        i, j = np.ix_(np.arange(p.m), np.arange(p.n))
        out[co + i * p.ldc + j] = c
    return _epilogue(out.astype(np.float32).reshape(attrs["shape"]), extras, attrs, "ref")


def _sgemm_context(ins, outs, attrs, lit):
    p = plan_of(attrs)
    layouts = attrs["epilogue"][2] if attrs["epilogue"] else ()
    axes = [
        {"size": s, "a": a, "b": b, "c": c, "e": [lay[2][ax] for lay in layouts]}
        for ax, (s, a, b, c) in enumerate(attrs["batch"])
    ]
    count = math.prod(ax["size"] for ax in axes)
    return {
        "plan": p.c_init(),
        "axes": axes,
        "count": count,
        "has_bias": bool(p.bias),
        "parts": attrs["parts"],
        "split_batch": count >= attrs["parts"] > 1,
        "part_scratch": part_scratch(p, attrs["isa"]),
    }


def _sgemm_scratch(ins, outs, attrs):
    return part_scratch(plan_of(attrs), attrs["isa"]) * attrs["parts"]


def _sgemm_flops(ins, outs, attrs):
    p = plan_of(attrs)
    return 2 * p.m * p.n * p.k * math.prod(size for size, *_ in attrs["batch"])


EPILOGUE_ATTRS = {"epilogue": Attr("any", ()), "parts": Attr("int", 1)}

defop(
    "sgemm",
    ("a", "b", "more*?"),
    _sgemm_infer,
    _sgemm_ref,
    _INTERNAL,
    attrs={
        "plan": Attr("any"),
        "isa": Attr("str"),
        "batch": Attr("any", ()),
        "shape": Attr("ints"),
        **EPILOGUE_ATTRS,
    },
    c=CKernel("sgemm", _sgemm_context, ("kernels/sgemm.h",)),
    scratch=_sgemm_scratch,
    flops=_sgemm_flops,
    doc="float32 products C = alpha * A @ B (+ bias) per batch entry on the fast GEMM; A, B raw or "
    "packed; inputs a, b, then bias if the plan has one, then epilogue inputs",
)


# ----------------------------------------------------------------------------- conv_gemm
def _conv_attrs(attrs):
    return {
        "strides": attrs["strides"],
        "pads": attrs["pads"],
        "dilations": attrs["dilations"],
        "group": attrs["group"],
    }


def _conv_gemm_infer(types, attrs):
    for t in types:
        check_dtype(t, ("float32",))
    x = types[0]
    p = plan_of(attrs)
    if types[1].size != attrs["group"] * p.packed_a_floats():
        raise ShapeError(
            f"packed weights hold {types[1].size} values, the plan needs "
            f"{attrs['group']} x {p.packed_a_floats()}"
        )
    out = TensorType((x.shape[0], p.m * attrs["group"]) + tuple(attrs["out"]), "float32")
    return _check_epilogue(out, split_inputs(types, attrs)[1], attrs)


def _conv_gemm_ref(xs, attrs):
    from .nn import _conv_ref

    p = plan_of(attrs)
    g = attrs["group"]
    w = np.concatenate([unpack_a(part, p) for part in np.split(np.asarray(xs[1]).reshape(-1), g)])
    w = w.reshape((p.m * g, xs[0].shape[1] // g) + tuple(attrs["kernel"]))
    bias, extras = split_inputs(xs, attrs)
    y = _conv_ref([xs[0], w] + ([] if bias is None else [bias]), _conv_attrs(attrs))
    return _epilogue(y, extras, attrs, "ref")


def _conv_gemm_context(ins, outs, attrs, lit):
    from .nn import _geom

    x = ins[0]
    p = plan_of(attrs)
    geom = _geom(x.shape, attrs["kernel"], attrs["out"], attrs)
    g = attrs["group"]
    layouts = attrs["epilogue"][2] if attrs["epilogue"] else ()
    return {
        "plan": p.c_init(),
        "parts": attrs["parts"],
        "part_scratch": part_scratch(p, attrs["isa"]),
        "e_strides": [{"n": lay[2][1], "g": lay[2][0]} for lay in layouts],
        "kk": math.prod(attrs["kernel"]),
        "n": x.shape[0],
        "group": g,
        "cg": x.shape[1] // g,
        "mg": p.m,
        "hw": math.prod(x.shape[2:]),
        "p": p.n,
        "packed": p.packed_a_floats(),
        "direct": attrs["direct"],
        "chunk": _chunk_context(chunking(p, attrs)),
        "has_bias": bool(p.bias),
        "m_total": p.m * g,
        "c_total": x.shape[1],
        **geom,
    }


CHUNK_BYTES = 196608
"""An im2col slice stays about this size (in L2 with the weights' block), unless one output
row alone is bigger."""


def chunking(p: SgemmPlan, attrs) -> dict | None:
    """How an im2col convolution runs: slices of ``rows`` output rows (each ``out[-1]``
    positions), im2col'd into scratch and multiplied while in cache; ``plan`` for a full slice,
    ``tail`` for the last, shorter one (or None). A thread works on whole slices, with
    ``part_bytes`` of its own scratch. None for a direct (1x1) convolution."""
    from ._sgemm_pack import make_plan

    if attrs["direct"]:
        return None
    out = list(attrs["out"])
    width, total = out[-1], math.prod(out[:-1])
    fewest = -(-8 * p.nr // width)  # a slice is at least 8 micro-panels wide
    most = max(fewest, min(total, CHUNK_BYTES // max(1, p.k * width * 4)))
    if most >= total:
        most = total

    def waste(r):  # padded columns per useful one, in the micro-tile's width
        cols = r * width
        return (-(-cols // p.nr) * p.nr - cols) / cols

    rows = min(range(min(fewest, most), most + 1), key=lambda r: (round(waste(r), 3), -r))
    tail_rows = total % rows

    def plan(r):
        return make_plan(
            p.m, r * width, p.k, isa=attrs["isa"], a="packed", ldc=p.n,
            bias="row" if p.bias else "none", mr=p.mr, kc=p.kc,
        )  # fmt: skip

    main, tail = plan(rows), plan(tail_rows) if tail_rows else None
    col = -(-(p.k * rows * width * 4) // 64) * 64
    gemm = max(part_scratch(main, attrs["isa"]), part_scratch(tail, attrs["isa"]) if tail else 0)
    return {
        "rows": rows,
        "total": total,
        "count": -(-total // rows),
        "width": width,
        "plan": main,
        "tail": tail,
        "col_bytes": col,
        "part_bytes": col + gemm,
    }


def _chunk_context(ch):
    if ch is None:
        return None
    return {**ch, "plan": ch["plan"].c_init(), "tail": ch["tail"].c_init() if ch["tail"] else None}


def _conv_gemm_scratch(ins, outs, attrs):
    p = plan_of(attrs)
    ch = chunking(p, attrs)
    if ch is None:
        return part_scratch(p, attrs["isa"]) * attrs["parts"]
    return ch["part_bytes"] * min(attrs["parts"], ch["count"])


defop(
    "conv_gemm",
    ("x", "w", "more*?"),
    _conv_gemm_infer,
    _conv_gemm_ref,
    _INTERNAL,
    attrs={
        "plan": Attr("any"),
        "isa": Attr("str"),
        "kernel": Attr("ints"),
        "out": Attr("ints"),
        "strides": Attr("ints"),
        "pads": Attr("ints"),
        "dilations": Attr("ints"),
        "group": Attr("int"),
        "direct": Attr("bool"),
        **EPILOGUE_ATTRS,
    },
    c=CKernel("conv_gemm", _conv_gemm_context, ("kernels/sgemm.h", "kernels/im2col.h")),
    scratch=_conv_gemm_scratch,
    flops=lambda ins, outs, attrs: 2 * outs[0].size * plan_of(attrs).k,
    doc="float32 convolution as packed-weight products per image and group (im2col unless 1x1)",
)
