"""Converters for ONNX quantization ops and BitCast.

QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul and QLinearConv are compositions of flowc's core ops (cast, div, round, clip,
matmul, conv); BitCast maps to the ``bitcast`` op (graphdef/ops/bits.py).

Arithmetic, chosen so that every result is exact or rounded once, as the spec says:
- quantize: ``x / scale`` in the scale's precision (or the ``precision`` attribute), rounded
  half to even, then the zero point is added and the value saturated to the output type in
  float32 (float64 when dividing in float64), where every integer of a 16-bit type is exact;
- dequantize: ``x - zero_point`` in integers (int64 for int32 x), then one float multiply by
  the scale in float32 (float64 if the scale or output is float64), cast to the output type.
  float16 results come out of float32 rounded once, which equals a float16 multiply;
- integer matrix products: int32 operands, int32 matmul (the C kernel accumulates in
  uint64_t, so overflow wraps as the spec allows: "only in 32 bits");
- integer convolutions: flowc's conv is float-only, so operands ``x - zp`` and ``w - zp``
  (|v| <= 255) are convolved in float32 when every partial sum stays below 2**24
  (``C/group * kernel size * 255**2 <= 2**24``, i.e. up to 258 terms) and in float64
  otherwise: both exact. ConvInteger casts through int64 to int32 (wrapping like int32
  accumulation); QLinearConv requantizes in float64 directly. A 2-D QLinearConv whose weights,
  scales and zero points are constants (int8 weights with zero points 0, float32 scales, x
  and y of one type: what onnxruntime's quantizer writes) runs on the integer kernel instead
  (graphdef/ops/quant.py ``qconv``: the weights stay int8, the same arithmetic in int32);
- requantization (QLinear*): the multiplier ``a_scale * b_scale / y_scale`` in the scales'
  type, the product with the int32 accumulator in float64, rounded half to even, plus the
  output zero point, saturated — as onnx's reference computes it.

Scales and zero points may be graph inputs (runtime values): per-tensor (one element),
per-axis (1-D, along ``axis``) and blocked (``block_size``: the scale repeated along
``axis`` with a gather) all become tensors that broadcast against x. Zero points default
to 0, the quantized type to uint8.

Types without a flowc dtype (float8, float4, float6, int4/uint4, int2/uint2, bfloat16) are
refused with their ONNX name: x and zero points of those types already fail when the
importer reads the model's inputs and initializers; ``output_dtype`` and ``precision``
attributes naming them fail here.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import Tensor, constant
from ..ops import bits as BITS
from ..ops import elementwise as E
from ..ops import math as M
from ..ops import nn as N
from ..ops import quant as Q
from ..ops import reduce as R
from ..ops import shape as S
from .importer import _DTYPES, converter, onnx_dtype
from .ops_basic import window_pads

# saturation bounds of the quantized types flowc has
_RANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}
_EXACT_F32 = 1 << 24  # integers up to this magnitude are exact in float32


# ----------------------------------------------------------------------------- helpers


def _type_name(code: int) -> str:
    try:
        from onnx import TensorProto

        return TensorProto.DataType.Name(int(code))
    except (ImportError, ValueError):
        return f"type {code}"


def _dtype_attr(node, name: str, allowed) -> str | None:
    """A dtype attribute (a TensorProto enum) as a flowc dtype from ``allowed``, or None if absent."""
    code = node.attr(name)
    if code is None or code == 0:
        return None
    dt = _DTYPES.get(int(code))
    if dt not in allowed:
        raise node.unsupported(
            f"{name}={_type_name(code)} is not supported; flowc handles {', '.join(allowed)} here"
        )
    return dt


def _need(node, i: int, allowed, what: str) -> Tensor:
    """Required input i as a Tensor of one of the ``allowed`` dtypes."""
    if not node.has(i):
        raise node.unsupported(f"input {i} ({what}) is missing")
    t = node.tensor(i)
    if t.dtype not in allowed:
        raise node.unsupported(f"{what} has dtype {t.dtype}; expected one of {', '.join(allowed)}")
    return t


def _cast(x: Tensor, dtype: str) -> Tensor:
    return x if x.dtype == dtype else E.cast(x, dtype)


def _zero_point(node, i: int) -> Tensor | None:
    """Input i as a Tensor, or None when absent or a constant of zeros (nothing to subtract)."""
    if not node.has(i):
        return None
    if node.is_const(i) and not np.any(node.const(i)):
        return None
    return node.tensor(i)


def _size(p: Tensor) -> int:
    return math.prod(p.shape)


def _scalar(p: Tensor) -> Tensor:
    return p if p.shape == () else S.reshape(p, ())


def _along(node, p: Tensor, shape, axis: int, block: int, what: str) -> Tensor:
    """Scale or zero point p of x's quantization as a tensor that broadcasts against ``shape``.

    One element: per tensor. Otherwise per axis (1-D of length shape[axis]) or, with
    ``block`` > 0, blocked (p has x's shape with ceil(D/block) along axis: each element
    repeated block times along axis, the last block cut to D).
    """
    if _size(p) == 1:
        return _scalar(p)
    rank = len(shape)
    if not -rank <= axis < rank:
        raise node.unsupported(f"axis {axis} is out of range for input of rank {rank}")
    axis %= rank
    d = shape[axis]
    if block <= 0:
        if p.rank != 1 or p.shape[0] != d:
            raise node.unsupported(
                f"{what} of shape {p.shape} is neither one value nor a 1-D tensor of length {d} "
                f"(axis {axis} of input shape {tuple(shape)})"
            )
        return S.reshape(p, tuple(d if k == axis else 1 for k in range(rank)))
    want = tuple(-(-d // block) if k == axis else s for k, s in enumerate(shape))
    if p.shape != want:
        raise node.unsupported(
            f"blocked {what} has shape {p.shape}; block_size {block} along axis {axis} of input "
            f"shape {tuple(shape)} needs {want}"
        )
    node.check_size((d,), "int64", f"the block indices of {what}")
    return S.gather(p, constant(np.arange(d, dtype=np.int64) // block), axis)


def _row(node, p: Tensor, a_shape, what: str) -> Tensor:
    """Per-row parameter of matrix a (..., M, K): one value, M values, or (..., M, 1)."""
    if _size(p) == 1:
        return _scalar(p)
    if p.rank == 1:
        if len(a_shape) < 2 or p.shape[0] != a_shape[-2]:
            raise node.unsupported(f"{what} of shape {p.shape} does not match the rows of {tuple(a_shape)}")
        return S.reshape(p, (p.shape[0], 1))
    return p


def _col(node, p: Tensor, b_shape, what: str) -> Tensor:
    """Per-column parameter of matrix b (..., K, N): one value, N values, or (..., 1, N)."""
    if _size(p) == 1:
        return _scalar(p)
    if p.rank == 1 and (len(b_shape) < 2 or p.shape[0] != b_shape[-1]):
        raise node.unsupported(f"{what} of shape {p.shape} does not match the columns of {tuple(b_shape)}")
    return p


def _channel(node, p: Tensor, m: int, rank: int, lead: int, what: str) -> Tensor:
    """Per-output-channel parameter (one value or M values) shaped to broadcast with M at
    axis ``lead`` of a tensor of ``rank`` (0 for weights (M, C, *k), 1 for outputs (N, M, *sp))."""
    if _size(p) == 1:
        return _scalar(p)
    if p.rank != 1 or p.shape[0] != m:
        raise node.unsupported(f"{what} of shape {p.shape} is neither one value nor {m} per output channel")
    return S.reshape(p, (1,) * lead + (m,) + (1,) * (rank - lead - 1))


def _minus_zero_point(x: Tensor, zp: Tensor | None, wide: str) -> Tensor:
    """x - zp in the integer type ``wide`` (exact: both are narrower)."""
    x = _cast(x, wide)
    return x if zp is None else E.sub(x, _cast(zp, wide))


def _saturate(v: Tensor, zp: Tensor | None, out: str) -> Tensor:
    """round(v) (already rounded by the caller) + zp, clipped to out's range, as out."""
    if zp is not None:
        v = E.add(v, _cast(zp, v.dtype))
    lo, hi = _RANGE[out]
    return E.cast(E.clip(v, float(lo), float(hi)), out)


def _check_zero_point(node, i: int, dtype: str, what: str) -> None:
    """A zero point (input i, optional) has the dtype of the values it belongs to."""
    if node.has(i) and node.dtype(i) != dtype:
        raise node.unsupported(f"{what} has dtype {node.dtype(i)}, but the quantized values are {dtype}")


# ----------------------------------------------------------------------------- QuantizeLinear

_PRECISIONS = ("float16", "float32", "float64")


def quantize(x: Tensor, scale: Tensor, zp: Tensor | None, out: str, precision: str) -> Tensor:
    """saturate(round(x / scale) + zp) with the division in ``precision`` (halves to even)."""
    q = M.round(E.div(_cast(x, precision), _cast(scale, precision)))
    wide = "float64" if precision == "float64" else "float32"
    if zp is not None:
        q = E.add(_cast(q, wide), _cast(zp, wide))
    lo, hi = _RANGE[out]
    return E.cast(E.clip(_cast(q, wide), float(lo), float(hi)), out)


@converter("QuantizeLinear", 10)
def _quantize_linear(node):
    x = _need(node, 0, dtypes.FLOATS + ("int32",), "x")
    scale = _need(node, 1, dtypes.FLOATS + ("int32",), "y_scale")
    zp = _zero_point(node, 2)
    out = _dtype_attr(node, "output_dtype", tuple(_RANGE))
    if node.has(2):
        zdt = node.dtype(2)
        if zdt not in _RANGE:
            raise node.unsupported(f"y_zero_point has dtype {zdt}; flowc quantizes to {', '.join(_RANGE)}")
        if out is not None and out != zdt:
            raise node.unsupported(f"output_dtype {out} differs from y_zero_point's dtype {zdt}")
        out = zdt
    out = out or "uint8"
    precision = _dtype_attr(node, "precision", _PRECISIONS)
    if precision is None:  # the scale's type; an int32 scale divides exactly in float64
        precision = scale.dtype if scale.dtype in _PRECISIONS else "float64"
    axis, block = node.attr("axis", 1), node.attr("block_size", 0)
    scale = _along(node, scale, x.shape, axis, block, "y_scale")
    if zp is not None:
        zp = _along(node, zp, x.shape, axis, block, "y_zero_point")
    return quantize(x, scale, zp, out, precision)


# ----------------------------------------------------------------------------- DequantizeLinear

_QUANTIZED = ("int8", "uint8", "int16", "uint16", "int32")


@converter("DequantizeLinear", 10)
def _dequantize_linear(node):
    x = _need(node, 0, _QUANTIZED, "x")
    scale = _need(node, 1, dtypes.FLOATS, "x_scale")
    _check_zero_point(node, 2, x.dtype, "x_zero_point")
    zp = _zero_point(node, 2)
    out = _dtype_attr(node, "output_dtype", dtypes.FLOATS) or scale.dtype
    axis, block = node.attr("axis", 1), node.attr("block_size", 0)
    scale = _along(node, scale, x.shape, axis, block, "x_scale")
    acc = "float64" if "float64" in (out, scale.dtype) else "float32"
    if zp is not None:
        zp = _along(node, zp, x.shape, axis, block, "x_zero_point")
    # (x = QuantizeLinear(...) is read as the integers it is, not as the float before its cast:
    # the pair still fuses into one loop where nothing else reads x, and where an integer
    # layer does, the float is not kept in memory beside it)
    if zp is not None:
        x = _minus_zero_point(x, zp, "int64" if x.dtype == "int32" else "int32")
    return _cast(E.mul(_cast(x, acc), _cast(scale, acc)), out)


# ----------------------------------------------------------------------------- DynamicQuantizeLinear


@converter("DynamicQuantizeLinear", 11)
def _dynamic_quantize_linear(node):
    """uint8 quantization over the range of x widened to include 0 (as onnxruntime: a scale
    of 1 when x is all zeros)."""
    x = _need(node, 0, ("float32",), "x")
    if _size(x) == 0:
        raise node.unsupported("x is empty: its range, and so the scale, is undefined")
    hi = E.maximum(R.reduce_max(x), 0.0)
    lo = E.minimum(R.reduce_min(x), 0.0)
    span = E.sub(hi, lo)
    scale = E.where(E.equal(span, 0.0), 1.0, E.div(span, 255.0))
    zp = M.round(E.clip(E.neg(E.div(lo, scale)), 0.0, 255.0))
    y = _saturate(M.round(E.div(x, scale)), zp, "uint8")
    return [y, scale, E.cast(zp, "uint8")]


# ----------------------------------------------------------------------------- integer matmul


def _int_matmul(node, a: Tensor, a_zp: Tensor | None, b: Tensor, b_zp: Tensor | None) -> Tensor:
    """(a - a_zp) @ (b - b_zp) in int32; per-row a_zp, per-column b_zp."""
    if a_zp is not None:
        a_zp = _row(node, a_zp, a.shape, "a_zero_point")
    if b_zp is not None:
        b_zp = _col(node, b_zp, b.shape, "b_zero_point")
    return N.matmul(_minus_zero_point(a, a_zp, "int32"), _minus_zero_point(b, b_zp, "int32"))


_BYTES = ("int8", "uint8")


@converter("MatMulInteger", 10)
def _matmul_integer(node):
    a, b = _need(node, 0, _BYTES, "A"), _need(node, 1, _BYTES, "B")
    for i, t, what in ((2, a, "a_zero_point"), (3, b, "b_zero_point")):
        _check_zero_point(node, i, t.dtype, what)
    return _int_matmul(node, a, _zero_point(node, 2), b, _zero_point(node, 3))


def _scales(node, indices) -> list[Tensor]:
    ts = [_need(node, i, dtypes.FLOATS, name) for i, name in indices]
    kinds = {t.dtype for t in ts}
    if len(kinds) > 1:
        raise node.unsupported(f"scales have different dtypes ({', '.join(t.dtype for t in ts)})")
    return ts


def _requantize(node, acc: Tensor, multiplier: Tensor, y_zp_index: int) -> Tensor:
    """round(acc * multiplier) + y_zp saturated to y_zp's dtype, in float64."""
    out = node.dtype(y_zp_index) if node.has(y_zp_index) else "uint8"
    if out not in _BYTES:
        raise node.unsupported(f"y_zero_point has dtype {out}; expected int8 or uint8")
    v = M.round(E.mul(_cast(acc, "float64"), _cast(multiplier, "float64")))
    zp = _zero_point(node, y_zp_index)
    return _saturate(v, None if zp is None else _scalar_or_same(zp), out)


def _scalar_or_same(p: Tensor) -> Tensor:
    return _scalar(p) if _size(p) == 1 else p


@converter("QLinearMatMul", 10)
def _qlinear_matmul(node):
    a, b = _need(node, 0, _BYTES, "a"), _need(node, 3, _BYTES, "b")
    a_scale, b_scale, y_scale = _scales(node, ((1, "a_scale"), (4, "b_scale"), (6, "y_scale")))
    _check_zero_point(node, 2, a.dtype, "a_zero_point")
    _check_zero_point(node, 5, b.dtype, "b_zero_point")
    acc = _int_matmul(node, a, _zero_point(node, 2), b, _zero_point(node, 5))
    multiplier = E.div(
        E.mul(_row(node, a_scale, a.shape, "a_scale"), _col(node, b_scale, b.shape, "b_scale")),
        _col(node, y_scale, b.shape, "y_scale"),
    )
    return _requantize(node, acc, multiplier, 7)


# ----------------------------------------------------------------------------- integer conv


def _int_conv(node, x: Tensor, x_zp: Tensor | None, w: Tensor, w_zp: Tensor | None) -> Tensor:
    """conv(x - x_zp, w - w_zp) exactly, in float32 or float64 (see the module docstring)."""
    if x.rank < 3 or w.rank != x.rank:
        raise node.unsupported(
            f"x {x.shape} and w {w.shape} must be (N, C, *spatial) and (M, C/group, *kernel)"
        )
    kernel = tuple(node.attr("kernel_shape", w.shape[2:]))
    if kernel != w.shape[2:]:
        raise node.unsupported(f"kernel_shape {list(kernel)} differs from the weight's {list(w.shape[2:])}")
    n = len(kernel)
    strides = tuple(node.attr("strides", [1] * n))
    dilations = tuple(node.attr("dilations", [1] * n))
    pads = window_pads(node, x.shape[2:], kernel, strides, dilations)
    if x_zp is not None:
        if _size(x_zp) != 1:
            raise node.unsupported(f"x_zero_point of shape {x_zp.shape} must be one value (per tensor)")
        x_zp = _scalar(x_zp)
    if w_zp is not None:
        w_zp = _channel(node, w_zp, w.shape[0], w.rank, 0, "w_zero_point")
    terms = w.shape[1] * math.prod(kernel)
    acc = "float32" if terms * 255 * 255 <= _EXACT_F32 else "float64"
    xs = _cast(_minus_zero_point(x, x_zp, "int32"), acc)
    ws = _cast(_minus_zero_point(w, w_zp, "int32"), acc)
    return N.conv(xs, ws, None, strides, pads, dilations, node.attr("group", 1))


@converter("ConvInteger", 10)
def _conv_integer(node):
    x, w = _need(node, 0, _BYTES, "x"), _need(node, 1, _BYTES, "w")
    for i, t, what in ((2, x, "x_zero_point"), (3, w, "w_zero_point")):
        _check_zero_point(node, i, t.dtype, what)
    y = _int_conv(node, x, _zero_point(node, 2), w, _zero_point(node, 3))
    # float64 sums may pass int32: through int64, the cast wraps like int32 accumulation
    return E.cast(y if y.dtype == "float32" else E.cast(y, "int64"), "int32")


@converter("QLinearConv", 10)
def _qlinear_conv(node):
    x, w = _need(node, 0, _BYTES, "x"), _need(node, 3, _BYTES, "w")
    x_scale, w_scale, y_scale = _scales(node, ((1, "x_scale"), (4, "w_scale"), (6, "y_scale")))
    _check_zero_point(node, 2, x.dtype, "x_zero_point")
    _check_zero_point(node, 5, w.dtype, "w_zero_point")
    for p, what in ((x_scale, "x_scale"), (y_scale, "y_scale")):
        if _size(p) != 1:
            raise node.unsupported(f"{what} of shape {p.shape} must be one value (per tensor)")
    m = w.shape[0] if w.rank else 0
    fused = _qlinear_conv_kernel(node, x, w, m)
    if fused is not None:
        return fused
    acc = _cast(_int_conv(node, x, _zero_point(node, 2), w, _zero_point(node, 5)), "float64")
    if node.has(8):
        bias = _need(node, 8, ("int32",), "B")
        if bias.shape != (m,):
            raise node.unsupported(f"B of shape {bias.shape} must hold {m} values (one per output channel)")
        acc = E.add(acc, _channel(node, _cast(bias, "float64"), m, acc.rank, 1, "B"))
    multiplier = E.div(
        E.mul(_scalar(x_scale), _channel(node, w_scale, m, acc.rank, 1, "w_scale")), _scalar(y_scale)
    )
    if node.has(7) and math.prod(node.shape(7)) != 1:
        raise node.unsupported(f"y_zero_point of shape {node.shape(7)} must be one value (per tensor)")
    return _requantize(node, acc, multiplier, 7)


def _qlinear_conv_kernel(node, x: Tensor, w: Tensor, m: int) -> Tensor | None:
    """QLinearConv on the integer kernel (graphdef/ops/quant.py ``qconv``: int8 weights stored as
    they are, int32 sums), where it computes the same values: a 2-D convolution of int8/uint8 x
    into its own type, constant int8 weights with zero points 0, constant float32 scales and
    zero points, an int32 bias. The multiplier is x_scale * w_scale / y_scale in float32, the
    sum times it in double rounded half to even, as the graph of float ops does. None elsewhere
    (that graph computes it)."""
    known = all(node.is_const(i) for i in (1, 2, 3, 4, 5, 6, 7) if node.has(i))
    if x.rank != 4 or w.rank != 4 or w.dtype != "int8" or not known:
        return None
    if not all(node.has(i) for i in (1, 4, 6)) or (node.has(8) and not node.is_const(8)):
        return None
    out = node.dtype(7) if node.has(7) else "uint8"
    scales = [node.const(i) for i in (1, 4, 6)]
    if out != x.dtype or any(a.dtype != np.float32 for a in scales):
        return None
    w_zp = node.const(5) if node.has(5) else np.zeros(1, np.int8)
    x_zp = node.const(2).reshape(-1) if node.has(2) else np.zeros(1, np.int64)
    y_zp = node.const(7).reshape(-1) if node.has(7) else np.zeros(1, np.int64)
    if np.any(w_zp) or x_zp.size != 1 or y_zp.size != 1 or scales[1].size not in (1, m):
        return None
    bias = node.const(8) if node.has(8) else None
    if bias is not None and (bias.dtype != np.int32 or bias.shape != (m,)):
        return None
    multiplier = (scales[0].reshape(-1)[0] * scales[1].reshape(-1)) / scales[2].reshape(-1)[0]  # float32
    kernel = w.shape[2:]
    strides = tuple(node.attr("strides", [1, 1]))
    dilations = tuple(node.attr("dilations", [1, 1]))
    if tuple(node.attr("kernel_shape", kernel)) != kernel:
        return None
    pads = window_pads(node, x.shape[2:], kernel, strides, dilations)
    lo, hi = (-128, 127) if out == "int8" else (0, 255)
    return Q.qconv(
        x, node.tensor(3), None if bias is None else constant(bias), scale=[float(v) for v in multiplier],
        strides=strides, pads=pads, dilations=dilations, group=node.attr("group", 1), x_zero=int(x_zp[0]),
        y_zero=int(y_zp[0]), lo=lo, hi=hi,
    )  # fmt: skip


# ----------------------------------------------------------------------------- BitCast


@converter("BitCast", 26)
def _bitcast(node):
    to = onnx_dtype(node.attr("to"), f"{node.where()} attribute 'to'")
    src = node.dtype(0)
    if dtypes.itemsize(src) != dtypes.itemsize(to):
        raise node.unsupported(
            f"BitCast from {src} ({8 * dtypes.itemsize(src)} bits) to {to} "
            f"({8 * dtypes.itemsize(to)} bits): the bit widths must be equal"
        )
    return BITS.bitcast(node.tensor(0), to)
