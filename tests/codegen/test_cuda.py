"""The CUDA backend (codegen/backends/cuda/).

Without a GPU the generated CUDA runs here through the CPU simulator (runtime_c/cuda/sim.h,
``cc="g++"``): the same .cu file, kernels and host code, so every model below is checked
against the numpy interpreter. Wherever nvcc is installed (CI included) the same sources are
built with it for sm_80 and sm_90, warnings as errors, and the binary must refuse to run
without a GPU in one line. Tests marked ``cuda`` run the nvcc build and need a GPU.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import compiled_cuda, pipeline
from graphdef.errors import ExecutionError, FlowcError, ToolchainError

from .test_binary import ZOO_OUTPUTS, check_outputs, digits_graph, run_binary

ROOT = Path(__file__).resolve().parents[2]
SIM = "g++"
NVCC = shutil.which("nvcc") or shutil.which("/usr/local/cuda/bin/nvcc")


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    res = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return res.returncode == 0 and "GPU" in res.stdout


GPU = _has_gpu()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
needs_gpu = pytest.mark.skipif(not GPU, reason="no GPU on this machine")
rng = np.random.default_rng(3)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def cnn():
    """Convolutions (plain, grouped, depthwise, strided and dilated), batch norm, both poolings,
    a gemm with a transposed weight, a residual add."""
    g = gd.Graph("cnn")
    with g:
        x = gd.placeholder("x", (2, 4, 11, 11))
        h = gd.relu(gd.conv(x, gd.constant(f32(8, 4, 3, 3)), gd.constant(f32(8)), pads=(1, 1, 1, 1)))
        h = gd.batch_norm(h, *(gd.constant(np.abs(f32(8)) + 0.5) for _ in range(4)))
        d = gd.conv(h, gd.constant(f32(8, 1, 3, 3)), pads=(1, 1, 1, 1), group=8)
        q = gd.conv(
            d, gd.constant(f32(8, 2, 3, 3)), strides=(2, 2), dilations=(2, 2), group=4, pads=(2, 2, 2, 2)
        )
        p = gd.max_pool(h, (2, 2), strides=(2, 2)) + gd.avg_pool(q[:, :, :5, :5], (1, 1))
        f = gd.reshape(p, (2, -1))
        gd.gemm(f, gd.constant(f32(10, f.shape[1])), gd.constant(f32(10)), trans_b=True, alpha=0.5, name="y")
    return g, {"x": f32(2, 4, 11, 11)}


def encoder():
    """One transformer encoder block: layer norm, per-head batched products, softmax, GELU."""
    b, t, d, h = 2, 5, 16, 4
    g = gd.Graph("encoder")
    with g:
        x = gd.placeholder("x", (b, t, d))
        n = gd.layer_norm(x, gd.constant(np.abs(f32(d)) + 0.5), gd.constant(f32(d)))
        qkv = gd.matmul(n, gd.constant(f32(d, 3 * d) * 0.3))
        q, k, v = (gd.transpose(gd.reshape(qkv[:, :, i * d : (i + 1) * d], (b, t, h, d // h)), (0, 2, 1, 3))
                   for i in range(3))  # fmt: skip
        att = gd.softmax(gd.matmul(q, gd.transpose(k, (0, 1, 3, 2))) * 0.5)
        o = gd.reshape(gd.transpose(gd.matmul(att, v), (0, 2, 1, 3)), (b, t, d))
        y = x + gd.matmul(gd.gelu(gd.matmul(o, gd.constant(f32(d, 32) * 0.2))), gd.constant(f32(32, d) * 0.2))
        gd.identity(y, name="y")
    return g, {"x": f32(b, t, d)}


def mixed():
    """Integer and float16 steps: a gather, an argmax, a cast, integer sums, a float16 product."""
    g = gd.Graph("mixed")
    with g:
        ids = gd.placeholder("ids", (3, 4), "int64")
        e = gd.gather(gd.constant(f32(7, 6)), ids)
        gd.argmax(e, axis=-1, name="best")
        gd.reduce_sum(gd.cast(e * 10.0, "int32"), axes=(1,), name="sums")
        h = gd.cast(e, "float16")
        gd.matmul(h, gd.constant(f32(6, 5).astype(np.float16)), name="half")
    return g, {"ids": rng.integers(0, 7, (3, 4)).astype(np.int64)}


def reductions():
    """Sums, means, maxima and minima along inner, outer and several axes (a warp an output),
    a NaN in one row: it wins that row's maximum and minimum, as in numpy."""
    x = f32(3, 40, 5)
    x[1, 7, 2] = np.nan
    g = gd.Graph("reductions")
    with g:
        v = gd.placeholder("x", x.shape)
        gd.reduce_sum(v, axes=(1,), name="sum")
        gd.reduce_mean(v, axes=(0,), name="mean")
        gd.reduce_max(v, axes=(1, 2), name="max")
        gd.reduce_min(v, axes=(2,), keepdims=True, name="min")
        gd.reduce_sum(v, name="all")
    return g, {"x": x}


MODELS = {"cnn": cnn, "encoder": encoder, "mixed": mixed, "reductions": reductions}


def _check(g, feeds, got, names=None):
    names = names or list(got)
    want = gd.Session(g).run(feeds, names)
    for name, w in zip(names, want):
        tol = 3e-3 if w.dtype == np.float16 else 3e-5
        if w.dtype.kind == "f":
            np.testing.assert_allclose(got[name], w, rtol=tol, atol=tol, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], w, err_msg=name)


@pytest.mark.c
@pytest.mark.parametrize("model", sorted(MODELS))
def test_models_match_numpy_through_the_simulator(model):
    g, feeds = MODELS[model]()
    m = codegen.compile(g, target="cuda", cc=SIM)
    for _ in range(3):  # launched one by one, then captured into a CUDA Graph, then replayed
        _check(g, feeds, m(**feeds))
    m.use_graph(False)  # every kernel launched again instead of the captured graph: the same
    _check(g, feeds, m(**feeds))


# relative error bound against float32 (of the output's largest magnitude) per --precision:
# tf32 rounds products' inputs to 10 mantissa bits, bf16 to 7, fp16 stores every value in 10
TOLERANCE = {"tf32": 3e-3, "bf16": 2e-2, "fp16": 5e-3}


@pytest.mark.c
@pytest.mark.parametrize("precision", sorted(TOLERANCE))
@pytest.mark.parametrize("model", ["cnn", "encoder"])
def test_precisions_through_the_simulator(model, precision):
    """Products on tensor cores (runtime_c/cuda/mma.cuh, the simulator's warp matrix ops) and,
    for fp16, a float16 graph behind float32 inputs and outputs: near float32, not equal."""
    g, feeds = MODELS[model]()
    m = codegen.compile(g, target="cuda", cc=SIM, precision=precision)
    got, want = m(**feeds)["y"], gd.run(g, feeds, ["y"])[0]
    assert got.dtype == np.float32
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert 1e-6 < err < TOLERANCE[precision], err


def test_precision_refusals():
    with pytest.raises(FlowcError, match="sm_80 and newer"):
        compiled_cuda.export(cnn()[0], "/nonexistent/out", sm=(75,), precision="tf32", build_binary=False)
    g = gd.Graph("stateful")
    with g:
        v = gd.variable("v", np.zeros(3, np.float32))
        gd.assign_add(v, gd.placeholder("x", (3,)), name="y")
    with pytest.raises(FlowcError, match="fp16 converts inference graphs"):
        compiled_cuda.export(g, "/nonexistent/out", precision="fp16", build_binary=False)
    with pytest.raises(FlowcError, match="--precision 'fp8'"):
        compiled_cuda.export(cnn()[0], "/nonexistent/out", precision="fp8", build_binary=False)


@pytest.mark.c
def test_every_op_of_the_zoo_runs_through_the_simulator(zoo, zoo_feeds):
    m = codegen.compile(zoo, target="cuda", cc=SIM, outputs=ZOO_OUTPUTS)
    session = gd.Session(zoo)
    for _ in range(2):  # the second run replays the captured graph on the variables the first updated
        got, want = m(**zoo_feeds), session.run(zoo_feeds, ZOO_OUTPUTS)
        for name, w in zip(ZOO_OUTPUTS, want):
            np.testing.assert_allclose(got[name], w, rtol=2e-5, atol=2e-5, err_msg=name)


@pytest.mark.c
def test_a_bad_index_fails_the_run_in_one_line():
    g, feeds = mixed()
    m = codegen.compile(g, target="cuda", cc=SIM)
    with pytest.raises(ExecutionError, match="index input is out of range"):
        m(ids=np.full((3, 4), 9, np.int64))
    _check(g, feeds, m(**feeds))  # the failure is cleared: the next run is right


@pytest.mark.c
def test_sample_of_onnx_conformance_cases_through_the_simulator():
    sys.path.insert(0, str(ROOT / "tests" / "onnx"))
    pytest.importorskip("onnx")
    import conformance
    from test_conformance import _sample

    folders = {f.name: f for f in conformance.generate(conformance.default_cache())}
    names = [n for n in _sample("passed", 1) if n in folders]
    results = []
    for i in range(0, len(names), conformance.BATCH):
        batch = [folders[n] for n in names[i : i + conformance.BATCH]]
        results += conformance.run_batch(batch, lambda items: compiled_cuda.compile_many(items, cc=SIM))
    bad = [(r["case"], r["status"], r.get("reason", "")[:120]) for r in results if r["status"] != "passed"]
    assert len(results) >= 150 and not bad, bad


@pytest.mark.c
def test_project_folder_builds_and_runs_with_make_sim(tmp_path):
    mod, g = digits_graph()
    x = mod.load_data()[2][:2].reshape(2, 64)[:1]
    out = compiled_cuda.export(g, tmp_path / "net", name="net", build_binary=False)
    names = sorted(p.name for p in out.iterdir())
    for f in ("net.cu", "net.h", "main.c", "Makefile", "CMakeLists.txt", "metadata.json", "net_weights.bin"):
        assert f in names
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["target"] == "cuda" and meta["arena_bytes"] >= meta["arena_lower_bound"]
    subprocess.run(["make", "-C", str(out), "sim", "CXX=g++"], check=True, capture_output=True)
    res = run_binary(out / "net", {"x": x}, tmp_path / "res", "--bench", "2")
    assert res.returncode == 0, res.stderr
    assert "median_us=" in res.stdout
    check_outputs(tmp_path / "res", g, {"x": x}, ["probs"])


@pytest.mark.c
@pytest.mark.parametrize("model", ["zoo", *sorted(MODELS)])
def test_simulator_build_runs_clean_under_sanitizers(model, zoo, zoo_feeds, tmp_path):
    """The kernels and the host code on the CPU under AddressSanitizer and UBSan (`make sim
    SAN=...`): an out-of-bounds read or write of a kernel, in the arena or an input, stops it."""
    g, feeds, outputs = (zoo, zoo_feeds, ZOO_OUTPUTS) if model == "zoo" else (*MODELS[model](), None)
    out = compiled_cuda.export(g, tmp_path / "net", name="net", build_binary=False, outputs=outputs)
    san = "SAN=-fsanitize=address,undefined -fno-sanitize-recover=all -g1"  # line tables only: half the build
    subprocess.run(["make", "-C", str(out), "sim", "CXX=g++", san], check=True, capture_output=True)
    res = run_binary(out / "net", feeds, tmp_path / "res")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ERROR: AddressSanitizer" not in res.stderr and "runtime error" not in res.stderr
    files = {t["name"]: t["file"] for t in json.loads((out / "metadata.json").read_text())["outputs"]}
    _check(g, feeds, {n: np.load(tmp_path / "res" / f) for n, f in files.items()}, list(files))


@pytest.mark.c
@pytest.mark.mpi
@pytest.mark.parametrize("model", ["cnn", "encoder"])
def test_two_ranks_a_gpu_each_through_the_simulator(model, tmp_path):
    """--ranks 2: the SPMD program over MPI ranks whose parts run the generated CUDA (here
    through the simulator), transfers staged through pinned host memory; the outputs match
    numpy. Built with the folder's own Makefile (make sim)."""
    from codegen.backends.c import toolchain as ctool

    g, feeds = MODELS[model]()
    out = compiled_cuda.export(g, tmp_path / "net", name="net", ranks=2, build_binary=False)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["ranks"] == 2 and meta["target"] == "cuda"
    assert sum(r["sends"] for r in meta["per_rank"]) >= 1
    mpicc = ctool.find_mpicc()
    make = ["make", "-C", str(out), "sim", f"MPICC={mpicc}", f"MPICXX={Path(mpicc).with_name('mpicxx')}"]
    subprocess.run(make, check=True, capture_output=True)
    launcher = ctool.mpiexec_command(ctool.find_mpiexec(), 2)
    args = []
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--in", f"{name}={tmp_path / f'{name}.npy'}"]
    res = subprocess.run([*launcher, str(out / "net"), *args, "--out-dir", str(tmp_path / "res")],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    _check(g, feeds, {"y": np.load(tmp_path / "res" / "y.npy")}, ["y"])


@needs_nvcc
@pytest.mark.cuda
@pytest.mark.mpi
def test_nvcc_builds_two_ranks(tmp_path):
    out = compiled_cuda.export(encoder()[0], tmp_path / "net", name="net", ranks=2)
    assert (out / "net").is_file()


def test_device_views_read_dlpack_and_the_cuda_array_interface():
    """How CudaModel reads device arrays, checked on host arrays: DLPack (numpy exports it on
    the CPU) and a __cuda_array_interface__ dict give the address, shape, dtype and layout."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert compiled_cuda.device_view(a) == (a.ctypes.data, (3, 4), np.dtype(np.float32), True)
    assert compiled_cuda.device_view(a.T)[1:] == ((4, 3), np.dtype(np.float32), False)
    tail = np.arange(10, dtype=np.int64)[3:]
    assert compiled_cuda.device_view(tail)[:2] == (tail.ctypes.data, (7,))
    assert not compiled_cuda.on_gpu(a)  # a CPU DLPack device: the numpy path

    class Fake:
        __cuda_array_interface__ = {"shape": (2, 5), "typestr": "<f2", "data": (4096, False), "version": 3}

    assert compiled_cuda.on_gpu(Fake())
    assert compiled_cuda.device_view(Fake()) == (4096, (2, 5), np.dtype(np.float16), True)
    Fake.__cuda_array_interface__ = {**Fake.__cuda_array_interface__, "strides": (2, 4)}
    assert not compiled_cuda.device_view(Fake())[3]


def test_generation_is_byte_identical(tmp_path):
    g = encoder()[0]
    a = compiled_cuda.export(g, tmp_path / "a", name="net", build_binary=False)
    b = compiled_cuda.export(g, tmp_path / "b", name="net", build_binary=False)
    for f in sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file()):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_missing_nvcc_is_a_flowc_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("NVCC", str(tmp_path / "nvcc"))
    monkeypatch.setattr(shutil, "which", lambda p, *a, **k: None if "nvcc" in str(p) else "/usr/bin/" + p)
    with pytest.raises(ToolchainError, match="nvcc not found"):
        compiled_cuda.export(cnn()[0], tmp_path / "out", name="net")
    assert not (tmp_path / "out").exists()


def test_cli_refuses_options_that_are_for_c(tmp_path, capsys):
    from codegen.cli import main

    out = str(tmp_path / "o")
    assert main(["compile", "x.onnx", "-o", out, "--target", "cuda", "--sm", "eighty"]) != 0
    assert "--sm expects" in capsys.readouterr().err
    assert main(["compile", "x.onnx", "-o", out, "--target", "cuda", "--threads", "2"]) != 0
    assert "--threads" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- nvcc
@needs_nvcc
@pytest.mark.cuda
@pytest.mark.parametrize("model", ["digits", "zoo", *sorted(MODELS)])
def test_nvcc_builds_every_sample_warning_free(model, zoo, tmp_path):
    """nvcc for sm_80 and sm_90 with --Werror all-warnings and the host's -Wall -Wextra -Werror;
    without a GPU the binary stops in one line naming the cause, and leaves no output."""
    if model == "digits":
        g = digits_graph()[1]
        feeds = {"x": np.zeros((1, 64), np.float32)}
    elif model == "zoo":
        g, feeds = zoo, None
    else:
        g, feeds = MODELS[model]()
    outputs = ZOO_OUTPUTS if model == "zoo" else None
    out = compiled_cuda.export(g, tmp_path / "net", name="net", sm=(80, 90), outputs=outputs)
    assert (out / "net").is_file()
    if feeds is None or GPU:
        return
    res = run_binary(out / "net", feeds, tmp_path / "res")
    assert res.returncode == 3
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0], res.stderr
    assert not (tmp_path / "res").exists()


@needs_nvcc
@pytest.mark.cuda
@pytest.mark.parametrize("precision", sorted(TOLERANCE))
def test_nvcc_builds_every_precision(precision, tmp_path):
    """The tensor-core kernels of each precision, for sm_80 and sm_90, warnings as errors."""
    out = compiled_cuda.export(encoder()[0], tmp_path / "net", name="net", precision=precision)
    assert (out / "net").is_file()
    assert json.loads((out / "metadata.json").read_text())["precision"] == precision


@needs_nvcc
@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("precision", sorted(TOLERANCE))
def test_precisions_on_the_gpu(precision):
    g, feeds = encoder()
    m = codegen.compile(g, target="cuda", precision=precision)
    got, want = m(**feeds)["y"], gd.run(g, feeds, ["y"])[0]
    assert float(np.abs(got - want).max() / np.abs(want).max()) < TOLERANCE[precision]


@needs_nvcc
@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("model", sorted(MODELS))
def test_models_match_numpy_on_the_gpu(model):
    g, feeds = MODELS[model]()
    m = codegen.compile(g, target="cuda")
    _check(g, feeds, m(**feeds))
    m.use_graph(False)
    _check(g, feeds, m(**feeds))


@needs_nvcc
@needs_gpu
@pytest.mark.cuda
def test_zoo_on_the_gpu(zoo, zoo_feeds):
    m = codegen.compile(zoo, target="cuda", outputs=ZOO_OUTPUTS)
    _check(zoo, zoo_feeds, m(**zoo_feeds), ZOO_OUTPUTS)


def test_pipeline_options_carry_the_architectures():
    o = pipeline.Options(backend="cuda", sm=(86,))
    assert pipeline.run(cnn()[0], o, until="render").sources.metadata["sm"] == [86]
