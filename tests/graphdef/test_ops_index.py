"""Indexing ops against element-by-element loops, their gradients against finite differences,
and the ONNX converters of the indexing family against onnx's reference evaluator."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphdef as gd

GRADS_TESTED = {"gather_elements", "scatter_elements", "gather_nd", "scatter_nd", "topk"}

DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int32", "int64"]


def _array(rng, shape, dtype):
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    lo = 0 if dtype == "uint8" else -20
    return rng.integers(lo, 20, shape).astype(dtype)


def _norm(i, dim):
    assert -dim <= i < dim
    return int(i) + dim if i < 0 else int(i)


def _combine(reduction, old, new):
    if reduction == "none":
        return new
    if reduction == "add":
        return old + new
    if reduction == "mul":
        return old * new
    return max(old, new) if reduction == "max" else min(old, new)


# ----------------------------------------------------------------------------- gather_elements
@pytest.mark.parametrize(
    "dshape,ishape,axis",
    [
        ((3, 4), (3, 4), 0),
        ((3, 4), (2, 6), 1),
        ((2, 3, 4), (2, 5, 4), 1),
        ((2, 3, 4), (1, 2, 7), -1),
        ((5,), (8,), 0),
        ((2, 3, 1), (2, 3, 4), 2),
        ((3, 2), (0, 2), 0),
    ],
)
@pytest.mark.parametrize("idt", ["int64", "int32"])
def test_gather_elements(dshape, ishape, axis, idt, rng, run_op):
    data = _array(rng, dshape, "float32")
    dim = dshape[axis]
    idx = rng.integers(-dim, dim, ishape).astype(idt)
    y = run_op(lambda d, i: gd.gather_elements(d, i, axis=axis), data, idx)
    assert y.shape == ishape and y.dtype == data.dtype
    a = axis % len(dshape)
    for pos in np.ndindex(ishape):
        src = list(pos)
        src[a] = _norm(idx[pos], dim)
        assert y[pos] == data[tuple(src)]


@pytest.mark.parametrize("dt", DTYPES + ["bool"])
def test_gather_elements_dtypes(dt, rng, run_op):
    data = _array(rng, (4, 3), dt)
    idx = np.array([[3, 0, -1], [1, 1, 2]], np.int64)
    y = run_op(lambda d, i: gd.gather_elements(d, i, axis=0), data, idx)
    want = np.array([[data[3, 0], data[0, 1], data[3, 2]], [data[1, 0], data[1, 1], data[2, 2]]], data.dtype)
    np.testing.assert_array_equal(y, want)


def test_gather_elements_out_of_range_is_an_error(run_op):
    with pytest.raises(gd.ExecutionError, match="index 3 is out of range for an axis of size 3"):
        run_op(
            lambda d, i: gd.gather_elements(d, i, axis=1),
            np.zeros((2, 3), np.float32),
            np.array([[0, 3]], np.int64),
        )
    with pytest.raises(gd.ExecutionError, match="index -4"):
        run_op(
            lambda d, i: gd.gather_elements(d, i, axis=1),
            np.zeros((2, 3), np.float32),
            np.array([[0, -4]], np.int64),
        )


# ----------------------------------------------------------------------------- scatter_elements
def _scatter_elements_loop(data, idx, upd, axis, reduction):
    out = data.copy()
    a = axis % data.ndim
    for pos in np.ndindex(idx.shape):
        dst = list(pos)
        dst[a] = _norm(idx[pos], data.shape[a])
        dst = tuple(dst)
        out[dst] = _combine(reduction, out[dst], upd[pos])
    return out


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize(
    "dshape,ishape,axis",
    [((4, 3), (6, 3), 0), ((3, 5), (2, 4), 1), ((2, 3, 4), (2, 6, 3), -2), ((6,), (9,), 0)],
)
def test_scatter_elements(reduction, dshape, ishape, axis, rng, run_op):
    data = _array(rng, dshape, "float64")
    dim = dshape[axis]
    idx = rng.integers(-dim, dim, ishape)  # many repeats: the order matters for "none"
    upd = _array(rng, ishape, "float64")
    y = run_op(lambda d, i, u: gd.scatter_elements(d, i, u, axis=axis, reduction=reduction), data, idx, upd)
    np.testing.assert_array_equal(y, _scatter_elements_loop(data, idx, upd, axis, reduction))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_dtypes(dt, reduction, rng, run_op):
    data = _array(rng, (3, 4), dt)
    idx = np.array([[1, 0, 2, 1], [1, -3, 0, 2]], np.int32)
    upd = _array(rng, (2, 4), dt)
    y = run_op(lambda d, i, u: gd.scatter_elements(d, i, u, axis=0, reduction=reduction), data, idx, upd)
    want = _scatter_elements_loop(data, idx, upd, 0, reduction)
    assert y.dtype == data.dtype
    np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=1e-3)


def test_scatter_elements_integers_wrap(run_op):
    data = np.array([100, 2], np.int8)
    y = run_op(
        lambda d, i, u: gd.scatter_elements(d, i, u, reduction="add"),
        data,
        np.array([0, 0]),
        np.array([20, 10], np.int8),
    )
    assert y.tolist() == [-126, 2]


def test_scatter_elements_max_propagates_nan(run_op):
    data = np.array([1.0, np.nan, 3.0], np.float32)
    upd = np.array([np.nan, 5.0, 2.0], np.float32)
    y = run_op(lambda d, i, u: gd.scatter_elements(d, i, u, reduction="max"), data, np.array([0, 1, 2]), upd)
    np.testing.assert_array_equal(y, [np.nan, np.nan, 3.0])


def test_scatter_elements_bool(run_op):
    data = np.zeros((2, 3), bool)
    y = run_op(
        lambda d, i, u: gd.scatter_elements(d, i, u, axis=1),
        data,
        np.array([[2], [0]]),
        np.array([[True], [True]]),
    )
    assert y.tolist() == [[False, False, True], [True, False, False]]
    with pytest.raises(gd.ShapeError, match="reduction 'add' needs numeric data"):
        run_op(
            lambda d, i, u: gd.scatter_elements(d, i, u, reduction="add"),
            data,
            np.zeros((1, 3), np.int64),
            np.zeros((1, 3), bool),
        )


# ----------------------------------------------------------------------------- gather_nd
def _gather_nd_loop(data, idx, b):
    k = idx.shape[-1]
    out_shape = idx.shape[:-1] + data.shape[b + k :]
    out = np.zeros(out_shape, data.dtype)
    for pos in np.ndindex(idx.shape[:-1]):
        tup = [_norm(v, data.shape[b + j]) for j, v in enumerate(idx[pos])]
        out[pos] = data[pos[:b] + tuple(tup)]
    return out


@pytest.mark.parametrize(
    "dshape,ishape,b",
    [
        ((2, 2), (2, 2), 0),
        ((2, 2), (2, 1), 0),
        ((2, 2, 2), (2, 1, 2), 0),
        ((2, 3, 4), (2, 5, 1), 1),
        ((2, 3, 4, 5), (2, 3, 2, 1), 2),
        ((3, 4, 5), (4, 3), 0),
        ((2, 3, 4), (2, 2), 1),
        ((4,), (3, 1), 0),
        ((3, 4), (0, 1), 0),
    ],
)
@pytest.mark.parametrize("idt", ["int64", "int32"])
def test_gather_nd(dshape, ishape, b, idt, rng, run_op):
    data = _array(rng, dshape, "float32")
    k = ishape[-1]
    idx = np.stack([rng.integers(-dshape[b + j], dshape[b + j], ishape[:-1]) for j in range(k)], -1)
    idx = idx.astype(idt).reshape(ishape)
    y = run_op(lambda d, i: gd.gather_nd(d, i, batch_dims=b), data, idx)
    np.testing.assert_array_equal(y, _gather_nd_loop(data, idx, b))


def test_gather_nd_onnx_example(run_op):
    data = np.array([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], np.int32)
    y = run_op(lambda d, i: gd.gather_nd(d, i, batch_dims=1), data, np.array([[1], [0]]))
    assert y.tolist() == [[2, 3], [4, 5]]


def test_gather_nd_out_of_range_names_the_component(run_op):
    with pytest.raises(gd.ExecutionError, match="index 4 is out of range for an axis of size 4"):
        run_op(gd.gather_nd, np.zeros((5, 4), np.float32), np.array([[4, 4]], np.int64))


# ----------------------------------------------------------------------------- scatter_nd
def _scatter_nd_loop(data, idx, upd, reduction):
    out = data.copy()
    for pos in np.ndindex(idx.shape[:-1]):
        tup = tuple(_norm(v, data.shape[j]) for j, v in enumerate(idx[pos]))
        region = out[tup]
        if np.ndim(region) == 0:
            out[tup] = _combine(reduction, region, upd[pos])
        else:
            for sub in np.ndindex(region.shape):
                out[tup + sub] = _combine(reduction, out[tup + sub], upd[pos][sub])
    return out


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize(
    "dshape,ishape",
    [((8,), (4, 1)), ((4, 4, 4), (2, 1)), ((3, 4), (5, 2)), ((3, 4, 2), (2, 3, 2)), ((3, 4), (0, 1))],
)
def test_scatter_nd(reduction, dshape, ishape, rng, run_op):
    data = _array(rng, dshape, "float64")
    k = ishape[-1]
    idx = np.stack([rng.integers(-dshape[j], dshape[j], ishape[:-1]) for j in range(k)], -1).reshape(ishape)
    upd = _array(rng, ishape[:-1] + dshape[k:], "float64")
    y = run_op(lambda d, i, u: gd.scatter_nd(d, i, u, reduction=reduction), data, idx, upd)
    np.testing.assert_array_equal(y, _scatter_nd_loop(data, idx, upd, reduction))


@pytest.mark.parametrize("dt", DTYPES + ["bool"])
def test_scatter_nd_dtypes(dt, rng, run_op):
    data = _array(rng, (3, 2), dt)
    idx = np.array([[2], [-3], [2]], np.int32)
    upd = _array(rng, (3, 2), dt)
    y = run_op(lambda d, i, u: gd.scatter_nd(d, i, u), data, idx, upd)
    np.testing.assert_array_equal(y, _scatter_nd_loop(data, idx, upd, "none"))


def test_scatter_nd_onnx_example(run_op):
    y = run_op(
        gd.scatter_nd,
        np.arange(1, 9, dtype=np.float32),
        np.array([[4], [3], [1], [7]]),
        np.array([9, 10, 11, 12], np.float32),
    )
    assert y.tolist() == [1, 11, 3, 10, 9, 6, 7, 12]


@pytest.mark.parametrize(
    "build,types,match",
    [
        (lambda d, i: gd.gather_elements(d, i), [((2, 3), "float32"), ((2,), "int64")], "must have the rank"),
        (
            lambda d, i: gd.gather_elements(d, i, axis=1),
            [((2, 3), "float32"), ((3, 3), "int64")],
            "exceed data",
        ),
        (
            lambda d, i: gd.gather_elements(d, i),
            [((2, 3), "float32"), ((2, 3), "float32")],
            "indices has dtype",
        ),
        (lambda d, i: gd.gather_nd(d, i), [((2, 3), "float32"), ((2, 3), "int64")], "must be 1 to 2 long"),
        (
            lambda d, i: gd.gather_nd(d, i, batch_dims=1),
            [((2, 3), "float32"), ((3, 1), "int64")],
            "batch dims of data",
        ),
        (
            lambda d, i: gd.gather_nd(d, i, batch_dims=2),
            [((2, 3), "float32"), ((2, 1), "int64")],
            "batch_dims 2 must lie in",
        ),
    ],
)
def test_shape_errors_name_the_node(build, types, match):
    with gd.Graph("bad"):
        xs = [gd.placeholder(f"in{i}", s, dt) for i, (s, dt) in enumerate(types)]
        with pytest.raises(gd.ShapeError, match=match) as e:
            build(*xs)
    assert "node '" in str(e.value)


def test_scatter_shape_errors():
    with gd.Graph("bad"):
        d = gd.placeholder("d", (3, 4))
        i = gd.placeholder("i", (2, 1), "int64")
        with pytest.raises(gd.ShapeError, match=r"updates shape \(2, 3\) must be \(2, 4\)"):
            gd.scatter_nd(d, i, gd.placeholder("u", (2, 3)))
        with pytest.raises(gd.ShapeError, match="must be the indices shape"):
            gd.scatter_elements(d, gd.placeholder("j", (2, 4), "int64"), gd.placeholder("v", (2, 3)))
        with pytest.raises(gd.AttrError, match="reduction"):
            gd.scatter_nd(d, i, gd.placeholder("w", (2, 4)), reduction="sum")


# ----------------------------------------------------------------------------- topk
def _topk_loop(x, k, axis, largest):
    """Sort each line with Python's sorted: value (NaN above all), then index."""
    axis = axis % x.ndim
    moved = np.moveaxis(x, axis, -1)
    vals = np.zeros(moved.shape[:-1] + (k,), x.dtype)
    idxs = np.zeros(moved.shape[:-1] + (k,), np.int64)
    for pos in np.ndindex(moved.shape[:-1]):
        line = moved[pos]

        def key(j, line=line):
            v = float(line[j])
            rank = (1, 0.0) if math.isnan(v) else (0, v)
            if largest:
                rank = (-rank[0], -rank[1])
            return rank + (j,)

        order = sorted(range(line.size), key=key)[:k]
        vals[pos] = line[order]
        idxs[pos] = order
    return np.moveaxis(vals, -1, axis), np.moveaxis(idxs, -1, axis)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("shape,k,axis", [((3, 7), 3, -1), ((4, 5, 2), 5, 1), ((6,), 0, 0), ((6, 2), 6, 0)])
def test_topk(dt, largest, shape, k, axis, rng, run_op):
    x = rng.integers(0, 4, shape).astype(dt)  # few distinct values: many ties
    vals, idxs = run_op(lambda a: gd.topk(a, k, axis=axis, largest=largest), x)
    want_v, want_i = _topk_loop(x, k, axis, largest)
    assert vals.dtype == x.dtype and idxs.dtype == np.int64
    np.testing.assert_array_equal(idxs, want_i)
    np.testing.assert_array_equal(vals, want_v)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_nan_is_above_every_number(largest, run_op):
    x = np.array([1.0, np.nan, -np.inf, 2.0, np.nan, np.inf], np.float32)
    vals, idxs = run_op(lambda a: gd.topk(a, 6, largest=largest), x)
    want = [1, 4, 5, 3, 0, 2] if largest else [2, 0, 3, 5, 1, 4]
    assert idxs.tolist() == want
    np.testing.assert_array_equal(vals, x[want])


def test_topk_k_too_large():
    with gd.Graph("bad"):
        with pytest.raises(gd.ShapeError, match=r"k 4 must lie in \[0, 3\]"):
            gd.topk(gd.placeholder("x", (2, 3)), 4)


# ----------------------------------------------------------------------------- one_hot (a composition)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis, run_op):
    idx = np.array([[0, -1, 3], [7, -5, 2]], np.int64)
    y = run_op(lambda i: gd.one_hot(i, 5, axis=axis, on_value=3.0, off_value=-1.0), idx)
    a = axis % 3
    assert y.shape == tuple(np.insert(np.array(idx.shape), a, 5)) and y.dtype == np.float32
    for pos in np.ndindex(y.shape):
        d = pos[a]
        i = idx[pos[:a] + pos[a + 1 :]]
        assert y[pos] == (3.0 if (i if i >= 0 else i + 5) == d else -1.0)


# ----------------------------------------------------------------------------- gradients
def check_gradients(build, *arrays, eps=1e-6, rtol=1e-5, atol=1e-8):
    """gd.gradients of sum(w * build(...)) against central differences, for float64 inputs."""
    rng = np.random.default_rng(0)
    wrt = [i for i, a in enumerate(arrays) if a.dtype == np.float64]
    g = gd.Graph("grad")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
        out = build(*xs)
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.dtype == "float64"]
        loss = None
        for o in outs:
            term = gd.reduce_sum(o * gd.constant(rng.uniform(0.5, 1.5, o.shape)))
            loss = term if loss is None else loss + term
        grads = gd.gradients(loss, [xs[i] for i in wrt])
    gd.verify(g)
    feeds = {f"in{i}": a for i, a in enumerate(arrays)}
    analytic = gd.run(g, feeds, list(grads))
    for i, got in zip(wrt, analytic):
        x = arrays[i]
        numeric = np.zeros_like(x)
        for pos in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[pos] += eps
            minus[pos] -= eps
            up = gd.run(g, {**feeds, f"in{i}": plus}, [loss])[0]
            down = gd.run(g, {**feeds, f"in{i}": minus}, [loss])[0]
            numeric[pos] = (up - down) / (2 * eps)
        np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol, err_msg=f"input {i}")


def _r(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape)


def test_gather_elements_gradient():
    idx = np.array([[0, 2, -1], [1, 1, 1]])  # repeats accumulate
    check_gradients(lambda d, i: gd.gather_elements(d, i, axis=1), _r(2, 4), idx)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_elements_gradient(reduction):
    idx = np.array([[1, 0, 2], [1, 2, 2]])  # repeats: for "none" only the last write counts
    check_gradients(
        lambda d, i, u: gd.scatter_elements(d, i, u, axis=0, reduction=reduction),
        _r(3, 3),
        idx,
        _r(2, 3, seed=1),
    )


@pytest.mark.parametrize(
    "batch_dims,idx", [(0, np.array([[1, 0], [-1, 2], [1, 0]])), (1, np.array([[2], [0]]))]
)
def test_gather_nd_gradient(batch_dims, idx):
    check_gradients(lambda d, i: gd.gather_nd(d, i, batch_dims=batch_dims), _r(2, 3, 2), idx)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_gradient(reduction):
    idx = np.array([[2], [0], [2]])
    check_gradients(
        lambda d, i, u: gd.scatter_nd(d, i, u, reduction=reduction), _r(3, 2), idx, _r(3, 2, seed=1)
    )


def test_topk_gradient():
    check_gradients(lambda x: gd.topk(x, 2, axis=0, largest=False), _r(4, 3))


@pytest.mark.parametrize("reduction", ["mul", "max"])
def test_scatter_reductions_without_gradient_say_so(reduction):
    with gd.Graph("g"):
        d = gd.placeholder("d", (3,), "float64")
        u = gd.placeholder("u", (2,), "float64")
        y = gd.scatter_elements(d, gd.constant(np.array([0, 1])), u, reduction=reduction)
        with pytest.raises(gd.GradientError, match=f"reduction={reduction} is not implemented"):
            gd.gradients(gd.reduce_sum(y), [u])


# ----------------------------------------------------------------------------- ONNX converters
onnx = pytest.importorskip("onnx")


def _onnx_case(tmp_path, op, inputs, consts=None, attrs=None, opset=18, n_out=1):
    """Import a one-node model (inputs: graph inputs; consts: initializers) and run it."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    consts = consts or {}
    names = list(inputs) + list(consts)
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
        ],
        [helper.make_tensor_value_info(o, 0, None) for o in outs],
        [numpy_helper.from_array(a, n) for n, a in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    want = ReferenceEvaluator(model).run(None, {**inputs})
    g = gd.load_onnx(path)
    got = gd.run(g, inputs, outs)
    return got, want


def _same(got, want):
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("time_axis", [0, 1])
@pytest.mark.parametrize("const", [True, False])
def test_onnx_reverse_sequence(time_axis, const, tmp_path):
    x = np.arange(4 * 3 * 2, dtype=np.float32).reshape((4, 3, 2) if time_axis == 0 else (3, 4, 2))
    lens = np.array([4, 0, 2], np.int64)
    ins, consts = ({"x": x}, {"lens": lens}) if const else ({"x": x, "lens": lens}, {})
    _same(
        *_onnx_case(
            tmp_path, "ReverseSequence", ins, consts, {"time_axis": time_axis, "batch_axis": 1 - time_axis}
        )
    )


def test_onnx_reverse_sequence_runtime_length_out_of_range(tmp_path):
    x = np.zeros((3, 2), np.float32)
    from onnx import helper

    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], time_axis=0, batch_axis=1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", 1, [3, 2]), helper.make_tensor_value_info("lens", 7, [2])],
        [helper.make_tensor_value_info("y", 1, [3, 2])],
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    )
    g = gd.load_onnx(path)
    with pytest.raises(gd.ExecutionError, match="out of range"):
        gd.run(g, {"x": x, "lens": np.array([4, 1], np.int64)}, ["y"])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onnx_one_hot_with_constant_depth(axis, tmp_path):
    idx = np.array([[1, -1], [9, 0]], np.int64)
    _same(
        *_onnx_case(
            tmp_path,
            "OneHot",
            {"idx": idx},
            {"depth": np.array(4, np.int64), "values": np.array([2, 7], np.int32)},
            {"axis": axis},
        )
    )


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (13, -1), (13, 0)])
def test_onnx_hardmax(opset, axis, tmp_path):
    x = np.array([[[1, 3, 3], [0, -1, 2]], [[5, 5, 5], [2, 9, 1]]], np.float32)
    got, want = _onnx_case(tmp_path, "Hardmax", {"x": x}, attrs={"axis": axis}, opset=opset)
    if opset < 13:  # onnx's evaluator skips the 2-D coercion of opsets < 13 (onnxruntime does it)
        flat = x.reshape(math.prod(x.shape[:axis]), -1)
        want = [np.eye(flat.shape[1], dtype=x.dtype)[flat.argmax(1)].reshape(x.shape)]
    _same(got, want)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-1, 0, 2])
def test_onnx_trilu(upper, k, tmp_path):
    x = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    _same(*_onnx_case(tmp_path, "Trilu", {"x": x}, {"k": np.array(k, np.int64)}, {"upper": upper}))


@pytest.mark.parametrize("opset", [7, 10, 11])  # 7: TopK-1 (k an attribute) in flowc's oldest opset
def test_onnx_topk_opsets(opset, tmp_path):
    x = np.array([[3, 1, 3, 2], [0, 0, 5, -1]], np.float32)
    if opset < 10:
        got, want = _onnx_case(tmp_path, "TopK", {"x": x}, attrs={"k": 3}, opset=opset, n_out=2)
    else:
        attrs = {"largest": 0} if opset >= 11 else {}
        got, want = _onnx_case(tmp_path, "TopK", {"x": x}, {"k": np.array([3], np.int64)}, attrs, opset, 2)
    _same(got, want)


@pytest.mark.parametrize(
    "op,mode",
    [("SpaceToDepth", "DCR"), ("SpaceToDepth", "CRD"), ("DepthToSpace", "DCR"), ("DepthToSpace", "CRD")],
)
def test_onnx_space_depth(op, mode, tmp_path):
    x = np.arange(2 * 8 * 2 * 4, dtype=np.float32).reshape(2, 8, 2, 4)
    attrs = {"blocksize": 2} if (op, mode) == ("SpaceToDepth", "DCR") else {"blocksize": 2, "mode": mode}
    _same(*_onnx_case(tmp_path, op, {"x": x}, attrs=attrs, opset=13))


def test_onnx_constant_only_ops(tmp_path):
    from onnx import helper, numpy_helper

    x = np.array([[1, 0, 3], [0, 2, 3]], np.int64)
    cond = np.array([True, False, True])
    nodes = [
        helper.make_node("NonZero", ["c"], ["nz"]),
        helper.make_node("Unique", ["c1"], ["u", "ui", "uinv", "ucnt"], sorted=0),
        helper.make_node("Compress", ["x", "cond"], ["cx"], axis=1),
        helper.make_node("EyeLike", ["x"], ["eye"], k=1, dtype=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", 7, [2, 3])],
        [helper.make_tensor_value_info(n, 0, None) for n in ("nz", "u", "ui", "uinv", "ucnt", "cx", "eye")],
        [
            numpy_helper.from_array(x, "c"),
            numpy_helper.from_array(x.reshape(-1), "c1"),
            numpy_helper.from_array(cond, "cond"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    from onnx.reference import ReferenceEvaluator

    names = ["nz", "u", "ui", "uinv", "ucnt", "cx", "eye"]
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = gd.run(gd.load_onnx(path), {"x": x}, names)
    _same(got, want)


@pytest.mark.parametrize(
    "op,inputs,match",
    [
        ("NonZero", ["x"], "NonZero, opset 13\\): output shape depends on input values"),
        ("Unique", ["x"], "Unique, opset 13\\): output shape depends on input values"),
        ("Compress", ["x", "c"], "Compress, opset 13\\): the condition is not constant"),
    ],
)
def test_onnx_data_dependent_shapes_are_unsupported(op, inputs, match, tmp_path):
    from onnx import helper

    node = helper.make_node(op, inputs, ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", 1, [3]), helper.make_tensor_value_info("c", 9, [3])],
        [helper.make_tensor_value_info("y", 0, None)],
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    )
    with pytest.raises(gd.UnsupportedError, match=match):
        gd.load_onnx(path)
