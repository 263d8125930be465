"""codegen.pipeline: one list of named stages, each output printable and traced."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from codegen import pipeline
from codegen.program import Program
from codegen.schedule import Schedule
from codegen.storage import Storage


def _graph():
    with gd.Graph("p") as g:
        x = gd.placeholder("x", (4, 8))
        w = gd.constant(np.ones((8, 3), np.float32))
        gd.softmax(gd.relu(gd.matmul(x, w) + 1.0), name="y")
    return g


@pytest.mark.c
def test_stages_run_in_order_and_every_output_prints():
    seen = []
    c = pipeline.run(_graph(), pipeline.Options(), until="render", trace=lambda name, v: seen.append(name))
    names = [s.name for s in pipeline.stages(pipeline.Options())]
    assert seen == names[: names.index("render") + 1] == list(c.results)
    assert names[-8:] == [
        "prune_inlined",
        "lower",
        "partition",
        "schedule",
        "storage",
        "plan",
        "render",
        "build",
    ]
    assert isinstance(c.results["schedule"], Schedule) and isinstance(c.results["storage"], Storage)
    assert isinstance(c.program, Program) and c.program.arena_bytes >= c.program.lower_bound
    for name in seen:
        assert c.describe(name).strip(), name
    assert any(n.op == "sgemm" for n in c.lowered.nodes), "the C lowering ran"


@pytest.mark.c
def test_the_build_stage_builds_the_target_product(tmp_path):
    c = pipeline.run(_graph(), pipeline.Options(name="p"), until="build", folder=tmp_path / "out")
    built = c.results["build"]
    assert built.product == "program" and built.path.is_file()
    assert (tmp_path / "out" / "p.h").is_file() and "build: program" in c.describe("build")


def test_an_unknown_stage_or_target_is_refused():
    with pytest.raises(gd.FlowcError, match="unknown stage 'nope'"):
        pipeline.run(_graph(), until="nope")
    with pytest.raises(gd.UnsupportedError, match="--target metal is not available"):
        pipeline.run(_graph(), pipeline.Options(backend="metal"), until="outputs")
