"""Direct convolution on register tiles (codegen/backends/c/conv_direct.py, runtime_c/kernels/
conv_tiles.h): the weight packing, where the lowering chooses it, and the C kernel against the
interpreter: partial channel blocks, rows split into several tiles, strides 1, 2 and 3 (the
run-time stride tile), uneven pads, epilogues (ReLU, a residual add), two images, and 2
threads; built native (AVX-512 tiles where the machine has them), portable and plain C99."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import graphdef as gd
from codegen.backends.c import conv_direct as D
from codegen.backends.c.gemm_lowering import lower_products

pytestmark = pytest.mark.c

RNG = np.random.default_rng(31)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def test_doctests():
    assert doctest.testmod(D).failed == 0


def test_pack_round_trip():
    for m, c, k, nr in ((35, 3, (3, 3), 32), (4, 2, (3, 2), 16), (64, 64, (1, 1), 32)):
        w = f32(m, c, *k)
        wp = D.pack(w, nr)
        assert wp.size == -(-m // nr) * nr * c * int(np.prod(k))
        np.testing.assert_array_equal(D.unpack(wp, m, c, k, nr), w)


CASES: list = []


def case(cid, fn, *inputs):
    CASES.append((cid, fn, list(inputs)))


# (x shape, weights shape, conv keywords, bias, epilogue)
for cid, xs, ws, kw, bias, epi in (
    ("3x3-8x8", (1, 64, 8, 8), (64, 64, 3, 3), dict(pads=(1, 1, 1, 1)), True, "relu"),
    ("3x3-7x7-partial", (2, 24, 7, 7), (40, 24, 3, 3), dict(pads=(1, 1, 1, 1)), False, None),
    ("3x3-s2", (1, 32, 16, 16), (64, 32, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1)), True, "residual"),
    ("1x3-s2", (1, 16, 14, 14), (48, 16, 1, 3), dict(strides=(2, 2), pads=(0, 1, 0, 1)), False, "relu"),
    ("7x7-s2-stem", (1, 3, 24, 24), (20, 3, 7, 7), dict(strides=(2, 2), pads=(3, 3, 3, 3)), True, None),
    # 16 channels, one vector: tiles of one vector a row (a MobileNetV3 stem)
    ("3x3-s2-16ch", (1, 3, 30, 30), (16, 3, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1)), True, "relu"),
    ("wide-rows", (1, 5, 9, 31), (9, 5, 3, 2), dict(pads=(0, 1, 2, 0)), True, "relu"),
    ("s3", (1, 6, 20, 20), (10, 6, 2, 2), dict(strides=(3, 3)), False, None),
    # 20 x 18 outputs: the epilogue on runs of 4 rows (72 positions), a partial channel block
    ("3x3-s2-runs", (1, 8, 40, 36), (40, 8, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1)), True, "residual"),
):
    w_c, b_c = f32(*ws, scale=0.2), f32(ws[0]) if bias else None
    r_c = f32(xs[0], ws[0], (xs[2] - 1) // 2 + 1, (xs[3] - 1) // 2 + 1) if epi == "residual" else None

    def build(x, w=w_c, b=b_c, kw=kw, epi=epi, r=r_c):
        y = gd.conv(x, gd.constant(w), None if b is None else gd.constant(b), **kw)
        if epi == "relu":
            y = gd.relu(y)
        elif epi == "residual":  # (the residual case is a stride-2 one)
            y = gd.relu(y + gd.constant(r))
        return y

    case(cid, build, f32(*xs))

BUILDS = {"native": {}, "threads": dict(threads=2), "portable": dict(portable=True),
          "scalar": dict(flags=("-DFC_NO_VECTOR",))}  # fmt: skip


@pytest.fixture(scope="module")
def built(compile_cases):
    return {how: compile_cases(CASES, **kw) for how, kw in BUILDS.items()}


@pytest.mark.parametrize("how", list(BUILDS))
@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_direct_matches_interpreter(cid, how, built, c_outputs, tol):
    for name, g, w in c_outputs(built[how], cid):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-5 * float(np.abs(w).max()), err_msg=name)


def test_threads_give_the_one_thread_result_bit_for_bit(built):
    """Every item (channel block, output row) is computed the same way whatever part takes it."""
    for cid, _, inputs in CASES:
        feeds = {f"in{i}": a for i, a in enumerate(inputs)}
        one, two = built["native"][cid][1](**feeds), built["threads"][cid][1](**feeds)
        for name in one:
            assert np.array_equal(one[name], two[name]), (cid, name)


def _ops(graph, isa="avx512", threads=1):
    return [n.op for n in lower_products(graph, isa, threads).nodes]


def test_lowering_chooses_tiles_where_the_padded_copy_fits():
    """Convolutions with a kernel larger than 1x1 on AVX-512 take conv_direct, with the epilogue
    fused, small planes and large ones (a 7x7 stem on 224x224) alike; a padded copy over
    MAX_COPY floats, 1x1 convs, groups and other ISAs keep their kernels."""
    for xs, ws, kw, isa, want in (
        ((1, 64, 8, 8), (64, 64, 3, 3), dict(pads=(1, 1, 1, 1)), "avx512", "conv_direct"),
        ((1, 64, 8, 8), (64, 64, 3, 3), dict(pads=(1, 1, 1, 1)), "avx2", "conv_gemm"),
        ((1, 16, 56, 56), (16, 16, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1)), "avx512", "conv_direct"),
        ((1, 3, 224, 224), (64, 3, 7, 7), dict(strides=(2, 2), pads=(3, 3, 3, 3)), "avx512", "conv_direct"),
        ((1, 64, 256, 256), (64, 64, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1)), "avx512", "conv_gemm"),
        ((1, 64, 8, 8), (32, 64, 1, 1), {}, "avx512", "conv_gemm"),
        ((1, 64, 8, 8), (32, 64, 1, 1), dict(strides=(2, 2)), "avx512", "conv_gemm"),
        ((1, 64, 8, 8), (64, 32, 3, 3), dict(pads=(1, 1, 1, 1), group=2), "avx512", "conv_gemm"),
    ):
        with gd.Graph("c") as g:
            x = gd.placeholder("x", xs)
            g.set_outputs(gd.relu(gd.conv(x, gd.constant(f32(*ws)), **kw)))
        ops = _ops(g, isa)
        assert want in ops, (xs, ws, isa, ops)
        if want == "conv_direct":
            assert "relu" not in ops  # the epilogue


def test_padded_copy_over_max_copy_keeps_im2col():
    """A padded image of more than MAX_COPY floats keeps im2col (and the kernel's int tap offsets
    always fit)."""
    assert D.MAX_COPY < 2**31
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    assert D.eligible((1, 64, 8, 8), (64, 64, 3, 3), (8, 8), attrs, "avx512")
    assert not D.eligible((1, 1 << 25, 8, 8), (1, 1 << 25, 3, 3), (8, 8), attrs, "avx512")
