"""save/load: exact round trips, deterministic bytes, and refusal of bad files."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

import graphdef as gd


def test_round_trip_equals_the_graph(zoo, zoo_feeds, tmp_path):
    path = tmp_path / "zoo.flowc"
    gd.save(zoo, path)
    back = gd.load(path)
    assert back == zoo
    fetches = [str(r) for r in zoo.outputs]
    for a, b in zip(gd.Session(zoo).run(zoo_feeds, fetches), gd.Session(back).run(zoo_feeds, fetches)):
        np.testing.assert_array_equal(a, b)


def test_saving_twice_gives_identical_bytes(zoo, tmp_path):
    gd.save(zoo, tmp_path / "a.flowc")
    gd.save(gd.load(tmp_path / "a.flowc"), tmp_path / "b.flowc")
    assert (tmp_path / "a.flowc").read_bytes() == (tmp_path / "b.flowc").read_bytes()


def test_the_graph_file_is_readable_json(zoo, tmp_path):
    gd.save(zoo, tmp_path / "z.flowc")
    with zipfile.ZipFile(tmp_path / "z.flowc") as z:
        doc = json.loads(z.read("graph.json"))
    assert doc["format"] == "flowc-graph" and doc["name"] == "zoo"
    assert {n["op"] for n in doc["nodes"]} == {n.op for n in zoo.nodes}


def test_declared_outputs_devices_and_control_inputs_survive(tmp_path):
    with gd.Graph("small") as g:
        x = gd.placeholder("x", (2,))
        with gd.device("rank:1"):
            a = gd.relu(x, name="a")
        with gd.control_dependencies([a]):
            b = gd.exp(x, name="b")
        g.set_outputs(b)
    gd.save(g, tmp_path / "s.flowc")
    back = gd.load(tmp_path / "s.flowc")
    assert back.node("a").device == "rank:1" and back.node("b").control_inputs == ("a",)
    assert [str(r) for r in back.outputs] == ["b"]


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


def test_failed_save_leaves_nothing_behind(tmp_path):
    bad = gd.Graph.from_parts(
        "bad", [gd.Node("a", "relu", (gd.ValueRef("a"),), {}, (gd.TensorType((1,), "float32"),))]
    )
    with pytest.raises(gd.GraphError):
        gd.save(bad, tmp_path / "bad.flowc")
    assert os.listdir(tmp_path) == []
