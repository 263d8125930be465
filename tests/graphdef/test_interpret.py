"""The interpreter: partial execution, control dependencies, state, and feed errors."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd


def _counter_graph():
    with gd.Graph("counter") as g:
        x = gd.placeholder("x", (2,))
        count = gd.variable("count", np.zeros((), np.int32))
        tick = gd.assign_add(count, 1, name="tick")
        with gd.control_dependencies([tick]):
            gd.identity(x * 2.0, name="y")
        gd.neg(x, name="z")
    return g


def test_partial_execution_runs_only_what_fetches_need():
    g = _counter_graph()
    xv = np.array([1, 2], np.float32)
    gd.run(g, {"x": xv}, ["z"])
    assert gd.run(g, {}, ["count"])[0] == 0  # 'tick' was not needed
    assert gd.run(g, {"x": xv}, ["y"])[0].tolist() == [2, 4]
    assert gd.run(g, {}, ["count"])[0] == 1  # control dependency ran it


def test_variable_state_persists_across_calls():
    g = _counter_graph()
    for _ in range(3):
        gd.run(g, {}, ["tick"])
    assert gd.session(g).variable("count") == 3
    other = gd.Session(g)  # a fresh session starts from the initial value
    assert other.run({}, "count") == 0


def test_reads_in_one_run_see_the_value_at_its_start():
    with gd.Graph("g") as g:
        v = gd.variable("v", np.array(1.0, np.float32))
        new = gd.assign(v, v + 10.0)
        with gd.control_dependencies([new]):
            after = gd.identity(v)
    assert [a.item() for a in gd.run(g, {}, [new, after])] == [11.0, 1.0]
    assert gd.run(g, {}, after).item() == 11.0


def test_placeholder_not_needed_need_not_be_fed():
    with gd.Graph("g") as g:
        gd.placeholder("unused", (3,))
        c = gd.constant(np.float32(2.0)) * 3.0
    assert gd.run(g, None, [c])[0] == 6.0


def test_missing_feeds_are_listed():
    with gd.Graph("g") as g:
        a = gd.placeholder("a", (2,))
        b = gd.placeholder("b", (1, 2), "int32")
        y = a + gd.cast(b, "float32")
    with pytest.raises(gd.FeedError, match=r"placeholder\(s\) 'a' \(float32\[2\]\), 'b' \(int32\[1,2\]\)"):
        gd.run(g, {}, [y])


@pytest.mark.parametrize(
    "value,match",
    [
        (np.zeros((3,), np.float32), "has shape \\(3,\\), expected \\(2,\\)"),
        (np.zeros((2,), np.float64), "has dtype float64, expected float32"),
        ([1.0, "a"], "cannot be read as float32"),
    ],
)
def test_bad_feeds(value, match):
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,))
        y = gd.relu(x)
    with pytest.raises(gd.FeedError, match=match):
        gd.run(g, {"x": value}, [y])


def test_python_lists_are_converted_when_exact():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,), "int32")
        y = x * 2
    assert gd.run(g, {"x": [1, 2]}, [y])[0].tolist() == [2, 4]
    with pytest.raises(gd.FeedError, match="cannot be read as int32"):
        gd.run(g, {"x": [1.5, 2]}, [y])


def test_unknown_fetch_and_feed_names():
    g = _counter_graph()
    with pytest.raises(gd.FeedError, match="no node named 'nope'"):
        gd.run(g, {}, ["nope"])
    with pytest.raises(gd.FeedError, match="has 1 output"):
        gd.run(g, {"x": np.zeros(2, np.float32)}, ["y:3"])
    with pytest.raises(gd.FeedError, match="no node named 'w'"):
        gd.run(g, {"w": 1}, ["z"])


def test_feeding_an_intermediate_tensor_cuts_the_graph():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,))
        h = gd.exp(x, name="h")
        y = h + 1.0
    got = gd.run(g, {h: np.array([1, 2], np.float32)}, [y])[0]
    assert got.tolist() == [2, 3]


def test_fetching_one_name_returns_one_array_and_results_are_copies():
    with gd.Graph("g") as g:
        c = gd.constant(np.array([1.0, 2.0], np.float32), name="c")
    out = gd.run(g, {}, "c")
    out[0] = 99
    assert gd.run(g, {}, c).tolist() == [1, 2]


def test_multi_output_fetch():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (4,))
        gd.split(x, 2, name="s")
    a, b = gd.run(g, {"x": np.arange(4, dtype=np.float32)}, ["s", "s:1"])
    assert a.tolist() == [0, 1] and b.tolist() == [2, 3]


def test_runtime_errors_name_the_node():
    with gd.Graph("g") as g:
        i = gd.placeholder("i", (1,), "int64")
        y = gd.gather(gd.constant(np.zeros(3, np.float32)), i, name="lookup")
    with pytest.raises(gd.ExecutionError, match="node 'lookup' \\(op gather.*index 7 is out of range"):
        gd.run(g, {"i": np.array([7])}, [y])


def test_the_interpreter_checks_the_graph_first():
    bad = gd.Graph.from_parts(
        "bad", [gd.Node("a", "relu", (gd.ValueRef("a"),), {}, (gd.TensorType((1,), "float32"),))]
    )
    with pytest.raises(gd.GraphError, match="cycle"):
        gd.run(bad, {}, ["a"])


def test_mlp_from_the_design_example():
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((1, 784)).astype(np.float32)
    wv = rng.standard_normal((784, 10), dtype=np.float32)
    g = gd.Graph("mlp")
    with g:
        x = gd.placeholder("x", (1, 784))
        w = gd.variable("w", wv)
        gd.softmax(gd.relu(gd.matmul(x, w) + 1.0), name="y")
    (yv,) = gd.run(g, {"x": xv}, ["y"])
    z = np.maximum(xv.astype(np.float64) @ wv + 1.0, 0)
    want = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    np.testing.assert_allclose(yv, want, rtol=1e-4, atol=1e-7)
