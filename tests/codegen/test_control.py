"""Loops and branches in generated C (codegen/control.py): run-time trip counts (0, 1, many,
the bound and past it), nested loops, a loop inside a branch and a branch inside a loop, only
the taken branch run, gradients through both, code and arena independent of the trip count,
the schedule's regions, and a standalone binary under the sanitizers."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import control, pipeline
from graphdef.errors import ExecutionError
from graphdef.ops.control import loop

pytestmark = pytest.mark.c


def check(model, graph, feeds, names):
    want = gd.run(graph, feeds, names)
    got = model(**feeds)
    for name, w in zip(names, want):
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        if w.dtype.kind == "f":  # the C compiler contracts a * b + c into one rounding
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


def counted_loop():
    """s = s * 1.5 + x, n times (n fed), then a branch on the sign of the sum."""
    with gd.Graph("counted") as g:
        n = gd.placeholder("n", (), "int32")
        x = gd.placeholder("x", (3,))
        i, s = gd.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s * 1.5 + x), [0, gd.zeros((3,))])
        gd.identity(i, name="i")
        gd.identity(s, name="s")
        gd.cond(gd.reduce_sum(s) > 0.0, lambda: s * 2.0, lambda: -s, name="y")
        g.set_outputs("i", "s", "y")
    return g


@pytest.fixture(scope="module")
def counted():
    g = counted_loop()
    return g, codegen.compile(g)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 40])
def test_run_time_trip_counts(counted, n):
    g, model = counted
    for x in ([1, -2, 3], [-1, -2, 2]):
        check(model, g, {"n": np.int32(n), "x": np.array(x, np.float32)}, ["i", "s", "y"])


def scanned_loop():
    with gd.Graph("scanned") as g:
        x = gd.placeholder("x", (4,))
        m = gd.placeholder("m", (), "int64")
        (s,), (rows, iters), count = loop(
            lambda i, s: gd.reduce_sum(s) < 20.0,
            lambda i, s: ([s + gd.abs(x)], [s * 2.0, i]),
            [gd.zeros((4,))],
            trip=m,
            max_iterations=6,
            bound="error",
            name="L",
        )
        for t, name in ((s, "s"), (rows, "rows"), (iters, "iters"), (count, "count")):
            gd.identity(t, name=name)
        g.set_outputs("s", "rows", "iters", "count")
    return g


@pytest.mark.parametrize("m", [0, 1, 3, 6])
def test_trip_count_condition_and_scans(m):
    g = scanned_loop()
    model = codegen.compile(g)
    for x in ([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.1], [9, 9, 9, 9]):
        feeds = {"x": np.array(x, np.float32), "m": np.int64(m)}
        check(model, g, feeds, ["s", "rows", "iters", "count"])


def test_past_the_bound_is_an_error_in_both():
    g = scanned_loop()
    model = codegen.compile(g)
    feeds = {"x": np.full(4, 0.1, np.float32), "m": np.int64(10)}
    with pytest.raises(ExecutionError, match="bound of 6 iterations"):
        gd.run(g, feeds, ["s"])
    with pytest.raises(ExecutionError, match="a loop reached its compiled bound of iterations"):
        model(**feeds)


def test_nested_loops_and_branches():
    """A loop inside a loop, a branch inside the inner loop, a loop inside a branch."""
    with gd.Graph("nested") as g:
        n = gd.placeholder("n", (), "int32")
        x = gd.placeholder("x", (2, 3))

        def inner(i, s):
            def step(j, t):
                bumped = gd.cond(gd.reduce_max(t) > 4.0, lambda: t * 0.5, lambda: t + x)
                return j + 1, bumped

            _, t = gd.while_loop(lambda j, t: j < i + 1, step, [0, s])
            return i + 1, t

        i, s = gd.while_loop(lambda i, s: i < n, inner, [0, gd.zeros((2, 3))])
        y = gd.cond(
            i > 2,
            lambda: gd.while_loop(lambda k, v: k < 3, lambda k, v: (k + 1, gd.tanh(v) + s), [0, s])[1],
            lambda: s - 1.0,
        )
        gd.identity(y, name="y")
        gd.identity(s, name="s")
    model = codegen.compile(g, outputs=["y", "s"])
    rng = np.random.default_rng(1)
    for n in (0, 1, 2, 3, 5):
        check(model, g, {"n": np.int32(n), "x": rng.normal(size=(2, 3)).astype(np.float32)}, ["y", "s"])


def test_only_the_taken_branch_runs():
    """An index out of range in the branch not taken is no error (it is in the one taken)."""
    with gd.Graph("taken") as g:
        k = gd.placeholder("k", (), "int32")
        x = gd.placeholder("x", (4,))
        y = gd.cond(k < 4, lambda: gd.gather(x, k), lambda: gd.reduce_sum(x))
        gd.identity(y, name="y")
    model = codegen.compile(g, outputs=["y"])
    x = np.arange(4, dtype=np.float32)
    for k in (0, 3, 4, 100):
        check(model, g, {"k": np.int32(k), "x": x}, ["y"])


def test_gradients_through_loop_and_branch_compile():
    with gd.Graph("grad") as g:
        x = gd.placeholder("x", (3,), "float64")
        w = gd.placeholder("w", (3,), "float64")
        n = gd.placeholder("n", (), "int32")
        _, s = gd.while_loop(
            lambda i, s: i < n, lambda i, s: (i + 1, gd.tanh(s * w + x)), [0, x * 0.5], max_iterations=8
        )
        c = gd.cond(gd.reduce_sum(s) > 0.0, lambda: s * w, lambda: s - x)
        loss = gd.reduce_sum(c * c, name="loss")
        gx, gw = gd.gradients(loss, [x, w])
        gd.identity(gx, name="gx")
        gd.identity(gw, name="gw")
    model = codegen.compile(g, outputs=["loss", "gx", "gw"])
    # the gradient's copy of the forward loop (stacking each iteration's values) runs in its
    # place: one forward loop and the reverse one
    steps = pipeline.run(g, pipeline.Options(outputs=("loss", "gx", "gw")), until="schedule").results[
        "schedule"
    ]
    assert [n.op for n in steps.steps].count("loop_begin") == 2
    rng = np.random.default_rng(0)
    for n in (0, 1, 3, 8, 11):
        feeds = {"x": rng.normal(size=3), "w": rng.normal(size=3), "n": np.int32(n)}
        want = gd.run(g, feeds, ["loss", "gx", "gw"])
        got = model(**feeds)
        for name, v in zip(["loss", "gx", "gw"], want):
            np.testing.assert_allclose(got[name], v, rtol=1e-12, atol=1e-12, err_msg=name)


def fixed_loop(steps: int):
    with gd.Graph("fixed") as g:
        x = gd.placeholder("x", (8,))
        w = gd.constant(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
        _, h = gd.while_loop(
            lambda i, h: i < steps, lambda i, h: (i + 1, gd.tanh(gd.matmul(h[None], w)[0] + x)), [0, x]
        )
        gd.identity(h, name="h")
    return g


def test_code_and_arena_do_not_grow_with_the_trip_count():
    made = {}
    for steps in (16, 2048):
        c = pipeline.run(fixed_loop(steps), pipeline.Options(outputs=("h",)), until="render")
        files = c.results["render"].files
        text = "".join(v for k, v in sorted(files.items()) if k.endswith((".c", ".h")) and isinstance(v, str))
        made[steps] = (c.program.arena_bytes, re.sub(r"\d+", "0", text))
    assert made[16] == made[2048]
    g = fixed_loop(2048)
    check(codegen.compile(g, outputs=["h"]), g, {"x": np.linspace(0, 1, 8, dtype=np.float32)}, ["h"])


def test_a_region_stays_together_and_invariants_leave_it():
    """The schedule keeps a loop's nodes between its opening and its end; a node of the body
    that reads only outer values runs once, before the loop."""
    with gd.Graph("invariant") as g:
        x = gd.placeholder("x", (4,))
        w = gd.placeholder("w", (4,))
        _, s = gd.while_loop(lambda i, s: i < 5, lambda i, s: (i + 1, s + gd.exp(w) * x), [0, x])
        gd.identity(s, name="s")
    c = pipeline.run(g, pipeline.Options(outputs=("s",)), until="schedule")
    steps = list(c.results["schedule"].steps)
    ((b, e),) = control.loop_extents(steps)
    inside = {n.op for n in steps[b + 1 : e]}
    outside = {n.op for n in steps[:b]}
    assert "exp" in outside or any("exp" in str(n.attrs.get("program", "")) for n in steps[:b]), steps
    assert "loop_check" in inside
    check(
        codegen.compile(g, outputs=["s"]),
        g,
        {"x": np.ones(4, np.float32), "w": np.zeros(4, np.float32)},
        ["s"],
    )


def test_a_saved_loop_compiles_the_same(tmp_path):
    g = counted_loop()
    gd.save(g, tmp_path / "loop.flowc")
    again = gd.load(tmp_path / "loop.flowc")
    assert again == g
    a = pipeline.run(g, pipeline.Options(), until="render").results["render"].files["model.c"]
    b = pipeline.run(again, pipeline.Options(), until="render").results["render"].files["model.c"]
    assert a == b


def test_the_binary_runs_loops_clean_under_the_sanitizers(tmp_path):
    g = counted_loop()
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g1", "-O1"]
    out = codegen.export(g, tmp_path / "san", name="san", flags=flags)
    for n, x in ((0, [1, 2, 3]), (5, [1, -2, 3]), (9, [-1, -2, 3])):
        feeds = {"n": np.int32(n), "x": np.array(x, np.float32)}
        args = [str(out / "san")]
        for name, value in feeds.items():
            np.save(tmp_path / f"{name}.npy", value)
            args += ["--in", f"{name}={tmp_path / f'{name}.npy'}"]
        res = subprocess.run(args + ["--out-dir", str(tmp_path / "res")], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr
        for name, w in zip(["i", "s", "y"], gd.run(g, feeds, ["i", "s", "y"])):
            np.testing.assert_allclose(np.load(tmp_path / "res" / f"{name}.npy"), w, rtol=1e-6, err_msg=name)


def test_state_changes_inside_a_loop_are_refused():
    with gd.Graph("state") as g:
        with pytest.raises(gd.FlowcError, match="loop or branch"):
            gd.while_loop(lambda i: i < 3, lambda i: gd.variable("v", 1.0) * 0 + i, [0])
    del g


def test_loops_and_branches_in_cuda_through_the_simulator():
    """The CUDA backend runs a loop on the host between its launches (the condition, the trip
    count and a branch's predicate read back, the count written to the device each iteration):
    the interpreter's results through the CPU simulator, the bound an error in one line."""
    g = scanned_loop()
    model = codegen.compile(g, target="cuda", cc="g++")
    for m in (0, 1, 3, 6):
        for x in ([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.1]):
            check(model, g, {"x": np.array(x, np.float32), "m": np.int64(m)}, ["s", "rows", "iters", "count"])
    with pytest.raises(ExecutionError, match="a loop reached its compiled bound of iterations$"):
        model(x=np.full(4, 0.1, np.float32), m=np.int64(10))
    g = counted_loop()
    model = codegen.compile(g, target="cuda", cc="g++")
    for n in (0, 1, 7):
        for x in ([1, -2, 3], [-1, -2, 2]):
            check(model, g, {"n": np.int32(n), "x": np.array(x, np.float32)}, ["i", "s", "y"])


@pytest.mark.cuda
def test_loops_build_with_nvcc(tmp_path):
    """A loop with a branch after it, and one with a trip count, scans and a bound, for sm_80
    and sm_90, warnings as errors."""
    import shutil

    from codegen import compiled_cuda

    if not shutil.which("nvcc"):
        pytest.skip("nvcc not installed")
    for k, g in enumerate((counted_loop(), scanned_loop())):
        out = compiled_cuda.export(g, tmp_path / f"net{k}", name="net", sm=(80, 90))
        assert (out / "net").is_file()


@pytest.mark.cross
def test_loops_and_branches_on_a_microcontroller(tmp_path):
    """The counted loop and its branch on the emulated Cortex-M4 board: the interpreter's
    results for 0, 1 and 9 iterations."""
    import shutil

    from codegen.backends.c import mcu
    from codegen.target import Target

    target = Target("cortex-m4")
    if not shutil.which(target.compiler) or not shutil.which(target.spec.qemu):
        pytest.skip(f"{target.compiler} or {target.spec.qemu} missing")
    g = counted_loop()
    folder = codegen.export(g, tmp_path / "m4", name="m4", arch="cortex-m4")
    for n, x in ((0, [1, 2, 3]), (1, [1, -2, 3]), (9, [-1, -2, 2])):
        feeds = {"n": np.int32(n), "x": np.array(x, np.float32)}
        got = mcu.run_firmware(folder, feeds)["outputs"]
        for name, want in zip(["i", "s", "y"], gd.run(g, feeds, ["i", "s", "y"])):
            np.testing.assert_allclose(got[name], want, rtol=1e-6, err_msg=f"{name} after {n}")
