"""codegen/data_parallel.py: the gradients' cross-rank means compiled away on one process, or
fused into allreduce buckets placed to overlap backward; on one rank (the ops' references) the
fused graph computes what the original does."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import graphdef as gd
from codegen import data_parallel, passes, pipeline, schedule
from graphdef.errors import FlowcError


def training_graph(dtype="float32"):
    """A 3-layer MLP and one SGD step ('train'), and a batch to feed it."""
    rng = np.random.default_rng(0)
    with gd.Graph("dp") as g:
        x = gd.placeholder("x", (8, 16), dtype)
        y = gd.placeholder("y", (8,), "int64")
        w1 = gd.variable("w1", (rng.standard_normal((16, 64)) * 0.2).astype(dtype))
        b1 = gd.variable("b1", np.zeros(64, dtype))
        w2 = gd.variable("w2", (rng.standard_normal((64, 32)) * 0.2).astype(dtype))
        w3 = gd.variable("w3", (rng.standard_normal((32, 4)) * 0.2).astype(dtype))
        h = gd.relu(gd.matmul(gd.relu(gd.matmul(x, w1) + b1), w2))
        loss = gd.train.softmax_cross_entropy(gd.matmul(h, w3), y, name="loss")
        gd.train.SGD(0.1, momentum=0.9).minimize(loss, name="train")
    feeds = {"x": rng.standard_normal((8, 16)).astype(dtype), "y": rng.integers(0, 4, 8)}
    return g, feeds


def run_steps(graph, feeds, steps=3):
    sess = gd.Session(graph)
    losses = [float(sess.run(feeds, ["train"])[0]) for _ in range(steps)]
    return losses, {v: sess.variable(v) for v in ("w1", "b1", "w2", "w3")}


def test_optimizers_average_every_gradient_and_one_process_drops_it():
    g, _ = training_graph()
    means = [n for n in g.nodes if n.op == "cross_rank_mean"]
    assert len(means) == 4  # one per trainable variable
    single = data_parallel.single_process(passes.select_outputs(g, ["train"]))
    assert not any(n.op == "cross_rank_mean" for n in single.nodes)


@pytest.mark.parametrize("bucket_bytes", [1, 4096, 1 << 20])
def test_buckets_compute_what_the_graph_does(bucket_bytes):
    g, feeds = training_graph()
    fused = data_parallel.fuse(passes.select_outputs(g, ["train"]), "float32", bucket_bytes)
    starts = [n for n in fused.nodes if n.op == "allreduce_start"]
    assert len(starts) == {1: 4, 4096: 3, 1 << 20: 1}[bucket_bytes]  # w2 (8 KiB) closes a bucket of its own
    assert sum(len(n.inputs) for n in starts) == 4
    assert not any(n.op == "cross_rank_mean" for n in fused.nodes)
    want, want_vars = run_steps(g, feeds)
    got, got_vars = run_steps(fused, feeds)
    np.testing.assert_array_equal(got, want)
    for name in want_vars:
        np.testing.assert_array_equal(got_vars[name], want_vars[name])


def test_float16_wire_rounds_within_its_precision():
    g, feeds = training_graph()
    fused = data_parallel.fuse(passes.select_outputs(g, ["train"]), "fp16")
    assert {n.outputs[0].dtype for n in fused.nodes if n.op == "allreduce_start"} == {"float16"}
    _, want = run_steps(g, feeds)
    _, got = run_steps(fused, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=2e-3)


def test_schedule_posts_each_bucket_early_and_waits_late():
    g, _ = training_graph()
    opts = pipeline.Options(outputs=("train",), allreduce="float32")
    c = pipeline.run(g, opts, until="schedule")
    order = list(c.results["schedule"].order)
    pos = {n.name: i for i, n in enumerate(order)}
    for n in order:
        if n.op == "allreduce_start":
            assert pos[n.name] == max(pos[r.node] for r in n.inputs) + 1
        if n.op == "allreduce_wait":
            readers = [m for m in order if any(r.node == n.name for r in m.inputs)]
            assert pos[n.name] == min(pos[m.name] for m in readers) - 1
    assert schedule.peak_bytes(c.lowered, order) > 0


def test_other_gradient_dtypes_and_compressions_are_refused():
    with gd.Graph("f64") as g:
        mean = gd.train.cross_rank_mean(gd.placeholder("x", (3,), "float64") * 2.0)
    with pytest.raises(FlowcError, match="float32 gradients; 'mul' is float64"):
        data_parallel.fuse(passes.select_outputs(g, [mean]))
    g, _ = training_graph()
    with pytest.raises(FlowcError, match="unknown allreduce compression 'bf16'"):
        data_parallel.fuse(passes.select_outputs(g, ["train"]), "bf16")


def test_the_step_predictor_adds_the_exposed_allreduces():
    """data_parallel.predict_step: on one rank the step is its compute; on more, each bucket's
    ring allreduce (2 (R - 1) messages of a 1/R share) and its sums, exposed from the bucket's
    wait (default progress) or from its start (overlap: hidden behind backward up to the wait);
    more ranks, longer transfers."""
    g, _ = training_graph()
    fused = data_parallel.fuse(passes.select_outputs(g, ["train"]), "float32", 4096)
    order = data_parallel.overlap(schedule.schedule(fused), fused)
    cost = lambda graph, n: 1e-3 if schedule.is_step(n) else 0.0  # noqa: E731 - 1 ms a step
    one = data_parallel.predict_step(fused, order, 1, 1e-6, 1e9, cost)
    assert one.exposed == 0 and one.efficiency == 1.0 and one.seconds == pytest.approx(one.compute)
    two = data_parallel.predict_step(fused, order, 2, 1e-6, 1e9, cost)
    late = [n for n in order if n.op != "allreduce_wait"] + [n for n in order if n.op == "allreduce_wait"]
    hidden = data_parallel.predict_step(fused, late, 2, 1e-6, 1e9, cost, overlap=True)  # waits after backward
    many = data_parallel.predict_step(fused, order, 128, 1e-6, 1e9, cost)
    buckets = [n for n in order if n.op == "allreduce_start"]
    ring = sum(data_parallel.ring_seconds(n.outputs[0].nbytes, 2, 1e-6, 1e9) for n in buckets)
    assert two.allreduce >= ring and two.exposed == pytest.approx(two.allreduce)  # nothing hides it
    assert hidden.exposed < two.exposed and hidden.seconds < two.seconds
    assert many.allreduce > two.allreduce and many.efficiency < two.efficiency < 1.0
    assert "2 ranks: step " in two.describe() and "efficiency" in two.describe()


def test_inspect_train_ranks_predicts_the_data_parallel_step(tmp_path):
    """flowc inspect --train --ranks R: the buckets, the transfer model and the predicted step
    on 1 and R ranks."""
    from codegen import cli

    g, _ = training_graph()
    gd.save(g, tmp_path / "dp.flowc")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(["inspect", str(tmp_path / "dp.flowc"), "--train", "--ranks", "8"]) == 0
    text = buf.getvalue()
    assert "data parallel (mpiexec -n 8): " in text and "allreduce bucket(s)" in text, text
    assert "  1 ranks: step " in text and "  8 ranks: step " in text, text

    def step_ms(*extra) -> float:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli.main(["inspect", str(tmp_path / "dp.flowc"), "--train", "--ranks", "2", *extra]) == 0
        line = [ln for ln in out.getvalue().splitlines() if ln.startswith("  1 ranks: step ")][0]
        return float(line.split("step ")[1].split(" ms")[0])

    # the cost model's rates are options: half the compute and memory rates, twice the step
    assert step_ms("--gflops", "75", "--mem-gbps", "5") == pytest.approx(2 * step_ms(), rel=0.02)
