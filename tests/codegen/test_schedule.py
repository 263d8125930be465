"""Cost model, ASAP/ALAP levels, critical path and the memory-aware schedule."""

from __future__ import annotations

import numpy as np

import graphdef as gd
from codegen import passes, pipeline, schedule


def test_levels_and_critical_path_on_a_diamond():
    with gd.Graph("diamond") as g:
        x = gd.placeholder("x", (64, 64))
        heavy = gd.matmul(gd.matmul(x, x, name="mm1"), x, name="mm2")  # the long branch
        light = gd.relu(x, name="light")
        gd.add(heavy, light, name="y")
    g2 = passes.select_outputs(g)
    lv = schedule.levels(g2)
    assert set(lv.critical) == {"mm1", "mm2", "y"}
    assert lv.slack("light") > 0 and lv.slack("mm1") <= 1e-12
    assert lv.asap["y"] == lv.asap["mm2"] + lv.duration["mm2"]
    assert abs(lv.makespan - (lv.asap["y"] + lv.duration["y"])) < 1e-15
    assert schedule.cost(g2, g2.node("mm1")).flops == 2 * 64**3


def _fan_out(n=4, size=4096):
    """Every big branch head is created before any branch is reduced: graph order is bad."""
    with gd.Graph("fan") as g:
        x = gd.placeholder("x", (1, 16))
        heads = [gd.tile(x * float(i + 1), (size // 16, 1)) for i in range(n)]
        small = [gd.reduce_sum(h) for h in heads]
        total = small[0]
        for s in small[1:]:
            total = total + s
        g.set_outputs(total)
    return g


def test_memory_aware_order_beats_graph_order_on_a_fan_out():
    g = passes.select_outputs(_fan_out())
    topo = schedule.peak_bytes(g, schedule.schedule(g, "topological"))
    best = schedule.peak_bytes(g, schedule.schedule(g, "memory"))
    assert best < topo
    assert best <= 2 * 4096 * 4 + 4096  # about one or two branches live, not four
    assert topo >= 4 * 4096 * 4


def test_every_schedule_respects_dependencies(zoo):
    g = pipeline.optimize(zoo, ["logp", "loss", "step", "gap"])
    for name in schedule.ALGORITHMS:
        order = schedule.schedule(g, name)
        assert sorted(n.name for n in order) == sorted(n.name for n in g.nodes)
        seen = set()
        for n in order:
            assert all(r.node in seen for r in n.inputs) and all(c in seen for c in n.control_inputs), name
            seen.add(n.name)
        assert schedule.peak_bytes(g, schedule.schedule(g, "memory")) <= schedule.peak_bytes(g, order)


def test_peak_bytes_of_a_chain():
    with gd.Graph("chain") as g:
        x = gd.placeholder("x", (256,))
        y = gd.exp(gd.relu(x))  # two 1 KiB values, the first dies at the second
        gd.reshape(y, (16, 16), name="out")
    g2 = passes.select_outputs(g)
    assert schedule.peak_bytes(g2, schedule.schedule(g2, "topological")) == 2048
    assert np.isclose(schedule.cost(g2, g2.node("relu")).bytes, 2048)
