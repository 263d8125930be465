"""Every op's own test cases (OpDef.examples, graphdef/examples.py) through the interpreter:
each builds, verifies, gives the types its shape rule says, and matches its independent
expectation where it has one (per-element Python math for the elementwise ops)."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from graphdef.examples import every_example, example_graph, inputs
from graphdef.registry import COMMUNICATION, SOURCE

TOL = {
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "float32": {"rtol": 2e-6, "atol": 1e-6},
    "float64": {"rtol": 1e-12, "atol": 1e-12},
}


def test_every_op_has_examples():
    """Sources (placeholder, constant, variable) are data, tested in test_ops_state.py;
    communication ops (send, recv) need several ranks, tested in tests/mpi/test_partition.py;
    the pieces of loops and branches only the compiler makes, tested in tests/codegen/test_control.py."""
    untested = (SOURCE, COMMUNICATION)
    missing = [
        n for n, op in gd.all_ops().items() if op.kind not in untested and not op.control and not op.examples
    ]
    assert not missing, f"ops without examples in their record: {sorted(missing)}"


@pytest.mark.parametrize("op, index", every_example(), ids=[f"{o}-{i}" for o, i in every_example()])
def test_example(op, index):
    g, feeds, outs = example_graph(op, index)
    gd.verify(g)
    got = gd.run(g, feeds, outs)
    node = next(n for n in g.nodes if n.op == op)
    assert [gd.TensorType.of(v) for v in got] == list(node.outputs)
    expect = gd.get_op(op).examples[index].expect
    if expect is None:
        return
    want = expect(*inputs(op, index))
    for v, w in zip(got, want if isinstance(want, tuple) else (want,)):
        w = np.asarray(w).astype(v.dtype)
        if v.dtype.kind == "f":
            np.testing.assert_allclose(v, w, equal_nan=True, **TOL[v.dtype.name])
        else:
            np.testing.assert_array_equal(v, w)
