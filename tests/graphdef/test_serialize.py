"""save/load: exact round trips, deterministic bytes, readable JSON, what survives a round trip, and
no file left by a failed save (corrupt and hostile files are in tests/hostile/test_files.py)."""

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


def test_failed_save_leaves_nothing_behind(tmp_path):
    bad = gd.Graph.from_parts(
        "bad", [gd.Node("a", "relu", (gd.ValueRef("a"),), {}, (gd.TensorType((1,), "float32"),))]
    )
    with pytest.raises(gd.GraphError):
        gd.save(bad, tmp_path / "bad.flowc")
    assert os.listdir(tmp_path) == []
