"""The indexing ops through generated C (one shared library for all cases) against the
interpreter, their index errors, and a sanitizer run of a standalone binary."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import codegen
import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(7)
FLOATS = ("float32", "float64", "float16")
INTS = ("int8", "uint8", "int32", "int64")
REDUCTIONS = ("none", "add", "mul", "max", "min")


def arr(shape, dtype):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype in INTS:
        return RNG.integers(0 if dtype == "uint8" else -9, 10, shape).astype(dtype)
    return RNG.uniform(-3, 3, shape).astype(dtype)


def idx(shape, dim, dtype="int64"):
    return RNG.integers(-dim, dim, shape).astype(dtype)


def tuples(shape, dims, dtype="int64"):
    """Index tuples of the last axis of shape, component j within dims[j] (negative too)."""
    return np.stack([RNG.integers(-d, d, shape[:-1]) for d in dims], -1).reshape(shape).astype(dtype)


CASES: list[tuple[str, object, list[np.ndarray]]] = []


def case(cid, fn, *inputs):
    CASES.append((cid, fn, list(inputs)))


for dt in FLOATS + INTS + ("bool",):
    case(
        f"gather_elements-{dt}",
        lambda d, i: gd.gather_elements(d, i, axis=1),
        arr((3, 4, 2), dt),
        idx((3, 6, 2), 4),
    )
    case(
        f"gather_nd-{dt}",
        lambda d, i: gd.gather_nd(d, i, batch_dims=1),
        arr((2, 3, 4), dt),
        tuples((2, 5, 1), (3,)),
    )
    case(
        f"scatter_nd-none-{dt}",
        lambda d, i, u: gd.scatter_nd(d, i, u),
        arr((4, 3), dt),
        tuples((5, 1), (4,)),
        arr((5, 3), dt),
    )
    case(
        f"scatter_elements-none-{dt}",
        lambda d, i, u: gd.scatter_elements(d, i, u, axis=0),
        arr((4, 3), dt),
        idx((6, 3), 4),
        arr((6, 3), dt),
    )
for dt in FLOATS + INTS:
    for red in REDUCTIONS[1:]:
        case(
            f"scatter_elements-{red}-{dt}",
            lambda d, i, u, red=red: gd.scatter_elements(d, i, u, axis=-1, reduction=red),
            arr((3, 5), dt),
            idx((3, 7), 5, "int32"),
            arr((3, 7), dt),
        )
        case(
            f"scatter_nd-{red}-{dt}",
            lambda d, i, u, red=red: gd.scatter_nd(d, i, u, reduction=red),
            arr((3, 4, 2), dt),
            tuples((6, 2), (3, 4), "int32"),
            arr((6, 2), dt),
        )
    for largest in (True, False):
        case(
            f"topk-{largest}-{dt}",
            lambda x, largest=largest: gd.topk(x, 3, axis=1, largest=largest),
            RNG.integers(0, 5, (2, 9, 3)).astype(dt),
        )  # many ties
for idt in ("int64", "int32"):
    case(
        f"gather_elements-merged-{idt}",
        lambda d, i: gd.gather_elements(d, i, axis=0),
        arr((5, 2, 3), "float32"),
        idx((7, 2, 3), 5, idt),
    )
    case(
        f"gather_elements-narrow-{idt}",
        lambda d, i: gd.gather_elements(d, i, axis=2),
        arr((4, 5, 6), "float32"),
        idx((2, 3, 9), 6, idt),
    )
    case(f"gather_nd-full-{idt}", gd.gather_nd, arr((3, 4, 5), "float32"), tuples((2, 2, 3), (3, 4, 5), idt))
    case(f"gather_nd-rows-{idt}", gd.gather_nd, arr((6, 5), "int64"), tuples((4, 1), (6,), idt))
case(
    "gather_elements-size1-index-axis",
    lambda d, i: gd.gather_elements(d, i, axis=1),
    arr((3, 4), "float32"),
    idx((3, 1), 4),
)
case(
    "scatter_elements-rank4",
    lambda d, i, u: gd.scatter_elements(d, i, u, axis=2, reduction="add"),
    arr((2, 3, 4, 5), "float32"),
    idx((2, 2, 6, 3), 4),
    arr((2, 2, 6, 3), "float32"),
)
case(
    "scatter_nd-empty",
    lambda d, i, u: gd.scatter_nd(d, i, u),
    arr((3, 4), "float32"),
    np.zeros((0, 1), np.int64),
    arr((0, 4), "float32"),
)
case("topk-nan", lambda x: gd.topk(x, 5), np.array([[1, np.nan, -np.inf, 2, np.nan, 1, np.inf]], np.float32))
case(
    "topk-nan-smallest",
    lambda x: gd.topk(x, 7, largest=False),
    np.array([[1, np.nan, -np.inf, 2, np.nan, 1, np.inf]], np.float64),
)
case("topk-axis0-all", lambda x: gd.topk(x, 6, axis=0), arr((6, 4), "float32"))
case("topk-k1", lambda x: gd.topk(x, 1, axis=-1), arr((3, 100), "float32"))
case(
    "topk-long",
    lambda x: gd.topk(x, 40, axis=-1, largest=False),
    RNG.integers(0, 30, (2, 257)).astype(np.int32),
)
case("one_hot", lambda i: gd.one_hot(i, 6, axis=0, on_value=2.5, off_value=-1.0), idx((2, 3), 6))
case(
    "topk-gradient",
    lambda x: gd.gradients(gd.reduce_sum(gd.topk(x, 2, axis=0)[0] * 3.0), [x])[0],
    arr((5, 3), "float32"),
)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_c_matches_interpreter(cid, built, c_outputs, tol):
    for name, g, w in c_outputs(built, cid):
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, **tol[w.dtype.name], err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize(
    "cid,bad",
    [
        ("gather_elements-float32", lambda i: np.where(i == i.flat[0], 4, i)),
        ("gather_elements-merged-int32", lambda i: np.where(i == i.flat[0], -6, i)),
        ("gather_nd-float32", lambda i: np.full_like(i, 3)),
        ("gather_nd-full-int64", lambda i: np.where(np.arange(3) == 2, -6, i)),
        ("scatter_elements-add-float32", lambda i: np.full_like(i, 5)),
        ("scatter_elements-none-bool", lambda i: np.full_like(i, -5)),
        ("scatter_nd-max-int32", lambda i: np.where(np.arange(2) == 1, 4, i)),
        ("scatter_nd-none-int8", lambda i: np.full_like(i, 4)),
    ],
)
def test_out_of_range_index_is_an_error_in_both(cid, bad, built):
    graph, model = built[cid]
    inputs = next(c[2] for c in CASES if c[0] == cid)
    feeds = {f"in{i}": a for i, a in enumerate(inputs)}
    feeds["in1"] = bad(feeds["in1"]).astype(feeds["in1"].dtype)
    with pytest.raises(gd.ExecutionError, match="out of range"):
        gd.run(graph, feeds, [str(r) for r in graph.outputs])
    with pytest.raises(gd.ExecutionError, match="status 3"):
        model(**feeds)


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
