"""The training binary (``flowc compile --train``, codegen.exports.export_trainer) on one
process: it trains exactly as the compiled step does on the batches of its seeded shuffle,
resumes where it stopped, writes checkpoints the Python side reads, runs inference from one,
stops cleanly on SIGINT and on a NaN loss, and refuses a dataset that does not fit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen.backends.c.trainer import order
from codegen.exports import export_trainer
from graphdef import checkpoint
from graphdef.errors import FlowcError

pytestmark = pytest.mark.c

BATCH, N = 8, 100
REPO = Path(__file__).resolve().parents[2]


def mlp(batch: int = BATCH, hidden: int = 32, lr: float = 0.01) -> gd.Graph:
    """16-hidden-4 MLP classifier: outputs 'logits' (inference) and 'train' (Adam)."""
    rng = np.random.default_rng(0)
    with gd.Graph("mlp") as g:
        x = gd.placeholder("x", (batch, 16))
        y = gd.placeholder("labels", (batch,), "int64")
        w1 = gd.variable("w1", (rng.standard_normal((16, hidden)) * 0.3).astype(np.float32))
        b1 = gd.variable("b1", np.zeros(hidden, np.float32))
        w2 = gd.variable("w2", (rng.standard_normal((hidden, 4)) * 0.3).astype(np.float32))
        logits = gd.identity(gd.matmul(gd.relu(gd.matmul(x, w1) + b1), w2), name="logits")
        loss = gd.train.softmax_cross_entropy(logits, y, name="loss")
        train = gd.train.Adam(lr).minimize(loss, name="train")
    g.set_outputs(logits, train)
    return g


def dataset(n: int = N, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 16)).astype(np.float32)
    return {"x": x, "labels": x[:, :4].argmax(1).astype(np.int64)}


def reference(data: dict, epochs: int, seed: int, batch: int = BATCH) -> tuple[dict, list[float]]:
    """The variables and losses of the same training through the compiled step in-process."""
    m = codegen.compile(mlp(batch), outputs=["train"], train="train", name="ref_step")
    n = len(data["x"])
    steps, losses = n // batch, []
    for step in range(steps * epochs):
        epoch, at = divmod(step, steps)
        if at == 0:
            perm = np.array(order(n, seed, epoch))
        idx = perm[at * batch : (at + 1) * batch]
        losses.append(float(m(x=data["x"][idx], labels=data["labels"][idx])["train"]))
    return {n: m.variable(n) for n in m._state_vars()}, losses


@pytest.fixture(scope="module")
def trainer(tmp_path_factory) -> Path:
    return export_trainer(mlp(), tmp_path_factory.mktemp("trainer") / "out", name="net", mpi=False) / "net"


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.npz"
    np.savez(path, **dataset())
    return path


def train(exe: Path, *args, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([str(exe), "train", *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert res.returncode == 0, res.stderr
    return res


def test_order_is_a_seeded_permutation():
    assert sorted(order(50, 3, 0)) == list(range(50))
    assert order(50, 3, 0) == order(50, 3, 0)
    assert order(50, 3, 0) != order(50, 3, 1) and order(50, 3, 0) != order(50, 4, 0)


def test_binary_trains_as_the_compiled_step(trainer, data_file, tmp_path):
    ck = tmp_path / "ck.npz"
    res = train(trainer, "--data", data_file, "--epochs", 3, "--seed", 7, "--checkpoint", ck)
    want, losses = reference(dataset(), 3, 7)
    got, header = checkpoint.load(ck)
    assert header["step"] == 3 * (N // BATCH) and header["model"] == "net"
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("epoch ")]
    assert len(lines) == 3, res.stdout
    mean = float(lines[-1].split("mean loss ")[1].split(",")[0])
    assert mean == pytest.approx(np.mean(losses[-(N // BATCH) :]), rel=1e-4)
    assert losses[-1] < losses[0]
    # the same file for gd and for a compiled model of the same graph
    sess = gd.Session(mlp())
    sess.restore(ck)
    np.testing.assert_array_equal(sess.variable("w1"), got["w1"])
    m = codegen.compile(mlp(), outputs=["train"], train="train", name="ref_step")
    m.load_checkpoint(ck)
    np.testing.assert_array_equal(m.variable("w2/v"), got["w2/v"])


def test_resume_continues_as_if_never_stopped(trainer, data_file, tmp_path):
    whole, half = tmp_path / "whole.npz", tmp_path / "half.npz"
    train(trainer, "--data", data_file, "--epochs", 2, "--seed", 1, "--checkpoint", whole)
    train(trainer, "--data", data_file, "--epochs", 1, "--seed", 1, "--checkpoint", half)
    res = train(
        trainer, "--data", data_file, "--epochs", 2, "--seed", 1, "--checkpoint", half, "--resume", half
    )
    assert "trained 12 step(s)" in res.stdout, res.stdout
    a, b = np.load(whole), np.load(half)
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    done = train(trainer, "--data", data_file, "--epochs", 2, "--resume", half)
    assert "nothing to train" in done.stdout


def test_every_n_steps_and_data_from_npy_files(trainer, tmp_path):
    data = dataset()
    np.save(tmp_path / "x.npy", data["x"])
    np.save(tmp_path / "y.npy", data["labels"])
    ck = tmp_path / "ck.npz"
    res = train(trainer, "--data", f"x={tmp_path / 'x.npy'}", "--data", f"labels={tmp_path / 'y.npy'}",
                "--epochs", 1, "--checkpoint", ck, "--every", 5)  # fmt: skip
    assert checkpoint.load(ck)[1]["step"] == N // BATCH, res.stdout
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_inference_from_the_checkpoint(trainer, data_file, tmp_path):
    ck = tmp_path / "ck.npz"
    train(trainer, "--data", data_file, "--epochs", 2, "--checkpoint", ck)
    x = dataset(BATCH, seed=5)["x"]
    np.save(tmp_path / "x.npy", x)
    res = subprocess.run([str(trainer), "--checkpoint", ck, "--in", f"x={tmp_path / 'x.npy'}", "--out-dir",
                          tmp_path / "res"], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr
    w = np.load(ck)
    want = np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"]
    np.testing.assert_allclose(np.load(tmp_path / "res" / "logits.npy"), want, rtol=1e-5, atol=1e-5)
    before = np.load(tmp_path / "res" / "logits.npy")
    subprocess.run(
        [str(trainer), "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", tmp_path / "init"], check=True
    )
    assert not np.allclose(np.load(tmp_path / "init" / "logits.npy"), before)  # the initial weights differ


def test_sigint_writes_a_checkpoint_and_exits(trainer, tmp_path):
    path, ck = tmp_path / "big.npz", tmp_path / "ck.npz"
    np.savez(path, **dataset(4000))
    proc = subprocess.Popen([str(trainer), "train", "--data", str(path), "--epochs", "100000", "--checkpoint",
                             str(ck)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    step = int(out.split("interrupted by SIGINT at step ")[1].split(":")[0])
    values, header = checkpoint.load(ck)
    assert header["step"] == step == int(values["global_step"]) > 0


def test_nan_loss_stops_and_keeps_the_last_checkpoint(trainer, tmp_path):
    data = dataset()
    steps = N // BATCH
    perm = order(N, 0, 0)
    bad_step = 6  # a sample of the 6th batch becomes NaN
    data["x"][perm[(bad_step - 1) * BATCH + 3]] = np.nan
    np.savez(tmp_path / "nan.npz", **data)
    ck = tmp_path / "ck.npz"
    res = train(trainer, "--data", tmp_path / "nan.npz", "--checkpoint", ck, "--every", 2, check=False)
    assert res.returncode == 5 and len(res.stderr.splitlines()) == 1, res.stderr
    assert f"at step {bad_step} (epoch 1)" in res.stderr and f"{ck} (step 4), is kept" in res.stderr
    values, header = checkpoint.load(ck)
    assert header["step"] == 4 and all(np.isfinite(v).all() for v in values.values())
    assert steps > bad_step


def _one_line_error(res, *words):
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), res.stderr


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d.update(x=d["x"].astype(np.float64)), ["'x'", "float64[100, 16]", "float32[N, 16]"]),
        (lambda d: d.update(x=d["x"][:, :15]), ["'x'", "float32[100, 15]"]),
        (lambda d: d.update(labels=d["labels"][:90]), ["'labels'", "90 samples", "100"]),
        (lambda d: d.pop("labels"), ["no array 'labels'"]),
        (
            lambda d: d.update(x=d["x"][:5], labels=d["labels"][:5]),
            ["5 samples", "fewer than one global batch"],
        ),
    ],
)
def test_a_dataset_that_does_not_fit_is_refused(trainer, tmp_path, change, words):
    data = dataset()
    change(data)
    np.savez(tmp_path / "bad.npz", **data)
    ck = tmp_path / "ck.npz"
    ck.write_bytes(b"the old checkpoint")
    res = train(trainer, "--data", tmp_path / "bad.npz", "--checkpoint", ck, check=False)
    _one_line_error(res, *words)
    assert ck.read_bytes() == b"the old checkpoint"


def test_bad_options_and_files_are_refused(trainer, data_file, tmp_path):
    np.savez_compressed(tmp_path / "zipped.npz", **dataset())
    _one_line_error(train(trainer, "--data", tmp_path / "zipped.npz", check=False), "compressed")
    _one_line_error(
        train(trainer, "--data", data_file, "--batch", 16, check=False), "--batch 16", "8 samples"
    )
    _one_line_error(train(trainer, check=False), "missing --data")
    _one_line_error(train(trainer, "--data", tmp_path / "none.npz", check=False), "none.npz")
    _one_line_error(train(trainer, "--data", data_file, "--every", 3, check=False), "--checkpoint")
    other = tmp_path / "other.npz"
    checkpoint.save(other, {"w1": np.zeros((16, 33), np.float32)}, "other")
    _one_line_error(
        train(trainer, "--data", data_file, "--resume", other, check=False), "'w1'", "float32[16, 33]"
    )


def test_a_train_op_with_unbatched_inputs_is_refused(tmp_path):
    with gd.Graph("fit") as g:
        x = gd.placeholder("x", ())
        w = gd.variable("w", np.float32(1.0))
        gd.train.SGD(0.1).minimize((w * x - 2.0) * (w * x - 2.0), name="train")
    with pytest.raises(FlowcError, match="batch on its first axis"):
        export_trainer(g, tmp_path / "out", name="fit", mpi=False, build_binary=False)


def test_cli_compiles_a_training_binary(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_train_binary import mlp\n"
        "import graphdef as gd\n"
        "def build():\n"
        "    g = mlp()\n"
        "    g.set_outputs(gd.Tensor(g, g.resolve('train')))\n"
        "    return g\n"
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "codegen.cli", "compile", f"{model}:build", "-o", out, "--name", "net"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([*cmd, "--train", "--no-mpi"], capture_output=True, text=True, cwd=REPO, env=env)
    assert res.returncode == 0, res.stderr
    assert "training step: arena" in res.stdout and "net train --data" in res.stdout
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["trainer"]["inputs"] == ["x", "labels"] and not meta["trainer"]["mpi"]
    alone = subprocess.run([str(out / "net"), "--in", "x=x.npy"], capture_output=True, text=True)
    assert alone.returncode == 2 and "trains only" in alone.stderr
    np.savez(tmp_path / "d.npz", **dataset())
    assert "trained 12 step(s)" in train(out / "net", "--data", tmp_path / "d.npz").stdout


def test_makefile_build_runs_clean_under_sanitizers(trainer, data_file, tmp_path):
    """The folder's own Makefile, with AddressSanitizer and UndefinedBehaviorSanitizer: training,
    a resume, a refused dataset and inference from the checkpoint report nothing."""
    import shutil

    folder = tmp_path / "san"
    shutil.copytree(trainer.parent, folder)
    (folder / "net").unlink()
    flags = "-std=c99 -O1 -g1 -march=native -Wall -Wextra -Werror"
    flags += " -fsanitize=address,undefined -fno-sanitize-recover=all"
    subprocess.run(["make", "-s", f"CFLAGS={flags}"], cwd=folder, check=True, capture_output=True)
    exe, ck = folder / "net", tmp_path / "ck.npz"
    train(exe, "--data", data_file, "--epochs", 1, "--checkpoint", ck, "--every", 5)
    train(exe, "--data", data_file, "--epochs", 2, "--checkpoint", ck, "--resume", ck)
    np.savez(tmp_path / "bad.npz", x=np.zeros((100, 3), np.float32), labels=np.zeros(100, np.int64))
    _one_line_error(train(exe, "--data", tmp_path / "bad.npz", check=False), "'x'")
    np.save(tmp_path / "x.npy", dataset(BATCH)["x"])
    cmd = [str(exe), "--checkpoint", ck, "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", tmp_path / "r"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0 and not res.stderr, res.stderr


def test_inspect_shows_both_models_the_trainer_builds(trainer):
    """flowc inspect --train runs the stages export_trainer builds from: the training step's and
    the inference model's graphs and memory plans, the arena the binary's metadata reports."""
    res = subprocess.run(
        [sys.executable, "-m", "codegen.cli", "inspect", f"{__file__}:mlp", "--train"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    meta = json.loads((trainer.parent / "metadata.json").read_text())["trainer"]
    step = next(line for line in res.stdout.splitlines() if line.startswith("training step 'model_train'"))
    assert "outputs (" in step and "lower (" in step, step
    assert f"arena {meta['arena_bytes']} B, lower bound {meta['arena_lower_bound']} B" in res.stdout
    assert any(line.startswith("inference model 'model'") for line in res.stdout.splitlines()), res.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "codegen.cli", "inspect", f"{__file__}:mlp", "--train", "--stage", "plan"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0 and shown.stdout.startswith("training step: memory plan:"), shown.stdout
