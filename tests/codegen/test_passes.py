"""Each pass alone: what it changes, that the result verifies, and that values do not change."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from codegen import passes, pipeline


def _same_values(before, after, feeds):
    names = [str(r) for r in before.outputs]
    want = gd.Session(before).run(feeds, names)
    got = gd.Session(after).run(feeds, [str(r) for r in after.declared_outputs])
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _declared(g, *outs):
    return passes.select_outputs(g, list(outs) or None)


def test_prune_keeps_what_outputs_need_including_control_inputs():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,))
        gd.placeholder("unused", (3,))
        a = gd.relu(x, name="a")
        gd.exp(x, name="dead")
        with gd.control_dependencies([a]):
            gd.neg(x, name="y")
    out = passes.prune(_declared(g, "y"))
    gd.verify(out)
    assert [n.name for n in out.nodes] == ["x", "unused", "a", "y"]  # placeholders are the interface


def test_freeze_turns_unassigned_variables_into_constants():
    with gd.Graph("g") as g:
        w = gd.variable("w", np.ones(2, np.float32))
        v = gd.variable("v", np.zeros(2, np.float32))
        y = gd.add(w, v, name="y")
        gd.assign_add(v, y, name="step")
    out = passes.freeze_variables(_declared(g, "y", "step"))
    gd.verify(out)
    assert out.node("w").op == "constant" and out.node("v").op == "variable"
    _same_values(_declared(g, "y", "step"), out, {})


def test_fold_constants_evaluates_constant_subgraphs_but_not_big_broadcasts():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (3,))
        c = gd.transpose(gd.constant(np.arange(6, dtype=np.float32).reshape(2, 3))) * 2.0
        big = gd.expand(gd.constant(np.float32(1.0)), (200, 200))
        gd.add(gd.reduce_sum(c, axes=1), x, name="y")
        gd.reduce_sum(big, name="z")
    before = _declared(g)
    out = passes.fold_constants(before)
    gd.verify(out)
    ops = {n.name: n.op for n in out.nodes}
    assert ops["reduce_sum"] == "constant" and ops["expand"] == "expand" and ops["y"] == "add"
    _same_values(before, out, {"x": np.ones(3, np.float32)})


def test_cse_merges_equal_nodes_and_equal_constants():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (3,))
        a = gd.exp(x) + gd.constant(np.float32(2.0))
        b = gd.exp(x) + gd.constant(np.float32(2.0))
        gd.mul(a, b, name="y")
    before = _declared(g)
    out = passes.prune(passes.cse(before))
    gd.verify(out)
    assert sum(n.op == "exp" for n in out.nodes) == 1 and sum(n.op == "constant" for n in out.nodes) == 1
    assert sum(n.op == "add" for n in out.nodes) == 1
    _same_values(before, out, {"x": np.arange(3, dtype=np.float32)})


def test_cse_never_merges_stateful_ops():
    with gd.Graph("g") as g:
        v = gd.variable("v", np.zeros((), np.float32))
        gd.assign_add(v, 1.0, name="a")
        gd.assign_add(v, 1.0, name="b")
    out = passes.cse(_declared(g, "a", "b"))
    assert {n.name for n in out.nodes} >= {"a", "b"}


def test_decompose_batch_norm_then_fold_and_fuse_to_one_loop():
    rng = np.random.default_rng(0)
    p = [rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2, 4, 3, 3))
        gd.relu(gd.batch_norm(x, *(gd.constant(v) for v in p)), name="y")
    before = _declared(g)
    out = pipeline.optimize(g)
    assert [n.op for n in out.nodes if n.op not in ("placeholder", "constant")] == ["fused"]
    assert [i[0] for i in out.node("y").attrs["program"]] == ["mul", "add", "relu"]
    _same_values(before, out, {"x": rng.standard_normal((2, 4, 3, 3)).astype(np.float32)})


def test_decompose_applies_the_c_legalizations_multi_axis_resize_and_reduction():
    from codegen.backends.c import LEGALIZE

    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2, 3, 4, 5))
        gd.resize(x, scales=(1, 1, 2, 1.5), mode="linear", name="r")
        gd.reduce_sum(x, axes=(0, 2), name="s")
    before = _declared(g)
    assert passes.decompose(before) == before  # graphdef decomposes neither
    out = passes.decompose(before, LEGALIZE)
    gd.verify(out)
    assert sum(n.op == "resize" for n in out.nodes) == 2 and sum(n.op == "reduce_sum" for n in out.nodes) == 2
    _same_values(
        before, out, {"x": np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)}
    )


def test_fusion_respects_outputs_consumers_and_shapes():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (4, 3))
        b = gd.placeholder("b", (3,))
        h = gd.tanh(x * 2.0 + b, name="h")  # 3 ops, one loop
        shared = gd.exp(h, name="shared")  # read by two later ops: stays its own node
        gd.add(shared, 1.0, name="y1")
        gd.reduce_sum(shared, name="y2")
        gd.sigmoid(h, name="y3")  # h is read twice too
    before = _declared(g)
    out = passes.fuse_elementwise(passes.fold_constants(before))
    gd.verify(out)
    assert out.node("h").op == "fused" and len(out.node("h").attrs["program"]) == 4  # mul, 2.0, add, tanh
    assert out.node("shared").op == "exp"
    _same_values(before, out, {"x": np.ones((4, 3), np.float32), "b": np.arange(3, dtype=np.float32)})


GRAPH_STAGES = [s.name for s in pipeline.stages(pipeline.Options())][:-5]


@pytest.mark.c
@pytest.mark.parametrize("name", GRAPH_STAGES)
def test_each_graph_stage_verifies_on_the_zoo(name, zoo, zoo_feeds):
    """Every graph the pipeline makes (passes, the C lowering, partition) verifies and
    computes what the zoo computes."""
    outs = ["logp", "label", "mask", "loss", "gap", "filled", "step"]
    c = pipeline.run(zoo, pipeline.Options(outputs=tuple(outs)), until="partition", check=True)
    assert [n for n, _ in c.graphs()] == GRAPH_STAGES
    stage = c.results[name]
    names = [str(r) for r in stage.declared_outputs]
    assert names == outs
    got = gd.Session(stage).run(zoo_feeds, names)
    want = gd.Session(zoo).run(zoo_feeds, outs)
    for w, v in zip(want, got):
        np.testing.assert_allclose(v, w, rtol=1e-5, atol=1e-6)


def test_graph_without_outputs_is_refused():
    with gd.Graph("g") as g:
        gd.placeholder("x", (2,))
    with pytest.raises(gd.GraphError, match="no outputs"):
        pipeline.optimize(g)


@pytest.mark.parametrize("producer", ["conv", "gemm", "gemm_t"])
def test_batch_norm_folds_into_the_conv_or_gemm_before_it(producer):
    rng = np.random.default_rng(3)
    p = [rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
    with gd.Graph("g") as g:
        if producer == "conv":
            x = gd.placeholder("x", (2, 3, 5, 5))
            feeds = {"x": rng.standard_normal((2, 3, 5, 5)).astype(np.float32)}
            h = gd.conv2d(
                x,
                gd.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                gd.constant(rng.standard_normal(4).astype(np.float32)),
                padding=1,
            )
        else:
            x = gd.placeholder("x", (2, 6))
            feeds = {"x": rng.standard_normal((2, 6)).astype(np.float32)}
            wshape = (4, 6) if producer == "gemm_t" else (6, 4)
            h = gd.gemm(
                x,
                gd.constant(rng.standard_normal(wshape).astype(np.float32)),
                gd.constant(np.float32(0.5)),
                alpha=2.0,
                beta=3.0,
                trans_b=producer == "gemm_t",
            )
        gd.relu(gd.batch_norm(h, *(gd.constant(v) for v in p)), name="y")
    before = _declared(g)
    out = passes.fold_batch_norm(before)
    gd.verify(out)
    assert not any(n.op == "batch_norm" for n in out.nodes)
    _same_values(before, out, feeds)


def test_batch_norm_is_not_folded_when_the_conv_output_is_also_used():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (1, 2, 4, 4))
        h = gd.conv2d(x, gd.constant(np.ones((2, 2, 1, 1), np.float32)))
        bn = gd.batch_norm(h, *(gd.constant(np.ones(2, np.float32)) for _ in range(4)))
        gd.add(bn, h, name="y")
    assert any(n.op == "batch_norm" for n in passes.fold_batch_norm(_declared(g)).nodes)


# ----------------------------------------------------------------------------- reduce_pow
def _pow_graph(dtype, exponents, x_shape=(16,)):
    with gd.Graph("pow") as g:
        x = gd.placeholder("x", x_shape, dtype)
        for i, c in enumerate(exponents):
            gd.pow(x, c, name=f"y{i}")
    return _declared(g)


def test_reduce_pow_rewrites_constant_small_exponents_only():
    g = _pow_graph("float32", passes.POW_EXPONENTS)
    assert not [n for n in passes.reduce_pow(g).nodes if n.op == "pow"]
    kept = _pow_graph("float32", (2.2, -2.0, 5.0))  # not in POW_EXPONENTS
    assert [n.op for n in passes.reduce_pow(kept).nodes].count("pow") == 3
    ints = _pow_graph("int32", (2, 3))
    assert [n.op for n in passes.reduce_pow(ints).nodes].count("pow") == 2
    with gd.Graph("var") as g2:  # an exponent that is not a constant stays
        gd.pow(gd.placeholder("x", (4,)), gd.placeholder("e", ()), name="y")
    assert [n.op for n in passes.reduce_pow(_declared(g2)).nodes].count("pow") == 1
    assert "reduce_pow" in [name for name, _ in passes.pipeline()]


@pytest.mark.c
@pytest.mark.parametrize("dtype, ulps", [("float32", 2), ("float64", 2)])
def test_reduce_pow_compiled_matches_numpy(dtype, ulps):
    """A dense sweep of float inputs (denormals, zeros of both signs, infinities, NaN): the
    rewritten steps give numpy's np.power within ``ulps`` units in the last place, the same
    NaNs, infinities and signs of zero."""
    import codegen

    rng = np.random.default_rng(0)
    bits = np.uint32 if dtype == "float32" else np.uint64
    width = 32 if dtype == "float32" else 64
    sweep = rng.integers(0, 2**width - 1, 20000, dtype=np.uint64).astype(bits).view(dtype)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, 2.0, 3.0], dtype)
    tiny = np.finfo(dtype).smallest_subnormal * np.arange(1, 50, dtype=dtype)
    x = np.concatenate([sweep, special, tiny, -tiny, rng.standard_normal(1000).astype(dtype)])
    g = _pow_graph(dtype, passes.POW_EXPONENTS, x.shape)
    got = codegen.compile(g, name="pw")(x=x)
    with np.errstate(all="ignore"):
        for i, c in enumerate(passes.POW_EXPONENTS):
            want, have = np.power(x, np.array(c, dtype)), got[f"y{i}"]
            assert np.array_equal(np.isnan(have), np.isnan(want)), c
            finite = np.isfinite(want) & (want != 0)
            assert np.array_equal(have[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]), c
            assert np.array_equal(np.signbit(have[want == 0]), np.signbit(want[want == 0])), c
            spacing = np.spacing(np.abs(want[finite]))
            assert np.all(np.abs(have[finite] - want[finite]) <= ulps * spacing), c


def test_sink_transposes_lets_a_residual_add_keep_the_convolutions_layout():
    """Two NCHW results taken to NHWC, added, and taken back (an NHWC model's residual add
    between convolutions): the add moves before the transposes, which then cancel; a
    transpose also read by a matmul stays where it is. Same values."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    g = gd.Graph("s")
    with g:
        xp = gd.placeholder("x", x.shape)
        a, b = gd.relu(xp), gd.sigmoid(xp)
        s = gd.add(gd.transpose(a, (0, 2, 3, 1)), gd.transpose(b, (0, 2, 3, 1)))
        back = gd.tanh(gd.transpose(s, (0, 3, 1, 2)))
        kept = gd.transpose(xp, (0, 2, 3, 1))
        g.set_outputs(back, gd.matmul(kept, gd.constant(np.ones((3, 2), np.float32))), gd.neg(kept))
    out = passes.prune(passes.cancel_transposes(passes.sink_transposes(g.freeze())))
    ops = [n.op for n in out.nodes]
    assert ops.count("transpose") == 1, ops  # the one the matmul reads
    want = gd.run(g, {"x": x}, [str(o) for o in g.outputs])
    have = gd.run(out, {"x": x}, [str(o) for o in out.outputs])
    for h, w_ in zip(have, want):
        np.testing.assert_array_equal(h, w_)


def test_cancel_transposes_removes_pairs_that_undo_each_other_and_merges_the_others():
    """NHWC -> NCHW -> relu -> NHWC -> NCHW: the last two cancel; transpose of a transpose that
    does not undo it becomes one transpose; a transpose read elsewhere stays. Same values."""
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    g = gd.Graph("t")
    with g:
        xp = gd.placeholder("x", x.shape)
        a = gd.relu(gd.transpose(xp, (0, 3, 1, 2)))
        back = gd.transpose(a, (0, 2, 3, 1))
        again = gd.transpose(back, (0, 3, 1, 2))  # undoes back: a itself
        twisted = gd.transpose(gd.transpose(xp, (1, 0, 2, 3)), (0, 2, 1, 3))  # one transpose
        g.set_outputs(gd.sigmoid(again), twisted, back)
    out = passes.prune(passes.cancel_transposes(g.freeze()))
    ops = [n.op for n in out.nodes]
    assert ops.count("transpose") == 3, ops  # the first, back (an output) and twisted as one
    want = [np.asarray(v) for v in gd.run(g, {"x": x}, [str(o) for o in g.outputs])]
    have = [np.asarray(v) for v in gd.run(out, {"x": x}, [str(o) for o in out.outputs])]
    for h, w_ in zip(have, want):
        np.testing.assert_array_equal(h, w_)
    np.testing.assert_array_equal(have[1], x.transpose(1, 0, 2, 3).transpose(0, 2, 1, 3))


def test_products_of_one_weight_store_its_packed_form_once():
    """Two products of one weight matrix (batch 1 and batch 8: two steps, each packing it
    alike) hold one packed copy, and both give numpy's product."""
    import codegen

    w = np.random.default_rng(0).random((256, 256), np.float32)
    with gd.Graph("shared") as g:
        c = gd.constant(w, name="w")
        gd.identity(gd.matmul(gd.placeholder("a", (1, 256)), c), name="y1")
        gd.identity(gd.matmul(gd.placeholder("b", (8, 256)), c), name="y2")
    program = pipeline.run(g, pipeline.Options(outputs=("y1", "y2")), until="plan").program
    assert program.weight_bytes == w.nbytes
    a, b = np.ones((1, 256), np.float32), np.full((8, 256), 0.5, np.float32)
    got = codegen.compile(g, outputs=["y1", "y2"])(a=a, b=b)
    np.testing.assert_allclose(got["y1"], a @ w, rtol=1e-5)
    np.testing.assert_allclose(got["y2"], b @ w, rtol=1e-5)
