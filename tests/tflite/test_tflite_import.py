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

import subprocess
import sys
import zlib
from dataclasses import dataclass

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("ai_edge_litert")

import tflite  # noqa: E402
from tflite_files import Model, litert  # noqa: E402

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


CASES = _cases()


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


ALL = CASES + [ds_cnn()]


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


# ----------------------------------------------------------------------------- command line


def flowc(*args, cwd):
    cmd = [sys.executable, "-m", "codegen.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)


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


def _unsupported_model() -> bytes:
    m = Model()
    x = m.input("x", (1, 8))
    y = m.tensor("y", (1, 8))
    z = m.tensor("z", (1, 8))
    m.op("EXP", [x], [y])
    m.op("FLOOR", [y], [z])
    m.outputs = [z]
    return m.write()


def _int8_conv_model() -> bytes:
    m = Model()
    x = m.input("x", (1, 4, 4, 2), "int8", quant=([0.1], [0], 0))
    wq = _rng("q").integers(-127, 127, (2, 1, 1, 2)).astype(np.int8)
    y = m.tensor("y", (1, 4, 4, 2), "int8", quant=([0.2], [-1], 0))
    ins = [x, m.const("w", wq, quant=([0.01, 0.02], [0, 0], 0))]
    m.op("CONV_2D", ins, [y], "Conv2DOptions", Padding=VALID, StrideH=1, StrideW=1, DilationHFactor=1,
         DilationWFactor=1, FusedActivationFunction=ACT.NONE)  # fmt: skip
    m.outputs = [y]
    return m.write()


@pytest.mark.parametrize(
    "data,words",
    [
        (_unsupported_model(), "TFLite operators flowc does not import: EXP, FLOOR"),
        (_int8_conv_model(), "operator 0 (CONV_2D): quantized int8 operands are not supported yet"),
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
