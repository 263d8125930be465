"""Inputs of run-time length (``lengths={input: axis}``, ``--shape NAME=1x<=N``): compiled and
planned for the maximum, fed shorter (padded with zeros, the length in ``<input>_length``) by
the Python call and by the program, a longer one refused in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen.cli import main
from graphdef.errors import FeedError, FlowcError

pytestmark = pytest.mark.c


def summed():
    """The mean of the real tokens: their sum over the length the run is given, and a loop
    that runs once per real token."""
    with gd.Graph("summed") as g:
        tok = gd.placeholder("tokens", (1, 16), "int64")
        n = gd.placeholder("tokens_length", (), "int64")
        s = gd.reduce_sum(gd.cast(tok, "float32"))
        gd.identity(s / gd.maximum(gd.cast(n, "float32"), 1.0), name="mean")
        _, count = gd.while_loop(
            lambda i, c: i < n, lambda i, c: (i + 1, c + 1.0), [gd.constant(0, "int64"), 0.0]
        )
        gd.identity(count, name="count")
        gd.identity(tok * 2, name="twice")
        g.set_outputs("mean", "count", "twice")
    return g


def want(tokens: list[int]) -> dict:
    n = len(tokens)
    padded = np.zeros((1, 16), np.int64)
    padded[0, :n] = tokens
    return {"mean": np.float32(sum(tokens) / max(n, 1)), "count": np.float32(n), "twice": padded * 2}


@pytest.mark.parametrize("tokens", [[], [5], [1, 2, 3], list(range(16))])
def test_the_call_takes_any_length_up_to_the_maximum(tokens):
    model = codegen.compile(summed(), lengths={"tokens": 1})
    got = model(tokens=np.array([tokens], np.int64).reshape(1, len(tokens)))
    for name, w in want(tokens).items():
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def test_the_call_refuses_a_longer_input_and_a_given_length():
    model = codegen.compile(summed(), lengths={"tokens": 1})
    with pytest.raises(FeedError, match="17 long on axis 1, more than the compiled maximum 16"):
        model(tokens=np.zeros((1, 17), np.int64))
    with pytest.raises(FeedError, match="leave it out"):
        model(tokens=np.zeros((1, 3), np.int64), tokens_length=np.int64(3))


def test_lengths_are_checked_against_the_graph():
    for lengths, match in (
        ({"nope": 0}, "no input of that name"),
        ({"tokens": 0}, None),  # axis 0 of a 1 x 16 input: fine (the rows before it: none)
        ({"tokens": 2}, "the axis must exist"),
    ):
        if match is None:
            codegen.compile(summed(), lengths=lengths)
            continue
        with pytest.raises(FlowcError, match=match):
            codegen.compile(summed(), lengths=lengths)


@pytest.mark.parametrize(
    "flags", [(), ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g1", "-O1")]
)
def test_the_program_takes_shorter_inputs(tmp_path, flags):
    out = codegen.export(summed(), tmp_path / "out", name="net", lengths={"tokens": 1}, flags=flags)

    def run(tokens):
        np.save(tmp_path / "t.npy", tokens)
        return subprocess.run(
            [str(out / "net"), "--in", f"tokens={tmp_path / 't.npy'}", "--out-dir", str(tmp_path / "res")],
            capture_output=True,
            text=True,
        )

    for tokens in ([], [7, 8], list(range(16))):
        res = run(np.array(tokens, np.int64).reshape(1, len(tokens)))
        assert res.returncode == 0 and not res.stderr, res.stderr
        for name, w in want(tokens).items():
            np.testing.assert_array_equal(np.load(tmp_path / "res" / f"{name}.npy"), w, err_msg=name)
    usage = subprocess.run([str(out / "net"), "--help"], capture_output=True, text=True).stdout
    assert "tokens int64[1, 16] (any length up to 16 on axis 1)" in usage, usage
    assert "tokens_length int64[] (set by the program: the length of tokens; leave it out)" in usage, usage
    res = run(np.zeros((1, 17), np.int64))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "is 17 long on axis 1, more than the compiled maximum 16" in res.stderr
    res = run(np.zeros((2, 3), np.int64))
    assert res.returncode == 2 and "has shape (2, 3), expected (1, 3)" in res.stderr, res.stderr


def test_the_command_line_declares_a_length(tmp_path, capsys):
    model = tmp_path / "summed.py"
    model.write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nfrom test_lengths import summed\n"
    )
    assert main(["compile", f"{model}:summed", "--shape", "tokens=1x<=16", "-o", str(tmp_path / "cli")]) == 0
    np.save(tmp_path / "t.npy", np.array([[3, 4]], np.int64))
    res = subprocess.run(
        [
            str(tmp_path / "cli" / "model"),
            "--in",
            f"tokens={tmp_path / 't.npy'}",
            "--out-dir",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert np.load(tmp_path / "r" / "mean.npy") == 3.5
    assert main(["compile", f"{model}:summed", "--shape", "tokens=1x<=8", "-o", str(tmp_path / "cli2")]) != 0
    assert "the input is int64[1,16], not 1x8" in capsys.readouterr().err


def test_scalar_inputs_as_options(tmp_path):
    """A scalar input given as --NAME VALUE ('-' for '_'): --max-new 3 sets max_new."""
    with gd.Graph("scalars") as g:
        tok = gd.placeholder("prompt", (8,), "int64")
        most = gd.placeholder("max_new", (), "int64")
        scale = gd.placeholder("scale", (), "float32")
        _, s = gd.while_loop(
            lambda i, s: i < most, lambda i, s: (i + 1, s + scale), [gd.constant(0, "int64"), 0.0]
        )
        gd.identity(s, name="s")
        gd.identity(gd.reduce_sum(tok), name="total")
        g.set_outputs("s", "total")
    out = codegen.export(g, tmp_path / "out", name="net", lengths={"prompt": 0})
    np.save(tmp_path / "p.npy", np.array([4, 5], np.int64))

    def run(*args):
        return subprocess.run(
            [
                str(out / "net"),
                "--in",
                f"prompt={tmp_path / 'p.npy'}",
                *args,
                "--out-dir",
                str(tmp_path / "r"),
            ],
            capture_output=True,
            text=True,
        )

    res = run("--max-new", "3", "--scale", "0.5")
    assert res.returncode == 0, res.stderr
    assert np.load(tmp_path / "r" / "s.npy") == 1.5 and np.load(tmp_path / "r" / "total.npy") == 9
    for args, message in (
        (("--max-new", "x3", "--scale", "1"), "'x3' is not a int64 value"),
        (("--max-new", "3"), "missing --in scale=FILE.npy"),
        (("--prompt", "3", "--max-new", "3", "--scale", "1"), "is not a scalar"),
    ):
        res = run(*args)
        assert res.returncode == 2 and message in res.stderr and res.stderr.count("\n") == 1, res.stderr
