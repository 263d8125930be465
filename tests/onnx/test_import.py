"""The ONNX importer: static shapes, folded constants, external data, unsupported ops, shape errors
and the CLI (malformed and hostile model files are in tests/hostile/test_files.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def save(tmp_path, nodes, inputs, outputs, inits=(), name="m.onnx", opset=17, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *domains])
    model.ir_version = 8
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def external(name, dims, **info):
    """A float tensor whose data lives in an external file."""
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in info.items():
        e = t.external_data.add()
        e.key, e.value = k, str(v)
    return t


def test_shape_subgraphs_fold_to_constants_and_run(tmp_path):
    # y = reshape(x, concat(shape(x)[0:1], [-1])) * 2: the shape arithmetic is known at import
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Mul", ["r", "two"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
    ]
    path = save(tmp_path, nodes, [vi("x", [2, 3, 4])], [vi("y", [2, 12])], inits)
    g = gd.load_onnx(path)
    assert {n.op for n in g.nodes} == {
        "placeholder",
        "constant",
        "reshape",
        "mul",
        "identity",
    }  # identity: output name
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(gd.run(g, {"x": x}, ["y"])[0], x.reshape(2, 12) * 2)


def test_symbolic_dimensions_need_a_shape(tmp_path):
    path = save(
        tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["batch", 3])], [vi("y", ["batch", 3])]
    )
    with pytest.raises(
        gd.FlowcError, match="input 'x' has symbolic dimension 'batch' at axis 0; fix it with --shape x=NxN"
    ):
        gd.load_onnx(path)
    g = gd.load_onnx(path, shapes={"x": (5, 3)})
    assert g.node("x").outputs[0].shape == (5, 3)
    with pytest.raises(gd.FlowcError, match="does not fit declared"):
        gd.load_onnx(path, shapes={"x": (5, 4)})


def test_identity_and_dropout_disappear(tmp_path):
    nodes = [
        helper.make_node("Identity", ["x"], ["a"]),
        helper.make_node("Dropout", ["a"], ["b"]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    g = gd.load_onnx(save(tmp_path, nodes, [vi("x", [2])], [vi("y", [2])], opset=13))
    assert [n.op for n in g.nodes] == ["placeholder", "relu", "identity"]  # the last names the output


def test_external_data_inside_the_folder_is_read(tmp_path):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    (tmp_path / "w.bin").write_bytes(b"pad!" + w.tobytes())
    t = external("w", [2, 3], location="w.bin", offset=4, length=w.nbytes)
    path = save(
        tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [1, 2])], [vi("y", [1, 3])], [t]
    )
    g = gd.load_onnx(path)
    np.testing.assert_array_equal(gd.run(g, {"x": np.ones((1, 2), np.float32)}, ["y"])[0], [[3, 5, 7]])


def test_unsupported_ops_are_all_listed_at_once(tmp_path):
    nodes = [
        helper.make_node("FancyOp", ["x"], ["a"], domain="com.example"),
        helper.make_node("FancyOp", ["a"], ["b"], domain="com.example"),
        helper.make_node("StringNormalizer", ["b"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    path = save(
        tmp_path, nodes, [vi("x", [2])], [vi("y", [2])], domains=[helper.make_opsetid("com.example", 1)]
    )
    with pytest.raises(gd.UnsupportedError) as err:
        gd.load_onnx(path)
    msg = str(err.value)
    assert "FancyOp x2 (com.example opset 1)" in msg and "StringNormalizer x1 (ai.onnx opset 17)" in msg
    assert "\n" not in msg


def test_shape_mismatches_name_the_node(tmp_path):
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="the_add")]
    path = save(tmp_path, nodes, [vi("x", [2, 3]), vi("z", [4])], [vi("y", [2, 3])])
    with pytest.raises(
        gd.ShapeError,
        match="node 'the_add' \\(Add, opset 17\\).*cannot broadcast shapes \\(2, 3\\) and \\(4,\\)",
    ):
        gd.load_onnx(path)


def test_cli_compiles_an_onnx_model_with_a_fixed_shape(tmp_path):
    path = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["n", 4])], [vi("y", ["n", 4])])
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "codegen.cli",
            "compile",
            str(path),
            "-o",
            str(tmp_path / "out"),
            "--name",
            "m",
            "--shape",
            "x=3x4",
            "--no-build",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 0, res.stderr
    assert '"shape": [\n    3,\n    4\n   ]' in (
        tmp_path / "out" / "metadata.json"
    ).read_text() or "[3, 4]" in (tmp_path / "out" / "metadata.json").read_text().replace("\n", "").replace(
        " ", ""
    ).replace(",", ", ")


def _trainable_model(tmp_path):
    """conv (weights, bias) -> BatchNormalization (scale, bias; running mean / var) -> Gemm
    (transposed weight, through a Transpose an exporter left) -> Clip with scalar bounds ->
    Resize with float scales, plus an int64 shape initializer."""
    rng = np.random.default_rng(0)
    arrays = {
        "conv.weight": rng.standard_normal((4, 2, 3, 3)).astype(np.float32) * 0.3,
        "conv.bias": rng.standard_normal(4).astype(np.float32),
        "bn.weight": np.ones(4, np.float32), "bn.bias": np.zeros(4, np.float32),
        "bn.running_mean": rng.standard_normal(4).astype(np.float32) * 0.1,
        "bn.running_var": np.ones(4, np.float32),
        "fc.weight": rng.standard_normal((3, 64)).astype(np.float32) * 0.1,
        "lo": np.array(-1.0, np.float32), "hi": np.array(1.0, np.float32),
        "flat": np.array([2, 64], np.int64), "scales": np.array([1.0, 2.0], np.float32),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"], ["b"]
        ),
        helper.make_node("Reshape", ["b", "flat"], ["f"]),
        helper.make_node("Transpose", ["fc.weight"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["f", "wt"], ["m"]),
        helper.make_node("Clip", ["m", "lo", "hi"], ["k"]),
        helper.make_node("Resize", ["k", "", "scales"], ["y"], mode="nearest"),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    return save(tmp_path, nodes, [vi("x", [2, 2, 4, 4])], [vi("y", [2, 6])], inits), arrays


def test_trainable_import_makes_the_data_initializers_variables(tmp_path):
    """trainable=True: weights, biases and norm scales become trainable variables under their
    file names (the Transpose on fc.weight then runs in the graph instead of at import);
    running statistics, scalar bounds, resize scales and int shapes stay constants. The graph
    computes what the plain import does, and trains."""
    path, arrays = _trainable_model(tmp_path)
    g = gd.load_onnx(path, trainable=True)
    variables = [n.name for n in g.nodes if n.op == "variable"]
    assert variables == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight"]
    np.testing.assert_array_equal(g.variables["fc.weight"], arrays["fc.weight"])
    x = np.random.default_rng(1).standard_normal((2, 2, 4, 4)).astype(np.float32)
    (plain,) = gd.run(gd.load_onnx(path), {"x": x}, ["y"])
    s = gd.Session(g)
    np.testing.assert_allclose(s.run({"x": x}, ["y"])[0], plain, rtol=1e-6)
    from graphdef.builder import Tensor

    with g:
        loss = gd.train.mean_squared_error(Tensor(g, g.resolve("y")), 0.5)
        train = gd.train.SGD(0.1).minimize(loss)
    losses = [float(s.run({"x": x}, [train])[0]) for _ in range(5)]
    assert losses[-1] < losses[0]
    assert not np.array_equal(s.variable("fc.weight"), arrays["fc.weight"])


def test_trainable_by_name_and_its_errors(tmp_path):
    path, _ = _trainable_model(tmp_path)
    g = gd.load_onnx(path, trainable=["fc.weight"])
    assert [n.name for n in g.nodes if n.op == "variable"] == ["fc.weight"]
    with pytest.raises(gd.FlowcError, match="no initializer named 'fc.wieght' to make trainable"):
        gd.load_onnx(path, trainable=["fc.weight", "fc.wieght"])
    with pytest.raises(gd.FlowcError, match=r"initializer 'flat' \(int64\[2\]\) cannot be trainable"):
        gd.load_onnx(path, trainable=["flat"])
