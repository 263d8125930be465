"""Elementwise ops: unary math, binary arithmetic with numpy broadcasting, comparisons,
logic, ``where``, ``clip`` and ``cast``.

Binary ops require equal dtypes (no implicit promotion); Python scalars take the dtype of
the tensor they meet. Integer division truncates toward zero, as in C.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .. import dtypes
from ..builder import Tensor, apply, operand
from ..errors import ExecutionError
from ..ir import TensorType
from ..registry import ELEMENTWISE, NOT_DIFFERENTIABLE, Attr, Example, Sample, defop
from ._util import broadcast_shapes, check_dtype, same_dtype

SIGNED = dtypes.FLOATS + dtypes.SIGNED_INTS


# ----------------------------------------------------------------------------- helpers
def _pair(a, b) -> tuple[Tensor, Tensor]:
    if isinstance(a, Tensor):
        return a, operand(b, like=a)
    if isinstance(b, Tensor):
        return operand(a, like=b), b
    return operand(a), operand(b)


def unbroadcast(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum ``g`` over the axes that broadcasting expanded, so it has ``shape``."""
    from .reduce import reduce_sum
    from .shape import reshape

    if g.shape == tuple(shape):
        return g
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1
    )
    if axes:
        g = reduce_sum(g, axes=axes, keepdims=True)
    return reshape(g, shape)


def _unary_infer(allowed):
    def infer(types, attrs):
        check_dtype(types[0], allowed)
        return types[0]

    return infer


def _binary_infer(allowed, out_dtype=None):
    def infer(types, attrs):
        dt = same_dtype(types, allowed)
        return TensorType(broadcast_shapes(types[0].shape, types[1].shape), out_dtype or dt)

    return infer


def _as(dtype_like, value):
    return np.asarray(value).astype(dtype_like.dtype, copy=False)


# ----------------------------------------------------------------------------- examples
def wrapped(value: int, dtype) -> int:
    """An integer as ``dtype`` stores it: wrapped modulo 2 ** bits, as C and numpy do."""
    info = np.iinfo(dtype)
    return (value - info.min) % (1 << info.bits) + info.min


def per_element(fn, **attrs):
    """An example's expectation from a scalar Python function of the (broadcast) input
    elements: independent of the numpy reference it checks. An integer result of integer
    inputs is wrapped to the type of the last input (a uint8 ``3 - 5`` is 254)."""

    def expect(*arrays):
        bs = np.broadcast_arrays(*arrays)
        out = np.empty(bs[0].shape, object)
        ints = bs[-1].dtype.kind in "iu"
        for idx in np.ndindex(out.shape):
            v = fn(*(b[idx].item() for b in bs), **attrs)
            out[idx] = wrapped(v, bs[-1].dtype) if ints and type(v) is int else v
        return out

    return expect


EVERY = dtypes.NUMERIC
"""``also`` of the examples of an op the C backend instantiates per type (runtime_c's scalar
functions): an example in each numeric dtype the op takes."""
_MORE_INTS = tuple(d for d in dtypes.INTS if d != "int32")


def _typed_cases(allowed, also=(), half=True) -> list[str]:
    """The dtypes an elementwise op's examples cover: its float types (float16 if ``half``),
    one signed integer type, and bool, as far as the op takes them; then those of ``also``
    that it takes (after the others, so that an example keeps its index)."""
    out = [d for d in ("float32", "float64", "float16") if d in allowed and (half or d != "float16")]
    out += [d for d in ("int32",) if d in allowed]
    out += ["bool"] if allowed == ("bool",) else []
    return out + [d for d in also if d in allowed and d not in out]


def unary_examples(
    allowed, scalar, domain=(-3.0, 3.0), int_domain=(-9, 9), attrs=None, shape=(2, 5), also=()
):
    """One example per dtype of ``_typed_cases``, drawn from ``domain`` (ints from
    ``int_domain``; unsigned types wrap its negative end to large values), checked against
    ``scalar`` (None: no expectation)."""
    attrs = attrs or {}
    out = []
    for dt in _typed_cases(allowed, also):
        lo, hi = int_domain if dtypes.is_int(dt) else domain
        expect = per_element(scalar, **attrs) if scalar else None
        out.append(Example((Sample(shape, dt, lo, hi),), attrs, expect, grad=dt == "float32"))
    return tuple(out)


def _divisors(dtype: str) -> np.ndarray:
    """Nonzero integer divisors, negative ones (-1 among them) where the type has them."""
    v = np.array([[-7, 3, -1], [5, -2, 9]])
    return (np.abs(v) if dtype.startswith("u") else v).astype(dtype)


def binary_examples(
    allowed, scalar, a=(-3.0, 3.0), b=(-3.0, 3.0), ints_a=(-9, 9), ints_b=(-9, 9), also=(), divisor=False
):
    """Examples with broadcasting ((2, 3) against (3,) and (4, 1) against (1, 3)) in float32,
    one in float64 and one per integer or bool type the op takes (float16 and more integer
    types where ``also`` names them; ``divisor``: their b from ``_divisors``)."""
    expect = per_element(scalar) if scalar else None
    out = []
    for dt in _typed_cases(allowed, also, half=False):
        ra, rb = (ints_a, ints_b) if dtypes.is_int(dt) else (a, b)
        shapes = [((2, 3), (3,)), ((4, 1), (1, 3))] if dt == "float32" else [((2, 3), (2, 3))]
        for sa, sb in shapes:
            b_in = _divisors(dt) if divisor and dtypes.is_int(dt) and dt != "int32" else Sample(sb, dt, *rb)
            ex = Example((Sample(sa, dt, *ra), b_in), {}, expect, grad=dt == "float32")
            out.append(ex)
    return tuple(out)


def _unary(name, fn, grad, allowed=dtypes.FLOATS, attrs=None, doc="", scalar=None, examples=None, **cases):
    """An elementwise op of one input; ``scalar``: its per-element Python definition (the
    examples' expectation); ``cases``: the ranges of ``unary_examples``."""
    defop(
        name,
        ("x",),
        _unary_infer(allowed),
        lambda xs, a: _as(xs[0], fn(xs[0], **a)),
        grad,
        kind=ELEMENTWISE,
        attrs=attrs or {},
        doc=doc,
        examples=examples if examples is not None else unary_examples(allowed, scalar, **cases),
    )


def _binary(name, fn, grad, allowed=dtypes.NUMERIC, out_dtype=None, doc="", scalar=None, **cases):
    """An elementwise op of two broadcast inputs; see ``_unary``."""
    defop(
        name,
        ("a", "b"),
        _binary_infer(allowed, out_dtype),
        lambda xs, a: np.asarray(fn(*xs)).astype(out_dtype or xs[0].dtype, copy=False),
        grad,
        kind=ELEMENTWISE,
        doc=doc,
        examples=binary_examples(allowed, scalar, **cases),
    )


def _erf(x):
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)), dtype=np.float64)


# ----------------------------------------------------------------------------- binary
def _g_add(op, gys):
    a, b = op.inputs
    return (
        op.want(0, lambda: unbroadcast(gys[0], a.shape)),
        op.want(1, lambda: unbroadcast(gys[0], b.shape)),
    )


def _g_sub(op, gys):
    a, b = op.inputs
    return (
        op.want(0, lambda: unbroadcast(gys[0], a.shape)),
        op.want(1, lambda: unbroadcast(neg(gys[0]), b.shape)),
    )


def _g_mul(op, gys):
    a, b = op.inputs
    g = gys[0]
    return (
        op.want(0, lambda: unbroadcast(mul(g, b), a.shape)),
        op.want(1, lambda: unbroadcast(mul(g, a), b.shape)),
    )


def _g_div(op, gys):
    a, b = op.inputs
    g = gys[0]
    return (
        op.want(0, lambda: unbroadcast(div(g, b), a.shape)),
        op.want(1, lambda: unbroadcast(neg(div(mul(g, op.outputs[0]), b)), b.shape)),
    )


def _g_pow(op, gys):
    a, b = op.inputs
    (y,) = op.outputs
    g = gys[0]

    def gb():
        safe_log = where(greater(a, 0), log(where(greater(a, 0), a, 1)), 0)
        return unbroadcast(mul(g, mul(y, safe_log)), b.shape)

    return op.want(0, lambda: unbroadcast(mul(g, mul(b, pow(a, sub(b, 1)))), a.shape)), op.want(1, gb)


def _g_select(compare):
    def grad(op, gys):
        a, b = op.inputs
        mask = compare(a, b)
        g = gys[0]
        zero = zeros_like_scalar(g)
        return (
            op.want(0, lambda: unbroadcast(where(mask, g, zero), a.shape)),
            op.want(1, lambda: unbroadcast(where(mask, zero, g), b.shape)),
        )

    return grad


def zeros_like_scalar(t: Tensor) -> Tensor:
    return operand(0, like=t)


def _int_div(a, b):
    if np.any(b == 0):
        raise ExecutionError("integer division by zero")
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _div(a, b):
    return _int_div(a, b) if dtypes.is_int(a.dtype.name) else np.divide(a, b)


def _pow(a, b):
    if dtypes.is_int(a.dtype.name) and np.any(b < 0):
        raise ExecutionError("integer power with a negative exponent")
    return np.power(a, b)


def _truncated_div(a, b):
    if isinstance(a, float):
        return a / b
    q = operator.abs(a) // operator.abs(b)
    return q if (a < 0) == (b < 0) else -q


_POSITIVE = (0.5, 3.0)
_binary("add", np.add, _g_add, doc="a + b", scalar=operator.add, also=EVERY)
_binary("sub", np.subtract, _g_sub, doc="a - b", scalar=operator.sub, also=EVERY)
_binary("mul", np.multiply, _g_mul, doc="a * b", scalar=operator.mul, also=EVERY)
_binary("div", _div, _g_div, doc="a / b; integers truncate toward zero", scalar=_truncated_div,
        b=_POSITIVE, ints_b=(1, 9), also=EVERY, divisor=True)  # fmt: skip
_binary("pow", _pow, _g_pow, doc="a ** b", scalar=operator.pow, a=_POSITIVE, ints_a=(-4, 4), ints_b=(0, 3),
        also=("float16",))  # fmt: skip
_binary("maximum", np.maximum, _g_select(lambda a, b: greater_equal(a, b)), doc="max(a, b); NaN wins",
        scalar=max, also=EVERY)  # fmt: skip
_binary("minimum", np.minimum, _g_select(lambda a, b: less_equal(a, b)), doc="min(a, b); NaN wins",
        scalar=min, also=EVERY)  # fmt: skip
_binary("equal", np.equal, NOT_DIFFERENTIABLE, dtypes.ALL, "bool", doc="a == b", scalar=operator.eq,
        ints_a=(0, 2), ints_b=(0, 2), also=EVERY)  # fmt: skip
_binary("less", np.less, NOT_DIFFERENTIABLE, out_dtype="bool", doc="a < b", scalar=operator.lt, also=EVERY)
_binary("greater", np.greater, NOT_DIFFERENTIABLE, out_dtype="bool", doc="a > b", scalar=operator.gt,
        also=EVERY)  # fmt: skip
_binary("less_equal", np.less_equal, NOT_DIFFERENTIABLE, out_dtype="bool", doc="a <= b", scalar=operator.le,
        ints_a=(0, 2), ints_b=(0, 2), also=EVERY)  # fmt: skip
_binary("greater_equal", np.greater_equal, NOT_DIFFERENTIABLE, out_dtype="bool", doc="a >= b",
        scalar=operator.ge, ints_a=(0, 2), ints_b=(0, 2), also=EVERY)  # fmt: skip
_binary(
    "logical_and", np.logical_and, NOT_DIFFERENTIABLE, ("bool",), doc="a and b", scalar=lambda a, b: a and b
)
_binary("logical_or", np.logical_or, NOT_DIFFERENTIABLE, ("bool",), doc="a or b", scalar=lambda a, b: a or b)
_binary("logical_xor", np.logical_xor, NOT_DIFFERENTIABLE, ("bool",), doc="a != b", scalar=operator.ne)


def add(a, b, name=None):
    return apply("add", _pair(a, b), name)


def sub(a, b, name=None):
    return apply("sub", _pair(a, b), name)


def mul(a, b, name=None):
    return apply("mul", _pair(a, b), name)


def div(a, b, name=None):
    return apply("div", _pair(a, b), name)


def pow(a, b, name=None):  # noqa: A001 - the op's name
    return apply("pow", _pair(a, b), name)


def maximum(a, b, name=None):
    return apply("maximum", _pair(a, b), name)


def minimum(a, b, name=None):
    return apply("minimum", _pair(a, b), name)


def equal(a, b, name=None):
    return apply("equal", _pair(a, b), name)


def less(a, b, name=None):
    return apply("less", _pair(a, b), name)


def greater(a, b, name=None):
    return apply("greater", _pair(a, b), name)


def less_equal(a, b, name=None):
    return apply("less_equal", _pair(a, b), name)


def greater_equal(a, b, name=None):
    return apply("greater_equal", _pair(a, b), name)


def logical_and(a, b, name=None):
    return apply("logical_and", _pair(a, b), name)


def logical_or(a, b, name=None):
    return apply("logical_or", _pair(a, b), name)


def logical_xor(a, b, name=None):
    return apply("logical_xor", _pair(a, b), name)


# ----------------------------------------------------------------------------- where
def _where_infer(types, attrs):
    c, a, b = types
    check_dtype(c, ("bool",), "condition")
    dt = same_dtype([a, b])
    return TensorType(broadcast_shapes(c.shape, a.shape, b.shape), dt)


def _g_where(op, gys):
    c, a, b = op.inputs
    g = gys[0]
    zero = zeros_like_scalar(g)
    return (
        None,
        op.want(1, lambda: unbroadcast(where(c, g, zero), a.shape)),
        op.want(2, lambda: unbroadcast(where(c, zero, g), b.shape)),
    )


defop(
    "where",
    ("condition", "a", "b"),
    _where_infer,
    lambda xs, a: np.where(*xs),
    _g_where,
    kind=ELEMENTWISE,
    doc="a where condition else b, broadcast together",
    examples=(
        Example(
            (Sample((2, 1), "bool"), Sample((3,)), Sample((2, 3))),
            expect=per_element(lambda c, a, b: a if c else b),
        ),
        Example(
            (Sample((4,), "bool"), Sample((4,), "int32", -9, 9), Sample((), "int32", -9, 9)),
            expect=per_element(lambda c, a, b: a if c else b),
        ),
    )
    + tuple(
        Example(
            (Sample((2, 1), "bool"), Sample((3,), dt, -9, 9), Sample((2, 3), dt, -9, 9)),
            expect=per_element(lambda c, a, b: a if c else b),
            grad=False,
        )
        for dt in EVERY
        if dt not in ("float32", "int32")
    ),
)


def where(condition, a, b, name=None):
    """Elementwise select: ``a`` where ``condition`` is true, else ``b``."""
    if isinstance(a, Tensor) or not isinstance(b, Tensor):
        a, b = _pair(a, b)
    else:
        b, a = _pair(b, a)
    return apply("where", (operand(condition), a, b), name)


# ----------------------------------------------------------------------------- unary
def _g_neg(op, gys):
    return (neg(gys[0]),)


def _g_abs(op, gys):
    return (mul(gys[0], sign(op.inputs[0])),)


def _g_exp(op, gys):
    return (mul(gys[0], op.outputs[0]),)


def _g_log(op, gys):
    return (div(gys[0], op.inputs[0]),)


def _g_sqrt(op, gys):
    return (div(mul(gys[0], 0.5), op.outputs[0]),)


def _g_rsqrt(op, gys):
    (x,), (y,) = op.inputs, op.outputs
    return (mul(gys[0], div(mul(y, -0.5), x)),)


def _g_tanh(op, gys):
    y = op.outputs[0]
    return (mul(gys[0], sub(1, mul(y, y))),)


def _g_sigmoid(op, gys):
    y = op.outputs[0]
    return (mul(gys[0], mul(y, sub(1, y))),)


def _g_relu(op, gys):
    x = op.inputs[0]
    return (where(greater(x, 0), gys[0], 0),)


def _g_leaky_relu(op, gys):
    x, g = op.inputs[0], gys[0]
    return (where(greater(x, 0), g, mul(g, op.attrs["alpha"])),)


def _g_elu(op, gys):
    (x,), (y,), g = op.inputs, op.outputs, gys[0]
    return (where(greater(x, 0), g, mul(g, add(y, op.attrs["alpha"]))),)


_SQRT_2_PI = math.sqrt(2.0 / math.pi)


def _gelu(x, approximate):
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        return 0.5 * x64 * (1.0 + np.tanh(_SQRT_2_PI * (x64 + 0.044715 * x64**3)))
    return 0.5 * x64 * (1.0 + _erf(x64 / math.sqrt(2.0)))


def _g_gelu(op, gys):
    x, g = op.inputs[0], gys[0]
    if op.attrs["approximate"] == "tanh":
        u = mul(add(x, mul(pow(x, 3), 0.044715)), _SQRT_2_PI)
        t = tanh(u)
        du = mul(add(mul(mul(x, x), 3 * 0.044715), 1.0), _SQRT_2_PI)
        d = add(mul(add(t, 1.0), 0.5), mul(mul(mul(x, 0.5), sub(1.0, mul(t, t))), du))
    else:
        cdf = mul(add(erf(mul(x, 1 / math.sqrt(2.0))), 1.0), 0.5)
        pdf = mul(exp(mul(mul(x, x), -0.5)), 1 / math.sqrt(2 * math.pi))
        d = add(cdf, mul(x, pdf))
    return (mul(g, d),)


def _g_erf(op, gys):
    x = op.inputs[0]
    return (mul(gys[0], mul(exp(neg(mul(x, x))), 2 / math.sqrt(math.pi))),)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def clip_bounds(dtype: str, a) -> list:
    """The clip bounds as the tensor's type stores them (ints: truncated and clamped to range)."""
    if dtypes.is_float(dtype):
        return [a["min"], a["max"]]
    info = np.iinfo(dtypes.np_dtype(dtype))
    return [
        int(np.clip(math.trunc(v), info.min, info.max)) if math.isfinite(v) else 0
        for v in (a["min"], a["max"])
    ]


def _clip(x, min, max):  # noqa: A002 - attribute names
    lo, hi = clip_bounds(x.dtype.name, {"min": min, "max": max})
    out = x.copy()
    out[out < min] = lo
    out[out > max] = hi  # min(max(x, min), max): max wins when min > max
    return out


def _g_clip(op, gys):
    x = op.inputs[0]
    inside = logical_and(greater_equal(x, op.attrs["min"]), less_equal(x, op.attrs["max"]))
    return (where(inside, gys[0], 0),)


def _sign(x):
    return (x > 0) - (x < 0)


def _sigmoid1(x):
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _gelu1(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + math.tanh(_SQRT_2_PI * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))


def _clip1(x, min, max):  # noqa: A002
    lo, hi = clip_bounds("int64", {"min": min, "max": max}) if isinstance(x, int) else (min, max)
    y = lo if x < min else x
    return hi if y > max else y  # max wins when min > max


_AWAY = (0.2, 3.0)  # off the kinks at 0 (a gradient check straddling 0 would fail)
_unary("neg", np.negative, _g_neg, SIGNED, doc="-x", scalar=operator.neg, also=("int8", "int64"))
_unary("abs", np.abs, _g_abs, dtypes.NUMERIC, doc="|x|", scalar=operator.abs, domain=_AWAY, also=EVERY)
_unary("sign", np.sign, NOT_DIFFERENTIABLE, dtypes.NUMERIC, doc="-1, 0 or 1", scalar=_sign, also=EVERY)
_unary("exp", np.exp, _g_exp, doc="e ** x", scalar=math.exp)
_unary("log", np.log, _g_log, doc="natural logarithm", scalar=math.log, domain=(0.1, 5.0))
_unary("sqrt", np.sqrt, _g_sqrt, doc="square root", scalar=math.sqrt, domain=(0.1, 5.0))
_unary("rsqrt", lambda x: 1 / np.sqrt(x), _g_rsqrt, doc="1 / sqrt(x)", scalar=lambda x: 1 / math.sqrt(x),
       domain=(0.1, 5.0))  # fmt: skip
_unary("tanh", np.tanh, _g_tanh, doc="hyperbolic tangent", scalar=math.tanh)
_unary("sigmoid", _sigmoid, _g_sigmoid, doc="1 / (1 + exp(-x))", scalar=_sigmoid1, domain=(-8.0, 8.0))
_unary("relu", lambda x: np.maximum(x, 0).astype(x.dtype), _g_relu, SIGNED, doc="max(x, 0)",
       scalar=lambda x: max(x, 0), also=("int8", "int64"))  # fmt: skip
_unary(
    "leaky_relu",
    lambda x, alpha: np.where(x > 0, x, x * x.dtype.type(alpha)),
    _g_leaky_relu,
    attrs={"alpha": Attr("float", 0.01)},
    doc="x if x > 0 else alpha * x",
    examples=unary_examples(dtypes.FLOATS, lambda x, alpha: x if x > 0 else alpha * x, attrs={"alpha": 0.2}),
)
_unary(
    "elu",
    lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(x.astype(np.float64))),
    _g_elu,
    attrs={"alpha": Attr("float", 1.0)},
    doc="x if x > 0 else alpha * (exp(x) - 1)",
    examples=unary_examples(
        dtypes.FLOATS, lambda x, alpha: x if x > 0 else alpha * math.expm1(x), attrs={"alpha": 0.5}
    ),
)
_unary(
    "gelu",
    _gelu,
    _g_gelu,
    attrs={"approximate": Attr("str", "none", ("none", "tanh"))},
    doc="x * Phi(x), exact (erf) or tanh approximation",
    examples=unary_examples(dtypes.FLOATS, _gelu1)
    + unary_examples(("float32",), _gelu1, attrs={"approximate": "tanh"}),
)
_unary("erf", _erf, _g_erf, doc="the error function", scalar=math.erf)
_unary(
    "clip",
    _clip,
    _g_clip,
    dtypes.NUMERIC,
    attrs={"min": Attr("float", -math.inf), "max": Attr("float", math.inf)},
    doc="min(max(x, min), max); NaN stays NaN; max wins when min > max",
    examples=unary_examples(dtypes.NUMERIC, _clip1, attrs={"min": -1.5, "max": 2.5})
    + unary_examples(("float32",), _clip1, attrs={"min": 1.0, "max": -1.0})
    # the other integer types, and an integer type with min > max
    + unary_examples(_MORE_INTS, _clip1, attrs={"min": -1.5, "max": 2.5}, also=_MORE_INTS)
    + unary_examples(("int32",), _clip1, attrs={"min": 1.0, "max": -1.0}),
)
_unary(
    "logical_not",
    np.logical_not,
    NOT_DIFFERENTIABLE,
    ("bool",),
    doc="not x",
    scalar=operator.not_,
)


def neg(x, name=None):
    return apply("neg", [operand(x)], name)


def abs(x, name=None):  # noqa: A001
    return apply("abs", [operand(x)], name)


def sign(x, name=None):
    return apply("sign", [operand(x)], name)


def exp(x, name=None):
    return apply("exp", [operand(x)], name)


def log(x, name=None):
    return apply("log", [operand(x)], name)


def sqrt(x, name=None):
    return apply("sqrt", [operand(x)], name)


def rsqrt(x, name=None):
    return apply("rsqrt", [operand(x)], name)


def tanh(x, name=None):
    return apply("tanh", [operand(x)], name)


def sigmoid(x, name=None):
    return apply("sigmoid", [operand(x)], name)


def relu(x, name=None):
    return apply("relu", [operand(x)], name)


def leaky_relu(x, alpha=0.01, name=None):
    return apply("leaky_relu", [operand(x)], name, alpha=alpha)


def elu(x, alpha=1.0, name=None):
    return apply("elu", [operand(x)], name, alpha=alpha)


def gelu(x, approximate="none", name=None):
    return apply("gelu", [operand(x)], name, approximate=approximate)


def erf(x, name=None):
    return apply("erf", [operand(x)], name)


def clip(x, min=-math.inf, max=math.inf, name=None):  # noqa: A002
    return apply("clip", [operand(x)], name, min=min, max=max)


def logical_not(x, name=None):
    return apply("logical_not", [operand(x)], name)


# ----------------------------------------------------------------------------- cast
def _cast1(x, to):
    """The expectation of a cast of one element: float -> int truncates, integers wrap."""
    if to == "bool":
        return bool(x)
    if dtypes.is_float(to):
        return float(x)
    return wrapped(math.trunc(x), dtypes.np_dtype(to))


def _cast_examples() -> tuple[Example, ...]:
    """Every dtype as a cast's target (from float32 values in [-100, 100]: negative ones wrap
    into the unsigned types) and as its source, to float32 and to bool (the conversions the
    first four examples leave out)."""
    cases = [("float32", to) for to in dtypes.NUMERIC if to not in ("int32", "float64")]
    cases += [(src, "float32") for src in dtypes.ALL if src not in ("float32", "int32")]
    cases += [(src, "bool") for src in dtypes.ALL if src not in ("int8", "bool")]
    return tuple(
        Example(
            (Sample((2, 4), src, -100, 100),),
            {"to": to},
            per_element(_cast1, to=to),
            grad=False,
        )
        for src, to in cases
    )


def _cast_ref(xs, attrs):
    x, to = xs[0], dtypes.np_dtype(attrs["to"])
    if to == np.bool_:
        return x != 0
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(to)


def _g_cast(op, gys):
    x = op.inputs[0]
    if dtypes.is_float(x.dtype) and dtypes.is_float(op.attrs["to"]):
        return (cast(gys[0], x.dtype),)
    return (None,)


defop(
    "cast",
    ("x",),
    lambda ts, a: TensorType(ts[0].shape, a["to"]),
    _cast_ref,
    _g_cast,
    attrs={"to": Attr("dtype")},
    kind=ELEMENTWISE,
    doc="convert to dtype 'to'; float -> int truncates toward zero, any -> bool is x != 0",
    examples=(
        Example(
            (Sample((2, 4), "float32", -100, 100),), {"to": "int32"}, per_element(math.trunc), grad=False
        ),
        Example((Sample((2, 4), "int32", -100, 100),), {"to": "float32"}, per_element(float)),
        Example((Sample((2, 4), "float32"),), {"to": "float64"}, per_element(float)),
        Example((Sample((2, 4), "int8", -2, 2),), {"to": "bool"}, per_element(bool)),
    )
    + _cast_examples(),
)


def cast(x, dtype, name=None):
    x = operand(x)
    return apply("cast", [x], name, to=dtype)


# the builders that graphdef exports (``gd.abs`` ...)
__all__ = [
    "abs",
    "add",
    "cast",
    "clip",
    "div",
    "elu",
    "equal",
    "erf",
    "exp",
    "gelu",
    "greater",
    "greater_equal",
    "leaky_relu",
    "less",
    "less_equal",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "mul",
    "neg",
    "pow",
    "relu",
    "rsqrt",
    "sigmoid",
    "sign",
    "sqrt",
    "sub",
    "tanh",
    "where",
]
