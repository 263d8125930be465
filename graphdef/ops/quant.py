"""Integer kernels of quantized models (TFLite's integer scheme, the facts written anew).

``qconv``: a 2-D convolution (channels-first; any group, so depthwise and 1x1 too, and a fully
connected layer as one on 1x1 planes) of int8/uint8 ``x`` and int8 ``w``: int32 sums of
``(x - x_zero) * w`` (padding adds nothing), plus an int32 bias, times a fixed-point
multiplier per output channel (``multiplier`` * 2**(``shift`` - 31), shift <= 0), plus
``y_zero``, clamped to [``lo``, ``hi``] (the fused activation), in x's type. Weights stay int8
(a quarter of float32's bytes) and activations int8/uint8.

``requantize`` is the fixed-point product every backend computes alike: the high half of the
doubled 64-bit product rounded half away from zero, then a rounding arithmetic right shift by
``-shift`` (TFLite's MultiplyByQuantizedMultiplier for multipliers below one, as LiteRT's
convolutions compute it), or with ``rounding="single"`` the 64-bit product rounded once, halves
up (as LiteRT's fully connected layers compute it). With ``scale``
given instead (ONNX's QLinearConv), the sum and each multiplier in float32, their product in
float32 rounded half to even (onnxruntime's requantization: the same rounding step by step).
``w_layout`` (set by the C backend's lowering for Helium, never by an importer): w's data in
(M, kh, kw, C/group) order ("ohwi") or, for a depthwise convolution, (kh, kw, M) ("hwo"), its
declared shape still (M, C/group, kh, kw).
"""

from __future__ import annotations

import math

import numpy as np

from ..builder import apply, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import KERNEL, Attr, Example, NotDifferentiable, Sample, defop
from .conv import conv_ref
from .windows import _out_spatial

INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def _trunc_div(v: np.ndarray, d: int) -> np.ndarray:
    return np.where(v >= 0, v // d, -((-v) // d))


def requantize(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, rounding: str = "double"):
    """int64 ``acc`` (of int32 range) times ``multiplier`` * 2**(``shift`` - 31), both arrays
    broadcasting against it (multiplier in [0, 2**31), shift <= 0). ``rounding`` "double":
    gemmlowp's (the high half of the doubled product rounded half away from zero, then a shift
    rounded half away from zero; TFLite's convolutions); "single": the 64-bit product rounded
    once, halves up, by an arithmetic shift of 31 - shift (TFLite's fully connected layers)."""
    acc, q, right = np.asarray(acc, np.int64), np.asarray(multiplier, np.int64), -np.asarray(shift, np.int64)
    if rounding == "single":
        return np.right_shift(acc * q + np.left_shift(np.int64(1), 30 + right), 31 + right)
    ab = acc * q
    high = _trunc_div(ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30)), 1 << 31)
    mask = np.left_shift(np.int64(1), right) - 1
    threshold = np.right_shift(mask, 1) + (high < 0)
    return np.right_shift(high, right) + (np.bitwise_and(high, mask) > threshold)


_QCONV_ATTRS = {
    "strides": Attr("ints", (1, 1)),
    "pads": Attr("ints", (0, 0, 0, 0)),
    "dilations": Attr("ints", (1, 1)),
    "group": Attr("int", 1),
    "x_zero": Attr("int", 0),
    "y_zero": Attr("int", 0),
    "multiplier": Attr("ints", (0,)),  # one, or one per output channel
    "shift": Attr("ints", (0,)),
    "scale": Attr("floats", ()),  # instead: float32 multipliers, the float32 product rounded half to even
    "rounding": Attr("str", "double", ("double", "single")),  # of the fixed-point product (requantize)
    "lo": Attr("int", -128),
    "hi": Attr("int", 127),
    "w_layout": Attr("str", "oihw", ("oihw", "ohwi", "hwo")),  # w's data order (see above)
}


def _qconv_infer(types, attrs):
    x, w = types[:2]
    if x.dtype not in INT_RANGES or w.dtype != "int8":
        raise ShapeError(f"qconv takes int8/uint8 x and int8 w, not {x.dtype} and {w.dtype}")
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"qconv is 2-D: x {list(x.shape)}, w {list(w.shape)}")
    g, m = attrs["group"], w.shape[0]
    if g < 1 or x.shape[1] != w.shape[1] * g or m % g:
        raise ShapeError(f"channels: input {x.shape[1]}, weight {w.shape[:2]}, group {g} do not match")
    if attrs["w_layout"] == "hwo" and w.shape[1] != 1:
        raise ShapeError(f"qconv's w_layout hwo is a depthwise convolution's, not that of w {list(w.shape)}")
    if len(types) == 3 and (types[2].shape != (m,) or types[2].dtype != "int32"):
        raise ShapeError(f"qconv's bias must be int32[{m}], not {types[2]}")
    for k in ("multiplier", "shift") + (("scale",) if attrs["scale"] else ()):
        if len(attrs[k]) not in (1, m):
            raise ShapeError(f"{k}: {len(attrs[k])} values for {m} output channels")
    if any(not (0.0 <= v <= float(np.finfo(np.float32).max)) for v in attrs["scale"]):
        raise ShapeError("qconv's scales are finite float32 values and not negative")
    if any(s > 0 for s in attrs["shift"]) or any(not 0 <= q < 1 << 31 for q in attrs["multiplier"]):
        raise ShapeError("qconv's multipliers are below one: shift <= 0, multiplier in [0, 2**31)")
    lo, hi = INT_RANGES[x.dtype]
    if not lo <= attrs["lo"] <= attrs["hi"] <= hi:
        raise ShapeError(f"bounds [{attrs['lo']}, {attrs['hi']}] outside {x.dtype}")
    if not (lo <= attrs["x_zero"] <= hi and lo <= attrs["y_zero"] <= hi):
        raise ShapeError(f"zero points {attrs['x_zero']}, {attrs['y_zero']} outside {x.dtype}")
    return TensorType((x.shape[0], m) + _out_spatial(x.shape[2:], w.shape[2:], attrs), x.dtype)


def qconv_ref(xs, attrs):
    x, w = xs[0].astype(np.int64) - attrs["x_zero"], xs[1].astype(np.int64)
    m, c, kh, kw = w.shape  # the declared shape; the data in w_layout's order
    if attrs.get("w_layout", "oihw") == "ohwi":
        w = w.reshape(m, kh, kw, c).transpose(0, 3, 1, 2)
    elif attrs.get("w_layout", "oihw") == "hwo":
        w = w.reshape(kh, kw, m).transpose(2, 0, 1).reshape(m, c, kh, kw)
    acc = conv_ref([x, w], attrs)  # exact in int64; the padding is 0 after the zero point
    m = w.shape[0]
    if len(xs) == 3:
        acc = acc + xs[2].astype(np.int64).reshape(1, m, 1, 1)
    per = (1, -1, 1, 1)
    if attrs["scale"]:  # in float32, rounded half to even (ONNX's QLinearConv as onnxruntime computes it)
        y = acc.astype(np.int32).astype(np.float32) * np.reshape(np.asarray(attrs["scale"], np.float32), per)
        y = np.rint(np.clip(y, attrs["lo"] - attrs["y_zero"], attrs["hi"] - attrs["y_zero"])).astype(np.int64)
    else:
        q, shift = np.reshape(attrs["multiplier"], per), np.reshape(attrs["shift"], per)
        y = requantize(acc, q, shift, attrs["rounding"])
    return np.clip(y + attrs["y_zero"], attrs["lo"], attrs["hi"]).astype(xs[0].dtype)


def _qconv_flops(ins, outs, attrs):
    return 2 * outs[0].size * math.prod(ins[1].shape[1:])


def _x(shape, dtype="int8"):
    return Sample(shape, dtype, *INT_RANGES[dtype])


def _w(shape):
    return Sample(shape, "int8", -127, 127)


def _example(x, w, m, seed, **attrs):
    """A qconv case: ``m`` output channels, multipliers and shifts from ``seed``, a bias."""
    rng = np.random.default_rng(seed)
    q = tuple(int(v) for v in rng.integers(1 << 30, 1 << 31, m))
    s = tuple(int(v) for v in rng.integers(-11, -6, m))
    return Example((x, w, Sample((m,), "int32", -5000, 5000)), {"multiplier": q, "shift": s, **attrs})


defop(
    "qconv",
    ("x", "w", "b?"),
    _qconv_infer,
    qconv_ref,
    NotDifferentiable("a quantized convolution is for inference"),
    attrs=_QCONV_ATTRS,
    flops=_qconv_flops,
    kind=KERNEL,
    doc="int8/uint8 2-D convolution with int32 sums and bias, requantized in fixed point per output "
    "channel to x's type (TFLite's integer scheme); x (N, C, H, W), w int8 (M, C/group, KH, KW)",
    examples=(
        # 3x3, padded, per-channel multipliers, a ReLU's bounds
        _example(
            _x((1, 3, 6, 7)), _w((5, 3, 3, 3)), 5, 1, pads=(1, 1, 1, 1), x_zero=-3, y_zero=5, lo=-128 + 9
        ),
        # depthwise, strided, multiplier 2, uint8
        _example(
            _x((2, 4, 7, 7), "uint8"),
            _w((8, 1, 3, 3)),
            8,
            2,
            strides=(2, 2),
            pads=(1, 0, 1, 1),
            group=4,
            x_zero=128,
            y_zero=120,
            lo=0,
            hi=255,
        ),
        # 1x1 (a fully connected layer on 1x1 planes), one multiplier for all channels
        Example(
            (_x((3, 16, 1, 1)), _w((10, 16, 1, 1))),
            {"multiplier": (1518500250,), "shift": (-8,), "x_zero": 2, "y_zero": -1},
        ),
        # float multipliers rounded half to even (ONNX's QLinearConv), uint8, 2x2 stride 2
        Example(
            (_x((1, 3, 6, 6), "uint8"), _w((4, 3, 2, 2)), Sample((4,), "int32", -5000, 5000)),
            {
                "scale": (0.0025, 0.004, 0.001953125, 0.0031),
                "strides": (2, 2),
                "x_zero": 130,
                "y_zero": 128,
                "lo": 0,
                "hi": 255,
            },
        ),
        # dilated, grouped
        _example(_x((1, 4, 8, 8)), _w((6, 2, 3, 2)), 6, 3, dilations=(2, 1), group=2, pads=(0, 1, 2, 0)),
        # planes of 32 outputs and more (the dot-product form where the machine has one): 1x1,
        # uint8 with its zero point at the top, 7 channels (a block and a part), 81 positions
        _example(_x((1, 20, 9, 9), "uint8"), _w((7, 20, 1, 1)), 7, 4, x_zero=255, y_zero=3, lo=0, hi=255),
        # 3x3 stride 2, padded, int8 zero point at the bottom, K = 45 (not a multiple of 4), 2 images
        _example(_x((2, 5, 12, 13)), _w((9, 5, 3, 3)), 9, 5, strides=(2, 2), pads=(1, 1, 0, 1), x_zero=-128),
        # one output position whose window reads padding, K = 270 (a dense layer's dot products)
        _example(_x((2, 30, 3, 3)), _w((10, 30, 3, 3)), 10, 6, strides=(2, 1), pads=(1, 0, 0, 0), x_zero=5),
        # 552 positions: the dot-product form's rows 11 at a time (the last 2), uint8
        _example(_x((1, 4, 24, 23), "uint8"), _w((6, 4, 3, 3)), 6, 7, pads=(1, 1, 1, 1), x_zero=17, lo=0,
                 hi=255),
        # float multipliers, dilated, 64 positions
        Example(
            (_x((1, 3, 10, 12)), _w((5, 3, 2, 3)), Sample((5,), "int32", -5000, 5000)),
            {"scale": (0.002, 0.0031, 0.0045, 0.001, 0.0027), "dilations": (2, 2), "x_zero": 127,
             "y_zero": -4},
        ),
        # depthwise 3x3 keeping the plane (the flat form: stride 1, ow == w), 2 images, x_zero -128
        _example(_x((2, 6, 9, 5)), _w((6, 1, 3, 3)), 6, 8, pads=(1, 1, 1, 1), group=6, x_zero=-128,
                 y_zero=-128, lo=-128, hi=127),
        # the flat form with a channel multiplier of 2, dilation 2, pads 1 left and 3 right, uint8,
        # float multipliers, 110 positions
        Example(
            (_x((1, 3, 11, 10), "uint8"), _w((6, 1, 3, 3)), Sample((6,), "int32", -5000, 5000)),
            {"scale": (0.002, 0.0031, 0.0045, 0.001, 0.0027, 0.0019), "dilations": (2, 2), "group": 3,
             "pads": (2, 1, 2, 3), "x_zero": 3, "y_zero": 250, "lo": 0, "hi": 255},
        ),
        # the flat form, 1x5 taps all left of the output (pads 4 left, 0 right), 148 positions
        _example(_x((1, 2, 4, 37)), _w((2, 1, 1, 5)), 2, 9, pads=(0, 4, 0, 0), group=2, x_zero=127, y_zero=0),
        # a dense layer rounding its fixed-point product once (TFLite's fully connected layers)
        _example(_x((4, 128, 1, 1)), _w((24, 128, 1, 1)), 24, 12, x_zero=-128, y_zero=5, rounding="single"),
        # columns read every 4th (the dot-product form packs them in vectors), 3x5 taps
        _example(_x((1, 3, 9, 30)), _w((4, 3, 3, 5)), 4, 10, strides=(1, 4), pads=(1, 2, 1, 2), x_zero=-7),
        # depthwise, strided, 20 channels (16 and 4 in the channel form), rows in bands, dilated
        # columns, uint8, float multipliers
        Example(
            (_x((1, 20, 30, 37), "uint8"), _w((20, 1, 3, 3)), Sample((20,), "int32", -5000, 5000)),
            {"scale": tuple(0.001 + 0.0003 * i for i in range(20)), "strides": (2, 2), "dilations": (1, 2),
             "group": 20, "pads": (1, 1, 1, 1), "x_zero": 140, "y_zero": 7, "lo": 0, "hi": 255},
        ),
        # 40 output channels and K = 72 (where the machine has AMX-INT8: a pass of 32 channels and
        # one of 8, weights copied with zeros past K), 90 positions
        _example(_x((1, 8, 10, 9)), _w((40, 8, 3, 3)), 40, 11, pads=(1, 1, 1, 1), x_zero=3, y_zero=-2),
        # K = 64 and 32 channels (AMX: the weights read in place), float multipliers, 36 positions
        Example(
            (_x((1, 64, 6, 6), "uint8"), _w((32, 64, 1, 1)), Sample((32,), "int32", -5000, 5000)),
            {"scale": tuple(0.0005 + 0.0001 * i for i in range(32)), "x_zero": 129, "y_zero": 100, "lo": 0,
             "hi": 255},
        ),
        # 16 channels 3 x 3 (Helium's channel rows: 48-byte kernel rows), strided down, padded
        # left and right, five positions a row (a last group of one), two images
        _example(_x((2, 16, 7, 10)), _w((6, 16, 3, 3)), 6, 14, strides=(2, 2), pads=(1, 1, 0, 1), x_zero=-5,
                 y_zero=2),
        # depthwise, 10 channels (Helium's channel lanes: a last block of 2), uint8, float
        # multipliers, stride 2 down, padded right by 2
        Example(
            (_x((1, 10, 9, 8), "uint8"), _w((10, 1, 3, 3)), Sample((10,), "int32", -5000, 5000)),
            {"scale": tuple(0.002 + 0.0002 * i for i in range(10)), "strides": (2, 1), "group": 10,
             "pads": (1, 0, 1, 2), "x_zero": 131, "y_zero": 120, "lo": 0, "hi": 255},
        ),
        # depthwise, 8 channels, one fixed-point multiplier for all, stride 2 across, 6 positions
        Example(
            (_x((1, 8, 6, 11)), _w((8, 1, 3, 3))),
            {"multiplier": (1518500250,), "shift": (-9,), "strides": (1, 2), "group": 8, "pads": (1, 1, 1, 1),
             "x_zero": -128, "y_zero": -128},
        ),
        # a uint8 dense layer (x read in place on Cortex-M): K = 19 (three past the groups of
        # four), an odd 7 outputs an image, two images
        _example(_x((2, 19, 1, 1), "uint8"), _w((7, 19, 1, 1)), 7, 13, x_zero=200, y_zero=3, lo=0, hi=255),
    ),  # fmt: skip
)


def qconv(x, w, b=None, *, multiplier=(0,), shift=(0,), scale=(), strides=(1, 1), pads=(0, 0, 0, 0),
          dilations=(1, 1), group=1, x_zero=0, y_zero=0, lo=-128, hi=127, rounding="double",
          name=None):  # fmt: skip
    """The ``qconv`` op (see the module's docstring)."""
    inputs = [operand(x), operand(w)] + ([operand(b)] if b is not None else [])
    attrs = dict(strides=tuple(strides), pads=tuple(pads), dilations=tuple(dilations), group=group)
    attrs.update(multiplier=tuple(int(v) for v in multiplier), shift=tuple(int(v) for v in shift))
    attrs.update(scale=tuple(float(v) for v in scale))
    attrs.update(x_zero=int(x_zero), y_zero=int(y_zero), lo=int(lo), hi=int(hi), rounding=rounding)
    return apply("qconv", inputs, name, **attrs)


# ----------------------------------------------------------------------------- qadd
def _qadd_infer(types, attrs):
    a, b = types
    if a.dtype not in INT_RANGES or b.dtype != a.dtype:
        raise ShapeError(f"qadd takes two int8 or two uint8 tensors, not {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ShapeError(f"qadd's operands have one shape, not {list(a.shape)} and {list(b.shape)}")
    for k in ("a_shift", "b_shift", "shift"):
        if not -31 <= attrs[k] <= 0:
            raise ShapeError(f"qadd's {k} {attrs[k]} is not in [-31, 0] (multipliers below one)")
    for k in ("a_multiplier", "b_multiplier", "multiplier"):
        if not 0 <= attrs[k] < 1 << 31:
            raise ShapeError(f"qadd's {k} {attrs[k]} is not in [0, 2**31)")
    if not 0 <= attrs["left"] <= 20:
        raise ShapeError(f"qadd's left shift {attrs['left']} is not in [0, 20]")
    lo, hi = INT_RANGES[a.dtype]
    if not lo <= attrs["lo"] <= attrs["hi"] <= hi:
        raise ShapeError(f"bounds [{attrs['lo']}, {attrs['hi']}] outside {a.dtype}")
    if not all(lo <= attrs[k] <= hi for k in ("a_zero", "b_zero", "y_zero")):
        raise ShapeError(f"qadd's zero points outside {a.dtype}")
    return TensorType(a.shape, a.dtype)


def qadd_ref(xs, attrs):
    a, b = (x.astype(np.int64) - attrs[f"{n}_zero"] for x, n in zip(xs, "ab"))
    left = 1 << attrs["left"]
    sa = requantize(a * left, attrs["a_multiplier"], attrs["a_shift"])
    sb = requantize(b * left, attrs["b_multiplier"], attrs["b_shift"])
    y = requantize(sa + sb, attrs["multiplier"], attrs["shift"]) + attrs["y_zero"]
    return np.clip(y, attrs["lo"], attrs["hi"]).astype(xs[0].dtype)


def _qadd_example(shape, dtype, seed, **attrs):
    rng = np.random.default_rng(seed)
    q = [int(v) for v in rng.integers(1 << 30, 1 << 31, 3)]
    s = [int(v) for v in rng.integers(-2, 1, 2)] + [int(rng.integers(-21, -17))]  # as LiteRT's scales give
    base = {"a_multiplier": q[0], "a_shift": s[0], "b_multiplier": q[1], "b_shift": s[1], "multiplier": q[2],
            "shift": s[2], "left": 20}  # fmt: skip
    return Example((_x(shape, dtype), _x(shape, dtype)), {**base, **attrs})


defop(
    "qadd",
    ("a", "b"),
    _qadd_infer,
    qadd_ref,
    NotDifferentiable("a quantized add is for inference"),
    attrs={
        "a_zero": Attr("int", 0),
        "b_zero": Attr("int", 0),
        "y_zero": Attr("int", 0),
        "left": Attr("int", 20),  # both operands less their zero points, times 2**left
        "a_multiplier": Attr("int", 0),  # then each requantized (requantize, double rounding)
        "a_shift": Attr("int", 0),
        "b_multiplier": Attr("int", 0),
        "b_shift": Attr("int", 0),
        "multiplier": Attr("int", 0),  # their sum requantized, plus y_zero, clamped to [lo, hi]
        "shift": Attr("int", 0),
        "lo": Attr("int", -128),
        "hi": Attr("int", 127),
    },
    kind=KERNEL,
    doc="int8/uint8 elementwise add of two tensors of one shape in TFLite's integer scheme: each "
    "operand less its zero point, shifted left, rescaled in fixed point, summed, rescaled to the "
    "output, plus y_zero, clamped (LiteRT's quantized ADD)",
    examples=(
        # a residual add: zero points, a ReLU's lower bound, 4 x 37 elements (a vector's tail)
        _qadd_example((1, 4, 37), "int8", 1, a_zero=-128, b_zero=5, y_zero=-128, lo=-128),
        # uint8, a fused ReLU6's upper bound, the largest output shift
        _qadd_example((2, 3, 5, 7), "uint8", 2, a_zero=128, b_zero=131, y_zero=9, lo=9, hi=200),
        # every int8 value against another, the output a quarter of their sum: the halves of
        # the last rounding shift (away from zero) on both signs
        Example(
            (
                np.arange(-128, 128, dtype=np.int8).reshape(16, 16),
                np.roll(np.arange(-128, 128, dtype=np.int8), 37).reshape(16, 16),
            ),
            {
                "a_multiplier": 1 << 30,
                "a_shift": -1,
                "b_multiplier": 1 << 30,
                "b_shift": -1,
                "multiplier": 1 << 30,
                "shift": -19,
            },
        ),
    ),  # fmt: skip
)


def qadd(a, b, *, a_zero=0, b_zero=0, y_zero=0, left=20, a_multiplier=0, a_shift=0, b_multiplier=0, b_shift=0,
         multiplier=0, shift=0, lo=-128, hi=127, name=None):  # fmt: skip
    """The ``qadd`` op: LiteRT's quantized ADD of two int8 or uint8 tensors of one shape."""
    attrs = dict(a_zero=int(a_zero), b_zero=int(b_zero), y_zero=int(y_zero), left=int(left))
    attrs.update(a_multiplier=int(a_multiplier), a_shift=int(a_shift), b_multiplier=int(b_multiplier))
    attrs.update(b_shift=int(b_shift), multiplier=int(multiplier), shift=int(shift), lo=int(lo), hi=int(hi))
    return apply("qadd", [operand(a), operand(b)], name, **attrs)
