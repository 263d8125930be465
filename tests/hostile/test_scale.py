"""Graphs big enough to make the C compiler or the MPI build do work that grows faster than
the graph: what goes into one C function is bounded, and a rank count no graph can use is
refused before any work.

- a long elementwise chain used to become one fused loop (20,000 nodes: 85 s of gcc, 40,000:
  819 s): it is now consecutive fused groups of at most ``passes.FUSE_MAX_OPS`` ops each, so
  no generated C function grows with the graph, and the split chain computes what numpy does
  (in C and through the CUDA simulator);
- a run of more than ``RUN_STEPS`` (backends/c/emit.py) steps calls them from functions of that many
  steps each, instead of one run function as long as the graph;
- ``--ranks 5000`` on a 6-node model built 5000 programs (210 s, 10,008 files): a count above
  ``partition.MAX_RANKS`` is refused in one line before any stage runs, and one above the
  steps there are to place before the partition stage schedules or places anything.

No test here times anything: each asserts the structure that keeps the time linear.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import partition, passes, pipeline
from codegen.backends.c.emit import RUN_STEPS
from graphdef.errors import FlowcError

CAP = passes.FUSE_MAX_OPS


def chain(ops: int, width: int = 16) -> gd.Graph:
    """``ops`` elementwise ops in a row, of five kinds (bench/compile_time.py's chain)."""
    kinds = (lambda t: t * 1.0001, lambda t: t + 0.5, gd.tanh, lambda t: t - 0.25, gd.relu)
    with gd.Graph("chain") as g:
        h = gd.placeholder("x", (2, width))
        for i in range(ops):
            h = kinds[i % len(kinds)](h)
        gd.identity(h, name="y")
    return g


def wide(branches: int) -> gd.Graph:
    """One fusable DAG, not a chain: ``branches`` functions of x summed pairwise, every value
    read once (so all of it would be one group)."""
    with gd.Graph("wide") as g:
        x = gd.placeholder("x", (3, 8))
        level = [gd.tanh(x * (0.5 + 0.01 * i)) - 0.1 * i for i in range(branches)]
        while len(level) > 1:
            level = [a + b for a, b in zip(level[::2], level[1::2])] + level[len(level) - len(level) % 2 :]
        gd.identity(level[0], name="y")
    return g


def ops_of(step) -> int:
    """The ops one step evaluates (a fused program's instructions, inline scalars left out)."""
    if step.op != "fused":
        return 1
    return sum(1 for op, _, _ in step.attrs["program"] if op != "fill")


def c_functions(source: str) -> dict[str, int]:
    """Every function defined at the top level of a generated C file: name -> lines in its body
    (generated C opens a function's body at the end of its signature line and closes it in
    column 0)."""
    out, name, start = {}, None, 0
    lines = source.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^[A-Za-z_].*?\b([A-Za-z_]\w*)\([^;]*\)\s*\{\s*$", line)
        if name is None and m:
            name, start = m.group(1), i
        elif name is not None and line.startswith("}"):
            out[name] = i - start - 1
            name = None
    return out


# ----------------------------------------------------------------------------- one C function
@pytest.mark.parametrize("ops", [3000])
def test_a_long_chain_renders_as_bounded_fused_groups(ops):
    """3000 ops in a row (the shape that took gcc superlinear time in one loop): every fused
    step has at most CAP ops, together they are the whole chain in as few steps as that
    allows, and no C function of the model is longer than a bounded number of lines."""
    c = pipeline.run(chain(ops), pipeline.Options(), until="render")
    steps = c.program.steps
    sizes = [ops_of(s) for s in steps if s.op == "fused"]
    assert sizes and max(sizes) <= CAP, max(sizes)
    assert sum(ops_of(s) for s in steps if s.op != "identity") == ops
    assert len(steps) <= -(-ops // CAP) + 1  # full groups, and the output's identity
    functions = {}  # the model's file and its step files
    for f in c.sources.c_files:
        if f in c.sources.files:
            functions.update(c_functions(c.sources.files[f]))
    assert "model_run" in functions  # steps alike share a function (emit.py): fewer than steps
    # a step's loop body: a local per instruction (inline scalars too) and a few lines around it
    bound = 2 * CAP + 40
    assert max(functions.values()) <= bound, sorted(functions.items(), key=lambda kv: -kv[1])[:3]


def test_a_wide_elementwise_dag_is_split_into_bounded_groups():
    """A fusable DAG four times the cap (not a chain): groups of at most CAP ops, each a valid
    step (the graph verifies), computing what the unsplit graph computes (numpy)."""
    g = wide(2 * CAP // 3)  # tanh, mul, sub per branch and the adds: about 4 * CAP / 2 ops
    fused = pipeline.optimize(g)
    sizes = [ops_of(n) for n in fused.nodes if n.op == "fused"]
    assert len(sizes) > 1 and max(sizes) <= CAP, sizes
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(gd.run(fused, {"x": x}, ["y"])[0], gd.run(g, {"x": x}, ["y"])[0], rtol=1e-5)


def test_normal_groups_are_untouched():
    """A tanh-GELU and a residual: one fused step each, as before the cap."""
    with gd.Graph("mlp") as g:
        x = gd.placeholder("x", (4, 32))
        h = gd.gelu(x * 1.5 + 0.25, approximate="tanh")
        gd.identity(gd.relu(h) * 0.5 + gd.sigmoid(h), name="y")
    fused = [n for n in pipeline.optimize(g).nodes if n.op == "fused"]
    assert len(fused) == 1 and ops_of(fused[0]) < CAP


@pytest.mark.c
@pytest.mark.parametrize("graph", ["chain", "wide"])
def test_a_split_chain_computes_what_numpy_computes(graph):
    """Longer than the cap: consecutive fused steps through arena buffers, built with the C
    compiler, against the numpy interpreter."""
    g = chain(3 * CAP + 7, width=33) if graph == "chain" else wide(2 * CAP // 3)
    shape = g.node("x").outputs[0].shape
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    m = codegen.compile(g, name=f"split_{graph}")
    np.testing.assert_allclose(m(x=x)["y"], gd.run(g, {"x": x}, ["y"])[0], rtol=1e-4, atol=1e-5)


def softmaxes(count: int) -> gd.Graph:
    """``count`` steps no pass merges (softmax is a kernel, not an elementwise op)."""
    with gd.Graph("steps") as g:
        h = gd.placeholder("x", (3, 5))
        for _ in range(count):
            h = gd.softmax(h * 2.0)
        gd.identity(h, name="y")
    return g


def test_a_long_run_is_split_into_bounded_functions():
    """More steps than one function calls (RUN_STEPS): the run function calls parts of at
    most RUN_STEPS steps each, and no C function grows with the step count."""
    count = 2 * RUN_STEPS + 10
    c = pipeline.run(softmaxes(count), pipeline.Options(), until="render")
    assert len(c.program.steps) > 2 * RUN_STEPS
    functions = {}  # the model's file and its step files
    for f in c.sources.c_files:
        if f in c.sources.files:
            functions.update(c_functions(c.sources.files[f]))
    parts = [f for f in functions if f.startswith("model_run_part_")]
    assert len(parts) == -(-len(c.program.steps) // RUN_STEPS)
    assert max(functions.values()) <= RUN_STEPS + 40, max(functions.items(), key=lambda kv: kv[1])


@pytest.mark.c
def test_a_split_run_computes_what_numpy_computes():
    """The parts built (also with the profiling counters, whose locals move into the parts)
    compute what numpy does."""
    g = softmaxes(RUN_STEPS + 20)
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    m = codegen.compile(g, name="split_run", flags=("-DFC_PROFILE",))
    np.testing.assert_allclose(m(x=x)["y"], gd.run(g, {"x": x}, ["y"])[0], rtol=1e-5, atol=1e-7)


def test_a_profile_names_every_step_of_every_step_file():
    """Steps spread over several C files, some calling another's function: the profiling
    build's table of step names holds every step in call order (it listed the model file's step
    functions only: the rest printed as "(null)", and names shifted past a shared function)."""
    with gd.Graph("g") as g:  # ten softmaxes, each after 100 tanh steps fused into a few long ones
        h = gd.placeholder("x", (3, 5))
        for k in range(10):
            for i in range(100):
                h = gd.tanh(h * (1.0 + 0.001 * (k * 100 + i)) + 0.01 * i)
            h = gd.softmax(h)
        gd.identity(h, name="y")
    c = pipeline.run(g, pipeline.Options(), until="render")
    files = [f for f in c.sources.c_files if f in c.sources.files]
    assert len(files) > 1, "the steps fit one file: this test needs more"
    table = re.search(r"_profile_steps\[(\d+)\] = \{(.*?)\};", c.sources.files[files[0]], re.S)
    names = re.findall(r'"(\d+) (\w+)"', table.group(2))
    calls = [int(k) for k in re.findall(r"FC_STEP\((\d+),", "".join(c.sources.files[f] for f in files))]
    assert len(names) == int(table.group(1)) == len(calls) == len(c.program.steps)
    assert [f"{k} {op}" for k, op in names] == [f"{k} {s.op}" for k, s in enumerate(c.program.steps)]


@pytest.mark.c
@pytest.mark.skipif(shutil.which("g++") is None, reason="the CUDA simulator builds with g++")
def test_split_fused_groups_run_through_the_cuda_simulator():
    """The CUDA backend renders the same fused steps: the chain longer than the cap, there."""
    g = chain(2 * CAP + 3, width=17)
    x = np.random.default_rng(3).standard_normal((2, 17)).astype(np.float32)
    m = codegen.compile(g, name="split_cuda", target="cuda", cc="g++")
    np.testing.assert_allclose(m(x=x)["y"], gd.run(g, {"x": x}, ["y"])[0], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- --ranks
def six_nodes() -> gd.Graph:
    """Six nodes, three of them steps no pass merges (two products and a softmax between)."""
    rng = np.random.default_rng(0)
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (4, 8))
        h = gd.softmax(gd.matmul(x, rng.standard_normal((8, 8)).astype(np.float32)))
        gd.matmul(h, rng.standard_normal((8, 8)).astype(np.float32), name="y")
    assert len(g.nodes) == 6
    return g


def steps_of(graph: gd.Graph) -> int:
    return sum(1 for n in graph.nodes if n.op not in ("placeholder", "constant", "variable"))


def _no_stage_after(stage: str):
    """A trace that fails the test when a stage later than ``stage`` runs."""
    names = [s.name for s in pipeline.stages(pipeline.Options())]
    late = set(names[names.index(stage) + 1 :])

    def trace(name, value):
        assert name not in late, f"stage '{name}' ran before the refusal"

    return trace


def test_more_ranks_than_steps_is_refused_before_partitioning(tmp_path, monkeypatch):
    """--ranks 500 on a model with a few steps (under the ceiling: 5000 is refused by that
    first, below): one line naming the steps, raised by the partition stage before it
    schedules or places anything (nothing written)."""
    g = six_nodes()
    lowered = pipeline.run(g, pipeline.Options(), until="lower").results["lower"]
    steps = steps_of(lowered)
    want = rf"^--ranks 500: the graph 'g' has {steps} steps to place; at most {steps} ranks can hold work$"

    def no_work(*a, **k):
        raise AssertionError("scheduled or placed before refusing")

    monkeypatch.setattr(partition, "split", no_work)
    monkeypatch.setattr(pipeline.schedule, "schedule", no_work)
    with pytest.raises(FlowcError, match=want):
        pipeline.run(g, pipeline.Options(ranks=500), until="render", trace=_no_stage_after("lower"))
    with pytest.raises(FlowcError, match=want):
        codegen.export(g, tmp_path / "out", ranks=500, build_binary=False)
    assert not (tmp_path / "out").exists()
    monkeypatch.undo()
    # as many ranks as steps is accepted, and so is the partition's own check for direct callers
    assert pipeline.run(g, pipeline.Options(ranks=steps), until="partition").partition.ranks == steps
    whole = passes.select_outputs(g)
    with pytest.raises(FlowcError, match=rf"^--ranks 9: the graph 'g' has {steps_of(whole)} steps to place"):
        partition.split(whole, 9, "pipeline")


@pytest.mark.parametrize("ranks", [partition.MAX_RANKS + 1, 5000, 100_000])
def test_a_rank_count_above_the_ceiling_is_refused_before_any_stage(ranks):
    """Above MAX_RANKS whatever the graph: refused before the first stage runs."""

    def trace(name, value):
        pytest.fail(f"stage '{name}' ran before the refusal")

    with pytest.raises(FlowcError, match=rf"^--ranks {ranks}: at most {partition.MAX_RANKS} ranks"):
        pipeline.run(six_nodes(), pipeline.Options(ranks=ranks), trace=trace)


def test_annotated_ranks_may_name_a_rank_past_the_step_count():
    """An annotated graph needs as many ranks as the highest rank it names, steps or not."""
    with gd.Graph("far") as g:
        x = gd.placeholder("x", (4,))
        with gd.device("rank:3"):
            gd.relu(x, name="y")
    partition.check_ranks(g, 4, "annotated")
    with pytest.raises(FlowcError, match="has 1 step to place; at most 4 ranks can hold work"):
        partition.check_ranks(g, 5, "annotated")
    with pytest.raises(FlowcError, match="has 1 step to place; at most 1 rank can hold work"):
        partition.check_ranks(g, 4, "pipeline")


def test_the_cli_refuses_a_rank_count_above_the_ceiling_before_loading_the_model(tmp_path, capsys):
    """``flowc compile --ranks 100000``: one line about the ranks, the model file never read."""
    from codegen import cli

    missing = tmp_path / "never_read.py"
    code = cli.main(["compile", str(missing), "-o", str(tmp_path / "out"), "--ranks", "100000"])
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert err.count("\n") == 0 and f"at most {partition.MAX_RANKS} ranks" in err, err
    assert not (tmp_path / "out").exists()
