"""An expansion and its depthwise conv as one step (codegen/backends/c/pointwise_depthwise.py,
runtime_c/kernels/pointwise_depthwise.h): where the lowering merges them, and the C kernel against the
interpreter: SiLU and ReLU activations or none, the planes' means as a second output, channel
counts that end in a partial vector and in a pass of one vector, stride 2 with uneven pads, 5x5
taps, dilation, a plane whose ring holds one window's rows, no biases, two images, and 2
threads; built native (AVX-512 where the machine has it) and plain C99 (one lane a vector)."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from codegen import pipeline
from codegen.backends.c import pointwise_depthwise as P
from codegen.backends.c.gemm_lowering import lower_products
from codegen.backends.c.winograd import conv_algorithm

pytestmark = pytest.mark.c

RNG = np.random.default_rng(41)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def silu(y):
    return y * gd.sigmoid(y)


CASES: list = []
S2 = dict(strides=(2, 2), pads=(1, 1, 1, 1))
# id: (x shape, expanded channels, kernel, activations, bias, depthwise keywords, squeeze-and-
# excitation: the output scaled by its planes' means, which the merged step computes)
for cid, (xs, cexp, k, act1, act2, bias, kw, se) in {
    # 72 channels: two items, the second's pass of one vector, 8 lanes of it real
    "silu-s2-72-se": ((1, 16, 28, 28), 72, (3, 3), silu, silu, True, S2, True),
    "relu-5x5-2img-se": ((2, 8, 16, 14), 40, (5, 5), gd.relu, None, True, dict(pads=(2, 2, 2, 2)), True),
    # a 48 x 40 plane: the ring holds one window's rows; dilation 2
    "window-dil2": (
        (1, 4, 48, 40),
        32,
        (3, 3),
        silu,
        gd.relu,
        True,
        dict(pads=(2, 2, 2, 2), dilations=(2, 2)),
        False,
    ),
    "nobias-s2-uneven": (
        (1, 6, 15, 17),
        33,
        (3, 3),
        None,
        silu,
        False,
        dict(strides=(2, 2), pads=(0, 1, 1, 0)),
        False,
    ),
}.items():
    w1, b1 = f32(cexp, xs[1], 1, 1, scale=0.4), f32(cexp) if bias else None
    w2, b2 = f32(cexp, 1, *k, scale=0.3), f32(cexp) if bias else None

    def build(x, w1=w1, b1=b1, w2=w2, b2=b2, act1=act1, act2=act2, kw=kw, se=se):
        e = gd.conv(x, gd.constant(w1), None if b1 is None else gd.constant(b1))
        e = act1(e) if act1 else e
        d = gd.conv(e, gd.constant(w2), None if b2 is None else gd.constant(b2), group=w2.shape[0], **kw)
        d = act2(d) if act2 else d
        return d * gd.sigmoid(gd.reduce_mean(d, (2, 3), keepdims=True)) if se else d

    CASES.append((cid, build, [f32(*xs)]))

BUILDS = {"native": {}, "threads": dict(threads=2), "scalar": dict(flags=("-DFC_NO_VECTOR",))}


@pytest.fixture(scope="module")
def built(compile_cases):
    return {how: compile_cases(CASES, **kw) for how, kw in BUILDS.items()}


def _lowered(graph, isa="avx512", threads=1):
    """The graph after the shared passes (elementwise chains fused) and the lowering for ``isa``."""
    g = pipeline.run(graph, pipeline.Options(), until="prune_inlined").results["prune_inlined"]
    return lower_products(g, isa, threads)


def _ops(graph, isa="avx512", threads=1):
    return [n.op for n in _lowered(graph, isa, threads).nodes]


def test_every_case_is_merged():
    for cid, fn, inputs in CASES:
        with gd.Graph("b") as g:
            g.set_outputs(fn(gd.placeholder("x", inputs[0].shape)))
        ops = _ops(g)
        assert "pwdw" in ops and "conv_gemm" not in ops and "dwconv" not in ops, (cid, ops)
        assert "reduce_mean" not in ops, (cid, ops)  # the squeeze-and-excitation mean: an output of pwdw
    node = next(n for n in _lowered(g).nodes if n.op == "pwdw")
    assert conv_algorithm(node) == "expand+depthwise"  # what flowc inspect prints


@pytest.mark.parametrize("how", list(BUILDS))
@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_pwdw_matches_interpreter(cid, how, built, c_outputs):
    for name, g, w in c_outputs(built[how], cid):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-5 * float(np.abs(w).max()), err_msg=name)


def test_threads_give_the_one_thread_result_bit_for_bit(built):
    """Every unit (image, block of channels, band of rows) is computed the same way whatever part
    takes it. (Not the squeeze-and-excitation cases: at 2 threads their items split into bands
    and the planes' means are the reduce_mean kernel's, summed in its own order.)"""
    for cid, _, inputs in CASES:
        if cid.endswith("-se"):
            continue
        feeds = {f"in{i}": a for i, a in enumerate(inputs)}
        one, two = built["native"][cid][1](**feeds), built["threads"][cid][1](**feeds)
        for name in one:
            assert np.array_equal(one[name], two[name]), (cid, name)


def test_merged_only_where_legal_and_measured_faster():
    """No merge on a plane under MIN_PLANE, on another ISA, where the expansion has a second
    consumer or is a graph output, for a channel multiplier of 2, or for a strided expansion."""

    def ops(xs, *, isa="avx512", second=False, output=False, mult=1, stride=1):
        with gd.Graph("b") as g:
            x = gd.placeholder("x", xs)
            e = gd.relu(gd.conv(x, gd.constant(f32(32, xs[1], 1, 1)), strides=(stride, stride)))
            d = gd.conv(e, gd.constant(f32(32 * mult, 1, 3, 3)), pads=(1, 1, 1, 1), group=32)
            g.set_outputs(gd.relu(d), *([gd.reduce_sum(e)] if second else []), *([e] if output else []))
        return _ops(g, isa)

    assert "pwdw" in ops((1, 8, 14, 14))
    assert P.MIN_PLANE > 49 and "pwdw" not in ops((1, 8, 7, 7))
    for kw in (dict(isa="avx2"), dict(second=True), dict(output=True), dict(mult=2), dict(stride=2)):
        assert "pwdw" not in ops((1, 8, 28, 28), **kw), kw


def test_blocked_round_trip():
    for rows, cexp in ((5, 72), (3, 32), (1, 33)):
        a = f32(rows, cexp)
        cp = -(-cexp // P.LANES) * P.LANES
        b = P.blocked(a, cp)
        assert b.shape == (cp // P.LANES, rows, P.LANES)
        np.testing.assert_array_equal(P.unblocked(b, cexp), a)
