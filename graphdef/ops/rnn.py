"""Recurrent cells: one time step of an LSTM or a GRU as one op.

The ONNX importer (graphdef/onnx/ops_rnn.py) computes the input projection ``X @ W^T + bias``
of every time step as one gemm before the recurrence; each step is then one of these ops, so
that a backend runs the recurrent product ``h @ r`` and the gate activations of a step as
one kernel instead of a chain of small steps. Gates are laid out as in ONNX:

- ``lstm_cell(gates, r, h?, c?) -> (h_t, c_t)``: gates [batch, 4*hidden] in the order
  input, output, forget, cell (i, o, f, c); r [hidden, 4*hidden] (ONNX's R transposed, so
  that ``a = gates + h @ r``); h, c [batch, hidden]. With i, o, f = sigmoid(a_i, a_o, a_f)
  and g = tanh(a_c): ``c_t = f * c + i * g``, ``h_t = o * tanh(c_t)``.
- ``gru_cell(gates, r, rbh, h?) -> h_t``: gates [batch, 3*hidden] in the order update,
  reset, hidden (z, r, h); r [hidden, 3*hidden]; rbh [hidden], the recurrent bias of the
  hidden gate, which ONNX keeps apart from the others. With
  ``z, q = sigmoid(gates_zr + h @ r_zr)``: ``n = tanh(gates_h + (q * h) @ r_h + rbh)``
  (``linear_before_reset`` false) or ``n = tanh(gates_h + q * (h @ r_h + rbh))`` (true,
  what PyTorch exports); ``h_t = (1 - z) * n + z * h``.

An absent ``h`` (or ``c``) is the zero state, so the first step of a sequence without an
initial state has no recurrent product. float16 computes in float32 and rounds the outputs,
as the C kernels do. Gradients are the analytic ones, as graph ops.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import apply, fill, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import KERNEL, Attr, Example, Sample, defop
from ._util import same_dtype
from .elementwise import add, mul, sigmoid, sub, tanh
from .products import gemm, matmul
from .reduce import reduce_sum
from .shape import concat, split, transpose


def _acc(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _sig(x):
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _cell_types(op: str, gates_per: int, types, names) -> tuple[int, int, str]:
    """(batch, hidden, dtype) of a cell's inputs, or a ShapeError naming the wrong one."""
    dt = same_dtype(types, dtypes.FLOATS)
    g, r = types[0], types[1]
    if g.rank != 2 or r.rank != 2:
        raise ShapeError(f"{op} needs 2-D gates and r, got {g.shape} and {r.shape}")
    batch, hidden = g.shape[0], r.shape[0]
    want = {"gates": (batch, gates_per * hidden), "r": (hidden, gates_per * hidden),
            "h": (batch, hidden), "c": (batch, hidden), "rbh": (hidden,)}  # fmt: skip
    for name, t in zip(names, types):
        if t.shape != want[name]:
            raise ShapeError(f"{op}: {name} has shape {t.shape}, expected {want[name]} "
                             f"(batch {batch}, hidden {hidden} from gates and r)")  # fmt: skip
    return batch, hidden, dt


def _flops(gates_per: int, h_at: int, per_element: int):
    """Operations of ``h @ r`` (when input ``h_at``, the state, is given) and of the gates."""

    def flops(ins, outs, attrs):
        batch, hidden = outs[0].shape
        recurrent = 2 * batch * hidden * gates_per * hidden if len(ins) > h_at else 0
        return recurrent + per_element * batch * hidden

    return flops


# ----------------------------------------------------------------------------- lstm_cell
_LSTM_INPUTS = ("gates", "r", "h", "c")


def _lstm_infer(types, attrs):
    batch, hidden, dt = _cell_types("lstm_cell", 4, types, _LSTM_INPUTS)
    return TensorType((batch, hidden), dt), TensorType((batch, hidden), dt)


def _lstm_ref(xs, attrs):
    gates, r = _acc(xs[0]), _acc(xs[1])
    a = gates if len(xs) < 3 else gates + _acc(xs[2]) @ r
    i, o, f, g = np.split(a, 4, axis=1)
    i, o, f, g = _sig(i), _sig(o), _sig(f), np.tanh(g)
    c = i * g if len(xs) < 4 else f * _acc(xs[3]) + i * g
    h = o * np.tanh(c)
    return h.astype(xs[0].dtype), c.astype(xs[0].dtype)


def _g_lstm(op, gys):
    gates, r = op.inputs[:2]
    h = op.inputs[2] if len(op.inputs) > 2 else None
    c = op.inputs[3] if len(op.inputs) > 3 else None
    ct = op.outputs[1]
    gh = gys[0] if gys[0] is not None else fill(ct.shape, 0, ct.dtype)
    a = gates if h is None else gemm(h, r, gates)
    i, o, f, g = split(a, 4, axis=1)
    i, o, f, g = sigmoid(i), sigmoid(o), sigmoid(f), tanh(g)
    tc = tanh(ct)
    dc = mul(mul(gh, o), sub(1.0, mul(tc, tc)))
    if gys[1] is not None:
        dc = add(dc, gys[1])
    dsig = lambda s: mul(s, sub(1.0, s))  # noqa: E731 - sigmoid' from its value
    da = concat(
        [
            mul(mul(dc, g), dsig(i)),
            mul(mul(gh, tc), dsig(o)),
            mul(mul(dc, c), dsig(f)) if c is not None else fill(i.shape, 0, i.dtype),
            mul(mul(dc, i), sub(1.0, mul(g, g))),
        ],
        axis=1,
    )
    out = (op.want(0, lambda: da), op.want(1, lambda: _dr(h, da, r)))
    if h is not None:
        out += (op.want(2, lambda: matmul(da, transpose(r))),)
    if c is not None:
        out += (op.want(3, lambda: mul(dc, f)),)
    return out


def _dr(h, da, r):
    """d r of ``h @ r`` (zeros when h is the absent zero state)."""
    return fill(r.shape, 0, r.dtype) if h is None else matmul(transpose(h), da)


def _lstm_expect(*xs):
    """Element by element in Python floats (float64): independent of the numpy reference."""
    gates, r = xs[0], xs[1]
    batch, hidden = gates.shape[0], r.shape[0]
    h0 = xs[2] if len(xs) > 2 else np.zeros((batch, hidden))
    c0 = xs[3] if len(xs) > 3 else np.zeros((batch, hidden))
    hs, cs = np.zeros((batch, hidden)), np.zeros((batch, hidden))
    for b in range(batch):
        for j in range(hidden):
            a = [float(gates[b, q * hidden + j]) + sum(float(h0[b, k]) * float(r[k, q * hidden + j])
                                                       for k in range(hidden)) for q in range(4)]  # fmt: skip
            i, o, f, g = _sigmoid1(a[0]), _sigmoid1(a[1]), _sigmoid1(a[2]), math.tanh(a[3])
            cs[b, j] = f * float(c0[b, j]) + i * g
            hs[b, j] = o * math.tanh(cs[b, j])
    return hs, cs


def _sigmoid1(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _lstm_sample(batch, hidden, dtype="float32", states=2):
    shapes = [(batch, 4 * hidden), (hidden, 4 * hidden), (batch, hidden), (batch, hidden)][: 2 + states]
    return tuple(Sample(s, dtype, -1.5, 1.5) for s in shapes)


defop(
    "lstm_cell",
    ("gates", "r", "h?", "c?"),
    _lstm_infer,
    _lstm_ref,
    _g_lstm,
    kind=KERNEL,
    flops=_flops(4, 2, 12),
    doc="one LSTM time step: a = gates + h @ r, gates i, o, f, c (ONNX order); "
    "c_t = sigmoid(a_f) * c + sigmoid(a_i) * tanh(a_c), h_t = sigmoid(a_o) * tanh(c_t); "
    "absent h, c are zeros",
    examples=(
        Example(_lstm_sample(2, 3), expect=_lstm_expect),
        Example(_lstm_sample(1, 5, states=0), expect=_lstm_expect),  # the first step: no state
        Example(_lstm_sample(3, 2, states=1), expect=_lstm_expect),  # h given, c zero
        Example(_lstm_sample(2, 4, "float64"), expect=_lstm_expect),
        Example(_lstm_sample(2, 3, "float16"), expect=_lstm_expect, grad=False),
    ),
)


def lstm_cell(gates, r, h=None, c=None, name=None):
    """``(h_t, c_t)`` of one LSTM step (see the module docstring); ``c`` needs ``h`` (pass
    zeros for a zero ``h`` with a given ``c``)."""
    if c is not None and h is None:
        raise ShapeError("lstm_cell: c given without h (pass zeros for a zero h)")
    ins = [operand(gates), operand(r)] + [operand(v) for v in (h, c) if v is not None]
    return apply("lstm_cell", ins, name)


# ----------------------------------------------------------------------------- gru_cell
_GRU_INPUTS = ("gates", "r", "rbh", "h")


def _gru_infer(types, attrs):
    batch, hidden, dt = _cell_types("gru_cell", 3, types, _GRU_INPUTS)
    return TensorType((batch, hidden), dt)


def _gru_ref(xs, attrs):
    gates, r, rbh = _acc(xs[0]), _acc(xs[1]), _acc(xs[2])
    hidden = r.shape[0]
    h = _acc(xs[3]) if len(xs) > 3 else np.zeros((gates.shape[0], hidden), gates.dtype)
    zr = gates[:, : 2 * hidden] + h @ r[:, : 2 * hidden]
    z, q = _sig(zr[:, :hidden]), _sig(zr[:, hidden:])
    r_h = r[:, 2 * hidden :]
    if attrs["linear_before_reset"]:
        n = np.tanh(gates[:, 2 * hidden :] + q * (h @ r_h + rbh))
    else:
        n = np.tanh(gates[:, 2 * hidden :] + (q * h) @ r_h + rbh)
    return ((1 - z) * n + z * h).astype(xs[0].dtype)


def _g_gru(op, gys):
    gates, r, rbh = op.inputs[:3]
    h = op.inputs[3] if len(op.inputs) > 3 else None
    gy = gys[0]
    hidden = r.shape[0]
    g_zr, g_h = split(gates, (2 * hidden, hidden), axis=1)
    r_zr, r_h = split(r, (2 * hidden, hidden), axis=1)
    z, q = split(sigmoid(g_zr if h is None else gemm(h, r_zr, g_zr)), 2, axis=1)
    linear = op.attrs["linear_before_reset"]
    if linear:
        lin = rbh if h is None else gemm(h, r_h, rbh)
        n = tanh(add(g_h, mul(q, lin)))
    else:
        qh = None if h is None else mul(q, h)
        n = tanh(add(g_h, rbh) if qh is None else gemm(qh, r_h, add(g_h, rbh)))
    dsig = lambda s: mul(s, sub(1.0, s))  # noqa: E731 - sigmoid' from its value
    dn = mul(mul(gy, sub(1.0, z)), sub(1.0, mul(n, n)))  # d of n's pre-activation
    dz = mul(gy, sub(0.0, n) if h is None else sub(h, n))
    dh = None if h is None else mul(gy, z)
    if linear:
        dq = mul(dn, lin)
        dlin = mul(dn, q)
        drbh = reduce_sum(dlin, [0])
        dr_h = _dr(h, dlin, r_h)
        if h is not None:
            dh = add(dh, matmul(dlin, transpose(r_h)))
    else:
        drbh = reduce_sum(dn, [0])
        dr_h = _dr(qh, dn, r_h)
        if h is None:
            dq = fill(q.shape, 0, q.dtype)
        else:
            dqh = matmul(dn, transpose(r_h))
            dq = mul(dqh, h)
            dh = add(dh, mul(dqh, q))
    da_zr = concat([mul(dz, dsig(z)), mul(dq, dsig(q))], axis=1)
    if h is not None:
        dh = add(dh, matmul(da_zr, transpose(r_zr)))
    out = (
        op.want(0, lambda: concat([da_zr, dn], axis=1)),
        op.want(1, lambda: concat([_dr(h, da_zr, r_zr), dr_h], axis=1)),
        op.want(2, lambda: drbh),
    )
    return out + ((op.want(3, lambda: dh),) if h is not None else ())


def _gru_expect(linear: bool):
    def expect(*xs):
        gates, r, rbh = xs[0], xs[1], xs[2]
        batch, hidden = gates.shape[0], r.shape[0]
        h = xs[3] if len(xs) > 3 else np.zeros((batch, hidden))
        out = np.zeros((batch, hidden))

        def rec(b, col, q=None):  # sum_k v[k] * r[k, col], v = h[b] or q * h[b]
            return sum((q[k] if q is not None else 1.0) * float(h[b, k]) * float(r[k, col])
                       for k in range(hidden))  # fmt: skip

        for b in range(batch):
            z = [_sigmoid1(float(gates[b, j]) + rec(b, j)) for j in range(hidden)]
            q = [_sigmoid1(float(gates[b, hidden + j]) + rec(b, hidden + j)) for j in range(hidden)]
            for j in range(hidden):
                col = 2 * hidden + j
                if linear:
                    pre = float(gates[b, col]) + q[j] * (rec(b, col) + float(rbh[j]))
                else:
                    pre = float(gates[b, col]) + rec(b, col, q) + float(rbh[j])
                out[b, j] = (1 - z[j]) * math.tanh(pre) + z[j] * float(h[b, j])
        return out

    return expect


def _gru_sample(batch, hidden, dtype="float32", state=True):
    shapes = [(batch, 3 * hidden), (hidden, 3 * hidden), (hidden,), (batch, hidden)][: 4 if state else 3]
    return tuple(Sample(s, dtype, -1.5, 1.5) for s in shapes)


defop(
    "gru_cell",
    ("gates", "r", "rbh", "h?"),
    _gru_infer,
    _gru_ref,
    _g_gru,
    attrs={"linear_before_reset": Attr("bool", False)},
    kind=KERNEL,
    flops=_flops(3, 3, 10),
    doc="one GRU time step: z, q = sigmoid(gates_zr + h @ r_zr) (ONNX order z, r, h); "
    "n = tanh(gates_h + (q * h) @ r_h + rbh), or tanh(gates_h + q * (h @ r_h + rbh)) with "
    "linear_before_reset; h_t = (1 - z) * n + z * h; an absent h is zeros",
    examples=(
        Example(_gru_sample(2, 3), {}, _gru_expect(False)),
        Example(_gru_sample(2, 3), {"linear_before_reset": True}, _gru_expect(True)),
        Example(_gru_sample(1, 4, state=False), {}, _gru_expect(False)),  # the first step: no state
        Example(_gru_sample(3, 2, state=False), {"linear_before_reset": True}, _gru_expect(True)),
        Example(_gru_sample(2, 5, "float64"), {"linear_before_reset": True}, _gru_expect(True)),
        Example(_gru_sample(2, 3, "float16"), {}, _gru_expect(False), grad=False),
    ),
)


def gru_cell(gates, r, rbh, h=None, linear_before_reset=False, name=None):
    """``h_t`` of one GRU step (see the module docstring)."""
    ins = [operand(gates), operand(r), operand(rbh)] + ([operand(h)] if h is not None else [])
    return apply("gru_cell", ins, name, linear_before_reset=linear_before_reset)


__all__ = ["gru_cell", "lstm_cell"]
