"""The TF-1-style builder: names, scopes, control dependencies, devices and operators."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd


def test_automatic_unique_names():
    with gd.Graph("g"):
        x = gd.placeholder("x", (2,))
        names = [gd.relu(x).name for _ in range(3)]
    assert names == ["relu", "relu_1", "relu_2"]


def test_explicit_name_clash_is_an_error():
    with gd.Graph("g"):
        gd.placeholder("x", (2,))
        with pytest.raises(gd.GraphError, match="a node named 'x' already exists"):
            gd.placeholder("x", (3,))


def test_bad_names_are_refused():
    with gd.Graph("g"):
        with pytest.raises(gd.AttrError, match="non-empty string"):
            gd.placeholder("", (2,))
        with pytest.raises(gd.AttrError, match="name scope"):
            with gd.name_scope("a b"):
                pass


def test_name_scopes_nest():
    with gd.Graph("g"):
        x = gd.placeholder("x", (2,))
        with gd.name_scope("layer1"):
            a = gd.relu(x)
            with gd.name_scope("inner"):
                b = gd.exp(a, name="e")
        c = gd.relu(x)
    assert (a.name, b.name, c.name) == ("layer1/relu", "layer1/inner/e", "relu")


def test_control_dependencies_are_recorded_and_clearable():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,))
        a = gd.relu(x, name="a")
        with gd.control_dependencies([a]):
            b = gd.exp(x, name="b")
            with gd.control_dependencies(["b"]):
                c = gd.neg(x, name="c")
            with gd.control_dependencies(None):
                d = gd.abs(x, name="d")
    assert g.node("b").control_inputs == ("a",)
    assert g.node("c").control_inputs == ("a", "b")
    assert g.node("d").control_inputs == ()
    assert b.op == "exp" and c.op == "neg" and d.op == "abs"


def test_device_annotations():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,))
        with gd.device("rank:1"):
            a = gd.relu(x)
            with gd.device("rank:1/gpu:0"):
                b = gd.exp(a)
            with gd.device(None):
                c = gd.neg(a)
    assert g.node(x.ref.node).device is None
    assert (a.node.device, b.node.device, c.node.device) == ("rank:1", "rank:1/gpu:0", None)
    with pytest.raises(gd.AttrError, match="device must look like"):
        with gd.device("gpu zero"):
            pass


def test_operators_build_the_right_ops():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2, 2))
        y = gd.placeholder("y", (2, 2))
        b = gd.placeholder("b", (2,), "bool")
        exprs = {
            "add": x + y,
            "sub": x - 1.0,
            "mul": 2.0 * x,
            "div": 1.0 / x,
            "pow": x**2.0,
            "matmul": x @ y,
            "neg": -x,
            "abs": abs(x),
            "less": x < y,
            "less_equal": x <= 1.0,
            "greater": x > y,
            "greater_equal": x >= y,
            "logical_and": b & b,
            "logical_or": b | b,
            "logical_xor": b ^ b,
            "logical_not": ~b,
            "transpose": x.T,
        }
    for op, t in exprs.items():
        assert t.op == op, op
    xv = np.array([[1, 2], [3, 4]], np.float32)
    yv = np.array([[2, 0], [1, 5]], np.float32)
    got = gd.run(
        g, {"x": xv, "y": yv, "b": np.array([True, False])}, [exprs["sub"], exprs["div"], exprs["matmul"]]
    )
    np.testing.assert_allclose(got[0], xv - 1)
    np.testing.assert_allclose(got[1], 1 / xv)
    np.testing.assert_allclose(got[2], xv @ yv)


def test_reflected_operators_with_numpy_scalars():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,))
        y = np.float32(3) - x
    assert y.op == "sub"
    np.testing.assert_allclose(gd.run(g, {"x": np.array([1, 2], np.float32)}, [y])[0], [2, 1])


def test_tensors_have_no_truth_value():
    with gd.Graph("g"):
        x = gd.placeholder("x", (2,))
        with pytest.raises(gd.FlowcError, match="no truth value"):
            bool(x > 0)
        with pytest.raises(gd.FlowcError, match="not iterable"):
            list(x)


def test_building_needs_a_graph():
    with pytest.raises(gd.GraphError, match="no default graph"):
        gd.placeholder("x", (2,))


def test_mixing_graphs_is_refused():
    with gd.Graph("a"):
        x = gd.placeholder("x", (2,))
    with gd.Graph("b"):
        y = gd.placeholder("y", (2,))
        with pytest.raises(gd.GraphError, match="different graphs"):
            gd.add(x, y)


def test_as_default_and_nesting():
    g1, g2 = gd.Graph("one"), gd.Graph("two")
    with g1.as_default():
        gd.placeholder("x", (1,))
        with g2:
            gd.placeholder("y", (1,))
        gd.placeholder("z", (1,))
    assert g1.inputs == ("x", "z") and g2.inputs == ("y",)


def test_attribute_errors_name_the_op():
    with gd.Graph("g"):
        x = gd.placeholder("x", (2, 3))
        with pytest.raises(
            gd.AttrError,
            match="node 'softmax' \\(op softmax, inputs float32\\[2,3\\]\\): attribute 'axis' expects int",
        ):
            gd.softmax(x, axis="last")
        with pytest.raises(gd.AttrError, match="attribute 'mode' must be one of nearest, linear"):
            gd.resize(x, scales=(1, 2), mode="area")
        with pytest.raises(gd.AttrError, match="unknown attribute"):
            gd.apply("relu", [x], alpha=1.0)


def test_outputs_default_to_sinks_and_can_be_declared():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,))
        a = gd.relu(x, name="a")
        gd.exp(a, name="b")
        parts = gd.split(gd.concat([x, x]), 2)
    assert [str(r) for r in g.outputs] == ["b", "split", "split:1"]
    g.set_outputs(a, "split:1")
    assert [str(r) for r in g.outputs] == ["a", "split:1"]
    assert parts[1].name == "split:1"


def test_passes_make_immutable_graphs_and_only_the_builder_grows():
    """ir.Graph has no way to change; gd.Graph (the builder's) grows inside ``with`` only, and
    ``freeze`` gives the ir.Graph of what is there."""
    from graphdef import ir

    with gd.Graph("g") as g:
        y = gd.relu(gd.placeholder("x", (2,)), name="y")
    frozen = g.freeze()
    assert type(frozen) is ir.Graph and frozen == g
    assert not any(hasattr(frozen, m) for m in ("add", "set_outputs", "__enter__", "as_default"))
    with pytest.raises(TypeError):
        frozen.constants["c"] = np.zeros(1)  # a read-only view
    with g:
        gd.exp(y, name="z")
    assert len(g.nodes) == 3 and len(frozen.nodes) == 2
    with pytest.raises(gd.GraphError, match="immutable"):
        gd.apply("relu", [gd.builder.Tensor(frozen, frozen.resolve("y"))], None)


def test_ir_imports_nothing_above_it():
    """graphdef/ir.py uses only dtypes and errors (no builder, registry or ops)."""
    import ast
    from pathlib import Path

    import graphdef

    tree = ast.parse((Path(graphdef.__file__).parent / "ir.py").read_text())
    local = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.level:
            local |= {n.module} if n.module else {a.name for a in n.names}
    assert local <= {"dtypes", "errors"}, local
