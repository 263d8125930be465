"""The C code of the packed-GEMM ops' steps (their records: gemm_ops.py): the plans, the
epilogue, the scratch each step takes (im2col slices, col matrices, weight-gradient sums), and
how its parts share the work on the model's threads (runtime_c/kernels/sgemm.h, im2col.h,
weight_grad.h). conv_direct.py and winograd.py build on the same helpers."""

from __future__ import annotations

import math

from graphdef.errors import UnsupportedError

from ...render.plans import geom
from .epilogue import epilogue_context
from .gemm_ops import _group_weights
from .op_table import Call, kernel
from .sgemm import SgemmPlan, make_plan, plan_of


def lines(nbytes: int) -> int:
    """``nbytes`` rounded up to whole 64-byte lines (scratch buffers start on a line)."""
    return -(-nbytes // 64) * 64


def part_scratch(plan: SgemmPlan, isa: str) -> int:
    """Scratch bytes of one thread's part of a product built for ``isa`` (the ISA the build's
    compiler selects: a plan packed for another tile packs raw operands it would read in
    place on its own ISA), rounded to 64."""
    return lines(plan.scratch_bytes(isa))


CHUNK_BYTES = 196608
"""An im2col slice stays about this size (in L2 with the weights' block), unless one output
row alone is bigger."""


def chunking(p: SgemmPlan, attrs, isa: str) -> dict | None:
    """How an im2col convolution runs: slices of ``rows`` output rows (each ``out[-1]``
    positions), im2col'd into scratch and multiplied while in cache; ``plan`` for a full slice,
    ``tail`` for the last, shorter one (or None). A thread works on whole slices, with
    ``part_bytes`` of its own scratch. None for a direct (1x1) convolution."""
    if attrs["direct"]:
        return None
    out = list(attrs["out"])
    width, total = out[-1], math.prod(out[:-1])
    budget = attrs.get("chunk") or CHUNK_BYTES  # (a microcontroller's: a few KiB, down to one row)
    fewest = 1 if attrs.get("chunk") else -(-8 * p.nr // width)  # else at least 8 micro-panels wide
    most = max(fewest, min(total, budget // max(1, p.k * width * 4)))
    if most >= total:
        most = total

    def waste(r):  # padded columns per useful one, in the micro-tile's width
        cols = r * width
        return (-(-cols // p.nr) * p.nr - cols) / cols

    rows = min(range(min(fewest, most), most + 1), key=lambda r: (round(waste(r), 3), -r))
    tail_rows = total % rows

    def plan(r):
        return make_plan(
            p.m, r * width, p.k, isa=attrs["isa"], a="packed" if p.a_packed else "row", ldc=p.n,
            bias="row" if p.bias else "none", mr=p.mr, kc=p.kc,
        )  # fmt: skip

    main, tail = plan(rows), plan(tail_rows) if tail_rows else None
    col = lines(p.k * rows * width * 4)
    gemm = max(part_scratch(main, isa), part_scratch(tail, isa) if tail else 0)
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


def conv_t_chunk(p: SgemmPlan, isa: str) -> dict:
    """Scratch of one part of a conv_transpose_gemm: the col matrix of an image's group (m x n
    floats, rounded to 64 bytes) and the product's own."""
    col = lines(p.m * p.n * 4)
    return {"col_bytes": col, "part_bytes": col + part_scratch(p, isa)}


def _conv_t_gemm_scratch(ins, outs, attrs, isa):
    return conv_t_chunk(plan_of(attrs), isa)["part_bytes"] * min(attrs["parts"], ins[0].shape[0])


@kernel("conv_transpose_gemm", scratch=_conv_t_gemm_scratch)
def _conv_transpose_gemm(s):
    """Per image and group: col = W_g^T X_g on the GEMM (W read in place, transposed), then
    col2im adds each column's taps into the output (runtime_c/kernels/im2col.h); parts take
    whole images."""
    x, w = s.ins[:2]
    a = s.attrs
    p = plan_of(a)
    g = a["group"]
    n = x.shape[0]
    runs = min(a["parts"], n)
    cog = w.shape[1]
    y_shape = s.outs[0].shape
    k = {
        "plan": p.c_init(),
        "n": n,
        "group": g,
        "cin": x.shape[1],
        "cin_g": p.k,
        "cog": cog,
        "cout": cog * g,
        "p_in": p.n,
        "p_out": math.prod(y_shape[2:]),
        "w_group": p.k * p.m,
        "bias": s.arg(2),
        "runs": runs,
        "run_parts": run_parts(s.func, runs),
        **conv_t_chunk(p, s.isa),
        # col2im: the output is the image, the input's positions the columns
        **geom(y_shape, w.shape[2:], x.shape[2:], a),
    }
    headers = ("kernels/sgemm.h", "kernels/im2col.h")
    return Call("conv_transpose_gemm", k, headers, prelude="conv_transpose_gemm", parallel=runs > 1)


WGRAD_BYTES = 1 << 20
"""The im2col matrices a weight gradient sums over in one pass (about an L2): whole images
when one fits, else slices of an image's output rows."""


def wgrad_chunking(n: int, cg: int, gy_shape, kernel) -> dict:
    """How a float32 conv_weight_grad runs, per group: ``images`` images at a time (or, where
    one image's im2col matrix exceeds WGRAD_BYTES, slices of ``rows`` output rows of one),
    im2col'd (the forward conv's matrix: Cg * taps rows, the positions as columns) into
    scratch, then dW_g (Mg x Cg*taps) += the sum over them of dY (Mg x positions) times the
    im2col along the positions (kernels/weight_grad.h)."""
    out = list(gy_shape[2:])
    width, total = out[-1], math.prod(out[:-1])
    per_row = cg * math.prod(kernel) * width * 4
    rows = total if per_row * total <= WGRAD_BYTES else max(1, WGRAD_BYTES // per_row)
    images = max(1, WGRAD_BYTES // (per_row * total)) if rows == total else 1
    images = min(images, n)
    if rows == total:  # whole images: rows of positions padded to whole vectors (of at most 16)
        padded = -(-width * total // 16) * 16
        floats = (cg * math.prod(kernel) + gy_shape[1]) * padded * images
    else:
        floats = per_row * rows // 4
    col = lines(floats * 4)
    return {"rows": rows, "total": total, "count": -(-total // rows), "width": width, "images": images,
            "col_bytes": col}  # fmt: skip


def _wgrad_sizes(ins, attrs) -> dict:
    x, gy = ins
    cg = x.shape[1] // attrs["group"]
    ch = wgrad_chunking(x.shape[0], cg, gy.shape, attrs["kernel"])
    acc = lines(gy.shape[1] * cg * math.prod(attrs["kernel"]) * 4)
    runs = min(attrs.get("parts", 1), x.shape[0])
    return {**ch, "acc_bytes": acc, "part_bytes": ch["col_bytes"] + acc, "runs": runs}


def _wgrad_scratch(ins, outs, attrs, isa):
    sz = _wgrad_sizes(ins, attrs)
    return sz["part_bytes"] * sz["runs"]


@kernel("conv_wgrad", "conv_weight_grad", scratch=_wgrad_scratch)
def _conv_wgrad(s):
    """The weight gradient summed over images and slices of output rows (``wgrad_chunking``);
    with parts, each part sums a run of images, the first into the output, the others into
    their scratch, added to it at the end. ``conv_weight_grad`` itself (where no lowering
    made it a ``conv_wgrad``: microcontrollers) runs the same in one part; float32 only."""
    x, gy = s.ins
    if x.dtype != "float32":
        raise UnsupportedError(f"conv_weight_grad of {x.dtype} has no C kernel (float32 only)")
    a = s.attrs
    g = a["group"]
    cg, mg = x.shape[1] // g, gy.shape[1] // g
    sz = _wgrad_sizes(s.ins, a)
    k = {
        "n": x.shape[0],
        "group": g,
        "cg": cg,
        "mg": mg,
        "cgk": cg * math.prod(a["kernel"]),
        "c_total": x.shape[1],
        "m_total": gy.shape[1],
        "hw": math.prod(x.shape[2:]),
        "p": math.prod(gy.shape[2:]),
        "chunk": sz,
        "size": s.outs[0].size,
        "run_parts": run_parts(s.func, sz["runs"]),
        **geom(x.shape, a["kernel"], gy.shape[2:], a),
    }
    headers = ("kernels/im2col.h", "kernels/weight_grad.h")
    return Call("conv_wgrad", k, headers, prelude="conv_wgrad", parallel=sz["runs"] > 1)


def item_parts(items: int, parts: int) -> dict:
    """How ``parts`` threads share a step's ``items`` work items (im2col slices, Winograd
    chunks): each part a contiguous run of whole items (the rows the step before left in its own
    core's cache), or, with fewer items than parts (``shared``), every part each item and its
    own slice of the item's products. ``runs``: the parts that run, each with its scratch;
    ``first`` / ``end``: C expressions of a part's items; ``gsplit``: fc_sgemm's part
    arguments.

    >>> item_parts(4, 2)["first"], item_parts(1, 2)["gsplit"]
    ('part * 4 / parts', 'part, parts')
    """
    shared = parts > 1 and items < parts
    return {
        "shared": shared,
        "runs": parts if shared else min(parts, items),
        "first": "0" if shared else f"part * {items} / parts",
        "end": str(items) if shared else f"(part + 1) * {items} / parts",
        "gsplit": "part, parts" if shared else "0, 1",
    }


def _product(s, p: SgemmPlan, runs: int | None = None) -> dict:
    """What the products tell their templates: the plan, the epilogue and how the step's C
    call names it (function, per-input pointers ``ep`` and the step inputs they start from),
    the bias pointer and how the ``runs`` parts (default: the node's) are run (on the pool, or
    in this thread)."""
    epi = epilogue_context(s.node, s.ins)
    extras = epi["extras"] if epi else []
    parts = s.attrs["parts"] if runs is None else runs
    return {
        "plan": p.c_init(),
        "epi": epi,
        "epi_extras": extras,
        "epi_fn": f"{s.func}_epi" if epi else "NULL",
        "epi_ptrs": "ep" if extras else "NULL",
        "epi_inputs": ", ".join(s.x[epi["first"] + q["i"]] for q in extras) or "NULL",
        "bias": s.x[2] if p.bias else "NULL",
        "parts": parts,
        "part_scratch": part_scratch(p, s.isa),
        "run_parts": run_parts(s.func, parts),
    }


def run_parts(func: str, parts: int) -> str:
    """The C call that runs a step's ``parts`` parts: on the pool, or the one in this thread."""
    if parts > 1:
        return f"fc_pool_run((fc_pool *)pool, {func}_part, &args, {parts})"
    return f"{func}_part(&args, 0, 1)"


def _sgemm_scratch(ins, outs, attrs, isa):
    return part_scratch(plan_of(attrs), isa) * attrs["parts"]


@kernel("sgemm", scratch=_sgemm_scratch)
def _sgemm(s):
    """One product split into parts (``sgemm``), or a batch of them (``sgemm_batched``): whole
    products per part when there are at least as many as parts, else each product split."""
    p = plan_of(s.attrs)
    k = _product(s, p)
    layouts = s.attrs["epilogue"][2] if s.attrs["epilogue"] else ()
    axes = [
        {"size": size, "a": a, "b": b, "c": c, "e": [lay[2][ax] for lay in layouts]}
        for ax, (size, a, b, c) in enumerate(s.attrs["batch"])
    ]
    headers = ("kernels/sgemm.h",)
    if not axes:
        k["epi_arg"] = "A->e" if k["epi_extras"] else "NULL"
        return Call("sgemm", k, headers, prelude="sgemm", parallel=k["parts"] > 1)
    count = math.prod(ax["size"] for ax in axes)
    whole = count >= k["parts"] > 1
    k.update(
        axes=axes,
        count=count,
        first="part" if whole else "0",
        step="parts" if whole else "1",
        split="0, 1" if whole else "part, parts",
        part_unused=["parts"] if whole else [],
    )
    return Call("sgemm", k, headers, prelude="sgemm_batched", parallel=k["parts"] > 1)


def _conv_gemm_scratch(ins, outs, attrs, isa):
    p = plan_of(attrs)
    ch = chunking(p, attrs, isa)
    if ch is None:
        return part_scratch(p, isa) * attrs["parts"]
    return ch["part_bytes"] * item_parts(ch["count"], attrs["parts"])["runs"]


@kernel("conv_gemm", scratch=_conv_gemm_scratch)
def _conv_gemm(s):
    """Per image and group: a 1x1 convolution reads the input as B directly
    (``conv_gemm_direct``); others im2col slices of output rows into scratch and multiply them
    while they are in cache (``conv_gemm_im2col``)."""
    x, attrs = s.ins[0], s.attrs
    p = plan_of(attrs)
    g = attrs["group"]
    layouts = attrs["epilogue"][2] if attrs["epilogue"] else ()
    k = {
        **_product(s, p),
        "e_strides": [{"n": lay[2][1], "g": lay[2][0]} for lay in layouts],
        "kk": math.prod(attrs["kernel"]),
        "n": x.shape[0],
        "group": g,
        "cg": x.shape[1] // g,
        "mg": p.m,
        "hw": math.prod(x.shape[2:]),
        "p": p.n,
        "packed": _group_weights(p),
        "m_total": p.m * g,
        "c_total": x.shape[1],
        **geom(x.shape, attrs["kernel"], attrs["out"], attrs),
    }
    headers = ("kernels/sgemm.h", "kernels/im2col.h")
    ch = chunking(p, attrs, s.isa)
    if ch is None:
        return Call("conv_gemm", k, headers, prelude="conv_gemm_direct", parallel=k["parts"] > 1)
    k["chunk"] = {**ch, "plan": ch["plan"].c_init(), "tail": ch["tail"].c_init() if ch["tail"] else None,
                  **item_parts(ch["count"], attrs["parts"])}  # fmt: skip
    return Call("conv_gemm", k, headers, prelude="conv_gemm_im2col", parallel=k["parts"] > 1)
