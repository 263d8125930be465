"""The four MLPerf Tiny reference architectures as float ONNX models, weights from a seed.

    python samples/tiny.py OUT_DIR    # ds_cnn.onnx, mobilenet_v1.onnx, resnet8.onnx, autoencoder.onnx

- ``ds_cnn``: keyword spotting on 49x10 MFCCs: a 10x4 stride-2 convolution to 64 channels,
  four depthwise-separable blocks, average pool, 12 classes;
- ``mobilenet_v1``: visual wake words, MobileNetV1 with width 0.25 on 96x96x3, 2 classes;
- ``resnet8``: image classification on 32x32x3: three residual stacks of 16, 32 and 64
  channels (1x1 strided shortcuts), 10 classes;
- ``autoencoder``: anomaly detection, fully connected 640-128-128-128-128-8-128-128-128-128-640.

Batch norms are folded into the convolutions' biases (as the deployed models have them), the
classifiers end in Softmax. Weights are He-scaled normals from ``seed`` so that activations keep
their size through the network: the numbers mean nothing, the shapes and operators are the
benchmark's. Used by tests/onnx/test_tiny_models.py and bench/int8.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

INPUTS = {
    "ds_cnn": (1, 1, 49, 10),
    "mobilenet_v1": (1, 3, 96, 96),
    "resnet8": (1, 3, 32, 32),
    "autoencoder": (1, 640),
}


class _Builder:
    def __init__(self, name: str, seed: int):
        self.name, self.rng = name, np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def fresh(self, what: str) -> str:
        self.count += 1
        return f"{what}_{self.count}"

    def const(self, array: np.ndarray, what: str) -> str:
        from onnx import numpy_helper

        name = self.fresh(what)
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list, **attrs) -> str:
        from onnx import helper

        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k, stride=1, group=1, relu=True, pads=None) -> str:
        kh, kw = (k, k) if isinstance(k, int) else k
        fan_in = cin // group * kh * kw
        w = self.rng.standard_normal((cout, cin // group, kh, kw)) * np.sqrt(2.0 / fan_in)
        b = self.rng.standard_normal(cout) * 0.05
        if pads is None:  # odd kernels: the same padding on both sides
            pads = [(kh - 1) // 2, (kw - 1) // 2, (kh - 1) // 2, (kw - 1) // 2]
        ins = [x, self.const(w, "w"), self.const(b, "b")]
        y = self.node("Conv", ins, strides=[stride, stride], group=group, pads=list(pads))
        return self.node("Relu", [y]) if relu else y

    def dense(self, x: str, cin: int, cout: int, relu=True) -> str:
        w = self.rng.standard_normal((cout, cin)) * np.sqrt(2.0 / cin)
        b = self.rng.standard_normal(cout) * 0.05
        y = self.node("Gemm", [x, self.const(w, "w"), self.const(b, "b")], transB=1)
        return self.node("Relu", [y]) if relu else y

    def model(self, x_shape, out: str, out_shape):
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, list(x_shape))
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, list(out_shape))
        graph = helper.make_graph(self.nodes, self.name, [x], [y], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        return model


def ds_cnn(seed: int = 1):
    b = _Builder("ds_cnn", seed)
    h = b.conv("input", 1, 64, (10, 4), stride=2, pads=[4, 1, 5, 2])  # 49x10 -> 25x5
    for _ in range(4):
        h = b.conv(h, 64, 64, 3, group=64)
        h = b.conv(h, 64, 64, 1)
    h = b.node("AveragePool", [h], kernel_shape=[25, 5])
    h = b.node("Flatten", [h])
    return b.model(INPUTS["ds_cnn"], b.node("Softmax", [b.dense(h, 64, 12, relu=False)], axis=1), (1, 12))


def mobilenet_v1(seed: int = 2, alpha: float = 0.25):
    b = _Builder("mobilenet_v1", seed)
    c = int(32 * alpha)
    h = b.conv("input", 3, c, 3, stride=2)  # 96 -> 48
    blocks = [
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        *[(512, 1)] * 5,
        (1024, 2),
        (1024, 1),
    ]
    for out, stride in blocks:
        out = int(out * alpha)
        h = b.conv(h, c, c, 3, stride=stride, group=c)
        h = b.conv(h, c, out, 1)
        c = out
    h = b.node("GlobalAveragePool", [h])
    h = b.node("Flatten", [h])
    return b.model(INPUTS["mobilenet_v1"], b.node("Softmax", [b.dense(h, c, 2, relu=False)], axis=1), (1, 2))


def resnet8(seed: int = 3):
    b = _Builder("resnet8", seed)
    h = b.conv("input", 3, 16, 3)
    c = 16
    for out, stride in ((16, 1), (32, 2), (64, 2)):
        y = b.conv(h, c, out, 3, stride=stride)
        y = b.conv(y, out, out, 3, relu=False)
        short = h if stride == 1 and c == out else b.conv(h, c, out, 1, stride=stride, relu=False)
        h = b.node("Relu", [b.node("Add", [y, short])])
        c = out
    h = b.node("AveragePool", [h], kernel_shape=[8, 8])
    h = b.node("Flatten", [h])
    return b.model(INPUTS["resnet8"], b.node("Softmax", [b.dense(h, 64, 10, relu=False)], axis=1), (1, 10))


def autoencoder(seed: int = 4):
    b = _Builder("autoencoder", seed)
    h, c = "input", 640
    for out in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        h, c = b.dense(h, c, out), out
    return b.model(INPUTS["autoencoder"], b.dense(h, c, 640, relu=False), (1, 640))


MODELS = {"ds_cnn": ds_cnn, "mobilenet_v1": mobilenet_v1, "resnet8": resnet8, "autoencoder": autoencoder}


def write_all(folder) -> dict:
    """Write every model as ``<name>.onnx`` in ``folder``; {name: path}."""
    import onnx

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, make in MODELS.items():
        out[name] = folder / f"{name}.onnx"
        onnx.save(make(), out[name])
    return out


if __name__ == "__main__":
    for name, path in write_all(sys.argv[1] if len(sys.argv) > 1 else "tiny_models").items():
        print(f"{name}: {path}")
