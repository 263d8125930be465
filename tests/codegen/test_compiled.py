"""codegen.compile: in-process models through cffi, their checks, state, errors and the cache."""

from __future__ import annotations

import time

import numpy as np
import pytest

import codegen
import graphdef as gd

pytestmark = pytest.mark.c


def _mlp(seed=0):
    rng = np.random.default_rng(seed)
    g = gd.Graph("mlp")
    with g:
        x = gd.placeholder("x", (2, 8))
        w = gd.variable("w", rng.standard_normal((8, 4)).astype(np.float32))
        gd.softmax(gd.relu(gd.matmul(x, w) + 1.0), name="y")
    return g


def test_compiled_model_matches_the_interpreter_and_returns_fresh_arrays():
    g = _mlp()
    m = codegen.compile(g)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    a, b = m(x=x)["y"], m.run({"x": x})["y"]
    np.testing.assert_allclose(a, gd.run(g, {"x": x}, ["y"])[0], rtol=1e-6)
    assert a is not b and np.array_equal(a, b)
    assert m.arena_bytes >= m.lower_bound_bytes > 0
    assert [t.name for t in m.inputs] == ["x"] and m.outputs[0].shape == (2, 4)


@pytest.mark.parametrize(
    "feeds,match",
    [
        ({"x": np.zeros((3, 8), np.float32)}, "has shape \\(3, 8\\), expected \\(2, 8\\)"),
        ({"x": np.zeros((2, 8))}, "has dtype float64, expected float32"),
        ({}, "needs feed\\(s\\) 'x' \\(float32\\[2,8\\]\\)"),
        ({"x": np.zeros((2, 8), np.float32), "z": 1}, "has no input\\(s\\) 'z'"),
    ],
)
def test_bad_feeds_are_refused(feeds, match):
    m = codegen.compile(_mlp())
    with pytest.raises(gd.FeedError, match=match):
        m.run(feeds)


def test_feeds_in_any_layout_read_as_the_values_they_hold():
    g = _mlp(4)
    m = codegen.compile(g)
    x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
    want = m(x=x)["y"]
    wide = np.zeros((2, 16), np.float32)
    wide[:, ::2] = x
    for form in (np.asfortranarray(x), wide[:, ::2], x.tolist()):
        np.testing.assert_array_equal(m(x=form)["y"], want)


def test_threads_calling_one_model_at_once_each_get_their_own_arena():
    """Python threads calling one compiled model at the same time (cffi releases the GIL) each
    run in an arena of their own, kept between their calls."""
    import threading

    rng = np.random.default_rng(6)
    g = gd.Graph("deep")
    with g:
        h = gd.placeholder("x", (64, 128))
        for _ in range(4):
            h = gd.tanh(gd.matmul(h, gd.constant(rng.standard_normal((128, 128)).astype(np.float32) * 0.1)))
        gd.identity(h, name="y")
    m = codegen.compile(g)
    xs = [rng.standard_normal((64, 128)).astype(np.float32) for _ in range(4)]
    want = [m(x=x)["y"] for x in xs]
    bad = []

    def work(i):
        for _ in range(40):
            if not np.array_equal(m(x=xs[i])["y"], want[i]):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_unchanged_graph_is_not_rebuilt():
    codegen.compile(_mlp(3))
    t0 = time.perf_counter()
    m = codegen.compile(_mlp(3))  # a new but equal graph: served from the cache
    assert time.perf_counter() - t0 < 1.0
    assert m(x=np.ones((2, 8), np.float32))["y"].shape == (2, 4)


def test_variables_keep_their_state_across_calls_like_the_interpreter():
    with gd.Graph("counter") as g:
        total = gd.variable("total", np.zeros(3, np.float32))
        x = gd.placeholder("x", (3,))
        new = gd.assign_add(total, x, name="new")
        g.set_outputs(gd.mul(total, 1.0, name="before"), new)
    m = codegen.compile(g)
    for step in range(1, 4):
        out = m(x=np.ones(3, np.float32))
        assert out["new"].tolist() == [step] * 3 and out["before"].tolist() == [step - 1] * 3
        gd.run(g, {"x": np.ones(3, np.float32)}, ["new"])
    assert m.variable("total").tolist() == gd.session(g).variable("total").tolist() == [3, 3, 3]
    m.reset()
    assert m.variable("total").tolist() == [0, 0, 0]


def test_runtime_errors_come_back_as_flowc_errors():
    with gd.Graph("lookup") as g:
        i = gd.placeholder("i", (2,), "int64")
        gd.gather(gd.constant(np.arange(3, dtype=np.float32)), i, name="y")
    m = codegen.compile(g)
    assert m(i=np.array([2, -3]))["y"].tolist() == [2, 0]
    with pytest.raises(gd.ExecutionError, match="index input is out of range"):
        m(i=np.array([0, 3]))


def test_missing_compiler_and_failing_build_name_the_command(monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(gd.ToolchainError, match="no C compiler found \\(looked for no-such-cc\\)"):
        codegen.compile(_mlp(5))
    monkeypatch.delenv("CC")
    with pytest.raises(gd.ToolchainError, match="build failed with .* -fno-such-flag .*error") as err:
        codegen.compile(_mlp(6), flags=["-fno-such-flag"])
    assert "\n" not in str(err.value)


def test_model_names_must_be_c_identifiers():
    with pytest.raises(gd.FlowcError, match="must be a C identifier"):
        codegen.compile(_mlp(), name="my-model")


def test_the_cache_key_changes_with_every_option():
    """Every field of pipeline.Options reaches the build cache key (outputs through graph_key):
    a changed option is never answered with a build made under another."""
    import dataclasses

    from codegen import pipeline
    from codegen.cache import key_options
    from codegen.target import Target

    base = pipeline.Options()
    changed = {
        "target": Target("host", portable=True), "backend": "cuda", "planner": "greedy_by_size",
        "time_limit": 1.0, "schedule": "topological", "cc": "clang", "flags": ("-O1",), "name": "other",
        "weights": "blob", "product": "program", "fold_limit": 1, "ranks": 2, "placement": "greedy",
        "compress": "fp16", "max_ram": 1024, "alpha": 1e-3, "beta": 1e3, "allreduce": "float16",
        "freeze": False, "sm": (80,), "precision": "fp16", "trainer": "train", "max_flash": 1024,
        "bucket_bytes": 4096, "run_flops": 1e9, "run_bandwidth": 1e9, "accumulate": True, "shards": 2,
        "lengths": (("x", 0),),
    }  # fmt: skip
    fields = {f.name for f in dataclasses.fields(pipeline.Options)} - {"outputs"}
    assert set(changed) == fields, "a new option: add it here with a changed value"
    key = key_options(base)
    for name, value in changed.items():
        assert key_options(base.with_(**{name: value})) != key, name


def test_a_repeated_export_is_answered_from_the_cache(tmp_path, monkeypatch):
    """The second export of the same graph and options copies the stored project (binary
    included, byte for byte and executable) without running the compiler; another option or
    ``cache=False`` builds anew."""
    import os

    from codegen.backends.c import toolchain

    first = codegen.export(_mlp(5), tmp_path / "a", name="net")
    calls = []
    real = toolchain.run
    monkeypatch.setattr(toolchain, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    second = codegen.export(_mlp(5), tmp_path / "b", name="net")
    assert calls == []
    files = sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file())
    assert files == sorted(str(p.relative_to(second)) for p in second.rglob("*") if p.is_file())
    assert "net" in files and "runtime/flowc_rt.h" in files
    for f in files:
        assert (first / f).read_bytes() == (second / f).read_bytes(), f
    assert os.access(second / "net", os.X_OK)
    codegen.export(_mlp(5), tmp_path / "c", name="net", threads=2)
    assert calls, "another option must build"
    calls.clear()
    codegen.export(_mlp(5), tmp_path / "d", name="net", cache=False)
    assert calls, "cache=False must build"


def test_a_build_put_in_place_by_another_process_is_kept(tmp_path):
    """Two processes (test workers, two compiles) building one key: the second to finish keeps
    the first's folder, which the first may be loading, and drops its own; an incomplete folder
    there is replaced."""
    from codegen.cache import _place

    folder, mine = tmp_path / "key", tmp_path / "mine"
    folder.mkdir()
    (folder / "lib.so").write_text("first")
    mine.mkdir()
    (mine / "lib.so").write_text("second")
    _place(mine, folder, (folder / "lib.so").is_file)
    assert (folder / "lib.so").read_text() == "first"

    (folder / "lib.so").unlink()
    (folder / "partial").write_text("")
    mine.mkdir(exist_ok=True)
    (mine / "lib.so").write_text("second")
    _place(mine, folder, (folder / "lib.so").is_file)
    assert (folder / "lib.so").read_text() == "second" and not (folder / "partial").exists()
