"""flowc's int8 code and Arm's CMSIS-NN kernels give the same integers (bench/cmsis_nn.py).

One small int8 TFLite model, laid out as TFLite's converter writes one, holds a layer of every
kernel family the harness calls: a 3 x 3 convolution with stride 2 and SAME padding, a
depthwise 3 x 3, a 1 x 1 convolution, a residual ADD of two scales, a MUL, an average pool
(SAME, windows cut by the edge) and a max pool, a fully connected layer and a softmax, between
a float input QUANTIZE'd and two DEQUANTIZE'd outputs (the probabilities, and the logits,
which a saturated softmax would hide). It runs on the Cortex-M4 (CMSIS-NN's DSP paths) and the
Cortex-M55 (its Helium paths) through flowc's export and through the CMSIS-NN harness, on the
same firmware and QEMU board; the outputs must be equal. The fast tests (no toolchain) check
the harness's parameters, memory plan and refusals.

The board tests carry the ``cross`` marker, skip without arm-none-eabi-gcc or qemu-system-arm
(naming the Debian packages, as test_cross.py does), and skip without the CMSIS-NN snapshot
at ../shared/anchors/cmsis-nn (it is never copied into this repository).
"""

from __future__ import annotations

import math
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flatbuffers")
tflite = pytest.importorskip("tflite")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tflite"))
from tflite_files import Model  # noqa: E402

from codegen.target import Target  # noqa: E402
from graphdef.errors import UnsupportedError  # noqa: E402

sys.path.append(str(ROOT / "bench"))  # (last: its module names must not shadow others)
import cmsis_nn  # noqa: E402

ACT = tflite.ActivationFunctionType
SAME, VALID = tflite.Padding.SAME, tflite.Padding.VALID
CORES = ["cortex-m4", "cortex-m55"]


def _rng(key: str):
    return np.random.default_rng(zlib.crc32(key.encode()))


class Builder:
    """An int8 model in TFLite's layout; a value is (tensor, shape, scale, zero point)."""

    def __init__(self, shape):
        self.m = Model()
        x = self.m.input("input", shape)
        q = self.m.tensor("input_q", shape, "int8", quant=([1 / 32], [0], 0))
        self.m.op("QUANTIZE", [x], [q])
        self.start = (q, tuple(shape), 1 / 32, 0)

    def out(self, name, shape, scale, zero):
        return self.m.tensor(name, shape, "int8", quant=([scale], [zero], 0))

    def conv(self, name, v, cout, k, stride=1, depthwise=False, relu=True, scale_factor=1.0):
        t, (n, h, w, cin), s_in, _ = v
        cout = cin if depthwise else cout
        rng = _rng(name)
        ws = rng.uniform(0.004, 0.02, cout).astype(np.float32)
        shape = (1, k, k, cout) if depthwise else (cout, k, k, cin)
        wt = self.m.const(
            name + "_w",
            rng.integers(-127, 127, shape, endpoint=True).astype(np.int8),
            quant=(ws, np.zeros(cout, np.int64), 3 if depthwise else 0),
        )
        bt = self.m.const(
            name + "_b",
            rng.integers(-2000, 2000, cout).astype(np.int32),
            quant=(s_in * ws, np.zeros(cout, np.int64), 0),
        )
        taps = k * k * (1 if depthwise else cin)
        s_out = float(40 * math.sqrt(taps) * s_in * ws.mean() * scale_factor)
        zero = -128 if relu else 3
        oh, ow = -(-h // stride), -(-w // stride)
        y = self.out(name, (n, oh, ow, cout), s_out, zero)
        opts = dict(Padding=SAME, StrideH=stride, StrideW=stride, DilationHFactor=1, DilationWFactor=1,
                    FusedActivationFunction=ACT.RELU if relu else ACT.NONE)  # fmt: skip
        if depthwise:
            self.m.op(
                "DEPTHWISE_CONV_2D", [t, wt, bt], [y], "DepthwiseConv2DOptions", DepthMultiplier=1, **opts
            )
        else:
            self.m.op("CONV_2D", [t, wt, bt], [y], "Conv2DOptions", **opts)
        return (y, (n, oh, ow, cout), s_out, zero)

    def binary(self, op, name, a, b, scale, zero, relu):
        y = self.out(name, a[1], scale, zero)
        options = "AddOptions" if op == "ADD" else "MulOptions"
        self.m.op(op, [a[0], b[0]], [y], options, FusedActivationFunction=ACT.RELU if relu else ACT.NONE)
        return (y, a[1], scale, zero)

    def pool(self, op, name, v, k, stride, padding):
        t, (n, h, w, c), s, z = v
        oh, ow = (-(-h // stride), -(-w // stride)) if padding == SAME else ((h - k) // stride + 1,) * 2
        y = self.out(name, (n, oh, ow, c), s, z)
        self.m.op(op, [t], [y], "Pool2DOptions", Padding=padding, StrideH=stride, StrideW=stride,
                  FilterHeight=k, FilterWidth=k, FusedActivationFunction=ACT.NONE)  # fmt: skip
        return (y, (n, oh, ow, c), s, z)


def families_model() -> bytes:
    """Every kernel family of the harness in one model (see the module docstring)."""
    b = Builder((1, 13, 13, 8))
    c1 = b.conv("conv3x3", b.start, 16, 3, stride=2)  # 13 -> 7, one pixel of padding each side
    dw = b.conv("dw3x3", c1, 0, 3, depthwise=True)
    pw = b.conv("conv1x1", dw, 16, 1, relu=False, scale_factor=1.5)
    add = b.binary("ADD", "residual", pw, c1, max(pw[2], c1[2]) * 1.3, -128, True)  # two input scales
    mul = b.binary("MUL", "gate", add, dw, add[2] * dw[2] * 150, -5, False)
    avg = b.pool("AVERAGE_POOL_2D", "avgpool", mul, 2, 2, SAME)  # 7 -> 4, edge windows of 2 and 1 pixels
    mx = b.pool("MAX_POOL_2D", "maxpool", avg, 2, 2, VALID)  # 4 -> 2
    flat = b.out("flat", (1, 64), mx[2], mx[3])
    b.m.op("RESHAPE", [mx[0], b.m.const("flat_shape", np.array([1, 64], np.int32))], [flat])
    rng = _rng("fc")
    wq = rng.integers(-127, 127, (10, 64), endpoint=True).astype(np.int8)
    ws = 0.01
    wt = b.m.const("fc_w", wq, quant=([ws], [0], 0))
    bt = b.m.const("fc_b", rng.integers(-500, 500, 10).astype(np.int32), quant=([mx[2] * ws], [0], 0))
    s_logits = float(60 * math.sqrt(64) * mx[2] * ws)
    logits = b.out("logits", (1, 10), s_logits, 2)
    b.m.op(
        "FULLY_CONNECTED", [flat, wt, bt], [logits], "FullyConnectedOptions", FusedActivationFunction=ACT.NONE
    )
    probs_q = b.out("probs_q", (1, 10), 1 / 256, -128)
    b.m.op("SOFTMAX", [logits], [probs_q], "SoftmaxOptions", Beta=4 / (127 * s_logits))  # not saturated
    probs = b.m.tensor("probabilities", (1, 10))
    b.m.op("DEQUANTIZE", [probs_q], [probs])
    logits_f = b.m.tensor("logits_f", (1, 10))
    b.m.op("DEQUANTIZE", [logits], [logits_f])
    b.m.outputs = [probs, logits_f]
    return b.m.write()


def need_tools(core: str) -> None:
    """Skip, naming what to install, without the cross compiler, QEMU or the CMSIS-NN snapshot."""
    spec = Target(core).spec
    if not shutil.which(Target(core).compiler):
        pytest.skip(f"{Target(core).compiler} missing (apt-get install {' '.join(spec.packages)})")
    if not shutil.which(spec.qemu):
        pytest.skip(f"{spec.qemu} missing (apt-get install {spec.qemu_package})")
    why = cmsis_nn.missing()
    if why:
        pytest.skip(why)


# ----------------------------------------------------------------------------- no toolchain
def test_harness_parameters_and_plan():
    m = cmsis_nn.read_model(families_model())
    cmsis_nn.prepare(m)
    ops = [s.op for s in m.steps]
    for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "MUL", "AVERAGE_POOL_2D", "MAX_POOL_2D",
               "FULLY_CONNECTED", "SOFTMAX"):  # fmt: skip
        assert op in ops
    conv = m.steps[ops.index("CONV_2D")].opts
    assert conv["pad"] == (1, 1) and conv["out_dims"] == (1, 7, 7, 16)
    assert all(0 < q < 1 << 31 and s <= 0 for q, s in zip(conv["mult"], conv["shift"]))
    assert m.steps[ops.index("AVERAGE_POOL_2D")].opts["pad"] == (
        0,
        0,
    )  # SAME 7 -> 4: the extra pixel at the end
    # the plan: buffers alive at once never share bytes
    offsets, total = cmsis_nn.plan(m)
    spans = {}  # tensor -> (first step, last step) using it
    for k, s in enumerate(m.steps):
        for i in [s.output, *s.inputs]:
            if i in offsets:
                first, _ = spans.get(i, (k, k))
                spans[i] = (first, k)
    items = [(offsets[i], offsets[i] + m.tensors[i].size, spans[i]) for i in spans]
    for a0, a1, (s0, e0) in items:
        assert a1 <= total
        for b0, b1, (s1, e1) in items:
            if (a0, a1) != (b0, b1) and not (e0 < s1 or e1 < s0):
                assert a1 <= b0 or b1 <= a0, "two live buffers overlap"


def test_harness_refuses_an_operator_by_name():
    w = Model()
    x = w.input("x", (1, 4), "int8", quant=([0.1], [0], 0))
    y = w.tensor("y", (1, 4), "int8", quant=([1 / 128], [0], 0))
    w.op("TANH", [x], [y])
    w.outputs = [y]
    m = cmsis_nn.read_model(w.write())
    with pytest.raises(UnsupportedError, match=r"operator 0 \(TANH\)"):
        cmsis_nn.prepare(m)


# ----------------------------------------------------------------------------- on the boards
@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cmsis_nn")
    path = folder / "families.tflite"
    path.write_bytes(families_model())
    x = (np.random.default_rng(3).standard_normal((1, 13, 13, 8)) * 2).astype(np.float32)
    return folder, path, {"input": x}


@pytest.mark.cross
@pytest.mark.parametrize("core", CORES)
def test_cmsis_nn_gives_flowc_int8_results(core, made):
    need_tools(core)
    folder, path, feeds = made
    work = folder / core
    work.mkdir()
    flowc = cmsis_nn.flowc_export(path, core, work)
    have = cmsis_nn.run_flowc(flowc, feeds)
    theirs = cmsis_nn.run(path, core, feeds, work, flowc)
    assert set(have["outputs"]) == set(theirs["outputs"])
    for name, value in have["outputs"].items():
        assert len(np.unique(value)) > 2, f"{name}: too few distinct values to test anything"
        np.testing.assert_array_equal(theirs["outputs"][name], value, err_msg=f"{name} on {core}")
    assert theirs["instructions"] > 0 and theirs["arena"] >= theirs["scratch"] >= 0
    assert theirs["flash"] > 0 and theirs["ram"] >= theirs["arena"]
