"""An expansion and its depthwise convolution as one step for the C backend (``pwdw``,
runtime_c/kernels/pointwise_depthwise.h): a float32 1x1 convolution of one group with its activation, then the
depthwise convolution that is its one consumer, with its own activation, as inverted-residual
blocks have them (MobileNetV2/V3, MnasNet, EfficientNet).

``fuse`` (``lowering.lower_products``, after ``fuse_epilogues``) merges a ``conv_gemm`` of a
1x1 kernel (``direct``) and the ``dwconv`` or depthwise ``conv`` that reads it, where both
epilogues read nothing but the product (activations) and the depthwise conv has one output
channel per input channel, on planes of at least ``MIN_PLANE`` positions. The kernel goes down
each block of 32 expanded channels row by row: the expanded rows that the next output row needs
are computed into a ring of rows in L1 with the channels as vector lanes, so the expanded tensor
is never written to memory nor read back, and the depthwise taps need no phase planes nor
transposes in. Weights are stored here for the kernel: the expansion's transposed and the
depthwise taps tap-major, padded with zeros to cp, a multiple of 32 channels, in blocks of 32
channels (``blocked``).
"""

from __future__ import annotations

import math

import numpy as np

import graphdef as gd
from graphdef.builder import Tensor
from graphdef.errors import ShapeError
from graphdef.ir import Graph, TensorType
from graphdef.ops._util import check_dtype
from graphdef.ops.conv import conv_ref
from graphdef.ops.fused import run_program
from graphdef.registry import KERNEL, Attr, Example, Sample, defop, get_op

from ... import passes
from ...render.plans import depthwise_geom
from ...render.splits import TRANSCENDENTAL, Split, work
from .epilogue import program_context
from .gemm_ops import _INTERNAL, _fixed
from .op_table import Call, kernel
from .ops.nn import dw_split
from .sgemm import plan_of, unpack_a

LANES, CELLS, WHOLE = 32, 8, 16384
"""runtime_c/kernels/pointwise_depthwise.h's FC_PWDW_LANES (channels of an item; weights are padded to a
multiple) and FC_PWDW_CELLS (output cells summed at once); the floats of the largest
whole-plane ring (``_ring``)."""

ISAS = ("avx512",)
"""Where ``fuse`` merges: measured there (the kernel is plain fc_vf code and runs on any)."""

MIN_PLANE = 196
"""The smallest input plane (positions) merged: EfficientNet-B0's blocks, merged against apart
(alternated profiled builds, one thread): 112x112 and 56x56 0.81-0.96, 28x28 0.91-1.04, 14x14
0.85-0.91, but 7x7 1.10-1.16 (192 -> 1152 channels: each pass over the image's 49 positions
re-reads its 37 KB and its 24 KB of weights, more than L1 holds)."""


# ----------------------------------------------------------------------------- the pass
def fuse(graph: Graph, isa: str, threads: int = 1) -> Graph:
    """Merge each 1x1 expansion (``conv_gemm``, ``direct``) into the depthwise conv that is its
    one consumer, as a ``pwdw`` node, where ``isa`` is one of ``ISAS``; the graph unchanged
    elsewhere. With several ``threads`` an item's output rows are split into ``bands``. A mean
    over the planes of the depthwise conv's output (squeeze-and-excitation) becomes the merged
    node's second output where an item is one band."""
    if isa not in ISAS:
        return graph
    consumers = passes.consumers(graph)
    controlled = {c for n in graph.nodes for c in n.control_inputs}
    outputs = {r.node for r in graph.declared_outputs}
    merge = {}
    for d in graph.nodes:
        e = _expansion(graph, d)
        if (
            e is None
            or consumers[e.name] != [d.name]
            or e.name in outputs | controlled
            or e.device != d.device
        ):
            continue
        operands, attrs = _operands(graph, e, d)
        attrs["bands"] = bands(d.outputs[0].shape, attrs["cexp"], threads, attrs)
        means = [graph.node(c) for c in consumers[d.name] if _plane_mean(graph.node(c), d)]
        mean = means[0] if means and attrs["bands"] == 1 and means[0].name not in controlled else None
        attrs["mean"] = mean is not None
        merge[d.name] = (e, mean, operands, attrs)

    def make(rb, node, merged):
        e, mean, operands, attrs = merged
        with rb.building(node):
            x = Tensor(rb.new, rb.refs[e.inputs[0]])
            out = gd.apply("pwdw", [x, *(gd.constant(v) for v in operands)], None, **attrs)
        if mean is None:
            rb.bind(node, [out.ref])
        else:
            rb.bind(node, [out[0].ref])
            rb.bind(mean, [out[1].ref])

    absorbed = {e.name for e, *_ in merge.values()} | {m.name for _, m, *_ in merge.values() if m is not None}
    return passes.merge_nodes(graph, merge, absorbed, make)


def _plane_mean(node, d) -> bool:
    """Whether ``node`` is the mean of each output plane of ``d``, kept as (n, c, 1, 1)."""
    return (
        node.op == "reduce_mean"
        and node.inputs[0] == d.ref()
        and tuple(node.attrs["axes"]) == (2, 3)
        and node.attrs["keepdims"]
        and node.device == d.device
    )


def _activation(node) -> tuple:
    """The node's epilogue if it reads nothing but the product (an activation), () for none,
    None for one with other inputs."""
    epi = node.attrs["epilogue"] if "epilogue" in node.attrs else ()
    if not epi:
        return ()
    return epi if not epi[2] else None


def _dw_inputs(d) -> list:
    """x, w and the bias if any of depthwise conv ``d`` (a ``dwconv``: without its epilogue's)."""
    return dw_split(d.inputs, d.attrs)[0] if d.op == "dwconv" else list(d.inputs)


def padded(cexp: int) -> int:
    """cp: ``cexp`` channels padded to whole items of ``LANES``."""
    return -(-cexp // LANES) * LANES


def _expansion(graph: Graph, d):
    """The 1x1 conv_gemm that depthwise conv ``d`` (a ``dwconv`` or ``conv``) reads, where the two
    merge; else None."""
    if d.op not in ("dwconv", "conv"):
        return None
    conv_in = _dw_inputs(d)
    if len(conv_in) > 3:
        return None
    types = [graph.type_of(r) for r in conv_in]
    geom = depthwise_geom(types, d.outputs, d.attrs)
    if geom is None or geom["m"] != geom["c"] or types[0].rank != 4 or _activation(d) is None:
        return None
    if any(passes.constant_value(graph, r) is None for r in conv_in[1:]):
        return None
    e = graph.node(conv_in[0].node)
    if e.op != "conv_gemm" or not e.attrs["direct"] or e.attrs["group"] != 1 or _activation(e) is None:
        return None
    x = graph.type_of(e.inputs[0])
    if (
        any(passes.constant_value(graph, r) is None for r in e.inputs[1:])
        or x.rank != 4
        or math.prod(x.shape[2:]) < MIN_PLANE
    ):
        return None
    return e


def _pad(a: np.ndarray, cp: int) -> np.ndarray:
    """``a`` with its last axis padded with zeros to ``cp``."""
    out = np.zeros(a.shape[:-1] + (cp,), np.float32)
    out[..., : a.shape[-1]] = a
    return out


def blocked(a: np.ndarray, cp: int) -> np.ndarray:
    """(rows, channels) ``a`` padded to ``cp`` channels, as (cp / LANES, rows, LANES) blocks."""
    return _pad(a, cp).reshape(a.shape[0], cp // LANES, LANES).transpose(1, 0, 2).copy()


def unblocked(a: np.ndarray, cexp: int) -> np.ndarray:
    """The (rows, cexp) of ``blocked``."""
    a = np.asarray(a, np.float32)
    return a.transpose(1, 0, 2).reshape(a.shape[1], -1)[:, :cexp]


def _operands(graph: Graph, e, d) -> tuple[list[np.ndarray], dict]:
    """The merged node's constant operands (w1, b1, w2, b2: padded, in the kernel's layouts) and
    attributes, from expansion ``e`` and depthwise conv ``d``."""
    plan = plan_of(e.attrs)
    cexp = plan.m
    cp = padded(cexp)
    w1 = unpack_a(np.asarray(passes.constant_value(graph, e.inputs[1])).reshape(-1), plan)  # (cexp, cin)
    b1 = passes.constant_value(graph, e.inputs[2]) if plan.bias else np.zeros(cexp, np.float32)
    conv_in = _dw_inputs(d)
    w2 = np.asarray(passes.constant_value(graph, conv_in[1]), np.float32)  # (cexp, 1, kh, kw)
    b2 = passes.constant_value(graph, conv_in[2]) if len(conv_in) == 3 else np.zeros(cexp, np.float32)
    operands = [
        blocked(w1.T, cp),
        _pad(np.asarray(b1, np.float32).reshape(cexp), cp),
        blocked(w2.reshape(cexp, -1).T, cp),
        _pad(np.asarray(b2, np.float32).reshape(cexp), cp),
    ]
    attrs = {
        "cexp": cexp,
        "kernel": tuple(w2.shape[2:]),
        "strides": d.attrs["strides"],
        "pads": d.attrs["pads"],
        "dilations": d.attrs["dilations"],
        "act1": _activation(e),
        "act2": _activation(d),
    }
    return operands, attrs


def bands(out: tuple, cexp: int, threads: int, attrs) -> int:
    """Bands of output rows an item is split into, so that ``threads`` parts get even work: the
    count (1 to 8) of least cost, the largest part's units over the average times the rows
    computed again ((kh - 1) * dh + 1 - sh input rows a band past the first). EfficientNet-B0's
    96-channel expansion (3 items of 32 channels) at two threads: 2 bands (items 2 and 1 were
    1.33x the average); its 480-channel 14x14 ones, 15 items: 1 (2 bands: 2 of 14 output rows
    again)."""
    items = out[0] * -(-cexp // LANES)
    (kh, _), (sh, _), (dh, _) = attrs["kernel"], attrs["strides"], attrs["dilations"]
    again = max(0, (kh - 1) * dh + 1 - sh) / (out[2] * sh)

    def cost(b):
        units = items * b
        return -(-units // threads) / (units / threads) * (1 + again * (b - 1))

    return min(range(1, min(8, out[2]) + 1), key=cost) if threads > 1 else 1


# ----------------------------------------------------------------------------- the op
def _dw_attrs(attrs, cexp: int) -> dict:
    return {
        "strides": attrs["strides"],
        "pads": attrs["pads"],
        "dilations": attrs["dilations"],
        "group": cexp,
    }


def _infer(types, attrs):
    for t in types:
        check_dtype(t, ("float32",))
    x, w1, b1, w2, b2 = types
    cexp, taps = attrs["cexp"], math.prod(attrs["kernel"])
    cp = padded(cexp)
    if x.rank != 4 or len(attrs["kernel"]) != 2:
        raise ShapeError(f"pwdw takes 2-D images, got x {x.shape}")
    want = ((cp // LANES, x.shape[1], LANES), (cp,), (cp // LANES, taps, LANES), (cp,))
    if tuple(t.shape for t in (w1, b1, w2, b2)) != want:
        raise ShapeError(
            f"pwdw weights {[t.shape for t in (w1, b1, w2, b2)]}, the geometry needs {list(want)}"
        )
    e = TensorType((x.shape[0], cexp) + x.shape[2:], "float32")
    w = TensorType((cexp, 1) + tuple(attrs["kernel"]), "float32")
    y = get_op("conv").infer([e, w], _dw_attrs(attrs, cexp))
    return (y, TensorType(y.shape[:2] + (1, 1), "float32")) if attrs["mean"] else y


def _act(program, value, facet: str):
    return run_program(program[0], [value], facet) if program else value


def _ref(xs, attrs):
    x, w1, b1, w2, b2 = (np.asarray(v, np.float32) for v in xs)
    cexp = attrs["cexp"]
    e = np.einsum("nkhw,kc->nchw", x.astype(np.float64), unblocked(w1, cexp).astype(np.float64))
    e = (e + b1[:cexp].reshape(1, cexp, 1, 1)).astype(np.float32)
    e = _act(attrs["act1"], e, "ref")
    w = unblocked(w2, cexp).T.reshape((cexp, 1) + tuple(attrs["kernel"]))
    y = conv_ref([e, w, b2[:cexp]], _dw_attrs(attrs, cexp)).astype(np.float32)
    y = _act(attrs["act2"], y, "ref")
    return (
        (y, y.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(np.float32)) if attrs["mean"] else y
    )


_RELU = ((("relu", (0,), ()),), 0, ())


def _example(x_shape, cexp, kernel, strides, pads, dilations=(1, 1), act1=(), act2=(), bands=1, mean=False):
    cin, taps = x_shape[1], math.prod(kernel)
    cp = padded(cexp)
    inputs = (
        Sample(x_shape),
        blocked(_fixed(cin, cexp, seed=31), cp),
        _pad(_fixed(cexp, seed=32), cp),
        blocked(_fixed(taps, cexp, seed=33), cp),
        _pad(_fixed(cexp, seed=34), cp),
    )
    attrs = {"cexp": cexp, "kernel": kernel, "strides": strides, "pads": pads, "dilations": dilations,
             "act1": act1, "act2": act2, "bands": bands, "mean": mean}  # fmt: skip
    return Example(inputs, attrs, None, grad=False)


defop(
    "pwdw",
    ("x", "w1", "b1", "w2", "b2"),
    _infer,
    _ref,
    _INTERNAL,
    attrs={
        "cexp": Attr("int"),
        "kernel": Attr("ints"),
        "strides": Attr("ints"),
        "pads": Attr("ints"),
        "dilations": Attr("ints"),
        "act1": Attr("any", ()),
        "act2": Attr("any", ()),
        "bands": Attr("int", 1),
        "mean": Attr("bool", False),
    },
    kind=KERNEL,
    flops=lambda ins, outs, attrs: (
        2 * attrs["cexp"] * math.prod(ins[0].shape[2:]) * ins[0].shape[1]
        + 2 * outs[0].size * math.prod(attrs["kernel"])
    ),
    doc="float32 1x1 expansion conv with its activation, then a depthwise conv with its own, as one "
    "step (runtime_c/kernels/pointwise_depthwise.h): inputs x, the expansion's weights "
    "(cp / 32, cin, 32) and bias (cp), the depthwise taps (cp / 32, kh * kw, 32) and bias (cp), "
    "cp being cexp padded to a multiple of 32",
    examples=(
        # 20 channels (a partial block), 3x3 stride 2, padded, activations, the planes' means; two
        # images
        _example((2, 3, 7, 9), 20, (3, 3), (2, 2), (1, 1, 1, 1), act1=_RELU, act2=_RELU, mean=True),
        # 5x5, uneven pads, a plane too large for a whole-plane ring (rows of one window), in 3
        # bands of output rows
        _example((1, 4, 40, 37), 16, (5, 5), (1, 1), (2, 1, 2, 3), bands=3),
        # dilation 2, stride 3 (rows between the windows skipped), rows shorter than a group
        _example((1, 2, 11, 5), 17, (3, 2), (3, 1), (0, 1, 0, 0), dilations=(2, 1), act2=_RELU),
    ),
)


# ----------------------------------------------------------------------------- C lowering
def _geom(s) -> dict:
    """fc_pwdw_geom, with the ring's size (``_ring``)."""
    x, attrs = s.ins[0], s.attrs
    (oh, ow), (kh, kw) = s.outs[0].shape[2:], attrs["kernel"]
    rows, cells = _ring(x.shape, s.outs[0].shape, attrs)
    return {
        "n": x.shape[0], "cin": x.shape[1], "cexp": attrs["cexp"], "cp": padded(attrs["cexp"]),
        "h": x.shape[2], "w": x.shape[3], "oh": oh, "ow": ow, "kh": kh, "kw": kw,
        "sh": attrs["strides"][0], "sw": attrs["strides"][1], "ph": attrs["pads"][0], "pw": attrs["pads"][1],
        "dh": attrs["dilations"][0], "dw": attrs["dilations"][1], "bands": attrs["bands"],
        "rows": rows, "cells": cells,
    }  # fmt: skip


def _ring(x_shape, out_shape, attrs) -> tuple[int, int]:
    """The ring's rows and cells a row (runtime_c/kernels/pointwise_depthwise.h): a row holds the window's
    columns, the slack the last block of CELLS output cells reads past them and every input
    column (rows are expanded whole); a plane of at most WHOLE floats of cells keeps all its
    padded rows (expanded as one run: a 7x7 plane's rows are shorter than a group of expanded
    cells), others the rows of one window."""
    (oh, ow), (kh, kw) = out_shape[2:], attrs["kernel"]
    (sh, sw), (dh, dw), pw = attrs["strides"], attrs["dilations"], attrs["pads"][1]
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    cells = max(wp, (-(-ow // CELLS) * CELLS - 1) * sw + (kw - 1) * dw + 1, pw + x_shape[3])
    return (hp if hp * cells * LANES <= WHOLE else (kh - 1) * dh + 1), cells


def _scratch_floats(ins, outs, attrs) -> int:
    """fc_pwdw_scratch_floats: the ring and the output cells of an item's channels."""
    rows, cells = _ring(ins[0].shape, outs[0].shape, attrs)
    (oh, ow) = outs[0].shape[2:]
    return LANES * (rows * cells + oh * ow)


def _split(ins, outs, attrs):
    """Units (image, block of 32 channels, band of output rows): the expansion's and the taps'
    multiply-adds, the activations' work on every expanded and output value."""
    x = ins[0]
    expanded = x.shape[0] * attrs["cexp"] * math.prod(x.shape[2:])
    ops = expanded * (2 * x.shape[1] + TRANSCENDENTAL * bool(attrs["act1"]))
    ops += outs[0].size * (2 * math.prod(attrs["kernel"]) + TRANSCENDENTAL * bool(attrs["act2"]))
    return Split(x.shape[0] * padded(attrs["cexp"]) // LANES * attrs["bands"], work([x], outs, ops))


@kernel("pwdw", scratch=lambda ins, outs, attrs, isa: 4 * _scratch_floats(ins, outs, attrs), split=_split)
def _pwdw(s):
    """fc_pwdw_f32 on the step's items, the activations as epilogue functions of a row
    (templates/c/ops/pwdw*.j2)."""
    g = _geom(s)
    e = TensorType((g["n"], g["cexp"], g["h"], g["w"]), "float32")
    acts = [
        program_context(s.attrs[a], [], t) if s.attrs[a] else None
        for a, t in (("act1", e), ("act2", s.outs[0]))
    ]
    k = {
        "g": g,
        "acts": acts,
        "args": [
            *s.x,
            s.y[0],
            s.y[1] if s.attrs["mean"] else "NULL",
            "&g",
            "(float *)scratch",
            *s.span(g["n"] * g["cp"] // LANES * g["bands"]),
        ]
        + [f"{s.func}_act{i + 1}_epi" if a else "NULL" for i, a in enumerate(acts)],
    }
    return Call("pwdw", k, ("kernels/pointwise_depthwise.h",), prelude="pwdw")
