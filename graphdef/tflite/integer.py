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
convolved or multiplied in float64, where every partial sum of these sizes is an integer below
2**53, then cast to int64. Each converter states what it follows where TFLite's operators differ
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


def _i64(v) -> Tensor:
    return constant(np.asarray(v, dtype=np.int64))


def requantize(acc: Tensor, multipliers, shape) -> Tensor:
    """``acc`` (int64 values of int32 range) times each real multiplier in fixed point, as
    TFLite's MultiplyByQuantizedMultiplier; ``multipliers``: one, or one per channel arranged in
    ``shape`` (broadcasting against ``acc``)."""
    qs = [quantize_multiplier(float(m)) for m in np.ravel(multipliers)]
    q = np.array([v for v, _ in qs], np.int64).reshape(shape)
    shift = np.array([s for _, s in qs], np.int64).reshape(shape)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    x = acc if not left.any() else E.mul(acc, _i64(np.left_shift(1, left)))
    # SaturatingRoundingDoublingHighMul(x, q): (x * q + nudge) / 2**31, truncating; the
    # saturating case (x == q == INT32_MIN) cannot occur: q < 2**31
    ab = E.mul(x, _i64(q))
    nudge = E.where(E.greater_equal(ab, _i64(0)), _i64(1 << 30), _i64(1 - (1 << 30)))
    high = E.div(E.add(ab, nudge), _i64(1 << 31))
    if not right.any():
        return high
    # RoundingDivideByPOT(high, right): floor(high / 2**right), plus one where the remainder
    # passes half (half of the divisor less one, one more for a negative value)
    d = np.left_shift(1, right)
    t = E.div(high, _i64(d))
    floor = E.sub(t, E.where(E.less(E.sub(high, E.mul(t, _i64(d))), _i64(0)), _i64(1), _i64(0)))
    remainder = E.sub(high, E.mul(floor, _i64(d)))
    threshold = E.add(_i64((d - 1) // 2), E.where(E.less(high, _i64(0)), _i64(1), _i64(0)))
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
