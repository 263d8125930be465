"""Fixtures shared by every test folder."""

from __future__ import annotations

import numpy as np
import pytest

import codegen  # noqa: F401  (the C backend registers its own ops: sgemm, conv_gemm)
import graphdef as gd
from graphdef.examples import add_example


def build_zoo() -> tuple[gd.Graph, dict]:
    """One graph that uses every registered op at least once (checked by a test), and the
    feeds of its placeholders: a small network written by hand, then the first example of
    every op the network does not use (graphdef/examples.py), so a new op joins by itself."""
    rng = np.random.default_rng(7)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    g = gd.Graph("zoo")
    with g:
        x = gd.placeholder("x", (2, 3, 6, 6))
        ids = gd.placeholder("ids", (2, 3), "int64")
        w = gd.variable("w", f32(4, 3, 3, 3))
        b = gd.constant(f32(4), name="b")
        with gd.name_scope("features"):
            c = gd.relu(gd.conv2d(x, w, b, padding=1))
            c = gd.batch_norm(c, *(gd.constant(np.abs(f32(4)) + 0.5) for _ in range(4)))
            p = gd.max_pool2d(c, 2)
            a = gd.avg_pool2d(c, 3, stride=2, padding=1)
            t = gd.conv_transpose2d(a, gd.constant(f32(4, 2, 2, 2)), stride=2)
            r = gd.resize(p, scales=(1, 1, 2, 2), mode="linear")
        h = gd.concat([gd.flatten(r), gd.reshape(t, (2, -1))], axis=1)
        h = gd.gemm(h, gd.constant(f32(h.shape[1], 8) * 0.1), gd.constant(f32(8)))
        emb = gd.gather(gd.constant(f32(10, 8)), ids)
        h = gd.layer_norm(gd.unsqueeze(h, 1) + emb, gd.constant(np.ones(8, np.float32)))
        h = gd.matmul(h, gd.transpose(h, (0, 2, 1)))
        s1, s2 = gd.split(h, (1, 2), axis=1)
        m = gd.where(s1 > s2, gd.gelu(s1), gd.tanh(s2) - gd.sigmoid(s2) * gd.erf(s1))
        m = gd.leaky_relu(gd.elu(m)) / (gd.exp(gd.neg(gd.abs(m))) + 1.0)
        m = gd.maximum(gd.minimum(m, 2.0), gd.sqrt(gd.clip(m, 0.0, 4.0)))
        m = m + gd.log(m * m + 1.0) - gd.rsqrt(m * m + 1.0) ** 2.0
        m = gd.pad(gd.tile(gd.expand(m, (2, 2, 3)), (1, 1, 2)), [0, 0, 1, 0, 0, 1])
        m = gd.squeeze(gd.slice(m, [0], [1], [1]), 1)
        logits = gd.reduce_sum(m, axes=1) + gd.reduce_mean(m, axes=1) - gd.reduce_max(m, axes=1)
        logits = logits * gd.reduce_min(m, axes=1) + gd.reduce_prod(gd.sign(m) + 2.0, axes=1)
        probs = gd.softmax(logits, name="probs")
        gd.log_softmax(logits, name="logp")
        gd.argmax(probs, name="label")
        # graphdef/ops/index.py
        top, top_i = gd.topk(logits, 2, name="top")
        picked = gd.gather_elements(probs, top_i)
        gd.scatter_elements(probs, top_i, picked * 2.0, reduction="add", name="boosted")
        rows = gd.gather_nd(h, gd.constant(np.array([[0, 1], [1, 2]], np.int64)), name="rows")
        gd.scatter_nd(h, gd.constant(np.array([[1, 0]], np.int64)), rows[:1], name="patched")
        gd.argmin(probs, name="worst")
        mask = gd.logical_or(gd.logical_and(probs > 0.1, probs < 0.9), gd.logical_not(probs >= 0.5))
        mask = gd.logical_xor(mask, gd.equal(probs, probs)) | (probs <= 0.0)
        gd.cast(mask, "float32", name="mask")
        # graphdef/ops/math.py (bounded inputs: every domain holds)
        u = gd.tanh(gd.expand(logits, (3, 2)))
        t = gd.sin(u) + gd.cos(u) * gd.tan(u) + gd.asin(u) - gd.acos(u) + gd.atan(u) + gd.atanh(u * 0.5)
        t = t + gd.sinh(u) - gd.cosh(u) + gd.asinh(u) + gd.acosh(u + 2.0)
        t = gd.mod(gd.floor(t) + gd.ceil(t) + gd.round(t * 3.0), 4.0) + gd.cumsum(t, axis=1)
        gd.cumprod(t, axis=-1, exclusive=True, reverse=True, name="cum")
        gd.logical_or(gd.isnan(t), gd.isinf(t), name="special")
        bits = gd.bitwise_or(gd.bitwise_and(ids, 6), gd.bitwise_xor(ids, gd.bitwise_not(ids)))
        gd.bitshift(bits, gd.mod(ids, 3, fmod=True), "left", name="bits")
        # graphdef/ops/linear.py: the fast-GEMM forms (codegen.passes.lower_linear makes them)
        from codegen.backends.c import sgemm as SP

        plan = SP.make_plan(2, 2, 108, isa="avx512", b="packed")
        fields = tuple(getattr(plan, f) for f in SP.FIELDS)
        gd.apply(
            "sgemm",
            [gd.reshape(x, (2, 108)), gd.constant(SP.pack_b(np.eye(108, 2), plan))],
            plan=fields,
            isa="avx512",
            shape=(2, 2),
            name="dense",
        )
        cplan = SP.make_plan(4, 36, 27, isa="avx512", a="packed")
        gd.apply(
            "conv_gemm",
            [x, gd.constant(SP.pack_a(np.ones((4, 27)), cplan))],
            plan=tuple(getattr(cplan, f) for f in SP.FIELDS),
            isa="avx512",
            kernel=(3, 3),
            out=(6, 6),
            strides=(1, 1),
            pads=(1, 1, 1, 1),
            dilations=(1, 1),
            group=1,
            direct=False,
            name="conv_gemm",
        )
        # graphdef/ops/bits.py
        gd.bitcast(gd.bitcast(probs, "uint8"), "float32", name="reinterpreted")
        loss = gd.identity(gd.reduce_sum(gd.stop_gradient(probs) * logits), name="loss")
        (dw,) = gd.gradients(loss, [w])
        gd.assign_sub(w, dw * 0.01, name="step")
        steps = gd.variable("steps", np.zeros((), np.int64))
        gd.assign(steps, gd.assign_add(steps, 1) * 1, name="count")
        gd.global_avg_pool(x, name="gap")
        gd.fill((2,), 1.0, name="filled")
        gd.apply("fused", [probs, logits], program=(("mul", (0, 1), ()), ("exp", (2,), ())), name="fused")
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.standard_normal((2, 3, 6, 6)).astype(np.float32),
        "ids": rng.integers(0, 10, (2, 3)).astype(np.int64),
    }
    used = {n.op for n in g.nodes}
    with g:
        for op, opdef in sorted(gd.all_ops().items()):
            if op not in used and opdef.examples:  # placeholders <op>_in0, ... (file names of feeds)
                feeds.update(add_example(op, 0, prefix=f"{op}_in")[1])
    return g, feeds


@pytest.fixture(scope="session")
def _zoo() -> tuple[gd.Graph, dict]:
    return build_zoo()


@pytest.fixture(scope="session")
def zoo(_zoo) -> gd.Graph:
    return _zoo[0]


@pytest.fixture(scope="session")
def zoo_feeds(_zoo) -> dict:
    return _zoo[1]


@pytest.fixture(scope="module")
def compile_graphs():
    """compile_graphs({key: graph}) -> {key: CompiledModel}, all in one shared library; the
    caller's tests skip when there is no C compiler."""

    def compile_all(graphs: dict):

        try:
            codegen.backends.c.toolchain.find_cc()
        except gd.errors.FlowcError as e:
            pytest.skip(str(e))
        return dict(zip(graphs, codegen.compile_many(list(graphs.items()))))

    return compile_all
