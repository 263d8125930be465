"""verify() catches every kind of malformed graph and names the node concerned."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from graphdef import Attrs, Graph, Node, TensorType, ValueRef

F2 = TensorType((2,), "float32")


def _ph(name, t=F2):
    return Node(name, "placeholder", (), {"shape": t.shape, "dtype": t.dtype}, (t,))


def _node(name, op, inputs, outputs=(F2,), attrs=None, control=()):
    return Node(
        name,
        op,
        tuple(ValueRef(*i) if isinstance(i, tuple) else ValueRef(i) for i in inputs),
        attrs or {},
        outputs,
        control_inputs=control,
    )


def _check(nodes, match, **parts):
    g = Graph.from_parts("bad", nodes, **parts)
    with pytest.raises(gd.GraphError, match=match) as err:
        gd.verify(g)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_sound_graph_passes():
    g = Graph.from_parts("ok", [_ph("x"), _node("y", "relu", ["x"])])
    assert gd.verify(g) is g


def test_duplicate_names():
    _check([_ph("x"), _ph("x")], "duplicate node name 'x'")


def test_empty_name():
    _check([_ph("")], "empty or non-string name")


def test_unknown_op():
    _check([_ph("x"), _node("y", "frobnicate", ["x"])], "node 'y' has unknown op 'frobnicate'")


def test_dangling_input():
    _check(
        [_ph("x"), _node("y", "add", ["x", "ghost"])],
        "node 'y' \\(op add\\) input 1 refers to missing node 'ghost'",
    )


def test_output_index_out_of_range():
    _check([_ph("x"), _node("y", "relu", [("x", 1)])], "refers to output 1 of 'x', which has 1")


def test_dangling_control_input():
    _check([_ph("x"), _node("y", "relu", ["x"], control=("gone",))], "control input on missing node 'gone'")


def test_data_cycle():
    msg = _check(
        [_ph("x"), _node("a", "add", ["x", "c"]), _node("b", "relu", ["a"]), _node("c", "exp", ["b"])],
        "cycle",
    )
    assert "a -> b -> c -> a" in msg


def test_control_cycle():
    _check(
        [_ph("x"), _node("a", "relu", ["x"], control=("b",)), _node("b", "exp", ["a"])], "cycle: a -> b -> a"
    )


def test_self_loop():
    _check([_node("a", "relu", ["a"])], "cycle: a -> a")


def test_wrong_recorded_type():
    _check(
        [_ph("x"), _node("y", "relu", ["x"], outputs=(TensorType((3,), "float32"),))],
        "node 'y' \\(op relu, inputs float32\\[2\\]\\): "
        "recorded output types float32\\[3\\] but the op gives float32\\[2\\]",
    )


def test_type_error_between_inputs():
    _check(
        [_ph("x"), _ph("i", TensorType((2,), "int32")), _node("y", "add", ["x", "i"])],
        "node 'y'.*dtypes differ",
    )


def test_wrong_arity():
    _check([_ph("x"), _node("y", "add", ["x"])], "takes 2 input")


def test_unknown_attribute():
    _check([_ph("x"), _node("y", "relu", ["x"], attrs={"alpha": 1.0})], "unknown attribute")


def test_unresolved_attributes():
    _check([_ph("x"), _node("y", "softmax", ["x"], attrs={"axis": -1})], "not in resolved form")


def test_missing_constant_array():
    c = Node("c", "constant", (), {"shape": (2,), "dtype": "float32"}, (F2,))
    _check([c], "no array stored")


def test_constant_array_of_wrong_type():
    c = Node("c", "constant", (), {"shape": (2,), "dtype": "float32"}, (F2,))
    _check([c], "stored array is int64\\[2\\]", constants={"c": np.zeros(2, np.int64)})


def test_stray_constant_array():
    _check([_ph("x")], "stores a constant array for 'zz'", constants={"zz": np.zeros(2, np.float32)})


def test_stateful_op_on_a_non_variable():
    _check([_ph("x"), _ph("v"), _node("a", "assign", ["x", "v"])], "first input must be a variable")


def test_missing_graph_output():
    _check([_ph("x")], "output 'nope' refers to a missing value", outputs=[ValueRef("nope")])


def test_builder_graphs_always_verify(rng):
    with gd.Graph("big") as g:
        x = gd.placeholder("x", (2, 3, 8, 8))
        w = gd.variable("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
        y = gd.relu(gd.conv2d(x, w, padding="same"))
        y = gd.max_pool2d(y, 2)
        y = gd.softmax(gd.flatten(y) @ gd.constant(np.ones((64, 10), np.float32)))
        gd.gradients(gd.reduce_sum(y), [w])
    gd.verify(g)
    assert isinstance(g.nodes[0].attrs, Attrs)
