"""Every kernel family built for extreme sizes: axes of length 1 next to very long ones, as
the project's binaries are built (-std=c99 -Wall -Wextra -Werror -O3 -march=native).

With the sizes constant in each step, GCC propagates them into the kernels and reasons about
every loop's trip count; a remainder loop that starts where another stopped looked unbounded
to it and failed the build ("iteration 4611686018427387903 invokes undefined behavior",
runtime_c/kernels/norm.h, the layer norm of ConvNeXt over 768 channels). Each family below is
one graph with one output per shape, built into one binary; the small shapes also run
against the numpy interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import graphdef as gd
from graphdef.interpret import run as interpret

pytestmark = pytest.mark.c

BIG = 1 << 20  # a long axis (4 MiB of float32): built, not run


def _ph(name, shape):
    return gd.placeholder(name, shape)


def layer_norm(g):
    for k, shape in enumerate([(1, 1), (1, 768), (3, 17), (2, BIG + 3), (BIG, 1)]):
        gd.layer_norm(_ph(f"x{k}", shape), _ph(f"s{k}", shape[-1:]), _ph(f"b{k}", shape[-1:]), name=f"y{k}")


def softmax(g):
    for k, (shape, axis) in enumerate([((1, 1), -1), ((1, 768), -1), ((7, 1, 1), 0), ((4, BIG), -1),
                                       ((3, BIG, 2), 1), ((BIG, 3), 0)]):  # fmt: skip
        x = _ph(f"x{k}", shape)
        gd.softmax(x, axis=axis, name=f"y{k}")
        gd.log_softmax(x, axis=axis, name=f"z{k}")


def pooling_and_depthwise(g):
    rng = np.random.default_rng(0)
    for k, (shape, kernel) in enumerate([((1, 1, 1, 1), 1), ((1, 2, 5, 3), 3), ((1, 1, 2048, 2048), 3),
                                         ((1, 96, 1, 1), 1)]):  # fmt: skip
        x = _ph(f"x{k}", shape)
        pads = [kernel // 2] * 4
        gd.max_pool(x, [kernel, kernel], strides=[1, 1], pads=pads, name=f"mp{k}")
        gd.avg_pool(x, [kernel, kernel], strides=[1, 1], pads=pads, name=f"ap{k}")
        c = shape[1]
        w = rng.standard_normal((c, 1, kernel, kernel)).astype(np.float32)
        gd.conv(x, w, pads=pads, group=c, name=f"dw{k}")


def elementwise(g):
    for k, shape in enumerate([(1,), (17,), (BIG * 4 + 1,)]):
        x = _ph(f"x{k}", shape)
        gd.mul(gd.tanh(x), gd.sigmoid(gd.exp(-gd.abs(x))), name=f"y{k}")


def reductions(g):
    for k, (shape, axes) in enumerate([((1,), [0]), ((1, 1, 1), [1]), ((BIG * 4,), [0]), ((3, BIG), [1]),
                                       ((BIG, 3), [0])]):  # fmt: skip
        x = _ph(f"x{k}", shape)
        gd.reduce_mean(x, axes=axes, name=f"m{k}")
        gd.reduce_max(x, axes=axes, name=f"x{k}_max")
        gd.reduce_sum(x, axes=axes, name=f"s{k}")


def products_and_copies(g):
    rng = np.random.default_rng(1)
    for k, (m, kk, n) in enumerate([(1, 1, 1), (1, 4096, 1), (4096, 1, 3), (2, 3, 4097)]):
        w = rng.standard_normal((kk, n)).astype(np.float32)
        gd.matmul(_ph(f"a{k}", (m, kk)), w, name=f"p{k}")
    for k, shape in enumerate([(1, 1, 1), (2048, 2049), (1, BIG, 3)]):
        gd.transpose(_ph(f"t{k}", shape), name=f"tr{k}")
    gd.concat([_ph("c0", (1, 1)), _ph("c1", (1, BIG))], axis=1, name="cat")


def small_plane_convs(g):
    """Convolutions with at most 256 output positions (register tiles on AVX-512, conv_direct.py):
    one position, one channel, thousands of input channels, a 256-wide row."""
    rng = np.random.default_rng(3)
    for k, (shape, m, kernel, strides) in enumerate([((1, 1, 1, 1), 1, (3, 3), (1, 1)),
                                                     ((1, 4096, 2, 2), 1, (3, 3), (1, 1)),
                                                     ((1, 3, 1, 256), 5, (1, 3), (1, 1)),
                                                     ((1, 1, 31, 31), 1000, (3, 3), (2, 2))]):  # fmt: skip
        w = rng.standard_normal((m, shape[1], *kernel)).astype(np.float32)
        pads = [kernel[0] // 2, kernel[1] // 2] * 2
        gd.relu(gd.conv(_ph(f"x{k}", shape), w, strides=strides, pads=pads), name=f"y{k}")


def batch_norm(g):
    for k, shape in enumerate([(1, 1, 1, 1), (1, 3, 1024, 1024), (2, 5, 1, 7)]):
        c = shape[1]
        gd.batch_norm(_ph(f"x{k}", shape), *(_ph(f"{p}{k}", (c,)) for p in "sbmv"), name=f"y{k}")


FAMILIES = [
    layer_norm,
    softmax,
    pooling_and_depthwise,
    elementwise,
    reductions,
    products_and_copies,
    small_plane_convs,
    batch_norm,
]


def _feeds(g: gd.Graph, limit: int) -> dict:
    rng = np.random.default_rng(2)
    feeds = {}
    for name in g.inputs:
        t = g.node(name).outputs[0]
        if t.size <= limit:
            a = rng.standard_normal(t.shape).astype(np.float32)
            feeds[name] = np.abs(a) + 0.5 if name.startswith("v") else a  # variances positive
    return feeds


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
def test_kernel_family_builds_for_extreme_sizes(family, tmp_path):
    with gd.Graph(family.__name__) as g:
        family(g)
    out = codegen.export(g, tmp_path / "out", name="net")  # the binary, built with -Werror -O3
    assert (out / "net").is_file()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
def test_small_shapes_match_the_interpreter(family):
    """The same families at the sizes that run quickly: each output whose inputs are all small."""
    with gd.Graph(family.__name__) as g:
        family(g)
    feeds = _feeds(g, 1 << 16)
    small = [
        n.name for n in g.nodes
        if n.op not in ("placeholder", "constant") and _inputs_of(g, n.name) <= set(feeds)
        and g.node(n.name).outputs[0].size <= 1 << 16 and n.name in {str(r) for r in g.outputs}
    ]  # fmt: skip
    assert small
    m = codegen.compile(g, outputs=small, name="small")
    # the large inputs stay the model's inputs (unread by these outputs): zeros
    got = m(**{t.name: feeds.get(t.name, np.zeros(t.shape, np.float32)) for t in m.inputs})
    want = dict(zip(small, interpret(g, feeds, small)))
    for k in small:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-5, err_msg=k)


def _inputs_of(g: gd.Graph, name: str) -> set[str]:
    """The placeholders ``name`` depends on."""
    seen, stack, out = set(), [name], set()
    while stack:
        n = g.node(stack.pop())
        if n.name in seen:
            continue
        seen.add(n.name)
        if n.op == "placeholder":
            out.add(n.name)
        stack.extend(r.node for r in n.inputs)
    return out
