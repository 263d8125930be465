"""Every op's own test cases (OpDef.examples) through the C backend: all of them compiled into
one shared library, each compared with the interpreter (signed zeros and infinities exactly),
and index errors of a run. An op added with examples is covered here with no line of test
code. What is no single op's case is beside: test_c_packed.py (weights packed when
compiling), test_c_ops_*.py (bit-exact bitcasts, run errors, sanitizer runs)."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from codegen.backends.c.op_table import lowering
from graphdef.examples import every_example, example_graph, inputs

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
            exact = (w == 0) | np.isinf(w)  # -0.0 of mod, floor, round; infinities keep their sign
            np.testing.assert_array_equal(np.signbit(g[exact]), np.signbit(w[exact]), err_msg=spec.name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=spec.name)


def _first(op: str, dtype=None, index=None, reduction=None) -> int:
    """The first example of op with that data dtype, index dtype and reduction (None: any)."""
    for i, ex in enumerate(gd.get_op(op).examples):
        data, indices = inputs(op, i)[:2]
        if (
            dtype in (None, data.dtype.name)
            and index in (None, indices.dtype.name)
            and reduction in (None, ex.attrs.get("reduction"))
        ):
            return i
    raise LookupError(op)


# (op, which example (_first), the index made bad: outside its axis)
BAD_INDEX = [
    ("gather_elements", dict(index="int64"), lambda i: np.where(i == i.flat[0], 4, i)),
    ("gather_elements", dict(index="int32"), lambda i: np.where(i == i.flat[0], -6, i)),
    ("gather_nd", dict(dtype="float32"), lambda i: np.full_like(i, 3)),
    ("gather_nd", dict(dtype="float16"), lambda i: np.where(np.arange(3) == 2, -6, i)),
    ("scatter_elements", dict(reduction="add"), lambda i: np.full_like(i, 5)),
    ("scatter_elements", dict(dtype="bool"), lambda i: np.full_like(i, -5)),
    ("scatter_nd", dict(index="int32", reduction="max"), lambda i: np.where(np.arange(2) == 1, 4, i)),
    ("scatter_nd", dict(dtype="int8"), lambda i: np.full_like(i, 4)),
]


BAD_IDS = [f"{op}-{'-'.join(which.values())}" for op, which, _ in BAD_INDEX]


@pytest.mark.parametrize("op, which, bad", BAD_INDEX, ids=BAD_IDS)
def test_out_of_range_index_is_an_error_in_both(op, which, bad, models):
    """An index outside its axis fails the run in both, the C run with FC_ERR_INDEX (status 3)."""
    graph, feeds, model = models[(op, _first(op, **which))]
    feeds = {**feeds, "in1": bad(feeds["in1"]).astype(feeds["in1"].dtype)}
    with pytest.raises(gd.ExecutionError, match="out of range"):
        gd.run(graph, feeds, [str(r) for r in graph.outputs])
    with pytest.raises(gd.ExecutionError, match="status 3"):
        model(**feeds)
