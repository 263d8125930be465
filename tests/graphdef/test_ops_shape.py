"""Data-movement ops against index-by-index computations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import graphdef as gd

DTYPES = ["float32", "int64", "bool", "float16", "uint8"]


def _array(rng, shape, dtype="float32"):
    return (rng.integers(-50, 50, shape) if dtype != "bool" else rng.integers(0, 2, shape)).astype(dtype)


def _items(a):
    return [a[i] for i in np.ndindex(a.shape)]


@pytest.mark.parametrize(
    "shape,target,want",
    [
        ((2, 3, 4), (6, 4), (6, 4)),
        ((2, 3, 4), (-1,), (24,)),
        ((2, 3, 4), (4, -1), (4, 6)),
        ((6,), (1, 2, 1, 3), (1, 2, 1, 3)),
        ((1,), (), ()),
        ((), (1, 1), (1, 1)),
        ((0, 4), (2, 0, 3), (2, 0, 3)),
    ],
)
@pytest.mark.parametrize("dt", DTYPES)
def test_reshape_keeps_row_major_order(shape, target, want, dt, rng, run_op):
    x = _array(rng, shape, dt)
    y = run_op(gd.reshape, x, shape=target)
    assert y.shape == want and y.dtype == x.dtype
    assert _items(y) == _items(x)


@pytest.mark.parametrize(
    "shape,axis,want",
    [
        ((2, 3, 4), 1, (2, 12)),
        ((2, 3, 4), 0, (1, 24)),
        ((2, 3, 4), 3, (24, 1)),
        ((2, 3, 4), -1, (6, 4)),
        ((5,), 1, (5, 1)),
    ],
)
def test_flatten(shape, axis, want, rng, run_op):
    x = _array(rng, shape)
    y = run_op(gd.flatten, x, axis=axis)
    assert y.shape == want and _items(y) == _items(x)


@pytest.mark.parametrize(
    "shape,axes,want",
    [
        ((1, 3, 1, 2), None, (3, 2)),
        ((1, 3, 1, 2), (0,), (3, 1, 2)),
        ((1, 3, 1, 2), (-2,), (1, 3, 2)),
        ((1,), None, ()),
    ],
)
def test_squeeze(shape, axes, want, rng, run_op):
    x = _array(rng, shape)
    y = run_op(gd.squeeze, x, axes=axes)
    assert y.shape == want and _items(y) == _items(x)


@pytest.mark.parametrize(
    "shape,axes,want",
    [
        ((3, 2), (0,), (1, 3, 2)),
        ((3, 2), (-1,), (3, 2, 1)),
        ((3, 2), (1, 3), (3, 1, 2, 1)),
        ((), (0, 1), (1, 1)),
    ],
)
def test_unsqueeze(shape, axes, want, rng, run_op):
    x = _array(rng, shape)
    y = run_op(gd.unsqueeze, x, axes=axes)
    assert y.shape == want and _items(y) == _items(x)


@pytest.mark.parametrize(
    "shape,perm",
    [
        ((2, 3), None),
        ((2, 3, 4), (1, 0, 2)),
        ((2, 3, 4), (2, 0, 1)),
        ((2, 1, 3, 2), (3, 1, 0, 2)),
        ((4,), (0,)),
        ((2, 3, 4), (-1, 0, 1)),
    ],
)
@pytest.mark.parametrize("dt", DTYPES[:3])
def test_transpose(shape, perm, dt, rng, run_op):
    x = _array(rng, shape, dt)
    y = run_op(gd.transpose, x, perm=perm)
    p = [q % len(shape) for q in perm] if perm is not None else list(reversed(range(len(shape))))
    assert y.shape == tuple(shape[i] for i in p)
    for idx in np.ndindex(y.shape):
        src = [0] * len(shape)
        for out_axis, in_axis in enumerate(p):
            src[in_axis] = idx[out_axis]
        assert y[idx] == x[tuple(src)]


@pytest.mark.parametrize(
    "shapes,axis",
    [
        ([(2, 3), (4, 3)], 0),
        ([(2, 3), (2, 1), (2, 2)], 1),
        ([(2, 3, 1), (2, 3, 2)], -1),
        ([(3,)], 0),
        ([(2, 0), (2, 2)], 1),
    ],
)
@pytest.mark.parametrize("dt", DTYPES[:3])
def test_concat(shapes, axis, dt, rng, run_op):
    xs = [_array(rng, s, dt) for s in shapes]
    y = run_op(lambda *t: gd.concat(t, axis=axis), *xs)
    ax = axis % len(shapes[0])
    offset = 0
    for x in xs:
        for idx in np.ndindex(x.shape):
            out = list(idx)
            out[ax] += offset
            assert y[tuple(out)] == x[idx]
        offset += x.shape[ax]
    assert y.shape[ax] == offset


@pytest.mark.parametrize(
    "shape,split,axis,sizes",
    [
        ((6, 2), 3, 0, (2, 2, 2)),
        ((2, 7), (3, 4), 1, (3, 4)),
        ((2, 5), (1, 0, 4), -1, (1, 0, 4)),
        ((4,), 1, 0, (4,)),
    ],
)
def test_split(shape, split, axis, sizes, rng, run_op):
    x = _array(rng, shape)
    parts = run_op(lambda t: gd.split(t, split, axis=axis), x)
    ax = axis % len(shape)
    assert tuple(p.shape[ax] for p in parts) == sizes
    start = 0
    for p in parts:
        for idx in np.ndindex(p.shape):
            src = list(idx)
            src[ax] += start
            assert p[idx] == x[tuple(src)]
        start += p.shape[ax]


def _onnx_slice_indices(dim, start, end, step):
    """Indices an ONNX Slice picks along one axis, from the operator's definition."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    out, i = [], start
    while (i < end) if step > 0 else (i > end):
        out.append(i)
        i += step
    return out


SLICES = [
    ((10,), [2], [7], None, None),
    ((10,), [-3], [100], None, None),
    ((10,), [8], [1], None, [-2]),
    ((10,), [9], [-11], None, [-1]),
    ((10,), [0], [10], None, [3]),
    ((10,), [5], [5], None, None),
    ((10,), [-1], [-(2**63)], [0], [-3]),
    ((4, 6, 5), [1, 0], [3, 6], [0, 2], [1, 2]),
    ((4, 6, 5), [-1, 4], [-5, 1], [-3, 1], [-1, -2]),
    ((3, 4), [0], [2**63 - 1], [1], [2]),
    ((3, 4), [10], [20], [1], [1]),
]


@pytest.mark.parametrize("shape,starts,ends,axes,steps", SLICES)
def test_slice(shape, starts, ends, axes, steps, rng, run_op):
    x = _array(rng, shape)
    y = run_op(gd.slice, x, starts=starts, ends=ends, axes=axes, steps=steps)
    picks = [list(range(d)) for d in shape]
    for i, (s, e) in enumerate(zip(starts, ends)):
        a = (axes[i] if axes else i) % len(shape)
        picks[a] = _onnx_slice_indices(shape[a], s, e, steps[i] if steps else 1)
    assert y.shape == tuple(len(p) for p in picks)
    for idx in np.ndindex(y.shape):
        assert y[idx] == x[tuple(p[i] for p, i in zip(picks, idx))]


@pytest.mark.parametrize(
    "key",
    [
        (slice(1, 3),),
        (0,),
        (-1, slice(None, None, -1)),
        (Ellipsis, 1),
        (None, slice(None), 2),
        (slice(None, None, 2), None, Ellipsis),
        (1, 2, 3),
    ],
)
def test_getitem_matches_numpy_basic_indexing(key, rng, run_op):
    x = _array(rng, (3, 4, 5))
    np.testing.assert_array_equal(run_op(lambda t: t[key], x), x[key])


@pytest.mark.parametrize(
    "dshape,ishape,axis",
    [((5, 3), (4,), 0), ((5, 3), (2, 2), 1), ((2, 5, 3), (), 1), ((4,), (3, 2), 0), ((3, 4), (2,), -1)],
)
@pytest.mark.parametrize("idt", ["int64", "int32"])
def test_gather(dshape, ishape, axis, idt, rng, run_op):
    data = _array(rng, dshape)
    ax = axis % len(dshape)
    idx = rng.integers(-dshape[ax], dshape[ax], ishape).astype(idt)
    y = run_op(lambda d, i: gd.gather(d, i, axis=axis), data, idx)
    assert y.shape == dshape[:ax] + ishape + dshape[ax + 1 :]
    for out in np.ndindex(y.shape):
        pre, mid, post = out[:ax], out[ax : ax + len(ishape)], out[ax + len(ishape) :]
        k = int(idx[mid])
        assert y[out] == data[pre + (k % dshape[ax],) + post]


def test_gather_out_of_range_is_an_error(run_op):
    with pytest.raises(gd.ExecutionError, match="index 5 is out of range"):
        run_op(gd.gather, np.zeros((5, 2), np.float32), np.array([1, 5], np.int64))


@pytest.mark.parametrize("dshape,ishape,axis", [((5, 3), (6,), 0), ((2, 4), (3, 2), 1), ((4,), (), 0)])
def test_scatter_add_accumulates_duplicates(dshape, ishape, axis, rng, run_op):
    data = rng.standard_normal(dshape).astype(np.float32)
    ax = axis % len(dshape)
    idx = rng.integers(-dshape[ax], dshape[ax], ishape).astype(np.int64)
    upd = rng.standard_normal(dshape[:ax] + ishape + dshape[ax + 1 :]).astype(np.float32)
    y = run_op(lambda d, i, u: gd.scatter_add(d, i, u, axis=axis), data, idx, upd)
    want = data.astype(np.float64)
    for u in np.ndindex(upd.shape):
        pre, mid, post = u[:ax], u[ax : ax + len(ishape)], u[ax + len(ishape) :]
        want[pre + (int(idx[mid]) % dshape[ax],) + post] += upd[u]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def _pad_source(i, dim, mode):
    """Source index along an axis for padded position i (relative to the input start)."""
    if 0 <= i < dim:
        return i
    if mode == "constant":
        return None
    if mode == "edge":
        return min(max(i, 0), dim - 1)
    period = 2 * (dim - 1)
    j = abs(i) % period
    return j if j < dim else period - j


@pytest.mark.parametrize(
    "shape,pads",
    [
        ((3, 4), (1, 2, 0, 1)),
        ((2, 3, 4), (0, 1, 2, 1, 0, 2)),
        ((5,), (2, 3)),
        ((4, 5), (-1, 2, 1, -2)),
        ((3,), (0, 0)),
    ],
)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(shape, pads, mode, rng, run_op):
    x = _array(rng, shape)
    y = run_op(gd.pad, x, pads=pads, mode=mode, value=7.5)
    r = len(shape)
    assert y.shape == tuple(d + pads[i] + pads[r + i] for i, d in enumerate(shape))
    for out in np.ndindex(y.shape):
        if mode != "constant" and any(p < 0 for p in pads):
            continue  # negative pads crop first; covered in constant mode
        src = [_pad_source(o - pads[i], shape[i], mode) for i, o in enumerate(out)]
        want = 7.5 if None in src else x[tuple(src)]
        assert y[out] == want


def test_pad_rejects_reflect_wider_than_input():
    with gd.Graph("bad"):
        x = gd.placeholder("x", (2, 3))
        with pytest.raises(gd.ShapeError, match="reflect pad 3"):
            gd.pad(x, [0, 3, 0, 0], mode="reflect")


@pytest.mark.parametrize(
    "shape,target", [((3, 1), (3, 4)), ((3, 1), (2, 1, 6)), ((1,), (2, 3)), ((2, 3), (1, 1)), ((), (2,))]
)
def test_expand(shape, target, rng, run_op):
    x = _array(rng, shape)
    y = run_op(gd.expand, x, shape=target)
    out_shape = tuple(np.broadcast_shapes(shape, target))
    assert y.shape == out_shape
    lead = len(out_shape) - len(shape)
    for idx in np.ndindex(out_shape):
        assert y[idx] == x[tuple(0 if d == 1 else i for i, d in zip(idx[lead:], shape))]


@pytest.mark.parametrize(
    "shape,reps", [((2, 3), (2, 1)), ((2, 3), (1, 3)), ((3,), (0,)), ((1, 2, 2), (2, 2, 3))]
)
def test_tile(shape, reps, rng, run_op):
    x = _array(rng, shape)
    y = run_op(gd.tile, x, repeats=reps)
    assert y.shape == tuple(d * r for d, r in zip(shape, reps))
    for idx in np.ndindex(y.shape):
        assert y[idx] == x[tuple(i % d for i, d in zip(idx, shape))]


@pytest.mark.parametrize("fn", [gd.identity, gd.stop_gradient])
def test_identity_and_stop_gradient(fn, rng, run_op):
    x = _array(rng, (3, 2))
    np.testing.assert_array_equal(run_op(fn, x), x)


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda x: gd.reshape(x, (5, -1)), "cannot reshape float32\\[2,3\\] \\(6 elements\\)"),
        (lambda x: gd.reshape(x, (-1, -1)), "more than one -1"),
        (lambda x: gd.squeeze(x, 0), "size is not 1"),
        (lambda x: gd.transpose(x, (0, 0)), "not a permutation"),
        (lambda x: gd.concat([x, gd.zeros((3, 3))], axis=1), "differ outside axis 1"),
        (lambda x: gd.split(x, 4, axis=1), "axis 1 into 4 equal parts"),
        (lambda x: gd.split(x, (1, 1), axis=1), "do not add up"),
        (lambda x: gd.tile(x, (2,)), "repeats"),
        (lambda x: gd.expand(x, (4, 3)), "cannot broadcast"),
        (lambda x: gd.gather(x, gd.zeros((2,))), "indices has dtype float32"),
        (lambda x: gd.flatten(x, 4), "out of range"),
        (lambda x: gd.slice(x, [0], [1], [5]), "out of range"),
        (lambda x: gd.pad(x, [1, 1]), "must have 2 x rank"),
    ],
)
def test_shape_op_errors(build, match):
    with gd.Graph("bad"):
        x = gd.placeholder("x", (2, 3))
        with pytest.raises(gd.ShapeError, match=match) as err:
            build(x)
    assert "op " in str(err.value)


def test_permutation_sizes_are_consistent():
    # every perm of a rank-4 tensor: the output size is the input size
    with gd.Graph("perm"):
        x = gd.placeholder("x", (2, 3, 4, 5))
        for perm in itertools.permutations(range(4)):
            assert math.prod(gd.transpose(x, perm).shape) == 120
