"""The four MLPerf Tiny architectures (samples/tiny.py: DS-CNN keyword spotting, MobileNetV1
0.25 visual wake words, ResNet-8, the fully connected autoencoder), each as a float model and
quantized to int8 three ways: onnxruntime's quantizer in QDQ and in QOperator format
(per-channel int8 weights, int8 activations, calibrated on random inputs) and ``flowc quantize``.
flowc's compiled C runs every file against onnxruntime on the same file: float to float32
rounding, QOperator exactly, QDQ within two output steps (both run the convolutions in integers
alike; the pools, which onnxruntime fuses into integer operators, flowc computes in floats
between the quantize steps: a rounding apart in one layer can move the next by a step), the top
class the same on nearly every input."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import graphdef as gd  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flowc_sample_tiny", ROOT / "samples" / "tiny.py")
tiny = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny)

ROUTES = ("float", "qdq", "qoperator", "flowc")


def _inputs(name: str, count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, *tiny.INPUTS[name])).astype(np.float32)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from codegen.quantize import quantize_onnx

    folder = tmp_path_factory.mktemp("tiny")
    out = {}
    for name, path in tiny.write_all(folder).items():
        calib = _inputs(name, 8, 11)

        class Reader(CalibrationDataReader):
            def __init__(self, calib=calib):
                self.it = iter([{"input": x} for x in calib])

            def get_next(self):
                return next(self.it, None)

        out[(name, "float")] = path
        for route, fmt in (("qdq", QuantFormat.QDQ), ("qoperator", QuantFormat.QOperator)):
            out[(name, route)] = folder / f"{name}_{route}.onnx"
            quantize_static(path, out[(name, route)], Reader(), quant_format=fmt, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
        out[(name, "flowc")] = folder / f"{name}_flowc.onnx"
        quantize_onnx(path, {"input": calib}, out[(name, "flowc")])
    return out


@pytest.fixture(scope="module")
def compiled(files, compile_graphs):
    graphs = {f"{name}_{route}": gd.load_onnx(path) for (name, route), path in files.items()}
    return compile_graphs(graphs)


def _output_step(path) -> float:
    """The scale of the DequantizeLinear that gives a QDQ file its output."""
    from onnx import numpy_helper

    model = onnx.load(path)
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear", node.op_type
    scale = next(t for t in model.graph.initializer if t.name == node.input[1])
    return float(numpy_helper.to_array(scale).reshape(-1)[0])


@pytest.mark.c
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", list(tiny.MODELS))
def test_compiled_matches_onnxruntime(name, route, files, compiled):
    session = ort.InferenceSession(str(files[(name, route)]), providers=["CPUExecutionProvider"])
    model = compiled[f"{name}_{route}"]
    xs = _inputs(name, 6, 12)
    agree, worst, span = 0, 0.0, 0.0
    for x in xs:
        (want,) = session.run(None, {"input": x})
        (have,) = model(input=x).values()
        assert have.shape == want.shape and have.dtype == want.dtype
        worst = max(worst, float(np.abs(have - want).max()))
        span = max(span, float(np.abs(want).max()))
        agree += int(np.argmax(have) == np.argmax(want))
    if route == "float":
        assert worst <= 2e-4 * max(span, 1.0), worst
    elif route == "qoperator":  # QLinearConv and QGemm requantize as onnxruntime does: exactly
        assert worst == 0, worst
    elif route == "qdq":  # onnxruntime's and flowc's fusions differ (a Relu's floor, where the pools sum)
        step = _output_step(files[(name, route)])
        assert worst <= 2 * step * (1 + 1e-6), (worst, step)
    else:
        assert worst <= 0.08 * span, (worst, span)
    if name != "autoencoder":
        assert agree >= len(xs) - 1, agree


@pytest.mark.parametrize("route", ["qdq", "qoperator", "flowc"])
@pytest.mark.parametrize("name", list(tiny.MODELS))
def test_int8_layers_keep_int8_weights(name, route, files):
    """onnxruntime's QLinearConv and QGemm, and the QDQ convolutions and dense layers fused into
    QLinearConv (graphdef/onnx/qdq.py; ``flowc quantize``'s last layer too), run on the integer
    kernel (``qconv``: its int8 weights stored as they are): every Conv and Gemm is one, and
    every average pool (one window a plane) sums the int8 values into int32 (ops_quant_ms.py,
    reduce_sum's dtype: no float or int32 copy of the features); the weights take
    at most 0.27x the float model's bytes, the arena at most 0.4x (on the host: the VNNI
    forms' packed windows are a third of DS-CNN's; but for the autoencoder's, a few KiB)."""
    from codegen import pipeline

    plans = {}
    for kind in ("float", route):
        graph = gd.load_onnx(files[(name, kind)])
        plans[kind] = pipeline.run(graph, pipeline.Options(), until="plan").results["plan"]
    q, f = plans[route], plans["float"]
    kinds = [n.op_type for n in onnx.load(str(files[(name, "float")])).graph.node]
    layers, pools = (
        sum(k in which for k in kinds) for which in (("Conv", "Gemm"), ("AveragePool", "GlobalAveragePool"))
    )
    assert [n.op for n in q.steps].count("qconv") == layers > 0
    sums = [n for n in q.steps if n.op == "reduce_sum" and n.outputs[0].dtype == "int32"]
    assert len(sums) == pools and all(q.types[n.inputs[0]].dtype == "int8" for n in sums), sums
    assert q.weight_bytes <= 0.27 * f.weight_bytes, (q.weight_bytes, f.weight_bytes)
    limit = 0.4 * f.arena_bytes if name != "autoencoder" else 8192
    assert q.arena_bytes <= limit, (q.arena_bytes, f.arena_bytes)


@pytest.mark.parametrize("name", ["ds_cnn", "mobilenet_v1", "resnet8"])
def test_qdq_classifiers_end_in_integers(name, files, capsys):
    """A QDQ classifier's Flatten between a DequantizeLinear and a QuantizeLinear of one scale
    runs on the integers and its Softmax as QLinearSoftmax (a table of the exponentials, as
    onnxruntime runs it: no exp at run time), its average pool and ResNet-8's residual adds as
    com.microsoft's QLinearAveragePool and QLinearAdd: ``flowc inspect`` names nothing left in
    float, and the plan holds no float tensor larger than the logits. Built for a Cortex-M4 (where
    the cross compiler is), the int8 model's library imports no C library function but memcpy and
    memset: no float or double routine, no libm."""
    import json
    import shutil

    import codegen
    from codegen import pipeline
    from codegen.cli import main

    path = files[(name, "qdq")]
    steps = pipeline.run(gd.load_onnx(path), pipeline.Options(), until="plan").program.steps
    assert not [n for n in steps if n.op in ("softmax", "exp")], [n.op for n in steps]
    floats = [o.size for n in steps for o in n.outputs if o.dtype == "float32" and o.size > 16]
    assert not floats, floats
    assert main(["inspect", str(path)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("left in float: ")]
    assert not lines, lines
    if shutil.which("arm-none-eabi-gcc"):
        folder = codegen.export(gd.load_onnx(path), path.parent / f"{name}_m4", name="m", arch="cortex-m4")
        imports = set(json.loads((Path(folder) / "metadata.json").read_text())["footprint"]["imports"])
        assert imports <= {"memcpy", "memset"}, imports
