"""codegen.partition without MPI: placements, the Send/Recv structure of each rank's graph,
the multi-rank numpy reference (``simulate``) against the interpreter, compression error,
the cost-model prediction, and the refusals (rank out of range, ranks below 1, --max-ram).

The compiled counterparts (the same partitions as C under mpiexec) are in test_ranks.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd
from codegen import partition, passes, pipeline, schedule
from graphdef.errors import FlowcError
from graphdef.interpret import run as interpret

ROOT = Path(__file__).resolve().parents[2]

PLACEMENTS = ("pipeline", "greedy")


def mlp(width: int = 32, layers: int = 6, batch: int = 4) -> gd.Graph:
    rng = np.random.default_rng(0)
    with gd.Graph("mlp") as g:
        h = gd.placeholder("x", (batch, width))
        for i in range(layers):
            w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
            h = gd.tanh(gd.matmul(h, w), name=f"h{i}")
        gd.identity(h, name="y")
    return passes.select_outputs(g)  # the sinks, as compile declares them


def diamond() -> gd.Graph:
    """One value read by three consumers on other ranks, two outputs, annotated."""
    rng = np.random.default_rng(1)
    with gd.Graph("diamond") as g:
        x = gd.placeholder("x", (8, 16))
        with gd.device("rank:0"):
            h = gd.relu(gd.matmul(x, rng.standard_normal((16, 16)).astype(np.float32)), name="h")
        with gd.device("rank:1"):
            a = gd.sigmoid(h, name="a")
            b = gd.mul(h, 2.0, name="b")
            c = gd.add(h, a, name="c")
        with gd.device("rank:2"):
            d = gd.sub(h, 1.0, name="d")
        gd.identity(gd.add(b, c), name="y")
        gd.identity(d, name="z")
    return passes.select_outputs(g)


def sample(name: str):
    spec = importlib.util.spec_from_file_location(f"sample_{name}", ROOT / "samples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def graphs() -> dict[str, gd.Graph]:
    digits, lenet = sample("digits"), sample("lenet")
    return {
        "mlp": mlp(),
        "digits": passes.select_outputs(digits.build(batch=4, weights=digits._params(1))),
        "lenet": passes.select_outputs(lenet.build(batch=2)),
        "diamond": diamond(),
    }


def feeds_for(g: gd.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(g.node(n).outputs[0].shape).astype(np.float32) for n in g.inputs}


def expected(g: gd.Graph, feeds) -> dict[str, np.ndarray]:
    names = [str(r) for r in g.declared_outputs]
    assert names
    return dict(zip(names, interpret(g, feeds, names)))


def recv_counts(part: partition.Partition):
    """(rank, tensor) -> how many receives that rank posts for that tensor."""
    counts: dict[tuple[int, str], int] = {}
    for r, g in enumerate(part.graphs):
        for n in g.nodes:
            if n.op == "recv":
                key = (r, n.attrs["tensor"])
                counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("algorithm", PLACEMENTS)
@pytest.mark.parametrize("name", ["mlp", "digits", "lenet"])
def test_split_matches_interpreter(name, algorithm, ranks):
    g = graphs()[name]
    part = partition.split(g, ranks, algorithm)
    feeds = feeds_for(g)
    got, want = partition.simulate(part, feeds), expected(g, feeds)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name} {algorithm} {ranks} ranks: {k}")


def test_annotated_follows_devices():
    g = diamond()
    part = partition.split(g, 3, "annotated")
    assert part.place["h"] == 0 and part.place["a"] == 1 and part.place["d"] == 2
    assert part.place["y"] == 1  # unannotated: where most of its input bytes are
    feeds = feeds_for(g)
    got, want = partition.simulate(part, feeds), expected(g, feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert pipeline.placement(g, pipeline.Options(ranks=3)) == "annotated"
    assert pipeline.placement(mlp(), pipeline.Options(ranks=3)) == "pipeline"


@pytest.mark.parametrize("name", ["mlp", "digits", "lenet", "diamond"])
@pytest.mark.parametrize("algorithm", ["annotated", *PLACEMENTS])
def test_one_recv_per_tensor_per_rank(name, algorithm):
    """A tensor crosses to a rank once however many consumers read it there (one Send on the
    producer per destination, one Recv there), and every pair has its own tag."""
    g = graphs()[name]
    ranks = 3
    part = partition.split(g, ranks, algorithm)
    counts = recv_counts(part)
    assert all(v == 1 for v in counts.values()), counts
    sends = [(r, n.attrs["tensor"], n.attrs["peer"]) for r, rg in enumerate(part.graphs)
             for n in rg.nodes if n.op == "send"]  # fmt: skip
    assert len(sends) == len(set(sends)) == len(part.edges) == len(counts)
    tags = [e.tag for e in part.edges]
    assert len(tags) == len(set(tags))
    for e in part.edges:
        assert e.src != e.dst and part.place[e.value.node] == e.src


def test_diamond_sends_once_to_each_rank():
    part = partition.split(diamond(), 3, "annotated")
    h_edges = sorted((e.src, e.dst) for e in part.edges if str(e.value) == "h")
    assert h_edges == [(0, 1), (0, 2)]  # rank 1 has three consumers of h: still one transfer
    rank1 = part.graphs[1]
    waits = [n for n in rank1.nodes if n.op == "recv_wait" and n.attrs["tensor"] == "h"]
    assert len(waits) == 1
    readers = [n for n in rank1.nodes if any(r == waits[0].ref() for r in n.inputs)]
    assert {n.name for n in readers} == {"a", "b", "c"}


def test_send_after_producer_and_wait_before_first_use():
    part = partition.split(mlp(layers=8), 2, "pipeline")
    for g in part.graphs:
        names = [n.name for n in g.nodes]
        for i, n in enumerate(g.nodes):
            if n.op == "send":
                assert names[i - 1] == n.inputs[0].node  # posted as soon as the value exists
            if n.op == "recv_wait":
                assert g.nodes[i + 1].inputs[0] == n.ref() or n.ref() in g.nodes[i + 1].inputs
                recv_at = names.index(n.inputs[0].node)
                assert recv_at < i


def test_receive_posted_late_by_cost_model():
    """Rank 1 works on its own chain before it needs rank 0's value: with a fast link the
    receive is posted one step before its wait (a transfer takes some time); with a slow one,
    as early as the rank's first step."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    with gd.Graph("late") as g:
        x, u = gd.placeholder("x", (64, 64)), gd.placeholder("u", (64, 64))
        with gd.device("rank:0"):
            h = gd.matmul(x, w, name="h")
        with gd.device("rank:1"):
            v = u
            for i in range(4):
                v = gd.tanh(gd.matmul(v, w), name=f"v{i}")
            gd.identity(v + h, name="y")

    def steps_between(alpha, beta):
        nodes = partition.split(g, 2, "annotated", alpha=alpha, beta=beta).graphs[1].nodes
        wait = next(i for i, n in enumerate(nodes) if n.op == "recv_wait")
        recv = [n.name for n in nodes].index(nodes[wait].inputs[0].node)
        return sum(1 for n in nodes[recv + 1 : wait] if schedule.is_step(n))

    assert steps_between(1e-9, 1e15) == 1
    assert steps_between(1.0, 1.0) == 8  # four matmuls and four tanh


@pytest.mark.parametrize("compress, tol", [("fp16", 2e-3), ("bf16", 1.6e-2)])
def test_compression_error_and_bytes(compress, tol):
    g = mlp(layers=6)
    part = partition.split(g, 3, "pipeline", compress=compress)
    plain = partition.split(g, 3, "pipeline")
    assert part.bytes_sent() * 2 == plain.bytes_sent() and part.bytes_saved() == plain.bytes_sent() // 2
    assert all(e.wire.dtype == ("float16" if compress == "fp16" else "uint16") for e in part.edges)
    feeds = feeds_for(g)
    got, want = partition.simulate(part, feeds)["y"], expected(g, feeds)["y"]
    err = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < err < tol, err  # lossy (not zero), within float16 / bfloat16 rounding of a few layers


def test_bf16_truncates_fp16_rounds():
    """bf16 keeps the high 16 bits (truncation, as TensorFlow did); fp16 rounds to nearest."""
    x = np.array([1.0 + 2**-9, -3.14159265, 1e-3, 65504.0], np.float32)
    for compress in ("fp16", "bf16"):
        g2 = gd.Graph("two")
        with g2:
            p = gd.placeholder("x", (4,))
            with gd.device("rank:0"):
                h = gd.add(p, 0.0, name="h")
            with gd.device("rank:1"):
                gd.identity(h, name="y")
        part = partition.split(passes.select_outputs(g2), 2, "annotated", compress=compress)
        y = partition.simulate(part, {"x": x})["y"]
        if compress == "fp16":
            np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))
        else:
            np.testing.assert_array_equal(y, (x.view(np.uint32) & 0xFFFF0000).view(np.float32))


def test_pipeline_balances_cost():
    g = mlp(width=256, layers=8, batch=64)  # steps of ~100 us: transfers are small beside them
    part = partition.split(g, 2, "pipeline")
    flops = [sum(schedule.cost(rg, n).flops for n in rg.nodes) for rg in part.graphs]
    assert flops[0] == flops[1]  # eight equal layers: four each
    pr1 = partition.predict(part, microbatches=1)
    pr8 = partition.predict(part, microbatches=8)
    one = sum(partition.step_seconds(g, n) for n in g.nodes)
    assert pr1.seconds >= one * 0.99  # one microbatch: the stages wait for each other
    assert one * 8 / pr8.seconds > 1.6  # eight: the stages overlap


def test_greedy_spreads_parallel_branches():
    """Two independent heavy branches: the greedy placement (earliest finish, with transfers)
    puts them on different ranks; a chain stays on one rank (transfers would only add time)."""
    rng = np.random.default_rng(0)
    with gd.Graph("branches") as g:
        x = gd.placeholder("x", (256, 256))
        w = rng.standard_normal((256, 256)).astype(np.float32)
        a = gd.matmul(gd.matmul(x, w), w, name="a")
        b = gd.matmul(gd.matmul(x, w * 2), w, name="b")
        gd.identity(a + b, name="y")
    part = partition.split(g, 2, "greedy")
    assert part.place["a"] != part.place["b"]
    chain = partition.split(mlp(layers=8), 2, "greedy")
    assert len(set(chain.place.values())) == 1


def test_max_ram_bounds_each_stage():
    g = mlp(width=64, layers=8, batch=64)
    free = partition.split(g, 4, "pipeline")
    part = partition.split(g, 4, "pipeline", max_ram=70_000)
    assert len({r for r in part.place.values()}) == 4
    feeds = feeds_for(g)
    np.testing.assert_array_equal(partition.simulate(part, feeds)["y"], partition.simulate(free, feeds)["y"])


# ----------------------------------------------------------------------------- refusals
def test_rank_annotation_out_of_range():
    with pytest.raises(FlowcError, match=r"node 'd' \(op sub\) is placed on rank 2.*compiled for 2 ranks"):
        partition.split(diamond(), 2, "annotated")


@pytest.mark.parametrize("ranks", [0, -1, 1.5, True])
def test_ranks_below_one(ranks):
    with pytest.raises(FlowcError, match="ranks must be an integer of at least 1"):
        partition.split(mlp(), ranks, "pipeline")


def test_max_ram_too_small_names_node_rank_bytes(tmp_path):
    import codegen

    g = mlp(width=64, layers=4, batch=64)
    with pytest.raises(
        FlowcError,
        match=r"node 'matmul' \(op matmul\) needs \d+ bytes live on rank 0, more than --max-ram 1000",
    ):
        partition.split(g, 2, "pipeline", max_ram=1000)
    rng = np.random.default_rng(0)
    with gd.Graph("unet") as unet:  # skip connections: the early values live until the late layers
        h, skips = gd.placeholder("x", (64, 64)), []
        for i in range(8):
            h = gd.tanh(gd.matmul(h, rng.standard_normal((64, 64)).astype(np.float32)), name=f"down{i}")
            skips.append(h)
        for i in range(8):
            h = gd.tanh(
                gd.matmul(h, rng.standard_normal((64, 64)).astype(np.float32)) + skips.pop(), name=f"up{i}"
            )
        gd.identity(h, name="y")
    unet = passes.select_outputs(unet)
    assert len(set(partition.split(unet, 3, "pipeline", max_ram=100_000).place.values())) == 3
    with pytest.raises(FlowcError, match=r"cannot fit --max-ram 100000 bytes on 2 ranks: rank 1 would still "
                       r"need node 'down5' \(op tanh\) and the rest of the graph, 163840 bytes"):  # fmt: skip
        partition.split(unet, 2, "pipeline", max_ram=100_000)
    out = tmp_path / "out"
    with pytest.raises(FlowcError, match="rank 0 needs an arena of"):
        codegen.export(g, out, ranks=2, placement="annotated", max_ram=1000, build_binary=False)
    assert not out.exists()  # nothing written


def test_state_on_two_ranks_refused():
    with gd.Graph("state") as g:
        x = gd.placeholder("x", (4,))
        v = gd.variable("v", np.zeros(4, np.float32))
        with gd.device("rank:0"):
            a = gd.add(x, v, name="a")
        with gd.device("rank:1"):
            gd.identity(gd.mul(a, v), name="y")
    with pytest.raises(FlowcError, match="variable 'v' is read or assigned on ranks 0, 1"):
        partition.split(g, 2, "annotated")


def test_unknown_placement_and_compression():
    with pytest.raises(FlowcError, match="unknown placement 'round_robin'"):
        partition.split(mlp(), 2, "round_robin")
    with pytest.raises(FlowcError, match="unknown compression 'int8'"):
        partition.split(mlp(), 2, "pipeline", compress="int8")


# ----------------------------------------------------------------------------- the CLI
def test_inspect_ranks(tmp_path, capsys):
    from codegen import cli

    path = tmp_path / "m.flowc"
    gd.save(mlp(layers=8), path)
    assert cli.main(["inspect", str(path), "--ranks", "2", "--microbatches", "4", "--compress", "fp16"]) == 0
    out = capsys.readouterr().out
    assert "partition (pipeline) over 2 ranks" in out
    assert "cut edges: 1, 256 bytes sent a run, 256 saved by fp16" in out
    assert "rank 0: arena" in out and "rank 1: arena" in out
    assert "predicted step time for 4 microbatches" in out
    for bad, msg in ((["--ranks", "0"], "--ranks must be at least 1"),
                     (["--placement", "greedy"], "give --ranks N"),
                     (["--ranks", "2", "--placement", "nope"], "unknown --placement 'nope'")):  # fmt: skip
        assert cli.main(["inspect", str(path), *bad]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err, err


@pytest.mark.parametrize("algorithm", ["annotated", "greedy"])
def test_idle_ranks_are_named(algorithm):
    """A placement that leaves ranks without a step says so in one line, with the rank count
    that does the same work: annotated placement of a graph that names no rank (any imported
    model), greedy placement of a chain too small to gain from another rank."""
    rng = np.random.default_rng(0)
    with gd.Graph("chain") as g:
        h = gd.placeholder("x", (8, 64))
        for _ in range(3):
            h = gd.relu(gd.matmul(h, gd.constant(rng.standard_normal((64, 64)).astype(np.float32))))
        g.set_outputs(h)
    part = partition.split(g, 3, algorithm)
    assert part.idle == [1, 2]
    note = part.idle_note()
    assert note.startswith("note: ranks 1, 2 of 3 hold no step (")
    assert note.endswith("--ranks 1 does the same work")
    assert ("gd.device('rank:N')" in note) == (algorithm == "annotated"), note
    assert partition.split(g, 3, "pipeline").idle_note() == ""


def wide(width: int = 512, batch: int = 32, small: int = 8) -> gd.Graph:
    """Two wide layers (bias, ReLU: split by the tensor placement) and a narrow head (not worth
    its transfers)."""
    rng = np.random.default_rng(4)
    with gd.Graph("wide") as g:
        h = gd.placeholder("x", (batch, width))
        for i in range(2):
            w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
            h = gd.relu(gd.matmul(h, w) + rng.standard_normal(width).astype(np.float32), name=f"h{i}")
        head = (rng.standard_normal((width, small)) / np.sqrt(width)).astype(np.float32)
        gd.identity(gd.matmul(h, head), name="y")
    return passes.select_outputs(g)


@pytest.mark.parametrize("ranks", [2, 3])
def test_tensor_placement_splits_wide_products_by_columns(ranks):
    """--placement tensor: the wide products (with their bias and ReLU) split by columns, each
    rank holding its share of their weights; the narrow head stays on rank 0 (its split would
    cost more in transfers than it saves); the ranks' run equals the interpreter's."""
    g = wide()
    c = pipeline.run(g, pipeline.Options(ranks=ranks, placement="tensor"), until="plan")
    part = c.partition
    assert part.algorithm == "tensor" and not part.idle
    width = 512
    shares = [len(a) for a in np.array_split(np.arange(width), ranks)]
    one = pipeline.run(g, pipeline.Options(), until="plan").program.weight_bytes
    assert sum(p.weight_bytes for p in c.program) <= 1.05 * one  # no weight is on two ranks
    for r, p in enumerate(c.program[1:], 1):
        assert 0.9 * one * shares[r] / width <= p.weight_bytes <= 1.05 * one * shares[r] / width, r
    heads = [
        n for r, rg in enumerate(part.graphs) for n in rg.nodes if n.op != "constant" and "matmul_2" in n.name
    ]
    assert heads and all(n in part.graphs[0].nodes for n in heads)
    feeds = feeds_for(g)
    got, want = partition.simulate(part, feeds), expected(g, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)


def test_tensor_placement_leaves_small_products_whole():
    """The cost model keeps every product of a narrow MLP on one rank: the others are idle,
    and the partition says so."""
    part = pipeline.run(mlp(), pipeline.Options(ranks=2, placement="tensor"), until="partition").partition
    assert part.idle == [1] and "rank 1" in part.idle_note()
