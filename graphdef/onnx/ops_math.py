"""ONNX converters for more elementwise math, bitwise ops and the cumulative ops.

Opset notes: BitShift before opset 28 is defined for unsigned types only (flowc has uint8);
opset 28 adds signed types, whose semantics flowc's ``bitshift`` follows at every opset.
Mod's ``fmod=0`` on floats became valid in opset 28; flowc computes it (np.mod) at every
opset. CumSum/CumProd take the axis as an input, which must be known at import time.
"""

from __future__ import annotations

from ..ops import math as M
from .importer import converter


def _unary(op_type, fn, since):
    converter(op_type, since)(lambda node: fn(node.tensor(0)))


for _op, _fn, _since in (
    ("Sin", M.sin, 7),
    ("Cos", M.cos, 7),
    ("Tan", M.tan, 7),
    ("Asin", M.asin, 7),
    ("Acos", M.acos, 7),
    ("Atan", M.atan, 7),
    ("Sinh", M.sinh, 9),
    ("Cosh", M.cosh, 9),
    ("Asinh", M.asinh, 9),
    ("Acosh", M.acosh, 9),
    ("Atanh", M.atanh, 9),
    ("Floor", M.floor, 1),
    ("Ceil", M.ceil, 1),
    ("Round", M.round, 11),
    ("IsNaN", M.isnan, 9),
    ("BitwiseNot", M.bitwise_not, 18),
):
    _unary(_op, _fn, _since)


@converter("IsInf", 10)
def _isinf(node):
    return M.isinf(
        node.tensor(0), bool(node.attr("detect_positive", 1)), bool(node.attr("detect_negative", 1))
    )


@converter("Swish", 24)
def _swish(node):
    return M.swish(node.tensor(0), node.attr("alpha", 1.0))


@converter("Mod", 10)
def _mod(node):
    fmod = node.attr("fmod", 0)
    if fmod not in (0, 1):
        raise node.unsupported(f"fmod must be 0 or 1, got {fmod}")
    return M.mod(node.tensor(0), node.tensor(1), bool(fmod))


def _bitwise(op_type, fn):
    converter(op_type, 18)(lambda node: fn(node.tensor(0), node.tensor(1)))


_bitwise("BitwiseAnd", M.bitwise_and)
_bitwise("BitwiseOr", M.bitwise_or)
_bitwise("BitwiseXor", M.bitwise_xor)


@converter("BitShift", 11)
def _bitshift(node):
    direction = node.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise node.unsupported(f"direction must be LEFT or RIGHT, got {direction!r}")
    return M.bitshift(node.tensor(0), node.tensor(1), direction.lower())


def _cumulative(op_type, fn, since):
    @converter(op_type, since)
    def convert(node):
        axis = node.const(1, "(axis) ")
        if axis.size != 1 or axis.ndim > 1:
            raise node.unsupported(f"axis must hold one value, got shape {list(axis.shape)}")
        return fn(
            node.tensor(0),
            int(axis.reshape(-1)[0]),
            bool(node.attr("exclusive", 0)),
            bool(node.attr("reverse", 0)),
        )


_cumulative("CumSum", M.cumsum, 11)
_cumulative("CumProd", M.cumprod, 26)
