"""TFLite's integer arithmetic (int8 and uint8 operators), computed as its reference kernels do.

The rules are the TFLite quantization scheme's (the facts, written anew here):
- a real multiplier ``M`` (for a convolution: input scale x filter scale / output scale, in
  double) becomes a 31-bit fixed-point ``q`` and a power-of-two ``shift`` with
  ``M = q * 2**(shift - 31)``: ``frexp``, the mantissa times 2**31 rounded half away from zero
  (``quantize_multiplier``);
- ``x * M`` is ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * 2**max(shift, 0), q),
  max(-shift, 0))``: the high half of the doubled 64-bit product, rounded half away from zero
  (truncating division after a nudge of 2**30), then an arithmetic shift rounded half away from
  zero (``requantize``, on graph values in int64);
- the output zero point is added and the result clamped to the range of the fused activation
  (``activation_range``: the real bounds quantized with halves away from zero).

Integer sums of products are exact here: the operands (x - zero point, |v| <= 255) are
convolved or multiplied in float32 where every partial sum stays below 2**24, else in float64
(``sum_dtype``), then cast to int64. Each converter states what it follows where TFLite's operators differ
(ADD's shared 20-bit left shift, the pools' rounded averages).
"""

from __future__ import annotations

import math

import numpy as np

from ..builder import Tensor, constant
from ..ops import elementwise as E

RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def round_half_away(v: float) -> int:
    """TfLiteRound / std::round of a float: halves away from zero."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def quantize_multiplier(m: float) -> tuple[int, int]:
    """(q, shift) of the real multiplier ``m`` >= 0: ``m = q * 2**(shift - 31)``, q in
    [2**30, 2**31); (0, 0) for 0 and for multipliers below 2**-32."""
    if m == 0.0:
        return 0, 0
    frac, shift = math.frexp(m)
    q = round_half_away(frac * (1 << 31))
    if q == 1 << 31:
        q, shift = q // 2, shift + 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return (1 << 31) - 1, 30
    return q, shift


def sum_dtype(terms: int) -> str:
    """The float type in which sums of ``terms`` products of two int8/uint8 operands (each at
    most 255 and 128 in size after the zero point) are exact whatever their order: float32
    while every partial sum stays below 2**24, float64 beyond (flowc keeps Winograd off
    convolutions with integer weights, codegen/backends/c/winograd.py)."""
    return "float32" if terms * 255 * 128 <= 1 << 24 else "float64"


def _i64(v) -> Tensor:
    return constant(np.asarray(v, dtype=np.int64))


def requantize(acc: Tensor, multipliers, shape, rounding: str = "double") -> Tensor:
    """``acc`` (int64 values of int32 range) times each real multiplier in fixed point, as
    TFLite's MultiplyByQuantizedMultiplier; ``multipliers``: one, or one per channel arranged in
    ``shape`` (broadcasting against ``acc``); ``rounding`` as ``requantize_fixed``'s."""
    qs = [quantize_multiplier(float(m)) for m in np.ravel(multipliers)]
    q = np.array([v for v, _ in qs], np.int64).reshape(shape)
    shift = np.array([s for _, s in qs], np.int64).reshape(shape)
    return requantize_fixed(acc, q, shift, rounding)


def requantize_fixed(acc: Tensor, q: np.ndarray, shift: np.ndarray, rounding: str = "double") -> Tensor:
    """``acc`` times the fixed-point multipliers ``q`` * 2**(``shift`` - 31) (arrays that
    broadcast against it), as TFLite's MultiplyByQuantizedMultiplier: gemmlowp's double
    rounding (LiteRT's convolutions, adds, pools), or with ``rounding="single"`` the 64-bit
    product rounded once, halves up, by an arithmetic shift of 31 - shift (LiteRT's fully
    connected layers)."""
    q, shift = np.asarray(q, np.int64), np.asarray(shift, np.int64)
    if rounding == "single":
        from ..ops import math as M

        total = 31 - shift
        return M.bitshift(E.add(E.mul(acc, _i64(q)), _i64(np.left_shift(1, total - 1))), _i64(total), "right")
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    x = acc if not left.any() else E.mul(acc, _i64(np.left_shift(1, left)))
    # SaturatingRoundingDoublingHighMul(x, q): (x * q + nudge) / 2**31, truncating; the
    # saturating case (x == q == INT32_MIN) cannot occur: q < 2**31
    ab = E.mul(x, _i64(q))
    nudge = E.where(E.greater_equal(ab, _i64(0)), _i64(1 << 30), _i64(1 - (1 << 30)))
    high = E.div(E.add(ab, nudge), _i64(1 << 31))
    if not right.any():
        return high
    return rounding_shift(high, right)


def rounding_shift(x: Tensor, right) -> Tensor:
    """RoundingDivideByPOT(x, right): x >> right (arithmetic), plus one where the bits shifted
    out pass half (half of 2**right less one, one more for a negative x); ``right`` an array of
    shifts (>= 0) broadcasting against ``x``, or a tensor of them."""
    from ..ops import math as M

    shifts = right if isinstance(right, Tensor) else _i64(right)
    mask = E.sub(M.bitshift(_i64(1), shifts, "left"), _i64(1))
    floor = M.bitshift(x, shifts, "right")
    remainder = M.bitwise_and(x, mask)
    threshold = E.add(M.bitshift(mask, _i64(1), "right"), E.where(E.less(x, _i64(0)), _i64(1), _i64(0)))
    return E.add(floor, E.where(E.greater(remainder, threshold), _i64(1), _i64(0)))


def activation_range(code: int, act, scale: float, zero_point: int, dtype: str) -> tuple[int, int]:
    """The quantized bounds of a fused activation (TFLite's CalculateActivationRangeQuantized)."""
    lo, hi = RANGE[dtype]

    def q(v: float) -> int:
        return zero_point + round_half_away(float(np.float32(v) / np.float32(scale)))

    if code == act.NONE:
        return lo, hi
    if code == act.RELU:
        return max(lo, q(0.0)), hi
    if code == act.RELU6:
        return max(lo, q(0.0)), min(hi, q(6.0))
    if code == act.RELU_N1_TO_1:
        return max(lo, q(-1.0)), min(hi, q(1.0))
    raise ValueError(code)


def output(acc: Tensor, zero_point: int, bounds: tuple[int, int], dtype: str) -> Tensor:
    """Requantized int64 ``acc`` plus the output zero point, clamped to ``bounds``, as ``dtype``."""
    v = E.add(acc, _i64(zero_point))
    v = E.minimum(E.maximum(v, _i64(bounds[0])), _i64(bounds[1]))
    return E.cast(v, dtype)


def offset(x: Tensor, zero_point: int) -> Tensor:
    """x - zero_point in int64."""
    v = E.cast(x, "int64")
    return v if zero_point == 0 else E.sub(v, _i64(zero_point))


# ----------------------------------------------------------------------------- softmax
# TFLite's int8/uint8 softmax (its reference kernel, and TFLite Micro's): exp of the scaled
# difference to the row's maximum in gemmlowp's fixed point (Q5.26 in, Q0.31 out), the sum in
# Q12.19, its reciprocal by three Newton-Raphson steps in Q2.29, each output 1/256 steps from
# -128 (or 0 for uint8). The exp of each of the 256 possible differences is a table computed
# here (``_exp_on_negative``); the sum and the reciprocal are per-row graph values.

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _srdhm(a: int, b: int) -> int:
    """SaturatingRoundingDoublingHighMul of two int32 values."""
    if a == b == _INT32_MIN:
        return _INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return _trunc_div(ab + nudge, 1 << 31)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _rdbpot(x: int, exponent: int) -> int:
    """RoundingDivideByPOT: x / 2**exponent, halves away from zero."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def _mul_pot(x: int, exponent: int) -> int:
    """SaturatingRoundingMultiplyByPOT of an int32 value."""
    if exponent <= 0:
        return _rdbpot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    return _INT32_MAX if x > threshold else _INT32_MIN if x < -threshold else x << exponent


def _exp_quarter(a: int) -> int:
    """exp(a) for a in [-1/4, 0), Q0.31 in and out: Taylor around -1/8."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    x4_over_4 = _mul_pot(x4, -2)
    poly = _mul_pot(_srdhm(x4_over_4 + x3, one_third) + x2, -1)
    return constant_term + _srdhm(constant_term, x + poly)


_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
           (4, 242))  # fmt: skip


def _exp_on_negative(a: int, integer_bits: int = 5) -> int:
    """exp(a) for a <= 0 in Q(integer_bits).(31 - integer_bits), result in Q0.31."""
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = (a & (quarter - 1)) - quarter
    result = _exp_quarter(_mul_pot(a_mod, integer_bits))
    remainder = a_mod - a
    for exponent, multiplier in _BARREL:
        if integer_bits > exponent and remainder & (1 << (frac + exponent)):
            result = _srdhm(result, multiplier)
    return _INT32_MAX if a == 0 else result


def softmax(x: Tensor, beta: float, scale: float, dtype: str) -> Tensor:
    """TFLite's quantized softmax over the last axis of ``x`` (int8 or uint8, input ``scale``),
    to ``dtype`` (int8: zero point -128, uint8: 0; scale 1/256)."""
    from ..ops import reduce as R
    from ..ops import shape as X

    real = min(float(np.float32(beta) * np.float32(scale) * np.float32(1 << 26)), float(_INT32_MAX))
    q, left = quantize_multiplier(real)
    left = max(left, 0)
    radius = ((1 << 5) - 1) * (1 << 26) / (1 << left)
    diff_min = -int(math.floor(radius))
    exps = []
    for d in range(256):  # the table, by -(x - max)
        diff = -d
        exps.append(_exp_on_negative(_srdhm(diff * (1 << left), q)) if diff >= diff_min else 0)
    exps = np.array(exps, np.int64)
    summed = np.array([_rdbpot(int(v), 12) for v in exps], np.int64)

    xi = E.cast(x, "int64")
    neg = E.sub(R.reduce_max(xi, axes=(-1,), keepdims=True), xi)  # -(x - max) in [0, 255]
    # the tables as int32 (Q0.31 values and their Q12.19 parts fit): half the weights' bytes
    e = E.cast(X.gather(constant(exps.astype(np.int32)), neg, 0), "int64")
    total = R.reduce_sum(
        E.cast(X.gather(constant(summed.astype(np.int32)), neg, 0), "int64"), axes=(-1,), keepdims=True
    )
    # GetReciprocal(total, 12): the leading zeros, the sum shifted to [1, 2) less one, 1 / (1 + that)
    clz = R.reduce_sum(
        E.cast(E.less(total, _i64([1 << j for j in range(1, 32)])), "int64"), axes=(-1,), keepdims=True
    )
    pow2 = constant(np.array([1 << j for j in range(63)], np.int64))
    a = E.sub(E.mul(total, X.gather(pow2, clz, 0)), _i64(1 << 31))
    half = E.div(E.add(a, _i64(1 << 31)), _i64(2))
    r = E.add(_i64(1515870810), _srdhm_graph(half, _i64(-1010580540)))
    for _ in range(3):
        one_minus = E.sub(_i64(1 << 29), _srdhm_graph(half, r))
        r = E.add(r, _mul_pot_graph(_srdhm_graph(r, one_minus), 2))
    shifted_scale = _mul_pot_graph(r, 1)
    exponent = E.sub(_i64(35), clz)  # num_bits_over_unit + 31 - 8, with num_bits_over_unit = 12 - clz
    unsat = rounding_shift(_srdhm_graph(shifted_scale, e), exponent)
    lo, hi = RANGE[dtype]
    out = E.minimum(E.maximum(E.add(unsat, _i64(lo)), _i64(lo)), _i64(hi))
    out = E.where(E.less(_i64(-diff_min), neg), _i64(lo), out)
    return E.cast(out, dtype)


def _srdhm_graph(a: Tensor, b: Tensor) -> Tensor:
    ab = E.mul(a, b)
    nudge = E.where(E.greater_equal(ab, _i64(0)), _i64(1 << 30), _i64(1 - (1 << 30)))
    return E.div(E.add(ab, nudge), _i64(1 << 31))


def _mul_pot_graph(x: Tensor, exponent: int) -> Tensor:
    threshold = (1 << (31 - exponent)) - 1
    shifted = E.mul(x, _i64(1 << exponent))
    return E.where(E.greater(x, _i64(threshold)), _i64(_INT32_MAX),
                   E.where(E.less(x, _i64(-threshold)), _i64(_INT32_MIN), shifted))  # fmt: skip


# ----------------------------------------------------------------------------- logistic
# TFLite's int8 logistic and tanh (its reference kernels): the input less its zero point,
# clamped at the radius where the result saturates, scaled to Q4.27, gemmlowp's fixed-point
# logistic or tanh in Q0.31, shifted to 8 bits. Each output depends on one input value: a
# table of 256.


def _one_over_one_plus_x(a: int) -> int:
    """1 / (1 + a) for a in [0, 1) in Q0.31: three Newton-Raphson steps in Q2.29."""
    half = (a + _INT32_MAX + 1) // 2  # RoundingHalfSum(a, 1) of a value >= 0
    x = 1515870810 + _srdhm(half, -1010580540)  # 48/17 - 32/17 * half
    for _ in range(3):
        x = x + _mul_pot(_srdhm(x, (1 << 29) - _srdhm(half, x)), 2)
    return _mul_pot(x, 1)


def _logistic_q4(a: int) -> int:
    """logistic(a) for a in Q4.27, result in Q0.31."""
    if a == 0:
        return 1 << 30
    r = _one_over_one_plus_x(_exp_on_negative(-abs(a), 4))
    return r if a > 0 else _INT32_MAX - r


def logistic_table(scale: float, zero_point: int) -> np.ndarray:
    """The int8 outputs (scale 1/256, zero point -128) of TFLite's logistic for the inputs
    -128..127 of ``scale`` and ``zero_point``."""
    return _saturating_table(scale, zero_point, _logistic_q4, 23, -128)


def _one_minus_x_over_one_plus_x(a: int) -> int:
    """(1 - a) / (1 + a) for a in [0, 1) in Q0.31, by the same Newton-Raphson steps."""
    half = (a + _INT32_MAX + 1) // 2
    x = 1515870810 + _srdhm(half, -1010580540)
    for _ in range(3):
        x = x + _mul_pot(_srdhm(x, (1 << 29) - _srdhm(half, x)), 2)
    return _mul_pot(x - (1 << 29), 2)


def _tanh_q4(a: int) -> int:
    """tanh(a) for a in Q4.27, result in Q0.31: (1 - exp(-2|a|)) / (1 + exp(-2|a|)), signed."""
    if a == 0:
        return 0
    t = _one_minus_x_over_one_plus_x(_exp_on_negative(-abs(a), 5))  # -|a| read with 5 integer bits: -2|a|
    return t if a > 0 else -t


def _saturating_table(scale: float, zero_point: int, fn, shift: int, offset: int) -> np.ndarray:
    """int8 outputs of a TFLite reference activation (logistic, tanh) for the inputs -128..127:
    the input less its zero point, saturated beyond the radius, in Q4.27, ``fn`` in Q0.31, then
    divided by 2**``shift`` and moved by ``offset``."""
    q, left = quantize_multiplier(float(np.float32(scale)) * (1 << 27))
    left = max(left, 0)
    radius = int(math.floor(((1 << 4) - 1) * (1 << 27) / (1 << left)))
    out = []
    for v in range(-128, 128):
        d = v - zero_point
        if d <= -radius:
            out.append(-128)
        elif d >= radius:
            out.append(127)
        else:
            out.append(max(-128, min(127, _rdbpot(fn(_srdhm(d * (1 << left), q)), shift) + offset)))
    return np.array(out, np.int8)


def tanh_table(scale: float, zero_point: int) -> np.ndarray:
    """The int8 outputs (scale 1/128, zero point 0) of TFLite's tanh for the inputs -128..127."""
    return _saturating_table(scale, zero_point, _tanh_q4, 24, 0)


# ----------------------------------------------------------------------------- hard swish
# TFLite's int8 hard swish (its reference kernel) works in 16-bit fixed point: the input on a
# 128x finer scale, once rescaled to the output scale and once to a "relu-ish" factor in [0, 1]
# (x + 3) / 6, their product rounded toward zero, then shifted to the output. A table of 256.

_I16_MIN, _I16_MAX = -(1 << 15), (1 << 15) - 1


def _srdhm16(a: int, b: int) -> int:
    if a == b == _I16_MIN:
        return _I16_MAX
    ab = a * b
    return _trunc_div(ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14)), 1 << 15)


def _sdhm16(a: int, b: int) -> int:
    """The doubled high half of a 16-bit product, rounded toward zero."""
    return _I16_MAX if a == b == _I16_MIN else _trunc_div(a * b, 1 << 15)


def _saturating_left16(v: int, amount: int) -> int:
    return max(_I16_MIN, min(_I16_MAX, v * (1 << amount)))


def _multiplier16(m: float) -> tuple[int, int]:
    """A real multiplier as a 16-bit fixed point and an exponent (QuantizeMultiplier, then the
    32-bit fixed point rounded to its high 16 bits)."""
    q, exponent = quantize_multiplier(m)
    return (_I16_MAX if q >= _INT32_MAX - (1 << 15) else (q + (1 << 15)) >> 16), exponent


def hard_swish_table(scale: float, zero_point: int, out_scale: float, out_zero_point: int) -> np.ndarray:
    """The int8 outputs of TFLite's hard swish for the inputs -128..127."""
    hires = np.float32(np.float32(1.0 / 128.0) * np.float32(scale))
    out_q, out_exp = _multiplier16(float(np.float32(hires / np.float32(out_scale))))
    relu_q, relu_exp = _multiplier16(float(np.float32(hires / np.float32(3.0 / 32768.0))))
    out = []
    for v in range(-128, 128):
        hi = (v - zero_point) * (1 << 7)
        preshift = _srdhm16(hi, out_q)
        r = _saturating_left16(hi, relu_exp - 1) if relu_exp > 0 else hi
        r = _srdhm16(r, relu_q)
        if relu_exp > 0:
            r = _saturating_left16(r, 1)
        elif relu_exp < 0:
            r = _rdbpot(r, -relu_exp)
        r = (r + (1 << 15)) >> 1  # [-1, 1] to [0, 1]
        out.append(max(-128, min(127, _rdbpot(_sdhm16(r, preshift), -out_exp) + out_zero_point)))
    return np.array(out, np.int8)


def mean_multiplier(scale: float, out_scale: float, count: int) -> tuple[int, int]:
    """(q, shift) of TFLite's quantized mean over ``count`` values: the multiplier of
    scale / out_scale with 1/count folded in (the multiplier shifted left by floor(log2(count)),
    at most 32 and 31 + its shift, then divided by the count, truncating)."""
    q, shift = quantize_multiplier(float(scale) / float(out_scale))
    bits = min(count.bit_length() - 1, 32, 31 + shift)
    return (q << bits) // count, shift - bits
