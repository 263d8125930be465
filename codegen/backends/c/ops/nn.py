"""C lowering of the neural-network ops: products, convolution, pooling, normalization and
softmax (runtime_c/kernels/matmul.h, conv.h, pool.h, norm.h).

The algorithm of each step is chosen here: a float32 convolution whose groups are single
input channels runs the direct depthwise kernel, others the generic one; float32 2-D pooling
runs on stride-phase planes, others the generic loop.
"""

from __future__ import annotations

import math

from graphdef import dtypes
from graphdef.builder import apply
from graphdef.errors import UnsupportedError
from graphdef.ir import TensorType
from graphdef.ops.elementwise import add, mul
from graphdef.ops.products import matmul
from graphdef.ops.shape import expand, transpose

from ....render import layout as L
from ....render.plans import (
    depthwise_geom,
    gemm_plan,
    geom,
    matmul_plan,
    phase_floats,
    pool_geom,
    pool_phases,
)
from ....render.splits import TRANSCENDENTAL, Split, work
from ..epilogue import epilogue_context
from ..op_table import Call, kernel, legalize

GEMM_H = ("kernels/matmul.h",)


# ----------------------------------------------------------------------------- products


@kernel("matmul")
def _matmul(s):
    product, axes = matmul_plan(s.ins)
    product.update(fn=s.fn("fc_gemm"), c="NULL", alpha="1.0", beta="0.0")
    if not axes:  # one product: the gemm kernel as it is
        return Call("gemm", {**product, "a": s.x[0], "b": s.x[1]}, GEMM_H)
    return Call("matmul_batched", {**product, "axes": axes}, GEMM_H)


@kernel("gemm")
def _gemm(s):
    return Call(
        "gemm",
        {**gemm_plan(s.ins, s.attrs), "fn": s.fn("fc_gemm"), "a": s.x[0], "b": s.x[1], "c": s.arg(2),
         "alpha": s.lit(s.attrs["alpha"], "float64"), "beta": s.lit(s.attrs["beta"], "float64")},
        GEMM_H,
    )  # fmt: skip


@legalize("gemm")
def _integer_gemm(op):
    """Integer gemm with alpha or beta other than 1: matmul, scale and add (the kernel's
    alpha and beta are doubles; this keeps the integer wrap exact)."""
    a, b = op.inputs[:2]
    alpha, beta = op.attrs["alpha"], op.attrs["beta"]
    if dtypes.is_float(a.dtype) or (alpha == 1.0 and beta == 1.0):
        return None
    if not (float(alpha).is_integer() and float(beta).is_integer()):
        raise UnsupportedError(f"gemm on {a.dtype} with fractional alpha {alpha} or beta {beta}")
    y = mul(
        matmul(transpose(a) if op.attrs["trans_a"] else a, transpose(b) if op.attrs["trans_b"] else b),
        int(alpha),
    )
    return (add(y, mul(op.inputs[2], int(beta))) if len(op.inputs) == 3 else y,)


# ----------------------------------------------------------------------------- windows


CB_LANES, CB_CELLS = 16, 8
"""The widest vector (AVX-512) the channel blocks' scratch is sized for, and conv.h's
FC_DWCONV_CB_CELLS (output cells of a row computed at once)."""


def _channel_blocks(g: dict, isa: str) -> bool:
    """Whether a depthwise conv with one output channel per input channel runs as channel blocks
    on AVX-512 (fc_dwconv_cb_epi_f32: the channels as vector lanes): output planes up to 8x8,
    or up to 16x16 when strided or 5x5 (measured: 1152 x 7x7 5x5 83 -> 48 us, 672 x 14x14 ->
    7x7 3x3 stride 2 38 -> 27 us, 240 x 28x28 -> 14x14 stride 2 69 -> 40 us; a 3x3 stride-1
    480 x 14x14 35 -> 41 us, so not that one)."""
    ohw = g["oh"] * g["ow"]
    small = ohw <= 64 or (ohw <= 256 and (g["sh"] > 1 or g["sw"] > 1 or g["kh"] * g["kw"] >= 25))
    big_enough = g["n"] * g["c"] >= CB_LANES and min(ohw, g["h"] * g["w"]) >= CB_LANES
    return isa == "avx512" and g["m"] == g["c"] and small and big_enough


def _cb_floats(g: dict) -> int:
    """fc_dwconv_cb_floats(g, CB_LANES)."""
    hp = (g["oh"] - 1) * g["sh"] + (g["kh"] - 1) * g["dh"] + 1
    wp = (g["ow"] - 1) * g["sw"] + (g["kw"] - 1) * g["dw"] + 1
    return CB_LANES * (hp * wp + CB_CELLS * g["sw"] + g["kh"] * g["kw"] + 1 + g["oh"] * g["ow"])


def _conv_scratch(ins, outs, attrs, isa):
    """Bytes of the depthwise kernel's phase planes and output run (fc_dwconv_scratch_floats),
    then those of its channel blocks where they run."""
    g = depthwise_geom(ins, outs, attrs)
    if g is None:
        return 0
    return 4 * (phase_floats(g) + (_cb_floats(g) if _channel_blocks(g, isa) else 0))


def _conv_call(s, fn: str, m: int, unused=()):
    x, w = s.ins[:2]
    k = {
        "fn": s.fn(fn),
        "n": x.shape[0],
        "c": x.shape[1],
        "m": m,
        "group": s.attrs["group"],
        "bias": s.arg(2),
        "unused": list(unused),
        **geom(x.shape, w.shape[2:], s.outs[0].shape[2:], s.attrs),
    }
    return Call("conv", k, ("kernels/conv.h",))


def _conv_split(ins, outs, attrs):
    """The depthwise kernel splits by input planes (image, channel), each with its outputs
    (work: a multiply-add per tap, and 8 operations an input value for its phase planes)."""
    g = depthwise_geom(ins, outs, attrs)
    if g is None:
        return None
    return Split(g["n"] * g["c"], work(ins, outs, 2 * outs[0].size * g["kh"] * g["kw"] + 8 * ins[0].size))


@kernel("conv", scratch=_conv_scratch, split=_conv_split)
def _conv(s):
    dw = depthwise_geom(s.ins, s.outs, s.attrs)
    if dw is not None:
        return _depthwise_call(s, dw, s.arg(2), None)
    return _conv_call(s, "fc_conv", s.ins[1].shape[0], unused=["scratch"])


def _depthwise_call(s, dw: dict, bias: str, epi: dict | None) -> Call:
    """The direct depthwise kernel (conv.h) on geometry ``dw``: fc_dwconv_f32, or with an
    epilogue ``epi`` (epilogue_context) fc_dwconv_epi_f32 calling the step's ``_plane``
    function on each run of output rows (templates/c/ops/dwconv.prelude.c.j2); on small planes
    (``_channel_blocks``) their channel-block forms fc_dwconv_cb_f32 / fc_dwconv_cb_epi_f32."""
    args = [s.x[0], s.x[1], bias, s.y[0], "&g", "(float *)scratch", *s.span(dw["n"] * dw["c"])]
    kind = "fc_dwconv_cb" if _channel_blocks(dw, s.isa) else "fc_dwconv"
    k = {"g": dw, "fn": f"{kind}_f32", "args": args, "epi": epi, "epi_inputs": []}
    if epi is None:
        return Call("dwconv", k, ("kernels/conv.h",))
    layouts = s.attrs["epilogue"][2]
    first = len(s.ins) - len(layouts)
    ohw = dw["oh"] * dw["ow"]
    flat = all((lay[0], lay[1]) in ((ohw, 1), (0, 0)) for lay in layouts)
    k.update(
        fn=f"{kind}_epi_f32",
        args=args + [f"{s.func}_plane", "e" if layouts else "NULL", str(int(flat))],
        epi_inputs=[s.x[first + q["i"]] for q in epi["extras"]],
        e_n=[lay[2][1] for lay in layouts],
        m=dw["m"],
    )
    return Call("dwconv", k, ("kernels/conv.h",), prelude="dwconv")


def dw_split(ins, attrs) -> tuple[list, list]:
    """(the convolution's own inputs x, w and bias if any, the epilogue's inputs) of a
    ``dwconv`` node (types or values)."""
    k = 3 if attrs["bias"] else 2
    return list(ins[:k]), list(ins[k:])


def _dwconv_split(ins, outs, attrs):
    """As the depthwise conv's, plus the epilogue's operations on every output."""
    conv_in, extras = dw_split(ins, attrs)
    split = _conv_split(conv_in, outs, attrs)
    program = attrs["epilogue"][0] if attrs["epilogue"] else ()
    return Split(split.units, split.work + sum(t.nbytes for t in extras) + outs[0].size * len(program))


@kernel(
    "dwconv",
    scratch=lambda ins, outs, attrs, isa: _conv_scratch(dw_split(ins, attrs)[0], outs, attrs, isa),
    split=_dwconv_split,
)
def _dwconv(s):
    """A depthwise conv with an elementwise epilogue (gemm_ops.py's ``dwconv``): the direct
    kernel applies it to each output plane's rows while they are in L1 (templates/c/ops/dwconv*)."""

    first = len(dw_split(s.ins, s.attrs)[0])
    dw = depthwise_geom(s.ins[:first], s.outs, s.attrs)
    bias = s.x[2] if s.attrs["bias"] else "NULL"
    return _depthwise_call(s, dw, bias, epilogue_context(s.node, s.ins, first))


@kernel("conv_transpose")
def _conv_transpose(s):
    return _conv_call(s, "fc_conv_transpose", s.outs[0].shape[1])


def _pool_scratch(ins, outs, attrs, isa):
    g = pool_phases(ins, outs, attrs)
    return 0 if g is None else 4 * (phase_floats(g) + g["ow"])


def _pool_split(ins, outs, attrs):
    """Pooling splits by planes (image, channel) (work: 4 operations a window cell, 4 an input
    value for the phase planes and the NaN scan)."""
    x = ins[0]
    cells = outs[0].size * math.prod(attrs["kernel_shape"])
    return Split(x.shape[0] * x.shape[1], work(ins, outs, 4 * cells + 4 * x.size))


def _pool_planes(s, k: dict, y: TensorType) -> None:
    """The generic kernels' planes: all of them, or (split) planes [lo, hi) of x and y, with a
    geometry of their count (then not static: hi - lo is known at run time)."""
    planes = k["planes"]
    k.update(
        planes=s.count(planes),
        storage="const" if s.split else "static const",
        x=s.at(s.x[0], s.ins[0].size // planes),
        y=s.at(s.y[0], y.size // planes),
    )


@kernel("max_pool", "avg_pool", scratch=_pool_scratch, split=_pool_split)
def _pool(s):
    k = pool_geom(s.ins[0], s.outs[0], s.attrs)
    phases = pool_phases(s.ins, s.outs, s.attrs)
    if phases is not None:
        k.update(d=phases, fn="fc_pool2d_f32", is_max=int(s.node.op == "max_pool"), span=s.span(k["planes"]))
        return Call("pool2d", k, ("kernels/pool.h",))
    _pool_planes(s, k, s.outs[0])
    k.update(fn=s.fn(f"fc_{s.node.op}"), args=[], unused=["scratch"])
    return Call("pool", k, ("kernels/pool.h",))


@kernel("lp_pool", split=_pool_split)
def _lp_pool(s):
    k = pool_geom(s.ins[0], s.outs[0], s.attrs)
    _pool_planes(s, k, s.outs[0])
    k.update(fn=s.fn("fc_lp_pool"), args=[s.lit(s.attrs["p"], "float64")])
    return Call("pool", k, ("kernels/pool.h",))


def _pool_grad_split(ins, outs, attrs):
    """Pooling gradients split by planes (image, channel), each plane's windows its own."""
    gx, gy = outs[0], ins[-1]
    cells = gy.size * math.prod(attrs["kernel_shape"])
    return Split(gx.shape[0] * gx.shape[1], work(ins, outs, 4 * cells + 2 * gx.size))


@kernel("max_pool_grad", "avg_pool_grad", split=_pool_grad_split)
def _pool_grad(s):
    x = TensorType(s.attrs["shape"], s.ins[0].dtype) if "shape" in s.attrs else s.ins[0]
    gy = s.ins[-1]
    k = pool_geom(x, gy, s.attrs)  # gy has the pooled shape
    planes = k["planes"]  # each input and the output: the same count of planes
    args = [s.at(ptr, t.size // planes) for ptr, t in zip([*s.x, s.y[0]], [*s.ins, s.outs[0]])]
    k.update(fn=s.fn(f"fc_{s.node.op}"), args=args, planes=s.count(planes),
             storage="const" if s.split else "static const")  # fmt: skip
    return Call("pool_grad", k, ("kernels/pool.h",))


# ----------------------------------------------------------------------------- normalization
def _layer_norm_split(ins, outs, attrs):
    """Layer norm splits by the rows it normalizes (a mean, a variance, a scaling: 16
    operations an element, as timed)."""
    x = ins[0]
    outer, _, _ = L.around(x.shape, range(attrs["axis"], x.rank))
    return Split(outer, work(ins, outs, 16 * x.size))


@kernel("layer_norm", split=_layer_norm_split)
def _layer_norm(s):
    x = s.ins[0]
    outer, length, _ = L.around(x.shape, range(s.attrs["axis"], x.rank))
    fn = "fc_layer_norm_vec" if x.dtype == "float32" else "fc_layer_norm"  # norm.h float32 path
    return Call(
        "layer_norm",
        {"fn": s.fn(fn), "x": s.at(s.x[0], length), "y": s.at(s.y[0], length), "outer": s.count(outer),
         "inner": length, "eps": s.lit(s.attrs["epsilon"], "float64"), "bias": s.arg(2)},
        ("kernels/norm.h",),
    )  # fmt: skip


@legalize("layer_norm")
def _layer_norm_params(op):
    """Scale or bias that broadcast: expand them to the normalized shape the kernel takes."""
    x = op.inputs[0]
    norm = x.shape[op.attrs["axis"] :]
    params = op.inputs[1:]
    if all(p.shape == norm for p in params):
        return None
    full = [p if p.shape == norm else expand(p, norm) for p in params]
    return (apply("layer_norm", [x, *full], None, **op.attrs),)


def _softmax_split(ins, outs, attrs):
    """Softmax splits by its outer slices (a maximum, a sum, a scaling and an exponential: a
    transcendental an element)."""
    outer, _, _ = L.around(ins[0].shape, [attrs["axis"]])
    return Split(outer, work(ins, outs, TRANSCENDENTAL * ins[0].size))


@kernel("softmax", "log_softmax", split=_softmax_split)
def _softmax(s):
    outer, length, inner = L.around(s.ins[0].shape, [s.attrs["axis"]])
    fn = f"fc_{s.node.op}" + ("_vec" if s.ins[0].dtype == "float32" else "")  # norm.h float32 paths
    return Call(
        "softmax",
        {"fn": s.fn(fn), "x": s.at(s.x[0], length * inner), "y": s.at(s.y[0], length * inner),
         "outer": s.count(outer), "len": length, "inner": inner},
        ("kernels/norm.h",),
    )  # fmt: skip
