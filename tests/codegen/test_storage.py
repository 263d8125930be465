"""The storage and plan stages: aliases, in-place steps, outputs written directly, copies,
state, and an arena plan that is sound."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from codegen import memory, passes, pipeline, program, schedule, storage


def _program(g, outputs=None, optimize=False):
    g = pipeline.optimize(g, outputs) if optimize else passes.select_outputs(g, outputs)
    st = storage.assign(schedule.make(g), [str(r) for r in g.declared_outputs])
    return program.place(st)


def test_reshape_family_aliases_its_input():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (4, 6))
        h = gd.exp(x, name="h")
        r = gd.flatten(gd.unsqueeze(gd.reshape(h, (2, 12)), 0), name="r")
        gd.reduce_sum(r, name="y")
    p = _program(g)
    assert p.loc[g.node("r").ref()] == p.loc[g.node("h").ref()]
    assert [n.name for n in p.steps] == ["h", "y"]


def test_elementwise_step_writes_over_an_input_that_dies():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (1024,))
        a = gd.exp(x, name="a")
        b = gd.tanh(a, name="b")
        gd.reduce_sum(b, name="y")
    p = _program(g)
    assert "b" in p.inplace and p.loc[g.node("a").ref()] == p.loc[g.node("b").ref()]
    assert p.arena_bytes == 4096


def test_no_in_place_over_a_value_read_later():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (8,))
        a = gd.exp(x, name="a")
        b = gd.tanh(a, name="b")
        gd.add(a, b, name="y")
    p = _program(g)
    assert "b" not in p.inplace
    memory.check(p.buffers, p.plan, alignment=storage.ALIGN)


def test_outputs_are_written_directly_or_copied():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (3,))
        c = gd.constant(np.ones(3, np.float32), name="c")
        y = gd.relu(x, name="y")
        g.set_outputs(y, x, c, y, gd.reshape(y, (1, 3)))
    p = _program(g)
    assert p.loc[g.node("y").ref()] == storage.Loc("output", 0)
    assert [k for k, _ in p.output_copies] == [1, 2, 3, 4]


def test_assigned_values_are_stored_at_the_end():
    with gd.Graph("g") as g:
        v = gd.variable("v", np.zeros(4, np.float32))
        x = gd.placeholder("x", (4,))
        new = gd.assign_add(v, x, name="new")
        g.set_outputs(gd.mul(v, 2.0, name="y"), new)
    p = _program(g)
    assert p.variables == ["v"] and p.state_bytes == 64
    assert p.state_updates == [("v", g.node("new").ref())]


@pytest.mark.parametrize("outputs", [None, ["logp", "loss", "step"]])
def test_the_zoo_plan_is_sound(zoo, outputs):
    p = _program(zoo, outputs, optimize=True)
    memory.check(p.buffers, p.plan, alignment=storage.ALIGN)
    assert p.lower_bound <= p.arena_bytes
    assert all(loc.offset % storage.ALIGN == 0 for loc in p.loc.values() if loc.kind == "arena")
