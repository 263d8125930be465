"""Data-parallel training binaries (``flowc compile --train`` built with MPI): R ranks with a
per-rank batch of B/R train as one process with the global batch B (the gradients averaged by
the step's allreduce buckets), float16 on the wire within its rounding; resuming and the
checks of the one-process binary hold under mpiexec too."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from codegen.exports import export_trainer
from graphdef import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "samples"))
import digits  # noqa: E402

pytestmark = pytest.mark.mpi

GLOBAL = 32


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    x, y, _, _ = digits.load_data()
    path = tmp_path_factory.mktemp("data") / "digits.npz"
    np.savez(path, x=x[:640], labels=y[:640])
    return path


@pytest.fixture(scope="module")
def binaries(toolchain, tmp_path_factory):
    """name -> binary: the digits MLP's step for 1 rank (batch 32), 2 ranks (16 each), 2 ranks
    with float16 gradients, and a build without MPI."""
    root = tmp_path_factory.mktemp("dp")
    builds = {
        "one": (32, True, None),
        "two": (16, True, None),
        "fp16": (16, True, "fp16"),
        "plain": (16, False, None),
    }
    out = {}
    for key, (batch, mpi, compress) in builds.items():
        graph = digits.training_graph(batch)
        folder = export_trainer(graph, root / key, name="digits", mpi=mpi, compress=compress,
                                cc=toolchain.mpicc if mpi else None)  # fmt: skip
        out[key] = folder / "digits"
    return out


def train(toolchain, ranks: int, exe: Path, *args, ok: bool = True) -> subprocess.CompletedProcess:
    res, _ = toolchain.run(ranks, exe, "train", *args)
    if ok:
        assert res.returncode == 0, res.stderr
    return res


def test_two_ranks_train_as_one_process_with_the_global_batch(toolchain, binaries, data_file, tmp_path):
    one, two, half = tmp_path / "one.npz", tmp_path / "two.npz", tmp_path / "fp16.npz"
    common = ("--data", data_file, "--epochs", 3, "--seed", 2, "--batch", GLOBAL)
    train(toolchain, 1, binaries["one"], *common, "--checkpoint", one)
    res = train(toolchain, 2, binaries["two"], *common, "--checkpoint", two)
    assert "on 2 rank(s)" in res.stdout and len(epoch_losses(res.stdout)) == 3, res.stdout
    # where the time went: allreduce waits, other MPI calls, compute
    assert re.search(r"time on the slowest rank: [\d.]+ s waiting for allreduces \([\d.]+%\)", res.stdout)
    train(toolchain, 2, binaries["fp16"], *common, "--checkpoint", half)
    a, _ = checkpoint.load(one)
    b, hb = checkpoint.load(two)
    c, _ = checkpoint.load(half)
    assert hb["step"] == 3 * 640 // GLOBAL
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=2e-6, err_msg=name)
        np.testing.assert_allclose(c[name], a[name], rtol=0, atol=5e-3, err_msg=name)
    assert max(float(np.abs(c[n] - a[n]).max()) for n in a) > 0  # float16 did round something
    # the losses each epoch are the same (rank 0 prints the mean over ranks)
    solo = train(toolchain, 1, binaries["one"], *common).stdout
    pair = train(toolchain, 2, binaries["two"], *common).stdout
    losses = [epoch_losses(out) for out in (solo, pair)]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)


def epoch_losses(stdout: str) -> list[float]:
    """The mean loss of each epoch's line (Open MPI's mpiexec hands rank 0 a terminal: the
    progress lines are there too)."""
    lines = [ln for ln in stdout.splitlines() if "mean loss " in ln]
    return [float(ln.split("mean loss ")[1].split(",")[0]) for ln in lines]


def test_resume_under_two_ranks(toolchain, binaries, data_file, tmp_path):
    whole, part = tmp_path / "whole.npz", tmp_path / "part.npz"
    common = ("--data", data_file, "--seed", 4)
    train(toolchain, 2, binaries["two"], *common, "--epochs", 2, "--checkpoint", whole)
    train(toolchain, 2, binaries["two"], *common, "--epochs", 1, "--checkpoint", part)
    train(toolchain, 2, binaries["two"], *common, "--epochs", 2, "--checkpoint", part, "--resume", part)
    a, b = np.load(whole), np.load(part)
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_wrong_batch_and_a_build_without_mpi_are_refused(toolchain, binaries, data_file):
    res = train(toolchain, 2, binaries["two"], "--data", data_file, "--batch", 64, ok=False)
    assert res.returncode == 2 and "--batch 64" in res.stderr and "2 rank(s)" in res.stderr, res.stderr
    ours = [ln for ln in res.stderr.splitlines() if ln.startswith("digits train: error:")]
    assert len(ours) == 1  # rank 0 speaks for all (Open MPI's mpiexec adds lines of its own)
    res = train(toolchain, 2, binaries["plain"], "--data", data_file, ok=False)
    assert res.returncode != 0 and "built without MPI" in res.stderr, res.stderr


def test_a_start_up_error_on_one_rank_stops_every_rank(toolchain, binaries, data_file, tmp_path):
    """The dataset missing on one node only (an MPMD launch gives each rank its own --data):
    every rank stops at once instead of waiting in the first broadcast, and the rank that
    failed says why."""
    exe = binaries["two"]
    missing = tmp_path / "node-local" / "data.npz"
    cmd = [*toolchain.launch(1), str(exe), "train", "--data", str(data_file), ":",
           "-n", "1", str(exe), "train", "--data", str(missing)]  # fmt: skip
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a start-up error on rank 1 left the job hanging")
    assert res.returncode != 0, res.stdout
    assert "digits train: rank 1: error:" in res.stderr and "data.npz" in res.stderr, res.stderr
    assert "epoch" not in res.stdout


def test_a_world_of_one_under_a_launcher_of_two_is_refused(toolchain, binaries, data_file, tmp_path):
    """Two copies of the trainer started by a launcher whose MPI is not the binary's would each
    train alone and write the same checkpoint: each refuses in one line naming the launcher's
    count and this binary's MPI, and writes nothing."""
    import os

    ck = tmp_path / "ck.npz"
    env = {**os.environ, "PMI_SIZE": "2", "PMI_RANK": "1"}
    cmd = [str(binaries["two"]), "train", "--data", str(data_file), "--checkpoint", str(ck)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode != 0 and "epoch" not in res.stdout, res.stdout
    ours = [ln for ln in res.stderr.splitlines() if ln.startswith("digits: rank 1: MPI sees 1 process")]
    assert len(ours) == 1 and "(PMI_SIZE=2)" in ours[0], res.stderr
    assert not ck.exists()


def test_ranks_given_different_datasets_are_refused_at_once(toolchain, binaries, data_file, tmp_path):
    """An MPMD launch whose ranks read datasets of different sizes (a node-local copy cut short)
    would run different step counts, one rank waiting forever in the step's allreduce: refused
    before the first step, naming the difference."""
    short = tmp_path / "short.npz"
    with np.load(data_file) as d:
        np.savez(short, **{k: d[k][:320] for k in d.files})
    exe = binaries["two"]
    cmd = [*toolchain.launch(1), str(exe), "train", "--data", str(data_file), ":",
           "-n", "1", str(exe), "train", "--data", str(short)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "the ranks disagree on the dataset's samples (--data): from 320 to 640" in res.stderr
    assert "epoch" not in res.stdout


def _ranks(exe: Path) -> list[int]:
    """The processes running exe (by its path in /proc/*/cmdline)."""
    pids = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "cmdline").read_bytes().split(b"\0")[0] == str(exe).encode():
                pids.append(int(p.name))
        except OSError:
            continue
    return sorted(pids)


@pytest.mark.parametrize("how", ["timeout", "second signal"])
def test_a_stuck_rank_ends_the_job(toolchain, binaries, data_file, tmp_path, how):
    """One rank stops answering (SIGSTOP: a hung node) in the middle of training. With --timeout 2
    the other ends the job 2 s later, naming itself and the cause; without it, a stop signal whose
    step cannot end is followed by a second one that ends the process at once, saying that no
    checkpoint was written. Nothing keeps running."""
    import os
    import signal
    import time

    exe = binaries["two"]
    ck = tmp_path / "ck.npz"
    extra = ["--timeout", "2"] if how == "timeout" else []
    cmd = [*toolchain.launch(2), str(exe), "train", "--data", str(data_file), "--epochs", "1000000",
           "--checkpoint", str(ck), "--every", "1000", *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # training runs: the first checkpoint is written
            if ck.exists() and len(_ranks(exe)) == 2:
                break
            time.sleep(0.1)
        first, second = _ranks(exe)
        os.kill(second, signal.SIGSTOP)
        start = time.monotonic()
        if how == "second signal":
            os.kill(first, signal.SIGTERM)
            time.sleep(0.5)
            os.kill(first, signal.SIGTERM)
        while first in _ranks(exe) and time.monotonic() - start < 30:  # the live rank ends the job
            time.sleep(0.05)
        took = time.monotonic() - start
        if second in _ranks(exe):  # the hung one, as a scheduler would (stopped, it keeps a SIGTERM pending)
            os.kill(second, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    finally:
        for pid in _ranks(exe):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and took < 10, (proc.returncode, took, err)
    why = "no progress for --timeout 2 s" if how == "timeout" else "asked to stop, but the step"
    assert re.search(rf"digits train: rank [01]: error: {why}", err), err
    # the last one written stands whole: a periodic one, or (when the stopped rank had run a step
    # ahead, so that the live one could still end its step and agree on the stop) the stop's
    _, header = checkpoint.load(ck)
    assert header["step"] >= 1000


def test_the_bucket_size_is_an_option(toolchain, binaries, data_file, tmp_path):
    """--bucket (export_trainer's bucket): smaller buckets, more allreduces posted as backward
    goes; the same sums, so the same weights bit for bit."""
    graph = digits.training_graph(16)
    small = export_trainer(graph, tmp_path / "s", name="digits", mpi=True, bucket="1K", cc=toolchain.mpicc)
    calls = {k: (f / "digits_train.c").read_text().count("fc_mpi_iallreduce(")
             for k, f in (("small", small), ("default", binaries["two"].parent))}  # fmt: skip
    assert calls["small"] > calls["default"] >= 1, calls
    common = ("--data", data_file, "--epochs", 1, "--seed", 7)
    train(toolchain, 2, small / "digits", *common, "--checkpoint", tmp_path / "a.npz")
    train(toolchain, 2, binaries["two"], *common, "--checkpoint", tmp_path / "b.npz")
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    with pytest.raises(Exception, match="--bucket"):
        export_trainer(graph, tmp_path / "bad", name="digits", mpi=True, bucket="2", cc=toolchain.mpicc)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR1"])
def test_a_signal_to_the_launcher_writes_a_checkpoint(toolchain, binaries, data_file, tmp_path, sig):
    """scancel, a time limit or `kill` reach mpiexec: Hydra (MPICH) forwards SIGTERM and SIGUSR1 to
    the ranks, which finish the step, write the checkpoint and exit 128 + the signal. Open MPI's
    mpiexec forwards SIGUSR1 alone (its SIGTERM ends the job at once: the README says to send
    SIGUSR1)."""
    import signal
    import time

    if sig == "SIGTERM" and toolchain.flavor == "openmpi":
        pytest.skip("Open MPI's mpiexec ends the ranks on SIGTERM without a handler's grace")
    ck = tmp_path / "ck.npz"
    cmd = [*toolchain.launch(2), str(binaries["two"]), "train", "--data", str(data_file),
           "--epochs", "1000000", "--checkpoint", str(ck), "--every", "1000"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(300):  # training runs: the first checkpoint is written
        if ck.exists():
            break
        time.sleep(0.1)
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=60)
    number = getattr(signal, sig).value
    assert proc.returncode == 128 + number, (proc.returncode, out[-300:], err)
    step = int(out.split(f"interrupted by {sig} at step ")[1].split(":")[0])
    _, header = checkpoint.load(ck)
    assert header["step"] == step
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_accumulation_serves_any_rank_count_with_one_global_batch(toolchain, binaries, data_file, tmp_path):
    """A step built with --accumulate (batch 8) under --accumulate K: 1 rank x K 4, 2 ranks x K 2,
    4 ranks x K 1 all train with the global batch of 32, as one process with a step of 32 does
    (to float32 rounding), checkpoints and step counts alike; a step built without it refuses
    --accumulate 2 in one line."""
    exe = export_trainer(digits.training_graph(8), tmp_path / "acc", name="digits", mpi=True, accumulate=True,
                         cc=toolchain.mpicc) / "digits"  # fmt: skip
    common = ("--data", data_file, "--epochs", 2, "--seed", 3, "--batch", GLOBAL)
    train(toolchain, 1, binaries["one"], *common, "--checkpoint", tmp_path / "one.npz")
    want, header = checkpoint.load(tmp_path / "one.npz")
    for ranks, k in ((1, 4), (2, 2), (4, 1)):
        ck = tmp_path / f"r{ranks}.npz"
        res = train(toolchain, ranks, exe, *common, "--accumulate", k, "--checkpoint", ck)
        assert f"of {GLOBAL} samples" in res.stdout, res.stdout[-300:]
        got, h = checkpoint.load(ck)
        assert h["step"] == header["step"] == 2 * 640 // GLOBAL
        for name in want:
            what = f"{ranks} ranks x {k}: {name}"
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=2e-6, err_msg=what)
    res = train(toolchain, 2, binaries["two"], "--data", data_file, "--accumulate", 2, ok=False)
    assert res.returncode == 2 and "compile it with --train --accumulate" in res.stderr, res.stderr


@pytest.mark.parametrize("compress", [None, "fp16"])
def test_hierarchical_allreduce_equals_the_flat_one(toolchain, data_file, tmp_path, compress):
    """--allreduce hierarchical (4 ranks as 2 nodes of 2: --node-ranks 2): each node's sum on its
    first rank, those ranks' sum, the result broadcast on each node; the training equals the flat
    allreduce's to float32 (float16) rounding. With one node it stays flat and says so."""
    exe = export_trainer(digits.training_graph(8), tmp_path / "b", name="digits", mpi=True, compress=compress,
                         cc=toolchain.mpicc) / "digits"  # fmt: skip
    common = ("--data", data_file, "--epochs", 2, "--seed", 3)
    train(toolchain, 4, exe, *common, "--checkpoint", tmp_path / "flat.npz")
    hier = ("--allreduce", "hierarchical", "--node-ranks", 2)
    res = train(toolchain, 4, exe, *common, "--checkpoint", tmp_path / "hier.npz", *hier)
    assert "--allreduce hierarchical: 2 node(s) of 4 rank(s)" in res.stdout, res.stdout
    a, _ = checkpoint.load(tmp_path / "flat.npz")
    b, _ = checkpoint.load(tmp_path / "hier.npz")
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-5, atol=1e-3 if compress else 1e-6, err_msg=name)
    res = train(toolchain, 2, exe, *common, "--allreduce", "hierarchical")
    assert "1 node(s) of 2 rank(s) (one node, or a rank a node: the reductions stay flat)" in res.stdout
    res = train(toolchain, 2, exe, *common, "--node-ranks", 2, ok=False)
    assert res.returncode == 2 and "--node-ranks N groups the ranks of --allreduce hierarchical" in res.stderr


def test_a_progress_thread_changes_no_result(toolchain, binaries, data_file, tmp_path):
    """--progress US: a thread probing MPI every US microseconds (MPI_THREAD_MULTIPLE) while the
    steps compute; the sums are the same, so the checkpoint is bitwise the one without it."""
    common = ("--data", data_file, "--epochs", 2, "--seed", 4, "--batch", GLOBAL)
    train(toolchain, 2, binaries["two"], *common, "--checkpoint", tmp_path / "a.npz")
    train(toolchain, 2, binaries["two"], *common, "--checkpoint", tmp_path / "b.npz", "--progress", 100)
    a, _ = checkpoint.load(tmp_path / "a.npz")
    b, _ = checkpoint.load(tmp_path / "b.npz")
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=name)
