"""The compiler-internal GEMM ops, against einsum on the logical operands."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from codegen.backends.c import sgemm as SP


@pytest.mark.parametrize("isa", ["scalar", "avx512", "avx2", "v128"])
@pytest.mark.parametrize(
    "m,n,k,a_form,b_form",
    [
        (3, 5, 7, "row", "packed"),
        (17, 33, 40, "trans", "row"),
        (1, 9, 300, "packed", "trans"),
        (6, 1, 2, "row", "row"),
    ],
)
def test_sgemm_matches_a_plain_product(isa, m, n, k, a_form, b_form, rng, run_op):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    plan = SP.make_plan(m, n, k, isa=isa, a=a_form, b=b_form, alpha=0.5, bias="col")
    stored_a = {"row": a, "trans": a.T.copy(), "packed": SP.pack_a(a, plan)}[a_form]
    stored_b = {"row": b, "trans": b.T.copy(), "packed": SP.pack_b(b, plan)}[b_form]
    got = run_op(
        lambda x, y, z: gd.apply("sgemm", [x, y, z], plan=SP.plan_tuple(plan), isa=isa, shape=(m, n)),
        stored_a,
        stored_b,
        bias,
    )
    want = 0.5 * np.einsum("ik,kj->ij", a.astype(np.float64), b.astype(np.float64)) + bias
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sgemm_batches_with_broadcast_steps(rng, run_op):
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 6)).astype(np.float32)
    plan = SP.make_plan(4, 6, 5, isa="avx512")
    batch = ((3, 20, 30, 24), (2, 60, 0, 72))  # innermost first: (size, a step, b step, c step)
    got = run_op(
        lambda x, y: gd.apply(
            "sgemm", [x, y], plan=SP.plan_tuple(plan), isa="avx512", batch=batch, shape=(2, 3, 4, 6)
        ),
        a,
        b,
    )
    np.testing.assert_allclose(got, np.einsum("xbik,bkj->xbij", a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "xs,ws,group,strides,pads,direct",
    [
        ((2, 4, 6, 5), (6, 2, 3, 3), 2, (1, 1), (1, 1, 1, 1), False),
        ((1, 3, 5, 5), (4, 3, 1, 1), 1, (1, 1), (0, 0, 0, 0), True),
    ],
)
def test_conv_gemm_matches_a_direct_convolution(xs, ws, group, strides, pads, direct, rng, run_op):
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    mg, kg = ws[0] // group, int(np.prod(ws[1:]))
    out = tuple((xs[2 + i] + pads[i] + pads[2 + i] - ws[2 + i]) // strides[i] + 1 for i in range(2))
    plan = SP.make_plan(mg, out[0] * out[1], kg, isa="avx512", a="packed", bias="row")
    packed = np.concatenate([SP.pack_a(w[g * mg : (g + 1) * mg].reshape(mg, kg), plan) for g in range(group)])
    got = run_op(
        lambda t, p, c: gd.apply(
            "conv_gemm",
            [t, p, c],
            plan=SP.plan_tuple(plan),
            isa="avx512",
            kernel=ws[2:],
            out=out,
            strides=strides,
            pads=pads,
            dilations=(1, 1),
            group=group,
            direct=direct,
        ),
        x,
        packed,
        b,
    )
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    want = np.zeros((xs[0], ws[0]) + out)
    cg = xs[1] // group
    for n in range(xs[0]):
        for m in range(ws[0]):
            g = m // mg
            for i in range(out[0]):
                for j in range(out[1]):
                    patch = xp[
                        n,
                        g * cg : (g + 1) * cg,
                        i * strides[0] : i * strides[0] + ws[2],
                        j * strides[1] : j * strides[1] + ws[3],
                    ]
                    want[n, m, i, j] = (patch * w[m]).sum() + b[m]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_packed_operands_round_trip(rng):
    for isa in SP.ISAS:
        plan = SP.make_plan(19, 23, 700, isa=isa, a="packed", b="packed")
        a, b = rng.standard_normal((19, 700)), rng.standard_normal((700, 23))
        np.testing.assert_array_equal(SP.unpack_a(SP.pack_a(a, plan), plan), a.astype(np.float32))
        np.testing.assert_array_equal(SP.unpack_b(SP.pack_b(b, plan), plan), b.astype(np.float32))
