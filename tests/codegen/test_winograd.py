"""Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (codegen/backends/c/winograd.py): the
transforms, the op's reference, the cost model's choice, and the C kernel against the
interpreter on single convolutions and small CNNs, with epilogues and threads.

Tolerances: F(2x2) rounds like im2col; F(4x4)'s transforms amplify float32 rounding, to about
1e-5 of the largest output (measured up to 2e-5 for 512 channels): results are compared with
``atol = TOL * max |y|``.
"""

from __future__ import annotations

import doctest
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import pipeline
from codegen.backends.c import winograd as W
from codegen.backends.c.gemm_lowering import lower_products
from codegen.target import Target
from graphdef.ops.conv import conv_ref

SCHEDULE_HEAD = (
    "schedule (step, op, node, ASAP us, ALAP us, slack us, flops; <- the model file's nodes it computes):"
)

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(13)
TOL = {"winograd2x2": 2e-6, "winograd4x4": 5e-5, "im2col": 2e-6}


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_graph(n, c, k, h, w, pads, *, bias=True, relu=False, residual=False, name="wino"):
    """x (n, c, h, w) -> 3x3 conv (He-scaled weights) [+ bias] [+ residual input r] [relu] -> y."""
    g = gd.Graph(name)
    with g:
        x = gd.placeholder("x", (n, c, h, w))
        wt = gd.constant(f32(k, c, 3, 3, scale=(2 / (9 * c)) ** 0.5))
        y = gd.conv(x, wt, gd.constant(f32(k, scale=0.1)) if bias else None, pads=pads)
        if residual:
            y = y + gd.placeholder("r", y.shape)
        if relu:
            y = gd.relu(y)
        gd.identity(y, name="y")
    return g


def feeds_of(g):
    return {n.name: f32(*n.outputs[0].shape) for n in g.nodes if n.op == "placeholder"}


def close(got, want, algorithm):
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[algorithm] * float(np.abs(want).max()))


def lowered(g, threads=1, isa="avx512"):
    return lower_products(pipeline.optimize(g, None), isa, threads)


def convs(graph):
    return [n for n in graph.nodes if n.op in ("conv_gemm", "conv_winograd", "conv_direct")]


@pytest.fixture
def force(monkeypatch):
    """force(algorithm, rows=None): every eligible conv takes that algorithm (and chunks of
    that many tile rows) whatever the cost model says."""

    def set_(algorithm, rows=None):
        monkeypatch.setattr(W, "choose", lambda *a, **kw: (algorithm, {}))
        if rows:
            monkeypatch.setattr(W, "chunk_rows", lambda m, *a, **kw: rows)

    return set_


# ----------------------------------------------------------------------------- pure Python
@pytest.mark.parametrize("m", [2, 4])
def test_transforms_compute_the_correlation_of_a_tile(m):
    """A^T [(G g G^T) * (B^T d B)] A is the 3x3 correlation of an (m+2)^2 tile, exactly (in
    float64, to rounding)."""
    bt, g_, at = W.matrices(m)
    d, g = RNG.standard_normal((m + 2, m + 2)), RNG.standard_normal((3, 3))
    y = at @ ((g_ @ g @ g_.T) * (bt @ d @ bt.T)) @ at.T
    want = np.array([[np.sum(d[i : i + 3, j : j + 3] * g) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("shape, pads", [((2, 3, 7, 9), (1, 1, 1, 1)), ((1, 2, 6, 5), (0, 0, 0, 0)),
                                         ((1, 2, 5, 8), (0, 1, 2, 0))])  # fmt: skip
def test_reference_is_the_convolution(m, shape, pads):
    """winograd_ref (the op's reference) on transformed weights is the convolution, in float64:
    partial tiles, every padding."""
    x, w = RNG.standard_normal(shape), RNG.standard_normal((4, shape[1], 3, 3))
    attrs = {"strides": (1, 1), "pads": pads, "dilations": (1, 1), "group": 1}
    want = conv_ref([x, w], attrs)
    out = want.shape[2:]
    _, g_, _ = W.matrices(m)
    u = np.einsum("ri,kcij,sj->rskc", g_, w, g_).reshape((m + 2) ** 2, *w.shape[:2])
    np.testing.assert_allclose(W.winograd_ref(x, u, m, out, pads), want, rtol=1e-10, atol=1e-10)


def test_module_examples():
    assert doctest.testmod(W).failed == 0


def test_cost_model_picks_winograd_for_resnet_layers_and_keeps_im2col_elsewhere():
    attrs = {"strides": (1, 1), "dilations": (1, 1), "group": 1}
    pick = {
        (c, hw): W.choose((1, c, hw, hw), (c, c, 3, 3), (hw, hw), attrs, "avx512")[0]
        for c, hw in [(64, 56), (128, 28), (512, 7), (4, 8)]
    }
    assert pick[(64, 56)] == "winograd4x4" and pick[(128, 28)] == "winograd4x4"
    assert pick[(512, 7)] == "im2col"  # 512 x 512 weights on 7x7 outputs: their transform costs more
    assert pick[(4, 8)] == "im2col"  # tiny: fixed costs dominate
    est = W.estimates((1, 64, 56, 56), 64, (56, 56), "avx512")
    assert set(est) == {"im2col", "winograd2x2", "winograd4x4"} and all(v > 0 for v in est.values())


def test_few_input_channels_take_the_direct_tiles_where_they_apply():
    """A 3-channel 3x3 stem at stride 1 goes to conv_direct on AVX-512 (MIN_CHANNELS); on AVX2,
    which has no direct tiles, and with 16 channels the cost model's Winograd stays."""
    ops = {
        (c, isa): [n.op for n in convs(lowered(conv_graph(1, c, 16, 32, 32, (1, 1, 1, 1)), isa=isa))]
        for c, isa in [(3, "avx512"), (3, "avx2"), (16, "avx512")]
    }
    want = {(3, "avx512"): "conv_direct", (3, "avx2"): "conv_winograd", (16, "avx512"): "conv_winograd"}
    assert ops == {key: [op] for key, op in want.items()}


def test_lowering_records_the_choice_and_keeps_the_graph_equal():
    g = conv_graph(1, 32, 32, 28, 28, (1, 1, 1, 1), relu=True)
    opt = lowered(g)
    gd.verify(opt)
    (node,) = convs(opt)
    assert node.op == "conv_winograd" and node.attrs["algorithm"] in W.ALGORITHMS
    assert node.attrs["epilogue"]  # the relu
    assert dict(node.attrs["estimates"])[node.attrs["algorithm"]] < dict(node.attrs["estimates"])["im2col"]
    assert W.describe(node).startswith(node.attrs["algorithm"] + " (estimated im2col")
    feeds = feeds_of(g)
    (want,) = gd.run(g, feeds, ["y"])
    (got,) = gd.run(opt, feeds, ["y"])
    close(got, want, "im2col")  # the reference computes in float64


def test_im2col_kept_where_the_model_says_so():
    g = conv_graph(1, 512, 512, 7, 7, (1, 1, 1, 1))
    (node,) = convs(lowered(g))
    # not Winograd: the small plane's convolution on register tiles (conv_direct.py) where the
    # target has them, else im2col
    want = ("conv_direct", "tiles") if node.op == "conv_direct" else ("conv_gemm", "im2col")
    assert (node.op, W.conv_algorithm(node)) == want
    assert W.describe(node).startswith(f"{want[1]} (estimated im2col")


@pytest.mark.parametrize(
    "kw",
    [dict(strides=(2, 2), pads=(1, 1, 1, 1)), dict(dilations=(2, 2), pads=(2, 2, 2, 2)), dict(group=2)],
    ids=["stride2", "dilation2", "groups"],
)
def test_only_3x3_stride1_undilated_single_group_convs(kw, force):
    force("winograd4x4")
    with gd.Graph("ineligible") as g:
        x = gd.placeholder("x", (1, 32, 20, 20))
        gd.identity(gd.conv(x, gd.constant(f32(32, 32 // kw.get("group", 1), 3, 3)), **kw), name="y")
    assert [n.op for n in convs(lowered(g))] in (["conv_gemm"], ["conv_direct"])  # not Winograd


# ----------------------------------------------------------------------------- C
CASES = [
    # (n, c, k, h, w, pads, bias)
    (1, 3, 5, 7, 9, (1, 1, 1, 1), True),  # odd sizes, partial tiles both ways
    (2, 8, 16, 10, 11, (0, 0, 0, 0), False),  # batch 2, unpadded
    (1, 16, 24, 12, 12, (1, 1, 1, 1), True),  # whole tiles
    (2, 5, 7, 6, 13, (0, 1, 2, 0), True),  # asymmetric pads
    (1, 4, 6, 3, 3, (1, 1, 1, 1), True),  # one tile
]


@pytest.mark.c
@pytest.mark.parametrize("algorithm", ["winograd2x2", "winograd4x4"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}x{c[3]}x{c[4]}-{c[2]}" for c in CASES])
def test_single_convs_match_the_interpreter(case, algorithm, force):
    n, c, k, h, w, pads, bias = case
    force(algorithm, rows=1)  # one tile row per chunk: many chunks and a tail
    g = conv_graph(n, c, k, h, w, pads, bias=bias)
    assert [x.op for x in convs(lowered(g))] == ["conv_winograd"]
    feeds = feeds_of(g)
    (want,) = gd.run(g, feeds, ["y"])
    close(codegen.compile(g, cache=False)(**feeds)["y"], want, algorithm)


@pytest.mark.c
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "algorithm, rows", [("winograd4x4", None), ("winograd2x2", 2), ("winograd2x2", 3), ("winograd4x4", 1)]
)
def test_epilogue_relu_and_residual_with_threads(threads, algorithm, rows, force):
    """conv + bias + residual + relu in one step; with 2 threads whole chunks per part, or (one
    chunk: rows None) both parts sharing each chunk. 7 tile rows of F(2x2) in chunks of at most
    2 or 3 rows: 1, 2, 2, 2 and 2, 2, 3 (the shorter chunks on the tail plan)."""
    force(algorithm, rows)
    g = conv_graph(2 if rows else 1, 12, 20, 13, 10, (1, 1, 1, 1), relu=True, residual=True)
    (node,) = convs(lowered(g, threads))
    assert node.op == "conv_winograd" and node.attrs["epilogue"] and node.attrs["parts"] == threads
    feeds = feeds_of(g)
    (want,) = gd.run(g, feeds, ["y"])
    m = codegen.compile(g, threads=threads, cache=False)
    close(m(**feeds)["y"], want, algorithm)
    close(m(**feeds)["y"], want, algorithm)  # scratch and pool reused


def small_cnn(batch=2):
    """Two residual blocks of 3x3 convs (the first with a 1x1 projection), then a head."""
    g = gd.Graph("cnn")
    with g:
        x = gd.placeholder("x", (batch, 3, 30, 26))
        w0, b0 = gd.constant(f32(24, 3, 3, 3, scale=0.3)), gd.constant(f32(24))
        h = gd.relu(gd.conv(x, w0, b0, pads=(1, 1, 1, 1)))
        for c_in, c_out in ((24, 32), (32, 32)):
            w1 = gd.constant(f32(c_out, c_in, 3, 3, scale=(2 / (9 * c_in)) ** 0.5))
            w2 = gd.constant(f32(c_out, c_out, 3, 3, scale=(1 / (9 * c_out)) ** 0.5))
            y = gd.relu(gd.conv(h, w1, gd.constant(f32(c_out, scale=0.1)), pads=(1, 1, 1, 1)))
            y = gd.conv(y, w2, pads=(1, 1, 1, 1))
            skip = h if c_in == c_out else gd.conv(h, gd.constant(f32(c_out, c_in, 1, 1, scale=0.2)))
            h = gd.relu(y + skip)
        gd.identity(gd.reduce_mean(h, axes=(2, 3)), name="y")
    return g


@pytest.mark.c
@pytest.mark.parametrize("threads", [1, 2])
def test_small_cnn_chooses_per_layer_and_matches(threads):
    g = small_cnn()
    opt = lowered(g, threads)
    algorithms = [W.conv_algorithm(n) for n in convs(opt)]
    assert "winograd4x4" in algorithms or "winograd2x2" in algorithms
    assert "direct" in algorithms  # the 1x1 projection
    feeds = feeds_of(g)
    (want,) = gd.run(g, feeds, ["y"])
    close(codegen.compile(g, threads=threads)(**feeds)["y"], want, "winograd4x4")


@pytest.mark.c
@pytest.mark.parametrize(
    "portable, flags", [(True, ()), (False, ("-DFC_NO_VECTOR",))], ids=["portable-v128", "scalar"]
)
def test_generic_builds(portable, flags, force):
    """Plans for the build's own micro-tile (v128, scalar): same results."""
    force("winograd4x4", rows=2)
    g = conv_graph(1, 6, 9, 11, 10, (1, 1, 1, 1), relu=True, residual=True)
    feeds = feeds_of(g)
    (want,) = gd.run(g, feeds, ["y"])
    close(codegen.compile(g, portable=portable, flags=flags, cache=False)(**feeds)["y"], want, "winograd4x4")


@pytest.mark.cross
@pytest.mark.parametrize("algorithm", ["winograd2x2", "winograd4x4"])
def test_aarch64_binary_under_qemu(tmp_path, algorithm, force):
    """The aarch64 micro-tile (8 x 12: tiles padded to 12) in a cross-compiled binary."""
    target = Target("aarch64-linux")
    if not (shutil.which(target.compiler) and shutil.which(target.spec.qemu)):
        pytest.skip(f"{target.compiler} or {target.spec.qemu} missing")
    force(algorithm, rows=2)
    g = conv_graph(2, 5, 7, 11, 9, (1, 1, 1, 1), relu=True)
    feeds = feeds_of(g)
    out = codegen.export(g, tmp_path / "out", name="net", arch="aarch64-linux", cache=False)
    np.save(tmp_path / "x.npy", feeds["x"])
    args = ["--in", f"x={tmp_path / 'x.npy'}", "--out-dir", str(tmp_path / "r")]
    res = subprocess.run([target.spec.qemu, str(out / "net"), *args], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    (want,) = gd.run(g, feeds, ["y"])
    close(np.load(tmp_path / "r" / "y.npy"), want, algorithm)


@pytest.mark.c
def test_float32_error_bound_against_float64():
    """The C kernel's error on 128 channels of random data, against float64: F(4x4) within
    3e-5, F(2x2) within 3e-6 of the largest output."""
    x = f32(1, 128, 16, 16)
    w = f32(128, 128, 3, 3, scale=(2 / (9 * 128)) ** 0.5)
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    want = conv_ref([x.astype(np.float64), w.astype(np.float64)], attrs)
    for algorithm, bound in (("winograd4x4", 3e-5), ("winograd2x2", 3e-6)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(W, "choose", lambda *a, algorithm=algorithm, **kw: (algorithm, {}))
            with gd.Graph(f"err_{algorithm}") as g:  # a graph of its own: compile() caches by graph
                y = gd.conv(gd.placeholder("x", x.shape), gd.constant(w), pads=(1, 1, 1, 1))
                gd.identity(y, name="y")
            got = codegen.compile(g, cache=False)(x=x)["y"]
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < bound, (algorithm, err)


def test_sources_are_deterministic(tmp_path, force):
    force("winograd4x4", rows=2)
    g = conv_graph(1, 6, 9, 11, 10, (1, 1, 1, 1), relu=True)
    texts = []
    for i in range(2):
        out = codegen.export(g, tmp_path / f"o{i}", name="net", build_binary=False, cache=False)
        texts.append((out / "net.c").read_text())
    assert texts[0] == texts[1] and "fc_wino4_in" in texts[0]


def test_inspect_prints_the_algorithm_of_each_conv(tmp_path):
    """flowc inspect names each conv step's algorithm: Winograd where the model chose it, with
    its estimates; not for a small conv."""
    g = gd.Graph("two")
    with g:
        x = gd.placeholder("x", (1, 4, 8, 8))
        small = gd.relu(gd.conv(x, gd.constant(f32(4, 4, 3, 3)), pads=(1, 1, 1, 1)), name="small")
        z = gd.conv(gd.placeholder("z", (1, 16, 40, 40)), gd.constant(f32(48, 16, 1, 1)), name="widen")
        y = gd.relu(gd.conv(z, gd.constant(f32(48, 48, 3, 3)), pads=(1, 1, 1, 1)), name="y")
        g.set_outputs(small, y)
    gd.save(g, tmp_path / "m.flowc")
    res = subprocess.run(
        [sys.executable, "-m", "codegen.cli", "inspect", str(tmp_path / "m.flowc")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    start = lines.index(SCHEDULE_HEAD) + 1
    steps = {ln.split()[2]: ln for ln in lines[start : start + 3]}
    # im2col, or register tiles (conv_direct.py) on a machine with AVX-512
    assert "im2col (estimated im2col" in steps["small"] or "tiles (estimated im2col" in steps["small"]
    others = [
        ln.split("  <- ")[0].split()[-1] for ln in steps.values() if " conv_gemm " in ln and "small" not in ln
    ]
    assert others == ["direct"]
    assert " conv_winograd " in steps["y"] and "winograd4x4 (estimated im2col" in steps["y"]
