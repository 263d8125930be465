"""Compiled training (codegen.compile(..., train=...)): forward, backward and the optimizer's
updates in one net_run, step for step equal to the interpreter; checkpoints shared with it."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import graphdef as gd
from graphdef.errors import CheckpointError

pytestmark = pytest.mark.c

RNG = np.random.default_rng(3)
STEPS = 20


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def he(*shape):
    return f32(*shape, scale=(2.0 / np.prod(shape[1:] if len(shape) > 2 else shape[:1])) ** 0.5)


def mlp(batch=16):
    """64-32-10 MLP, softmax cross-entropy on class labels, Adam."""
    with gd.Graph("mlp_train") as g:
        x = gd.placeholder("x", (batch, 64))
        y = gd.placeholder("y", (batch,), "int64")
        w1, b1 = gd.variable("w1", he(64, 32)), gd.variable("b1", np.zeros(32, np.float32))
        w2, b2 = gd.variable("w2", he(32, 10)), gd.variable("b2", np.zeros(10, np.float32))
        logits = gd.matmul(gd.relu(gd.matmul(x, w1) + b1), w2) + b2
        loss = gd.train.softmax_cross_entropy(logits, y, name="loss")
        train = gd.train.Adam(0.01).minimize(loss)
    feeds = [{"x": f32(batch, 64), "y": RNG.integers(0, 10, batch)} for _ in range(4)]
    return g, train, feeds


def cnn(batch=4):
    """conv 3x3 -> batch norm (training mode, moving statistics) -> relu -> max pool -> dense;
    SGD with Nesterov momentum and a cosine schedule."""
    with gd.Graph("cnn_train") as g:
        x = gd.placeholder("x", (batch, 2, 8, 8))
        y = gd.placeholder("y", (batch,), "int64")
        w = gd.variable("conv_w", he(6, 2, 3, 3))
        scale = gd.variable("bn_scale", np.ones(6, np.float32))
        bias = gd.variable("bn_bias", np.zeros(6, np.float32))
        mean = gd.variable("bn_mean", np.zeros(6, np.float32), trainable=False)
        var = gd.variable("bn_var", np.ones(6, np.float32), trainable=False)
        h = gd.train.batch_norm(gd.conv(x, w, pads=(1, 1, 1, 1)), scale, bias, mean, var)
        h = gd.max_pool2d(gd.relu(h), 2)
        dense = gd.variable("dense", he(6 * 4 * 4, 5))
        logits = gd.matmul(gd.reshape(h, (batch, 6 * 4 * 4)), dense)
        loss = gd.train.softmax_cross_entropy(logits, y, name="loss")
        lr = gd.train.cosine_decay(0.1, gd.train.global_step(), STEPS)
        train = gd.train.SGD(lr, momentum=0.9, nesterov=True).minimize(loss)
    feeds = [{"x": f32(batch, 2, 8, 8), "y": RNG.integers(0, 5, batch)} for _ in range(4)]
    return g, train, feeds


def transformer(seq=8, dim=16, heads=2):
    """One pre-norm transformer block (attention + GELU MLP) over token vectors, mean-squared
    error against a target; AdamW with gradient clipping."""
    dh = dim // heads
    with gd.Graph("tiny_transformer") as g:
        x = gd.placeholder("x", (seq, dim))
        target = gd.placeholder("t", (seq, dim))
        p = {
            "ln1": gd.variable("ln1", np.ones(dim, np.float32)),
            "wq": gd.variable("wq", he(dim, dim)),
            "wk": gd.variable("wk", he(dim, dim)),
            "wv": gd.variable("wv", he(dim, dim)),
            "wo": gd.variable("wo", he(dim, dim)),
            "ln2": gd.variable("ln2", np.ones(dim, np.float32)),
            "w1": gd.variable("w1", he(dim, 4 * dim)),
            "w2": gd.variable("w2", he(4 * dim, dim)),
        }
        h = gd.layer_norm(x, p["ln1"])

        def split(t):  # (seq, dim) -> (heads, seq, dh)
            return gd.transpose(gd.reshape(t, (seq, heads, dh)), (1, 0, 2))

        q, k, v = (split(gd.matmul(h, p[n])) for n in ("wq", "wk", "wv"))
        att = gd.softmax(gd.matmul(q, gd.transpose(k, (0, 2, 1))) * (1.0 / dh**0.5))
        o = gd.reshape(gd.transpose(gd.matmul(att, v), (1, 0, 2)), (seq, dim))
        x1 = x + gd.matmul(o, p["wo"])
        y = x1 + gd.matmul(gd.gelu(gd.matmul(gd.layer_norm(x1, p["ln2"]), p["w1"])), p["w2"])
        loss = gd.train.mean_squared_error(y, target, name="loss")
        train = gd.train.AdamW(3e-3, weight_decay=0.05, clip_norm=1.0).minimize(loss)
    feeds = [{"x": f32(seq, dim), "t": f32(seq, dim)} for _ in range(4)]
    return g, train, feeds


def recurrent(batch=8, steps=12):
    """An Elman RNN written as a gd.while_loop over the time steps (the weights read from
    inside the loop), its last state through a dense layer, Adam: the gradient a reverse loop."""
    from graphdef.ops.control import loop

    with gd.Graph("rnn_train") as g:
        x = gd.placeholder("x", (steps, batch, 6))
        y = gd.placeholder("y", (batch,), "int64")
        w, u = gd.variable("w", he(6, 16)), gd.variable("u", f32(16, 16, scale=0.3))
        b, dense = gd.variable("b", np.zeros(16, np.float32)), gd.variable("dense", he(16, 4))
        (h,), _, _ = loop(
            lambda i, h: True,
            lambda i, h: ([gd.tanh(gd.matmul(gd.gather(x, i), w) + gd.matmul(h, u) + b)], []),
            [gd.zeros((batch, 16))],
            trip=gd.constant(steps, "int64"),
            max_iterations=steps,
        )
        loss = gd.train.softmax_cross_entropy(gd.matmul(h, dense), y, name="loss")
        train = gd.train.Adam(0.01).minimize(loss)
    feeds = [{"x": f32(steps, batch, 6), "y": RNG.integers(0, 4, batch)} for _ in range(4)]
    return g, train, feeds


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer, "recurrent": recurrent}


@pytest.mark.parametrize("name", MODELS)
def test_compiled_steps_match_the_interpreter(name):
    """20 steps (cycling over 4 batches): the compiled model's losses and final variables equal
    the interpreter's within float32 tolerance, and it trains."""
    g, train, feeds = MODELS[name]()
    m = codegen.compile(g, outputs=["loss"], train=train, name=name)
    s = gd.Session(g)
    got, want = [], []
    for i in range(STEPS):
        got.append(float(m(**feeds[i % 4])["loss"]))
        want.append(float(s.run(feeds[i % 4], [train])[0]))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)
    assert np.mean(got[-4:]) < np.mean(got[:4])
    state = {v["name"] for v in m.metadata["state"]}
    assert "global_step" in state and int(m.variable("global_step")) == STEPS
    for v in state:
        np.testing.assert_allclose(m.variable(v), s.variable(v), rtol=2e-3, atol=2e-5, err_msg=v)


def test_checkpoint_resume_gives_the_same_losses(tmp_path):
    """Stop after 7 steps, checkpoint, resume in a fresh model (and in the interpreter): the
    next steps' losses are those of a run that did not stop; the file is numpy's .npz."""
    g, train, feeds = mlp()
    m = codegen.compile(g, outputs=["loss"], train=train)
    for i in range(7):
        m(**feeds[i % 4])
    path = m.save_checkpoint(tmp_path / "ck.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.npz"]  # no temporary left
    data = np.load(path)
    assert int(data["global_step"]) == 7 and data["w1/m"].shape == (64, 32)
    straight = [float(m(**feeds[i % 4])["loss"]) for i in range(7, 12)]
    fresh = codegen.compile(g, outputs=["loss"], train=train)
    header = fresh.load_checkpoint(path)
    assert header["step"] == 7
    assert [float(fresh(**feeds[i % 4])["loss"]) for i in range(7, 12)] == straight
    s = gd.Session(g)
    s.restore(path)
    interp = [float(s.run(feeds[i % 4], [train])[0]) for i in range(7, 12)]
    np.testing.assert_allclose(interp, straight, rtol=2e-4)


def test_checkpoint_of_another_model_is_refused(tmp_path):
    g, train, _ = mlp()
    m = codegen.compile(g, outputs=["loss"], train=train, name="mlp")
    g2, train2, _ = cnn()
    other = codegen.compile(g2, outputs=["loss"], train=train2, name="cnn")
    path = other.save_checkpoint(tmp_path / "cnn.npz")
    with pytest.raises(
        CheckpointError, match=r"cnn\.npz \(of model 'cnn'\) has no variable 'w1' of model 'mlp'"
    ):
        m.load_checkpoint(path)
    before = m.variable("w1")
    np.savez(tmp_path / "plain.npz", w1=before)
    with pytest.raises(CheckpointError, match="not a flowc checkpoint"):
        m.load_checkpoint(tmp_path / "plain.npz")
    np.testing.assert_array_equal(m.variable("w1"), before)  # nothing half-loaded


def test_fine_tuning_sample_runs():
    """samples/finetune.py (part of make demo): an ONNX export imported with trainable
    initializers, fine-tuned by the compiled step to >90% held-out accuracy on a new domain."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "samples" / "finetune.py"
    spec = importlib.util.spec_from_file_location("finetune_sample", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main() == 0


# ----------------------------------------------------------------------------- the convolutions of training
CONVS = [
    # (x shape, w shape, attrs)
    ((3, 4, 9, 9), (6, 4, 3, 3), dict(pads=(1, 1, 1, 1))),
    ((2, 4, 8, 7), (6, 2, 3, 2), dict(strides=(2, 1), group=2, pads=(0, 1, 1, 0))),
    ((2, 3, 10), (5, 3, 4), dict(dilations=(2,))),
    ((1, 2, 4, 4, 5), (3, 2, 2, 2, 3), dict(pads=(0, 1, 0, 1, 0, 1))),
    # an image's im2col over 1 MiB: the weight gradient slices its output rows
    ((2, 32, 40, 40), (8, 32, 3, 3), dict(pads=(1, 1, 1, 1))),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CONVS)), ids=[f"{c[0]}-{c[1]}" for c in CONVS])
def test_convolutions_with_weights_computed_at_run_time(case, threads):
    """A conv whose weights are computed at run time (packed at run time for conv_direct's
    tiles where they apply, else conv_gemm's raw A), its input gradient (a
    conv_transpose: conv_transpose_gemm) and weight gradient (conv_weight_grad: conv_wgrad),
    compiled, against the interpreter; 1-D, 2-D and 3-D, groups, strides, pads, dilations,
    parts over images with 2 threads."""
    x_shape, w_shape, attrs = CONVS[case]
    x, w = f32(*x_shape), f32(*w_shape, scale=0.3)
    with gd.Graph("convs") as g:
        xt = gd.placeholder("x", x_shape)
        wt = gd.placeholder("w", w_shape)  # weights fed at run time, as a training step reads its variables
        y = gd.conv(xt, wt, gd.placeholder("b", (w_shape[0],)), **attrs)
        loss = gd.reduce_sum(y * gd.constant(f32(*y.shape)))
        dx, dw = gd.gradients(loss, [xt, wt])
        gd.identity(y, name="y"), gd.identity(dx, name="dx"), gd.identity(dw, name="dw")
    names = ["y", "dx", "dw"]
    ops = {n.op for n in codegen.program_for(g, names).steps}
    assert {"conv_transpose_gemm", "conv_wgrad"} <= ops and ops & {"conv_direct", "conv_gemm"}
    assert not ops & {"conv", "conv_transpose", "conv_weight_grad"}
    m = codegen.compile(g, outputs=names, threads=threads, name="convs")
    feeds = {"x": x, "w": w, "b": f32(w_shape[0])}
    got = m(**feeds)
    want = gd.run(g, feeds, names)
    for name, ref in zip(names, want):
        np.testing.assert_allclose(
            got[name], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()), err_msg=name
        )


@pytest.mark.parametrize("threads", [1, 2])
def test_conv_transpose_layers_on_the_gemm(threads):
    """conv_transpose as a layer (constant weights, bias, stride 2, output_padding; and a
    grouped one) runs as conv_transpose_gemm and matches the interpreter."""
    x = f32(3, 4, 5, 6)
    with gd.Graph("upsample") as g:
        xt = gd.placeholder("x", x.shape)
        a = gd.conv_transpose(xt, gd.constant(f32(4, 3, 3, 3)), gd.constant(f32(3)), strides=(2, 2),
                              pads=(1, 1, 1, 1), output_padding=(1, 1))  # fmt: skip
        b = gd.conv_transpose(xt, gd.constant(f32(4, 2, 2, 3)), group=2, dilations=(1, 2), pads=(0, 1, 1, 0))
        gd.identity(a, name="a"), gd.identity(b, name="b")
    ops = [n.op for n in codegen.program_for(g, ["a", "b"]).steps]
    assert ops.count("conv_transpose_gemm") == 2
    got = codegen.compile(g, outputs=["a", "b"], threads=threads, name="upsample")(x=x)
    for name, ref in zip(["a", "b"], gd.run(g, {"x": x}, ["a", "b"])):
        np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_updates_write_the_state_in_place_unless_a_later_step_reads_the_variable():
    """An optimizer's assigns store their new values straight into the state (no copies after
    the run); a variable read after its assign (here through a control dependency) keeps the
    copy, and the later read still sees the value the run started with."""
    g, train, feeds = mlp()
    prog = codegen.program_for(g, ["loss", train])
    assert prog.state_updates == []
    with gd.Graph("late_read") as g2:
        v = gd.variable("v", np.arange(4, dtype=np.float32))
        a = gd.assign_add(v, np.ones(4, np.float32), name="bump")
        with gd.control_dependencies([a]):
            gd.identity(v * 2.0, name="late")
    prog = codegen.program_for(g2, ["bump", "late"])
    assert [var for var, _ in prog.state_updates] == ["v"]
    m = codegen.compile(g2, outputs=["bump", "late"], name="late_read")
    for step in range(2):
        out = m()
        np.testing.assert_array_equal(out["late"], 2 * (np.arange(4) + step))
        np.testing.assert_array_equal(out["bump"], np.arange(4) + step + 1)
