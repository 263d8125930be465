"""The training binary and the inference binary under careless and hostile use: a checkpoint
that would overwrite the dataset or cannot be written, SIGTERM from a scheduler, hostile
``global_step`` values in a resumed checkpoint, absurd epoch counts, FIFOs given as files, and
class labels outside the classes (runtime/files.h, templates/train/train.c.j2)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd
from codegen.exports import export_trainer
from graphdef import checkpoint

pytestmark = pytest.mark.c

BATCH, CLASSES = 4, 3


def classifier() -> gd.Graph:
    """8-3 softmax classifier with SGD: 'logits' (inference) and 'train'."""
    rng = np.random.default_rng(0)
    with gd.Graph("clf") as g:
        x = gd.placeholder("x", (BATCH, 8))
        y = gd.placeholder("labels", (BATCH,), "int64")
        w = gd.variable("w", (rng.standard_normal((8, CLASSES)) * 0.3).astype(np.float32))
        logits = gd.identity(gd.matmul(x, w), name="logits")
        loss = gd.train.softmax_cross_entropy(logits, y, name="loss")
        train = gd.train.SGD(0.1).minimize(loss, name="train")
    g.set_outputs(logits, train)
    return g


def dataset(n: int = 40, labels=None) -> dict:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = x[:, :CLASSES].argmax(1).astype(np.int64) if labels is None else np.asarray(labels, np.int64)
    return {"x": x, "labels": y}


@pytest.fixture(scope="module")
def net(tmp_path_factory) -> Path:
    return export_trainer(classifier(), tmp_path_factory.mktemp("clf") / "out", name="net", mpi=False) / "net"


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "train.npz"
    np.savez(path, **dataset())
    return path


def run(net: Path, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(net), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def one_error(res, *needles) -> str:
    assert res.returncode not in (0, None) and res.returncode > 0, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("net train: error: ") or lines[0].startswith("net: error: ")
    ), lines
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ------------------------------------------------------------------ 4. the checkpoint's path


@pytest.mark.parametrize("how", ["same path", "a link to it"])
def test_a_checkpoint_naming_the_dataset_is_refused_before_training(net, data, tmp_path, how):
    before = data.read_bytes()
    target = data
    if how == "a link to it":
        target = tmp_path / "ck.npz"
        target.symlink_to(data)
    res = run(net, "train", "--data", data, "--checkpoint", target, "--epochs", 2)
    one_error(res, "--checkpoint", "dataset")
    assert res.returncode == 2 and "epoch" not in res.stdout
    assert data.read_bytes() == before


@pytest.mark.parametrize("where", ["no such folder", "a folder", "under a file"])
def test_a_checkpoint_that_cannot_be_written_is_refused_before_the_first_step(net, data, tmp_path, where):
    path = {
        "no such folder": tmp_path / "missing" / "ck.npz",
        "a folder": tmp_path,
        "under a file": data / "ck.npz",
    }[where]
    res = run(net, "train", "--data", data, "--checkpoint", path, "--epochs", 1000)
    one_error(res, "--checkpoint")
    assert res.returncode == 2 and "epoch" not in res.stdout, res.stdout[-300:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_a_stop_signal_writes_the_checkpoint_and_leaves_no_temporary(net, tmp_path, sig):
    data = tmp_path / "big.npz"
    np.savez(data, **dataset(4000))
    for k in range(3):
        ck = tmp_path / f"ck{k}.npz"
        cmd = [net, "train", "--data", data, "--epochs", 1000000, "--checkpoint", ck, "--every", 1]
        proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.3 + 0.1 * k)
        proc.send_signal(sig)
        out, err = (b.decode() for b in proc.communicate(timeout=60))
        assert proc.returncode == 128 + sig, (proc.returncode, out[-300:], err)
        step = int(out.split(f"interrupted by {signal.Signals(sig).name} at step ")[1].split(":")[0])
        _, header = checkpoint.load(ck)
        assert header["step"] == step
        assert temporaries(tmp_path) == [], temporaries(tmp_path)


def _host_tag() -> str:
    """The host part of the trainer's temporaries' names (runtime_c/files.c owner_tag)."""
    import socket

    host = "".join(c for c in socket.gethostname() if c.isascii() and (c.isalnum() or c == "-"))[:40]
    return host or "host"


def test_a_temporary_a_killed_run_left_is_removed_and_a_live_ones_kept(net, data, tmp_path):
    """SIGKILL leaves the checkpoint's temporary behind (no handler runs): the next run removes
    the one whose process is gone, and keeps one of a process still alive or of another host."""
    dead = subprocess.Popen(["true"])
    dead.wait()  # a process id no process has now
    stale = tmp_path / f".ck.npz.{_host_tag()}.{dead.pid}.aB3dE9"
    alive = tmp_path / f".ck.npz.{_host_tag()}.{os.getpid()}.xY7wQ2"
    other = tmp_path / f".ck.npz.another-node.{dead.pid}.kL5mN1"
    for p in (stale, alive, other):
        p.write_bytes(b"half a checkpoint")
    res = run(net, "train", "--data", data, "--checkpoint", tmp_path / "ck.npz")
    assert res.returncode == 0, res.stderr
    assert not stale.exists() and alive.exists() and other.exists()


def test_a_killed_run_resumes_with_resume_auto(net, data, tmp_path):
    """SIGKILL in the middle of training, then the same command with --resume auto: it starts from
    the last checkpoint written (or from the start when there is none yet), no temporary stays,
    and the end is that of a run never stopped."""
    whole, ck = tmp_path / "whole.npz", tmp_path / "ck.npz"
    common = ("train", "--data", data, "--epochs", 30, "--seed", 3)
    assert run(net, *common, "--checkpoint", whole).returncode == 0
    first = run(net, *common, "--epochs", 10, "--checkpoint", ck, "--resume", "auto")
    assert first.returncode == 0 and "--resume auto: no checkpoint yet at" in first.stdout, first.stderr
    (tmp_path / f".ck.npz.{_host_tag()}.999999999.zzzzzz").write_bytes(b"")  # as SIGKILL leaves it
    again = run(net, *common, "--checkpoint", ck, "--resume", "auto")
    assert again.returncode == 0 and "--resume auto: resuming from" in again.stdout, again.stderr
    a, b = np.load(whole), np.load(ck)
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert temporaries(tmp_path) == []
    one_error(run(net, "train", "--data", data, "--resume", "auto"), "--resume auto", "--checkpoint")
    one_error(run(net, "train", "--data", data, "--timeout", 0), "--timeout")


# ------------------------------------------------------------------ 5, 7. untrusted numbers


@pytest.mark.parametrize("value", [-1, -(10**6), -(2**63)])
def test_a_negative_global_step_in_a_resumed_checkpoint_is_refused(net, data, tmp_path, value):
    ck = tmp_path / "ck.npz"
    assert run(net, "train", "--data", data, "--checkpoint", ck).returncode == 0
    values, header = checkpoint.load(ck)
    values["global_step"] = np.array(value, np.int64)
    checkpoint.save(ck, values, header["model"], header["step"])
    res = run(net, "train", "--data", data, "--resume", ck, "--epochs", 2)
    one_error(res, "global_step", str(value))
    assert res.returncode == 2


@pytest.mark.parametrize("epochs", ["2305843009213693953", "9223372036854775807"])
def test_epoch_counts_whose_steps_overflow_are_refused(net, data, epochs):
    res = run(net, "train", "--data", data, "--epochs", epochs)
    one_error(res, "--epochs")
    assert res.returncode == 2 and "trained" not in res.stdout


# ------------------------------------------------------------------ 8. FIFOs are not files


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("option", ["--data", "--data labels=", "--resume"])
def test_a_fifo_given_to_the_trainer_is_refused_at_once(net, data, tmp_path, option):
    fifo = _fifo(tmp_path, "pipe.npz" if option != "--data labels=" else "pipe.npy")
    if option == "--resume":
        args = ["--data", data, "--resume", fifo]
    elif option == "--data":
        args = ["--data", fifo]
    else:
        args = ["--data", data, "--data", f"labels={fifo}"]
    one_error(run(net, "train", *args, timeout=20), "pipe", "not a regular file")


def test_a_fifo_given_to_the_inference_binary_is_refused_at_once(net, tmp_path):
    ck = tmp_path / "ck.npz"
    assert run(net, "train", "--data", _write_data(tmp_path), "--checkpoint", ck).returncode == 0
    x = tmp_path / "x.npy"
    np.save(x, dataset(BATCH)["x"])
    fifo = _fifo(tmp_path, "pipe.npy")
    one_error(run(net, "--in", f"x={fifo}", "--out-dir", tmp_path / "res", timeout=20), "not a regular file")
    one_error(run(net, "--checkpoint", fifo, "--in", f"x={x}", "--out-dir", tmp_path / "res", timeout=20),
              "not a regular file")  # fmt: skip


def _write_data(tmp_path: Path) -> Path:
    path = tmp_path / "d.npz"
    np.savez(path, **dataset())
    return path


def test_an_output_never_replaces_an_input_file(net, tmp_path):
    res_dir = tmp_path / "res"
    res_dir.mkdir()
    x = res_dir / "logits.npy"  # the output's own name
    np.save(x, dataset(BATCH)["x"])
    before = x.read_bytes()
    one_error(run(net, "--in", f"x={x}", "--out-dir", res_dir), "would be written over input 'x'")
    assert x.read_bytes() == before and temporaries(res_dir) == []


def test_a_signal_while_outputs_are_written_leaves_no_temporary(tmp_path):
    """SIGTERM at moments spread over a run that writes a large output over an earlier one (the
    previous file is kept aside while the new one is put in place): never a temporary or a kept
    file left, and the output whole (the previous one or the new one)."""
    with gd.Graph("g") as g:
        gd.tile(gd.placeholder("x", (1000,)), (4000,), name="y")  # 16 MB
    from codegen import export

    exe = export(g, tmp_path / "big", name="net") / "net"
    x = tmp_path / "x.npy"
    np.save(x, np.ones(1000, np.float32))
    res_dir = tmp_path / "res"
    argv = [str(exe), "--in", f"x={x}", "--out-dir", str(res_dir)]
    start = time.perf_counter()
    subprocess.run(argv, check=True)
    whole = time.perf_counter() - start
    killed = 0
    for k in range(24):
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
        timer = threading.Timer(whole * k / 16, proc.send_signal, (signal.SIGTERM,))
        timer.start()
        proc.wait(timeout=60)
        timer.join()
        killed += proc.returncode == -signal.SIGTERM
        assert temporaries(res_dir) == [], (k, temporaries(res_dir))
        assert np.load(res_dir / "y.npy").shape == (4_000_000,)
    assert killed >= 1


# ------------------------------------------------------------------ 11. labels outside the classes


@pytest.mark.parametrize("bad", [CLASSES, -1, 2**62])
def test_labels_outside_the_classes_are_refused_naming_the_sample(net, tmp_path, bad):
    labels = dataset()["labels"].copy()
    labels[17] = bad
    path = tmp_path / "bad.npz"
    np.savez(path, **dataset(labels=labels))
    res = run(net, "train", "--data", path, "--epochs", 1)
    one_error(res, "'labels'", "sample 17", f"label {bad}", f"[0, {CLASSES})")
    assert res.returncode == 2 and "epoch" not in res.stdout


@pytest.mark.parametrize("bad", [CLASSES, -1, 2**62])
def test_the_loss_op_refuses_labels_outside_the_classes(bad):
    from codegen import compile as compile_c

    g = classifier()
    data = dataset(BATCH)
    data["labels"][2] = bad
    with pytest.raises(gd.ExecutionError, match=rf"index {bad} at \[2\] is outside \[0, {CLASSES}\)"):
        gd.run(g, data, ["loss"])
    m = compile_c(g, outputs=["train"], train="train", name="step")
    with pytest.raises(gd.ExecutionError, match="out of range"):
        m(**data)
    assert int(m.variable("global_step")) == 0  # nothing was applied
