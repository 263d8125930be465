"""Converters for the quantized ops onnxruntime's quantizer writes in the com.microsoft domain
(QOperator format): QGemm, QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool and QLinearSoftmax.

Each is the float op between a dequantize and a quantize, computed as onnxruntime defines it:
- dequantize: ``(x - zero_point) * scale`` in float32 (the zero point subtracted in int32);
- quantize: ``x / scale`` in float32 rounded half to even, plus the zero point, saturated to the
  output type (int8 or uint8, the type of ``x``);
- QGemm: the integer product ``(A - a_zp) @ (B - b_zp)`` in int32 with the int32 bias ``C``,
  then requantized (ops_quant's ``_requantize``: ``alpha * a_scale * b_scale / y_scale``,
  per output column for a per-channel ``b_scale``) or, without ``y_scale``, scaled to float32.

onnxruntime computes some of these through 256-entry lookup tables built with the same float
arithmetic (the unary ops) or through fixed-point shortcuts (average pools, softmax): flowc's
results agree with it to at most 1 unit in the last place of the output type; the tests
(tests/onnx/test_convert_qoperator.py) check that bound on models quantized by onnxruntime.

``channels_last`` pools (NHWC) are refused: onnxruntime's quantizer writes them only for
models it transposed itself.
"""

from __future__ import annotations

import math

import numpy as np

from ..builder import Tensor, constant
from ..ops import elementwise as E
from ..ops import math as M
from ..ops import nn as N
from ..ops import quant as Q
from ..ops import reduce as R
from ..ops import shape as S
from .importer import converter
from .ops_basic import _pool_args
from .ops_quant import (
    _BYTES,
    _check_zero_point,
    _col,
    _minus_zero_point,
    _need,
    _requantize,
    _saturate,
    _scalar,
    _size,
    _zero_point,
    quantize,
)

MS = "com.microsoft"


def _per_tensor(node, i: int, what: str) -> None:
    if node.has(i) and _size(node.tensor(i)) != 1:
        raise node.unsupported(f"{what} of shape {node.shape(i)} must be one value (per tensor)")


def _dequantized(node, x: int, scale: int, zp: int, names: tuple[str, str, str]) -> Tensor:
    """Input ``x`` (int8 or uint8, per-tensor ``scale`` and ``zp``) as float32."""
    t = _need(node, x, _BYTES, names[0])
    s = _need(node, scale, ("float32",), names[1])
    _per_tensor(node, scale, names[1])
    _per_tensor(node, zp, names[2])
    _check_zero_point(node, zp, t.dtype, names[2])
    z = _zero_point(node, zp)
    v = E.cast(_minus_zero_point(t, None if z is None else _scalar(z), "int32"), "float32")
    return E.mul(v, _scalar(s))


def _quantized(node, y: Tensor, scale: int, zp: int, out: str, names: tuple[str, str]) -> Tensor:
    """float32 ``y`` quantized with per-tensor ``scale`` and ``zp`` (inputs) to ``out``."""
    s = _need(node, scale, ("float32",), names[0])
    _per_tensor(node, scale, names[0])
    _per_tensor(node, zp, names[1])
    _check_zero_point(node, zp, out, names[1])
    z = _zero_point(node, zp)
    return quantize(y, _scalar(s), None if z is None else _scalar(z), out, "float32")


_X = ("X", "X_scale", "X_zero_point")
_Y = ("Y_scale", "Y_zero_point")


def _unary(fn):
    """X, X_scale, X_zero_point, Y_scale, Y_zero_point -> quantize(fn(dequantize(X)))."""

    def convert(node):
        x = _dequantized(node, 0, 1, 2, _X)
        return _quantized(node, fn(node, x), 3, 4, node.dtype(0), _Y)

    return convert


converter("QLinearSigmoid", 1, MS)(_unary(lambda node, x: E.sigmoid(x)))
converter("QLinearLeakyRelu", 1, MS)(_unary(lambda node, x: E.leaky_relu(x, node.attr("alpha", 0.01))))


def _avg_pool(node, x: Tensor) -> Tensor:
    if node.attr("channels_last", 0):
        raise node.unsupported("channels_last=1 (NHWC) is not supported")
    kernel, strides, pads, dil = _pool_args(node, x)
    return N.avg_pool(
        x,
        kernel,
        strides,
        pads,
        dil,
        bool(node.attr("ceil_mode", 0)),
        bool(node.attr("count_include_pad", 0)),
    )


def _global_avg_pool(node, x: Tensor) -> Tensor:
    if node.attr("channels_last", 0):
        raise node.unsupported("channels_last=1 (NHWC) is not supported")
    return N.global_avg_pool(x)


def _softmax(node, x: Tensor) -> Tensor:
    axis = node.attr("axis", -1)
    if node.attr("opset", 13) >= 13:
        return N.softmax(x, axis=axis)
    axis %= max(x.rank, 1)  # before opset 13: over the 2-D view [prod(shape[:axis]), prod(shape[axis:])]
    flat = S.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
    return S.reshape(N.softmax(flat, axis=1), x.shape)


@converter("QLinearAveragePool", 1, MS)
def _qlinear_avg_pool(node):
    kernel, strides, pads, dil = _pool_args(node, node.tensor(0))
    ceil, include = bool(node.attr("ceil_mode", 0)), bool(node.attr("count_include_pad", 0))
    y = _pool_on_integers(node, kernel, strides, pads, dil, ceil, include)
    return _unary(_avg_pool)(node) if y is None else y


@converter("QLinearGlobalAveragePool", 1, MS)
def _qlinear_global_avg_pool(node):
    y = _pool_on_integers(node, node.tensor(0).shape[2:], (1, 1), (0, 0, 0, 0), (1, 1), False, False)
    return _unary(_global_avg_pool)(node) if y is None else y


def _pool_on_integers(node, kernel, strides, pads, dil, ceil: bool, include: bool) -> Tensor | None:
    """A 2-D average pool whose every window counts the same pixels (no padding, or the padding
    counted; no window cut by ceil_mode) on the integers: the int32 sum of x - x_zero_point
    times x_scale / count / y_scale in float32, rounded half to even, plus y_zero_point, what
    onnxruntime's global average pool computes (its other pools sum dequantized floats: 1 unit
    in the last place apart at near ties). A window over the whole plane is a sum into int32
    (reduce_sum's dtype), others the integer convolution of each plane, one image of one
    channel, with a kernel of ones. The int8 input is read as it is: no float or int32 copy.
    None where it does not apply (the float graph computes it)."""
    x = _need(node, 0, _BYTES, "X")
    if node.attr("channels_last", 0) or x.rank != 4 or any(d != 1 for d in dil):
        return None
    if not all(node.is_const(i) for i in (1, 3)) or not all(node.is_const(i) for i in (2, 4) if node.has(i)):
        return None
    if any(pads) and not include:
        return None
    h, w = x.shape[2] + pads[0] + pads[2], x.shape[3] + pads[1] + pads[3]
    if ceil and ((h - kernel[0]) % strides[0] or (w - kernel[1]) % strides[1]):
        return None
    for i, what in ((1, "X_scale"), (3, "Y_scale")):
        _need(node, i, ("float32",), what)
        _per_tensor(node, i, what)
    for i, what in ((2, "X_zero_point"), (4, "Y_zero_point")):
        _per_tensor(node, i, what)
        _check_zero_point(node, i, x.dtype, what)
    xs, ys = (np.float32(np.asarray(node.const(i)).reshape(-1)[0]) for i in (1, 3))
    xz, yz = (int(np.asarray(node.const(i)).reshape(-1)[0]) if node.has(i) else 0 for i in (2, 4))
    count = kernel[0] * kernel[1]
    scale = xs / np.float32(count) / ys
    if not np.isfinite(scale):
        return None
    n, c, h, w = x.shape
    if tuple(kernel) == (h, w) and not any(pads):  # one window a plane: its sum into int32
        total = R.reduce_sum(x, axes=(2, 3), keepdims=True, dtype="int32")
        v = E.mul(E.cast(E.sub(total, constant(np.int32(xz * count))), "float32"), constant(scale))
        return _saturate(M.round(v), constant(np.float32(yz)), x.dtype)
    lo, hi = (-128, 127) if x.dtype == "int8" else (0, 255)
    ones = constant(np.ones((1, 1, *kernel), np.int8))
    planes = S.reshape(x, (n * c, 1, h, w))
    y = Q.qconv(
        planes, ones, scale=[float(scale)], strides=strides, pads=pads, x_zero=xz, y_zero=yz, lo=lo, hi=hi
    )
    return S.reshape(y, (n, c, *y.shape[2:]))


@converter("QLinearSoftmax", 1, MS)
def _qlinear_softmax(node):
    """Softmax of the integers: exp(x_scale * (x - max)) for x - max in [-255, 0] is a table of
    256 float32 values (computed here, in float32), read by the integer differences; then the sum,
    the quotients and the quantization as before. No exp at run time (a microcontroller links
    no expf for it). A non-constant X_scale takes the float softmax."""
    t = _need(node, 0, _BYTES, "X")
    if not node.is_const(1):
        return _unary(_softmax)(node)
    _dequantized(node, 0, 1, 2, _X)  # (the checks on X, its scale and zero point)
    scale = np.float32(np.asarray(node.const(1)).reshape(-1)[0])
    table = np.exp(-scale * np.arange(256, dtype=np.float32)).astype(np.float32)
    axis, shape = node.attr("axis", -1), t.shape
    q = E.cast(t, "int32")
    if node.attr("opset", 13) < 13:  # over the 2-D view [prod(shape[:axis]), prod(shape[axis:])]
        axis %= max(t.rank, 1)
        q = S.reshape(q, (math.prod(shape[:axis]), math.prod(shape[axis:])))
        axis = 1
    d = E.sub(R.reduce_max(q, axes=[axis], keepdims=True), q)  # 0 to 255
    e = S.gather(constant(table), d, axis=0)
    y = E.div(e, R.reduce_sum(e, axes=[axis], keepdims=True))
    return _quantized(node, S.reshape(y, shape) if y.shape != shape else y, 3, 4, t.dtype, _Y)


def _binary(op: str):
    """A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, broadcasting,
    as onnxruntime computes them in float32 with the output zero point inside the rounding:
    Add: ``a * (a_s / c_s) + (b * (b_s / c_s) + (c_zp - (a_zp * a_s / c_s + b_zp * b_s / c_s)))``;
    Mul: ``(a - a_zp) * (b - b_zp) * (a_s * b_s / c_s) + c_zp``; rounded half to even."""

    def convert(node):
        a, b = _need(node, 0, _BYTES, "A"), _need(node, 3, _BYTES, "B")
        if a.dtype != b.dtype:
            raise node.unsupported(f"A is {a.dtype} and B is {b.dtype}: they must be one type")
        for i, what in ((1, "A_scale"), (4, "B_scale"), (6, "C_scale")):
            _need(node, i, ("float32",), what)
            _per_tensor(node, i, what)
        for i, what in ((2, "A_zero_point"), (5, "B_zero_point"), (7, "C_zero_point")):
            _per_tensor(node, i, what)
            _check_zero_point(node, i, a.dtype, what)
        a_s, b_s, c_s = (_scalar(node.tensor(i)) for i in (1, 4, 6))
        a_z, b_z, c_z = (_as_float(node, i) for i in (2, 5, 7))
        af, bf = E.cast(a, "float32"), E.cast(b, "float32")
        if op == "add":
            ra, rb = E.div(a_s, c_s), E.div(b_s, c_s)
            fixed = E.sub(c_z, E.add(E.mul(ra, a_z), E.mul(rb, b_z)))
            v = E.add(E.mul(af, ra), E.add(E.mul(bf, rb), fixed))
        else:
            v = E.add(E.mul(E.mul(E.sub(af, a_z), E.sub(bf, b_z)), E.div(E.mul(a_s, b_s), c_s)), c_z)
        return _saturate(M.round(v), None, a.dtype)

    return convert


def _as_float(node, i: int) -> Tensor:
    """Zero point ``i`` (absent: 0) as a float32 scalar."""
    z = _zero_point(node, i)
    return constant(np.float32(0)) if z is None else E.cast(_scalar(z), "float32")


converter("QLinearAdd", 1, MS)(_binary("add"))
converter("QLinearMul", 1, MS)(_binary("mul"))


@converter("QLinearConcat", 1, MS)
def _qlinear_concat(node):
    """Y_scale, Y_zero_point, then (tensor, scale, zero point) for each input."""
    n = len(node.inputs)
    if n < 5 or (n - 2) % 3:
        raise node.unsupported(
            f"has {n} inputs; it takes Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples"
        )
    out = node.dtype(2)
    if any(node.dtype(i) != out for i in range(2, n, 3)):
        raise node.unsupported("the inputs have different types: they must be all int8 or all uint8")
    parts = []  # each input requantized to y's scale (the same values: the maps commute with concat)
    for i in range(2, n, 3):
        x = _dequantized(node, i, i + 1, i + 2, (f"input {i}", f"input {i + 1}", f"input {i + 2}"))
        same = all(node.has(j) and node.is_const(j) for j in (0, 1, i + 1, i + 2)) and all(
            np.array_equal(np.asarray(node.const(j)).reshape(-1), np.asarray(node.const(k)).reshape(-1))
            for j, k in ((i + 1, 0), (i + 2, 1))
        )
        parts.append(node.tensor(i) if same else _quantized(node, x, 0, 1, out, _Y))
    return S.concat(parts, node.attr("axis"))


@converter("QGemm", 1, MS)
def _qgemm(node):
    """A, a_scale, a_zero_point, B, b_scale, b_zero_point, C (int32 bias, optional), y_scale and
    y_zero_point (optional: without them the output is float32); alpha, transA, transB."""
    a, b = _need(node, 0, _BYTES, "A"), _need(node, 3, _BYTES, "B")
    a_scale = _need(node, 1, ("float32",), "a_scale")
    b_scale = _need(node, 4, ("float32",), "b_scale")
    _per_tensor(node, 1, "a_scale")
    _per_tensor(node, 2, "a_zero_point")
    _check_zero_point(node, 2, a.dtype, "a_zero_point")
    _check_zero_point(node, 5, b.dtype, "b_zero_point")
    if a.rank != 2 or b.rank != 2:
        raise node.unsupported(f"A {a.shape} and B {b.shape} must be matrices")
    if node.attr("transA", 0):
        a = S.transpose(a, (1, 0))
    dense = _qgemm_kernel(node, a, b)
    if dense is not None:
        return dense
    b_zp = _zero_point(node, 5)
    if node.attr("transB", 0):  # the per-column parameters stay per column of the product
        b = S.transpose(b, (1, 0))
    a_zp = _zero_point(node, 2)
    acc = N.matmul(
        _minus_zero_point(a, None if a_zp is None else _scalar(a_zp), "int32"),
        _minus_zero_point(b, None if b_zp is None else _col(node, b_zp, b.shape, "b_zero_point"), "int32"),
    )
    if node.has(6):
        acc = E.add(acc, _need(node, 6, ("int32",), "C"))
    scale = E.mul(
        E.mul(_scalar(a_scale), _col(node, b_scale, b.shape, "b_scale")), float(node.attr("alpha", 1.0))
    )
    if not node.has(7):
        if node.has(8):
            raise node.unsupported("y_zero_point is given without y_scale")
        return E.mul(E.cast(acc, "float32"), scale)
    y_scale = _need(node, 7, ("float32",), "y_scale")
    _per_tensor(node, 7, "y_scale")
    _per_tensor(node, 8, "y_zero_point")
    _check_zero_point(node, 8, a.dtype, "y_zero_point")
    if not node.has(8):
        raise node.unsupported("y_scale is given without y_zero_point")
    return _requantize(node, acc, E.div(scale, _scalar(y_scale)), 8)


def _qgemm_kernel(node, a: Tensor, b: Tensor) -> Tensor | None:
    """QGemm on the integer kernel (graphdef/ops/quant.py ``qconv`` on 1x1 planes: the int8
    weights stored as they are, int32 sums), where it computes the same values: constant int8
    B with zero points 0, constant scales, zero points and int32 bias, a quantized output of
    A's type. The multiplier is alpha * a_scale * b_scale / y_scale in float32 as the float ops
    compute it, the sum times it in double rounded half to even. None elsewhere."""
    known = all(node.is_const(i) for i in (1, 2, 3, 4, 5, 6, 7, 8) if node.has(i))
    if not known or not (node.has(7) and node.has(8)) or b.dtype != "int8":
        return None
    out = node.dtype(8)
    b_zp = node.const(5) if node.has(5) else np.zeros(1, np.int8)
    w = node.const(3)
    w = w if node.attr("transB", 0) else w.T  # (M, K)
    m = w.shape[0]
    scales = [node.const(i).astype(np.float32).reshape(-1) for i in (1, 4, 7)]
    x_zp = node.const(2).reshape(-1) if node.has(2) else np.zeros(1, np.int64)
    y_zp = node.const(8).reshape(-1)
    if out != a.dtype or np.any(b_zp) or x_zp.size != 1 or y_zp.size != 1 or scales[1].size not in (1, m):
        return None
    bias = node.const(6) if node.has(6) else None
    if bias is not None and (bias.dtype != np.int32 or bias.shape != (m,)):
        return None
    with np.errstate(all="ignore"):  # as the float ops: inf or nan where they give them
        multiplier = (scales[0][0] * scales[1]) * np.float32(node.attr("alpha", 1.0)) / scales[2][0]
    lo, hi = (-128, 127) if out == "int8" else (0, 255)
    y = Q.qconv(
        S.reshape(a, (a.shape[0], a.shape[1], 1, 1)), constant(np.ascontiguousarray(w)[:, :, None, None]),
        None if bias is None else constant(bias), scale=[float(v) for v in multiplier], x_zero=int(x_zp[0]),
        y_zero=int(y_zp[0]), lo=lo, hi=hi,
    )  # fmt: skip
    return S.reshape(y, (a.shape[0], m))
