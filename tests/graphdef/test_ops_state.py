"""Sources (placeholder, constant, variable, fill) and the assign ops."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd


def test_sources_give_their_values():
    with gd.Graph("src") as g:
        x = gd.placeholder("x", (2,), "int64")
        c = gd.constant([[1.5, 2.5]], name="c")
        v = gd.variable("v", np.arange(3, dtype=np.int8))
        f = gd.fill((2, 2), 3, "int32")
        o = gd.ones((1,), "float16")
    got = gd.run(g, {"x": np.array([4, 5])}, [x, c, v, f, o])
    np.testing.assert_array_equal(got[0], [4, 5])
    assert got[1].dtype == np.float32 and got[1].tolist() == [[1.5, 2.5]]
    assert got[2].dtype == np.int8 and got[2].tolist() == [0, 1, 2]
    assert got[3].dtype == np.int32 and got[3].tolist() == [[3, 3], [3, 3]]
    assert got[4].dtype == np.float16 and got[4].tolist() == [1.0]


def test_python_values_default_to_float32_and_int32():
    with gd.Graph("defaults"):
        assert gd.constant(1.0).dtype == "float32"
        assert gd.constant([1, 2]).dtype == "int32"
        assert gd.constant(True).dtype == "bool"
        assert gd.constant(np.arange(2)).dtype == "int64"
        assert gd.constant(np.float64(2.0)).dtype == "float64"
        assert gd.constant(3, dtype="uint8").dtype == "uint8"


@pytest.mark.parametrize(
    "op,want", [("assign", [10, 20]), ("assign_add", [11, 22]), ("assign_sub", [-9, -18])]
)
def test_assign_ops_update_state_for_the_next_run(op, want):
    with gd.Graph("acc") as g:
        v = gd.variable("v", np.array([1, 2], np.int32))
        upd = getattr(gd, op)(v, gd.constant(np.array([10, 20], np.int32)), name="upd")
    first = gd.run(g, {}, [v, upd])
    assert first[0].tolist() == [1, 2] and first[1].tolist() == want
    assert gd.run(g, {}, [v])[0].tolist() == want
    gd.session(g).reset()
    assert gd.run(g, {}, [v])[0].tolist() == [1, 2]


def test_assign_needs_a_variable_and_matching_type():
    with gd.Graph("bad"):
        x = gd.placeholder("x", (2,))
        v = gd.variable("v", np.zeros(2, np.float32))
        with pytest.raises(gd.GraphError, match="needs a variable"):
            gd.assign(x, x)
        with pytest.raises(gd.ShapeError, match="shape"):
            gd.assign(v, gd.zeros((3,)))
        with pytest.raises(gd.ShapeError, match="dtype"):
            gd.assign(v, gd.zeros((2,), "int32"))
