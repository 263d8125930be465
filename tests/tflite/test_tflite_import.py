""".tflite import (graphdef/tflite), against LiteRT's interpreter.

Each case is a small float32 model written with the published schema (tests/tflite/
tflite_files.py): every operator flowc imports, with its options (SAME and VALID padding,
strides, dilations, depth multipliers, fused activations, broadcasting, keep_dims), then a
keyword-spotting CNN in the shape of MLPerf Tiny's DS-CNN. The imported graph runs in the
interpreter and compiled to C (all cases in one library); results must match LiteRT to float32
rounding. QUANTIZE/DEQUANTIZE are exact. Then the command line: ``flowc compile model.tflite``
builds a binary that agrees with LiteRT, and refusals are one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from dataclasses import dataclass

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("ai_edge_litert")

import tflite  # noqa: E402
from tflite_files import TYPES, Model, litert  # noqa: E402

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402

SAME, VALID = tflite.Padding.SAME, tflite.Padding.VALID
ACT = tflite.ActivationFunctionType


def _rng(key: str):
    return np.random.default_rng(zlib.crc32(key.encode()))


def w(key, *shape, scale=0.3):
    return (_rng(key + str(shape)).standard_normal(shape) * scale).astype(np.float32)


@dataclass
class Case:
    key: str
    data: bytes
    feeds: list  # input arrays, in the model's input order


def conv_case(key, x_shape, w_shape, out_shape, padding, stride, dilation=1, act=ACT.NONE):
    m = Model()
    x = m.input("x", x_shape)
    ins = [x, m.const("w", w(key, *w_shape)), m.const("b", w(key + "b", w_shape[0], scale=0.1))]
    y = m.tensor("y", out_shape)
    m.op("CONV_2D", ins, [y], "Conv2DOptions", Padding=padding, StrideH=stride, StrideW=stride,
         DilationHFactor=dilation, DilationWFactor=dilation, FusedActivationFunction=act)  # fmt: skip
    m.outputs = [y]
    return Case(key, m.write(), [w(key + "x", *x_shape, scale=1.0)])


def depthwise_case(key, x_shape, w_shape, out_shape, padding, stride, multiplier, act=ACT.NONE):
    m = Model()
    x = m.input("x", x_shape)
    ins = [x, m.const("w", w(key, *w_shape)), m.const("b", w(key + "b", w_shape[3], scale=0.1))]
    y = m.tensor("y", out_shape)
    m.op("DEPTHWISE_CONV_2D", ins, [y], "DepthwiseConv2DOptions", Padding=padding, StrideH=stride,
         StrideW=stride, DepthMultiplier=multiplier, DilationHFactor=1, DilationWFactor=1,
         FusedActivationFunction=act)  # fmt: skip
    m.outputs = [y]
    return Case(key, m.write(), [w(key + "x", *x_shape, scale=1.0)])


def pool_case(key, opcode, x_shape, out_shape, padding, size, stride, act=ACT.NONE):
    m = Model()
    x = m.input("x", x_shape)
    y = m.tensor("y", out_shape)
    m.op(opcode, [x], [y], "Pool2DOptions", Padding=padding, StrideH=stride, StrideW=stride,
         FilterHeight=size, FilterWidth=size, FusedActivationFunction=act)  # fmt: skip
    m.outputs = [y]
    return Case(key, m.write(), [w(key + "x", *x_shape, scale=2.0)])


def unary_case(key, opcode, shape=(2, 5, 7), options=None, scale=4.0, **fields):
    m = Model()
    x = m.input("x", shape)
    y = m.tensor("y", shape)
    m.op(opcode, [x], [y], options, **fields)
    m.outputs = [y]
    return Case(key, m.write(), [w(key + "x", *shape, scale=scale)])


def binary_case(key, opcode, options, a_shape, b_shape, out_shape, act=ACT.NONE):
    m = Model()
    a, b = m.input("a", a_shape), m.input("b", b_shape)
    y = m.tensor("y", out_shape)
    m.op(opcode, [a, b], [y], options, FusedActivationFunction=act)
    m.outputs = [y]
    return Case(key, m.write(), [w(key + "a", *a_shape, scale=2.0), w(key + "b", *b_shape, scale=2.0)])


def _others() -> list[Case]:
    out = []
    m = Model()  # FULLY_CONNECTED of a 4-D input, with RELU
    x = m.input("x", (1, 2, 2, 6))
    y = m.tensor("y", (1, 10))
    m.op("FULLY_CONNECTED", [x, m.const("w", w("fc", 10, 24)), m.const("b", w("fcb", 10))], [y],
         "FullyConnectedOptions", FusedActivationFunction=ACT.RELU)  # fmt: skip
    m.outputs = [y]
    out.append(Case("fully_connected", m.write(), [w("fcx", 1, 2, 2, 6, scale=1.0)]))

    m = Model()  # MEAN over H and W, kept
    x = m.input("x", (2, 5, 6, 3))
    y = m.tensor("y", (2, 1, 1, 3))
    m.op("MEAN", [x, m.const("axes", np.array([1, 2], np.int32))], [y], "ReducerOptions", KeepDims=True)
    m.outputs = [y]
    out.append(Case("mean_keep_dims", m.write(), [w("meanx", 2, 5, 6, 3)]))

    m = Model()  # PAD
    x = m.input("x", (1, 4, 5, 2))
    y = m.tensor("y", (1, 7, 6, 2))
    m.op("PAD", [x, m.const("p", np.array([[0, 0], [1, 2], [0, 1], [0, 0]], np.int32))], [y])
    m.outputs = [y]
    out.append(Case("pad", m.write(), [w("padx", 1, 4, 5, 2)]))

    m = Model()  # RESHAPE, CONCATENATION on channels
    a, b = m.input("a", (1, 4, 4, 3)), m.input("b", (1, 16, 2))
    r = m.tensor("r", (1, 4, 4, 2))
    m.op("RESHAPE", [b, m.const("shape", np.array([1, 4, 4, 2], np.int32))], [r])
    y = m.tensor("y", (1, 4, 4, 5))
    m.op("CONCATENATION", [a, r], [y], "ConcatenationOptions", Axis=-1, FusedActivationFunction=ACT.NONE)
    m.outputs = [y]
    out.append(
        Case("reshape_concat", m.write(), [w("ca", 1, 4, 4, 3, scale=5.0), w("cb", 1, 16, 2, scale=5.0)])
    )

    m = Model()  # a Flatten as TensorFlow's converter writes it: SHAPE, STRIDED_SLICE, PACK, RESHAPE
    x = m.input("x", (2, 3, 4, 5))
    shape = m.tensor("shape", (4,), "int32")
    m.op("SHAPE", [x], [shape], "ShapeOptions", OutType=TYPES["int32"])
    batch = m.tensor("batch", (), "int32")
    ends = [m.const(n, np.array(v, np.int32)) for n, v in (("b0", [0]), ("e0", [1]), ("s0", [1]))]
    m.op("STRIDED_SLICE", [shape, *ends], [batch], "StridedSliceOptions", ShrinkAxisMask=1)
    target = m.tensor("target", (2,), "int32")
    m.op("PACK", [batch, m.const("minus1", np.array(-1, np.int32))], [target], "PackOptions", ValuesCount=2,
         Axis=0)  # fmt: skip
    y = m.tensor("y", (2, 60))
    m.op("RESHAPE", [x, target], [y])
    m.outputs = [y]
    out.append(Case("flatten_by_shape", m.write(), [w("fsx", 2, 3, 4, 5)]))

    m = Model()  # STRIDED_SLICE with masks, negative strides, a dropped axis; PACK on axis 1
    x = m.input("x", (4, 7, 6))
    s = m.tensor("s", (2, 3))
    args = [
        m.const(n, np.array(v, np.int32))
        for n, v in (("b", [3, 1, -1]), ("e", [0, 9, 0]), ("st", [-2, 2, 1]))
    ]
    m.op("STRIDED_SLICE", [x, *args], [s], "StridedSliceOptions", BeginMask=1, EndMask=1, ShrinkAxisMask=4)
    t = m.tensor("t", (2, 2, 3))
    m.op("PACK", [s, s], [t], "PackOptions", ValuesCount=2, Axis=1)
    m.outputs = [s, t]
    out.append(Case("strided_slice_pack", m.write(), [w("ssx", 4, 7, 6)]))

    m = Model()  # QUANTIZE to int8 (halves away from zero, saturation), DEQUANTIZE back
    x = m.input("x", (1, 64))
    q = m.tensor("q", (1, 64), "int8", quant=([0.5], [3], 0))
    y = m.tensor("y", (1, 64))
    m.op("QUANTIZE", [x], [q])
    m.op("DEQUANTIZE", [q], [y])
    m.outputs = [q, y]
    ties = np.concatenate([np.arange(-8, 8) * 0.25, [-100.0, 100.0, 63.25, -64.75]])
    xs = np.concatenate([ties, w("qx", 64 - ties.size, scale=40.0)]).astype(np.float32).reshape(1, 64)
    out.append(Case("quantize_dequantize", m.write(), [xs]))
    return out


def _cases() -> list[Case]:
    cases = [
        conv_case("conv_same_relu", (1, 9, 9, 3), (4, 3, 3, 3), (1, 9, 9, 4), SAME, 1, act=ACT.RELU),
        conv_case("conv_same_stride2", (1, 9, 8, 3), (5, 3, 3, 3), (1, 5, 4, 5), SAME, 2, act=ACT.RELU6),
        conv_case("conv_valid_dilated", (2, 10, 10, 2), (3, 3, 3, 2), (2, 6, 6, 3), VALID, 1, dilation=2),
        conv_case("conv_1x1", (1, 6, 6, 8), (4, 1, 1, 8), (1, 6, 6, 4), VALID, 1),
        conv_case(
            "conv_relu_n1_to_1", (1, 5, 5, 2), (2, 3, 3, 2), (1, 3, 3, 2), VALID, 1, act=ACT.RELU_N1_TO_1
        ),
        depthwise_case("depthwise_same", (1, 8, 8, 4), (1, 3, 3, 4), (1, 8, 8, 4), SAME, 1, 1, ACT.RELU),
        depthwise_case("depthwise_stride2_mult2", (1, 9, 9, 3), (1, 3, 3, 6), (1, 5, 5, 6), SAME, 2, 2),
        pool_case("average_pool_same", "AVERAGE_POOL_2D", (1, 7, 7, 3), (1, 4, 4, 3), SAME, 3, 2),
        pool_case("average_pool_valid", "AVERAGE_POOL_2D", (1, 8, 8, 2), (1, 4, 4, 2), VALID, 2, 2),
        pool_case("max_pool_same_relu", "MAX_POOL_2D", (1, 7, 6, 3), (1, 4, 3, 3), SAME, 3, 2, ACT.RELU),
        binary_case("add_broadcast_relu", "ADD", "AddOptions", (2, 3, 4), (4,), (2, 3, 4), ACT.RELU),
        binary_case("mul", "MUL", "MulOptions", (2, 3, 4), (2, 3, 4), (2, 3, 4)),
        binary_case("sub_broadcast", "SUB", "SubOptions", (2, 1, 4), (3, 1), (2, 3, 4)),
        unary_case("relu", "RELU"),
        unary_case("relu6", "RELU6"),
        unary_case("logistic", "LOGISTIC"),
        unary_case("tanh", "TANH"),
        unary_case("hard_swish", "HARD_SWISH"),
        unary_case("softmax", "SOFTMAX", (3, 10), "SoftmaxOptions", Beta=1.0),
        unary_case("softmax_beta", "SOFTMAX", (3, 10), "SoftmaxOptions", Beta=0.5),
    ]
    return cases + _others()


def qi(key, *shape, dtype=np.int8):
    info = np.iinfo(dtype)
    return _rng(key + str(shape)).integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def scales(key, n, lo=0.004, hi=0.02):
    return _rng(key + "s").uniform(lo, hi, n).astype(np.float32)


def int_conv_case(
    key,
    x_shape,
    w_shape,
    out_shape,
    padding,
    stride,
    act=ACT.NONE,
    depthwise=False,
    xq=(0.05, -3),
    yq=(0.1, 5),
):
    """An int8 convolution with per-channel symmetric int8 filters (LiteRT takes per-channel
    filters with int8 activations only)."""
    dt = "int8"
    m = Model()
    x = m.input("x", x_shape, dt, quant=([xq[0]], [xq[1]], 0))
    n = w_shape[3] if depthwise else w_shape[0]
    ws = scales(key, n)
    wt = m.const("w", qi(key, *w_shape), quant=(ws, np.zeros(n, np.int64), 3 if depthwise else 0))
    bias = _rng(key + "b").integers(-3000, 3000, n).astype(np.int32)
    bt = m.const("b", bias, quant=(xq[0] * ws, np.zeros(n, np.int64), 0))
    y = m.tensor("y", out_shape, dt, quant=([yq[0]], [yq[1]], 0))
    if depthwise:
        m.op("DEPTHWISE_CONV_2D", [x, wt, bt], [y], "DepthwiseConv2DOptions", Padding=padding, StrideH=stride,
             StrideW=stride, DepthMultiplier=n // x_shape[3], DilationHFactor=1, DilationWFactor=1,
             FusedActivationFunction=act)  # fmt: skip
    else:
        m.op("CONV_2D", [x, wt, bt], [y], "Conv2DOptions", Padding=padding, StrideH=stride, StrideW=stride,
             DilationHFactor=1, DilationWFactor=1, FusedActivationFunction=act)  # fmt: skip
    m.outputs = [y]
    return Case(key, m.write(), [qi(key + "x", *x_shape)])


def _int_cases() -> list[Case]:
    out = [
        int_conv_case("int8_conv_same", (1, 9, 9, 8), (6, 3, 3, 8), (1, 9, 9, 6), SAME, 1),
        int_conv_case("int8_conv_stride2_relu", (1, 9, 9, 8), (6, 3, 3, 8), (1, 5, 5, 6), SAME, 2, ACT.RELU),
        int_conv_case(
            "int8_conv_1x1_relu6",
            (1, 6, 6, 16),
            (8, 1, 1, 16),
            (1, 6, 6, 8),
            VALID,
            1,
            ACT.RELU6,
            yq=(0.03, -20),
        ),  # fmt: skip
        int_conv_case(
            "int8_conv_deep_valid", (1, 6, 6, 64), (4, 3, 3, 64), (1, 4, 4, 4), VALID, 1, yq=(0.4, 0)
        ),
        int_conv_case(
            "int8_depthwise_relu",
            (1, 8, 8, 4),
            (1, 3, 3, 4),
            (1, 8, 8, 4),
            SAME,
            1,
            ACT.RELU,
            depthwise=True,
            yq=(0.03, -7),
        ),  # fmt: skip
        int_conv_case(
            "int8_depthwise_mult2_stride2", (1, 9, 9, 3), (1, 3, 3, 6), (1, 5, 5, 6), SAME, 2, depthwise=True
        ),  # fmt: skip
    ]
    m = Model()  # FULLY_CONNECTED, per-tensor filter
    x = m.input("x", (2, 32), "int8", quant=([0.05], [1], 0))
    w = m.const("w", qi("fcw", 10, 32), quant=([0.01], [0], 0))
    b = m.const("b", _rng("fcb").integers(-500, 500, 10).astype(np.int32), quant=([0.0005], [0], 0))
    y = m.tensor("y", (2, 10), "int8", quant=([0.07], [-2], 0))
    m.op("FULLY_CONNECTED", [x, w, b], [y], "FullyConnectedOptions", FusedActivationFunction=ACT.RELU)
    m.outputs = [y]
    out.append(Case("int8_fully_connected", m.write(), [qi("fcx", 2, 32)]))
    for op, options, sy in (("ADD", "AddOptions", 0.1), ("MUL", "MulOptions", 0.2)):
        for k, (sa, za, sb, zb) in enumerate([(0.05, 3, 0.08, -4), (0.5, -128, 0.002, 127)]):
            m = Model()
            a = m.input("a", (2, 3, 64), "int8", quant=([sa], [za], 0))
            b = m.input("b", (3, 64), "int8", quant=([sb], [zb], 0))
            y = m.tensor("y", (2, 3, 64), "int8", quant=([sy * (1 + 9 * k)], [1], 0))
            m.op(op, [a, b], [y], options, FusedActivationFunction=ACT.RELU if k else ACT.NONE)
            m.outputs = [y]
            out.append(
                Case(f"int8_{op.lower()}_{k}", m.write(), [qi(f"{op}a{k}", 2, 3, 64), qi(f"{op}b{k}", 3, 64)])
            )
    for op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        for padding in (SAME, VALID):
            m = Model()
            x = m.input("x", (1, 7, 7, 3), "int8", quant=([0.05], [3], 0))
            side = 4 if padding == SAME else 3
            y = m.tensor("y", (1, side, side, 3), "int8", quant=([0.05], [3], 0))
            window = dict(StrideH=2, StrideW=2, FilterHeight=3, FilterWidth=3)
            m.op(op, [x], [y], "Pool2DOptions", Padding=padding, FusedActivationFunction=ACT.RELU, **window)
            m.outputs = [y]
            out.append(Case(f"int8_{op.lower()}_{'same' if padding == SAME else 'valid'}", m.write(),
                            [qi(f"{op}{padding}", 1, 7, 7, 3)]))  # fmt: skip
    for k, (sx, beta, shape, dt) in enumerate(
        [
            (0.1, 1.0, (4, 12), "int8"),
            (0.02, 1.0, (3, 100), "int8"),
            (0.5, 0.5, (2, 37), "int8"),
            (0.05, 1.0, (2, 3, 16), "uint8"),
        ]
    ):
        lo = -128 if dt == "int8" else 0
        m = Model()  # SOFTMAX: gemmlowp's fixed-point exp and reciprocal
        x = m.input("x", shape, dt, quant=([sx], [3 if dt == "int8" else 128], 0))
        y = m.tensor("y", shape, dt, quant=([1 / 256], [lo], 0))
        m.op("SOFTMAX", [x], [y], "SoftmaxOptions", Beta=beta)
        m.outputs = [y]
        xs = qi(f"sm{k}", *shape, dtype=np.int8 if dt == "int8" else np.uint8)
        out.append(Case(f"{dt}_softmax_{k}", m.write(), [xs]))
    for k, (sx, zx) in enumerate([(0.1, 3), (0.05, -20), (0.5, 0), (0.002, 100)]):
        m = Model()  # LOGISTIC over every int8 value: gemmlowp's fixed-point logistic
        x = m.input("x", (2, 128), "int8", quant=([sx], [zx], 0))
        y = m.tensor("y", (2, 128), "int8", quant=([1 / 256], [-128], 0))
        m.op("LOGISTIC", [x], [y])
        m.outputs = [y]
        out.append(
            Case(f"int8_logistic_{k}", m.write(), [np.arange(-128, 128, dtype=np.int8).reshape(2, 128)])
        )
    for k, (sx, zx) in enumerate([(0.1, 3), (0.05, -20), (0.01, 64)]):
        m = Model()  # TANH over every int8 value: gemmlowp's fixed-point tanh
        x = m.input("x", (2, 128), "int8", quant=([sx], [zx], 0))
        y = m.tensor("y", (2, 128), "int8", quant=([1 / 128], [0], 0))
        m.op("TANH", [x], [y])
        m.outputs = [y]
        out.append(Case(f"int8_tanh_{k}", m.write(), [np.arange(-128, 128, dtype=np.int8).reshape(2, 128)]))
    for k, (si, zi, so, zo, dt) in enumerate([(0.05, 3, 0.02, -7, "int8"), (0.05, -100, 0.3, 20, "int8"),
                                              (0.07, 0, 0.07, 128, "uint8")]):  # fmt: skip
        m = Model()  # QUANTIZE of an int8 tensor: requantization to other parameters
        x = m.input("x", (2, 128), "int8", quant=([si], [zi], 0))
        y = m.tensor("y", (2, 128), dt, quant=([so], [zo], 0))
        m.op("QUANTIZE", [x], [y])
        m.outputs = [y]
        out.append(
            Case(f"int8_requantize_{k}", m.write(), [np.arange(-128, 128, dtype=np.int8).reshape(2, 128)])
        )
    for k, (si, zi, so, zo) in enumerate([(0.1, 3, 0.05, -10), (0.3, 0, 0.2, -100), (0.02, 10, 0.01, 5)]):
        m = Model()  # HARD_SWISH over every int8 value: 16-bit fixed point
        x = m.input("x", (2, 128), "int8", quant=([si], [zi], 0))
        y = m.tensor("y", (2, 128), "int8", quant=([so], [zo], 0))
        m.op("HARD_SWISH", [x], [y])
        m.outputs = [y]
        out.append(
            Case(f"int8_hard_swish_{k}", m.write(), [np.arange(-128, 128, dtype=np.int8).reshape(2, 128)])
        )
    means = [(0.05, 3, 0.05, 3, [1, 2], True), (0.05, 3, 0.02, -5, [1, 2], False),
             (0.1, -10, 0.3, 7, [2, 1], True), (0.02, 0, 0.1, 0, [3], False),
             (0.04, 5, 0.01, -100, [1, 2, 3], True)]  # fmt: skip
    for k, (si, zi, so, zo, axes, keep) in enumerate(means):
        m = Model()  # MEAN (a Keras global average pool, and others)
        x = m.input("x", (2, 5, 6, 8), "int8", quant=([si], [zi], 0))
        dims = [2, 5, 6, 8]
        shape = (
            [1 if a in axes else d for a, d in enumerate(dims)]
            if keep
            else [d for a, d in enumerate(dims) if a not in axes]
        )
        y = m.tensor("y", shape, "int8", quant=([so], [zo], 0))
        m.op("MEAN", [x, m.const("axes", np.array(axes, np.int32))], [y], "ReducerOptions", KeepDims=keep)
        m.outputs = [y]
        out.append(Case(f"int8_mean_{k}", m.write(), [qi(f"mean{k}", 2, 5, 6, 8)]))
    m = Model()  # PAD with the zero point, RESHAPE, CONCATENATION of alike-quantized tensors
    x = m.input("x", (1, 4, 4, 2), "int8", quant=([0.05], [-9], 0))
    z = m.input("z", (1, 36, 1), "int8", quant=([0.05], [-9], 0))
    padded = m.tensor("p", (1, 6, 6, 2), "int8", quant=([0.05], [-9], 0))
    m.op("PAD", [x, m.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))], [padded])
    r = m.tensor("r", (1, 6, 6, 1), "int8", quant=([0.05], [-9], 0))
    m.op("RESHAPE", [z, m.const("shape", np.array([1, 6, 6, 1], np.int32))], [r])
    y = m.tensor("y", (1, 6, 6, 3), "int8", quant=([0.05], [-9], 0))
    m.op("CONCATENATION", [padded, r], [y], "ConcatenationOptions", Axis=3, FusedActivationFunction=ACT.NONE)
    m.outputs = [y]
    out.append(Case("int8_pad_reshape_concat", m.write(), [qi("px", 1, 4, 4, 2), qi("pz", 1, 36, 1)]))
    return out


CASES = _cases() + _int_cases()


def ds_cnn() -> Case:
    """A keyword spotter in the shape of MLPerf Tiny's DS-CNN (49x10 MFCC input, a strided
    10x4 convolution, depthwise-separable blocks, average pool, fully connected, softmax),
    narrower (16 channels) to keep the test quick."""
    m, c = Model(), 16
    x = m.input("input", (1, 49, 10, 1))
    h = m.tensor("h0", (1, 25, 5, c))
    m.op("CONV_2D", [x, m.const("w0", w("w0", c, 10, 4, 1)), m.const("b0", w("b0", c, scale=0.1))], [h],
         "Conv2DOptions", Padding=SAME, StrideH=2, StrideW=2, DilationHFactor=1, DilationWFactor=1,
         FusedActivationFunction=ACT.RELU)  # fmt: skip
    for k in range(3):
        d = m.tensor(f"d{k}", (1, 25, 5, c))
        dw = [h, m.const(f"dw{k}", w(f"dw{k}", 1, 3, 3, c)), m.const(f"db{k}", w(f"db{k}", c))]
        m.op("DEPTHWISE_CONV_2D", dw, [d], "DepthwiseConv2DOptions", Padding=SAME, StrideH=1, StrideW=1,
             DepthMultiplier=1, DilationHFactor=1, DilationWFactor=1,
             FusedActivationFunction=ACT.RELU)  # fmt: skip
        h = m.tensor(f"p{k}", (1, 25, 5, c))
        pw = [d, m.const(f"pw{k}", w(f"pw{k}", c, 1, 1, c)), m.const(f"pb{k}", w(f"pb{k}", c))]
        m.op("CONV_2D", pw, [h], "Conv2DOptions", Padding=VALID, StrideH=1, StrideW=1, DilationHFactor=1,
             DilationWFactor=1, FusedActivationFunction=ACT.RELU)  # fmt: skip
    p = m.tensor("pool", (1, 1, 1, c))
    m.op("AVERAGE_POOL_2D", [h], [p], "Pool2DOptions", Padding=VALID, StrideH=25, StrideW=5, FilterHeight=25,
         FilterWidth=5, FusedActivationFunction=ACT.NONE)  # fmt: skip
    f = m.tensor("logits", (1, 12))
    m.op("FULLY_CONNECTED", [p, m.const("fw", w("fw", 12, c)), m.const("fb", w("fb", 12))], [f],
         "FullyConnectedOptions", FusedActivationFunction=ACT.NONE)  # fmt: skip
    y = m.tensor("probabilities", (1, 12))
    m.op("SOFTMAX", [f], [y], "SoftmaxOptions", Beta=1.0)
    m.outputs = [y]
    return Case("ds_cnn", m.write(), [w("mfcc", 1, 49, 10, 1, scale=3.0)])


def ds_cnn_int8(float_io: bool = True) -> Case:
    """The keyword spotter quantized as TFLite's converter writes it: a float input quantized to
    int8, int8 convolutions with per-channel filters and int32 biases, an int8 average pool,
    fully connected layer and softmax, dequantized to float; without ``float_io``, int8 in and
    out (the converter's inference_input_type / inference_output_type int8)."""
    m, c, sx = Model(), 16, 0.08
    if float_io:
        x = m.input("input", (1, 49, 10, 1))
        q = m.tensor("q", (1, 49, 10, 1), "int8", quant=([sx], [-1], 0))
        m.op("QUANTIZE", [x], [q])
    else:
        q = m.input("input", (1, 49, 10, 1), "int8", quant=([sx], [-1], 0))
    h, s_in = q, sx

    def conv(name, h, s_in, w_shape, out_shape, depthwise, stride, padding):
        n = w_shape[3] if depthwise else w_shape[0]
        ws = scales(name, n)
        wt = m.const(
            name + "_w", qi(name, *w_shape), quant=(ws, np.zeros(n, np.int64), 3 if depthwise else 0)
        )
        bias = _rng(name + "b").integers(-2000, 2000, n).astype(np.int32)
        bt = m.const(name + "_b", bias, quant=(s_in * ws, np.zeros(n, np.int64), 0))
        s_out = 0.05
        y = m.tensor(name, out_shape, "int8", quant=([s_out], [-128], 0))
        opts = dict(Padding=padding, StrideH=stride, StrideW=stride, DilationHFactor=1, DilationWFactor=1,
                    FusedActivationFunction=ACT.RELU)  # fmt: skip
        if depthwise:
            m.op("DEPTHWISE_CONV_2D", [h, wt, bt], [y], "DepthwiseConv2DOptions", DepthMultiplier=1, **opts)
        else:
            m.op("CONV_2D", [h, wt, bt], [y], "Conv2DOptions", **opts)
        return y, s_out

    h, s_in = conv("c0", h, s_in, (c, 10, 4, 1), (1, 25, 5, c), False, 2, SAME)
    for k in range(3):
        h, s_in = conv(f"dw{k}", h, s_in, (1, 3, 3, c), (1, 25, 5, c), True, 1, SAME)
        h, s_in = conv(f"pw{k}", h, s_in, (c, 1, 1, c), (1, 25, 5, c), False, 1, VALID)
    p = m.tensor("pool", (1, 1, 1, c), "int8", quant=([s_in], [-128], 0))
    m.op("AVERAGE_POOL_2D", [h], [p], "Pool2DOptions", Padding=VALID, StrideH=25, StrideW=5, FilterHeight=25,
         FilterWidth=5, FusedActivationFunction=ACT.NONE)  # fmt: skip
    fq = m.tensor("logits_q", (1, 12), "int8", quant=([0.1], [3], 0))
    fw = m.const("fw", qi("fw", 12, c), quant=([0.02], [0], 0))
    fb = m.const("fb", _rng("fb").integers(-300, 300, 12).astype(np.int32), quant=([s_in * 0.02], [0], 0))
    m.op("FULLY_CONNECTED", [p, fw, fb], [fq], "FullyConnectedOptions", FusedActivationFunction=ACT.NONE)
    yq = m.tensor("probabilities_q", (1, 12), "int8", quant=([1 / 256], [-128], 0))
    m.op("SOFTMAX", [fq], [yq], "SoftmaxOptions", Beta=1.0)
    if not float_io:
        m.outputs = [fq, yq]
        return Case("ds_cnn_int8_io", m.write(), [qi("mfcc8", 1, 49, 10, 1)])
    y = m.tensor("probabilities", (1, 12))
    m.op("DEQUANTIZE", [yq], [y])
    m.outputs = [fq, y]
    return Case("ds_cnn_int8", m.write(), [w("mfcc8", 1, 49, 10, 1, scale=3.0)])


ALL = CASES + [ds_cnn(), ds_cnn_int8(), ds_cnn_int8(float_io=False)]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tflite")
    out = {}
    for case in ALL:
        path = folder / f"{case.key}.tflite"
        path.write_bytes(case.data)
        out[case.key] = (path, gd.load_tflite(path), litert(case.data, case.feeds))
    return out


@pytest.fixture(scope="module")
def compiled(imported, compile_graphs):
    models = compile_graphs({f"tfl_{key}": g for key, (_, g, _) in imported.items()})
    return {key[len("tfl_") :]: model for key, model in models.items()}


def assert_like_litert(have: list, want: list, what: str) -> None:
    assert len(have) == len(want), what
    for h, x in zip(have, want):
        h = np.asarray(h)
        assert h.dtype == x.dtype and h.shape == x.shape, f"{what}: {h.dtype}{h.shape} vs {x.dtype}{x.shape}"
        if x.dtype.kind == "f":
            np.testing.assert_allclose(h, x, rtol=2e-5, atol=2e-6, err_msg=what)
        else:
            np.testing.assert_array_equal(h, x, err_msg=what)


def _feeds(graph: gd.Graph, case: Case) -> dict:
    names = [n.name for n in graph.nodes if n.op == "placeholder"]
    return dict(zip(names, case.feeds))


@pytest.mark.parametrize("case", ALL, ids=[c.key for c in ALL])
def test_interpreter_matches_litert(case, imported):
    _, graph, want = imported[case.key]
    gd.verify(graph)
    have = gd.run(graph, _feeds(graph, case), [str(o) for o in graph.outputs])
    assert_like_litert(have, want, f"{case.key} interpreter")


@pytest.mark.c
@pytest.mark.parametrize("case", ALL, ids=[c.key for c in ALL])
def test_compiled_matches_litert(case, imported, compiled):
    _, graph, want = imported[case.key]
    have = compiled[case.key](**_feeds(graph, case))
    assert_like_litert(list(have.values()), want, f"{case.key} compiled")


def test_transposes_between_convolutions_cancel(imported):
    """NHWC -> NCHW around each convolution: between consecutive ones the pairs cancel
    (codegen.passes.cancel_transposes), leaving the input's and the output's."""
    from codegen import pipeline

    _, graph, _ = imported["ds_cnn"]
    ops = [n.op for n in pipeline.optimize(graph).nodes]
    assert ops.count("conv") == 7 and ops.count("transpose") <= 2, ops


def test_int8_convolutions_and_dense_layers_run_on_the_integer_kernel(imported):
    """Every int8 CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED becomes one ``qconv`` (int8
    weights and activations, int32 sums, fixed-point requantization): no float constant is
    left, and the weights take a third of the float model's bytes (softmax's tables included;
    the compiled results are checked against LiteRT above)."""
    from codegen import pipeline

    plans = {}
    for key in ("ds_cnn", "ds_cnn_int8"):
        plans[key] = pipeline.run(imported[key][1], pipeline.Options(), until="plan").results["plan"]
    program = plans["ds_cnn_int8"]
    assert [n.op for n in program.steps].count("qconv") == 8
    consts = [program.graph.constants[c] for c in program.constants]
    assert not [a.dtype for a in consts if a.dtype.kind == "f"]
    assert program.weight_bytes <= 0.4 * plans["ds_cnn"].weight_bytes
    assert program.arena_bytes <= plans["ds_cnn"].arena_bytes


# ----------------------------------------------------------------------------- command line


def flowc(*args, cwd):
    cmd = [sys.executable, "-m", "codegen.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)


# the integer routines a Cortex-M4 library of an int8 model may import (64-bit division, shifts
# and products): no float or double routine, no libm function
INTEGER_ROUTINES = {"memcpy", "memset", "__aeabi_ldivmod", "__aeabi_uldivmod", "__aeabi_idiv",
                    "__aeabi_uidiv", "__aeabi_idivmod", "__aeabi_uidivmod", "__aeabi_llsl", "__aeabi_llsr",
                    "__aeabi_lasr", "__aeabi_lmul"}  # fmt: skip


@pytest.mark.cross
def test_an_int8_model_runs_on_a_cortex_m4_without_float_routines(tmp_path, imported):
    """The int8 keyword spotter with int8 input and output (no QUANTIZE / DEQUANTIZE), built
    for a Cortex-M4: its library imports integer routines only, and on the emulated board it
    gives LiteRT's outputs exactly; with float input and output too (QUANTIZE's rounding is
    conversions and selects: no floorf)."""
    import shutil

    from codegen.backends.c import mcu
    from codegen.target import Target

    target = Target("cortex-m4")
    if not shutil.which(target.compiler) or not shutil.which(target.spec.qemu):
        pytest.skip(f"{target.compiler} or {target.spec.qemu} missing")
    _, graph, want = imported["ds_cnn_int8_io"]
    folder = codegen.export(graph, tmp_path / "m4", name="kws", arch="cortex-m4")
    fp = json.loads((folder / "metadata.json").read_text())["footprint"]
    assert set(fp["imports"]) <= INTEGER_ROUTINES, set(fp["imports"]) - INTEGER_ROUTINES
    run = mcu.run_firmware(folder, _feeds(graph, ds_cnn_int8(float_io=False)))
    assert_like_litert(list(run["outputs"].values()), want, "ds_cnn_int8_io on the board")
    _, graph, _ = imported["ds_cnn_int8"]
    folder = codegen.export(graph, tmp_path / "m4f", name="kws", arch="cortex-m4")
    fp = json.loads((folder / "metadata.json").read_text())["footprint"]
    assert set(fp["imports"]) <= INTEGER_ROUTINES, set(fp["imports"]) - INTEGER_ROUTINES


@pytest.mark.c
def test_flowc_compile_builds_a_binary_that_agrees_with_litert(tmp_path, imported):
    path, _, want = imported["ds_cnn"]
    res = flowc("compile", path, "-o", tmp_path / "out", "--name", "kws", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    x = tmp_path / "x.npy"
    np.save(x, ds_cnn().feeds[0])
    run = subprocess.run([tmp_path / "out" / "kws", "--in", f"input={x}", "--out-dir", tmp_path / "res"],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    (got,) = [np.load(p) for p in (tmp_path / "res").glob("*.npy")]
    np.testing.assert_allclose(got, want[0], rtol=2e-5, atol=2e-6)


def test_inspect_names_each_step_after_the_operators_output_tensors(tmp_path, imported):
    """flowc inspect of a TFLite file: beside each step, the operators it computes, named by
    their output tensors (TFLite's operators have no names of their own)."""
    path, _, _ = imported["ds_cnn_int8"]
    res = flowc("inspect", path, "--arch", "cortex-m4", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    steps = res.stdout.split("schedule (step, op, node", 1)[1].split("memory plan")[0].splitlines()[1:]
    sources = [ln.split("  <- ", 1)[1] for ln in steps if "  <- " in ln]
    assert len(sources) == len(steps), steps
    for name in ("c0", "dw0", "pw2", "pool", "logits_q", "probabilities_q"):
        assert name in {part for s in sources for part in s.split(" + ")}, (name, sources)


def _unsupported_model() -> bytes:
    m = Model()
    x = m.input("x", (1, 8))
    y = m.tensor("y", (1, 8))
    z = m.tensor("z", (1, 8))
    m.op("EXP", [x], [y])
    m.op("FLOOR", [y], [z])
    m.outputs = [z]
    return m.write()


def _int8_batch_matmul_model() -> bytes:
    m = Model()
    a = m.input("a", (1, 4, 8), "int8", quant=([0.1], [0], 0))
    b = m.input("b", (1, 8, 4), "int8", quant=([0.1], [0], 0))
    y = m.tensor("y", (1, 4, 4), "int8", quant=([0.1], [0], 0))
    m.op("BATCH_MATMUL", [a, b], [y])
    m.outputs = [y]
    return m.write()


@pytest.mark.parametrize(
    "data,words",
    [
        (_unsupported_model(), "TFLite operators flowc does not import: EXP, FLOOR"),
        (_int8_batch_matmul_model(), "TFLite operators flowc does not import: BATCH_MATMUL"),
        (b"\x18\x00\x00\x00TFL3" + b"\x00" * 8, "malformed TFLite file"),
        (b"\x00" * 16, "not a TFLite flatbuffer (no TFL3 file identifier)"),
    ],
    ids=["unsupported_ops_listed", "int8_refused", "truncated", "not_tflite"],
)
def test_refusals_are_one_line(tmp_path, data, words):
    path = tmp_path / "model.tflite"
    path.write_bytes(data)
    res = flowc("compile", path, "-o", tmp_path / "out", cwd=tmp_path)
    assert res.returncode != 0
    assert res.stderr.startswith("flowc: error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert words in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_damaged_files_are_refused_in_one_line(tmp_path):
    """Bytes of the int8 keyword spotter changed at random (and cut short): each file either
    imports or is refused with one FlowcError line of bounded length, never another exception."""
    data = ds_cnn_int8().data
    rng = np.random.default_rng(0)
    refused = 0
    for k in range(150):
        d = bytearray(data)
        for _ in range(int(rng.integers(1, 6))):
            d[int(rng.integers(8, len(d)))] = int(rng.integers(0, 256))
        if k % 5 == 0:
            d = d[: int(rng.integers(8, len(d)))]
        path = tmp_path / "damaged.tflite"
        path.write_bytes(bytes(d))
        try:
            gd.load_tflite(path)
        except gd.errors.FlowcError as e:
            refused += 1
            assert "\n" not in str(e) and len(str(e)) < 400, str(e)[:500]
    assert refused > 50
