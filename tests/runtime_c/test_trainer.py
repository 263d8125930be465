"""runtime_c/fc_train.c, the training binary's driver, on its own: it builds alone with the strict
flags (gcc, clang when installed, and MPI's compiler with FC_MPI), its shuffle is the one
codegen/backends/c/trainer.py's ``order`` twins, and a hand-written fc_train_model (a step
that sums the samples it is given into its state) trains, writes its checkpoint and resumes
without any generated code."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from codegen.backends.c import toolchain
from codegen.backends.c.trainer import order
from graphdef.errors import ToolchainError

from .conftest import CC, RUNTIME

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-c", "-o", "/dev/null", f"-I{RUNTIME}"]
MPI_LAYER = RUNTIME.parent / "mpi"
SOURCES = ("fc_train.c", "files.c", "npy.c", "npz.c", "checkpoint.c", "driver.c")  # and what it calls


@pytest.mark.parametrize("cc", [CC, shutil.which("clang")], ids=["cc", "clang"])
def test_the_driver_builds_alone_with_the_strict_flags(cc):
    if cc is None:
        pytest.skip("clang is not installed (Debian: apt-get install clang)")
    res = subprocess.run([cc, *STRICT, str(RUNTIME / "fc_train.c")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_the_driver_builds_alone_with_mpi():
    try:
        mpicc = toolchain.find_mpicc()
    except ToolchainError as e:
        pytest.skip(f"the MPI build of fc_train.c needs MPI's compiler: {e}")
    cmd = [*shlex.split(mpicc), *STRICT, f"-I{MPI_LAYER}", "-DFC_MPI", str(RUNTIME / "fc_train.c")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("n, seed, epoch", [(1, 0, 0), (10, 0, 0), (100, 7, 3), (33, 2**63 - 1, 12)])
def test_the_shuffle_is_the_one_python_computes(c_lib, n, seed, epoch):
    ffi, lib = c_lib(
        "void fc_train_order(long *perm, long n, uint64_t seed, long epoch);",
        "#define _POSIX_C_SOURCE 200809L\n" + "".join(f'#include "{f}"\n' for f in SOURCES),
    )
    perm = ffi.new("long[]", n)
    lib.fc_train_order(perm, n, seed, epoch)
    assert list(perm) == order(n, seed, epoch)


# A step of batch 2 over input "x" (3 floats a sample) and labels "y" (3 classes): it adds each
# sample to the state's "seen" and counts its calls in global_step; its loss is the batch's first
# value, so that a NaN in the data stops training.
STEP = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fc_train.h"

static const long x_shape[2] = {2, 3}, y_shape[1] = {2}, seen_shape[1] = {3}, scalar[1] = {0};
static const fc_train_input inputs[2] = {
    {"x", "float32", 2, x_shape, 12, 0},
    {"y", "int64", 1, y_shape, 8, 3},
};
static const fc_ck_var vars[2] = {
    {"seen", "float32", 1, seen_shape, 0},
    {"global_step", "int64", 0, scalar, 64},
};

#ifndef TOY_CONTEXT
static int init(void *state) {
    memset(state, 0, 128);
    return 0;
}
#endif

#ifdef TOY_CONTEXT
/* the step's memory in a context of its own, as a CUDA step keeps it on the GPU: seen starts at
 * 1, 2, 3 there, which the driver learns through state_read */
static int run(void *const *batch, float *loss, void *arena, void *host, void *pool, void *mpi, void *ctx) {
    void *state = ctx;
    (void)host;
#else
static int run(void *const *batch, float *loss, void *arena, void *state, void *pool, void *mpi, void *ctx) {
    (void)ctx;
#endif
    const float *x = (const float *)batch[0];
    float *seen = (float *)state;
    int64_t *step = (int64_t *)((unsigned char *)state + 64);
    int i;
    (void)pool, (void)mpi;
    if (!arena) return 1;
    for (i = 0; i < 6; ++i) seen[i % 3] += x[i];
    ++*step;
    *loss = x[0];
    return 0;
}

static const char *status_string(int status) {
    return status ? "no arena" : "ok";
}

#ifdef TOY_CONTEXT
static int open_context(void **ctx) {
    float *seen = (float *)calloc(1, 128);
    *ctx = seen;
    if (!seen) return 1;
    seen[0] = 1.0f, seen[1] = 2.0f, seen[2] = 3.0f;
    return 0;
}

static const char *context_error(void *ctx) {
    return ctx ? "ok" : "no memory for the context";
}

static int state_read(void *ctx, void *state) {
    memcpy(state, ctx, 128);
    return 0;
}

static int state_write(void *ctx, const void *state) {
    memcpy(ctx, state, 128);
    return 0;
}

static const fc_train_model model = {
    "toy", "toy_train", "x, y", inputs, 2, vars, 2, 2, "0123456789abcdef", 64,
    0, 128, 64, 1, NULL, run, status_string, NULL, NULL, NULL,
    open_context, context_error, free, state_read, state_write, NULL,
};
#else
static const fc_train_model model = {
    "toy", "toy_train", "x, y", inputs, 2, vars, 2, 2, "0123456789abcdef", 64,
    256, 128, 64, 1, init, run, status_string, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
};
#endif

int main(int argc, char **argv) {
    return fc_train_main(&model, argc - 1, argv + 1);
}
"""


@pytest.fixture(scope="module", params=[False, True], ids=["state", "context"])
def toy(request, tmp_path_factory) -> Path:
    """The toy step, its state in the driver's memory or (context) in a context of its own."""
    folder = tmp_path_factory.mktemp("toy")
    (folder / "toy.c").write_text(STEP)
    sources = [str(RUNTIME / f) for f in SOURCES]
    cmd = [CC, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME}", "toy.c", *sources, "-o", "toy"]
    cmd += ["-DTOY_CONTEXT"] if request.param else []
    res = subprocess.run([*cmd, "-lm"], cwd=folder, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return folder / "toy"


def train(exe: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), "train", *map(str, args)], capture_output=True, text=True, timeout=60)


def test_a_described_step_trains_checkpoints_and_resumes(toy, tmp_path, request):
    x = np.arange(15, dtype=np.float32).reshape(5, 3)  # 5 samples: 2 steps an epoch, one left out
    data = tmp_path / "d.npz"
    np.savez(data, x=x, y=np.array([0, 1, 2, 0, 1], np.int64))
    ck = tmp_path / "ck.npz"
    res = train(toy, "--data", data, "--epochs", 2, "--seed", 3, "--checkpoint", ck)
    assert res.returncode == 0, res.stderr
    assert "epoch 2/2: step 4" in res.stdout and "trained 4 step(s) of 2 samples" in res.stdout
    visited = [i for epoch in range(2) for i in order(5, 3, epoch)[:4]]
    start = np.array([1, 2, 3], np.float32) if request.node.callspec.params["toy"] else 0
    with np.load(ck) as saved:
        np.testing.assert_array_equal(saved["seen"], start + x[visited].sum(0))
        assert int(saved["global_step"]) == 4
    res = train(toy, "--data", data, "--epochs", 3, "--seed", 3, "--resume", ck, "--checkpoint", ck)
    assert res.returncode == 0 and "trained 2 step(s)" in res.stdout, res.stderr
    visited += order(5, 3, 2)[:4]
    with np.load(ck) as saved:
        np.testing.assert_array_equal(saved["seen"], start + x[visited].sum(0))


@pytest.mark.parametrize(
    "arrays, args, code, said",
    [
        ({"x": None}, (), 2, "the dataset has no array 'x' (the step's inputs: x, y)"),
        ({"y": np.array([0, 1, 3, 0])}, (), 2, "dataset array 'y' (d.npz): sample 2 has class label 3"),
        ({"x": np.zeros((4, 2))}, (), 2,
         "dataset array 'x' (d.npz) is float64[4, 2]; the step's input 'x' takes float32[N, 3] (N samples)"),
        ({}, ("--batch", 3), 2, "--batch 3: the step takes 2 samples on each of 1 rank(s)"),
        ({}, ("--every", 1), 2, "--every N writes checkpoints: give --checkpoint FILE.npz"),
        ({}, ("--data", "z=d.npy"), 2, "--data z=d.npy: the step has no input 'z' (its inputs: x, y)"),
        ({"x": np.full((4, 3), np.nan, np.float32)}, (), 5, "the loss is nan at step 1 (epoch 1): stopped"),
    ],
)  # fmt: skip
def test_what_does_not_fit_is_one_line_and_an_exit_status(toy, tmp_path, arrays, args, code, said):
    data = {"x": np.zeros((4, 3), np.float32), "y": np.zeros(4, np.int64), **arrays}
    np.savez(tmp_path / "d.npz", **{k: v for k, v in data.items() if v is not None})
    res = subprocess.run([str(toy), "train", "--data", "d.npz", *map(str, args)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    lines = res.stderr.splitlines()
    assert res.returncode == code and len(lines) == 1, res.stderr
    assert lines[0].startswith("toy train: error: ") and said in lines[0], lines[0]
