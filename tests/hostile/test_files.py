"""Hostile and malformed model files: ONNX models and .flowc graphs crafted to exhaust memory or
to crash the loaders, and files that are empty, truncated, garbage, cyclic, corrupt, pickled or
that point outside their folder. Each must give a FlowcError (where a test checks the message:
one line naming the file, tensor or node), quickly and without allocating what the file asks for
(the imports that could allocate run in a subprocess under a 1 GiB address-space limit)."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd

from .hostile import f32, i64, one_line_error, run_bounded, save, vi

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MEMORY = 1 << 30  # address space of the subprocess that imports a hostile model


# ----------------------------------------------------------------------------- helpers


_BOUNDED = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
import graphdef as gd
from graphdef.onnx import load_onnx
try:
    g = load_onnx(sys.argv[1]) if sys.argv[1].endswith(".onnx") else gd.load(sys.argv[1])
    out = {{"ops": [n.op for n in g.nodes], "big": max((n.outputs[0].nbytes for n in g.nodes
           if n.op == "constant"), default=0)}}
except gd.FlowcError as e:
    out = {{"error": type(e).__name__, "message": str(e)}}
except BaseException as e:
    out = {{"crash": type(e).__name__, "message": str(e)[:300]}}
print(json.dumps(out))
"""


def load_bounded(path) -> dict:
    """Load ``path`` (.onnx or .flowc) in a subprocess limited to MEMORY bytes of address
    space: {"ops": [...], "big": largest constant} or {"error": FlowcError class, "message"}."""
    return run_bounded(_BOUNDED.format(limit=MEMORY), str(path))


# ----------------------------------------------------------------------------- 1. import-time memory


def test_huge_constants_of_shape_are_fill_nodes_not_allocations(tmp_path):
    # [2^20]^3 floats is 4 EiB and [40000, 40000] is 6.4 GB: neither is made at import time
    for shape in ([1 << 20] * 3, [40000, 40000]):
        path = save(
            tmp_path, [helper.make_node("ConstantOfShape", ["s"], ["y"], name="c")], inits=[i64("s", shape)]
        )
        out = load_bounded(path)
        assert out.get("ops") == ["fill", "identity"], out
    # a small one is still folded to a constant
    path = save(
        tmp_path, [helper.make_node("ConstantOfShape", ["s"], ["y"], name="c")], inits=[i64("s", [2, 3])]
    )
    g = gd.load_onnx(path)
    assert {n.op for n in g.nodes} == {"constant"}
    np.testing.assert_array_equal(gd.run(g, {}, ["y"])[0], np.zeros((2, 3), np.float32))


@pytest.mark.parametrize(
    "op,shape",
    [("Expand", [4096, 4096, 3]), ("Tile", [8192, 2048]), ("Expand", [1 << 16, 1 << 16, 3])],
)
def test_folding_checks_the_size_before_computing(op, shape, tmp_path):
    # constants expanded past the fold limit (64 MiB) stay run-time nodes: the scratch graph's
    # types give the size before anything runs
    nodes = [helper.make_node(op, ["c", "s"], ["y"], name="big")]
    path = save(tmp_path, nodes, inits=[f32("c", [[1.0, 2.0, 3.0]]), i64("s", shape)])
    out = load_bounded(path)
    assert op.lower() in out.get("ops", []), out
    assert out["big"] < 1 << 20


def test_a_range_past_the_fold_limit_is_computed_at_run_time(tmp_path):
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["y"], name="r")]
    path = save(tmp_path, nodes, inits=[i64("a", 3), i64("b", 3 + (20 << 20)), i64("d", 1)])
    out = load_bounded(path)  # 20 M int64 entries: 160 MB, not built at import
    assert "cumsum" in out.get("ops", []), out
    assert out["big"] < 1 << 20
    # the same graph with a small limit, run: the values are those of np.arange
    from graphdef.onnx import load_onnx

    for a, b, d, dt in ((2, 40, 3, np.int64), (5, -20, -2, np.int32), (0.1, 7.3, 0.7, np.float32)):
        inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v in zip(("a", "b", "d"), (a, b, d))]
        path = save(tmp_path, nodes, inits=inits)
        g = load_onnx(path, fold_limit=0)
        assert "constant" not in {n.op for n in g.nodes if n.outputs[0].size > 1}
        want = np.arange(np.array(a, dt).item(), np.array(b, dt).item(), np.array(d, dt).item()).astype(dt)
        np.testing.assert_array_equal(gd.run(g, {}, ["y"])[0], want)


def test_a_shape_deciding_value_past_the_fold_limit_is_refused_with_node_and_bytes(tmp_path):
    # 9 M int64 ones (72 MB) computed from constants, then used as a Reshape target: it must be
    # known at import time and is too large to compute there
    nodes = [
        helper.make_node(
            "ConstantOfShape",
            ["n"],
            ["ones"],
            name="ones",
            value=numpy_helper.from_array(np.array([1], np.int64)),
        ),
        helper.make_node("Reshape", ["x", "ones"], ["y"], name="reshape"),
    ]
    path = save(tmp_path, nodes, [vi("x", [1])], inits=[i64("n", [9_000_000])])
    out = load_bounded(path)
    assert out.get("error") == "OnnxImportError", out
    message = out["message"]
    assert "node 'reshape'" in message and "node 'ones'" in message and "72000000 bytes" in message
    assert "\n" not in message


def test_helper_constants_past_the_limit_are_refused_before_they_are_built(tmp_path):
    # EyeLike of a [100000, 100000] input: a 40 GB identity matrix
    nodes = [helper.make_node("EyeLike", ["x"], ["y"], name="eye")]
    path = save(tmp_path, nodes, [vi("x", [100000, 100000])])
    out = load_bounded(path)
    assert out.get("error") == "OnnxImportError", out
    assert "node 'eye'" in out["message"] and "40000000000 bytes" in out["message"]


# ----------------------------------------------------------------------------- 2. bad shape values


SHAPE_CASES = {
    "constant of shape, negative": (
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="bad")],
        [],
        [i64("s", [-1, 3])],
        "negative",
    ),
    "constant of shape, no value": (
        [
            helper.make_node(
                "ConstantOfShape",
                ["s"],
                ["y"],
                name="bad",
                value=numpy_helper.from_array(np.zeros(0, np.float32)),
            )
        ],
        [],
        [i64("s", [2])],
        "one element",
    ),
    "range, zero delta": (
        [helper.make_node("Range", ["a", "b", "d"], ["y"], name="bad")],
        [],
        [i64("a", 0), i64("b", 10), i64("d", 0)],
        "delta is 0",
    ),
    "range, huge count": (
        [helper.make_node("Range", ["a", "b", "d"], ["y"], name="bad")],
        [],
        [i64("a", 0), i64("b", 1 << 62), i64("d", 1)],
        "overflows",
    ),
    "range, infinite limit": (
        [helper.make_node("Range", ["a", "b", "d"], ["y"], name="bad")],
        [],
        [f32("a", 0), f32("b", np.inf), f32("d", 1)],
        "finite",
    ),
    "range, not scalars": (
        [helper.make_node("Range", ["a", "b", "d"], ["y"], name="bad")],
        [],
        [i64("a", [0, 1]), i64("b", 10), i64("d", 1)],
        "scalar",
    ),
    "reshape, negative": (
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad")],
        [vi("x", [2, 3])],
        [i64("s", [-2, 3])],
        "negative",
    ),
    "reshape, overflow": (
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad")],
        [vi("x", [2, 3])],
        [i64("s", [1 << 62, 1 << 62])],
        "reshape",
    ),
    "expand, negative": (
        [helper.make_node("Expand", ["x", "s"], ["y"], name="bad")],
        [vi("x", [1, 3])],
        [i64("s", [-2, 3])],
        "broadcast",
    ),
    "tile, negative": (
        [helper.make_node("Tile", ["x", "s"], ["y"], name="bad")],
        [vi("x", [1, 3])],
        [i64("s", [-2, 3])],
        "non-negative",
    ),
    "tile, overflow": (
        [helper.make_node("Tile", ["x", "s"], ["y"], name="bad")],
        [vi("x", [1, 3])],
        [i64("s", [1 << 62, 1 << 62])],
        "overflows",
    ),
    "tile of a constant, overflow": (
        [helper.make_node("Tile", ["c", "s"], ["y"], name="bad")],
        [],
        [f32("c", [[1.0, 2.0, 3.0]]), i64("s", [1 << 40, 1 << 40])],
        "overflows",
    ),
}


def test_bad_shape_values_give_one_flowc_error(tmp_path):
    wrong = []
    for case, (nodes, inputs, inits, match) in SHAPE_CASES.items():
        try:
            gd.load_onnx(save(tmp_path, nodes, inputs, inits=inits))
            wrong.append((case, "no error"))
        except gd.FlowcError as e:
            message = str(e)
            if "node 'bad'" not in message or match not in message or "\n" in message:
                wrong.append((case, message))
        except Exception as e:  # noqa: BLE001 - the failure this test is about
            wrong.append((case, f"{type(e).__name__}: {e}"))
    assert not wrong, wrong


# ----------------------------------------------------------------------------- 3. external data


def external(name, dims, **info):
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in info.items():
        e = t.external_data.add()
        e.key, e.value = k, str(v)
    return t


def _external_model(tmp_path, **info):
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    return save(tmp_path, nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], [external("w", [2, 3], **info)])


BAD_FIELDS = [
    ("offset", "1e3"),
    ("offset", "-5"),
    ("offset", "0x10"),
    ("offset", ""),
    ("offset", " 4"),
    ("offset", "\uff14"),  # a full-width digit 4: int() takes it, a file offset must not
    ("length", "-24"),
    ("length", "24.0"),
    ("length", "1e100"),
    ("offset", "9" * 5000),  # more digits than int() converts
]


def test_external_offsets_and_lengths_must_be_decimal(tmp_path):
    (tmp_path / "w.bin").write_bytes(bytes(64))
    wrong = []
    for field, value in BAD_FIELDS:
        try:
            gd.load_onnx(_external_model(tmp_path, location="w.bin", **{field: value}))
            wrong.append((field, value, "no error"))
        except gd.FlowcError as e:
            if "tensor 'w'" not in str(e) or field not in str(e):
                wrong.append((field, value, str(e)))
        except Exception as e:  # noqa: BLE001 - the failure this test is about
            wrong.append((field, value, f"{type(e).__name__}: {e}"))
    assert not wrong, wrong
    # a decimal offset is read
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    (tmp_path / "w.bin").write_bytes(b"1234567" + w.tobytes())
    g = gd.load_onnx(_external_model(tmp_path, location="w.bin", offset="7", length="24"))
    np.testing.assert_array_equal(gd.run(g, {"x": np.zeros((2, 3), np.float32)}, ["y"])[0], w)


def test_external_data_must_be_a_regular_file_in_the_models_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "data").mkdir()
    (tmp_path / "outside.bin").write_bytes(bytes(24))
    message = one_line_error(gd.FlowcError, gd.load_onnx, _external_model(folder, location="data"))
    assert "tensor 'w'" in message and "folder" in message
    # the checks that were there before still hold
    for info, data, match in [
        ({"location": "../outside.bin"}, None, "outside the model's folder"),
        ({"location": "missing.bin"}, None, "not found"),
        ({"location": "w.bin"}, bytes(10), "has 10 bytes, needs 24"),
        ({"location": "w.bin", "offset": "8"}, bytes(30), "needs 32"),
        ({"location": "w.bin", "length": "20"}, bytes(24), "length 20"),
    ]:
        if data is not None:
            (folder / "w.bin").write_bytes(data)
        message = one_line_error(gd.FlowcError, gd.load_onnx, _external_model(folder, **info))
        assert "tensor 'w'" in message and match in message, message


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/../../outside.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(bytes(24))
    t = external("w", [2, 3], location=location)
    path = save(
        folder, [helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", [1, 2])], [vi("y", [1, 3])], [t]
    )
    with pytest.raises(gd.FlowcError, match="outside the model's folder .* refused"):
        gd.load_onnx(path)


def test_huge_declared_tensors_are_refused_before_allocating(tmp_path):
    t = external("w", [1 << 20, 1 << 20], location="w.bin")
    path = save(tmp_path, [helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [1])], [vi("y", [1])], [t])
    with pytest.raises(gd.FlowcError, match="tensor 'w' declares 4398046511104 bytes"):
        gd.load_onnx(path)


# ----------------------------------------------------------------------------- 4. .flowc files


@pytest.fixture
def good(tmp_path) -> Path:
    with gd.Graph("small") as g:
        x = gd.placeholder("x", (2, 3))
        gd.add(x, gd.constant(np.arange(6, dtype=np.float32).reshape(2, 3), name="c"), name="y")
    path = tmp_path / "good.flowc"
    gd.save(g, path)
    return path


def _members(path) -> dict:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _write(path, members: dict, compression=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_a_graph_json_bomb_is_refused_before_it_is_read(good, tmp_path):
    # a valid graph.json followed by 300 MB of spaces (valid JSON still), deflated to ~300 KB
    bomb = tmp_path / "bomb.flowc"
    members = _members(good)
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("graph.json", "w", force_zip64=True) as f:
            f.write(members.pop("graph.json"))
            chunk = b" " * (1 << 20)
            for _ in range(300):
                f.write(chunk)
        for name, data in members.items():
            z.writestr(name, data)
    assert bomb.stat().st_size < 2 << 20
    out = load_bounded(bomb)
    assert out.get("error") == "SerializationError", out
    assert "bomb.flowc" in out["message"] and "graph.json" in out["message"]


def _npy_header(shape, descr="<f4", fortran=False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return buf.getvalue()


NPY_CASES = [
    (_npy_header((1 << 40,)), "declares 4398046511104 bytes"),  # 4 TiB declared, 80 bytes given
    (_npy_header((1 << 28,)), "its header says"),  # 1 GiB declared, a member of 80 bytes
    (_npy_header((1 << 62, 1 << 62)), "declares"),
    (_npy_header((2, 3)) + bytes(24) + bytes(100), "its header says"),  # trailing bytes
    (_npy_header((2, 3)) + bytes(10), "its header says"),  # truncated
    (_npy_header((3, 2)) + bytes(24), "its node declares float32[2,3]"),
    (b"\x93NUMPY\x09\x00" + bytes(100), "not a readable"),  # an unknown .npy version
    (b"\x93NUMPY\x02\x00\xff\xff\xff\x7f" + bytes(100), "not a readable"),  # a 2 GiB header
]


def test_npy_headers_are_checked_before_reading(good, tmp_path):
    members = _members(good)
    member = json.loads(members["graph.json"])["tensors"]["constants"]["c"]
    for data, match in NPY_CASES:
        members[member] = data
        bad = _write(tmp_path / "bad.flowc", members)
        out = load_bounded(bad)
        assert out.get("error") == "SerializationError", (match, out)
        assert "bad.flowc" in out["message"] and match in out["message"], (match, out)


def _edit(fn):
    def edit(doc):
        fn(doc)
        return doc

    return edit


def _node(doc, name):
    return next(n for n in doc["nodes"] if n["name"] == name)


JSON_CASES = {
    "nodes not a list": _edit(lambda d: d.update(nodes={"a": 1})),
    "node not an object": _edit(lambda d: d["nodes"].append(7)),
    "name not a string": _edit(lambda d: d.update(name=5)),
    "inputs not pairs": _edit(lambda d: _node(d, "y").update(inputs=[["x", 0, 1]])),
    "input name not a string": _edit(lambda d: _node(d, "y").update(inputs=[[["x"], 0], ["c", 0]])),
    "input index a string": _edit(lambda d: _node(d, "y").update(inputs=[["x", "0"], ["c", 0]])),
    "input index negative": _edit(lambda d: _node(d, "y").update(inputs=[["x", -1], ["c", 0]])),
    "attrs not an object": _edit(lambda d: _node(d, "x").update(attrs=[1, 2])),
    "attr an object": _edit(lambda d: _node(d, "x").update(attrs={"shape": {"a": 1}})),
    "attr int huge": _edit(lambda d: _node(d, "x").update(attrs={"shape": [10**400], "dtype": "float32"})),
    "negative dim": _edit(lambda d: _node(d, "x")["outputs"][0].update(shape=[-2, 3])),
    "dim a string": _edit(lambda d: _node(d, "x")["outputs"][0].update(shape=["2", 3])),
    "dim a float": _edit(lambda d: _node(d, "x")["outputs"][0].update(shape=[2.5, 3])),
    "dim huge": _edit(lambda d: _node(d, "x")["outputs"][0].update(shape=[10**30, 3])),
    "size overflows": _edit(lambda d: _node(d, "x")["outputs"][0].update(shape=[1 << 62, 1 << 62])),
    "outputs not a list": _edit(lambda d: _node(d, "x").update(outputs={"shape": [2, 3]})),
    "unknown dtype": _edit(lambda d: _node(d, "x")["outputs"][0].update(dtype="complex128")),
    "dtype not a string": _edit(lambda d: _node(d, "x")["outputs"][0].update(dtype=["float32"])),
    "device not a string": _edit(lambda d: _node(d, "y").update(device=5)),
    "control inputs a string": _edit(lambda d: _node(d, "y").update(control_inputs="xc")),
    "graph outputs not pairs": _edit(lambda d: d.update(outputs=[["y"]])),
    "tensors not an object": _edit(lambda d: d.update(tensors=[1])),
    "tensor member not a string": _edit(lambda d: d["tensors"]["constants"].update(c=3)),
    "tensor of no constant node": _edit(lambda d: d["tensors"]["constants"].update(x="constants/0.npy")),
}


def test_malformed_graph_json_gives_one_serialization_error(good, tmp_path):
    wrong = []
    for case, edit in JSON_CASES.items():
        members = _members(good)
        members["graph.json"] = json.dumps(edit(json.loads(members["graph.json"]))).encode()
        bad = _write(tmp_path / "bad.flowc", members)
        try:
            gd.load(bad)
            wrong.append((case, "no error"))
        except gd.SerializationError as e:
            if "bad.flowc" not in str(e) or "\n" in str(e):
                wrong.append((case, str(e)))
        except Exception as e:  # noqa: BLE001 - the failure this test is about
            wrong.append((case, f"{type(e).__name__}: {e}"))
    assert not wrong, wrong


def test_deeply_nested_graph_json_gives_one_serialization_error(good, tmp_path):
    members = _members(good)
    doc = members["graph.json"].decode()
    members["graph.json"] = doc.replace(
        '"attrs": {}', '"attrs": {"axis": ' + "[" * 100_000 + "]" * 100_000 + "}", 1
    ).encode()
    assert members["graph.json"] != doc.encode()
    bad = _write(tmp_path / "bad.flowc", members)
    message = one_line_error(gd.SerializationError, gd.load, bad)
    assert "bad.flowc" in message


# ----------------------------------------------------------------------------- 5. .npy arrays


def _with_array(good, tmp_path, array=None, raw=None) -> Path:
    members = _members(good)
    member = json.loads(members["graph.json"])["tensors"]["constants"]["c"]
    if raw is None:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, array, allow_pickle=True)
        raw = buf.getvalue()
    members[member] = raw
    return _write(tmp_path / "arr.flowc", members)


@pytest.mark.parametrize(
    "array",
    [
        np.array([[{"evil": 1}] * 3] * 2, dtype=object),
        np.zeros((2, 3), np.complex64),
        np.zeros((2, 3), "U3"),
        np.zeros((2, 3), [("a", "<f4")]),
        np.zeros((2, 3), "datetime64[s]"),
    ],
    ids=["object", "complex", "unicode", "structured", "datetime"],
)
def test_arrays_of_other_dtypes_are_refused(array, good, tmp_path):
    message = one_line_error(gd.SerializationError, gd.load, _with_array(good, tmp_path, array))
    assert "arr.flowc" in message and "constant 'c'" in message, message


def test_fortran_order_and_byte_order_load_as_native_c_arrays(good, tmp_path):
    want = np.arange(6, dtype=np.float32).reshape(2, 3)
    for array in (np.asfortranarray(want), want.astype(">f4")):
        c = gd.load(_with_array(good, tmp_path, array)).constants["c"]
        assert c.dtype == np.float32 and c.dtype.isnative and c.flags.c_contiguous, array.dtype
        np.testing.assert_array_equal(c, want)


def test_the_cli_prints_one_line_and_exits_1(good, tmp_path):
    members = _members(good)
    members[json.loads(members["graph.json"])["tensors"]["constants"]["c"]] = _npy_header((1 << 40,))
    bad = _write(tmp_path / "bad.flowc", members)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-m", "codegen.cli", "inspect", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY)),
    )
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flowc: error:") and "bad.flowc" in lines[0], res.stderr


# ----------------------------------------------------------------------------- 6. broken ONNX files


@pytest.mark.parametrize(
    "content,match",
    [(b"", "empty file"), (b"\x08\x07garbage\xff\xff\xff", "not an ONNX model"), (None, "not an ONNX model")],
)
def test_empty_truncated_and_garbage_files(tmp_path, content, match):
    path = tmp_path / "bad.onnx"
    if content is None:
        good = save(
            tmp_path,
            [helper.make_node("Relu", ["x"], ["y"])],
            [vi("x", [2])],
            [vi("y", [2])],
            [numpy_helper.from_array(np.ones(1000, np.float32), "unused")],
        )
        content = good.read_bytes()[:2000]
    path.write_bytes(content)
    with pytest.raises(gd.FlowcError, match=match):
        gd.load_onnx(path)
    res = subprocess.run(
        [sys.executable, "-m", "codegen.cli", "inspect", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 1 and res.stderr.startswith("flowc: error: ") and match in res.stderr


def test_cyclic_and_unsorted_graphs_are_refused(tmp_path):
    nodes = [
        helper.make_node("Relu", ["b"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    with pytest.raises(gd.FlowcError, match="reads 'b', which no earlier node or input defines"):
        gd.load_onnx(save(tmp_path, nodes, [vi("x", [2])], [vi("y", [2])]))


# ----------------------------------------------------------------------------- 7. corrupt .flowc files


def _corrupt(tmp_path, zoo, edit):
    src = tmp_path / "good.flowc"
    gd.save(zoo, src)
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    edit(members)
    bad = tmp_path / "bad.flowc"
    with zipfile.ZipFile(bad, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    return bad


def _edit_json(fn):
    def edit(members):
        doc = json.loads(members["graph.json"])
        fn(doc)
        members["graph.json"] = json.dumps(doc).encode()

    return edit


@pytest.mark.parametrize(
    "edit,error,match",
    [
        (_edit_json(lambda d: d.update(format="other")), gd.SerializationError, "not a flowc graph file"),
        (_edit_json(lambda d: d.update(version=99)), gd.SerializationError, "unsupported version 99"),
        (
            _edit_json(lambda d: d["nodes"][3].update(inputs=[["ghost", 0]])),
            gd.GraphError,
            "missing node 'ghost'",
        ),
        (
            _edit_json(lambda d: d["nodes"][0]["outputs"][0].update(dtype="complex64")),
            gd.SerializationError,
            "unsupported dtype complex64",
        ),
        (_edit_json(lambda d: d["nodes"][0].pop("op")), gd.SerializationError, "malformed graph.json"),
        (lambda m: m.pop("constants/0.npy"), gd.SerializationError, "not a readable"),
        (
            lambda m: m.update({"constants/0.npy": b"\x93NUMPY garbage"}),
            gd.SerializationError,
            "not a readable",
        ),
        (lambda m: m.update({"graph.json": b"{not json"}), gd.SerializationError, "not a readable"),
    ],
)
def test_bad_files_are_refused(edit, error, match, zoo, tmp_path):
    with pytest.raises(error, match=match):
        gd.load(_corrupt(tmp_path, zoo, edit))


@pytest.mark.parametrize("content", [b"", b"garbage" * 10, None])
def test_empty_truncated_and_missing_files(content, zoo, tmp_path):
    path = tmp_path / "x.flowc"
    if content is None:
        gd.save(zoo, path)
        content = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(content)
    with pytest.raises(gd.SerializationError, match="x.flowc"):
        gd.load(path)
    with pytest.raises(gd.SerializationError, match="no such file"):
        gd.load(tmp_path / "absent.flowc")


def test_pickled_arrays_are_never_loaded(zoo, tmp_path):
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    bad = _corrupt(tmp_path, zoo, lambda m: m.update({"constants/0.npy": buf.getvalue()}))
    with pytest.raises(gd.SerializationError):
        gd.load(bad)
