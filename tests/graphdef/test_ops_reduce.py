"""Reductions and arg-reductions against explicit loops over the reduced positions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphdef as gd

SCALAR = {
    "reduce_sum": (gd.reduce_sum, sum),
    "reduce_mean": (gd.reduce_mean, lambda v: sum(v) / len(v)),
    "reduce_max": (gd.reduce_max, max),
    "reduce_min": (gd.reduce_min, min),
    "reduce_prod": (gd.reduce_prod, math.prod),
}
AXES = [
    ((2, 3, 4), None),
    ((2, 3, 4), (1,)),
    ((2, 3, 4), (0, 2)),
    ((2, 3, 4), (-1,)),
    ((2, 3, 4), (-3, -1)),
    ((5,), (0,)),
    ((2, 3), ()),
    ((3, 1, 2), (1,)),
]


def _loop_reduce(x, axes, keepdims, fn):
    rank = x.ndim
    axes = tuple(range(rank)) if axes is None else tuple(a % rank for a in axes)
    kept = [i for i in range(rank) if i not in axes]
    out_shape = tuple(1 if i in axes else x.shape[i] for i in range(rank))
    out = np.empty(out_shape, dtype=object)
    for idx in np.ndindex(out_shape):
        members = [x[full] for full in np.ndindex(x.shape) if all(full[i] == idx[i] for i in kept)]
        out[idx] = fn([m.item() for m in members])
    return out if keepdims else out.reshape(tuple(x.shape[i] for i in kept))


@pytest.mark.parametrize("op", sorted(SCALAR))
@pytest.mark.parametrize("shape,axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(op, shape, axes, keepdims, rng, run_op, tol):
    builder, scalar = SCALAR[op]
    dts = ["float32", "float16", "float64"] + ([] if op == "reduce_mean" else ["int32", "int64"])
    for dt in dts:
        x = (rng.uniform(0.5, 1.5, shape) if dt.startswith("float") else rng.integers(-3, 4, shape)).astype(
            dt
        )
        got = run_op(builder, x, axes=axes, keepdims=keepdims)
        want = _loop_reduce(x.astype(np.float64) if dt.startswith("float") else x, axes, keepdims, scalar)
        assert got.dtype == np.dtype(dt) and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol(dt))


def test_sum_of_empty_axis_is_zero_and_max_of_it_is_refused(run_op):
    np.testing.assert_array_equal(run_op(gd.reduce_sum, np.zeros((0, 3), np.float32), axes=0), [0, 0, 0])
    with gd.Graph("bad"):
        x = gd.placeholder("x", (0, 3))
        with pytest.raises(gd.ShapeError, match="empty axis"):
            gd.reduce_max(x, axes=0)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape,axis", [((4, 5), 1), ((4, 5), 0), ((2, 3, 4), -1), ((6,), 0), ((2, 3, 4), 1)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("last", [False, True])
def test_arg_reductions(op, shape, axis, keepdims, last, rng, run_op):
    x = rng.integers(0, 3, shape).astype(np.float32)  # many ties
    got = run_op(getattr(gd, op), x, axis=axis, keepdims=keepdims, select_last_index=last)
    ax = axis % len(shape)
    out_shape = tuple(1 if i == ax else d for i, d in enumerate(shape))
    want = np.empty(out_shape, np.int64)
    for idx in np.ndindex(out_shape):
        line = [x[idx[:ax] + (k,) + idx[ax + 1 :]] for k in range(shape[ax])]
        best = (max if op == "argmax" else min)(line)
        hits = [k for k, v in enumerate(line) if v == best]
        want[idx] = hits[-1] if last else hits[0]
    if not keepdims:
        want = want.reshape(tuple(d for i, d in enumerate(shape) if i != ax))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_reduce_axis_errors():
    with gd.Graph("bad"):
        x = gd.placeholder("x", (2, 3))
        with pytest.raises(gd.ShapeError, match="axes 2 is out of range for rank 2"):
            gd.reduce_sum(x, axes=2)
        with pytest.raises(gd.ShapeError, match="repeat an axis"):
            gd.reduce_sum(x, axes=(1, -1))
        with pytest.raises(gd.ShapeError, match="dtype"):
            gd.reduce_mean(gd.cast(x, "int32"))
