"""Epilogue fusion into fast-GEMM products, and products split over a thread pool."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import pipeline
from codegen.backends.c.gemm_lowering import lower_products
from codegen.backends.c.sgemm import SgemmPlan

RNG = np.random.default_rng(7)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_net(batch=2):
    """conv+bias+relu, a 1x1 conv with a residual add, a dense layer with a column bias."""
    g = gd.Graph("epi")
    with g:
        x = gd.placeholder("x", (batch, 8, 10, 10))
        h = gd.relu(gd.conv2d(x, gd.constant(f32(16, 8, 3, 3, scale=0.3)), gd.constant(f32(16)), padding=1))
        r = gd.sigmoid(gd.conv2d(h, gd.constant(f32(16, 16, 1, 1, scale=0.2))) + h)
        flat = gd.reshape(r, (batch, 16 * 100))
        gd.identity(gd.matmul(flat, gd.constant(f32(1600, 10, scale=0.02))) + gd.constant(f32(10)), name="y")
    return g


def attention(batch=2, heads=3, seq=7, dim=8):
    """Batched products with a scale and a broadcast mask (per key position)."""
    g = gd.Graph("att")
    with g:
        q = gd.placeholder("q", (batch, heads, seq, dim))
        k = gd.placeholder("k", (batch, heads, dim, seq))
        mask = gd.placeholder("mask", (batch, 1, 1, seq))
        s = gd.matmul(q, k) * 0.35 + mask
        gd.softmax(s, axis=-1, name="p")
    return g


def optimized(g, outputs=None, threads=1):
    """The graph after the target-neutral passes and the C backend's lowering for AVX-512."""
    return lower_products(pipeline.optimize(g, outputs), "avx512", threads)


def test_pass_merges_bias_activation_and_residual():
    opt = optimized(conv_net())
    products = [n for n in opt.nodes if n.op in ("sgemm", "conv_gemm", "conv_direct")]
    assert len(products) == 3
    assert all(n.attrs["epilogue"] for n in products)
    assert not any(n.op == "fused" or gd.registry.get_op(n.op).elementwise for n in opt.nodes)
    layouts = {n.op: n.attrs["epilogue"][2] for n in products}
    assert (0, 1, ()) in layouts["sgemm"]  # the dense bias: one value per column


def test_pass_result_equals_original_graph():
    g = conv_net()
    xv = f32(2, 8, 10, 10)
    (want,) = gd.run(g, {"x": xv}, ["y"])
    opt = optimized(g)
    gd.verify(opt)
    (got,) = gd.run(opt, {"x": xv}, ["y"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_pass_leaves_products_that_are_outputs_or_shared():
    g = gd.Graph("keep")
    with g:
        x = gd.placeholder("x", (4, 32))
        p = gd.matmul(x, gd.constant(f32(32, 16)), name="p")  # a fetched output
        gd.relu(p, name="r")
        p2 = gd.matmul(x, gd.constant(f32(32, 16)))
        gd.relu(p2, name="r2")
        gd.softmax(p2, name="s2")  # p2 has a second, non-elementwise consumer
    opt = optimized(g, outputs=["p", "r", "r2", "s2"])
    products = [n for n in opt.nodes if n.op == "sgemm"]
    assert len(products) == 2 and not any(n.attrs["epilogue"] for n in products)


def test_layout_refuses_a_broadcast_no_stride_can_express():
    g = gd.Graph("odd")
    with g:
        x = gd.placeholder("x", (6, 32))
        other = gd.placeholder("o", (2, 3, 1))  # rows regrouped: fits (6, 1) only through reshape
        p = gd.reshape(gd.matmul(x, gd.constant(f32(32, 4))), (2, 3, 4))
        gd.identity(p + other, name="y")
    opt = optimized(g)
    (feed_x, feed_o) = f32(6, 32), f32(2, 3, 1)
    (want,) = gd.run(g, {"x": feed_x, "o": feed_o}, ["y"])
    (got,) = gd.run(opt, {"x": feed_x, "o": feed_o}, ["y"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.c
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_c_epilogue_and_threads_match_interpreter(threads):
    g = conv_net(batch=2)
    xv = f32(2, 8, 10, 10)
    (want,) = gd.run(g, {"x": xv}, ["y"])
    m = codegen.compile(g, threads=threads)
    assert m.threads == threads
    np.testing.assert_allclose(m(x=xv)["y"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m(x=xv)["y"], want, rtol=1e-4, atol=1e-4)  # the pool is reused


@pytest.mark.c
@pytest.mark.parametrize("threads", [1, 2])
def test_c_batched_products_with_mask(threads):
    g = attention()
    feeds = {
        "q": f32(2, 3, 7, 8),
        "k": f32(2, 3, 8, 7),
        "mask": np.where(RNG.random((2, 1, 1, 7)) < 0.3, -1e9, 0),
    }
    feeds["mask"] = feeds["mask"].astype(np.float32)
    (want,) = gd.run(g, feeds, ["p"])
    opt = optimized(g)
    assert any(n.op == "sgemm" and n.attrs["epilogue"] for n in opt.nodes)
    got = codegen.compile(g, threads=threads)(**feeds)["p"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.c
@pytest.mark.parametrize("threads", [2, 3])
def test_c_big_batched_products_split_by_product_or_within(threads):
    """Two products of 2 MFLOP each: two threads take one product each, three split each
    product (fewer products than parts)."""
    with gd.Graph("bmm") as g:
        a, b = gd.placeholder("a", (2, 64, 96)), gd.placeholder("b", (2, 96, 80))
        gd.identity(gd.matmul(a, b) * 0.5, name="y")
    feeds = {"a": f32(2, 64, 96), "b": f32(2, 96, 80)}
    node = next(n for n in optimized(g, threads=threads).nodes if n.op == "sgemm")
    assert node.attrs["parts"] == threads and node.attrs["batch"]
    (want,) = gd.run(g, feeds, ["y"])
    got = codegen.compile(g, threads=threads)(**feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.c
@pytest.mark.parametrize("threads", [2, 3])
def test_conv_with_fewer_slices_than_parts_shares_each_slice(threads, monkeypatch):
    """A small-output im2col convolution (one slice of output rows: 7x7, and a stride-2 1x1)
    splits each slice's product rows over the parts: the generated step shares its slices, and
    the result is the 1-thread one bit for bit. (im2col forced: on AVX-512 such small planes
    take register tiles, conv_direct.py.)"""
    from codegen import pipeline
    from codegen.backends.c import conv_direct
    from codegen.target import Target

    monkeypatch.setattr(conv_direct, "MAX_COPY", 0)

    with gd.Graph("small_out") as g:
        x = gd.placeholder("x", (1, 96, 7, 7))
        w3, b3 = gd.constant(f32(160, 96, 3, 3, scale=0.05)), gd.constant(f32(160))
        h = gd.relu(gd.conv2d(x, w3, b3, padding=1))
        w1 = gd.constant(f32(192, 160, 1, 1, scale=0.05))
        gd.identity(gd.conv(h, w1, strides=(2, 2)), name="y")
    opts = pipeline.Options(target=Target(threads=threads), name="small_out")
    text = "".join(v for v in pipeline.run(g, opts).sources.files.values() if isinstance(v, str))
    assert text.count("fewer slices than parts") == 2
    feeds = {"x": f32(1, 96, 7, 7)}
    one = codegen.compile(g)(**feeds)["y"]
    assert np.array_equal(codegen.compile(g, threads=threads)(**feeds)["y"], one)
    (want,) = gd.run(g, feeds, ["y"])
    np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-4)


@pytest.mark.c
@pytest.mark.parametrize("batch", [1, 3])
def test_squeeze_excitation_convs_are_dense_layers(batch):
    """The 1x1 convolutions of a squeeze-and-excitation block see a 1x1 image: they become
    dense products (images as rows, weights as the packed B) with their activations as
    epilogues, and match the interpreter."""
    with gd.Graph("se") as g:
        x = gd.placeholder("x", (batch, 40, 6, 6))
        s = gd.reduce_mean(x, axes=(2, 3), keepdims=True)
        s = gd.relu(gd.conv2d(s, gd.constant(f32(10, 40, 1, 1, scale=0.3)), gd.constant(f32(10))))
        s = gd.sigmoid(gd.conv2d(s, gd.constant(f32(40, 10, 1, 1, scale=0.3))) + 0.5)
        gd.identity(x * s, name="y")
    opt = optimized(g)
    dense = [n for n in opt.nodes if n.op == "sgemm"]
    assert len(dense) == 2 and all(n.attrs["epilogue"] for n in dense)
    assert not any(n.op == "conv_gemm" for n in opt.nodes)
    feeds = {"x": f32(batch, 40, 6, 6)}
    (want,) = gd.run(g, feeds, ["y"])
    np.testing.assert_allclose(codegen.compile(g)(**feeds)["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.c
@pytest.mark.parametrize("threads", [1, 2])
def test_small_k_pointwise_convs_stream_rows_first(threads):
    """1x1 convolutions with few input channels over a wide image take loop order 1 (a row
    panel along its row before the next: output and residual stream row by row) with B in
    blocks of columns; with a residual + ReLU and a SiLU epilogue, over partial blocks, row
    panels and columns, they match the interpreter at 1 and 2 threads."""
    with gd.Graph("pw") as g:
        x = gd.placeholder("x", (1, 24, 30, 50))
        h = gd.conv2d(x, gd.constant(f32(40, 24, 1, 1, scale=0.3)), gd.constant(f32(40)))
        h = h * gd.sigmoid(h)
        y = gd.conv2d(h, gd.constant(f32(24, 40, 1, 1, scale=0.2)), gd.constant(f32(24)))
        gd.identity(gd.relu(y + x), name="y")
    convs = [n for n in optimized(g, threads=threads).nodes if n.op == "conv_gemm"]
    plans = [SgemmPlan(*n.attrs["plan"]) for n in convs]
    assert [(p.order, p.k) for p in plans] == [(1, 24), (1, 40)] and all(p.nc < p.n for p in plans)
    assert all(n.attrs["epilogue"] for n in convs)
    feeds = {"x": f32(1, 24, 30, 50)}
    (want,) = gd.run(g, feeds, ["y"])
    got = codegen.compile(g, threads=threads)(**feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.c
def test_big_products_are_split_and_binary_runs_threaded(tmp_path):
    g = gd.Graph("big")
    with g:
        x = gd.placeholder("x", (1, 32, 24, 24))
        h = gd.relu(gd.conv2d(x, gd.constant(f32(64, 32, 3, 3, scale=0.1)), gd.constant(f32(64)), padding=1))
        gd.identity(gd.matmul(gd.reshape(h, (16, 2304)), gd.constant(f32(2304, 64, scale=0.02))), name="y")
    opt = optimized(g, threads=2)
    assert [n.attrs["parts"] for n in opt.nodes if n.op in ("sgemm", "conv_gemm", "conv_winograd")] == [2, 2]
    out = codegen.export(g, tmp_path / "out", name="big", threads=2)
    header = (tmp_path / "out" / "big.h").read_text()
    assert "#define BIG_THREADS 2" in header and "big_pool_start" in header
    xv = f32(1, 32, 24, 24)
    np.save(tmp_path / "x.npy", xv)
    res = subprocess.run(
        [str(out / "big"), "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", str(tmp_path / "res")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    (want,) = gd.run(g, {"x": xv}, ["y"])
    np.testing.assert_allclose(np.load(tmp_path / "res" / "y.npy"), want, rtol=1e-4, atol=1e-4)
    # the generated Makefile links the pool too
    subprocess.run(
        ["make", "-s", "-C", str(tmp_path / "out"), "clean", "all"], check=True, capture_output=True
    )


@pytest.mark.c
@pytest.mark.parametrize(
    "portable, flags, kernel",
    [(True, (), "v128"), (True, ("-march=x86-64",), "v128"), (False, ("-DFC_NO_VECTOR",), "scalar")],
)
def test_generic_builds_without_avx(portable, flags, kernel):
    """A portable build (no -march: SSE2 on x86-64), an explicit generic -march, and the plain
    C kernel all give the interpreter's results; weights are packed for the kernel the flags pick."""
    from codegen.backends.c.toolchain import find_cc, isa
    from codegen.target import Target

    assert isa(Target("host", portable=portable), find_cc(), flags) == kernel
    g = conv_net(batch=1)
    xv = f32(1, 8, 10, 10)
    (want,) = gd.run(g, {"x": xv}, ["y"])
    m = codegen.compile(g, portable=portable, flags=flags)
    np.testing.assert_allclose(m(x=xv)["y"], want, rtol=1e-4, atol=1e-4)


@pytest.mark.c
def test_compile_many_links_the_pool_of_a_threaded_target():
    g = conv_net(batch=1)
    xv = f32(1, 8, 10, 10)
    (want,) = gd.run(g, {"x": xv}, ["y"])
    (m,) = codegen.compile_many([("threaded", g)], threads=2)
    np.testing.assert_allclose(m(x=xv)["y"], want, rtol=1e-4, atol=1e-4)
