"""Direct convolution on register tiles for the C backend (``conv_direct``,
runtime_c/kernels/conv_tiles.h): a float32 2-D convolution of one group, with no im2col copy.

Each output tile is R consecutive positions of one output row (R <= 14 on AVX-512) times NR
output channels (two vectors), summed in registers over every (input channel, kernel row,
kernel column) tap: the input value broadcast from a zero-padded copy of the image, the NR
weights of the tap loaded as vectors (packed here: blocks of NR output channels, tap-major,
``pack``). The tile is transposed in registers into the NCHW output and biased; the step's
epilogue runs on runs of whole output rows of a channel block (at least 64 positions) while
they are in L1.

Where it is chosen (``eligible``, ``lowering.lower_linear``): convolutions that would
otherwise run im2col + GEMM (kernels larger than 1x1, not Winograd) whose padded copy takes at
most ``MAX_COPY`` floats. There the im2col copy and its packing cost as much as the products on
small planes (a 64 -> 64 3x3 conv on 8x8: 60 us by im2col + GEMM, of which 30 in the copy and
packing; 33 us here, one AVX-512 core), and a product over a slice of few rows (M = 64 output
channels, K = 147 taps) spends a tenth of its time packing on large ones: a ResNet's 7x7 stem
on 224x224, 3 -> 64 channels, ran 1.22-1.33x onnxruntime's time by im2col + GEMM and 0.99-1.06x
here; a 5x5 conv, 32 -> 64 channels on 64x64, 1.37-1.44x and 1.06-1.14x (run-by-run pairs, one
thread); a 3x3 stride-2 one, 32 -> 64 channels from 112x112, 1.17x and 0.95x.
"""

from __future__ import annotations

import math

import numpy as np

from graphdef.errors import ShapeError
from graphdef.ir import TensorType
from graphdef.ops._util import check_dtype
from graphdef.ops.conv import conv_ref
from graphdef.registry import KERNEL, Attr, Example, Sample, defop

from .epilogue import epilogue_context
from .gemm_ops import _INTERNAL, PRODUCT_ATTRS, _check_epilogue, _epilogue, _fixed
from .gemm_steps import item_parts, run_parts
from .op_table import Call, kernel
from .sgemm import tile

MAX_COPY = 1 << 21
"""The largest padded copy of an image (floats, 8 MiB) that the direct kernel makes per part;
larger inputs keep im2col, whose slices of a few output rows bound its scratch."""

ISAS = ("avx512",)
"""Where it is built: the tile store transposes 16 x 16 blocks in AVX-512 registers; with 16
vector registers the tiles would be 6 positions wide, and im2col + GEMM stays."""


def eligible(x_shape, w_shape, out, attrs, isa: str) -> bool:
    """Whether ``conv_direct`` computes this float32 conv (input ``x_shape``, weights
    ``w_shape``, output plane ``out``) on ``isa``: 2-D, one group, no dilation, a padded copy
    of at most ``MAX_COPY`` floats, a kernel larger than 1x1 (a strided 1x1's im2col is a small
    subsampled copy, and its product ran 13-19% faster than the tiles: 256 -> 512 channels,
    14x14 -> 7x7)."""
    return (
        isa in ISAS
        and len(x_shape) == 4
        and attrs["group"] == 1
        and tuple(attrs["dilations"]) == (1, 1)
        and math.prod(out) > 0
        and math.prod(w_shape[2:]) > 1
        and x_shape[1] * math.prod(_padded(out, w_shape[2:], attrs["strides"])) <= MAX_COPY
    )


def pack(w, nr: int) -> np.ndarray:
    """Weights (M, C, KH, KW) as blocks of ``nr`` output channels, tap-major, the last block
    padded with zeros: wp[((cb * C + c) * KH + t0) * KW + t1][co] (float32, 1-D).

    >>> pack(np.arange(8.0).reshape(2, 1, 2, 2), 4).reshape(-1, 4)[0]
    array([0., 4., 0., 0.], dtype=float32)
    """
    w = np.asarray(w, np.float32)
    m = w.shape[0]
    blocks = -(-m // nr)
    full = np.zeros((blocks * nr,) + w.shape[1:], np.float32)
    full[:m] = w
    return np.ascontiguousarray(full.reshape(blocks, nr, -1).transpose(0, 2, 1)).reshape(-1)


def unpack(wp, m: int, c: int, kernel, nr: int) -> np.ndarray:
    """The logical weights (M, C, KH, KW) of ``pack``'s layout."""
    taps = c * math.prod(kernel)
    blocks = -(-m // nr)
    w = np.asarray(wp).reshape(blocks, taps, nr).transpose(0, 2, 1).reshape(blocks * nr, taps)
    return w[:m].reshape((m, c) + tuple(kernel))


def lower(node, ins, w, bias, isa: str, estimates: tuple = ()):
    """``conv_direct``'s (op, operands, attrs) for a float32 conv with constant weights ``w``
    (and ``bias``, or None), or None where it is not ``eligible``; ``estimates``: the 3x3 cost
    model's, where it chose im2col over Winograd (winograd.choose), kept for ``flowc inspect``.
    ``w`` (and ``bias``) None: the node's own weights (and bias) computed at run time (a
    training step's variables), packed at run time by a ``pack_direct`` step."""
    x_t, w_t = ins[:2]
    out = tuple(node.outputs[0].shape[2:])
    if not eligible(x_t.shape, w_t.shape, out, node.attrs, isa):
        return None
    nr = tile(isa)[1]
    attrs = {
        "isa": isa,
        "nr": nr,
        "m": w_t.shape[0],
        "kernel": tuple(w_t.shape[2:]),
        "strides": tuple(node.attrs["strides"]),
        "pads": tuple(node.attrs["pads"]),
        "out": out,
        "bias": bias is not None,
        "estimates": estimates,
    }
    if w is None:
        attrs["bias"] = len(node.inputs) == 3
        operands = [node.inputs[0], ("pack_direct", [node.inputs[1]], {"nr": nr})] + list(node.inputs[2:3])
        return "conv_direct", operands, attrs
    operands = [node.inputs[0], pack(w, nr)]
    if bias is not None:
        operands.append(np.asarray(bias, np.float32))
    return "conv_direct", operands, attrs


def _pack_infer(types, attrs):
    (w,) = types
    check_dtype(w, ("float32",))
    nr = attrs["nr"]
    return TensorType((-(-w.shape[0] // nr) * nr * math.prod(w.shape[1:]),), "float32")


defop(
    "pack_direct",
    ("w",),
    _pack_infer,
    lambda xs, attrs: pack(xs[0], attrs["nr"]),
    _INTERNAL,
    attrs={"nr": Attr("int")},
    kind=KERNEL,
    doc="float32 conv weights (M, C, *K) in conv_direct's layout (``pack``), at run time",
    examples=(Example((Sample((35, 2, 3, 3)),), {"nr": 32}, None, grad=False),),
)


@kernel("pack_direct")
def _pack_direct(s):
    w = s.ins[0]
    k = {"m": w.shape[0], "taps": math.prod(w.shape[1:]), "nr": s.attrs["nr"],
         "blocks": -(-w.shape[0] // s.attrs["nr"])}  # fmt: skip
    return Call("pack_direct", k)


# ----------------------------------------------------------------------------- the op
def _split(xs, attrs):
    k = 3 if attrs["bias"] else 2
    return list(xs[:k]), list(xs[k:])


def _padded(out, kernel, strides) -> tuple[int, int]:
    """Rows and columns of the padded copy of an image: what the output plane ``out`` reads."""
    (oh, ow), (kh, kw), (sh, sw) = out, kernel, strides
    return (oh - 1) * sh + kh, (ow - 1) * sw + kw


def _infer(types, attrs):
    conv_in, extras = _split(types, attrs)
    for t in conv_in:
        check_dtype(t, ("float32",))
    x = conv_in[0]
    m, nr, kernel = attrs["m"], attrs["nr"], attrs["kernel"]
    if x.rank != 4 or len(kernel) != 2:
        raise ShapeError(f"conv_direct takes 2-D images, got x {x.shape}")
    taps = x.shape[1] * math.prod(kernel)
    if conv_in[1].size != -(-m // nr) * nr * taps:
        raise ShapeError(
            f"packed weights hold {conv_in[1].size} values, {m} channels of {taps} taps need more"
        )
    (oh, ow), (sh, sw), pads = attrs["out"], attrs["strides"], attrs["pads"]
    if (oh, ow) != tuple(
        (x.shape[2 + i] + pads[i] + pads[2 + i] - kernel[i]) // attrs["strides"][i] + 1 for i in (0, 1)
    ):
        raise ShapeError(
            f"output plane {(oh, ow)} is not that of a {kernel} conv of {x.shape} "
            f"(strides {(sh, sw)}, pads {pads})"
        )
    out = TensorType((x.shape[0], m, oh, ow), "float32")
    return _check_epilogue(out, extras, attrs)


def _ref(xs, attrs):
    conv_in, extras = _split(xs, attrs)
    x = conv_in[0]
    w = unpack(conv_in[1], attrs["m"], x.shape[1], attrs["kernel"], attrs["nr"])
    conv_attrs = {"strides": attrs["strides"], "pads": attrs["pads"], "dilations": (1, 1), "group": 1}
    y = conv_ref([x, w] + conv_in[2:], conv_attrs).astype(np.float32)
    return _epilogue(y, extras, attrs, "ref")


def _example(x_shape, w, strides, pads, bias=False):
    m, c = w.shape[:2]
    kernel = w.shape[2:]
    out = tuple((x_shape[2 + i] + pads[i] + pads[2 + i] - kernel[i]) // strides[i] + 1 for i in (0, 1))
    nr = tile("avx512")[1]
    attrs = {"isa": "avx512", "nr": nr, "m": m, "kernel": kernel, "strides": strides, "pads": pads,
             "out": out, "bias": bias}  # fmt: skip
    inputs = (Sample(x_shape), pack(w, nr)) + ((Sample((m,)),) if bias else ())
    return Example(inputs, attrs, None, grad=False)


defop(
    "conv_direct",
    ("x", "w", "more*?"),
    _infer,
    _ref,
    _INTERNAL,
    attrs={
        "epilogue": PRODUCT_ATTRS["epilogue"],
        "parts": PRODUCT_ATTRS["parts"],
        "isa": Attr("str"),
        "nr": Attr("int"),
        "m": Attr("int"),
        "kernel": Attr("ints"),
        "strides": Attr("ints"),
        "pads": Attr("ints"),
        "out": Attr("ints"),
        "bias": Attr("bool", False),
        "estimates": Attr("any", ()),
    },
    kind=KERNEL,
    flops=lambda ins, outs, attrs: 2 * outs[0].size * ins[0].shape[1] * math.prod(attrs["kernel"]),
    doc="float32 2-D convolution of one group on register tiles (runtime_c/kernels/conv_tiles.h): "
    "inputs x, the weights packed by direct.pack, then bias if ``bias``, then epilogue inputs",
    examples=(
        # 35 output channels (a partial block), 3x3, padded, bias, two images
        _example((2, 3, 6, 7), _fixed(35, 3, 3, 3, seed=21), (1, 1), (1, 1, 1, 1), bias=True),
        # stride 2, uneven pads, 16 positions a row (two tiles)
        _example((1, 2, 9, 33), _fixed(4, 2, 3, 2, seed=22), (2, 2), (0, 1, 1, 0)),
        # stride 3 (the run-time stride tile)
        _example((1, 5, 8, 8), _fixed(7, 5, 2, 2, seed=23), (3, 3), (0, 0, 0, 0)),
    ),
)


# ----------------------------------------------------------------------------- C lowering
def _scratch_floats(x_shape, attrs) -> int:
    """fc_cd_scratch_floats: the padded copy of an image and its tap offsets."""
    hp, wp = _padded(attrs["out"], attrs["kernel"], attrs["strides"])
    return x_shape[1] * hp * wp + x_shape[1] * math.prod(attrs["kernel"])


def _scratch(ins, outs, attrs, isa):
    """One padded copy a part."""
    return 4 * _scratch_floats(ins[0].shape, attrs) * max(attrs["parts"], 1)


@kernel("conv_direct", scratch=_scratch)
def _conv_direct(s):
    """Per image, over the parts: each part its own padded copy, then its items (output channel
    block, output row), block-major, or (``row_split``) its output rows of every block from the
    rows of the copy they read (templates/c/ops/conv_direct*.j2). A copy made once by the
    calling thread had the other threads read all of it from that core's cache, tap by tap: the
    small ResNet at two threads 356 -> 306 us with a copy a part (read from the input, half of
    it in the part's own core's cache, as a stream)."""
    x, attrs = s.ins[0], s.attrs
    first = 3 if attrs["bias"] else 2
    epi = epilogue_context(s.node, s.ins, first)
    extras = epi["extras"] if epi else []
    layouts = attrs["epilogue"][2] if attrs["epilogue"] else ()
    (oh, ow), (kh, kw), (sh, sw), pads = attrs["out"], attrs["kernel"], attrs["strides"], attrs["pads"]
    hp, wp = _padded(attrs["out"], attrs["kernel"], attrs["strides"])
    blocks = -(-attrs["m"] // attrs["nr"])
    # parts split the output rows where the padded copy is larger than the weights (each part
    # then pads only the rows it reads), else the channel blocks (each part its blocks' weights)
    row_split = attrs["parts"] > 1 and hp * wp > attrs["m"] * kh * kw
    items = oh if row_split else blocks * oh
    split = item_parts(items, min(attrs["parts"], items))  # every part some items
    k = {
        "epi": epi,
        "epi_extras": extras,
        "epi_fn": f"{s.func}_epi" if epi else "NULL",
        "epi_inputs": ", ".join(s.x[first + q["i"]] for q in extras) or "NULL",
        "e_n": [lay[2][1] for lay in layouts],
        "bias": s.x[2] if attrs["bias"] else "NULL",
        "n": x.shape[0],
        "nr": attrs["nr"],
        "c": x.shape[1],
        "m": attrs["m"],
        "h": x.shape[2],
        "w": x.shape[3],
        "oh": oh,
        "ow": ow,
        "kh": kh,
        "kw": kw,
        "sh": sh,
        "sw": sw,
        "ph": pads[0],
        "pw": pads[1],
        "hp": hp,
        "wp": wp,
        "x_image": x.size // x.shape[0],
        "y_image": attrs["m"] * oh * ow,
        "row_split": row_split,
        "first": split["first"],
        "end": split["end"],
        "run_parts": run_parts(s.func, split["runs"]),
    }
    parallel = split["runs"] > 1
    return Call("conv_direct", k, ("kernels/conv_tiles.h",), prelude="conv_direct", parallel=parallel)
