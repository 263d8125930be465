"""The C backend's integer lowering for Helium (codegen/backends/c/quant_lowering.py)."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd
from codegen.backends.c.quant_lowering import channels_last, layout_for
from graphdef.ops.quant import qconv


def _graph(shared: bool, depthwise: bool = False):
    rng = np.random.default_rng(3)
    g = gd.Graph("rows")
    with g:
        x = gd.placeholder("x", (1, 16, 6, 7), "int8")
        w = gd.constant(
            rng.integers(-127, 128, (16 if depthwise else 5, 1 if depthwise else 16, 3, 3)).astype(np.int8)
        )
        y = qconv(
            x,
            w,
            multiplier=(1 << 30,),
            shift=(-9,),
            pads=(1, 1, 1, 1),
            x_zero=3,
            group=16 if depthwise else 1,
        )
        outs = [y]
        if shared:  # the same weights read by something else too: left in their order
            outs.append(gd.cast(w, "int32"))
        g.set_outputs(*outs)
    return g.freeze(), {"x": rng.integers(-128, 128, (1, 16, 6, 7)).astype(np.int8)}


@pytest.mark.parametrize("depthwise", [False, True])
def test_weights_laid_out_channels_last_keep_the_reference_results(depthwise):
    """The suited qconv's weights become (M, kh, kw, C) data ((kh, kw, M) for a depthwise one)
    under the same declared shape, the node's w_layout says so, and the interpreter's result is
    unchanged (its reference reads the layout back)."""
    g, feeds = _graph(shared=False, depthwise=depthwise)
    (node,) = [n for n in g.nodes if n.op == "qconv"]
    layout = layout_for(node, g)
    assert layout == ("hwo" if depthwise else "ohwi")
    h = channels_last(g)
    (marked,) = [n for n in h.nodes if n.op == "qconv"]
    assert marked.attrs["w_layout"] == layout
    w0 = g.constants[node.inputs[1].node]
    w1 = h.constants[marked.inputs[1].node]
    assert w1.shape == w0.shape
    if depthwise:
        np.testing.assert_array_equal(w1.reshape(3, 3, 16), w0[:, 0].transpose(1, 2, 0))
    else:
        np.testing.assert_array_equal(w1.reshape(5, 3, 3, 16), w0.transpose(0, 2, 3, 1))
    names = [str(r) for r in g.outputs]
    for a, b in zip(gd.Session(g).run(feeds, names), gd.Session(h).run(feeds, [str(r) for r in h.outputs])):
        np.testing.assert_array_equal(a, b)


def test_weights_read_elsewhere_are_left_as_they_are():
    g, _ = _graph(shared=True)
    assert channels_last(g) is g
