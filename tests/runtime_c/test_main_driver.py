"""runtime_c/main_driver.c (the standalone binary's main) and mpi/fc_spmd_main.c (the SPMD
program's main) on their own: each builds alone with the strict flags (main_driver.c with gcc
and clang when installed, fc_spmd_main.c with MPI's mpicc), and fc_main drives a toy model
described by hand, as a generated main.c describes one: its run, a failed run, the state and
--checkpoint, a context the model opens (and fails to), `train`, --bench and bad arguments."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from graphdef import checkpoint

from .conftest import CC, RUNTIME

MPI_LAYER = RUNTIME.parent / "mpi"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
DRIVERS = ("files.c", "npy.c", "npz.c", "checkpoint.c", "driver.c", "main_driver.c")


@pytest.mark.parametrize("cc", [CC, shutil.which("clang")], ids=["cc", "clang"])
def test_main_driver_builds_alone_with_the_strict_flags(cc):
    if cc is None:
        pytest.skip("clang is not installed (Debian: apt-get install clang)")
    cmd = [cc, *STRICT, "-c", "-o", "/dev/null", f"-I{RUNTIME}", str(RUNTIME / "main_driver.c")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_spmd_main_builds_alone_with_mpicc_and_the_strict_flags():
    from codegen.backends.c.toolchain import ToolchainError, find_mpicc

    try:
        mpicc = find_mpicc()
    except ToolchainError as e:
        pytest.skip(f"mpicc is not installed, so mpi/fc_spmd_main.c cannot be compiled here: {e}")
    cmd = [mpicc, *STRICT, "-c", "-o", "/dev/null", f"-I{RUNTIME}", f"-I{MPI_LAYER}",
           str(MPI_LAYER / "fc_spmd_main.c")]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# A model of one input x (4 float32) and one output y = 2 x + w, w its one state variable (1 at
# start); a negative x[0] fails the run. With TOY_CONTEXT: no state, and a context that the
# model cannot open.
TOY = r"""
#include <stddef.h>

#include "main_driver.h"

static int run(const fc_main_args *a) {
    const float *x = (const float *)a->in[0];
    float *y = (float *)a->out[0];
    float w = a->state ? *(const float *)a->state : 0.0f;
    int i;
    if (!a->arena && !a->ctx) return 1;
    if (x[0] < 0) return 3;
    for (i = 0; i < 4; ++i) y[i] = 2 * x[i] + w;
    return 0;
}

static const char *status_string(int status) {
    return status == 3 ? "an index input is out of range" : "a pointer argument is NULL";
}

static const fc_main_tensor inputs[] = {{"x", "float32", 1, {4}, 16, NULL, 0, 0, 0}};
static const fc_main_tensor outputs[] = {{"y", "float32", 1, {4}, 16, "y.npy", 0, 0, 0}};
static const fc_main_model model = {
    .name = "toy", .n_in = 1, .n_out = 1, .inputs = inputs, .outputs = outputs, .run = run,
    .status_string = status_string, .align = 64, .threads = 1,
};

#ifdef TOY_CONTEXT
static int ctx_value;
static int open_ctx(void **ctx) { *ctx = &ctx_value; return 16; }
static const char *ctx_error(void *ctx) { return ctx == &ctx_value ? "no CUDA device" : "?"; }
static void close_ctx(void *ctx) { (void)ctx; }
static const fc_main_binary binary = {
    .model = &model, .open = open_ctx, .error = ctx_error, .close = close_ctx,
};
#else
static int state_init(void *state) { *(float *)state = 1.0f; return 0; }
static int train_main(int argc, char **argv) { return argv[argc - 1][0] == 'z' ? 40 + argc : 1; }
static const long w_shape[1] = {1};
static const fc_ck_var vars[1] = {{"w", "float32", 1, w_shape, 0}};
static const fc_main_binary binary = {
    .model = &model, .arena_bytes = 16, .state_bytes = 4, .state_init = state_init, .vars = vars,
    .n_vars = 1, .train_main = train_main,
};
#endif

int main(int argc, char **argv) { return fc_main(&binary, argc, argv); }
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy binaries: {"state": path, "context": path}."""
    if CC is None:
        pytest.skip("no C compiler")
    root = tmp_path_factory.mktemp("toy")
    (root / "toy.c").write_text(TOY)
    out = {}
    for kind, flags in (("state", []), ("context", ["-DTOY_CONTEXT"])):
        cmd = [CC, *STRICT, "-O1", *flags, f"-I{RUNTIME}", "-o", str(root / kind), str(root / "toy.c")]
        cmd += [str(RUNTIME / f) for f in DRIVERS] + ["-lm"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        out[kind] = root / kind
    return out


def _run(binary: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=60)


X = np.array([1, 2, 3, 4], np.float32)


def test_runs_the_model_on_its_inputs_and_writes_its_outputs(toy, tmp_path):
    np.save(tmp_path / "x.npy", X)
    res = _run(toy["state"], "--in", "x=x.npy", "--out-dir", "res", "--bench", 3, cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.startswith("median_us=") and len(res.stdout.splitlines()) == 1
    np.testing.assert_array_equal(np.load(tmp_path / "res" / "y.npy"), 2 * X + 1)


def test_variables_come_from_a_checkpoint(toy, tmp_path):
    np.save(tmp_path / "x.npy", X)
    checkpoint.save(tmp_path / "ck.npz", {"w": np.array([5], np.float32), "w/adam_m": np.zeros(1)}, "toy")
    res = _run(toy["state"], "--in", "x=x.npy", "--out-dir", "res", "--checkpoint", "ck.npz", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "res" / "y.npy"), 2 * X + 5)
    checkpoint.save(tmp_path / "bad.npz", {"w": np.zeros(2, np.float32)}, "toy")
    res = _run(toy["state"], "--in", "x=x.npy", "--out-dir", "res", "--checkpoint", "bad.npz", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("toy: error: ") and "'w'" in res.stderr


def test_a_failed_run_is_one_line_and_exit_3_writing_nothing(toy, tmp_path):
    np.save(tmp_path / "x.npy", -X)
    res = _run(toy["state"], "--in", "x=x.npy", "--out-dir", "res", cwd=tmp_path)
    assert res.returncode == 3
    assert res.stderr == "toy: error: toy_run failed: an index input is out of range\n"
    assert not (tmp_path / "res").exists()


def test_a_context_that_cannot_open_says_why(toy, tmp_path):
    np.save(tmp_path / "x.npy", X)
    res = _run(toy["context"], "--in", "x=x.npy", "--out-dir", "res", cwd=tmp_path)
    assert (res.returncode, res.stderr) == (3, "toy: error: no CUDA device\n")


def test_train_goes_to_the_training_driver(toy, tmp_path):
    assert _run(toy["state"], "train", "a", "z", cwd=tmp_path).returncode == 43


@pytest.mark.parametrize(
    "kind, args, message",
    [
        ("state", ["--in", "x=x.npy"], "toy: error: missing --out-dir DIR"),
        ("state", ["--out-dir", "res"], "toy: error: missing --in x=FILE.npy"),
        ("state", ["--in", "q=x.npy", "--out-dir", "res"], "toy: error: unknown input 'q'"),
        ("state", ["--in", "x=x.npy", "--out-dir", "res", "--bench", "0"], "--bench expects a positive"),
        ("state", ["--in", "x=x.npy", "--out-dir", "res", "--microbatches", "2"],
         "toy: error: unexpected argument '--microbatches'; usage: toy --in NAME=FILE.npy ... --out-dir DIR "
         "[--bench N]"),
        ("context", ["--in", "x=x.npy", "--out-dir", "res", "--checkpoint", "ck.npz"],
         "unexpected argument '--checkpoint'"),
        ("state", ["--in", "x=y.npy", "--out-dir", "res"], "toy: error: y.npy: cannot open"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_2(toy, tmp_path, kind, args, message):
    np.save(tmp_path / "x.npy", X)
    res = _run(toy[kind], *args, cwd=tmp_path)
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("name", ["main_driver", "Main_Driver"])
def test_a_model_named_like_the_drivers_header_is_refused(name):
    """NAME.h, first on main.c's include path, would hide runtime/main_driver.h (the SPMD main's
    fc_spmd_main.h is in fc_'s name space, refused as such)."""
    from codegen.loaded import check_name
    from graphdef.errors import FlowcError

    with pytest.raises(FlowcError, match="hides flowc's runtime/main_driver.h"):
        check_name(name)
