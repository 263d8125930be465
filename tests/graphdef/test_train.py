"""gd.train (graphdef/train.py): losses, optimizers, clipping and schedules in the interpreter,
against numpy."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import graphdef as gd
from graphdef.errors import GraphError

RNG = np.random.default_rng(7)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def test_module_examples():
    assert doctest.testmod(gd.train).failed == 0


# ----------------------------------------------------------------------------- losses
def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("scale", [1.0, 1e4], ids=["unit", "huge"])
@pytest.mark.parametrize("onehot", [False, True], ids=["classes", "onehot"])
def test_softmax_cross_entropy_and_its_gradient(scale, onehot):
    """Mean over 6 examples of -log softmax(x)[label]; the gradient (softmax - onehot) / 6,
    finite with logits of 1e4 (exp of them would overflow float32)."""
    x, y = f32(6, 5, scale=scale), RNG.integers(0, 5, 6)
    with gd.Graph("ce") as g:
        xt = gd.placeholder("x", (6, 5))
        labels = gd.placeholder("y", (6, 5)) if onehot else gd.placeholder("y", (6,), "int64")
        loss = gd.train.softmax_cross_entropy(xt, labels)
        (dx,) = gd.gradients(loss, [xt])
    feed = np.eye(5, dtype=np.float32)[y] if onehot else y
    got, gdx = gd.run(g, {"x": x, "y": feed}, [loss, dx])
    x64 = x.astype(np.float64)
    logp = x64 - x64.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    want = -logp[np.arange(6), y].mean()
    assert np.isfinite(got) and abs(got - want) <= 1e-6 * max(1.0, abs(want))
    want_dx = (_softmax(x64) - np.eye(5)[y]) / 6
    assert np.all(np.isfinite(gdx))
    np.testing.assert_allclose(gdx, want_dx, atol=1e-6)


def test_softmax_cross_entropy_over_a_middle_axis_and_per_example():
    """Class axis 1 of (2, 4, 3) logits, labels (2, 3); reduction "none" keeps (2, 3)."""
    x, y = f32(2, 4, 3), RNG.integers(0, 4, (2, 3))
    with gd.Graph("ce3") as g:
        labels = gd.constant(y, "int64")
        loss = gd.train.softmax_cross_entropy(gd.constant(x), labels, axis=1, reduction="none")
    (got,) = gd.run(g, {}, [loss])
    x64 = x.astype(np.float64)
    logp = x64 - np.log(np.exp(x64).sum(1, keepdims=True))
    want = -np.take_along_axis(logp, y[:, None, :], axis=1)[:, 0, :]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_sigmoid_cross_entropy_is_finite_for_large_logits():
    x = np.array([-200.0, -30.0, -1.0, 0.0, 2.0, 40.0, 300.0], np.float32)
    z = np.array([1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0], np.float32)
    with gd.Graph("bce") as g:
        xt = gd.placeholder("x", x.shape)
        loss = gd.train.sigmoid_cross_entropy(xt, z, reduction="sum")
        (dx,) = gd.gradients(loss, [xt])
    got, gdx = gd.run(g, {"x": x}, [loss, dx])
    x64 = x.astype(np.float64)
    want = np.sum(np.maximum(x64, 0) - x64 * z + np.log1p(np.exp(-np.abs(x64))))
    assert abs(got - want) <= 1e-5 * abs(want)
    np.testing.assert_allclose(gdx, 1 / (1 + np.exp(-x64)) - z, atol=1e-6)


def test_mean_squared_error():
    p, t = f32(3, 4), f32(3, 4)
    with gd.Graph("mse") as g:
        loss = gd.train.mean_squared_error(gd.constant(p), t)
    np.testing.assert_allclose(gd.run(g, {}, [loss])[0], np.mean((p - t) ** 2), rtol=1e-6)


def test_bad_labels_and_reductions_are_one_line_errors():
    with gd.Graph("bad"):
        x = gd.placeholder("x", (4, 3))
        want = r"labels 'y' have shape \(3,\); logits 'x' \(4, 3\) need \(4,\)"
        with pytest.raises(GraphError, match=want):
            gd.train.softmax_cross_entropy(x, gd.placeholder("y", (3,), "int64"))
        with pytest.raises(GraphError, match="reduction must be"):
            gd.train.mean_squared_error(x, 0.0, reduction="avg")


# ----------------------------------------------------------------------------- optimizers
def _least_squares(opt, steps, a, b, w0, var_list=None):
    """loss = 0.5 * |A w - b|^2 / rows, minimized ``steps`` times: the losses and final w."""
    with gd.Graph("ls") as g:
        w = gd.variable("w", w0)
        r = gd.matmul(gd.constant(a), w) - b
        loss = gd.reduce_sum(r * r) * (0.5 / a.shape[0])
        train = opt.minimize(loss, var_list)
    s = gd.Session(g)
    losses = [float(s.run({}, [train])[0]) for _ in range(steps)]
    return losses, s.variable("w"), s


def _reference(opt, steps, a, b, w0, lr_of=None):
    w, state, losses = w0.copy(), {k: np.zeros_like(w0) for k in opt.slots}, []
    for t in range(1, steps + 1):
        r = a @ w - b
        losses.append(float(0.5 * np.sum(r * r) / a.shape[0]))
        g = (a.T @ r / a.shape[0]).astype(np.float32)
        if opt.clip_norm is not None:
            g = g * np.float32(opt.clip_norm / max(float(np.sqrt(np.sum(g * g))), opt.clip_norm))
        w, new = opt.reference(w, g, state, lr_of(t - 1) if lr_of else opt.learning_rate, t)
        state.update(new)
    return losses, w


OPTIMIZERS = {
    "sgd": lambda: gd.train.SGD(0.1),
    "momentum": lambda: gd.train.SGD(0.05, momentum=0.9),
    "nesterov": lambda: gd.train.SGD(0.05, momentum=0.9, nesterov=True),
    "sgd-decay": lambda: gd.train.SGD(0.1, momentum=0.5, weight_decay=0.01),
    "adam": lambda: gd.train.Adam(0.05),
    "adamw": lambda: gd.train.AdamW(0.05, weight_decay=0.1),
    "adam-clipped": lambda: gd.train.Adam(0.05, clip_norm=0.5),
    "sgd-clipped": lambda: gd.train.SGD(0.2, momentum=0.9, clip_norm=0.1),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizers_match_their_numpy_update_for_20_steps(name):
    a, b, w0 = f32(16, 5), f32(16, 3), f32(5, 3)
    opt = OPTIMIZERS[name]()
    losses, w, s = _least_squares(opt, 20, a, b, w0)
    want_losses, want_w = _reference(opt, 20, a, b, w0)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    np.testing.assert_allclose(w, want_w, rtol=1e-4, atol=1e-5)
    assert losses[-1] < 0.9 * losses[0]  # it trains
    assert int(s.variable("global_step")) == 20
    for slot in opt.slots:  # slots are variables like any other
        assert s.variable(f"w/{slot}").shape == w0.shape


def test_adam_matches_the_textbook_formula():
    """The first Adam step moves every weight by lr (m_hat / sqrt(v_hat) = sign(g))."""
    a, b, w0 = f32(8, 4), f32(8, 2), f32(4, 2)
    _, w, _ = _least_squares(gd.train.Adam(0.01), 1, a, b, w0)
    g = a.T @ (a @ w0 - b) / 8
    np.testing.assert_allclose(w, w0 - 0.01 * np.sign(g), atol=1e-6)


@pytest.mark.parametrize(
    "schedule, numpy_of",
    [
        (lambda s: gd.train.exponential_decay(0.1, s, 4, 0.5), lambda t: 0.1 * 0.5 ** (t / 4)),
        (lambda s: gd.train.exponential_decay(0.1, s, 4, 0.5, staircase=True),
         lambda t: 0.1 * 0.5 ** (t // 4)),
        (lambda s: gd.train.cosine_decay(0.1, s, 8, alpha=0.1),
         lambda t: 0.1 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 8) / 8)) + 0.1)),
        (lambda s: gd.train.piecewise_constant(s, [3, 7], [0.1, 0.05, 0.01]),
         lambda t: 0.1 if t < 3 else 0.05 if t < 7 else 0.01),
        (lambda s: gd.train.linear_warmup(0.1, s, 5), lambda t: 0.1 * min((t + 1) / 5, 1.0)),
    ],
    ids=["exponential", "staircase", "cosine", "piecewise", "warmup"],
)  # fmt: skip
def test_learning_rate_schedules_follow_the_step(schedule, numpy_of):
    """SGD with a schedule of global_step: step t uses the rate of t (before the increment)."""
    a, b, w0 = f32(16, 5), f32(16, 3), f32(5, 3)
    opt = gd.train.SGD(schedule, momentum=0.5)
    losses, w, _ = _least_squares(opt, 12, a, b, w0)
    want_losses, want_w = _reference(opt, 12, a, b, w0, lr_of=numpy_of)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    np.testing.assert_allclose(w, want_w, rtol=1e-4, atol=1e-5)


def test_clip_by_global_norm():
    xs = [f32(3, 2), f32(4)]
    norm = float(np.sqrt(sum(np.sum(x.astype(np.float64) ** 2) for x in xs)))
    with gd.Graph("clip") as g:
        small, n1 = gd.train.clip_by_global_norm([gd.constant(x) for x in xs], 2 * norm)
        big, _ = gd.train.clip_by_global_norm([gd.constant(x) for x in xs], norm / 4)
    got = gd.run(g, {}, [n1, *small, *big])
    assert abs(got[0] - norm) <= 1e-6 * norm
    for x, kept, shrunk in zip(xs, got[1:3], got[3:]):
        np.testing.assert_allclose(kept, x, rtol=1e-6)
        np.testing.assert_allclose(shrunk, x / 4, rtol=1e-5)


def test_variable_without_a_path_to_the_loss_warns_and_stays():
    with gd.Graph("idle") as g:
        w = gd.variable("w", np.ones(3, np.float32))
        gd.variable("unused", np.ones(2, np.float32))
        loss = gd.reduce_sum(w * w)
        with pytest.warns(UserWarning, match="variable 'unused' has no path to loss"):
            train = gd.train.SGD(0.1).minimize(loss)
    s = gd.Session(g)
    s.run({}, [train])
    np.testing.assert_allclose(s.variable("w"), 0.8 * np.ones(3))
    np.testing.assert_allclose(s.variable("unused"), np.ones(2))


def test_minimize_needs_a_scalar_float_loss():
    with gd.Graph("vec"):
        w = gd.variable("w", np.ones(3, np.float32))
        with pytest.raises(GraphError, match="must be a float scalar"):
            gd.train.SGD(0.1).minimize(w * w)
        with pytest.raises(GraphError, match="Nesterov momentum needs momentum"):
            gd.train.SGD(0.1, nesterov=True)


def test_batch_norm_in_training_mode_uses_the_batch_and_moves_the_statistics():
    """PyTorch's rule: normalized by the batch's biased variance; moving_var moves towards the
    unbiased one; both moving statistics by momentum 0.1 per run."""
    x, scale, bias = f32(4, 3, 2, 2), f32(3), f32(3)
    with gd.Graph("bn") as g:
        mean = gd.variable("mean", np.zeros(3, np.float32), trainable=False)
        var = gd.variable("var", np.ones(3, np.float32), trainable=False)
        y = gd.train.batch_norm(gd.constant(x), scale, bias, mean, var, epsilon=1e-3)
    s = gd.Session(g)
    got = s.run({}, [y])[0]
    m, v = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    c = (slice(None), None, None)  # per channel
    want = (x - m[c]) / np.sqrt(v[c] + 1e-3) * scale[c] + bias[c]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s.variable("mean"), 0.1 * m, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(s.variable("var"), 0.9 + 0.1 * v * 16 / 15, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((2, 3, 7, 6), (4, 3, 3, 2), dict(pads=(1, 0, 1, 1), strides=(2, 1))),
        ((1, 4, 9), (6, 2, 3), dict(group=2, dilations=(2,))),
        ((2, 2, 3, 4, 5), (3, 2, 2, 2, 2), dict(strides=(1, 2, 1))),
    ],
)
def test_conv_weight_grad_op_is_the_convolution_of_x_by_gy(dtype, x_shape, w_shape, attrs):
    """float32 weight gradients go through the conv_weight_grad op, others through the
    convolution of x by gy it replaces; both equal a finite-difference-free numpy check: the
    gradient of sum(conv(x, w) * r) with respect to w, entry by entry, is the sum over windows
    of r times x."""
    x, w = f32(*x_shape).astype(dtype), f32(*w_shape).astype(dtype)
    with gd.Graph("wg") as g:
        wt = gd.variable("w", w, dtype=dtype)
        y = gd.conv(gd.constant(x, dtype), wt, **attrs)
        r = f32(*y.shape).astype(dtype)
        (dw,) = gd.gradients(gd.reduce_sum(y * gd.constant(r, dtype)), [wt])
    ops = {n.op for n in g.nodes}
    assert ("conv_weight_grad" in ops) == (dtype == "float32")
    (got,) = gd.run(g, {}, [dw])
    # numpy: d/dw of sum(conv(x, w) * r) is linear in r; build it from unit weights
    from graphdef.ops.conv import conv_ref

    full = {"strides": (1,) * (len(x_shape) - 2), "pads": (0,) * (2 * (len(x_shape) - 2)),
            "dilations": (1,) * (len(x_shape) - 2), "group": 1, **attrs}  # fmt: skip
    want = np.zeros(w_shape)
    for idx in np.ndindex(*w_shape):
        unit = np.zeros(w_shape)
        unit[idx] = 1.0
        want[idx] = np.sum(conv_ref([x.astype(np.float64), unit], full) * r)
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5)
