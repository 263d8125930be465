"""QDQ convolutions and dense layers as QLinearConv, before conversion.

onnxruntime's quantizer writes an int8 model in its default (QDQ) format as float operators
between DequantizeLinear and QuantizeLinear pairs: ``DequantizeLinear(x_q) -> Conv(.,
DequantizeLinear(w_q), DequantizeLinear(b_q)) -> QuantizeLinear -> y_q``, and the same around
Gemm. onnxruntime itself fuses those patterns into integer operators; so does ``fuse``, on the
ONNX nodes: a Conv becomes one QLinearConv, a Gemm a QLinearConv on 1x1 planes between two
Reshapes (its weights, transposed where ``transB`` is 0, a new initializer), a Relu between the
float result and its QuantizeLinear a Max with y's zero point after it (what the quantized Relu
is, exactly), a MatMul by a constant int8 matrix the same QLinearConv on the rows of x (its
leading axes kept), so that all three run on the integer kernel (ops_quant.py
``_qlinear_conv_kernel``: int8 weights stored as they are, int8 activations between such layers)
and compute what onnxruntime computes. A pattern is fused only where QLinearConv means the same:
the scales and zero points constants of one value each for x and y (the weights' per output
channel), the weights and bias constants, the bias an int32 dequantized with scale x_scale *
w_scale and zero point 0, no attribute that changes the rounding (``saturate``,
``output_dtype``, ``block_size``), a Gemm with alpha and beta 1 and x not transposed, the float
result read by that QuantizeLinear alone and not a graph output. Everything else stays as it is
(correct in float, as before), and ``flowc inspect`` says which Conv, Gemm and MatMul between
DequantizeLinear nodes stayed float, and why. A MaxPool (or a Flatten, Reshape, Transpose,
Squeeze, Unsqueeze) between a DequantizeLinear and a QuantizeLinear of the same scale and zero
point runs on the integers (it commutes with the map: exactly the same values), and a Softmax
between them becomes QLinearSoftmax, as onnxruntime runs it (ops_quant_ms.py: its exponentials a
table of the 256 integer differences, no exp at run time). An AveragePool, GlobalAveragePool,
Add, Mul, Sigmoid, LeakyRelu or Concat reading its inputs through DequantizeLinear nodes and
read by one QuantizeLinear (every scale and zero point one constant) becomes com.microsoft's
QLinear operator of that name, as onnxruntime fuses them: the average pools sum the integers
(into int32, or on the integer convolution), the others compute each value in float32 from the
int8 inputs to the int8 result in one loop, so no float tensor is stored between layers.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from onnx import helper

from ..errors import printable

_PLAIN_DQ = {"axis"}  # the attributes a DequantizeLinear / QuantizeLinear fused here may carry


def fuse(nodes, known: dict, outputs: set[str], opset: int = 13) -> tuple[list, dict, list[str]]:
    """``nodes`` (an ONNX graph's, in order) with each fusable QDQ Conv and Gemm (see the
    module) replaced by its integer nodes (named as the Conv or Gemm) in place of it and its
    QuantizeLinear; the DequantizeLinear nodes nothing else reads are dropped. ``known``: the
    initializers' values by name; ``outputs``: the graph's output names. Returns the nodes, the
    new initializers (name -> array: a Gemm's weights and shapes) and a line for each Conv or
    Gemm between DequantizeLinear nodes that stays float, saying why ("Conv 'c1': ...")."""
    producer = {o: n for n in nodes for o in n.output if o}
    reader = {i: n for n in nodes for i in n.input if i}  # a reader of each name (the last)
    readers = Counter(i for n in nodes for i in n.input if i)
    readers.update(outputs)
    taken = set(producer) | set(readers) | set(known)
    replace, drop, new, notes = {}, set(), {}, []
    for n in nodes:
        if (
            n.op_type not in ("Conv", "Gemm", "MatMul")
            or n.domain not in ("", "ai.onnx")
            or len(n.output) != 1
        ):
            continue
        found = _pattern(n, producer, reader, readers, known, outputs)
        if isinstance(found, str):
            if any(
                producer.get(i) is not None and producer[i].op_type == "DequantizeLinear" for i in n.input[:2]
            ):
                notes.append(f"{n.op_type} {_label(n)}: {found}")
            continue
        q, relu, inputs, dqs = found
        w_axis = _axis(dqs[1]) if known[inputs[4]].size != 1 else None  # per channel: along which
        out = q.output[0] if relu is None else _fresh(f"{q.output[0]}_flowc_q", taken)
        if n.op_type == "Conv":
            fused = [_qlinear_conv(n.name, inputs, out, _attrs(n))] if w_axis in (None, 0) else None
            why = "its weights' scales are not along the output channels (axis 0)"
        elif n.op_type == "MatMul":
            fused = _matmul(n, out, inputs, w_axis, known, taken, new)
            why = "its second input is not a constant int8 matrix scaled per column (axis 1) or per tensor"
        else:
            fused = _gemm(n, out, inputs, w_axis, known, taken, new)
            why = "alpha or beta is not 1, A is transposed, or its weights are not int8 scaled per column"
        if fused is None:
            notes.append(f"{n.op_type} {_label(n)}: {why}")
            continue
        if relu is not None:  # quantized, relu(v) is max(q(v), y_zero): y's zero point is its floor
            floor = inputs[7]
            if not floor:  # uint8 with zero point 0
                floor = _fresh(f"{q.output[0]}_flowc_zero", taken)
                new[floor] = np.zeros((), np.uint8)
            name = f"{relu.name or n.name}_max"
            fused.append(helper.make_node("Max", [out, floor], [q.output[0]], name=name))
            drop.add(id(relu))
        replace[id(q)] = fused
        drop.add(id(n))
        for dq in dqs:  # read by this node alone: no longer needed (one read through an Identity stays)
            if readers[dq.output[0]] == 1 and reader[dq.output[0]] is n:
                drop.add(id(dq))
    for n in nodes:  # DequantizeLinear -> MaxPool, a reshape... -> QuantizeLinear of the same scale
        if n.op_type in _ON_INTEGERS and n.domain in ("", "ai.onnx") and id(n) not in drop:
            pair = _max_pool_pair(n, producer, reader, readers, known, outputs)
            if pair is not None:
                dq, q = pair
                ins = [dq.input[0], *n.input[1:]]
                pool = helper.make_node(n.op_type, ins, [q.output[0]], name=n.name, **_attrs(n))
                replace[id(q)] = [pool]
                drop.add(id(n))
                if readers[dq.output[0]] == 1:
                    drop.add(id(dq))
    for n in nodes:  # DequantizeLinear -> Softmax -> QuantizeLinear: QLinearSoftmax (a table, no exp)
        if n.op_type == "Softmax" and n.domain in ("", "ai.onnx") and id(n) not in drop:
            pair = _softmax_pair(n, producer, reader, readers, known, outputs)
            if pair is not None:
                dq, q = pair
                axis = next((a.i for a in n.attribute if a.name == "axis"), -1 if opset >= 13 else 1)
                ins = [*_operands(dq)[:3], *_operands(q)[1:3]]
                soft = helper.make_node("QLinearSoftmax", ins, [q.output[0]], name=n.name,
                                        domain="com.microsoft", axis=axis, opset=opset)  # fmt: skip
                replace[id(q)] = [soft]
                drop.add(id(n))
                if readers[dq.output[0]] == 1:
                    drop.add(id(dq))
    for (
        n
    ) in nodes:  # DequantizeLinear(s) -> a pool, Add, Mul, ... -> QuantizeLinear: com.microsoft's QLinear op
        name = _QLINEAR.get(n.op_type)
        if name is None or n.domain not in ("", "ai.onnx") or id(n) in drop:
            continue
        found = _qlinear(n, producer, reader, readers, known, outputs)
        if found is None:
            continue
        dqs, q = found
        triples = [list(_operands(d)) for d in dqs]
        _, ys, yz = _operands(q)
        if n.op_type == "Concat":
            ins = [ys, yz, *(v for t in triples for v in t)]
        else:
            ins = [*(v for t in triples for v in t), ys, yz]
        attrs = _attrs(n)
        if "Pool" in n.op_type:
            attrs["channels_last"] = 0
        padded = any(attrs.get("pads", ())) or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID")
        if n.op_type == "AveragePool" and (
            padded and not attrs.get("count_include_pad", 0) or attrs.get("ceil_mode")
        ):
            notes.append(f"AveragePool {_label(n)}: its windows may count different numbers of pixels "
                         "(padding not counted, or ceil_mode): QLinearAveragePool, in float32")  # fmt: skip
        replace[id(q)] = [
            helper.make_node(name, ins, [q.output[0]], name=n.name, domain="com.microsoft", **attrs)
        ]
        drop.add(id(n))
        for d in dqs:
            if readers[d.output[0]] == sum(1 for i in n.input if i == d.output[0]):
                drop.add(id(d))
    read_by: dict[str, list] = {}
    for n in nodes:
        for i in set(n.input):
            read_by.setdefault(i, []).append(n)
    for n in nodes:  # the other operators between dequantized inputs and a QuantizeLinear: float32
        if id(n) in drop or n.op_type in ("Conv", "Gemm", "DequantizeLinear", "QuantizeLinear"):
            continue
        if len(n.output) != 1 or not read_by.get(n.output[0]):
            continue
        dq_in = any((_source(i, producer) or n).op_type == "DequantizeLinear" for i in n.input if i)
        if dq_in and all(r.op_type == "QuantizeLinear" for r in read_by[n.output[0]]):
            notes.append(f"{n.op_type} {_label(n)}: no integer kernel; computed in float32 between its "
                         "DequantizeLinear and QuantizeLinear")  # fmt: skip
    if not replace:
        return list(nodes), {}, notes
    out = []
    for n in nodes:
        if id(n) not in drop:
            out += replace.get(id(n), [n])
    read = {i for n in out for i in n.input} | set(outputs)  # a DequantizeLinear all its readers took in
    out = [n for n in out if n.op_type != "DequantizeLinear" or n.output[0] in read]
    return out, new, notes


def _pattern(node, producer, reader, readers, known, outputs):
    """(the QuantizeLinear, QLinearConv's inputs [x_q, x_scale, x_zero, w_q, w_scale, w_zero,
    y_scale, y_zero, bias_q or ''], the DequantizeLinear nodes read) for a fusable pattern around
    ``node`` (its x, w and bias its first three inputs), else why not."""
    y = node.output[0]
    relu = None  # a Relu between the node and its QuantizeLinear: the quantized result's floor
    for _ in range(2):
        if y in outputs:
            return "its float result is a graph output"
        if readers[y] != 1:
            return "its float result is read by more than one node"
        q = reader.get(y)
        if relu is None and q is not None and q.op_type == "Relu" and list(q.input) == [y]:
            relu, y = q, q.output[0]
            continue
        break
    if q is None or q.op_type != "QuantizeLinear" or list(q.input[:1]) != [y]:
        return f"its result goes to {q.op_type if q is not None else 'nothing'}, not to a QuantizeLinear"
    ins = list(node.input) + [""] * (3 - len(node.input))
    dq = [_source(name, producer) if name else None for name in ins]
    if any(d is None or d.op_type != "DequantizeLinear" for d in dq[:2]) or (
        ins[2] and (dq[2] is None or dq[2].op_type != "DequantizeLinear")
    ):
        return "an input (x, weights or bias) is not read through a DequantizeLinear"
    if not all(_plain(d) for d in [q, *dq] if d is not None):
        return "a QuantizeLinear or DequantizeLinear has an attribute that changes its rounding"
    x_q, x_scale, x_zero = _operands(dq[0])
    w_q, w_scale, w_zero = _operands(dq[1])
    _, y_scale, y_zero = _operands(q)
    consts = [x_scale, x_zero, w_q, w_scale, w_zero, y_scale, y_zero]
    if any(name and name not in known for name in consts) or not (x_scale and w_scale and y_scale):
        return "its weights, scales or zero points are not constants"
    if any(known[name].size != 1 for name in (x_scale, y_scale)) or any(
        name and known[name].size != 1 for name in (x_zero, y_zero)
    ):
        return "x or y has more than one scale or zero point"
    bias = ""
    if ins[2]:
        b_q, b_scale, b_zero = _operands(dq[2])
        if b_q not in known or b_scale not in known or known[b_q].dtype != np.int32 or known[b_q].ndim != 1:
            return "its bias is not a constant int32 vector"
        if b_zero and (b_zero not in known or np.any(known[b_zero])):
            return "its bias's zero point is not 0"
        m = known[b_q].shape
        want = known[x_scale].reshape(-1) * known[w_scale].reshape(-1)
        if (
            known[b_scale].size not in (1, *m)
            or known[w_scale].size not in (1, *m)
            or not np.array_equal(np.broadcast_to(want, m), np.broadcast_to(known[b_scale].reshape(-1), m))
        ) and np.any(known[b_q]):  # zeros are zeros whatever their scale (a bias shared by layers)
            return "its bias's scale is not x_scale * w_scale"
        bias = b_q
    inputs = [x_q, x_scale, x_zero, w_q, w_scale, w_zero, y_scale, y_zero, bias]
    return q, relu, inputs, [d for d in dq if d is not None]


def _gemm(gemm, y, inputs, w_axis, known, taken, new) -> list | None:
    """A Gemm's nodes: x (N, K) reshaped to (N, K, 1, 1), QLinearConv with the weights as (M, K,
    1, 1), the result reshaped to (N, M)."""
    a = _attrs(gemm)
    if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
        return None
    w = known[inputs[3]]
    if w.ndim != 2 or w.dtype != np.int8:
        return None
    by_row = a.get("transB", 0)  # (M, K); else (K, M), its scales along axis 1
    if w_axis not in (None, 0 if by_row else 1):  # per channel: along the output channels
        return None
    if inputs[5] and known[inputs[5]].size != 1 and known[inputs[5]].size != known[inputs[4]].size:
        return None
    names = [_fresh(f"{y}_flowc_{what}", taken) for what in ("x4", "w4", "y4", "shape4", "shape2")]
    x4, w4, y4, shape4, shape2 = names
    new[w4] = np.ascontiguousarray(w if by_row else w.T)[:, :, None, None]
    new[shape4] = np.array([0, -1, 1, 1], np.int64)
    new[shape2] = np.array([0, -1], np.int64)
    conv_inputs = [x4, *inputs[1:3], w4, *inputs[4:]]
    return [
        helper.make_node("Reshape", [inputs[0], shape4], [x4], name=f"{gemm.name}_x"),
        _qlinear_conv(gemm.name, conv_inputs, y4, {}),
        helper.make_node("Reshape", [y4, shape2], [y], name=f"{gemm.name}_y"),
    ]


def _matmul(mm, y, inputs, w_axis, known, taken, new) -> list | None:
    """A MatMul by constant int8 weights (K, N): x (..., K) as rows (-1, K, 1, 1), QLinearConv with
    the weights as (N, K, 1, 1), the result back to x's leading axes and N (their shape read
    from x: Shape, Slice, Concat, which import folds for a static x)."""
    w = known[inputs[3]]
    if w.ndim != 2 or w.dtype != np.int8 or w_axis not in (None, 1):
        return None
    if inputs[5] and known[inputs[5]].size != 1 and known[inputs[5]].size != known[inputs[4]].size:
        return None
    k, m = w.shape
    what = ("x4", "w4", "y4", "shape4", "xs", "start", "end", "n", "lead", "shape")
    x4, w4, y4, shape4, xs, start, end, n, lead, shape = (_fresh(f"{y}_flowc_{v}", taken) for v in what)
    new[w4] = np.ascontiguousarray(w.T)[:, :, None, None]
    new[shape4] = np.array([-1, k, 1, 1], np.int64)
    new[start], new[end], new[n] = np.array([0], np.int64), np.array([-1], np.int64), np.array([m], np.int64)
    conv_inputs = [x4, *inputs[1:3], w4, *inputs[4:]]
    return [
        helper.make_node("Reshape", [inputs[0], shape4], [x4], name=f"{mm.name}_x"),
        _qlinear_conv(mm.name, conv_inputs, y4, {}),
        helper.make_node("Shape", [inputs[0]], [xs], name=f"{mm.name}_shape"),
        helper.make_node("Slice", [xs, start, end], [lead], name=f"{mm.name}_lead"),
        helper.make_node("Concat", [lead, n], [shape], name=f"{mm.name}_concat", axis=0),
        helper.make_node("Reshape", [y4, shape], [y], name=f"{mm.name}_y"),
    ]


# operators that commute with a DequantizeLinear -> QuantizeLinear of one scale and zero point:
# a max, and the ones that move values without computing (their other inputs constant shapes)
_ON_INTEGERS = ("MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze")


def _max_pool_pair(node, producer, reader, readers, known, outputs):
    """(its DequantizeLinear, its QuantizeLinear) where ``node`` (a MaxPool, or an operator that
    moves values: _ON_INTEGERS; its other inputs constants) sits between the two (``_between``)
    and they have the same scale and zero point: the operator commutes with that monotonic map,
    so it applied to the integers is exactly the QuantizeLinear's output. Else None."""
    if (
        node.op_type == "MaxPool"
        and len(node.input) != 1
        or any(i and i not in known for i in node.input[1:])
    ):
        return None
    pair = _between(node, producer, reader, readers, known, outputs)
    if pair is None:
        return None
    (_, ds, dz), (_, qs, qz) = (_operands(n)[:3] for n in pair)
    if (
        known[ds].reshape(-1)[0] != known[qs].reshape(-1)[0]
        or known[dz].reshape(-1)[0] != known[qz].reshape(-1)[0]
    ):
        return None
    return pair


def _softmax_pair(node, producer, reader, readers, known, outputs):
    """(its DequantizeLinear, its QuantizeLinear) where ``node`` (a Softmax of one input) sits
    between the two (``_between``): onnxruntime runs the three as QLinearSoftmax. Else None."""
    return _between(node, producer, reader, readers, known, outputs) if len(node.input) == 1 else None


def _between(node, producer, reader, readers, known, outputs):
    """(the DequantizeLinear, the QuantizeLinear) where ``node``'s first input is one tensor's
    dequantized integers and only a QuantizeLinear reads its one output (not a graph output):
    the two plain, each with one constant scale and zero point, the zero points of one type.
    Else None."""
    y = node.output[0] if len(node.output) == 1 else None
    if y is None or y in outputs or readers[y] != 1 or not node.input:
        return None
    dq, q = _source(node.input[0], producer), reader.get(y)
    if dq is None or q is None or dq.op_type != "DequantizeLinear" or q.op_type != "QuantizeLinear":
        return None
    if not (_plain(dq) and _plain(q)) or list(q.input[:1]) != [y]:
        return None
    (_, ds, dz), (_, qs, qz) = _operands(dq)[:3], _operands(q)[:3]
    if any(name not in known for name in (ds, dz, qs, qz)):  # zero points given: x's and y's types
        return None
    if any(known[k].size != 1 for k in (ds, dz, qs, qz)) or known[dz].dtype != known[qz].dtype:
        return None
    return dq, q


# float operators onnxruntime runs as com.microsoft's integer operators between DequantizeLinear and
# QuantizeLinear nodes (ops_quant_ms.py converts them)
_QLINEAR = {
    "AveragePool": "QLinearAveragePool",
    "GlobalAveragePool": "QLinearGlobalAveragePool",
    "Add": "QLinearAdd",
    "Mul": "QLinearMul",
    "Sigmoid": "QLinearSigmoid",
    "LeakyRelu": "QLinearLeakyRelu",
    "Concat": "QLinearConcat",
}


def _qlinear(node, producer, reader, readers, known, outputs):
    """(the DequantizeLinear of each input, the QuantizeLinear) where ``node`` (one of _QLINEAR,
    its inputs: one, two for Add and Mul, any number for Concat) reads each input through a
    DequantizeLinear and only a QuantizeLinear reads its result (``_between``), every scale and
    zero point one constant, the zero points of one type. Else None."""
    count = {"Add": 2, "Mul": 2, "Concat": len(node.input)}.get(node.op_type, 1)
    if len(node.input) != count or not all(node.input) or count == 0:
        return None
    pair = _between(node, producer, reader, readers, known, outputs)
    if pair is None:
        return None
    dqs = [_source(i, producer) for i in node.input]
    kind = known[_operands(pair[1])[2]].dtype
    for d in dqs:
        if d is None or d.op_type != "DequantizeLinear" or not _plain(d):
            return None
        _, s, z = _operands(d)
        if (
            s not in known
            or z not in known
            or known[s].size != 1
            or known[z].size != 1
            or known[z].dtype != kind
        ):
            return None
    return dqs, pair[1]


def _source(name: str, producer: dict):
    """The node that computes ``name``, through Identity nodes (the TorchScript exporter reads a
    shared bias through one)."""
    node = producer.get(name)
    for _ in range(len(producer)):
        if node is None or node.op_type != "Identity" or node.domain not in ("", "ai.onnx"):
            break
        node = producer.get(node.input[0])
    return node


def _qlinear_conv(name: str, inputs: list, out: str, attrs: dict):
    return helper.make_node("QLinearConv", inputs if inputs[8] else inputs[:8], [out], name=name, **attrs)


def _label(node) -> str:
    """A node's name for a message, or its output's when it has none: untrusted text from the
    file, escaped and cut (errors.printable)."""
    return f"'{printable(node.name, 80)}'" if node.name else f"(output '{printable(node.output[0], 80)}')"


def _fresh(name: str, taken: set) -> str:
    k, out = 1, name
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _axis(node) -> int:
    return _attrs(node).get("axis", 1)


def _plain(node) -> bool:
    return all(a.name in _PLAIN_DQ for a in node.attribute)


def _operands(node) -> tuple[str, str, str]:
    """A DequantizeLinear's or QuantizeLinear's (x, scale, zero point) names ('' where absent)."""
    names = list(node.input) + [""] * (3 - len(node.input))
    return names[0], names[1], names[2]
