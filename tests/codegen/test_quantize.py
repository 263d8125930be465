"""Post-training quantization (codegen/quantize.py, ``flowc quantize``): a float CNN and
calibration inputs -> an int8 QDQ model that onnxruntime runs and flowc compiles, with per-channel
int8 weights, per-tensor int8 activations and a report that is checked against both runtimes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphdef as gd  # noqa: E402
from codegen import pipeline  # noqa: E402
from codegen.quantize import quantize_onnx  # noqa: E402


def _cnn(path) -> None:
    """Conv-ReLU, a depthwise conv, a residual add, global average pool, Gemm (transB)."""
    rng = np.random.default_rng(5)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1), init("w2", 8, 1, 3, 3),
             init("b2", 8, scale=0.1), init("wf", 6, 8), init("bf", 6, scale=0.1)]  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])
    model = helper.make_model(helper.make_graph(nodes, "cnn", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])  # fmt: skip
    model.ir_version = 8
    onnx.save(model, path)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ptq")
    _cnn(folder / "float.onnx")
    calib = np.random.default_rng(1).standard_normal((24, 1, 3, 12, 12)).astype(np.float32)
    np.savez(folder / "calib.npz", x=calib)
    report = quantize_onnx(folder / "float.onnx", folder / "calib.npz", folder / "int8.onnx")
    return folder, calib, report


def test_weights_are_int8_per_channel_and_activations_per_tensor(made):
    folder, _, report = made
    m = onnx.load(folder / "int8.onnx")
    onnx.checker.check_model(m)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for name, channels in (("w1", 8), ("w2", 8), ("wf", 6)):
        assert inits[f"{name}_quantized"].dtype == np.int8 and name not in inits
        assert inits[f"{name}_scale"].shape == (channels,) and not inits[f"{name}_zero_point"].any()
        assert np.abs(inits[f"{name}_quantized"]).max() == 127  # symmetric: each channel's largest is +-127
    ops = [n.op_type for n in m.graph.node]
    # x, r1, c2, a, g (a Flatten's input), f, and the last layer's result y (so that it runs in
    # integers too)
    assert ops.count("QuantizeLinear") == report.quantized_activations == 7
    assert report.quantized_weights == 3
    f, q = report.weight_bytes
    assert q < 0.46 * f  # 0.45x: in a model this small the scales and the int32 biases (and theirs) weigh
    for name in ("b1", "b2", "bf"):  # int32, scale x_scale * w_scale: the layers run in integers
        assert inits[f"{name}_quantized"].dtype == np.int32 and name not in inits


def test_onnxruntime_and_flowc_run_the_int8_model_and_agree_with_the_float_one(made, compile_graphs):
    folder, calib, report = made
    session = ort.InferenceSession(str(folder / "int8.onnx"), providers=["CPUExecutionProvider"])
    floats = ort.InferenceSession(str(folder / "float.onnx"), providers=["CPUExecutionProvider"])
    g = gd.load_onnx(folder / "int8.onnx")
    steps = [n.op for n in pipeline.run(g, pipeline.Options(), until="plan").program.steps]
    # both convolutions (the first with its Relu) and the Gemm; the global pool QLinearGlobalAveragePool,
    # a sum of the integers
    assert steps.count("qconv") == 3 and "reduce_sum" in steps and "reduce_mean" not in steps, steps
    (model,) = compile_graphs({"ptq_cnn": g}).values()
    agree, worst = [], 0.0
    for x in calib:
        want = session.run(None, {"x": x})[0]
        (have,) = model(x=x).values()
        np.testing.assert_allclose(have, want, atol=0.05, rtol=0)  # int8 both, rounding apart at most
        ref = floats.run(None, {"x": x})[0]
        agree.append(int(np.argmax(ref) == np.argmax(have)))
        worst = max(worst, float(np.abs(ref - have).max()))
    assert report.samples == 24 and report.top1_agreement >= 0.9
    assert np.mean(agree) == pytest.approx(report.top1_agreement, abs=0.1)
    assert worst < 0.2 and report.max_abs_error["y"] < 0.2


def test_a_percentile_narrows_the_activation_ranges(made):
    folder, _, _ = made
    quantize_onnx(folder / "float.onnx", folder / "calib.npz", folder / "p.onnx", percentile=99.0)
    full = {t.name: numpy_helper.to_array(t) for t in onnx.load(folder / "int8.onnx").graph.initializer}
    narrow = {t.name: numpy_helper.to_array(t) for t in onnx.load(folder / "p.onnx").graph.initializer}
    scales = [k for k in full if k.endswith("_act_scale")]
    assert scales and all(narrow[k] <= full[k] for k in scales) and any(narrow[k] < full[k] for k in scales)


def flowc(*args, cwd):
    cmd = [sys.executable, "-m", "codegen.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)


def test_flowc_quantize_writes_the_model_and_prints_the_report(made, tmp_path):
    folder, _, _ = made
    out = tmp_path / "q.onnx"
    res = flowc(
        "quantize", folder / "float.onnx", "--calibrate", folder / "calib.npz", "-o", out, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert "top-1 agreement" in res.stdout and "weights" in res.stdout and (tmp_path / "q.onnx").is_file()


@pytest.mark.parametrize(
    "calib,words",
    [({"y": np.zeros((2, 1, 3, 12, 12), np.float32)}, "calibration data has no array for input(s) x"),
     ({"x": np.zeros((0, 1, 3, 12, 12), np.float32)}, "non-zero number of samples")],
)  # fmt: skip
def test_bad_calibration_data_is_one_line_and_writes_nothing(made, tmp_path, calib, words):
    folder, _, _ = made
    np.savez(tmp_path / "c.npz", **calib)
    out = tmp_path / "q.onnx"
    res = flowc("quantize", folder / "float.onnx", "--calibrate", tmp_path / "c.npz", "-o", out, cwd=tmp_path)
    assert res.returncode == 1 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, (
        res.stderr
    )
    assert not any(tmp_path.glob("*q.onnx*"))
