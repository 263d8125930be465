"""QDQ convolutions as QLinearConv, before conversion.

onnxruntime's quantizer writes an int8 model in its default (QDQ) format as float operators
between DequantizeLinear and QuantizeLinear pairs: ``DequantizeLinear(x_q) -> Conv(.,
DequantizeLinear(w_q), DequantizeLinear(b_q)) -> QuantizeLinear -> y_q``. onnxruntime itself
fuses that pattern into one integer QLinearConv; so does ``fuse``, on the ONNX nodes, so that
the convolution runs on the integer kernel (ops_quant.py ``_qlinear_conv_kernel``: int8
weights stored as they are, int8 activations between such convolutions) and computes what
onnxruntime computes. A pattern is fused only where QLinearConv means the same: the scales
and zero points constants of one value each for x and y (the weights' per output channel),
the weights and bias constants, the bias an int32 dequantized with scale x_scale * w_scale
and zero point 0, no attribute that changes the rounding (``saturate``, ``output_dtype``,
``block_size``), the Conv's float output read by that QuantizeLinear alone and not a graph
output. Everything else stays as it is (correct in float, as before).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from onnx import helper

_PLAIN_DQ = {"axis"}  # the attributes a DequantizeLinear / QuantizeLinear fused here may carry


def fuse(nodes, known: dict, outputs: set[str]) -> list:
    """``nodes`` (an ONNX graph's, in order) with each fusable QDQ convolution (see the module)
    one QLinearConv node in place of its Conv and QuantizeLinear (named as the Conv); the
    DequantizeLinear nodes nothing else reads are dropped. ``known``: the initializers' values
    by name; ``outputs``: the graph's output names."""
    producer = {o: n for n in nodes for o in n.output if o}
    reader = {i: n for n in nodes for i in n.input if i}  # a reader of each name (the last)
    readers = Counter(i for n in nodes for i in n.input if i)
    readers.update(outputs)
    replace, drop = {}, set()
    for n in nodes:
        if n.op_type != "Conv" or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
            continue
        fused = _fused(n, producer, reader, readers, known, outputs)
        if fused is None:
            continue
        q, node, dqs = fused
        replace[id(q)] = node
        drop.add(id(n))
        for dq in dqs:  # read by this Conv alone: no longer needed
            if readers[dq.output[0]] == 1:
                drop.add(id(dq))
    if not replace:
        return list(nodes)
    return [replace.get(id(n), n) for n in nodes if id(n) not in drop]


def _fused(conv, producer, reader, readers, known, outputs):
    """(the QuantizeLinear, the QLinearConv replacing both, the DequantizeLinear nodes it read)
    for a fusable pattern, else None."""
    y = conv.output[0]
    if y in outputs or readers[y] != 1:
        return None
    q = reader.get(y)
    if q is None or q.op_type != "QuantizeLinear" or list(q.input[:1]) != [y] or not _plain(q):
        return None
    ins = list(conv.input) + [""] * (3 - len(conv.input))
    dq = [producer.get(name) if name else None for name in ins]
    if any(d is None or d.op_type != "DequantizeLinear" or not _plain(d) for d in dq[:2]):
        return None
    if ins[2] and (dq[2] is None or dq[2].op_type != "DequantizeLinear" or not _plain(dq[2])):
        return None
    x_q, x_scale, x_zero = _operands(dq[0])
    w_q, w_scale, w_zero = _operands(dq[1])
    _, y_scale, y_zero = _operands(q)
    consts = [x_scale, x_zero, w_q, w_scale, w_zero, y_scale, y_zero]
    if any(name and name not in known for name in consts) or not (x_scale and w_scale and y_scale):
        return None
    if any(known[name].size != 1 for name in (x_scale, y_scale)):
        return None
    if any(name and known[name].size != 1 for name in (x_zero, y_zero)):
        return None
    if known[w_scale].size != 1 and _axis(dq[1]) != 0:  # per channel: along the output channels
        return None
    bias = ""
    if ins[2]:
        b_q, b_scale, b_zero = _operands(dq[2])
        if b_q not in known or b_scale not in known or known[b_q].dtype != np.int32:
            return None
        if b_zero and (b_zero not in known or np.any(known[b_zero])):
            return None
        m = known[b_q].shape
        want = known[x_scale].reshape(-1) * known[w_scale].reshape(-1)
        if known[b_scale].size not in (1, *m) or known[w_scale].size not in (1, *m):
            return None
        if not np.array_equal(np.broadcast_to(want, m), np.broadcast_to(known[b_scale].reshape(-1), m)):
            return None  # another bias scale: QLinearConv's is x_scale * w_scale
        bias = b_q
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    node = helper.make_node(
        "QLinearConv",
        [x_q, x_scale, x_zero, w_q, w_scale, w_zero, y_scale, y_zero] + ([bias] if bias else []),
        [q.output[0]],
        name=conv.name,
        **attrs,
    )
    return q, node, [d for d in dq if d is not None]


def _axis(node) -> int:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)


def _plain(node) -> bool:
    return all(a.name in _PLAIN_DQ for a in node.attribute)


def _operands(node) -> tuple[str, str, str]:
    """A DequantizeLinear's or QuantizeLinear's (x, scale, zero point) names ('' where absent)."""
    names = list(node.input) + [""] * (3 - len(node.input))
    return names[0], names[1], names[2]
