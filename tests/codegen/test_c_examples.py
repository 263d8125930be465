"""Every op's own test cases (OpDef.examples) through the C backend: all of them compiled into
one shared library, each compared with the interpreter. An op added with examples is covered
here with no line of test code."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from codegen.backends.c.op_table import lowering
from graphdef.examples import every_example, example_graph

pytestmark = pytest.mark.c

CASES = every_example()


def test_every_op_has_a_c_lowering():
    """An expression, a kernel, or nothing of its own (sources, aliases, composites)."""
    missing = [n for n in gd.all_ops() if lowering(n) == "missing"]
    assert not missing, f"ops the C backend cannot lower: {sorted(missing)}"


@pytest.fixture(scope="module")
def models(compile_cases):
    """{(op, index): (graph, feeds, model)} for every example, in one library."""
    graphs = {case: example_graph(*case) for case in CASES}
    cases = [(f"{op}-{i}", None, None) for op, i in CASES]
    built = compile_cases(cases, graph=lambda cid, fn, inputs: graphs[_case(cid)][0])
    return {case: (*graphs[case][:2], built[f"{case[0]}-{case[1]}"][1]) for case in CASES}


def _case(cid: str) -> tuple[str, int]:
    op, _, index = cid.rpartition("-")
    return op, int(index)


@pytest.mark.parametrize("op, index", CASES, ids=[f"{o}-{i}" for o, i in CASES])
def test_example_in_c(op, index, models, tol):
    graph, feeds, model = models[(op, index)]
    want = gd.run(graph, feeds, [str(r) for r in graph.outputs])
    got = model(**feeds)
    for spec, w in zip(model.outputs, want):
        g = got[spec.name]
        assert g.dtype == w.dtype and g.shape == w.shape, spec.name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, equal_nan=True, **tol[w.dtype.name], err_msg=spec.name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=spec.name)
