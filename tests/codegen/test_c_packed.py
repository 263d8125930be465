"""Products whose constant operands the C backend packs when it compiles (lower_linear in
codegen/backends/c/gemm_lowering.py: conv on im2col or direct tiles, a dense matmul, a gemm
with its bias folded in) against the interpreter, in one shared library.

The op examples (tests/codegen/test_c_examples.py) feed every operand as a placeholder, so the
lowering of constant weights is exercised here: 3x3 with pads, 1x1 (direct, strided),
grouped and dilated, 1-D and 3-D convolutions, a matmul over leading axes, a transposed gemm."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(42)


def arr(shape):
    return RNG.uniform(-3.0, 3.0, shape).astype(np.float32)


CASES: list[tuple[str, object, list[np.ndarray]]] = []


def case(cid, fn, *inputs):
    CASES.append((cid, fn, list(inputs)))


for cid, xs, ws, kw in (
    ("3x3-pad", (2, 3, 9, 8), (5, 3, 3, 3), dict(pads=(1, 1, 1, 1))),
    ("1x1-direct", (1, 16, 5, 7), (24, 16, 1, 1), {}),
    ("1x1-stride", (1, 8, 6, 6), (4, 8, 1, 1), dict(strides=(2, 2))),
    ("grouped-dilated", (1, 6, 11, 9), (9, 2, 3, 2), dict(group=3, dilations=(2, 1), pads=(0, 1, 2, 0))),
    ("1d", (2, 4, 17), (6, 4, 5), dict(strides=(3,), pads=(2, 1))),
    ("3d", (1, 2, 5, 6, 4), (3, 2, 3, 2, 2), dict(pads=(1, 0, 1, 1, 0, 0))),
):
    w_const, b_const = arr(ws), arr((ws[0],))
    case(
        f"conv-packed-{cid}",
        lambda x, w=w_const, b=b_const, kw=kw: gd.conv(x, gd.constant(w), gd.constant(b), **kw),
        arr(xs),
    )
case("dense-packed", lambda x: gd.matmul(x, gd.constant(arr((37, 29)))), arr((3, 5, 37)))
case(
    "gemm-packed",
    lambda x: gd.gemm(
        x, gd.constant(arr((29, 37))), gd.constant(arr((29,))), alpha=0.5, beta=2.0, trans_b=True
    ),
    arr((6, 37)),
)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_c_matches_interpreter(cid, built, c_outputs, tol):
    for name, g, w in c_outputs(built, cid):
        np.testing.assert_allclose(g, w, **tol[w.dtype.name], err_msg=name)
