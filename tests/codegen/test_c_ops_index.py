"""The indexing kernels (gather_elements, scatter_elements, gather_nd, scatter_nd, topk) in one
standalone binary under the sanitizers, and a bad index ending its run in one line. Their cases
(every dtype, reduction and index geometry, NaN, an empty index) are the op records' examples,
tests/codegen/test_c_examples.py, with the index errors of a run."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import codegen
import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(7)


def arr(shape, dtype):
    return RNG.uniform(-3, 3, shape).astype(dtype)


def idx(shape, dim, dtype="int64"):
    return RNG.integers(-dim, dim, shape).astype(dtype)


def tuples(shape, dims, dtype="int64"):
    """Index tuples of the last axis of shape, component j within dims[j] (negative too)."""
    return np.stack([RNG.integers(-d, d, shape[:-1]) for d in dims], -1).reshape(shape).astype(dtype)


def test_binary_runs_clean_under_sanitizers(tmp_path):
    """Every kernel of this family in one binary under ASan/UBSan; a bad index exits cleanly."""
    d = arr((4, 5), "float32")
    g = gd.Graph("family")
    with g:
        x = gd.placeholder("x", d.shape)
        i = gd.placeholder("i", (4, 3), "int64")
        t = gd.placeholder("t", (3, 2), "int32")
        ge = gd.gather_elements(x, i, axis=1)
        se = gd.scatter_elements(x, i, ge * 2.0, axis=1, reduction="max")
        gn = gd.gather_nd(se, t)
        sn = gd.scatter_nd(x, t, gn, reduction="mul")
        v, k = gd.topk(sn, 3, axis=0, largest=False)
        gd.identity(v, name="values")
        gd.identity(k, name="indices")
        gd.identity(gn, name="picked")
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g1", "-O1"]
    out = codegen.export(
        g, tmp_path / "san", name="san", outputs=["values", "indices", "picked"], flags=flags
    )
    feeds = {"x": d, "i": idx((4, 3), 5), "t": tuples((3, 2), (4, 5), "int32")}

    def run(values):
        args = [str(out / "san")]
        for name, value in values.items():
            np.save(tmp_path / f"{name}.npy", value)
            args += ["--in", f"{name}={tmp_path / f'{name}.npy'}"]
        return subprocess.run(args + ["--out-dir", str(tmp_path / "res")], capture_output=True, text=True)

    res = run(feeds)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr
    want = gd.run(g, feeds, ["values", "indices", "picked"])
    for name, w in zip(["values", "indices", "picked"], want):
        np.testing.assert_allclose(np.load(tmp_path / "res" / f"{name}.npy"), w, rtol=1e-6)
    res = run({**feeds, "t": np.full((3, 2), 9, np.int32)})
    assert res.returncode != 0 and "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr
    assert res.stderr.strip().count("\n") == 0, res.stderr  # one clear line
