"""Property tests (hypothesis) for broadcasting, reshape and transpose."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import graphdef as gd

SETTINGS = settings(max_examples=60, deadline=None)


def _run(build, *arrays):
    g = gd.Graph("prop")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
        y = build(*xs)
    return gd.run(g, {f"in{i}": a for i, a in enumerate(arrays)}, [y])[0]


@SETTINGS
@given(
    hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4),
    st.sampled_from(["float32", "int32"]),
)
def test_broadcast_add_matches_element_rule(shapes, dtype):
    a = np.arange(math.prod(shapes.input_shapes[0]), dtype=dtype).reshape(shapes.input_shapes[0])
    b = (np.arange(math.prod(shapes.input_shapes[1]), dtype=dtype) * 100).reshape(shapes.input_shapes[1])
    y = _run(gd.add, a, b)
    assert y.shape == shapes.result_shape and y.dtype == np.dtype(dtype)
    ra, rb = len(a.shape), len(b.shape)
    for idx in np.ndindex(y.shape):
        ia = tuple(0 if d == 1 else i for i, d in zip(idx[len(idx) - ra :], a.shape))
        ib = tuple(0 if d == 1 else i for i, d in zip(idx[len(idx) - rb :], b.shape))
        assert y[idx] == a[ia] + b[ib]


@st.composite
def _incompatible(draw):
    rank = draw(st.integers(1, 4))
    a = draw(hnp.array_shapes(min_dims=rank, max_dims=rank, min_side=2, max_side=5))
    axis = draw(st.integers(0, rank - 1))
    b = list(a)
    b[axis] = draw(st.integers(2, 5).filter(lambda v: v != a[axis]))
    lead = draw(st.integers(0, rank - 1))
    return (a, tuple(b[lead:])) if lead <= axis else (a, tuple(b))


@SETTINGS
@given(_incompatible())
def test_incompatible_shapes_raise_naming_both(shapes):
    a, b = shapes
    with gd.Graph("bad"):
        x, y = gd.placeholder("a", a), gd.placeholder("b", b)
        try:
            gd.mul(x, y)
        except gd.ShapeError as e:
            assert str(a).replace(" ", "") in str(e).replace(" ", "") and "op mul" in str(e)
        else:
            raise AssertionError(f"{a} and {b} broadcast")


@st.composite
def _reshape_case(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, max_side=4))
    size = math.prod(shape)
    factors, rest = [], size
    for _ in range(draw(st.integers(0, 3))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0] or [1]
        f = draw(st.sampled_from(divisors))
        factors.append(f)
        rest //= max(f, 1)
    target = factors + [rest]
    if size and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1
    return shape, tuple(target)


@SETTINGS
@given(_reshape_case())
def test_reshape_preserves_elements_and_round_trips(case):
    shape, target = case
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    y = _run(lambda t: gd.reshape(t, target), x)
    assert y.size == x.size and list(y.flat) == list(x.flat)
    back = _run(lambda t: gd.reshape(gd.reshape(t, target), shape), x)
    np.testing.assert_array_equal(back, x)


@st.composite
def _perm_case(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=5, max_side=4))
    perm = draw(st.permutations(range(len(shape))))
    return shape, tuple(perm)


@SETTINGS
@given(_perm_case())
def test_transpose_moves_each_element_and_inverts(case):
    shape, perm = case
    x = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    y = _run(lambda t: gd.transpose(t, perm), x)
    assert y.shape == tuple(shape[p] for p in perm)
    for idx in list(np.ndindex(y.shape))[:50]:
        src = [0] * len(shape)
        for out_axis, in_axis in enumerate(perm):
            src[in_axis] = idx[out_axis]
        assert y[idx] == x[tuple(src)]
    inverse = tuple(int(i) for i in np.argsort(perm))
    np.testing.assert_array_equal(_run(lambda t: gd.transpose(gd.transpose(t, perm), inverse), x), x)


@SETTINGS
@given(
    hnp.arrays(np.float32, hnp.array_shapes(max_dims=3, max_side=5), elements=st.floats(-1e3, 1e3, width=32))
)
def test_softmax_rows_are_distributions(x):
    y = _run(lambda t: gd.softmax(t, axis=-1), x)
    assert np.all(y >= 0)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-5)
