"""The training binary on one GPU (``flowc compile --train --target cuda``): the C backend's
training driver (runtime_c/fc_train.c) opening the step's CUDA context, the variables on the
device and copied to the host for each checkpoint. Without a GPU it runs through the CPU
simulator (runtime_c/cuda/sim.h): it trains as the compiled C step does on the batches of the
same shuffle, resumes where it stopped, and its inference model runs from a checkpoint. With
nvcc the same folder builds warning-free; with a GPU it trains there too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd
from codegen.cli import main as flowc
from codegen.exports import export_trainer
from graphdef import checkpoint
from graphdef.errors import FlowcError

from .test_cuda import GPU, SIM, needs_gpu, needs_nvcc
from .test_train_binary import BATCH, N, dataset, mlp, reference, train

EPOCHS, SEED = 2, 5


@pytest.fixture(scope="module")
def trainer(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cuda_trainer") / "out"
    return export_trainer(mlp(), out, name="net", target="cuda", cc=SIM) / "net"


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.npz"
    np.savez(path, **dataset())
    return path


def _check_trained(ck: Path, epochs: int) -> None:
    want, losses = reference(dataset(), epochs, SEED)
    got, header = checkpoint.load(ck)
    assert header["step"] == epochs * (N // BATCH) and set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert losses[-1] < losses[0]


def test_trains_on_the_gpu_as_the_compiled_step(trainer, data_file, tmp_path):
    ck = tmp_path / "ck.npz"
    res = train(trainer, "--data", data_file, "--epochs", EPOCHS, "--seed", SEED, "--checkpoint", ck)
    assert f"trained {EPOCHS * (N // BATCH)} step(s)" in res.stdout, res.stdout
    _check_trained(ck, EPOCHS)


def test_resume_writes_the_checkpoint_back_to_the_device(trainer, data_file, tmp_path):
    """The second run starts from the first's variables (written to the GPU after --resume), so
    its checkpoint is that of one run of both epochs."""
    half = tmp_path / "half.npz"
    train(trainer, "--data", data_file, "--epochs", 1, "--seed", SEED, "--checkpoint", half)
    res = train(trainer, "--data", data_file, "--epochs", EPOCHS, "--seed", SEED, "--resume", half,
                "--checkpoint", half)  # fmt: skip
    assert f"trained {(EPOCHS - 1) * (N // BATCH)} step(s)" in res.stdout, res.stdout
    _check_trained(half, EPOCHS)


def test_inference_runs_from_a_checkpoint(trainer, data_file, tmp_path):
    ck = tmp_path / "ck.npz"
    train(trainer, "--data", data_file, "--epochs", 1, "--seed", SEED, "--checkpoint", ck)
    x = dataset()["x"][:BATCH]
    np.save(tmp_path / "x.npy", x)
    for args, out in (([], "initial"), (["--checkpoint", ck], "trained")):
        cmd = [trainer, "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", tmp_path / out, *args]
        res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    sess = gd.Session(mlp())
    initial = sess.run({"x": x}, "logits")
    sess.restore(ck)
    trained = sess.run({"x": x}, "logits")
    assert np.abs(trained - initial).max() > 0.1
    np.testing.assert_allclose(np.load(tmp_path / "initial" / "logits.npy"), initial, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "trained" / "logits.npy"), trained, rtol=1e-5, atol=1e-5)


def test_the_folder_trains_clean_under_sanitizers(data_file, tmp_path):
    """`make sim SAN=...` in the written folder (no flowc needed): the training driver, both
    models' host code and kernels under AddressSanitizer and UBSan, through a checkpoint and a
    resume."""
    out = export_trainer(mlp(), tmp_path / "out", name="net", target="cuda", build_binary=False)
    san = "SAN=-fsanitize=address,undefined -fno-sanitize-recover=all -g1"
    subprocess.run(["make", "-C", str(out), "sim", "CXX=g++", san], check=True, capture_output=True)
    ck = tmp_path / "ck.npz"
    for args in ((), ("--resume", ck)):
        res = train(out / "net", "--data", data_file, "--epochs", len(args) // 2 + 1, "--seed", SEED,
                    "--checkpoint", ck, *args)  # fmt: skip
        assert "AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr
    _check_trained(ck, 2)


def test_what_one_gpu_cannot_train_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(FlowcError, match="trains on one GPU"):
        export_trainer(mlp(), tmp_path / "a", target="cuda", cc=SIM, mpi=True)
    out = str(tmp_path / "b")
    assert flowc(["compile", "x.onnx", "-o", out, "--target", "cuda", "--train", "--precision", "fp16"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "float32" in err[0], err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@needs_nvcc
@pytest.mark.cuda
def test_nvcc_builds_the_training_binary_warning_free(data_file, tmp_path):
    """Both models for sm_80 and sm_90, warnings as errors; without a GPU ``train`` stops in one
    line naming the cause and writes no checkpoint."""
    exe = export_trainer(mlp(), tmp_path / "out", name="net", target="cuda") / "net"
    assert exe.is_file()
    ck = tmp_path / "ck.npz"
    res = train(exe, "--data", data_file, "--epochs", 1, "--checkpoint", ck, check=GPU)
    if GPU:
        return
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 3 and len(lines) == 1 and "no CUDA device" in lines[0], res.stderr
    assert not ck.exists()


@needs_nvcc
@needs_gpu
@pytest.mark.cuda
def test_trains_on_a_real_gpu(data_file, tmp_path):
    exe = export_trainer(mlp(), tmp_path / "out", name="net", target="cuda") / "net"
    ck = tmp_path / "ck.npz"
    train(exe, "--data", data_file, "--epochs", EPOCHS, "--seed", SEED, "--checkpoint", ck)
    _check_trained(ck, EPOCHS)
