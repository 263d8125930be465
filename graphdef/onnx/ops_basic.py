"""Converters for ONNX ops that map onto flowc's core ops (elementwise, shapes, NN, reductions).

Each converter returns the node's outputs as Tensors (or numpy arrays for values known at
import time). Opset differences (attributes that became inputs, changed defaults) are handled
here, by registering one converter per opset range.
"""

from __future__ import annotations

import math

import numpy as np

from .. import builder as B
from .. import dtypes
from ..errors import ShapeError
from ..ops import elementwise as E
from ..ops import nn as N
from ..ops import reduce as R
from ..ops import resize as RS
from ..ops import shape as S
from ..ops.math import cumsum, softplus
from ..ops.windows import same_pads
from .importer import converter, onnx_dtype

MAX_PARTS = 1 << 16  # Split / SplitToSequence: more parts than this are refused


def _ints(node, i: int, what: str) -> list[int]:
    """Constant input i as a list of ints; a 0-d value (which ONNX functions write at times
    where the spec says 1-D, and onnxruntime accepts) counts as one element."""
    return [int(v) for v in node.const(i, what).reshape(-1)]


def _floats(node, i: int, what: str) -> list[float]:
    return [float(v) for v in node.const(i, what).reshape(-1)]


# ----------------------------------------------------------------------------- elementwise


def _binary(op_type, fn, since=7):
    @converter(op_type, since)
    def convert(node):
        if "axis" in node.attrs or node.attr("broadcast"):
            raise node.unsupported("legacy broadcast/axis attributes are not supported")
        return fn(node.tensor(0), node.tensor(1))


for _op, _fn in (("Add", E.add), ("Sub", E.sub), ("Mul", E.mul), ("Div", E.div), ("Equal", E.equal),
                 ("Less", E.less), ("Greater", E.greater), ("LessOrEqual", E.less_equal),
                 ("GreaterOrEqual", E.greater_equal), ("And", E.logical_and), ("Or", E.logical_or),
                 ("Xor", E.logical_xor)):
    _binary(_op, _fn)


@converter("Pow", 7)
def _pow(node):
    base, exp = node.tensor(0), node.tensor(1)
    if exp.dtype != base.dtype:
        exp = E.cast(exp, base.dtype)
    return E.pow(base, exp)


def _variadic(op_type, fn, since=8, mean=False):
    @converter(op_type, since)
    def convert(node):
        xs = [node.tensor(i) for i in range(len(node.inputs)) if node.has(i)]
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        if len(xs) == 1:
            out = S.identity(out)
        return E.div(out, float(len(xs))) if mean else out


_variadic("Sum", E.add)
_variadic("Max", E.maximum)
_variadic("Min", E.minimum)
_variadic("Mean", E.add, mean=True)


def _unary(op_type, fn, since=6):
    converter(op_type, since)(lambda node: fn(node.tensor(0)))


for _op, _fn in (("Abs", E.abs), ("Neg", E.neg), ("Exp", E.exp), ("Log", E.log), ("Sqrt", E.sqrt),
                 ("Tanh", E.tanh), ("Sigmoid", E.sigmoid), ("Relu", E.relu), ("Erf", E.erf), ("Sign", E.sign),
                 ("Not", E.logical_not)):
    _unary(_op, _fn, 1)


@converter("Reciprocal", 6)
def _reciprocal(node):
    return E.div(1.0, node.tensor(0))


@converter("LeakyRelu", 6)
def _leaky(node):
    return E.leaky_relu(node.tensor(0), node.attr("alpha", 0.01))


@converter("Elu", 6)
def _elu(node):
    return E.elu(node.tensor(0), node.attr("alpha", 1.0))


@converter("Gelu", 20)
def _gelu(node):
    return E.gelu(node.tensor(0), node.attr("approximate", "none"))


def hard_sigmoid(x, alpha, beta):
    return E.clip(E.add(E.mul(x, alpha), beta), 0.0, 1.0)


@converter("HardSigmoid", 6)
def _hard_sigmoid(node):
    return hard_sigmoid(node.tensor(0), node.attr("alpha", 0.2), node.attr("beta", 0.5))


@converter("HardSwish", 14)
def _hard_swish(node):
    x = node.tensor(0)
    return E.mul(x, hard_sigmoid(x, 1.0 / 6.0, 0.5))


@converter("Softsign", 1)
def _softsign(node):
    x = node.tensor(0)
    return E.div(x, E.add(E.abs(x), 1.0))


@converter("Softplus", 1)
def _softplus(node):
    return softplus(node.tensor(0))


@converter("Mish", 18)
def _mish(node):
    x = node.tensor(0)
    return E.mul(x, E.tanh(softplus(x)))


@converter("Selu", 6)
def _selu(node):
    x = node.tensor(0)
    alpha = node.attr("alpha", 1.67326319217681884765625)
    gamma = node.attr("gamma", 1.05070102214813232421875)
    return E.mul(E.elu(x, alpha), gamma)


@converter("Celu", 12)
def _celu(node):
    x = node.tensor(0)
    alpha = node.attr("alpha", 1.0)
    return E.mul(E.elu(E.div(x, alpha), 1.0), alpha)


@converter("ThresholdedRelu", 10)
def _thresholded(node):
    x = node.tensor(0)
    return E.where(E.greater(x, node.attr("alpha", 1.0)), x, 0.0)


@converter("PRelu", 7)
def _prelu(node):
    x, slope = node.tensor(0), node.tensor(1)
    return E.where(E.less(x, 0), E.mul(x, slope), x)


@converter("Clip", 6)
def _clip6(node):
    lo, hi = node.attr("min", -3.4028234663852886e38), node.attr("max", 3.4028234663852886e38)
    return E.clip(node.tensor(0), lo, hi)


@converter("Clip", 11)
def _clip11(node):
    x = node.tensor(0)
    if all(node.is_const(i) for i in (1, 2) if node.has(i)):
        lo = node.const(1).item() if node.has(1) else -math.inf
        hi = node.const(2).item() if node.has(2) else math.inf
        return E.clip(x, lo, hi)
    # bounds known only at run time: min(max(x, min), max), as ONNX defines Clip
    if node.has(1):
        x = E.where(E.less(x, node.tensor(1)), node.tensor(1), x)
    if node.has(2):
        x = E.where(E.greater(x, node.tensor(2)), node.tensor(2), x)
    return x


@converter("Where", 9)
def _where(node):
    return E.where(node.tensor(0), node.tensor(1), node.tensor(2))


@converter("Cast", 6)
def _cast(node):
    return E.cast(node.tensor(0), onnx_dtype(node.attr("to"), f"{node.where()} attribute 'to'"))


@converter("CastLike", 15)
def _cast_like(node):
    to = node.dtype(1)
    if node.is_const(0):  # only the second input's dtype matters: a constant stays a constant
        return node.const(0).astype(dtypes.np_dtype(to))  # (dynamo's Clip(x, CastLike(0, x), ...))
    return E.cast(node.tensor(0), to)


@converter("Identity", 1)
def _identity(node):
    return node.inputs[0]  # no node at all: consumers read the input


@converter("Dropout", 1)
def _dropout(node):
    if node.opset >= 12 and node.has(2) and bool(node.const(2, "(training_mode) ").item()):
        raise node.unsupported("training_mode=1 is not supported (inference only)")
    out = [node.inputs[0]]  # inference: the input itself
    if node.num_outputs > 1:
        out.append(node.full(node.shape(0), True, "bool"))
    return out


# ----------------------------------------------------------------------------- shapes


@converter("Constant", 1)
def _constant(node):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in node.attrs:
            v = node.attrs[key]
            if key.startswith("value_float"):
                return np.asarray(v, np.float32)
            if key.startswith("value_int"):
                return np.asarray(v, np.int64)
            return np.asarray(v)
    raise node.unsupported("only tensor, float(s) and int(s) values are supported")


@converter("Shape", 1)
def _shape(node):
    shape = np.asarray(node.shape(0), np.int64)
    start, end = node.attr("start", 0), node.attr("end", None)
    return shape[start:end] if node.opset >= 15 else shape


@converter("Size", 1)
def _size(node):
    return np.asarray(math.prod(node.shape(0)), np.int64)


@converter("ConstantOfShape", 9)
def _constant_of_shape(node):
    value = np.asarray(node.attr("value", np.zeros(1, np.float32)))
    if value.size != 1:
        raise node.unsupported(f"attribute 'value' must hold one element, got shape {list(value.shape)}")
    shape = tuple(_ints(node, 0, "(shape) "))
    if any(d < 0 for d in shape):
        raise ShapeError(f"{node.where()}: shape {list(shape)} has a negative dimension")
    # a fill node rather than a big constant array (nothing is allocated for it now)
    return node.full(shape, value.reshape(-1)[0].item(), dtypes.as_dtype(value.dtype))


@converter("Range", 11)
def _range(node):
    parts = []
    for i, what in enumerate(("start", "limit", "delta")):
        v = node.const(i, f"({what}) ")
        if v.size != 1:
            raise node.unsupported(f"{what} must be a scalar, got shape {list(v.shape)}")
        parts.append(v.reshape(()).item())
    start, limit, delta = parts
    dtype = dtypes.as_dtype(node.const(0).dtype)
    if not all(math.isfinite(v) for v in parts):
        raise node.unsupported(f"start {start}, limit {limit} and delta {delta} must be finite")
    if delta == 0:
        raise node.unsupported("delta is 0: the range has no end")
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        count = max(-((start - limit) // delta), 0)  # ceil((limit - start) / delta), exactly
    else:
        count = max(math.ceil((limit - start) / delta), 0)  # as np.arange counts
    if count * dtypes.itemsize(dtype) <= node.importer.fold_limit:
        return np.arange(start, limit, delta).astype(dtypes.np_dtype(dtype))
    # too large to build at import: start + i * delta, computed at run time
    index = cumsum(B.fill((count,), 1, "int64"), exclusive=True)
    if dtypes.is_float(dtype):
        step = (float(start) + float(delta)) - float(start)  # the step np.arange takes
        out = E.add(E.mul(E.cast(index, "float64"), step), float(start))
    else:
        out = E.add(E.mul(index, int(delta)), int(start))
    return E.cast(out, dtype) if out.dtype != dtype else out


def _reshape_target(node, x_shape, target, allowzero):
    out = []
    for i, d in enumerate(target):
        d = int(d)
        if d == 0 and not allowzero:
            if i >= len(x_shape):
                raise node.unsupported(f"shape {list(target)} copies dimension {i}, which the input lacks")
            d = x_shape[i]
        out.append(d)
    return out


@converter("Reshape", 5)
def _reshape(node):
    target = _reshape_target(node, node.shape(0), node.const(1, "(shape) "), node.attr("allowzero", 0))
    return S.reshape(node.tensor(0), target)


@converter("Flatten", 1)
def _flatten(node):
    return S.flatten(node.tensor(0), node.attr("axis", 1))


@converter("Squeeze", 1)
def _squeeze1(node):
    axes = node.attr("axes")
    return S.squeeze(node.tensor(0), tuple(axes) if axes is not None else None)


@converter("Squeeze", 13)
def _squeeze13(node):
    axes = tuple(_ints(node, 1, "(axes) ")) if node.has(1) else None
    return S.squeeze(node.tensor(0), axes)


@converter("Unsqueeze", 1)
def _unsqueeze1(node):
    return S.unsqueeze(node.tensor(0), tuple(node.attr("axes")))


@converter("Unsqueeze", 13)
def _unsqueeze13(node):
    return S.unsqueeze(node.tensor(0), tuple(_ints(node, 1, "(axes) ")))


@converter("Transpose", 1)
def _transpose(node):
    perm = node.attr("perm")
    return S.transpose(node.tensor(0), tuple(perm) if perm is not None else None)


@converter("Concat", 4)
def _concat(node):
    xs = [node.tensor(i) for i in range(len(node.inputs)) if node.has(i)]
    return S.concat(xs, node.attr("axis"))


@converter("Split", 2)
def _split(node):
    x = node.tensor(0)
    axis = node.attr("axis", 0)
    if node.opset >= 13 and node.has(1):
        sizes = _ints(node, 1, "(split) ")
    elif node.opset < 13 and node.attr("split") is not None:
        sizes = list(node.attr("split"))
    else:
        dim = x.shape[axis % x.rank]
        n = node.attr("num_outputs", node.num_outputs) if node.opset >= 18 else node.num_outputs
        if not 0 < n <= MAX_PARTS:
            raise node.unsupported(f"cannot split into {n} outputs (1 to {MAX_PARTS})")
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    return list(S.split(x, sizes, axis))


@converter("Slice", 1)
def _slice1(node):
    starts, ends = node.attr("starts"), node.attr("ends")
    return S.slice_(node.tensor(0), starts, ends, node.attr("axes"))


@converter("Slice", 10)
def _slice10(node):
    starts = _ints(node, 1, "(starts) ")
    ends = _ints(node, 2, "(ends) ")
    axes = _ints(node, 3, "(axes) ") if node.has(3) else None
    steps = _ints(node, 4, "(steps) ") if node.has(4) else None
    return S.slice_(node.tensor(0), starts, ends, axes, steps)


@converter("Gather", 1)
def _gather(node):
    return S.gather(node.tensor(0), node.tensor(1), node.attr("axis", 0))


@converter("Expand", 8)
def _expand(node):
    return S.expand(node.tensor(0), _ints(node, 1, "(shape) "))


@converter("Tile", 6)
def _tile(node):
    return S.tile(node.tensor(0), _ints(node, 1, "(repeats) "))


def _pad(node, pads, value, mode):
    if mode not in ("constant", "reflect", "edge"):
        raise node.unsupported(f"pad mode '{mode}' is not supported")
    return S.pad(node.tensor(0), pads, mode, value)


@converter("Pad", 2)
def _pad2(node):
    return _pad(node, node.attr("pads"), node.attr("value", 0.0), node.attr("mode", "constant"))


@converter("Pad", 11)
def _pad11(node):
    pads = _ints(node, 1, "(pads) ")
    value = node.const(2).item() if node.is_const(2) else 0.0
    rank = len(node.shape(0))
    if node.opset >= 18 and node.has(3):
        axes = [a % rank for a in _ints(node, 3, "(axes) ")]
        full = [0] * (2 * rank)
        for k, a in enumerate(axes):
            full[a], full[rank + a] = pads[k], pads[len(axes) + k]
        pads = full
    mode = node.attr("mode", "constant")
    if node.has(2) and not node.is_const(2) and mode == "constant":
        # a fill value known only at run time: pad with 0, then put the value where padding is
        node.check_size(node.shape(0), "bool", "the padding mask")
        node.check_size(
            [d + pads[i] + pads[rank + i] for i, d in enumerate(node.shape(0))], "bool", "the padding mask"
        )
        inside = np.ones(node.shape(0), bool)
        mask = np.pad(inside[tuple(slice(max(-pads[i], 0), node.shape(0)[i] - max(-pads[rank + i], 0))
                                   for i in range(rank))],
                      [(max(pads[i], 0), max(pads[rank + i], 0)) for i in range(rank)])
        padded = _pad(node, pads, 0.0, mode)
        return E.where(B.constant(mask), padded, node.tensor(2))
    return _pad(node, pads, value, mode)


# ----------------------------------------------------------------------------- sequences
# Static shapes make every sequence known at import: its length and each element's shape. A
# sequence is held as a Python list of values (arrays or Tensors); these ops only build, pick
# and split lists, so no sequence reaches the graph. A converter returns ``[list]``: one output.


def _sequence(node, i: int) -> list:
    v = node.inputs[i] if node.has(i) else None
    if not isinstance(v, list):
        raise node.unsupported(f"input {i} must be a sequence")
    return v


def _position(node, i: int, length: int, insert: bool = False) -> int:
    """Input i as an index into a sequence of ``length`` (negative counts from the end)."""
    top = length + 1 if insert else length
    pos = int(node.const(i, "(position) ").reshape(-1)[0]) if node.has(i) else top - 1
    if not -top <= pos < top:
        raise node.unsupported(f"position {pos} is outside a sequence of {length}")
    return pos % top


def _split_values(x, sizes: list[int], axis: int) -> list:
    if len(sizes) == 1:
        return [x]
    if isinstance(x, np.ndarray):
        return np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis)
    return list(S.split(x, sizes, axis))


@converter("SplitToSequence", 11)
def _split_to_sequence(node):
    x, shape = node.inputs[0], node.shape(0)
    axis = node.attr("axis", 0) % len(shape)
    dim = shape[axis]
    if node.has(1):
        split = node.const(1, "(split) ")
        if split.ndim == 0:  # one size: equal chunks, the last one shorter
            chunk = int(split)
            if chunk <= 0 or -(-dim // chunk) > MAX_PARTS:
                raise node.unsupported(f"split {chunk} of a dimension of {dim}: not 1 to {MAX_PARTS} parts")
            sizes = [min(chunk, dim - k) for k in range(0, dim, chunk)]
        else:
            sizes = [int(v) for v in split]
        squeeze = False
    else:
        if dim > MAX_PARTS:
            raise node.unsupported(f"splitting a dimension of {dim} gives more than {MAX_PARTS} parts")
        sizes, squeeze = [1] * dim, not node.attr("keepdims", 1)
    parts = _split_values(x, sizes, axis)
    if squeeze:
        parts = [np.squeeze(p, axis) if isinstance(p, np.ndarray) else S.squeeze(p, (axis,)) for p in parts]
    return [parts]


@converter("SequenceConstruct", 11)
def _sequence_construct(node):
    return [[node.inputs[i] for i in range(len(node.inputs))]]


@converter("SequenceEmpty", 11)
def _sequence_empty(node):
    return [[]]


@converter("SequenceAt", 11)
def _sequence_at(node):
    seq = _sequence(node, 0)
    return seq[_position(node, 1, len(seq))]


@converter("SequenceLength", 11)
def _sequence_length(node):
    return np.asarray(len(_sequence(node, 0)), np.int64)


@converter("SequenceInsert", 11)
def _sequence_insert(node):
    seq = list(_sequence(node, 0))
    seq.insert(_position(node, 2, len(seq), insert=True), node.inputs[1])
    return [seq]


@converter("SequenceErase", 11)
def _sequence_erase(node):
    seq = list(_sequence(node, 0))
    del seq[_position(node, 1, len(seq))]
    return [seq]


@converter("ConcatFromSequence", 11)
def _concat_from_sequence(node):
    seq = _sequence(node, 0)
    if not seq:
        raise node.unsupported("the sequence is empty")
    axis, new_axis = node.attr("axis"), bool(node.attr("new_axis", 0))
    if all(isinstance(v, np.ndarray) for v in seq):
        return np.stack(seq, axis) if new_axis else np.concatenate(seq, axis)
    xs = [v if not isinstance(v, np.ndarray) else B.constant(v) for v in seq]
    if new_axis:
        axis = axis % (xs[0].rank + 1)
        xs = [S.unsqueeze(v, (axis,)) for v in xs]
    return S.concat(xs, axis)


# ----------------------------------------------------------------------------- linear algebra and NN


@converter("MatMul", 1)
def _matmul(node):
    return N.matmul(node.tensor(0), node.tensor(1))


@converter("Gemm", 7)
def _gemm(node):
    c = node.tensor(2) if node.has(2) else None
    return N.gemm(node.tensor(0), node.tensor(1), c, node.attr("alpha", 1.0), node.attr("beta", 1.0),
                  bool(node.attr("transA", 0)), bool(node.attr("transB", 0)))


def window_pads(node, in_spatial, kernel, strides, dilations):
    """Explicit pads from ``pads`` or ``auto_pad``."""
    auto = node.attr("auto_pad", "NOTSET")
    n = len(kernel)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return same_pads(in_spatial, kernel, strides, dilations, upper=auto == "SAME_UPPER")
    if auto == "VALID":
        return (0,) * (2 * n)
    return tuple(node.attr("pads", [0] * (2 * n)))


@converter("Conv", 1)
def _conv(node):
    x, w = node.tensor(0), node.tensor(1)
    kernel = tuple(node.attr("kernel_shape", w.shape[2:]))
    n = len(kernel)
    strides = tuple(node.attr("strides", [1] * n))
    dilations = tuple(node.attr("dilations", [1] * n))
    pads = window_pads(node, x.shape[2:], kernel, strides, dilations)
    b = node.tensor(2) if node.has(2) else None
    return N.conv(x, w, b, strides, pads, dilations, node.attr("group", 1))


@converter("ConvTranspose", 1)
def _conv_transpose(node):
    x, w = node.tensor(0), node.tensor(1)
    kernel = tuple(node.attr("kernel_shape", w.shape[2:]))
    n = len(kernel)
    strides = tuple(node.attr("strides", [1] * n))
    dilations = tuple(node.attr("dilations", [1] * n))
    out_pad = list(node.attr("output_padding", [0] * n))
    b = node.tensor(2) if node.has(2) else None
    in_sp = x.shape[2:]
    full = [(in_sp[i] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 for i in range(n)]
    output_shape = node.attr("output_shape")
    auto = node.attr("auto_pad", "NOTSET")
    if output_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            target = list(output_shape)[-n:]
        else:
            target = [in_sp[i] * strides[i] for i in range(n)]
        total = [full[i] + out_pad[i] - target[i] for i in range(n)]
        if any(t < 0 for t in total):
            out_pad = [out_pad[i] - min(total[i], 0) for i in range(n)]
            total = [max(t, 0) for t in total]
        # an odd total puts the extra pixel at the end only for SAME_UPPER; with SAME_LOWER and
        # with output_shape under NOTSET it goes at the start (the spec, and onnxruntime)
        head = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        pads = head + [t - h for t, h in zip(total, head)]
    elif auto == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = list(node.attr("pads", [0] * (2 * n)))
    return N.conv_transpose(x, w, b, strides, pads, dilations, node.attr("group", 1), out_pad)


def _pool_args(node, x):
    kernel = tuple(node.attr("kernel_shape"))
    n = len(kernel)
    strides = tuple(node.attr("strides", [1] * n))
    dilations = tuple(node.attr("dilations", [1] * n))
    pads = window_pads(node, x.shape[2:], kernel, strides, dilations)
    return kernel, strides, pads, dilations


@converter("MaxPool", 1)
def _max_pool(node):
    x = node.tensor(0)
    if node.num_outputs > 1:
        raise node.unsupported("the Indices output is not supported")
    if node.attr("storage_order", 0):
        raise node.unsupported("storage_order=1 is not supported")
    kernel, strides, pads, dil = _pool_args(node, x)
    return N.max_pool(x, kernel, strides, pads, dil, bool(node.attr("ceil_mode", 0)))


@converter("AveragePool", 1)
def _avg_pool(node):
    x = node.tensor(0)
    kernel, strides, pads, dil = _pool_args(node, x)
    if tuple(kernel) == tuple(x.shape[2:]) and not any(pads) and all(d == 1 for d in dil):
        return N.global_avg_pool(x)  # one window over the whole plane: its mean (a reduction)
    return N.avg_pool(x, kernel, strides, pads, dil, bool(node.attr("ceil_mode", 0)),
                      bool(node.attr("count_include_pad", 0)))


@converter("GlobalAveragePool", 1)
def _gap(node):
    return N.global_avg_pool(node.tensor(0))


@converter("GlobalMaxPool", 1)
def _gmp(node):
    return N.global_max_pool(node.tensor(0))


@converter("BatchNormalization", 6)
def _batch_norm(node):
    if node.attr("training_mode", 0) or node.num_outputs > 1:
        raise node.unsupported("training mode (running statistics outputs) is not supported")
    return N.batch_norm(*(node.tensor(i) for i in range(5)), epsilon=node.attr("epsilon", 1e-5))


def _softmax_like(fn):
    def legacy(node):
        # before opset 13 the input is seen as 2-D: [prod(shape[:axis]), prod(shape[axis:])]
        x = node.tensor(0)
        axis = node.attr("axis", 1) % max(x.rank, 1)
        flat = S.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
        return S.reshape(fn(flat, axis=1), x.shape)

    def current(node):
        return fn(node.tensor(0), axis=node.attr("axis", -1))

    return legacy, current


for _op, _fn in (("Softmax", N.softmax), ("LogSoftmax", N.log_softmax)):
    _legacy, _current = _softmax_like(_fn)
    converter(_op, 1)(_legacy)
    converter(_op, 13)(_current)


# ----------------------------------------------------------------------------- reductions


def _reduce(op_type, fn, axes_input_since):
    @converter(op_type, 1)
    def convert(node):
        x = node.tensor(0)
        keep = bool(node.attr("keepdims", 1))
        if node.opset >= axes_input_since:
            axes = _ints(node, 1, "(axes) ") if node.has(1) else []
            if not axes and node.attr("noop_with_empty_axes", 0):
                return S.identity(x)
        else:
            axes = node.attr("axes") or []
        return fn(x, axes=tuple(axes) if axes else None, keepdims=keep)


for _op, _fn, _since in (("ReduceSum", R.reduce_sum, 13), ("ReduceMean", R.reduce_mean, 18),
                         ("ReduceMax", R.reduce_max, 18), ("ReduceMin", R.reduce_min, 18),
                         ("ReduceProd", R.reduce_prod, 18)):
    _reduce(_op, _fn, _since)


def _arg(op_type, fn):
    @converter(op_type, 1)
    def convert(node):
        return fn(node.tensor(0), node.attr("axis", 0), bool(node.attr("keepdims", 1)),
                  bool(node.attr("select_last_index", 0)))


_arg("ArgMax", R.argmax)
_arg("ArgMin", R.argmin)


# ----------------------------------------------------------------------------- resize


def _resize(node, scales, sizes, mode, ctm, nearest_mode, roi=()):
    if mode not in ("nearest", "linear", "cubic"):
        raise node.unsupported(f"mode '{mode}' is not supported (nearest, linear and cubic are)")
    return RS.resize(node.tensor(0), sizes=sizes, scales=scales, mode=mode,
                     coordinate_transformation_mode=ctm, nearest_mode=nearest_mode,
                     cubic_coeff_a=node.attr("cubic_coeff_a", -0.75),
                     exclude_outside=bool(node.attr("exclude_outside", 0)),
                     antialias=bool(node.attr("antialias", 0)) and mode != "nearest",  # nearest ignores it
                     roi=tuple(roi), extrapolation_value=node.attr("extrapolation_value", 0.0))


@converter("Resize", 10)
def _resize10(node):
    scales = _floats(node, 1, "(scales) ")
    mode = node.attr("mode", "nearest")
    if mode != "nearest" or all(s >= 1 for s in scales) or all(s <= 1 for s in scales):
        return _resize(node, scales, None, mode, "asymmetric", "ceil" if min(scales) < 1 else "floor")
    # Resize-10 "nearest" (as onnxruntime runs it) rounds the source index down on enlarged axes
    # and up on shrunk ones; nearest resizing is separable, so shrink first, then enlarge
    shrink = [min(s, 1.0) for s in scales]
    x = _resize(node, shrink, None, mode, "asymmetric", "ceil")
    return RS.resize(x, scales=[max(s, 1.0) for s in scales], mode=mode,
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@converter("Upsample", 7)
def _upsample(node):
    scales = node.attr("scales") if node.opset < 9 else _floats(node, 1, "(scales) ")
    mode = node.attr("mode", "nearest")
    mode = "linear" if mode in ("linear", "bilinear") else mode
    return _resize(node, list(scales), None, mode, "asymmetric", "floor")
