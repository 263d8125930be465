"""The four MLPerf Tiny architectures (DS-CNN keyword spotting, MobileNetV1 0.25 visual wake words
at 96 x 96, ResNet-8 on 32 x 32, the fully connected autoencoder on 640 inputs) as int8 TFLite
files laid out as TFLite's converter writes a fully integer model: a float input quantized to
int8, int8 convolutions with per-channel filters and int32 biases (scale input x filter),
ReLU fused and its output's zero point at -128, residual ADDs of two scales, an average pool
and fully connected layer, an int8 softmax (scale 1/256, zero point -128) dequantized to float.
The weights come from a seed and each layer's output scale from a rough bound of its sums, not
from a calibration (the tests' own flatbuffer writer makes the files; test_tf_converter.py has
TensorFlow's converter quantize the same architectures). flowc imports them (every convolution
and dense layer one ``qconv``) and its compiled C gives LiteRT's reference kernels' results
exactly."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

pytest.importorskip("flatbuffers")
tflite = pytest.importorskip("tflite")
pytest.importorskip("ai_edge_litert")

from tflite_files import Model, litert  # noqa: E402

import graphdef as gd  # noqa: E402
from codegen import pipeline  # noqa: E402

ACT = tflite.ActivationFunctionType
SAME, VALID = tflite.Padding.SAME, tflite.Padding.VALID


def _rng(key: str):
    return np.random.default_rng(zlib.crc32(key.encode()))


class Net:
    """An int8 network in TFLite's layout (NHWC, filters OHWI, depthwise 1HWC), built layer by
    layer; a value is (tensor, shape, scale, zero point)."""

    def __init__(self, shape):
        self.m, self.layers = Model(), 0
        x = self.m.input("input", shape)
        q = self.m.tensor("input_q", shape, "int8", quant=([1 / 32], [0], 0))
        self.m.op("QUANTIZE", [x], [q])
        self.v = (q, tuple(shape), 1 / 32, 0)

    def _out(self, name, shape, scale, relu):
        zero = -128 if relu else 0
        return self.m.tensor(name, shape, "int8", quant=([scale], [zero], 0)), zero

    def conv(self, name, cout, k, stride=1, depthwise=False, relu=True, v=None):
        t, (n, h, w, cin), s_in, _ = v or self.v
        cout = cin if depthwise else cout
        kh, kw = k if isinstance(k, tuple) else (k, k)
        oh, ow = -(-h // stride), -(-w // stride)  # SAME
        rng = _rng(name)
        ws = rng.uniform(0.004, 0.02, cout).astype(np.float32)
        shape = (1, kh, kw, cout) if depthwise else (cout, kh, kw, cin)
        wq = rng.integers(-127, 127, shape, endpoint=True).astype(np.int8)
        wt = self.m.const(name + "_w", wq, quant=(ws, np.zeros(cout, np.int64), 3 if depthwise else 0))
        bias = rng.integers(-2000, 2000, cout).astype(np.int32)
        bt = self.m.const(name + "_b", bias, quant=(s_in * ws, np.zeros(cout, np.int64), 0))
        taps = kh * kw * (1 if depthwise else cin)
        s_out = float(60 * math.sqrt(taps) * s_in * ws.mean())  # about 3 deviations of the sums
        y, zero = self._out(name, (n, oh, ow, cout), s_out, relu)
        opts = dict(Padding=SAME, StrideH=stride, StrideW=stride, DilationHFactor=1, DilationWFactor=1,
                    FusedActivationFunction=ACT.RELU if relu else ACT.NONE)  # fmt: skip
        if depthwise:
            self.m.op("DEPTHWISE_CONV_2D", [t, wt, bt], [y], "DepthwiseConv2DOptions", DepthMultiplier=1,
                      **opts)  # fmt: skip
        else:
            self.m.op("CONV_2D", [t, wt, bt], [y], "Conv2DOptions", **opts)
        self.layers += 1
        self.v = (y, (n, oh, ow, cout), s_out, zero)
        return self.v

    def dense(self, name, units, relu=True):
        t, shape, s_in, _ = self.v
        cin = shape[-1]
        rng = _rng(name)
        ws = float(rng.uniform(0.004, 0.02))
        wq = rng.integers(-127, 127, (units, cin), endpoint=True).astype(np.int8)
        wt = self.m.const(name + "_w", wq, quant=([ws], [0], 0))
        bias = rng.integers(-2000, 2000, units).astype(np.int32)
        bt = self.m.const(name + "_b", bias, quant=([s_in * ws], [0], 0))
        s_out = float(60 * math.sqrt(cin) * s_in * ws)
        y, zero = self._out(name, (1, units), s_out, relu)
        self.m.op("FULLY_CONNECTED", [t, wt, bt], [y], "FullyConnectedOptions",
                  FusedActivationFunction=ACT.RELU if relu else ACT.NONE)  # fmt: skip
        self.layers += 1
        self.v = (y, (1, units), s_out, zero)

    def add(self, name, a, b):
        s_out = max(a[2], b[2]) * 1.5
        y, zero = self._out(name, a[1], s_out, True)
        self.m.op("ADD", [a[0], b[0]], [y], "AddOptions", FusedActivationFunction=ACT.RELU)
        self.v = (y, a[1], s_out, zero)

    def pool_dense_softmax(self, units):
        t, (n, h, w, c), s, z = self.v
        p = self.m.tensor("pool", (n, 1, 1, c), "int8", quant=([s], [z], 0))
        self.m.op("AVERAGE_POOL_2D", [t], [p], "Pool2DOptions", Padding=VALID, StrideH=h, StrideW=w,
                  FilterHeight=h, FilterWidth=w, FusedActivationFunction=ACT.NONE)  # fmt: skip
        r = self.m.tensor("flat", (1, c), "int8", quant=([s], [z], 0))
        self.m.op("RESHAPE", [p, self.m.const("flat_shape", np.array([1, c], np.int32))], [r])
        self.v = (r, (1, c), s, z)
        self.dense("logits", units, relu=False)
        self.softmax()

    def softmax(self):
        yq = self.m.tensor("probabilities_q", self.v[1], "int8", quant=([1 / 256], [-128], 0))
        self.m.op("SOFTMAX", [self.v[0]], [yq], "SoftmaxOptions", Beta=1.0)
        self.v = (yq, self.v[1], 1 / 256, -128)

    def finish(self):
        y = self.m.tensor("output", self.v[1])
        self.m.op("DEQUANTIZE", [self.v[0]], [y])
        self.m.outputs = [y]
        return self.m.write()


def ds_cnn() -> Net:
    net = Net((1, 49, 10, 1))
    net.conv("conv1", 64, (10, 4), stride=2)
    for k in range(4):
        net.conv(f"dw{k}", 0, 3, depthwise=True)
        net.conv(f"pw{k}", 64, 1)
    net.pool_dense_softmax(12)
    return net


def mobilenet_v1() -> Net:
    net = Net((1, 96, 96, 3))
    net.conv("conv1", 8, 3, stride=2)
    blocks = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2)] + [(128, 1)] * 5 + [(256, 2), (256, 1)]
    for k, (c, stride) in enumerate(blocks):
        net.conv(f"dw{k}", 0, 3, stride=stride, depthwise=True)
        net.conv(f"pw{k}", c, 1)
    net.pool_dense_softmax(2)
    return net


def resnet8() -> Net:
    net = Net((1, 32, 32, 3))
    x = net.conv("conv1", 16, 3)
    for k, (c, stride) in enumerate([(16, 1), (32, 2), (64, 2)]):
        net.conv(f"s{k}a", c, 3, stride=stride)
        y = net.conv(f"s{k}b", c, 3, relu=False)
        short = x if stride == 1 else net.conv(f"s{k}s", c, 1, stride=stride, relu=False, v=x)
        net.add(f"s{k}add", y, short)
        x = net.v
    net.pool_dense_softmax(10)
    return net


def autoencoder() -> Net:
    net = Net((1, 640))
    for k, units in enumerate([128, 128, 128, 128, 8, 128, 128, 128, 128]):
        net.dense(f"fc{k}", units)
    net.dense("fc_out", 640, relu=False)
    return net


MODELS = {"ds_cnn": ds_cnn, "mobilenet_v1": mobilenet_v1, "resnet8": resnet8, "autoencoder": autoencoder}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder, out = tmp_path_factory.mktemp("tiny_tflite"), {}
    for name, build in MODELS.items():
        net = build()
        path = folder / f"{name}.tflite"
        path.write_bytes(net.finish())
        shape = net.m.tensors[net.m.inputs[0]][1]
        feeds = [np.random.default_rng(s).standard_normal(shape).astype(np.float32) * 2 for s in range(3)]
        out[name] = (path, net.layers, feeds, [litert(path.read_bytes(), [x])[0] for x in feeds])
    return out


@pytest.mark.c
@pytest.mark.parametrize("name", list(MODELS))
def test_tflite_mlperf_tiny_int8_gives_litert_results_exactly(name, made, compile_graphs):
    path, layers, feeds, want = made[name]
    graph = gd.load_tflite(path)
    steps = [n.op for n in pipeline.run(graph, pipeline.Options(), until="plan").program.steps]
    assert steps.count("qconv") == layers, (steps.count("qconv"), layers)
    (model,) = compile_graphs({f"tt_{name}": graph}).values()
    for x, w in zip(feeds, want):
        (have,) = model(input=x).values()
        assert have.dtype == w.dtype and have.shape == w.shape
        np.testing.assert_array_equal(have, w, err_msg=name)
        assert len(np.unique(w)) > 1, "a constant output would test nothing"
