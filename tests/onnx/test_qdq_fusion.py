"""QDQ convolutions fused into QLinearConv at import (graphdef/onnx/qdq.py): a two-convolution
model quantized by onnxruntime in its default QDQ format runs on the integer kernel (``qconv``,
int8 weights kept) and gives onnxruntime's results to one output step (both fuse the average
pool after them too, and requantize in float32); the patterns QLinearConv would change (another
bias scale, a float result read elsewhere) stay float and stay correct; the other operators
onnxruntime fuses between DequantizeLinear and QuantizeLinear nodes become its QLinear ones."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphdef as gd  # noqa: E402
from codegen import pipeline  # noqa: E402


def _float_model(path) -> None:
    rng = np.random.default_rng(5)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[0, 1, 1, 0]),
        helper.make_node("AveragePool", ["c2"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1), init("w2", 6, 8, 3, 3, scale=0.2),
             init("b2", 6, scale=0.1)]  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 3, 3])
    graph = helper.make_graph(nodes, "cnn", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """{activation type: the QDQ file} and inputs the calibration did not see."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    folder = tmp_path_factory.mktemp("qdq")
    _float_model(folder / "float.onnx")
    rng = np.random.default_rng(8)
    samples = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(12)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": x} for x in samples[:8]])

        def get_next(self):
            return next(self.it, None)

    files = {}
    for act in (QuantType.QInt8, QuantType.QUInt8):
        files[act.name] = folder / f"cnn_{act.name}.onnx"
        quantize_static(folder / "float.onnx", files[act.name], Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=act, weight_type=QuantType.QInt8)  # fmt: skip
    return files, samples[8:]


def _steps(graph) -> list[str]:
    return [n.op for n in pipeline.run(graph, pipeline.Options(), until="plan").program.steps]


def _check(path, graph, inputs, compile_graphs, name) -> None:
    """Compiled against onnxruntime: at most one step of the output's quantization apart, on
    under a tenth of the values."""
    model_proto = onnx.load(path)
    y = model_proto.graph.output[0].name
    last = next(n for n in model_proto.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == y)
    scale = next(t for t in model_proto.graph.initializer if t.name == last.input[1])
    step = float(numpy_helper.to_array(scale).reshape(-1)[0])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (model,) = compile_graphs({name: graph}).values()
    for x in inputs:
        wants = session.run(None, {"x": x})
        haves = list(model(x=x).values())
        np.testing.assert_allclose(haves[0], wants[0], rtol=0, atol=step * 1.001)
        assert np.mean(haves[0] != wants[0]) < 0.1
        for have, want in zip(haves[1:], wants[1:]):  # a float output (a convolution's): its input
            # may be a step apart at a value
            np.testing.assert_allclose(have, want, rtol=0, atol=0.02 * float(np.abs(want).max()))


@pytest.mark.c
@pytest.mark.parametrize("act", ["QInt8", "QUInt8"])
def test_qdq_convolutions_run_on_the_integer_kernel_as_onnxruntime_runs_them(act, quantized, compile_graphs):
    files, inputs = quantized
    graph = gd.load_onnx(files[act])
    steps = _steps(graph)
    assert steps.count("qconv") == 3 and "conv" not in steps, steps  # the average pool's too
    _check(files[act], graph, inputs, compile_graphs, f"qdq_{act}")


def _scale_bias(g) -> None:
    """The first convolution's bias scale 1.0001 times x_scale * w_scale."""
    dq = next(n for n in g.node if n.op_type == "DequantizeLinear" and "b1" in n.input[0])
    t = next(t for t in g.initializer if t.name == dq.input[1])
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(1.0001), t.name))


def _edited(path, tmp_path, edit, name="edited") -> tuple:
    model = onnx.load(path)
    edit(model.graph)
    out = tmp_path / f"{name}.onnx"
    onnx.save(model, out)
    return out, gd.load_onnx(out)


@pytest.mark.c
def test_a_bias_scale_other_than_x_scale_times_w_scale_stays_float(quantized, compile_graphs, tmp_path):
    files, inputs = quantized

    path, graph = _edited(files["QInt8"], tmp_path, _scale_bias)
    steps = _steps(graph)
    assert steps.count("qconv") == 2, steps
    _check(path, graph, inputs, compile_graphs, "qdq_bias")


@pytest.mark.c
def test_a_convolution_whose_float_result_is_an_output_stays_float(quantized, compile_graphs, tmp_path):
    files, inputs = quantized

    def expose(g):
        conv = [n for n in g.node if n.op_type == "Conv"][1]
        g.output.append(helper.make_tensor_value_info(conv.output[0], TensorProto.FLOAT, None))

    path, graph = _edited(files["QInt8"], tmp_path, expose)
    steps = _steps(graph)
    assert steps.count("qconv") == 2, steps
    _check(path, graph, inputs, compile_graphs, "qdq_exposed")


def test_inspect_says_which_patterns_stay_float_and_why(quantized, tmp_path, capsys):
    from codegen.cli import main

    files, _ = quantized

    def global_max(g):  # the average pool a GlobalMaxPool: no integer kernel (its scales differ)
        pool = next(n for n in g.node if n.op_type == "AveragePool")
        pool.op_type = "GlobalMaxPool"
        del pool.attribute[:]
        g.output[0].type.tensor_type.ClearField("shape")

    path, _ = _edited(files["QInt8"], tmp_path, _scale_bias)
    other, _ = _edited(files["QInt8"], tmp_path, global_max, "global_max")
    for model, want in ((files["QInt8"], []), (path, ["its bias's scale is not x_scale * w_scale"])):
        assert main(["inspect", str(model)]) == 0
        lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("left in float: ")]
        convs = [ln for ln in lines if ln.startswith("left in float: Conv")]
        assert len(convs) == len(want) and all(w in ln for w, ln in zip(want, convs)), lines
        assert not [ln for ln in lines if "AveragePool" in ln], lines  # QLinearAveragePool, integers
    # an operator between a DequantizeLinear and a QuantizeLinear without an integer kernel: said so
    assert main(["inspect", str(other)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("left in float: ")]
    assert [ln for ln in lines if "GlobalMaxPool" in ln and "no integer kernel" in ln], lines


def test_inspect_names_each_integer_convolutions_form(quantized, capsys):
    """Each qconv step's line ends with the kernel form the build takes: the portable build's
    int16 planes, AArch64's sdot where the core has the dot-product extension, and on the host
    what its compiler enables (AVX-512 VNNI on the machines these tests run on, else the planes)."""
    from codegen.backends.c import toolchain
    from codegen.cli import main
    from codegen.target import Target

    files, _ = quantized
    host = toolchain.macros(Target(), toolchain.find_cc(None, Target()))
    vnni = all(f"__{f}__" in host for f in ("AVX512VNNI", "AVX512BW", "AVX512VL"))
    for flags, want in (
        (["--portable"], "int16 planes"),
        (["--arch", "cortex-a76-linux"], "dot products: sdot"),
        ([], "dot products: VNNI" if vnni else "int16 planes"),
    ):
        if flags[1:] == ["cortex-a76-linux"] and not shutil.which("aarch64-linux-gnu-gcc"):
            continue
        assert main(["inspect", str(files["QInt8"]), *flags]) == 0
        lines = [ln for ln in capsys.readouterr().out.splitlines() if re.match(r"\s+\d+ qconv ", ln)]
        lines = [ln for ln in lines if "AveragePool" not in ln]  # (a kernel of ones, one channel)
        assert len(lines) == 2 and all(ln.split("  <- ")[0].endswith(want) for ln in lines), (flags, lines)


def _branches_model(path) -> None:
    """Two convolutions, then Sigmoid, LeakyRelu, their Mul and Concat, an average pool that
    counts its padding, and one that does not."""
    rng = np.random.default_rng(6)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c1"], ["s"]),
        helper.make_node("LeakyRelu", ["c2"], ["l"], alpha=0.1),
        helper.make_node("Mul", ["s", "l"], ["m"]),
        helper.make_node("Concat", ["m", "l"], ["cat"], axis=1),
        helper.make_node("AveragePool", ["cat"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("AveragePool", ["p1"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]  # fmt: skip
    inits = [
        init("w1", 4, 3, 3, 3),
        init("b1", 4, scale=0.1),
        init("w2", 4, 3, 3, 3),
        init("b2", 4, scale=0.1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])
    model = helper.make_model(helper.make_graph(nodes, "branches", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])  # fmt: skip
    model.ir_version = 8
    onnx.save(model, path)


@pytest.mark.c
def test_qdq_sigmoid_leaky_relu_mul_concat_and_pools_become_onnxruntimes_integer_operators(
    tmp_path, compile_graphs, capsys
):
    """Between DequantizeLinear and QuantizeLinear nodes, Sigmoid, LeakyRelu, Mul, Concat and the
    average pools become com.microsoft's QLinear operators as onnxruntime fuses them: no float
    tensor is stored (only the graph's dequantized output), the pool that counts its padding sums
    on the integer convolution, and ``flowc inspect`` names the one that does not (it computes in
    float32); the compiled model is onnxruntime's to one output step on under a tenth."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from codegen.cli import main

    _branches_model(tmp_path / "float.onnx")
    rng = np.random.default_rng(3)
    samples = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(10)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": x} for x in samples[:6]])

        def get_next(self):
            return next(self.it, None)

    path = tmp_path / "branches.onnx"
    quantize_static(tmp_path / "float.onnx", path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
    kinds = {n.op_type for n in onnx.load(path).graph.node}
    assert {"Sigmoid", "LeakyRelu", "Mul", "Concat", "AveragePool"} <= kinds, kinds
    graph = gd.load_onnx(path)
    program = pipeline.run(graph, pipeline.Options(), until="plan").program
    floats = [n.op for n in program.steps for o in n.outputs if o.dtype == "float32"]
    assert len(floats) <= 3, floats  # the float pool's input and result, the output's dequantization
    assert [n.op for n in program.steps].count(
        "qconv"
    ) == 3  # the convolutions, the pool counting its padding
    assert main(["inspect", str(path)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("left in float: ")]
    assert len(lines) == 1 and "AveragePool" in lines[0] and "padding not counted" in lines[0], lines
    _check(path, graph, samples[6:], compile_graphs, "qdq_branches")


@pytest.mark.c
def test_qdq_matmuls_by_constant_weights_run_on_the_integer_kernel(tmp_path, compile_graphs):
    """A QDQ MatMul by a constant int8 matrix (scales per column), its input of rank 3 as a
    transformer's is, becomes QLinearConv on the rows of x with x's leading axes kept: both of a
    two-layer MLP run on ``qconv`` and give onnxruntime's results exactly."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(3)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]  # fmt: skip
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
             for name, shape in (("w1", (16, 24)), ("w2", (24, 8)))]  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 8])
    model = helper.make_model(helper.make_graph(nodes, "mm", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])  # fmt: skip
    model.ir_version = 8
    onnx.save(model, tmp_path / "float.onnx")
    samples = [rng.standard_normal((2, 5, 16)).astype(np.float32) for _ in range(10)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": v} for v in samples[:6]])

        def get_next(self):
            return next(self.it, None)

    path = tmp_path / "mm.onnx"
    quantize_static(tmp_path / "float.onnx", path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
    assert [n.op_type for n in onnx.load(path).graph.node].count("MatMul") == 2
    graph = gd.load_onnx(path)
    assert not graph.notes, graph.notes
    steps = _steps(graph)
    assert steps.count("qconv") == 2 and "matmul" not in steps and "sgemm" not in steps, steps
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (compiled,) = compile_graphs({"qdq_matmul": graph}).values()
    for v in samples[6:]:
        np.testing.assert_array_equal(compiled(x=v)["y"], session.run(None, {"x": v})[0])
