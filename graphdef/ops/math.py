"""More elementwise math and the cumulative ops.

- trigonometric and hyperbolic functions (and their inverses), ``floor``, ``ceil`` and
  ``round`` (half to even, like ``np.round`` and ONNX Round), floats only;
- ``isnan`` and ``isinf`` (bool results);
- ``mod``: ``fmod=False`` takes the sign of the divisor (Python's ``%``, ``np.mod``),
  ``fmod=True`` the sign of the dividend (C's ``fmod`` and ``%``, ``np.fmod``); integer
  modulo by zero is an error, as integer division is;
- ``bitwise_and/or/xor/not`` and ``bitshift`` on integers. Shifting by a negative amount or
  by the bit width or more gives 0, or -1 for a right shift of a negative number (ONNX
  BitShift); left shifts of signed values wrap;
- ``cumsum`` and ``cumprod`` along one axis, optionally exclusive and/or reversed (ONNX
  CumSum/CumProd, ``tf.math.cumsum``). float16 accumulates in float32, like the
  reductions; integers wrap.

- ``softplus``: ``log(1 + exp(x))`` without overflow (``max(x, 0) + log1p(exp(-|x|))``).

``reciprocal``, ``softsign`` and ``swish`` are compositions.

>>> import numpy as np, graphdef as gd
>>> g = gd.Graph("m")
>>> with g:
...     x = gd.placeholder("x", (4,))
...     y = gd.mod(x, 3.0)
>>> gd.run(g, {"x": np.array([-4, -1, 2, 7], np.float32)}, [y])[0]
array([2., 2., 2., 1.], dtype=float32)
"""

from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from .. import dtypes
from ..builder import apply, operand
from ..errors import ExecutionError
from ..ir import TensorType
from ..registry import (
    ELEMENTWISE,
    KERNEL,
    NOT_DIFFERENTIABLE,
    Attr,
    Example,
    NotDifferentiable,
    Sample,
    defop,
)
from ._util import check_dtype, resolve_axis
from .elementwise import (
    _binary,
    _binary_infer,
    _pair,
    _unary,
    add,
    div,
    mul,
    neg,
    per_element,
    rsqrt,
    sigmoid,
    sub,
    unary_examples,
    unbroadcast,
)

# ----------------------------------------------------------------------------- float unary


def _g_sin(op, gys):
    return (mul(gys[0], cos(op.inputs[0])),)


def _g_cos(op, gys):
    return (neg(mul(gys[0], sin(op.inputs[0]))),)


def _g_tan(op, gys):
    y = op.outputs[0]
    return (mul(gys[0], add(mul(y, y), 1)),)


def _g_asin(op, gys):
    x = op.inputs[0]
    return (mul(gys[0], rsqrt(sub(1, mul(x, x)))),)


def _g_acos(op, gys):
    x = op.inputs[0]
    return (neg(mul(gys[0], rsqrt(sub(1, mul(x, x))))),)


def _g_atan(op, gys):
    x = op.inputs[0]
    return (div(gys[0], add(mul(x, x), 1)),)


def _g_sinh(op, gys):
    return (mul(gys[0], cosh(op.inputs[0])),)


def _g_cosh(op, gys):
    return (mul(gys[0], sinh(op.inputs[0])),)


def _g_asinh(op, gys):
    x = op.inputs[0]
    return (mul(gys[0], rsqrt(add(mul(x, x), 1))),)


def _g_acosh(op, gys):
    x = op.inputs[0]
    return (mul(gys[0], rsqrt(sub(mul(x, x), 1))),)


def _g_atanh(op, gys):
    x = op.inputs[0]
    return (div(gys[0], sub(1, mul(x, x))),)


def _beyond(scalar, domain):
    """The examples of an inverse function (``scalar``, drawn from ``domain``) plus, in each
    float dtype, values at and beyond the ends of its domain: NaN outside, infinities at the
    poles."""

    def outside(x):
        try:
            return scalar(x)
        except ValueError:  # math's domain error: NaN outside, +-inf at a pole (atanh(+-1))
            return math.copysign(math.inf, x) if abs(x) == 1 and scalar is math.atanh else math.nan

    return unary_examples(dtypes.FLOATS, scalar, domain) + tuple(
        Example((np.array((-3.0, 3.0, 1.0, -1.0, 0.5), dt),), expect=per_element(outside), grad=False)
        for dt in ("float32", "float64", "float16")
    )


_UNIT = (-0.95, 0.95)
_unary("sin", np.sin, _g_sin, doc="sine", scalar=math.sin)
_unary("cos", np.cos, _g_cos, doc="cosine", scalar=math.cos)
_unary("tan", np.tan, _g_tan, doc="tangent", scalar=math.tan, domain=(-1.4, 1.4))
_unary("asin", np.arcsin, _g_asin, doc="inverse sine; NaN outside [-1, 1]",
       examples=_beyond(math.asin, _UNIT))  # fmt: skip
_unary("acos", np.arccos, _g_acos, doc="inverse cosine; NaN outside [-1, 1]", scalar=math.acos, domain=_UNIT)
_unary("atan", np.arctan, _g_atan, doc="inverse tangent", scalar=math.atan)
_unary("sinh", np.sinh, _g_sinh, doc="hyperbolic sine", scalar=math.sinh)
_unary("cosh", np.cosh, _g_cosh, doc="hyperbolic cosine", scalar=math.cosh)
_unary("asinh", np.arcsinh, _g_asinh, doc="inverse hyperbolic sine", scalar=math.asinh)
_unary("acosh", np.arccosh, _g_acosh, doc="inverse hyperbolic cosine; NaN below 1",
       examples=_beyond(math.acosh, (1.05, 4.0)))  # fmt: skip
_unary("atanh", np.arctanh, _g_atanh, doc="inverse hyperbolic tangent; NaN outside [-1, 1]",
       examples=_beyond(math.atanh, _UNIT))  # fmt: skip

# signed zeros, halves of both signs, large values, infinities and NaN (each stays as it is)
_SPECIALS = (0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.3, 0.2, -3.7, 6e4, 7.0, 8388607.5, -8388609.0,
             3e9, -5e15 - 0.5, math.inf, -math.inf, math.nan)  # fmt: skip


def _rounding_examples(scalar) -> tuple[Example, ...]:
    """``_SPECIALS`` in each float dtype, expected from ``scalar`` (a result keeps the sign of
    x, so floor(-0.0), ceil(-0.3) and round(-0.5) are -0.0)."""

    def rounded(x):
        return x if not math.isfinite(x) else math.copysign(float(scalar(x)), x)

    def values(dt):  # (float16 without the values past its range)
        return np.array(
            [v for v in _SPECIALS if not abs(v) < math.inf or abs(v) <= float(np.finfo(dt).max)], dt
        )

    return tuple(
        Example((values(dt),), expect=per_element(rounded)) for dt in ("float32", "float64", "float16")
    )


_unary(
    "floor", np.floor, NOT_DIFFERENTIABLE, doc="largest integer <= x", examples=_rounding_examples(math.floor)
)
_unary(
    "ceil", np.ceil, NOT_DIFFERENTIABLE, doc="smallest integer >= x", examples=_rounding_examples(math.ceil)
)
_unary("round", np.round, NOT_DIFFERENTIABLE, doc="nearest integer, halves to even (2.5 -> 2)",
       examples=_rounding_examples(builtins.round))  # fmt: skip


def sin(x, name=None):
    return apply("sin", [operand(x)], name)


def cos(x, name=None):
    return apply("cos", [operand(x)], name)


def tan(x, name=None):
    return apply("tan", [operand(x)], name)


def asin(x, name=None):
    return apply("asin", [operand(x)], name)


def acos(x, name=None):
    return apply("acos", [operand(x)], name)


def atan(x, name=None):
    return apply("atan", [operand(x)], name)


def sinh(x, name=None):
    return apply("sinh", [operand(x)], name)


def cosh(x, name=None):
    return apply("cosh", [operand(x)], name)


def asinh(x, name=None):
    return apply("asinh", [operand(x)], name)


def acosh(x, name=None):
    return apply("acosh", [operand(x)], name)


def atanh(x, name=None):
    return apply("atanh", [operand(x)], name)


def floor(x, name=None):
    return apply("floor", [operand(x)], name)


def ceil(x, name=None):
    return apply("ceil", [operand(x)], name)


def round(x, name=None):  # noqa: A001 - the op's name
    """Round to the nearest integer, halves to even: ``round([0.5, 1.5, 2.5]) == [0, 2, 2]``."""
    return apply("round", [operand(x)], name)


def reciprocal(x, name=None):
    """``1 / x`` (a composition)."""
    x = operand(x)
    return div(1, x, name=name)


def _softplus(x):
    x64 = x.astype(np.float64)
    return np.maximum(x64, 0) + np.log1p(np.exp(-np.abs(x64)))


_unary("softplus", _softplus, lambda op, gys: (mul(gys[0], sigmoid(op.inputs[0])),),
       doc="log(1 + exp(x)), without overflow", scalar=lambda x: math.log(1 + math.exp(x)),
       domain=(-8.0, 8.0))  # fmt: skip


def softplus(x, name=None):
    """``log(1 + exp(x))``, computed without overflow for large x."""
    return apply("softplus", [operand(x)], name)


def softsign(x, name=None):
    """``x / (1 + |x|)`` (a composition)."""
    from .elementwise import abs

    x = operand(x)
    return div(x, add(abs(x), 1), name=name)


def swish(x, alpha=1.0, name=None):
    """``x * sigmoid(alpha * x)`` (a composition; SiLU when alpha is 1)."""
    x = operand(x)
    return mul(x, sigmoid(mul(x, alpha) if alpha != 1.0 else x), name=name)


# ----------------------------------------------------------------------------- isnan, isinf


def _bool_infer(types, attrs):
    check_dtype(types[0], dtypes.FLOATS)
    return TensorType(types[0].shape, "bool")


def _isinf(x, detect_positive, detect_negative):
    return (np.isposinf(x) & detect_positive) | (np.isneginf(x) & detect_negative)


defop(
    "isnan",
    ("x",),
    _bool_infer,
    lambda xs, a: np.isnan(xs[0]),
    NOT_DIFFERENTIABLE,
    kind=ELEMENTWISE,
    doc="whether x is NaN (bool)",
    examples=tuple(
        Example((np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], dt),), expect=per_element(math.isnan))
        for dt in ("float32", "float64", "float16")
    ),
)
defop(
    "isinf",
    ("x",),
    _bool_infer,
    lambda xs, a: _isinf(xs[0], **a),
    NOT_DIFFERENTIABLE,
    attrs={"detect_positive": Attr("bool", True), "detect_negative": Attr("bool", True)},
    kind=ELEMENTWISE,
    doc="whether x is +inf (if detect_positive) or -inf (if detect_negative) (bool)",
    examples=tuple(
        Example(
            (np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], dt),),
            {"detect_positive": pos, "detect_negative": neg},
            per_element(lambda x, pos=pos, neg=neg: (x == math.inf and pos) or (x == -math.inf and neg)),
        )
        for dt, pos, neg in (
            ("float32", True, True),
            ("float32", True, False),
            ("float32", False, True),
            ("float64", False, False),
            ("float16", True, True),
        )
    ),
)


def isnan(x, name=None):
    return apply("isnan", [operand(x)], name)


def isinf(x, detect_positive=True, detect_negative=True, name=None):
    return apply(
        "isinf", [operand(x)], name, detect_positive=detect_positive, detect_negative=detect_negative
    )


# ----------------------------------------------------------------------------- mod


def _mod_ref(xs, attrs):
    a, b = xs
    if dtypes.is_int(a.dtype.name) and np.any(b == 0):
        raise ExecutionError("integer modulo by zero")
    out = np.fmod(a, b) if attrs["fmod"] else np.mod(a, b)
    return np.asarray(out).astype(a.dtype, copy=False)


def _trunc(q):
    from .elementwise import sign

    return mul(sign(q), floor(mul(q, sign(q))))


def _g_mod(op, gys):
    # y = a - q * b with q = floor(a / b) (trunc for fmod): piecewise, dy/da = 1, dy/db = -q
    a, b = op.inputs
    g = gys[0]

    def gb():
        q = div(a, b)
        q = _trunc(q) if op.attrs["fmod"] else floor(q)
        return unbroadcast(neg(mul(g, q)), b.shape)

    return op.want(0, lambda: unbroadcast(g, a.shape)), op.want(1, gb)


# the ONNX edge cases of a float mod: signed zeros, infinities, NaN, division by zero (checked
# against the interpreter, whose values tests/graphdef/test_ops_math.py checks)
_MOD_A = (0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, math.inf, -math.inf, 1.0, 1.0, math.nan, 1.0)
_MOD_B = (-2.0, 2.0, 2.0, -2.0, math.inf, math.inf, -math.inf, -math.inf, 2.0, 2.0, 0.0, -0.0, 2.0, math.nan)


def _int_fmod(a, b):
    r = builtins.abs(a) % builtins.abs(b)
    return -r if a < 0 else r


def _mod_edges() -> tuple[Example, ...]:
    """Both forms in the other dtypes: the float edge cases, the extremes of the signed integer
    types (the lowest value by -1, by itself, by a small number), and uint8."""
    out = []
    for fmod in (False, True):
        out += [Example((np.array(_MOD_A, dt), np.array(_MOD_B, dt)), {"fmod": fmod}, grad=False)
                for dt in ("float32", "float64", "float16")]  # fmt: skip
        expect = per_element(_int_fmod if fmod else operator.mod)
        for dt in ("int8", "int32", "int64"):
            lo = int(np.iinfo(dt).min)
            a, b = np.array([lo, lo, lo, -7, 7, 5], dt), np.array([-1, 3, lo, 2, -2, -5], dt)
            out.append(Example((a, b), {"fmod": fmod}, expect))
        divisors = np.array([7, 1, 200], "uint8")
        out.append(Example((Sample((2, 3), "uint8", 0, 255), divisors), {"fmod": fmod}, expect))
    return tuple(out)


defop(
    "mod",
    ("a", "b"),
    _binary_infer(dtypes.NUMERIC),
    _mod_ref,
    _g_mod,
    attrs={"fmod": Attr("bool", False)},
    kind=ELEMENTWISE,
    doc="remainder of a / b: sign of b (np.mod), or of a if fmod (np.fmod); integer b == 0 is an error",
    examples=(
        Example((Sample((2, 3)), Sample((3,), "float32", 0.5, 2.0)), {}, per_element(lambda a, b: a % b)),
        Example(
            (Sample((2, 3)), Sample((3,), "float32", -2.0, -0.5)), {"fmod": True}, per_element(math.fmod)
        ),
        Example(
            (Sample((2, 3), "int32", -20, 20), Sample((3,), "int32", 1, 7)),
            {},
            per_element(lambda a, b: a % b),
        ),
        Example(
            (Sample((2, 3), "int32", -20, 20), Sample((3,), "int32", -7, -1)),
            {"fmod": True},
            per_element(lambda a, b: int(math.fmod(a, b))),
        ),
    )
    + _mod_edges(),
)


def mod(a, b, fmod=False, name=None):
    """Elementwise remainder; ``fmod=False``: Python's ``a % b``, ``fmod=True``: C's ``fmod``."""
    return apply("mod", _pair(a, b), name, fmod=fmod)


# ----------------------------------------------------------------------------- bitwise


_BITS = (-1000, 1000)  # int8 and uint8 wrap them: every bit pattern
_BIT_TYPES = ("int8", "uint8", "int64")
_binary("bitwise_and", np.bitwise_and, NOT_DIFFERENTIABLE, dtypes.INTS, doc="a & b, bit by bit",
        scalar=operator.and_, ints_a=_BITS, ints_b=_BITS, also=_BIT_TYPES)  # fmt: skip
_binary("bitwise_or", np.bitwise_or, NOT_DIFFERENTIABLE, dtypes.INTS, doc="a | b, bit by bit",
        scalar=operator.or_, ints_a=_BITS, ints_b=_BITS, also=_BIT_TYPES)  # fmt: skip
_binary("bitwise_xor", np.bitwise_xor, NOT_DIFFERENTIABLE, dtypes.INTS, doc="a ^ b, bit by bit",
        scalar=operator.xor, ints_a=_BITS, ints_b=_BITS, also=_BIT_TYPES)  # fmt: skip
_unary("bitwise_not", np.invert, NOT_DIFFERENTIABLE, dtypes.INTS, doc="~x, bit by bit",
       scalar=operator.invert, int_domain=_BITS, also=_BIT_TYPES)  # fmt: skip

_UNSIGNED = {
    "int8": np.uint8,
    "uint8": np.uint8,
    "int16": np.uint16,
    "uint16": np.uint16,
    "int32": np.uint32,
    "uint32": np.uint32,
    "int64": np.uint64,
    "uint64": np.uint64,
}


def _bitshift(a, b, direction):
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))  # ascontiguousarray makes 0-d arrays 1-d
    a, b = (np.ascontiguousarray(v).reshape(shape) for v in np.broadcast_arrays(a, b))
    bits = a.dtype.itemsize * 8
    outside = (b < 0) | (b >= bits)
    s = np.where(outside, 0, b)
    if direction == "left":
        unsigned = _UNSIGNED[a.dtype.name]
        shifted = np.left_shift(a.view(unsigned), s.astype(unsigned)).view(a.dtype)
        fill = np.zeros_like(a)
    else:
        shifted = np.right_shift(a, s.astype(a.dtype))
        fill = np.where(a < 0, -1, 0).astype(a.dtype) if a.dtype.kind == "i" else np.zeros_like(a)
    return np.where(outside, fill, shifted).astype(a.dtype)


def _shift(a, b, direction, bits):
    if not 0 <= b < bits:
        return -1 if direction == "right" and a < 0 else 0
    return a << b if direction == "left" else a >> b


def _shift_edges() -> tuple[Example, ...]:
    """Shifts of each type's lowest and highest values (and a few others) by 0, 1, the bit
    width less one, the bit width, more, and -1 (int8, uint8, int64 both ways; int32 left)."""
    out = []
    for dt in ("int8", "uint8", "int32", "int64"):
        info = np.iinfo(dt)
        x = np.array([[info.min] * 8, [info.max] * 8, [1, -1, 5, -7, 100, -100, 3, 0]]).astype(dt)
        y = np.array([0, 1, info.bits - 1, info.bits, info.bits + 5, 3, 2, 0 if info.min == 0 else -1], dt)
        for direction in ("left",) if dt == "int32" else ("left", "right"):
            expect = per_element(_shift, direction=direction, bits=info.bits)
            out.append(Example((x, y), {"direction": direction}, expect))
    for direction in ("left", "right"):  # 0-d operands keep their shape
        expect = per_element(_shift, direction=direction, bits=64)
        out.append(Example((np.array(-77, "int64"), np.array(3, "int64")), {"direction": direction}, expect))
    return tuple(out)


defop(
    "bitshift",
    ("x", "y"),
    _binary_infer(dtypes.INTS),
    lambda xs, a: _bitshift(*xs, a["direction"]),
    NOT_DIFFERENTIABLE,
    attrs={"direction": Attr("str", choices=("left", "right"))},
    kind=ELEMENTWISE,
    examples=(
        Example(
            (Sample((2, 4), "int32", 0, 1000), Sample((4,), "int32", 0, 8)),
            {"direction": "left"},
            per_element(lambda a, b: a << b),
        ),
        Example(
            (Sample((2, 4), "int32", -1000, 1000), Sample((4,), "int32", -2, 40)),
            {"direction": "right"},
            per_element(lambda a, b: a >> b if 0 <= b < 32 else (-1 if a < 0 else 0)),
        ),
    )
    + _shift_edges(),  # fmt: skip
    doc="x shifted left or right by y bits (right: arithmetic for signed types); "
    "y < 0 or >= the bit width gives 0, or -1 for a right shift of a negative x",
)


def bitwise_and(a, b, name=None):
    return apply("bitwise_and", _pair(a, b), name)


def bitwise_or(a, b, name=None):
    return apply("bitwise_or", _pair(a, b), name)


def bitwise_xor(a, b, name=None):
    return apply("bitwise_xor", _pair(a, b), name)


def bitwise_not(x, name=None):
    return apply("bitwise_not", [operand(x)], name)


def bitshift(x, y, direction="left", name=None):
    """``x << y`` (direction "left") or ``x >> y`` ("right"), elementwise with broadcasting."""
    return apply("bitshift", _pair(x, y), name, direction=direction)


# ----------------------------------------------------------------------------- cumulative

_CUM_ATTRS = {"axis": Attr("int", 0), "exclusive": Attr("bool", False), "reverse": Attr("bool", False)}


def _cum_infer(types, attrs):
    check_dtype(types[0], dtypes.NUMERIC)
    return types[0]


def _cum_ref(accumulate, identity):
    def ref(xs, attrs):
        x = xs[0]
        v = np.moveaxis(x.astype(np.float32) if x.dtype == np.float16 else x, attrs["axis"], -1)
        if attrs["reverse"]:
            v = v[..., ::-1]
        out = accumulate(v, axis=-1, dtype=v.dtype)
        if attrs["exclusive"]:
            shifted = np.full_like(out, identity)
            shifted[..., 1:] = out[..., :-1]
            out = shifted
        if attrs["reverse"]:
            out = out[..., ::-1]
        return np.ascontiguousarray(np.moveaxis(out, -1, attrs["axis"])).astype(x.dtype, copy=False)

    return ref


def _cum_examples(step, identity, low=-3.0, high=3.0, int_range=(-9, 9)) -> tuple[Example, ...]:
    """Examples of a running sum (``step`` = add) or product: along an inner, the outer and a
    negative axis, exclusive and/or reversed, in float32, float64 and int32, then in float16
    and more integer types (wrapping), one along lines of more inner positions than the kernel's
    block (FC_CUM_BLOCK, 64); checked by a loop that accumulates along each line in the
    input's dtype (float32 for float16)."""

    def expect(axis=0, exclusive=False, reverse=False):
        def fn(x):
            v = np.moveaxis(x, axis, -1)
            out = np.empty_like(v)
            n = v.shape[-1]
            kind = np.float32 if v.dtype == np.float16 else v.dtype.type
            for lead in np.ndindex(v.shape[:-1]):
                acc = kind(identity)
                for j in reversed(range(n)) if reverse else range(n):
                    with np.errstate(over="ignore"):
                        nxt = step(acc, kind(v[lead + (j,)]))
                    out[lead + (j,)] = acc if exclusive else nxt
                    acc = nxt
            return np.moveaxis(out, -1, axis)

        return fn

    def case(shape, dtype="float32", lo=low, hi=high, **attrs):
        return Example((Sample(shape, dtype, lo, hi),), attrs, expect(**attrs), grad=dtype == "float32")

    return (
        case((3, 4), axis=1),
        case((2, 3, 2), axis=0, exclusive=True),
        case((3, 4), axis=-1, reverse=True),
        case((5,), exclusive=True, reverse=True),
        case((2, 3, 4), axis=1, exclusive=True, reverse=True),
        case((4, 3), "float64"),
        case((3, 4), "int32", *int_range, axis=1),
        case((2, 5), "int32", *int_range, axis=-1, exclusive=True, reverse=True),
        case((2, 6, 3), "float16", axis=1, exclusive=True, reverse=True),
        case((3, 70, 5), "int8", *int_range, axis=1),
        case((3, 70, 5), "uint8", 0, int_range[1], axis=2, exclusive=True, reverse=True),
        case((3, 150), "int64", *int_range, axis=0, reverse=True),
    )


def _g_cumsum(op, gys):
    a = op.attrs
    return (cumsum(gys[0], a["axis"], a["exclusive"], not a["reverse"]),)


defop(
    "cumsum",
    ("x",),
    _cum_infer,
    _cum_ref(np.cumsum, 0),
    _g_cumsum,
    attrs=_CUM_ATTRS,
    resolve=resolve_axis,
    flops=lambda ins, outs, a: ins[0].size,
    kind=KERNEL,
    doc="running sum along axis (exclusive: without the element itself; reverse: from the end)",
    examples=_cum_examples(operator.add, 0),
)
defop(
    "cumprod",
    ("x",),
    _cum_infer,
    _cum_ref(np.cumprod, 1),
    NotDifferentiable(
        "the gradient of a running product divides by x (undefined at zeros); not built", error=True
    ),
    attrs=_CUM_ATTRS,
    resolve=resolve_axis,
    flops=lambda ins, outs, a: ins[0].size,
    kind=KERNEL,
    doc="running product along axis (exclusive: without the element itself; reverse: from the end)",
    examples=_cum_examples(operator.mul, 1, 0.5, 2.0, (-3, 3)),
)


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running sum along ``axis``: ``cumsum([1, 2, 3]) == [1, 3, 6]``; exclusive gives
    ``[0, 1, 3]``, reverse ``[6, 5, 3]``."""
    return apply("cumsum", [operand(x)], name, axis=axis, exclusive=exclusive, reverse=reverse)


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running product along ``axis``: ``cumprod([1, 2, 3]) == [1, 2, 6]``; exclusive gives
    ``[1, 1, 2]``, reverse ``[6, 6, 3]``."""
    return apply("cumprod", [operand(x)], name, axis=axis, exclusive=exclusive, reverse=reverse)


# the builders that graphdef exports (``gd.sin``, ``gd.cumsum`` ...)
__all__ = [
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "floor", "ceil", "round", "reciprocal", "softplus", "softsign", "swish", "isnan", "isinf",
    "mod", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitshift", "cumsum",
    "cumprod",
]  # fmt: skip
