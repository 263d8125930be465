"""The CUDA backend's own kernels (runtime_c/cuda/): which steps run them, and their launches.

A step whose op has an entry here runs a kernel written for the GPU; any other step runs its
C body compiled for the device (emit.py). ``launch_of(node, ins, precision)`` returns the
launch (templates/cuda/ops/<template>.cu.j2 and its data), or None when the step is left to
the C body (an integer product, say); ``copies_of`` turns the C backend's strided-copy steps
into launches of runtime_c/cuda/copy.cuh.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from graphdef.ops.reduce import runs

from ...render import layout as L
from ...render.plans import gemm_plan, geom, matmul_plan, pool_geom, reduce_view
from .precision import TENSOR_CORE

FLOATS = ("float16", "float32", "float64")
MAX_AXES = 4  # batch axes fc_cu_matmul takes (runtime_c/cuda/gemm.cuh)


@dataclass(frozen=True)
class Launch:
    """``template``: templates/cuda/ops/<template>.cu.j2, rendered with ``k`` (and the step's
    pointer expressions ``x``, ``y`` and stream ``s``); ``headers``: runtime_c/cuda headers."""

    template: str
    k: dict
    headers: tuple[str, ...]


NATIVE: dict[str, Callable] = {}


def native(*ops: str):
    def register(fn):
        for op in ops:
            NATIVE[op] = fn
        return fn

    return register


PRODUCTS = ("matmul", "gemm", "conv", "conv_weight_grad")  # the tiled kernels' ops
# a product with fewer output columns than this and at most DIRECT_K terms a sum runs direct
# (fc_cu_direct, a thread an output): a 64-wide tile would compute mostly padding
DIRECT_N, DIRECT_K = 8, 64


def launch_of(node, ins, precision: str = "fp32") -> Launch | None:
    """The step's launch of a kernel of this backend, or None; products run on tensor cores
    with ``precision`` tf32, bf16 or fp16 (runtime_c/cuda/mma.cuh)."""
    fn = NATIVE.get(node.op)
    launch = None if fn is None else fn(node, ins)
    if launch is None or node.op not in PRODUCTS:
        return launch
    direct = launch.k["n"] < DIRECT_N and launch.k["k"] <= DIRECT_K  # depthwise and other narrow products
    tc = None if direct or ins[0].dtype == "float64" else TENSOR_CORE.get(precision)
    headers = ("cuda/mma.cuh",) if tc else launch.headers
    return Launch(launch.template, {**launch.k, "direct": direct, "tc": tc}, headers)


COPY_TYPES = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}


def copies_of(call, x: list[str], y: list[str]) -> Launch | None:
    """The C backend's strided copies (its "copy" and "copies" steps: transpose, slice,
    expand, tile, bitcast, concat, split) as runtime_c/cuda/copy.cuh launches, one thread an
    element; ``x``, ``y``: the step's pointer expressions."""
    if call.template == "copy":
        plans = [dict(call.k, x=x[0], y=y[0])]
    elif call.template == "copies":
        names = {f"x{i}": v for i, v in enumerate(x)} | {f"y{i}": v for i, v in enumerate(y)}
        plans = [dict(c, x=names[c["x"]], y=names[c["y"]]) for c in call.k["copies"]]
    else:
        return None
    plans = [dict(p, ctype=COPY_TYPES[p["itemsize"]]) for p in plans if p["count"]]
    return Launch("copy", {"copies": plans}, ("cuda/copy.cuh",))


def _product(ctype: str, plan: dict, batches: int, c, alpha: float, beta: float, axes=()) -> dict:
    """fc_cu_matmul's fields: the C backend's product plan, its batch axes padded to MAX_AXES."""
    pad = [0] * (MAX_AXES - len(axes))
    return {
        **plan, "ctype": ctype, "batches": batches, "c": c, "alpha": alpha, "beta": beta, "axes": len(axes),
        "size": [ax["size"] for ax in axes] + [1] * len(pad), "sa": [ax["a"] for ax in axes] + pad,
        "sb": [ax["b"] for ax in axes] + pad, "sy": [ax["y"] for ax in axes] + pad,
    }  # fmt: skip


@native("matmul")
def _matmul(node, ins) -> Launch | None:
    if ins[0].dtype not in FLOATS:
        return None
    plan, axes = matmul_plan(ins)
    if len(axes) > MAX_AXES:
        return None
    return Launch(
        "matmul", _product(ins[0].ctype, plan, plan["count"], None, 1.0, 0.0, axes), ("cuda/gemm.cuh",)
    )


@native("gemm")
def _gemm(node, ins) -> Launch | None:
    if ins[0].dtype not in FLOATS:
        return None
    a = node.attrs
    c = 2 if len(ins) == 3 else None
    k_ = _product(ins[0].ctype, gemm_plan(ins, a), 1, c, float(a["alpha"]), float(a["beta"]))
    return Launch("matmul", k_, ("cuda/gemm.cuh",))


@native("conv")
def _conv(node, ins) -> Launch | None:
    x, w = ins[:2]
    if x.dtype not in FLOATS or x.rank > 5:
        return None
    out = node.outputs[0]
    g = geom(x.shape, w.shape[2:], out.shape[2:], node.attrs)
    group = node.attrs["group"]
    k_ = {
        "ctype": x.ctype,
        "m": x.shape[0] * math.prod(out.shape[2:]),
        "n": w.shape[0] // group,
        "k": math.prod(w.shape[1:]),
        "batches": group,
        "c": x.shape[1],
        "mo": w.shape[0],
        "bias": len(ins) == 3,
        **{f: g[f] for f in ("in", "out", "stride", "pad", "dil")},
        "kr": g["k"],
    }
    return Launch("conv", k_, ("cuda/gemm.cuh",))


@native("conv_weight_grad")
def _conv_weight_grad(node, ins) -> Launch | None:
    x, gy = ins
    if x.dtype not in FLOATS or x.rank > 5:
        return None
    a, group = node.attrs, node.attrs["group"]
    kernel = tuple(a["kernel"])
    g = geom(x.shape, kernel, gy.shape[2:], a)
    cg = x.shape[1] // group
    k_ = {
        "ctype": x.ctype,
        "m": gy.shape[1] // group,
        "n": cg * math.prod(kernel),
        "k": x.shape[0] * math.prod(gy.shape[2:]),
        "batches": group,
        "c": x.shape[1],
        "mo": gy.shape[1],
        **{f: g[f] for f in ("in", "out", "stride", "pad", "dil")},
        "kr": g["k"],
    }
    return Launch("conv_wgrad", k_, ("cuda/gemm.cuh",))


@native("gather")
def _gather(node, ins) -> Launch | None:
    data, indices = ins
    if indices.dtype not in ("int64", "int32"):
        return None
    outer, dim, inner = L.around(data.shape, [node.attrs["axis"]])
    k_ = {
        "ctype": COPY_TYPES[L.itemsize(data.dtype)],
        "index": "i64" if indices.dtype == "int64" else "i32",
        "n_idx": indices.size,
        "dim": dim,
        "inner": inner,
        "count": outer * indices.size * inner,
    }
    return Launch("gather", k_, ("cuda/copy.cuh",))


@native("max_pool", "avg_pool")
def _pool(node, ins) -> Launch | None:
    x, y = ins[0], node.outputs[0]
    if x.dtype not in FLOATS or x.rank > 5:
        return None
    k_ = {
        **pool_geom(x, y, node.attrs),
        "ctype": x.ctype,
        "is_max": int(node.op == "max_pool"),
        "count": y.size,
    }
    return Launch("pool", k_, ("cuda/pool.cuh",))


@native("softmax", "log_softmax")
def _softmax(node, ins) -> Launch | None:
    x = ins[0]
    if x.dtype not in FLOATS or not x.size:
        return None
    outer, length, inner = L.around(x.shape, [node.attrs["axis"]])
    k_ = {
        "ctype": x.ctype,
        "rows": outer * inner,
        "len": length,
        "inner": inner,
        "log": int(node.op == "log_softmax"),
    }
    return Launch("softmax", k_, ("cuda/norm.cuh",))


@native("layer_norm")
def _layer_norm(node, ins) -> Launch | None:
    x = ins[0]
    if x.dtype not in FLOATS or not x.size or any(p.shape != x.shape[node.attrs["axis"] :] for p in ins[1:]):
        return None
    outer, length, _ = L.around(x.shape, range(node.attrs["axis"], x.rank))
    k_ = {
        "ctype": x.ctype,
        "rows": outer,
        "n": length,
        "eps": repr(float(node.attrs["epsilon"])),
        "bias": len(ins) == 3,
    }
    return Launch("layer_norm", k_, ("cuda/norm.cuh",))


REDUCE_OPS = {"reduce_sum": 0, "reduce_mean": 1, "reduce_max": 2, "reduce_min": 3}


@native(*REDUCE_OPS)
def _reduce(node, ins) -> Launch | None:
    x = ins[0]
    if x.dtype not in FLOATS or len(runs(x.shape, node.attrs["axes"])) != 1 or not node.outputs[0].size:
        return None
    outer, length, inner = reduce_view(x, node.attrs["axes"])
    if length < 1:
        return None
    k_ = {"ctype": x.ctype, "rows": outer * inner, "len": length, "inner": inner, "op": REDUCE_OPS[node.op]}
    return Launch("reduce", k_, ("cuda/norm.cuh",))
