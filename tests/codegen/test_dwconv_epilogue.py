"""Elementwise consumers of a float32 depthwise convolution fused into it as an epilogue
(lowering.fuse_epilogues makes the conv a ``dwconv``; kernels/conv.h applies the epilogue to
each output plane's rows while they are in L1)."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import graphdef as gd
from codegen import pipeline
from codegen.backends.c import op_table
from codegen.backends.c.gemm_lowering import lower_products
from codegen.target import Target

RNG = np.random.default_rng(13)
C, H, W = 16, 31, 32  # big enough for two parts at two threads


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _out(batch, mult, stride):
    return (batch, C * mult, -(-H // stride), -(-W // stride))


# name -> the consumer of the dwconv output d (f: fed tensors of the output's shape)
TAILS = {
    "relu": lambda d, shape, feeds: gd.relu(d),
    "silu": lambda d, shape, feeds: d * gd.sigmoid(d),
    "hardswish": lambda d, shape, feeds: d * gd.clip(d + 3.0, 0.0, 6.0) / 6.0,
    "residual": lambda d, shape, feeds: d + _fed(feeds, "r", shape),
    "channel_mul": lambda d, shape, feeds: gd.relu(d * gd.constant(f32(1, shape[1], 1, 1))),
}


def _fed(feeds, name, shape):
    feeds[name] = f32(*shape)
    return gd.placeholder(name, shape)


def dw_net(tail, batch=1, mult=1, stride=1):
    """x -> depthwise 3x3 conv (+bias) "d" -> tail -> "y"; returns (graph, feeds)."""
    feeds = {"x": f32(batch, C, H, W)}
    with gd.Graph(f"dw_{tail}") as g:
        x = gd.placeholder("x", feeds["x"].shape)
        w, b = gd.constant(f32(C * mult, 1, 3, 3, scale=0.4)), gd.constant(f32(C * mult))
        d = gd.conv(x, w, b, group=C, pads=(1, 1, 1, 1), strides=(stride, stride), name="d")
        gd.identity(TAILS[tail](d, _out(batch, mult, stride), feeds), name="y")
    return g, feeds


def lowered(g, outputs=None, threads=1):
    return lower_products(pipeline.optimize(g, outputs), "avx512", threads)


def steps(g, outputs=None, threads=1):
    """The ops of the compiled program's steps."""
    options = pipeline.Options(target=Target("host", threads=threads), outputs=outputs)
    return [n.op for n in pipeline.run(g, options, until="plan").results["plan"].steps]


def _is_elementwise(op):
    return gd.registry.get_op(op).elementwise


@pytest.mark.parametrize("tail", sorted(TAILS))
def test_pass_fuses_the_consumer_and_keeps_the_values(tail):
    g, feeds = dw_net(tail, batch=2, mult=2, stride=2)
    opt = lowered(g)
    gd.verify(opt)
    (node,) = [n for n in opt.nodes if n.op == "dwconv"]
    assert node.attrs["epilogue"] and node.attrs["bias"]
    assert not any(n.op == "conv" or _is_elementwise(n.op) for n in opt.nodes)
    (want,) = gd.run(g, feeds, ["y"])
    (got,) = gd.run(opt, feeds, ["y"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tail, layout", [("residual", (64, 1, (0, 2048))), ("channel_mul", (1, 0, (0, 0)))])
def test_pass_reads_extra_inputs_by_channel_row(tail, layout):
    """The kernel's layouts: one row per output channel of an image (not per group), columns
    the positions of its plane, then the image's stride (templates/c/ops/dwconv.prelude.c.j2)."""
    g, _ = dw_net(tail, batch=2, mult=2, stride=4)  # output (2, 32, 8, 8)
    (node,) = [n for n in lowered(g).nodes if n.op == "dwconv"]
    assert node.attrs["epilogue"][2] == (layout,)


def test_pass_leaves_a_dwconv_that_is_an_output_or_shared():
    g, _ = dw_net("relu")
    assert "dwconv" not in [n.op for n in lowered(g, outputs=["d", "y"]).nodes]
    with gd.Graph("dw_shared") as g2:
        x = gd.placeholder("x", (1, C, H, W))
        d = gd.conv(x, gd.constant(f32(C, 1, 3, 3)), group=C, pads=(1, 1, 1, 1))
        gd.identity(gd.relu(d), name="y")
        gd.identity(gd.reduce_mean(d, axes=(2, 3)), name="m")  # a second consumer
    ops = [n.op for n in lowered(g2).nodes]
    assert "conv" in ops and "dwconv" not in ops and "relu" in ops


CASES = [  # (batch, channel multiplier, stride, threads)
    (1, 1, 1, 1),
    (2, 2, 2, 2),
    (2, 1, 1, 2),
    (1, 2, 2, 1),
]


@pytest.mark.c
@pytest.mark.parametrize("tail", sorted(TAILS))
@pytest.mark.parametrize("batch, mult, stride, threads", CASES)
def test_c_fused_matches_interpreter_and_unfused_build(tail, batch, mult, stride, threads):
    g, feeds = dw_net(tail, batch, mult, stride)
    ops = steps(g, threads=threads)
    assert "dwconv" in ops and "conv" not in ops
    assert not any(_is_elementwise(op) for op in ops)  # no step after the dwconv but the copy out
    if threads > 1:
        opt = lowered(g, threads=threads)
        (node,) = [n for n in opt.nodes if n.op == "dwconv"]
        assert op_table.parts_of(node, [opt.type_of(r) for r in node.inputs], threads) == threads
    (want,) = gd.run(g, feeds, ["y"])
    got = codegen.compile(g, threads=threads)(**feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # fetching d keeps the conv and its consumer apart: the same float operations on the same values
    assert "conv" in steps(g, outputs=["y", "d"], threads=threads)
    unfused = codegen.compile(g, outputs=["y", "d"], threads=threads)(**feeds)["y"]
    ulps = np.abs(got.view(np.int32).astype(np.int64) - unfused.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1


@pytest.mark.c
@pytest.mark.parametrize("tail", ["silu", "residual", "channel_mul"])
@pytest.mark.parametrize("threads", [1, 2])
def test_c_small_planes_channel_blocks(tail, threads):
    """7x7 planes with a 5x5 kernel (channel blocks where the build is AVX-512: 40 channels of 2
    images, so blocks cross images and planes are left over) with each kind of epilogue input:
    none or flat (one run per image's planes), and per channel (plane by plane)."""
    feeds = {"x": f32(2, 40, 7, 7)}
    shape = (2, 40, 7, 7)
    with gd.Graph(f"dw7_{tail}") as g:
        x = gd.placeholder("x", shape)
        w, b = gd.constant(f32(40, 1, 5, 5, scale=0.3)), gd.constant(f32(40))
        d = gd.conv(x, w, b, group=40, pads=(2,) * 4)
        gd.identity(TAILS[tail](d, shape, feeds), name="y")
    (want,) = gd.run(g, feeds, ["y"])
    np.testing.assert_allclose(codegen.compile(g, threads=threads)(**feeds)["y"], want, rtol=1e-5, atol=1e-5)
