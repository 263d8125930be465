"""Integer convolutions' weights laid out at compile time for the build's kernel.

On a microcontroller with Helium (MVE), ``channels_last`` stores a convolution's constant
weights channels-last and says so in the ``qconv``'s ``w_layout`` (the declared shape kept):
"ohwi" for a dense one, (M, kh, kw, C), so that kernels/qconv.h's channel-rows form
(fc_qconv_rows) reads each window's kernel row as kw * C contiguous bytes of an input row laid
out channels-last, as the weights are (16 products a vmladava, nothing packed per position);
"hwo" for a depthwise one, (kh, kw, M), so that fc_qconv_dwrows takes four channels a vector
lane each, a tap's weights one load.
"""

from __future__ import annotations

from graphdef.ir import Attrs, Graph, Node

from ... import passes

ROWS_KH = 16  # FC_QCONV_ROWS_KH: the most kernel rows the forms hold


def layout_for(node: Node, graph: Graph) -> str | None:
    """The channels-last ``w_layout`` whose form suits ``qconv`` ``node`` on Helium, else None:
    "ohwi" for one group, more than one output position and at least 8 bytes a kernel row
    (kw * C: half a vmladava's 16; an RGB image's 3 x 3 stem has 9); "hwo" for a depthwise
    convolution (one input and one output channel a group) of at least 4 channels (a vector's
    lanes), its multipliers float or fixed-point with double rounding and shifts above -31;
    both with dilation 1, at most ROWS_KH kernel rows and constant weights."""
    if node.op != "qconv" or node.attrs.get("w_layout", "oihw") != "oihw":
        return None
    a, x, w, y = node.attrs, graph.type_of(node.inputs[0]), graph.type_of(node.inputs[1]), node.outputs[0]
    if (
        tuple(a["dilations"]) != (1, 1)
        or w.shape[2] > ROWS_KH
        or passes.constant_value(graph, node.inputs[1]) is None
    ):
        return None
    if a["group"] == 1 and y.shape[2] * y.shape[3] > 1 and w.shape[1] * w.shape[3] >= 8:
        return "ohwi"
    fixed = a["rounding"] == "double" and all(s > -31 for s in a["shift"])  # (vrshl's fixup)
    if a["group"] == x.shape[1] == y.shape[1] >= 4 and (a["scale"] or fixed):
        return "hwo"
    return None


def _laid_out(w, layout: str):
    """The data of OIHW weights ``w`` in ``layout``, under w's shape."""
    order = w.transpose(0, 2, 3, 1) if layout == "ohwi" else w[:, 0].transpose(1, 2, 0)
    return order.reshape(w.shape).copy()


def channels_last(graph: Graph) -> Graph:
    """``graph`` with the weights of every ``qconv`` that suits a channels-last form
    (``layout_for``) in that layout and the node's ``w_layout`` saying it, where every reader
    of those weights is such a convolution wanting the same layout (laid out once)."""
    users = passes.consumers(graph)
    layout = {n.name: layout_for(n, graph) for n in graph.nodes if n.op == "qconv"}
    layout = {k: v for k, v in layout.items() if v}

    def weights_only(user: str, const: str, want: str) -> bool:  # reads const as its w alone
        ins = [r.node for r in graph.node(user).inputs]
        return layout.get(user) == want and ins[1] == const and ins.count(const) == 1

    weights: dict[str, str] = {}
    for n in graph.nodes:
        if n.name in layout:
            const = n.inputs[1].node
            if all(weights_only(u, const, layout[n.name]) for u in users[const]):
                weights[const] = layout[n.name]
    if not weights:
        return graph
    rb = passes.Rebuild(graph)
    for node in graph.nodes:
        if node.name in weights:
            rb.constant(node, _laid_out(graph.constants[node.name], weights[node.name]))
        elif node.name in layout and node.inputs[1].node in weights:
            marked = Node(
                node.name,
                node.op,
                tuple(rb.refs[r] for r in node.inputs),
                Attrs({**dict(node.attrs.items()), "w_layout": layout[node.name]}),
                node.outputs,
                node.device,
                rb.controls(node),
            )
            rb.new.add(marked)
            rb.bind(node, [marked.ref()])
        else:
            rb.keep(node)
    return rb.finish()
