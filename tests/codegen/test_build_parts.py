"""How a C build is cut for compile time (issue: compile time for users): the tile kernels
compiled apart (kernels/sgemm.c, kernels/conv_tiles.c, FC_KERNELS_APART) and kept in the object
cache, a large model's steps in files of their own compiled on several cores, and the kernel
objects started before the Python stages end (``prefetch``). Each way checked against numpy."""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import pipeline
from codegen.backends.c import emit, toolchain
from codegen.target import Target

pytestmark = pytest.mark.c


def mlp(layers: int = 6, width: int = 48, seed: int = 0, grow: int = 0) -> gd.Graph:
    """Dense layers with biases and a tanh: every product a packed-GEMM step of its own; each
    layer ``grow`` wider than the one before (0: all alike)."""
    rng = np.random.default_rng(seed)
    g = gd.Graph(f"mlp{seed}")
    with g:
        h = gd.placeholder("x", (8, width))
        for i in range(layers):
            n_in, n_out = width + i * grow, width + (i + 1) * grow
            w = gd.constant((rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32))
            b = gd.constant(rng.standard_normal(n_out).astype(np.float32))
            h = gd.tanh(gd.matmul(h, w) + b)
        g.set_outputs(gd.identity(h, name="y"))
    return g


def feeds(width: int = 48):
    return {"x": np.random.default_rng(7).standard_normal((8, width)).astype(np.float32)}


def expect(g, f):
    return gd.Session(g).run(f, ["y"])[0]


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty build cache of this test's own."""
    monkeypatch.setenv("FLOWC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def compiles(monkeypatch):
    """The sources every C compile of this test runs on (``cc -c FILE``), in order."""
    seen = []
    run = toolchain.run

    def recording(cmd, cwd=None, *args, **kwargs):
        if "-c" in cmd:
            seen.append(cmd[cmd.index("-c") + 1])
        return run(cmd, cwd, *args, **kwargs)

    monkeypatch.setattr(toolchain, "run", recording)
    return seen


def test_a_model_with_products_declares_the_tile_kernels_and_links_them_apart():
    src = pipeline.run(mlp(), pipeline.Options()).sources
    if not pipeline.Options().target.spec.packed_gemm:
        pytest.skip("this host's target has no packed GEMM")
    assert "runtime/kernels/sgemm.c" in src.c_files
    assert "#define FC_KERNELS_APART 1" in src.files["model.c"]
    small = gd.Graph("small")
    with small:
        gd.relu(gd.placeholder("x", (4,)), name="y")
    plain = pipeline.run(small, pipeline.Options()).sources
    assert not any(f.startswith("runtime/kernels/") for f in plain.c_files)
    assert "FC_KERNELS_APART" not in plain.files["model.c"]


def test_a_large_product_calls_the_gemm_driver_compiled_apart_and_a_small_one_inlines_it(tmp_path):
    """The products' driver (fc_sgemm) of a large product is compiled once into kernels/sgemm.c,
    not inlined into the model's own files (most of their compile time); a small product
    (under steps.APART_FLOPS) inlines it, its plan a constant there."""
    options = pipeline.Options()
    if not options.target.spec.packed_gemm:
        pytest.skip("this host's target has no packed GEMM")
    cmd = toolchain.compile_command(toolchain.find_cc(None, options.target), options.target)

    def driver(graph, folder):  # nm's type of the driver's symbol (fc_sg_<isa>_r<mr>_sgemm) in each object
        src = pipeline.run(graph, options).sources
        toolchain.write_sources(src, folder, options.target)
        types = []
        for f in ("model.c", "runtime/kernels/sgemm.c"):
            obj = f.replace("/", "_") + ".o"
            toolchain.run([*cmd, "-c", f, "-o", obj], folder)
            out = subprocess.run(["nm", obj], cwd=folder, capture_output=True, text=True, check=True).stdout
            found = [line.split() for line in out.splitlines() if re.search(r"fc_sg_\w+_sgemm$", line)]
            types.append([fields[-2] for fields in found])
        return types

    small, large = mlp(layers=2), mlp(layers=1, width=1280)  # 8 x 48 x 48; 8 x 1280 x 1280 (26 MFLOP)
    assert driver(small, tmp_path / "small")[0] == []
    model, kernels = driver(large, tmp_path / "large")
    assert model == ["U"] and kernels in (["W"], ["T"])


def test_a_microcontroller_library_keeps_its_kernels_in_the_model():
    src = pipeline.run(mlp(), pipeline.Options(target=Target("cortex-m4"))).sources
    assert not any(f.startswith("runtime/kernels/") for f in src.c_files)


def test_the_kernel_objects_are_compiled_once_and_taken_from_the_cache(cache, compiles, tmp_path):
    g1, g2 = mlp(seed=1), mlp(seed=2)
    f = feeds()
    close(codegen.compile(g1, cache=False)(**f)["y"], expect(g1, f))
    first = list(compiles)
    assert first.count("runtime/kernels/sgemm.c") == 1
    close(codegen.compile(g2, cache=False)(**f)["y"], expect(g2, f))
    second = compiles[len(first) :]
    assert "model.c" in second and "runtime/kernels/sgemm.c" not in second
    assert len(list((cache / "objects").glob("*.o"))) >= 1


def test_steps_alike_share_one_function():
    """Layers of one shape make one step function, called with each layer's pointers (emit.py:
    less C to compile, less code in the binary); the results are each layer's own."""
    g = mlp(layers=6)
    src = pipeline.run(g, pipeline.Options()).sources
    text = "".join(src.files[f] for f in src.c_files if f in src.files)
    defined = re.findall(r"^(?:static )?FC_NOINLINE int (model_step_\d+)\(", text, re.M)
    defined += re.findall(r"^FC_HIDDEN FC_NOINLINE int (model_step_\d+)\(.*\{$", text, re.M)
    run = src.files["model.c"][src.files["model.c"].index("int model_run(") :]
    called = re.findall(r"\b(model_step_\d+)\(", run)
    assert len(called) >= 6 and len(set(called)) < len(called), called
    assert set(called) <= set(defined), (called, defined)
    f = feeds()
    close(codegen.compile(g, cache=False)(**f)["y"], expect(g, f))


def test_a_large_model_is_split_into_step_files_built_apart(monkeypatch, cache, compiles, tmp_path):
    monkeypatch.setattr(emit, "STEP_FILE_BYTES", 3000)  # a handful of steps a file
    g = mlp(layers=10, grow=4)  # no two steps alike
    src = pipeline.run(g, pipeline.Options()).sources
    parts = [f for f in src.c_files if f.startswith("model_steps")]
    assert len(parts) >= 2, src.c_files
    for part in parts:
        assert part in src.files and "FC_HIDDEN FC_NOINLINE int model_step_" in src.files[part]
    f = feeds()
    model = codegen.compile(g, cache=False)
    np.testing.assert_allclose(model(**f)["y"], expect(g, f), rtol=1e-5, atol=1e-5)
    assert set(parts) <= set(compiles)
    # the standalone program and the folder's own Makefile build the same files
    out = codegen.export(g, tmp_path / "proj", cache=False)
    np.save(tmp_path / "x.npy", f["x"])
    argv = [str(out / "model"), "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", str(tmp_path / "res")]
    run = subprocess.run(argv)
    assert run.returncode == 0
    np.testing.assert_allclose(np.load(tmp_path / "res" / "y.npy"), expect(g, f), rtol=1e-5, atol=1e-5)
    made = subprocess.run(["make", "-s", "-B", "model"], cwd=out, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr


def test_models_split_into_step_files_share_one_bundle(monkeypatch, cache):
    monkeypatch.setattr(emit, "STEP_FILE_BYTES", 3000)
    graphs = [mlp(layers=8, seed=3), mlp(layers=8, seed=4)]
    models = codegen.compile_many([(f"m{k}", g) for k, g in enumerate(graphs)])
    f = feeds()
    for g, model in zip(graphs, models):
        np.testing.assert_allclose(model(**f)["y"], expect(g, f), rtol=1e-5, atol=1e-5)


def test_the_kernels_are_built_while_the_python_stages_run_and_not_again(cache, compiles, tmp_path):
    if not pipeline.Options().target.spec.packed_gemm:
        pytest.skip("this host's target has no packed GEMM")
    g = mlp(seed=5)
    options = pipeline.Options(product="program")
    c = pipeline.run(g, options, until="build", folder=tmp_path / "p")
    assert c.results["build"].path.is_file()
    assert compiles.count("runtime/kernels/sgemm.c") == 1  # by prefetch, taken by the build
    for pending in list(toolchain._inflight.values()):  # conv_tiles.c, which this model does not use
        pending.result()
    assert not toolchain._inflight and compiles.count("runtime/kernels/conv_tiles.c") == 1
    assert len(list((cache / "objects").glob("*.o"))) >= 2


def test_a_cache_that_cannot_be_written_leaves_the_build_working(tmp_path, monkeypatch):
    """$FLOWC_CACHE naming a file: the kernel objects are neither prefetched nor kept, and the
    program still builds and computes what numpy computes."""
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("FLOWC_CACHE", str(tmp_path / "not-a-folder"))
    g, f = mlp(seed=6), feeds()
    with warnings.catch_warnings():  # the memory planner's C core may not be cached either
        warnings.simplefilter("ignore", RuntimeWarning)
        out = codegen.export(g, tmp_path / "proj", cache=False)
    np.save(tmp_path / "x.npy", f["x"])
    argv = [str(out / "model"), "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", str(tmp_path / "res")]
    assert subprocess.run(argv).returncode == 0
    close(np.load(tmp_path / "res" / "y.npy"), expect(g, f))


def test_the_next_process_renders_from_the_templates_compiled_before(tmp_path):
    """The templates' compiled code is kept in the cache folder (render/sources.py): a second
    process renders the same sources from it, and a cache that is a file is passed over."""
    digits = f"{Path(__file__).resolve().parents[2] / 'samples' / 'digits.py'}:build"
    (tmp_path / "a-file").write_text("")

    def compile_with(cache, out):
        env = {**os.environ, "FLOWC_CACHE": str(cache)}
        argv = [sys.executable, "-m", "codegen.cli", "compile", digits, "-o", str(out), "--no-build"]
        subprocess.run([*argv, "--no-cache"], check=True, env=env, capture_output=True)
        return {f.name: f.read_bytes() for f in out.iterdir() if f.suffix in (".c", ".h")}

    first = compile_with(tmp_path / "cache", tmp_path / "one")
    kept = sorted((tmp_path / "cache" / "templates").iterdir())
    assert kept, "no compiled template kept"
    assert compile_with(tmp_path / "cache", tmp_path / "two") == first
    assert sorted((tmp_path / "cache" / "templates").iterdir()) == kept  # read, not compiled again
    assert compile_with(tmp_path / "a-file", tmp_path / "three") == first


def test_a_kernel_the_prefetch_has_not_started_is_compiled_by_the_build(cache, compiles, tmp_path):
    """A kernel file queued for prefetch behind another is taken over by the build, which
    compiles it beside its other files instead of waiting for the queue (a cold compile of a
    network with convolutions: the direct-conv tiles no longer wait for the GEMM tiles)."""
    target = Target()
    if not target.spec.packed_gemm:
        pytest.skip("this host's target has no packed GEMM")
    cmd = toolchain.compile_command(toolchain.find_cc(None, target), target)
    gate = threading.Event()
    toolchain.prefetch(cmd, [], target)  # the prefetch thread, busy until the gate opens
    if not toolchain._prefetcher:
        toolchain._prefetcher.append(concurrent.futures.ThreadPoolExecutor(1, "flowc-kernels"))
    busy = toolchain._prefetcher[0].submit(gate.wait, 60)
    toolchain.prefetch(cmd, ["runtime/kernels/conv_tiles.c"], target)
    assert len(toolchain._inflight) == 1  # queued behind the busy one
    toolchain.copy_runtime(tmp_path, target)
    done = []

    def build():
        with toolchain.objects(cmd, ["runtime/kernels/conv_tiles.c"], tmp_path) as objs:
            done.append(objs)

    builder = threading.Thread(target=build)
    builder.start()
    builder.join(timeout=30)
    gate.set()
    busy.result()
    assert done and not builder.is_alive(), "the build waited for the queued prefetch"
    assert compiles.count("runtime/kernels/conv_tiles.c") == 1 and not toolchain._inflight
