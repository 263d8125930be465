"""The four MLPerf Tiny architectures (DS-CNN keyword spotting, MobileNetV1 0.25 visual wake words
at 96 x 96, ResNet-8 on 32 x 32, the fully connected autoencoder on 640 inputs) defined in Keras
with batch norms, and quantized to int8 by TensorFlow's own converter (``TFLiteConverter`` with a
representative dataset, integer-only builtins), with a float interface (QUANTIZE and DEQUANTIZE
at the ends) and with an int8 one. What the converter writes is imported as it is (its Flatten
computes the target shape with SHAPE, STRIDED_SLICE and PACK), every convolution and dense layer
becomes one ``qconv``, and the compiled C gives LiteRT's reference kernels' outputs exactly.
Weights come from a seed and the batch norms' statistics from a training-mode call on the
calibration data; nothing is downloaded."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("ai_edge_litert")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

from tflite_files import litert  # noqa: E402

import graphdef as gd  # noqa: E402
from codegen import pipeline  # noqa: E402

keras = tf.keras
L = keras.layers


def _bn_relu(x, relu=True):
    x = L.BatchNormalization()(x)
    return L.ReLU()(x) if relu else x


def _head(x, classes: int):
    """Average pool over the whole plane, flatten, the logits and their softmax (both outputs:
    the logits keep the comparison from resting on a saturated softmax)."""
    x = L.Flatten()(L.AveragePooling2D(pool_size=tuple(x.shape[1:3]))(x))
    z = L.Dense(classes, kernel_initializer=keras.initializers.RandomNormal(stddev=2.0))(x)
    return [z, L.Softmax()(z)]


def ds_cnn():
    i = keras.Input((49, 10, 1))
    x = _bn_relu(L.Conv2D(64, (10, 4), strides=2, padding="same", use_bias=False)(i))
    for _ in range(4):
        x = _bn_relu(L.DepthwiseConv2D(3, padding="same", use_bias=False)(x))
        x = _bn_relu(L.Conv2D(64, 1, use_bias=False)(x))
    return keras.Model(i, _head(x, 12)), 1 + 8 + 1


def mobilenet_v1():
    i = keras.Input((96, 96, 3))
    x = _bn_relu(L.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(i))
    blocks = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2)] + [(128, 1)] * 5 + [(256, 2), (256, 1)]
    for c, s in blocks:
        x = _bn_relu(L.DepthwiseConv2D(3, strides=s, padding="same", use_bias=False)(x))
        x = _bn_relu(L.Conv2D(c, 1, use_bias=False)(x))
    return keras.Model(i, _head(x, 2)), 1 + 2 * len(blocks) + 1


def resnet8():
    i = keras.Input((32, 32, 3))
    x = _bn_relu(L.Conv2D(16, 3, padding="same")(i))
    layers = 1
    for c, s in ((16, 1), (32, 2), (64, 2)):
        y = _bn_relu(L.Conv2D(c, 3, strides=s, padding="same")(x))
        y = _bn_relu(L.Conv2D(c, 3, padding="same")(y), relu=False)
        short = x if s == 1 else L.Conv2D(c, 1, strides=s)(x)
        x = L.ReLU()(L.Add()([y, short]))
        layers += 2 if s == 1 else 3
    return keras.Model(i, _head(x, 10)), layers + 1


def autoencoder():
    i = keras.Input((640,))
    x = i
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x = L.ReLU()(L.BatchNormalization()(L.Dense(units)(x)))
    return keras.Model(i, L.Dense(640)(x)), 10


MODELS = {"ds_cnn": ds_cnn, "mobilenet_v1": mobilenet_v1, "resnet8": resnet8, "autoencoder": autoencoder}
INTERFACES = ("float", "int8")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """{(name, interface): (path, layers, calibration data)}, converted once for the module."""
    folder, out = tmp_path_factory.mktemp("tf_converter"), {}
    for name, build in MODELS.items():
        keras.utils.set_random_seed(7)
        model, layers = build()
        data = np.random.default_rng(0).standard_normal((16, *model.input_shape[1:])).astype(np.float32)
        model(data, training=True)  # the batch norms' moving statistics leave their defaults
        for interface in INTERFACES:
            conv = tf.lite.TFLiteConverter.from_keras_model(model)
            conv.optimizations = [tf.lite.Optimize.DEFAULT]
            conv.representative_dataset = lambda data=data: ([d[None]] for d in data)
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            if interface == "int8":
                conv.inference_input_type = conv.inference_output_type = tf.int8
            path = folder / f"{name}_{interface}.tflite"
            path.write_bytes(conv.convert())
            out[name, interface] = (path, layers, data)
    return out


def _feeds(path, data, interface: str) -> list[np.ndarray]:
    """Three calibration rows and three inputs twice as wide (saturating the input's range)."""
    xs = [data[k][None] for k in range(3)]
    xs += [np.random.default_rng(s).standard_normal(xs[0].shape).astype(np.float32) * 2 for s in range(3)]
    if interface == "float":
        return xs
    from ai_edge_litert.interpreter import Interpreter

    scale, zero = Interpreter(model_path=str(path)).get_input_details()[0]["quantization"]
    return [np.clip(np.round(x / scale) + zero, -128, 127).astype(np.int8) for x in xs]


@pytest.mark.c
@pytest.mark.parametrize("interface", INTERFACES)
@pytest.mark.parametrize("name", list(MODELS))
def test_tensorflow_converted_int8_gives_litert_results_exactly(name, interface, converted, compile_graphs):
    path, layers, data = converted[name, interface]
    graph = gd.load_tflite(path)
    steps = [n.op for n in pipeline.run(graph, pipeline.Options(), until="plan").program.steps]
    assert steps.count("qconv") == layers, (steps.count("qconv"), layers)
    if name == "resnet8":  # its residual ADDs on the integer kernel, in the convolutions' layout
        assert steps.count("qadd") == 3 and steps.count("transpose") <= 2, steps
    (model,) = compile_graphs({f"tfc_{name}_{interface}": graph}).values()
    (x_name,) = [t.name for t in model.inputs]
    seen = set()
    for x in _feeds(path, data, interface):
        want = litert(path.read_bytes(), [x])
        have = list(model(**{x_name: x}).values())
        assert len(have) == len(want)
        for h, w in zip(have, want):
            assert h.dtype == w.dtype and h.shape == w.shape, (h.dtype, h.shape, w.dtype, w.shape)
            np.testing.assert_array_equal(h, w, err_msg=f"{name} ({interface} interface)")
            seen.update(w.ravel().tolist())
    assert len(seen) >= 4, "outputs of a few values would test little"
