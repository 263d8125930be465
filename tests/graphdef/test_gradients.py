"""Every gradient rule against central finite differences, in float64: on every example of
every differentiable op (OpDef.examples), and on the cases below."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from graphdef.examples import every_example, inputs


def check_gradients(build, *arrays, wrt=None, eps=1e-6, rtol=1e-5, atol=1e-8):
    """Compare gd.gradients of sum(w * build(...)) with central differences."""
    rng = np.random.default_rng(0)
    wrt = [i for i, a in enumerate(arrays) if a.dtype == np.float64] if wrt is None else wrt
    g = gd.Graph("grad")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
        out = build(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        loss = None
        for k, o in enumerate(o for o in outs if o.dtype.startswith("float")):  # not topk's indices
            term = gd.reduce_sum(o * gd.constant(rng.uniform(0.5, 1.5, o.shape)), name=f"term{k}")
            loss = term if loss is None else loss + term
        grads = gd.gradients(loss, [xs[i] for i in wrt])
    gd.verify(g)
    feeds = {f"in{i}": a for i, a in enumerate(arrays)}
    analytic = gd.run(g, feeds, list(grads))
    for i, got in zip(wrt, analytic):
        x = arrays[i]
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[idx] += eps
            minus[idx] -= eps
            up = gd.run(g, {**feeds, f"in{i}": plus}, [loss])[0]
            down = gd.run(g, {**feeds, f"in{i}": minus}, [loss])[0]
            numeric[idx] = (up - down) / (2 * eps)
        assert got.shape == x.shape and got.dtype == x.dtype
        np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol, err_msg=f"input {i}")


def _r(*shape, lo=-2.0, hi=2.0, seed=None):
    rng = np.random.default_rng(abs(hash((shape, lo, hi, seed))) % 2**32)
    return rng.uniform(lo, hi, shape)


def _away(*shape, gap=0.2):
    """Random values at least ``gap`` away from zero (no kinks under relu/abs/clip)."""
    v = _r(*shape)
    return np.where(np.abs(v) < gap, np.sign(v + 1e-9) * (gap + np.abs(v)), v)


BINARY = [gd.add, gd.sub, gd.mul, gd.div, gd.maximum, gd.minimum]


@pytest.mark.parametrize("fn", BINARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 3)), ((), (2,))], ids=str)
def test_binary(fn, shapes):
    a = _r(*shapes[0], lo=0.5, hi=2.0, seed=1)
    b = _r(*shapes[1], lo=0.5, hi=2.0, seed=2) + (0.05 if fn in (gd.maximum, gd.minimum) else 0)
    check_gradients(fn, a, b)


def test_pow():
    check_gradients(gd.pow, _r(2, 3, lo=0.5, hi=2.0), _r(3, lo=-1.5, hi=2.0))


def test_where():
    check_gradients(lambda c, a, b: gd.where(c, a, b), np.array([[True, False, True]]), _r(2, 3), _r(3))


UNARY = [
    (gd.neg, _r),
    (gd.abs, _away),
    (gd.exp, _r),
    (gd.log, lambda *s: _r(*s, lo=0.2, hi=3)),
    (gd.sqrt, lambda *s: _r(*s, lo=0.2, hi=3)),
    (gd.rsqrt, lambda *s: _r(*s, lo=0.2, hi=3)),
    (gd.tanh, _r),
    (gd.sigmoid, _r),
    (gd.relu, _away),
    (gd.erf, _r),
    (lambda x: gd.leaky_relu(x, 0.1), _away),
    (lambda x: gd.elu(x, 0.7), _away),
    (gd.gelu, _r),
    (lambda x: gd.gelu(x, "tanh"), _r),
    (lambda x: gd.clip(x, -0.5, 1.0), _away),
]


@pytest.mark.parametrize("fn,gen", UNARY)
def test_unary(fn, gen):
    check_gradients(fn, gen(2, 3))


def test_cast_between_floats():
    check_gradients(lambda x: gd.cast(gd.cast(x, "float32"), "float64") * 2.0, _r(2, 3), eps=1e-2, rtol=1e-5)


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3, 4), (4, 2)),
        ((2, 3, 4), (4, 2)),
        ((4,), (4, 3)),
        ((3, 4), (4,)),
        ((2, 1, 2, 3), (3, 3, 2)),
        ((4,), (4,)),
    ],
    ids=str,
)
def test_matmul(sa, sb):
    check_gradients(gd.matmul, _r(*sa), _r(*sb))


@pytest.mark.parametrize(
    "ta,tb,cshape", [(False, False, (3,)), (True, False, (2, 3)), (False, True, (1,)), (True, True, None)]
)
def test_gemm(ta, tb, cshape):
    a = _r(*((4, 2) if ta else (2, 4)))
    b = _r(*((3, 4) if tb else (4, 3)))
    args = (a, b) + ((_r(*cshape),) if cshape else ())
    check_gradients(lambda *t: gd.gemm(*t, alpha=0.7, beta=1.3, trans_a=ta, trans_b=tb), *args)


CONVS = [
    ((1, 2, 5, 5), (3, 2, 3, 3), {}),
    ((2, 2, 6, 5), (4, 1, 3, 2), {"strides": (2, 1), "pads": (1, 0, 0, 1), "group": 2}),
    ((1, 3, 7, 7), (3, 1, 3, 3), {"dilations": (2, 2), "pads": (2, 2, 2, 2), "group": 3}),
    ((1, 2, 7), (2, 2, 3), {"strides": (3,), "pads": (1, 2)}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVS, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(xs, ws, attrs, bias):
    args = (_r(*xs), _r(*ws)) + ((_r(ws[0]),) if bias else ())
    check_gradients(lambda *t: gd.conv(*t, **attrs), *args)


CONV_TS = [
    ((1, 2, 3, 3), (2, 3, 3, 3), {}),
    ((1, 2, 3, 4), (2, 1, 2, 3), {"strides": (2, 2), "pads": (1, 0, 0, 1), "output_padding": (1, 0)}),
    ((2, 4, 3, 3), (4, 1, 3, 3), {"dilations": (2, 1), "group": 2, "pads": (1, 1, 1, 1)}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_TS, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(xs, ws, attrs, bias):
    m = ws[1] * attrs.get("group", 1)
    args = (_r(*xs), _r(*ws)) + ((_r(m),) if bias else ())
    check_gradients(lambda *t: gd.conv_transpose(*t, **attrs), *args)


POOLS = [
    {"kernel_shape": (2, 2)},
    {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
    {"kernel_shape": (2, 3), "strides": (2, 2), "ceil_mode": True},
    {"kernel_shape": (2, 2), "dilations": (2, 1), "pads": (0, 1, 1, 0)},
]


@pytest.mark.parametrize("attrs", POOLS, ids=str)
def test_max_pool(attrs):
    x = np.random.default_rng(5).permutation(2 * 5 * 5).reshape(1, 2, 5, 5) / 7.0  # distinct values
    check_gradients(lambda t: gd.max_pool(t, **attrs), x)


@pytest.mark.parametrize("attrs", POOLS[:3], ids=str)
@pytest.mark.parametrize("include", [False, True])
def test_avg_pool_and_its_gradient_op(attrs, include):
    check_gradients(lambda t: gd.avg_pool(t, count_include_pad=include, **attrs), _r(1, 2, 5, 5))
    # avg_pool_grad is linear in its input; its own rule is avg_pool
    with gd.Graph("shape"):
        out_shape = gd.avg_pool(gd.placeholder("x", (1, 2, 5, 5)), count_include_pad=include, **attrs).shape
    check_gradients(
        lambda t: gd.apply("avg_pool_grad", [t], shape=(1, 2, 5, 5), count_include_pad=include, **attrs),
        _r(*out_shape),
    )


def test_max_pool_second_order_is_refused():
    with gd.Graph("g"):
        x = gd.placeholder("x", (1, 1, 4, 4))
        y = gd.reduce_sum(gd.max_pool(x, (2, 2)))
        (gx,) = gd.gradients(y, [x])
        with pytest.raises(gd.GradientError, match="second-order gradients of max_pool"):
            gd.gradients(gd.reduce_sum(gx * x), [x])


def test_batch_norm():
    var = _r(3, lo=0.5, hi=2.0)
    check_gradients(lambda *t: gd.batch_norm(*t, epsilon=1e-3), _r(2, 3, 2, 2), _r(3), _r(3), _r(3), var)


@pytest.mark.parametrize(
    "shape,axis,sshape,bias",
    [((2, 5), -1, (5,), True), ((2, 3, 4), 1, (3, 4), True), ((2, 3, 4), -1, (1,), False)],
    ids=str,
)
def test_layer_norm(shape, axis, sshape, bias):
    args = (_r(*shape), _r(*sshape)) + ((_r(*sshape),) if bias else ())
    check_gradients(lambda *t: gd.layer_norm(*t, axis=axis), *args, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("fn", [gd.softmax, gd.log_softmax])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax(fn, axis):
    check_gradients(lambda t: fn(t, axis=axis), _r(3, 4))


@pytest.mark.parametrize(
    "attrs",
    [
        {"scales": (1, 1, 2, 1.5), "mode": "linear"},
        {"sizes": (1, 2, 3, 2), "mode": "linear", "coordinate_transformation_mode": "align_corners"},
        {"scales": (1, 1, 2, 2), "mode": "nearest"},
        {
            "sizes": (1, 2, 5, 2),
            "mode": "nearest",
            "nearest_mode": "floor",
            "coordinate_transformation_mode": "asymmetric",
        },
    ],
    ids=str,
)
def test_resize(attrs):
    check_gradients(lambda t: gd.resize(t, **attrs), _r(1, 2, 3, 4))


REDUCES = [gd.reduce_sum, gd.reduce_mean, gd.reduce_max, gd.reduce_min, gd.reduce_prod]


@pytest.mark.parametrize("fn", REDUCES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("axes,keepdims", [(None, False), ((1,), True), ((0, 2), False), ((-1,), False)])
def test_reductions(fn, axes, keepdims):
    x = np.random.default_rng(2).permutation(24).reshape(2, 3, 4) / 10.0 + 0.5  # distinct, nonzero
    check_gradients(lambda t: fn(t, axes=axes, keepdims=keepdims), x, rtol=1e-4)


SHAPE_FNS = [
    lambda t: gd.reshape(t, (3, -1)),
    lambda t: gd.flatten(gd.unsqueeze(t, 0), 2),
    lambda t: gd.squeeze(gd.unsqueeze(t, (0, 2))),
    lambda t: gd.transpose(t, (1, 0)),
    lambda t: gd.concat([t, t * 2.0, gd.slice(t, [0], [1])], axis=0),
    lambda t: gd.split(t, (1, 3), axis=1),
    lambda t: gd.slice(t, [1, -1], [100, 0], [0, 1], [2, -2]),
    lambda t: gd.slice(t, [3], [-100], [1], [-1]),
    lambda t: gd.slice(t, [0, 1], [2, 4], [0, 1], [1, 2]),
    lambda t: gd.pad(t, [1, -1, 2, 0]),
    lambda t: gd.expand(gd.reshape(t, (6, 1, 4)), (6, 2, 4)),
    lambda t: gd.tile(t, (2, 3)),
    lambda t: gd.identity(t),
    lambda t: t[1:, ::-2],
]


@pytest.mark.parametrize("k", range(len(SHAPE_FNS)))
def test_shape_ops(k):
    check_gradients(SHAPE_FNS[k], _r(6, 4))


def test_gather_and_scatter_add():
    idx = np.array([[1, -1], [1, 0]], np.int64)
    check_gradients(lambda d, i: gd.gather(d, i, axis=1), _r(2, 3), idx)
    check_gradients(lambda d, i, u: gd.scatter_add(d, i, u, axis=0), _r(3, 2), idx, _r(2, 2, 2))


def test_gradient_flow_rules():
    with gd.Graph("g"):
        x = gd.placeholder("x", (3,))
        y = gd.placeholder("y", (3,))
        # no path -> None; a stop_gradient or integer path blocks flow
        assert gd.gradients(gd.reduce_sum(x), [y]) == [None]
        assert gd.gradients(gd.reduce_sum(gd.stop_gradient(x) * 2.0), [x]) == [None]
        assert gd.gradients(gd.reduce_sum(gd.cast(gd.argmax(x, keepdims=True), "float32")), [x]) == [None]
        with pytest.raises(gd.GradientError, match="dtype int64"):
            gd.gradients(gd.argmax(x), [x])
        with pytest.raises(gd.GradientError, match="pad with mode=reflect"):
            gd.gradients(gd.reduce_sum(gd.pad(x, [1, 1], mode="reflect")), [x])


def test_gradients_of_an_intermediate_and_through_it():
    with gd.Graph("g") as g:
        x = gd.placeholder("x", (2,), "float64")
        h = x * x
        y = gd.reduce_sum(h * 3.0)
        gh, gx = gd.gradients(y, [h, x])
    got = gd.run(g, {"x": np.array([1.0, 2.0])}, [gh, gx])
    assert got[0].tolist() == [3.0, 3.0] and got[1].tolist() == [6.0, 12.0]


def test_training_a_variable_with_assign_reduces_the_loss():
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((32, 4)).astype(np.float32)
    yv = xv @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
    with gd.Graph("lsq") as g:
        x = gd.placeholder("x", (32, 4))
        y = gd.placeholder("y", (32, 1))
        w = gd.variable("w", np.zeros((4, 1), np.float32))
        loss = gd.reduce_mean((x @ w - y) ** 2.0)
        (dw,) = gd.gradients(loss, [w])
        step = gd.assign_sub(w, dw * 0.1)
    first = gd.run(g, {"x": xv, "y": yv}, [loss])[0]
    for _ in range(200):
        gd.run(g, {"x": xv, "y": yv}, [step])
    assert gd.run(g, {"x": xv, "y": yv}, [loss])[0] < 1e-4 * first


# ----------------------------------------------------------------------------- every op's examples
GRAD_CASES = [
    (op, i)
    for op, i in every_example()
    if callable(gd.get_op(op).grad)
    and gd.get_op(op).examples[i].grad
    and any(a.dtype.kind == "f" for a in inputs(op, i))
]


def test_every_differentiable_op_has_a_gradient_example():
    differentiable = {n for n, op in gd.all_ops().items() if callable(op.grad)}
    missing = differentiable - {op for op, _ in GRAD_CASES}
    assert not missing, f"differentiable ops without a gradient-checked example: {sorted(missing)}"


@pytest.mark.parametrize("op, index", GRAD_CASES, ids=[f"{o}-{i}" for o, i in GRAD_CASES])
def test_gradient_of_example(op, index):
    """The example with its float inputs in float64; every float input is differentiated."""
    attrs = dict(gd.get_op(op).examples[index].attrs)
    arrays = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in inputs(op, index)]
    check_gradients(lambda *xs: gd.apply(op, list(xs), None, **attrs), *arrays)
