"""Pipeline-parallel training binaries (``flowc compile --train --ranks N``,
codegen/pipeline_parallel.py, mpi/fc_pipeline.c): N ranks, each a stage, train K microbatches a
step as one process trains their global batch (the same checkpoints, to float32 rounding), with
1F1B and GPipe alike (bitwise: the gradients are summed in the same order), and their
checkpoints are one process's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd
from codegen import cli, pipeline_parallel, training
from codegen.exports import export_trainer
from graphdef import checkpoint
from graphdef.errors import FlowcError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "samples"))
import digits  # noqa: E402

pytestmark = pytest.mark.mpi

SEQ, DIM = 4, 16


def transformer(batch: int) -> gd.Graph:
    """Two pre-norm blocks (attention with one head, a GELU MLP), mean-pooled into 5 classes;
    AdamW with weight decay (its update reads the weights and global_step)."""
    rng = np.random.default_rng(3)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    with gd.Graph("tiny_transformer") as g:
        x = gd.placeholder("x", (batch, SEQ, DIM))
        y = gd.placeholder("y", (batch,), "int64")
        h = x
        for i in range(2):
            ln = gd.layer_norm(
                h,
                gd.variable(f"g{i}", np.ones(DIM, np.float32)),
                gd.variable(f"b{i}", np.zeros(DIM, np.float32)),
            )
            q, k, v = (gd.matmul(ln, gd.variable(f"{n}{i}", w(DIM, DIM))) for n in "qkv")
            att = gd.softmax(gd.matmul(q, gd.transpose(k, (0, 2, 1))) * (1.0 / DIM**0.5))
            h = h + gd.matmul(gd.matmul(att, v), gd.variable(f"o{i}", w(DIM, DIM)))
            m = gd.gelu(
                gd.matmul(h, gd.variable(f"m{i}", w(DIM, 2 * DIM)))
                + gd.variable(f"mb{i}", np.zeros(2 * DIM, np.float32))
            )
            h = h + gd.matmul(m, gd.variable(f"n{i}", w(2 * DIM, DIM)))
        logits = gd.matmul(gd.reduce_mean(h, axes=1), gd.variable("head", w(DIM, 5)))
        loss = gd.train.softmax_cross_entropy(logits, y, name="loss")
        gd.train.AdamW(3e-3, weight_decay=0.01).minimize(loss, name="train")
    return g


MODELS = {  # name: (graph builder, samples of a microbatch, stages, microbatches)
    "digits-2": (digits.training_graph, 8, 2, 4),
    "digits-3": (digits.training_graph, 8, 3, 4),
    "transformer-2": (transformer, 4, 2, 4),
}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("data")
    x, y, _, _ = digits.load_data()
    np.savez(root / "digits.npz", x=x[:256], labels=y[:256])
    rng = np.random.default_rng(0)
    np.savez(
        root / "tiny.npz",
        x=rng.standard_normal((128, SEQ, DIM)).astype(np.float32),
        y=rng.integers(0, 5, 128),
    )
    return {"digits": root / "digits.npz", "transformer": root / "tiny.npz"}


@pytest.fixture(scope="module")
def builds(toolchain, tmp_path_factory) -> dict:
    """(model name) -> (the pipeline binary, the one-process binary with the global batch)."""
    root = tmp_path_factory.mktemp("pp")
    out = {}
    for key, (build, micro, stages, k) in MODELS.items():
        pipe = export_trainer(
            build(micro), root / f"{key}-pipe", name="net", ranks=stages, cc=toolchain.mpicc
        )
        one = export_trainer(build(micro * k), root / f"{key}-one", name="net", mpi=False)
        out[key] = (pipe / "net", one / "net")
    return out


def losses(stdout: str) -> list[float]:
    return [float(v) for v in re.findall(r"mean loss ([\d.]+)", stdout)]


@pytest.mark.parametrize("key", sorted(MODELS))
def test_pipeline_stages_train_as_one_process(toolchain, builds, datasets, key, tmp_path):
    _, micro, stages, k = MODELS[key]
    pipe, one = builds[key]
    data = datasets[key.split("-")[0]]
    common = ["train", "--data", data, "--epochs", 2, "--seed", 5]
    ref = subprocess.run(
        [one, *map(str, common), "--checkpoint", tmp_path / "one.npz"], capture_output=True, text=True
    )
    assert ref.returncode == 0, ref.stderr
    got = {}
    for schedule in ("1f1b", "gpipe"):
        res, _ = toolchain.run(stages, pipe, *common, "--microbatches", k, "--schedule", schedule,
                               "--checkpoint", tmp_path / f"{schedule}.npz")  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert f"pipeline of {stages} stages, {k} microbatches of {micro}" in res.stdout, res.stdout
        assert f"on {stages} rank(s)" in res.stdout and f"of {micro * k} samples" in res.stdout
        np.testing.assert_allclose(losses(res.stdout), losses(ref.stdout), rtol=2e-5)
        got[schedule], header = checkpoint.load(tmp_path / f"{schedule}.npz")
    a, ha = checkpoint.load(tmp_path / "one.npz")
    assert header["step"] == ha["step"] and header["hash"] == ha["hash"]  # one process's checkpoint
    assert sorted(got["1f1b"]) == sorted(a)
    for name in a:
        np.testing.assert_allclose(got["1f1b"][name], a[name], rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_array_equal(got["gpipe"][name], got["1f1b"][name], err_msg=name)


def test_a_pipeline_resumes_a_one_process_checkpoint_and_back(toolchain, builds, datasets, tmp_path):
    pipe, one = builds["transformer-2"]
    data = ["--data", datasets["transformer"], "--seed", 1]
    half, whole = tmp_path / "half.npz", tmp_path / "whole.npz"

    def run_one(*args):
        res = subprocess.run([one, "train", *map(str, [*data, *args])], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr

    run_one("--epochs", 3, "--checkpoint", whole)
    run_one("--epochs", 1, "--checkpoint", half)
    res, _ = toolchain.run(2, pipe, "train", *data, "--epochs", 2, "--microbatches", 4, "--checkpoint", half,
                           "--resume", half)  # fmt: skip
    assert res.returncode == 0 and "epoch 2/2" in res.stdout, res.stderr
    run_one("--epochs", 3, "--checkpoint", half, "--resume", half)
    a, ha = checkpoint.load(whole)
    b, hb = checkpoint.load(half)
    assert ha["step"] == hb["step"]
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_pipeline_binaries_refuse_what_they_cannot_run(toolchain, builds, datasets):
    pipe, one = builds["digits-2"]
    data = ["train", "--data", datasets["digits"]]
    res, _ = toolchain.run(3, pipe, *data)
    assert res.returncode != 0 and "compiled for 2 ranks, run with 3 (mpiexec -n 2)" in res.stderr
    res, _ = toolchain.run(2, pipe, *data, "--accumulate", 2)
    assert res.returncode == 2 and "--microbatches K" in res.stderr
    res, _ = toolchain.run(2, pipe, *data, "--batch", 20)
    assert res.returncode == 2 and "give --microbatches 2 for 16 samples a step" in res.stderr
    res, _ = toolchain.run(2, pipe, *data, "--schedule", "zigzag")
    assert res.returncode == 2 and "--schedule expects 1f1b or gpipe" in res.stderr
    res = subprocess.run([one, *map(str, data), "--microbatches", "4"], capture_output=True, text=True)
    assert res.returncode == 2 and "not pipeline parallel" in res.stderr


def test_the_cut_keeps_gradients_flowing_back_and_weights_home():
    """Forward values only go to later stages, backward values to earlier ones; each variable is
    read by its own stage only; the stages' costs are balanced; inspect prints the cut."""
    step, _ = training.split(transformer(4), "train")
    plan = pipeline_parallel.split(step, "train", 3)
    assert plan.stages == 3
    for v in plan.values:
        for stage, kinds in v.readers.items():
            if v.kind == "forward":
                assert stage >= v.stage or "backward" in kinds, v
            else:
                assert stage <= v.stage and kinds == {"backward"}, v
    for f in plan.functions:
        for p in f.inputs:
            if p.kind == "var":
                assert plan.owner[p.key] in (f.stage, -1), (f.label, p.key)
    assert plan.owner["global_step"] == -1  # every stage steps its own copy
    totals = [sum(c) for c in plan.costs]
    assert max(totals) < 1.6 * min(totals), plan.describe()


def test_pipeline_training_refuses_tied_weights_and_other_options(tmp_path, capsys):
    with gd.Graph("tied") as g:
        x = gd.placeholder("x", (4, 8))
        y = gd.placeholder("y", (4,), "int64")
        w = gd.variable("w", np.eye(8, dtype=np.float32))
        h = x
        for i in range(6):
            h = gd.relu(gd.matmul(h, w if i in (0, 5) else gd.variable(f"w{i}", np.eye(8, dtype=np.float32))))
        gd.train.SGD(0.1).minimize(gd.train.softmax_cross_entropy(h, y, name="loss"), name="train")
    step, _ = training.split(g, "train")
    with pytest.raises(FlowcError, match=r"variable 'w' is read on stages \[0, 1\] \(tied weights\)"):
        pipeline_parallel.split(step, "train", 2)
    gd.save(g, tmp_path / "tied.flowc")
    for extra, why in (
        (["--compress", "fp16"], "no --compress"),
        (["--placement", "greedy"], "no --placement"),
    ):
        assert cli.main(["compile", str(tmp_path / "tied.flowc"), "-o", str(tmp_path / "o"), "--train",
                         "--ranks", "2", *extra]) == 1  # fmt: skip
        assert why in capsys.readouterr().err


def test_pipeline_training_is_clean_under_the_sanitizers(
    toolchain, datasets, tmp_path, monkeypatch, sanitizer_env
):
    """Every slot, receive and send of both schedules inside its buffer, no undefined behaviour,
    nothing leaked (3 microbatches: 1F1B's slots are reused on stage 0)."""
    flags = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g")
    for key in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):  # leaks reported, but the MPI library's own
        monkeypatch.setenv(key, sanitizer_env[key])
    exe = export_trainer(
        transformer(4), tmp_path / "asan", name="net", ranks=2, cc=toolchain.mpicc, flags=flags
    )
    assert "__asan_report" in subprocess.run(["nm", exe / "net"], capture_output=True, text=True).stdout
    for schedule in ("1f1b", "gpipe"):
        args = [
            "--epochs",
            1,
            "--microbatches",
            3,
            "--schedule",
            schedule,
            "--checkpoint",
            tmp_path / "ck.npz",
        ]
        res, _ = toolchain.run(2, exe / "net", "train", "--data", datasets["transformer"], *args)
        assert res.returncode == 0 and "ERROR" not in res.stderr and "runtime error" not in res.stderr, (
            res.stderr
        )


RSS = """import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], close_fds=False).returncode  # the launcher's PMI socket
print("max RSS KB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)
sys.exit(code)
"""


def wide_adam(rng, w: int) -> gd.Graph:
    """Four w-wide ReLU layers trained by Adam (two slots the size of each weight), batch 8."""
    with gd.Graph("big") as g:
        h = gd.placeholder("x", (8, w))
        y = gd.placeholder("y", (8,), "int64")
        for i in range(4):
            weights = (rng.standard_normal((w, w)) / np.sqrt(w)).astype(np.float32)
            h = gd.relu(gd.matmul(h, gd.variable(f"w{i}", weights)))
        gd.train.Adam(1e-3).minimize(gd.train.softmax_cross_entropy(h, y, name="loss"), name="train")
    return g


def test_a_stage_keeps_only_its_own_variables_resident(toolchain, tmp_path):
    """Each rank initializes, receives and updates its stage's variables only (rank 0 also holds
    the others', for checkpoints): rank 1's peak memory is below rank 0's by about a stage's
    state (weights and Adam's two slots)."""
    rng = np.random.default_rng(0)
    w = 1536
    g = wide_adam(rng, w)
    exe = export_trainer(g, tmp_path / "b", name="net", ranks=2, cc=toolchain.mpicc) / "net"
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((32, w)).astype(np.float32), y=rng.integers(0, 10, 32))
    (tmp_path / "rss.py").write_text(RSS)
    python = toolchain.python or sys.executable
    args = ["train", "--data", tmp_path / "d.npz", "--microbatches", 4, "--checkpoint", tmp_path / "ck.npz"]
    res, _ = toolchain.run(2, python, tmp_path / "rss.py", exe, *args)
    assert res.returncode == 0, res.stderr
    peaks = sorted(int(v) * 1024 for v in re.findall(r"max RSS KB (\d+)", res.stdout))
    stage = 2 * 3 * w * w * 4  # two layers: weights, and Adam's m and v
    assert len(peaks) == 2 and peaks[1] - peaks[0] > 0.8 * stage, (peaks, stage)


@pytest.mark.parametrize("shards", [2, 3])
def test_a_sharded_optimizer_trains_as_one_process(toolchain, datasets, tmp_path, shards):
    """--shard R (ZeRO stage 1): data parallel over R ranks, each rank the update of its shard of
    the variables (AdamW's slots only there), the gradients summed on their owners and the updated
    variables broadcast: the training equals one process's on the global batch, and the checkpoint
    is one process's (it resumes there)."""
    micro = 4
    exe = (
        export_trainer(transformer(micro), tmp_path / "z", name="net", shard=shards, cc=toolchain.mpicc)
        / "net"
    )
    one = export_trainer(transformer(micro * shards), tmp_path / "one", name="net", mpi=False) / "net"
    meta = json.loads((exe.parent / "metadata.json").read_text())
    assert meta["trainer"]["pipeline"]["shards"] == shards
    common = ["train", "--data", datasets["transformer"], "--seed", 2]
    ref = subprocess.run([one, *map(str, [*common, "--epochs", 2, "--checkpoint", tmp_path / "one.npz"])],
                         capture_output=True, text=True)  # fmt: skip
    assert ref.returncode == 0, ref.stderr
    res, _ = toolchain.run(shards, exe, *common, "--epochs", 2, "--checkpoint", tmp_path / "z.npz")
    assert res.returncode == 0, res.stderr
    assert f"optimizer state sharded over {shards} ranks" in res.stdout, res.stdout
    np.testing.assert_allclose(losses(res.stdout), losses(ref.stdout), rtol=2e-5)
    a, ha = checkpoint.load(tmp_path / "one.npz")
    b, hb = checkpoint.load(tmp_path / "z.npz")
    assert ha["hash"] == hb["hash"] and ha["step"] == hb["step"]
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5, err_msg=name)
    res = subprocess.run([one, *map(str, [*common, "--epochs", 3, "--checkpoint", tmp_path / "z.npz"]),
                          "--resume", tmp_path / "z.npz"], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0 and "epoch 3/3" in res.stdout, res.stderr


def test_a_sharded_optimizer_keeps_other_shards_slots_off_a_rank(toolchain, tmp_path):
    """Adam's two slots of the variables another rank updates are never resident on a rank: rank
    1's peak under --shard 2 is below a plain data-parallel rank's by at least most of them."""
    rng = np.random.default_rng(0)
    w = 1536
    g = wide_adam(rng, w)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((32, w)).astype(np.float32), y=rng.integers(0, 10, 32))
    (tmp_path / "rss.py").write_text(RSS)
    python = toolchain.python or sys.executable
    peaks = {}
    for key, kw in (("shard", {"shard": 2}), ("plain", {"mpi": True})):
        exe = export_trainer(g, tmp_path / key, name="net", cc=toolchain.mpicc, **kw) / "net"
        args = ["train", "--data", tmp_path / "d.npz", "--checkpoint", tmp_path / f"{key}.npz"]
        res, _ = toolchain.run(2, python, tmp_path / "rss.py", exe, *args)
        assert res.returncode == 0, res.stderr
        peaks[key] = sorted(int(v) * 1024 for v in re.findall(r"max RSS KB (\d+)", res.stdout))
    others = 2 * 2 * w * w * 4  # the other rank's two layers' m and v
    assert peaks["plain"][0] - peaks["shard"][0] > 0.8 * others, (peaks, others)
    a, _ = checkpoint.load(tmp_path / "shard.npz")
    b, _ = checkpoint.load(tmp_path / "plain.npz")
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_the_pipeline_step_is_predicted(capsys, tmp_path):
    """pipeline_parallel.predict simulates a step from the stages' costs and the transfers: with
    one microbatch the forwards and backwards run one stage at a time (only the updates overlap),
    with many the speed-up approaches the stage count, GPipe and 1F1B keep the stages equally busy; flowc
    inspect --train --stages prints both."""
    step, _ = training.split(transformer(4), "train")
    plan = pipeline_parallel.split(step, "train", 2)
    one = pipeline_parallel.predict(plan, 1)
    many = {s: pipeline_parallel.predict(plan, 32, s) for s in pipeline_parallel.SCHEDULES}
    serial = sum(f + b for f, b, _ in plan.costs) + max(u for _, _, u in plan.costs)  # the updates overlap
    assert serial <= one.seconds <= serial + 1e-4
    assert 1.5 < many["1f1b"].speedup < 2.0 and np.allclose(many["1f1b"].busy, many["gpipe"].busy)
    assert abs(many["1f1b"].seconds - many["gpipe"].seconds) < 0.05 * many["gpipe"].seconds
    gd.save(transformer(4), tmp_path / "t.flowc")
    assert (
        cli.main(["inspect", str(tmp_path / "t.flowc"), "--train", "--stages", "2", "--microbatches", "8"])
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(
        r"predicted: 1f1b, 8 microbatches: step [\d.]+ ms .* one process [\d.]+ ms: [\d.]+x", out
    ), out
