"""Steps other than products split over the thread pool: elementwise loops (fused chains
included), depthwise convolution, pooling, reductions, softmax and layer norm.

Each family is built big enough to split and small enough not to; the split steps must call
fc_pool_run, match the interpreter, and give the very bits of the one-thread build (the parts
partition the outer range, so every element is computed the same way).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import pipeline
from codegen.backends.c import op_table
from codegen.render import splits
from codegen.target import Target
from graphdef.errors import ExecutionError

RNG = np.random.default_rng(11)


def f32(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


# family -> (input shape, dtype, fn of the input); its input is x_<family>, its output y_<family>
BIG = {
    # (5, 30001) + a row bias: the parts' bound falls inside a row, rows have vector tails
    "chain": ((5, 30001), "float32", lambda x: gd.tanh(x * 0.5 + gd.constant(f32(30001)))),
    # two images, channel multiplier 2: input planes map to channels modulo c
    "dwconv": (
        (2, 24, 30, 30),
        "float32",
        lambda x: gd.conv(
            x, gd.constant(f32(48, 1, 3, 3)), gd.constant(f32(48)), group=24, pads=(1, 1, 1, 1)
        ),
    ),
    "max_pool": (
        (2, 48, 48, 48),
        "float32",
        lambda x: gd.max_pool(x, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
    ),
    "avg_pool": (
        (2, 48, 48, 48),
        "float32",
        lambda x: gd.avg_pool(x, kernel_shape=(3, 3), pads=(1, 1, 1, 1)),
    ),
    # float64: the generic kernel, its geometry counting the part's planes
    "max_pool_f64": (
        (2, 48, 40, 40),
        "float64",
        lambda x: gd.max_pool(x, kernel_shape=(2, 2), strides=(2, 2)),
    ),
    "reduce_mean": ((4, 96, 30, 30), "float32", lambda x: gd.reduce_mean(x, axes=(2, 3))),
    "reduce_max": ((32, 100, 200), "float32", lambda x: gd.reduce_max(x, axes=(1,))),
    "softmax": ((16, 64, 128), "float32", lambda x: gd.softmax(x, axis=-1)),
    "log_softmax": ((8, 50, 300), "float32", lambda x: gd.log_softmax(x, axis=1)),
    "layer_norm": (
        (256, 384),
        "float32",
        lambda x: gd.layer_norm(x, gd.constant(f32(384)), gd.constant(f32(384)), axis=-1),
    ),
}

SMALL = {
    "chain": ((4, 100), "float32", lambda x: gd.tanh(x * 0.5 + 1.0)),
    "dwconv": ((1, 4, 8, 8), "float32", lambda x: gd.conv(x, gd.constant(f32(4, 1, 3, 3)), group=4)),
    "max_pool": ((1, 4, 8, 8), "float32", lambda x: gd.max_pool(x, kernel_shape=(2, 2), strides=(2, 2))),
    "reduce_mean": ((2, 8, 8), "float32", lambda x: gd.reduce_mean(x, axes=(2,))),
    "softmax": ((4, 16), "float32", lambda x: gd.softmax(x)),
    "layer_norm": ((4, 32), "float32", lambda x: gd.layer_norm(x, gd.constant(f32(32)), axis=-1)),
}


def build(cases, name):
    g = gd.Graph(name)
    with g:
        for fam, (shape, dtype, fn) in cases.items():
            out = fn(gd.placeholder(f"x_{fam}", shape, dtype))
            g.set_outputs(*g.outputs, gd.identity(out, name=f"y_{fam}"))
    feeds = {f"x_{fam}": f32(*shape, dtype=dtype) for fam, (shape, dtype, _) in cases.items()}
    return g, feeds


def source(g, threads: int) -> str:
    options = pipeline.Options(name="m", target=Target("host", threads=threads))
    return pipeline.run(g, options).sources.files["m.c"]


@pytest.fixture(scope="module")
def big():
    g, feeds = build(BIG, "threads_big")
    want = dict(zip(BIG, gd.run(g, feeds, [f"y_{f}" for f in BIG])))
    got = {t: codegen.compile(g, threads=t)(**feeds) for t in (1, 2, 3)}
    got = {t: {f: out[f"y_{f}"] for f in BIG} for t, out in got.items()}
    return {t: source(g, t) for t in (1, 2)}, want, got


def _step_of(text: str, fam: str) -> str:
    """The step of family ``fam`` in a model's source: the one the run function calls with the
    family's input or output (each family is one step)."""
    run = text[text.index("int m_run(") :]
    calls = re.findall(r"FC_STEP\((\d+), m_step_(\d+)\(([^;]*)\)\)\) != FC_OK", run)
    index = next(int(i) for i, _, args in calls if f"in_x_{fam}," in args or f"out_y_{fam})" in args)
    chunk = text[text.index(f"/* step {index}: ") :]
    nxt = chunk.find("/* step ", 10)
    return chunk if nxt < 0 else chunk[:nxt]


@pytest.mark.c
@pytest.mark.parametrize("fam", list(BIG))
def test_big_steps_split_and_match(big, fam):
    sources, want, got = big
    step = _step_of(sources[2], fam)
    assert "fc_pool_run((fc_pool *)pool" in step, step[:400]
    assert "fc_pool_run" not in _step_of(sources[1], fam)
    tol = dict(rtol=1e-5, atol=2e-5) if want[fam].dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[2][fam], want[fam], **tol)
    np.testing.assert_array_equal(got[2][fam], got[1][fam])  # bitwise: same bits, NaN-free
    np.testing.assert_array_equal(got[3][fam], got[1][fam])  # three parts, or fewer: still the same


def test_big_steps_are_worth_their_parts():
    """The cost model's side: each family's step gets two parts of at least PART_WORK."""
    g, _ = build(BIG, "threads_big")
    lowered = pipeline.run(g, pipeline.Options(target=Target("host", threads=2)), until="lower").results
    graph = lowered["lower"]
    split = [n for n in graph.nodes if op_table.parts_of(n, [graph.type_of(r) for r in n.inputs], 2) == 2]
    assert len(split) == len(BIG)
    for n in split:
        s = op_table.split_of(n, [graph.type_of(r) for r in n.inputs])
        assert s.work >= 2 * splits.PART_WORK


def test_small_steps_stay_whole():
    g, _ = build(SMALL, "threads_small")
    text = source(g, 2)
    assert "fc_pool_run" not in text
    assert "(void)pool;" in text  # the run takes the pool and leaves it


@pytest.mark.c
def test_small_steps_match_at_two_threads():
    g, feeds = build(SMALL, "threads_small")
    want = gd.run(g, feeds, [f"y_{f}" for f in SMALL])
    got = codegen.compile(g, threads=2)(**feeds)
    for fam, w in zip(SMALL, want):
        np.testing.assert_allclose(got[f"y_{fam}"], w, rtol=1e-5, atol=2e-5, err_msg=fam)


def test_split_steps_render_the_same_twice():
    g, _ = build(BIG, "threads_big")
    assert source(g, 2) == source(g, 2)


@pytest.mark.c
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("at", [10, 150_000])
def test_a_part_that_fails_reports_it(threads, at):
    """Integer division by zero in either part of a split step fails the run."""
    g = gd.Graph("div")
    with g:
        a = gd.placeholder("a", (200_000,), "int32")
        b = gd.placeholder("b", (200_000,), "int32")
        gd.identity(gd.div(a, b), name="q")
    if threads == 2:
        assert "fc_pool_run" in source(g, 2)
    den = np.ones(200_000, np.int32)
    den[at] = 0
    m = codegen.compile(g, threads=threads)
    with pytest.raises(ExecutionError, match="division by zero|status 4"):
        m(a=np.arange(200_000, dtype=np.int32), b=den)
    den[at] = 1
    np.testing.assert_array_equal(m(a=np.arange(200_000, dtype=np.int32), b=den)["q"], np.arange(200_000))


def test_part_bounds_fall_on_grains():
    s = splits.Split(units=150_005, work=10 * splits.PART_WORK, grain=16)
    bounds = splits.part_bounds(s, 2)
    assert bounds[0] == 0 and bounds[-1] == 150_005
    assert all(b % 16 == 0 for b in bounds[:-1])
    assert abs((bounds[1] - bounds[0]) - (bounds[2] - bounds[1])) <= 16
    assert splits.part_bounds(splits.Split(7, 10 * splits.PART_WORK), 3) == [0, 2, 4, 7]


def test_parts_follow_work_threads_and_units():
    w = splits.PART_WORK
    assert splits.parts_for(splits.Split(1000, 2 * w - 1), 2) == 1  # a part would get less than PART_WORK
    assert splits.parts_for(splits.Split(1000, 2 * w), 2) == 2
    assert splits.parts_for(splits.Split(1000, 3 * w), 8) == 3  # no more parts than work for them
    assert splits.parts_for(splits.Split(1000, 100 * w), 8) == 8
    assert splits.parts_for(splits.Split(3, 100 * w), 8) == 3  # no more parts than units
    assert splits.parts_for(splits.Split(40, 100 * w, grain=16), 8) == 3  # nor than grains
    assert splits.parts_for(splits.Split(1000, 100 * w), 1) == 1
    assert splits.parts_for(None, 8) == 1


def test_split_scratch_is_per_part():
    """A split depthwise conv gets one scratch (rounded to 64 bytes) per part."""
    g, _ = build({"dwconv": BIG["dwconv"]}, "dw")
    graph = pipeline.run(g, pipeline.Options(), until="lower").results["lower"]
    node = next(n for n in graph.nodes if n.op == "conv")
    ins = [graph.type_of(r) for r in node.inputs]
    one = op_table.scratch_bytes(node, ins, "scalar", 1)
    assert op_table.scratch_bytes(node, ins, "scalar", 2) == 2 * (-(-one // 64) * 64)
