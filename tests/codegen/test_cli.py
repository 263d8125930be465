"""The flowc command line: compile and inspect, and clean failures."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import graphdef as gd

SCHEDULE_HEAD = (
    "schedule (step, op, node, ASAP us, ALAP us, slack us, flops; <- the model file's nodes it computes):"
)

ROOT = Path(__file__).resolve().parents[2]
DIGITS = f"{ROOT / 'samples' / 'digits.py'}:build"


def flowc(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "codegen.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=env,
    )


@pytest.mark.c
def test_compile_builds_a_binary_that_runs(tmp_path):
    res = flowc("compile", DIGITS, "-o", tmp_path / "out", "--name", "net")
    assert res.returncode == 0, res.stderr
    assert "arena" in res.stdout and (tmp_path / "out" / "net").is_file()
    meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert {"inputs", "outputs", "arena_bytes", "arena_lower_bound", "weight_bytes", "schedule"} <= set(meta)
    np.save(tmp_path / "x.npy", np.zeros((1, 64), np.float32))
    run = subprocess.run(
        [tmp_path / "out" / "net", "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", tmp_path / "r"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and np.load(tmp_path / "r" / "probs.npy").shape == (1, 10)


def test_compile_without_build_and_from_a_saved_graph(tmp_path):
    with gd.Graph("saved") as g:
        gd.relu(gd.placeholder("x", (4,)), name="y")
    gd.save(g, tmp_path / "m.flowc")
    res = flowc("compile", tmp_path / "m.flowc", "-o", tmp_path / "out", "--name", "m", "--no-build")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "m.c").is_file() and not (tmp_path / "out" / "m").exists()


def test_inspect_shows_ops_schedule_peaks_and_plan(tmp_path):
    res = flowc("inspect", DIGITS, "--svg", tmp_path / "plan.svg")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for text in (
        "ops: ",
        "unsupported ops: none",
        "stages: ",
        "critical path",
        "peak live bytes: topological order",
        "chosen order",
        "schedule (step",
        "memory plan",
    ):
        assert text in out, text
    assert "<svg" in (tmp_path / "plan.svg").read_text()


def _small_onnx(path: Path) -> None:
    """A conv -> relu -> flatten -> gemm model in ONNX, as an exporter writes it."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((10, 8 * 8 * 8)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


@pytest.mark.c
@pytest.mark.parametrize("threads", [1, 2])
def test_inspect_shows_what_compile_builds(tmp_path, threads):
    """The schedule and the arena flowc inspect prints are those of the compiled model,
    lowering (packed GEMM, epilogues, thread split) included."""
    _small_onnx(tmp_path / "m.onnx")
    res = flowc("compile", tmp_path / "m.onnx", "-o", tmp_path / "out", "--name", "net", "--threads", threads)
    assert res.returncode == 0, res.stderr
    meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    res = flowc("inspect", tmp_path / "m.onnx", "--threads", threads)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    start = lines.index(SCHEDULE_HEAD) + 1
    shown = [ln.split()[:3] for ln in lines[start : start + len(meta["schedule"]) + 1]]
    built = [[str(s["step"]), s["op"], s["node"]] for s in meta["schedule"]]
    assert shown[: len(built)] == built and not shown[len(built)][0].isdigit()
    ops = {s["op"] for s in meta["schedule"]}
    assert "sgemm" in ops and ops & {"conv_gemm", "conv_direct"}
    assert f"arena {meta['arena_bytes']} B, lower bound {meta['arena_lower_bound']} B" in res.stdout
    res = flowc("inspect", tmp_path / "m.onnx", "--stage", "schedule")
    assert res.returncode == 0 and res.stdout.startswith("schedule (memory)"), res.stderr


UNSUPPORTED_MODEL = """
import graphdef as gd
from graphdef.registry import KERNEL, NOT_DIFFERENTIABLE, defop

for op in ("frob_a", "frob_b"):  # ops this file registers, with no code in any backend
    defop(op, ("x",), lambda types, attrs: tuple(types), lambda xs, attrs: xs[0].copy(), NOT_DIFFERENTIABLE,
          kind=KERNEL)

def build():
    with gd.Graph("frob") as g:
        x = gd.relu(gd.placeholder("x", (4,)))
        y = gd.apply("frob_b", [gd.apply("frob_a", [x], "first")], "second")
        gd.apply("frob_a", [y], "third")
    return g
"""


@pytest.mark.parametrize("target", ["c", "cuda"])
def test_inspect_lists_the_ops_the_backend_has_no_code_for(tmp_path, target):
    """The unsupported-ops line reads the backend's op table: every op without code, with its
    first node, then one error line and exit 1 (the registry knows these ops; the C and CUDA
    backends do not)."""
    model = tmp_path / "frob.py"
    model.write_text(UNSUPPORTED_MODEL)
    res = flowc("inspect", f"{model}:build", "--target", target)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "unsupported ops: frob_a (node 'first'), frob_b (node 'second')" in res.stdout, res.stdout
    assert res.stderr.strip().splitlines() == [
        f"flowc: error: 2 ops without {target} code: frob_a (node 'first'), frob_b (node 'second')"
    ], res.stderr
    res = flowc("inspect", DIGITS, "--target", target)
    assert res.returncode == 0 and "unsupported ops: none" in res.stdout, res.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["compile", "missing.flowc", "-o", "OUT"], "missing.flowc: no such file"),
        (["compile", "model.onnx", "-o", "OUT"], "model.onnx: no such file"),
        (
            ["compile", DIGITS, "-o", "OUT", "--shape", "x=1x64"],
            "--shape and --value apply to ONNX models only",
        ),
        (["compile", DIGITS, "-o", "OUT", "--name", "bad-name"], "must be a C identifier"),
        (["compile", DIGITS, "-o", "OUT", "--arch", "pdp11"], "unknown or unsupported arch 'pdp11'"),
        (["compile", f"{ROOT / 'samples' / 'digits.py'}:nope", "-o", "OUT"], "has no function 'nope'"),
        (["inspect", "GARBAGE"], "not a model flowc reads: an ONNX model (.onnx), a TFLite flatbuffer"),
        (["inspect", DIGITS, "--stage", "nope"], "--stage 'nope' is not a stage; stages: outputs, limits"),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(tmp_path, args, message):
    (tmp_path / "GARBAGE").write_bytes(b"junk")
    args = [
        str(tmp_path / "OUT") if a == "OUT" else str(tmp_path / "GARBAGE") if a == "GARBAGE" else a
        for a in args
    ]
    res = flowc(*args, cwd=tmp_path)
    assert res.returncode != 0
    assert res.stderr.startswith("flowc: error: ") and len(res.stderr.strip().splitlines()) == 1
    assert message in res.stderr
    assert not (tmp_path / "OUT").exists()


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_long_compile_shows_its_stage_on_a_terminal_and_erases_it():
    """cli.Progress: past ``after`` seconds, one line redrawn in place with the stage under way
    (seen through pipeline.observe) and the time; erased at the end; nothing off a terminal."""
    from codegen import cli, pipeline

    term = _Terminal()
    with cli.Progress("compiling net", stream=term, after=0.0, every=0.01) as p:
        with pipeline.observe(lambda stage: None):
            pipeline.run(_relu_graph(), pipeline.Options(), until="plan")
        time.sleep(0.05)
    text = term.getvalue()
    assert p.shown and "\rflowc: compiling net: plan (0 s)" in text, text
    assert text.endswith("\r\x1b[K") and "\n" not in text
    pipe = io.StringIO()
    with cli.Progress("compiling net", stream=pipe, after=0.0, every=0.01):
        time.sleep(0.05)
    assert pipe.getvalue() == ""


def _relu_graph():
    with gd.Graph("g") as g:
        gd.relu(gd.placeholder("x", (4,)), name="y")
    return g


def test_arch_spellings_and_a_target_that_names_an_arch(tmp_path):
    """GNU triples and common names are the arch they spell (arm64, aarch64-linux-gnu -> aarch64-
    linux; m4 -> cortex-m4); ``--target aarch64`` says that --arch picks the CPU, in one line."""
    from codegen.target import Target

    assert {Target(a).arch for a in ("arm64", "aarch64-linux-gnu", "AArch64")} == {"aarch64-linux"}
    assert Target("m4").arch == "cortex-m4" and Target("armhf").arch == "armv7-linux"
    _small_onnx(tmp_path / "m.onnx")
    res = flowc("compile", tmp_path / "m.onnx", "-o", tmp_path / "out", "--target", "aarch64")
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(lines) == 1 and "--arch aarch64-linux" in lines[0], res.stderr
    res = flowc("inspect", tmp_path / "m.onnx", "--arch", "arm64")
    assert res.returncode == 0 and "aarch64-linux" in res.stdout, res.stderr


def test_a_model_file_with_dataclasses_compiles(tmp_path):
    """A file:function model runs as an imported module would: a dataclass under postponed
    annotations finds its module."""
    model = tmp_path / "sized.py"
    model.write_text(
        "from __future__ import annotations\nfrom dataclasses import dataclass\nimport graphdef as gd\n\n"
        "@dataclass\nclass Size:\n    n: int = 4\n\n"
        "def build():\n    with gd.Graph('g') as g:\n        x = gd.placeholder('x', (Size().n,))\n"
        "        g.set_outputs(gd.identity(x * 2.0, name='y'))\n    return g\n"
    )
    res = flowc("compile", f"{model}:build", "-o", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
