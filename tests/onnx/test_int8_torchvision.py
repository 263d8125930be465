"""torchvision MobileNetV2 and ResNet-18, exported by torch's TorchScript exporter and quantized by
onnxruntime's quantizer (QDQ, per-channel int8 weights, int8 activations): every convolution and
the classifier run on flowc's integer kernel (no QDQ pattern left in float), and the compiled
model gives onnxruntime's classes on inputs the calibration did not see, its logits within three
output steps, a step on average (measured: MobileNetV2 equal, ResNet-18 at most two steps, 0.47
on average: both requantize each convolution alike, but flowc computes the residual adds in
float between quantize steps where onnxruntime fuses them into QLinearAdd, and a rounding apart
in one layer can move the next by a step). Small inputs (64 x 64) keep the file fast;
bench/int8.py times the models at 224 x 224."""

from __future__ import annotations

import io
import sys
import types
import warnings
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
torchvision = pytest.importorskip("torchvision")

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402
from codegen import pipeline  # noqa: E402

SIZE = 64


def _model(name: str):
    """The torchvision model with weights from a seed, its batch norms' statistics taken from a
    few random batches (so that activations keep their scale through the layers, as trained
    weights would), in eval mode."""
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 3, SIZE, SIZE))
    return model.eval()


@pytest.fixture(scope="module", params=["mobilenet_v2", "resnet18"])
def quantized(request, tmp_path_factory):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    name = request.param
    folder = tmp_path_factory.mktemp(name)
    model, path, qpath = _model(name), folder / "float.onnx", folder / "int8.onnx"
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, SIZE, SIZE),), str(path), dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["logits"])  # fmt: skip
    rng = np.random.default_rng(3)
    calib = [rng.standard_normal((1, 3, SIZE, SIZE)).astype(np.float32) for _ in range(6)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x} for x in calib])

        def get_next(self):
            return next(self.it, None)

    quantize_static(path, qpath, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
    return name, qpath


def test_every_layer_runs_on_the_integer_kernel(quantized):
    name, path = quantized
    graph = gd.load_onnx(path)
    # no layer left in float: the residual adds QLinearAdd, the global pool QLinearGlobalAveragePool
    # (its sums on the integers)
    assert not graph.notes, graph.notes
    layers = sum(n.op_type in ("Conv", "Gemm") for n in onnx.load(path).graph.node)
    program = pipeline.run(graph, pipeline.Options(), until="plan").program
    steps = [n.op for n in program.steps]
    assert steps.count("qconv") == layers, (name, steps.count("qconv"), layers)
    # the global pool: the int8 features summed into int32 (no float or int32 copy of them)
    assert [n.op for n in program.steps if n.outputs[0].dtype == "int32"] == ["reduce_sum"]
    # activations stay int8 (max pools and residual adds included): float only in the residual
    # adds' fused loops (int8 in, int8 out) and the dequantized logits
    floats = [n.outputs[0].shape for n in program.steps if n.outputs[0].dtype == "float32"]
    assert all(int(np.prod(s)) <= 1000 for s in floats), (name, floats)


def test_compiled_gives_onnxruntimes_classes(quantized):
    name, path = quantized
    model = codegen.compile(gd.load_onnx(path), name=f"tv8_{name}")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    qm = onnx.load(path)
    last = next(n for n in qm.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "logits")
    step = float(next(onnx.numpy_helper.to_array(t) for t in qm.graph.initializer if t.name == last.input[1]))
    rng = np.random.default_rng(9)
    for _ in range(3):
        x = rng.standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)
        got, want = model(input=x)["logits"], session.run(None, {"input": x})[0]
        steps = np.abs(got - want) / step
        assert got.argmax() == want.argmax(), (name, got.argmax(), want.argmax())
        assert steps.max() <= 3 and steps.mean() <= 1, (name, steps.max(), steps.mean())
