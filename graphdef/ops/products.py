"""Matrix products: matmul (numpy's broadcasting rules) and gemm (ONNX's, with transposes,
alpha, beta and a bias).
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import apply, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import KERNEL, Attr, Example, Sample, defop
from ._util import broadcast_shapes, broadcasts_to, same_dtype, widen_half
from .elementwise import mul, unbroadcast
from .shape import reshape, transpose


def matmul_shapes(a, b):
    ash = (1,) + a.shape if a.rank == 1 else a.shape
    bsh = b.shape + (1,) if b.rank == 1 else b.shape
    return ash, bsh, broadcast_shapes(ash[:-2], bsh[:-2])


def _flops_matmul(ins, outs, attrs):
    ash, bsh, batch = matmul_shapes(*ins)
    return 2 * math.prod(batch) * ash[-2] * ash[-1] * bsh[-1]


def gemm_dims(ins, attrs):
    a, b = ins[:2]
    m, k = a.shape[::-1] if attrs["trans_a"] else a.shape
    return m, k, b.shape[0] if attrs["trans_b"] else b.shape[1]


def _flops_gemm(ins, outs, attrs):
    m, k, n = gemm_dims(ins, attrs)
    return 2 * m * n * k


# ----------------------------------------------------------------------------- matmul
def _einsum(spec: str, alpha=1.0):
    """An example's expectation: ``alpha`` times an explicit einsum, in float64 (int64)."""

    def expect(*arrays):
        acc = np.int64 if arrays[0].dtype.kind in "iu" else np.float64
        y = np.einsum(spec, *(a.astype(acc) for a in arrays))
        return y if alpha == 1 else alpha * y

    return expect


def _gemm_expect(spec, alpha=1.0, beta=1.0):
    def expect(a, b, c=None):
        y = _einsum(spec, alpha)(a, b)
        return y if c is None else y + beta * c.astype(y.dtype)

    return expect


def _matmul_infer(types, attrs):
    a, b = types
    dt = same_dtype(types, dtypes.NUMERIC)
    if a.rank == 0 or b.rank == 0:
        raise ShapeError("matmul needs inputs of rank >= 1")
    ash = (1,) + a.shape if a.rank == 1 else a.shape
    bsh = b.shape + (1,) if b.rank == 1 else b.shape
    if ash[-1] != bsh[-2]:
        raise ShapeError(f"inner dimensions differ: {a.shape} @ {b.shape}")
    batch = broadcast_shapes(ash[:-2], bsh[:-2])
    out = batch + (ash[-2], bsh[-1])
    if a.rank == 1:
        out = out[:-2] + out[-1:]
    if b.rank == 1:
        out = out[:-1]
    return TensorType(out, dt)


def _matmul_ref(xs, attrs):
    a, b = xs
    return np.matmul(widen_half(a), widen_half(b)).astype(a.dtype)


def _swap(t):
    perm = list(range(t.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return transpose(t, perm)


def _g_matmul(op, gys):
    a, b = op.inputs
    a2 = reshape(a, (1,) + a.shape) if a.rank == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.rank == 1 else b
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    g = reshape(gys[0], batch + (a2.shape[-2], b2.shape[-1]))
    return (
        op.want(0, lambda: reshape(unbroadcast(matmul(g, _swap(b2)), a2.shape), a.shape)),
        op.want(1, lambda: reshape(unbroadcast(matmul(_swap(a2), g), b2.shape), b.shape)),
    )


defop(
    "matmul",
    ("a", "b"),
    _matmul_infer,
    _matmul_ref,
    _g_matmul,
    flops=_flops_matmul,
    kind=KERNEL,
    doc="numpy matmul: batched, broadcast over leading axes, 1-D operands promoted",
    examples=(
        Example((Sample((3, 4)), Sample((4, 2))), expect=_einsum("ik,kj->ij")),
        Example((Sample((2, 1, 3, 4)), Sample((3, 4, 2))), expect=_einsum("...ik,...kj->...ij")),
        Example((Sample((4,), "float64"), Sample((2, 4, 3), "float64")), expect=_einsum("k,bkj->bj")),
        Example((Sample((3, 4), "int32", -9, 9), Sample((4,), "int32", -9, 9)), expect=_einsum("ik,k->i")),
        # float32 vectors (the fast GEMM takes them as one row or one column)
        Example((Sample((4,)), Sample((4, 3))), expect=_einsum("k,kj->j"), grad=False),
        Example((Sample((3, 4)), Sample((4,))), expect=_einsum("ik,k->i"), grad=False),
    )
    + tuple(  # the other types of the batched kernel (integers wrap)
        Example(
            (Sample((2, 1, 3, 4), dt, -9, 9), Sample((3, 4, 2), dt, -9, 9)),
            expect=_einsum("...ik,...kj->...ij"),
            grad=False,
        )
        for dt in ("float16", "int8", "int64")
    ),
)


def matmul(a, b, name=None):
    return apply("matmul", [operand(a), operand(b)], name)


def _gemm_infer(types, attrs):
    a, b = types[:2]
    dt = same_dtype(types, dtypes.NUMERIC)
    if a.rank != 2 or b.rank != 2:
        raise ShapeError("gemm needs 2-D a and b")
    m, k = a.shape[::-1] if attrs["trans_a"] else a.shape
    k2, n = b.shape[::-1] if attrs["trans_b"] else b.shape
    if k != k2:
        raise ShapeError(f"inner dimensions differ: {k} vs {k2}")
    if len(types) == 3 and not broadcasts_to(types[2].shape, (m, n)):
        raise ShapeError(f"c of shape {types[2].shape} does not broadcast to {(m, n)}")
    return TensorType((m, n), dt)


def _gemm_ref(xs, attrs):
    a, b = widen_half(xs[0]), widen_half(xs[1])
    a = a.T if attrs["trans_a"] else a
    b = b.T if attrs["trans_b"] else b
    y = attrs["alpha"] * (a @ b) if attrs["alpha"] != 1.0 else a @ b
    if len(xs) == 3:
        y = y + (attrs["beta"] * widen_half(xs[2]) if attrs["beta"] != 1.0 else widen_half(xs[2]))
    return np.asarray(y).astype(xs[0].dtype)


def _g_gemm(op, gys):
    a, b = op.inputs[:2]
    alpha, beta = op.attrs["alpha"], op.attrs["beta"]
    g = mul(gys[0], alpha) if alpha != 1.0 else gys[0]
    a_ = transpose(a) if op.attrs["trans_a"] else a
    b_ = transpose(b) if op.attrs["trans_b"] else b

    def ga():
        t = matmul(g, transpose(b_))
        return transpose(t) if op.attrs["trans_a"] else t

    def gb():
        t = matmul(transpose(a_), g)
        return transpose(t) if op.attrs["trans_b"] else t

    def gc():
        t = unbroadcast(gys[0], op.inputs[2].shape)
        return mul(t, beta) if beta != 1.0 else t

    return (op.want(0, ga), op.want(1, gb)) + ((op.want(2, gc),) if len(op.inputs) == 3 else ())


defop(
    "gemm",
    ("a", "b", "c?"),
    _gemm_infer,
    _gemm_ref,
    _g_gemm,
    attrs={
        "alpha": Attr("float", 1.0),
        "beta": Attr("float", 1.0),
        "trans_a": Attr("bool", False),
        "trans_b": Attr("bool", False),
    },
    flops=_flops_gemm,
    kind=KERNEL,
    doc="alpha * op(a) @ op(b) + beta * c, op = transpose if trans_*",
    examples=(
        Example(
            (Sample((4, 3)), Sample((2, 4)), Sample((2,))),
            {"trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 2.0},
            _gemm_expect("ki,jk->ij", 0.5, 2.0),
        ),
        Example(
            (Sample((4, 3)), Sample((4, 5)), Sample((3, 1))), {"trans_a": True}, _gemm_expect("ki,kj->ij")
        ),
        Example(
            (Sample((3, 4), "float64"), Sample((5, 4), "float64")),
            {"trans_b": True},
            _gemm_expect("ik,jk->ij"),
        ),
        Example(
            (Sample((3, 4), "int32", -9, 9), Sample((4, 2), "int32", -9, 9), Sample((3, 2), "int32", -9, 9)),
            {"alpha": 2.0, "beta": -1.0},
            _gemm_expect("ik,kj->ij", 2, -1),
        ),
    ),
)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False, name=None):
    inputs = [operand(a), operand(b)] + ([operand(c)] if c is not None else [])
    return apply("gemm", inputs, name, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
