"""Resource markers for the codegen tests: C compiler present or skip."""

from __future__ import annotations

import os
import shutil

import pytest

CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/codegen" in str(item.fspath) and item.get_closest_marker("c"):
            if CC is None:
                item.add_marker(pytest.mark.skip(reason="no C compiler (set CC or install gcc)"))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Builds go to a cache private to this test session."""
    monkeypatch.setenv("FLOWC_CACHE", str(tmp_path_factory.getbasetemp() / "flowc-cache"))


# ----------------------------------------------------------------------------- op cases
# The C op tests declare CASES, a list of (case id, fn, inputs): fn builds the op on
# placeholders in0, in1, ... and returns its output(s). All cases of a module are compiled
# into one shared library and compared with the interpreter.

TOL = {
    "float16": dict(rtol=3e-3, atol=3e-3),
    "float32": dict(rtol=2e-5, atol=2e-6),
    "float64": dict(rtol=1e-10, atol=1e-12),
}


def case_graph(cid, fn, inputs):
    import graphdef as gd

    g = gd.Graph(cid)
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype) for i, a in enumerate(inputs)]
        out = fn(*xs)
        g.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return g


@pytest.fixture(scope="module")
def compile_cases(tmp_path_factory):
    """compile_cases(cases, **options) -> {case id: (graph, model)}: the cases' graphs in one
    shared library (codegen.compile_many with those options), in this session's cache."""
    import codegen

    def compile_all(cases, graph=case_graph, **options):
        graphs = [(f"m{i}", graph(cid, fn, inputs)) for i, (cid, fn, inputs) in enumerate(cases)]
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("FLOWC_CACHE", str(tmp_path_factory.getbasetemp() / "flowc-cache"))
            models = codegen.compile_many(graphs, **options)
        return {cid: (g, m) for (cid, _, _), (_, g), m in zip(cases, graphs, models)}

    return compile_all


@pytest.fixture(scope="module")
def built(request, compile_cases):
    """The requesting module's CASES, compiled."""
    return compile_cases(request.module.CASES)


@pytest.fixture
def tol():
    """Tolerances of C against the interpreter, per float dtype."""
    return TOL


@pytest.fixture
def c_outputs(request):
    """c_outputs(built, cid) -> [(name, C output, interpreter output)] of a case of the
    requesting module's CASES; dtypes and shapes already checked equal."""
    import graphdef as gd

    def outputs(built, cid):
        graph, model = built[cid]
        inputs = next(c[2] for c in request.module.CASES if c[0] == cid)
        feeds = {f"in{i}": a for i, a in enumerate(inputs)}
        want = gd.run(graph, feeds, [str(r) for r in graph.outputs])
        got = model(**feeds)
        pairs = []
        for spec, w in zip(model.outputs, want):
            g = got[spec.name]
            assert g.dtype == w.dtype and g.shape == w.shape, spec.name
            pairs.append((spec.name, g, w))
        return pairs

    return outputs


# ----------------------------------------------------------------------------- qconv scratch


@pytest.fixture
def qconv_scratch_program():
    """The function below (a fixture so that test modules need not import this file)."""
    return _qconv_scratch_program


def _qconv_scratch_program(features: str, print_line: str) -> tuple[str, list[int]]:
    """A C program that prints kernels/qconv.h's fc_qconv_scratch for every ``qconv`` example
    (``print_line``: a statement printing the long ``s``), and the lowering's counts for a build
    with the integer ``features`` (ops/quant.py): the two must agree on each build."""
    from codegen.backends.c.ops.quant import _qconv_scratch
    from graphdef.examples import examples_graph

    g, _, _ = examples_graph("qconv")
    lines, want = ['#include "kernels/qconv.h"', "int main(void) {"], []
    for n in (n for n in g.nodes if n.op == "qconv"):
        x, w = (g.type_of(r) for r in n.inputs[:2])
        y, a = n.outputs[0], n.attrs
        geom = (*x.shape, w.shape[0], *y.shape[2:], *w.shape[2:], *a["strides"], a["pads"][0], a["pads"][1],
                *a["dilations"], a["group"])  # fmt: skip
        lines.append("    { fc_qconv_geom g = {" + ", ".join(map(str, geom)) + "};")
        lines.append(f"      long s = fc_qconv_scratch(&g); {print_line} }}")
        want.append(_qconv_scratch([x, w], [y], a, features))
    return "\n".join([*lines, "    return 0;", "}"]) + "\n", want
