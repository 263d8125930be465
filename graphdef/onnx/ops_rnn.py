"""ONNX recurrent layers (LSTM, GRU, RNN): a loop over one cell step, or unrolled when short.

A layer over more than ``UNROLL_STEPS`` time steps becomes one loop per direction
(graphdef/ops/control.py), compiled into C loops planned once, so that its code and arena do
not depend on the sequence length. The loop runs over chunks of ``CHUNK_STEPS`` time steps:
its body gathers the chunk's inputs (a reverse direction: from the last time step down),
projects them with one gemm, and runs an inner loop of one cell step an iteration, which
carries h (and c) and reads its row of the chunk's projection. A sequence the chunks do not
divide pads its last chunk (its projection reads the last time step again; the inner loop's
run-time trip count stops at the sequence's end). ``Y`` is scanned (one row an iteration; a
reverse direction's rows flipped after the loop) only when the model reads it: a layer whose
Y is unnamed, or read by no node and no graph output, keeps no per-step values. ``Y_h`` /
``Y_c`` are the final carried values. A short layer is unrolled, one cell per step and
direction, after one gemm for the input projection of every step and direction. The graph's
notes (``flowc inspect``) say which layers became loops and which were unrolled.

An LSTM or GRU with the default activations (sigmoid, tanh), no clip, no peepholes and no
``input_forget`` runs each step as one ``lstm_cell`` / ``gru_cell`` op (graphdef/ops/rnn.py:
``H @ R^T`` and the gate activations in one kernel); other variants, and RNN, as a chain of
ordinary ops: ``H @ R^T`` (one small gemm that takes the step's projection as its ``c``
term), then the gates split and activated. On a 2-layer GRU(64, 128) over 32 steps (batch 1,
one thread, AVX-512 host) the cells run the model in 0.14 ms against 0.86 ms for the chain
(LSTM: 0.20 against 1.33 ms). Outputs follow ONNX: ``Y`` [seq, dirs, batch, hidden]
(``layout=1``: [batch, seq, dirs, hidden]), ``Y_h`` and ``Y_c`` [dirs, batch, hidden]
(``layout=1``: [batch, dirs, hidden]).

Weights given as initializers are sliced with numpy at import time, so the graph holds
plain per-direction constants; weights fed as graph inputs are sliced with graph ops (before
a loop, which reads them as captures). A missing ``initial_h`` / ``initial_c`` (or an all-zero
constant one) is a zero state: an unrolled layer drops the recurrent terms of its first step
instead of multiplying by zeros; a loop starts from zeros.

Pitfalls, resolved the way onnxruntime does:

- ``activation_alpha`` / ``activation_beta`` are consumed in order by the activations that
  take an alpha (or a beta), not position by position. A value the lists do not give takes
  the default of the ONNX operator of that name (LeakyRelu 0.01, HardSigmoid 0.2 / 0.5,
  Elu 1.0, ThresholdedRelu 1.0, Affine 1.0 / 0.0); ScaledTanh has no ONNX default and is
  refused without explicit values. (onnxruntime uses 0 for ThresholdedRelu and Affine.)
- ``clip`` bounds the input of every gate activation (after bias and peephole terms), not
  the cell state.
- ``input_forget=1`` (LSTM) sets the forget gate to ``1 - i`` after i's activation.
- ``sequence_lens`` must be a constant whose entries all equal seq_length: padding-aware
  recurrence would need per-batch-entry step counts, which a static number of steps cannot give.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import dtypes
from ..builder import Tensor, constant, fill
from ..ops import elementwise as E
from ..ops import nn as N
from ..ops import rnn as C
from ..ops import shape as S
from ..ops.control import loop
from .importer import OnnxImportError, converter

# A layer of at most this many time steps is unrolled (one cell per step and direction), a
# longer one is a loop. Unrolled, a first step without initial state skips its recurrent
# product (a loop multiplies zeros) and no step copies its input or state; measured against a
# loop (host, GRU and LSTM of 128, alternate runs): 2-16% faster up to 8 steps without initial
# state, the same with one; on cortex-m4 the unrolled code is about the loop's size at 8 steps
# (LSTM(64, 128): 2,151 bytes against 2,308 at 4 steps, 2,435 against 2,312 at 8) but its arena
# larger from 4 on (it holds every step's projection). Longer, the loop is smaller in code and
# arena and as fast.
UNROLL_STEPS = 8
# A loop computes the input projection X @ W^T of this many time steps at a time (one gemm),
# then runs them one cell step an iteration of an inner loop. One gemm over all steps before
# the loop kept the per-step speed but holds [seq, batch, gates*hidden] in the arena; a
# projection of each step in the body (x_t @ W^T) reads W once a step and cost 4-15% of the
# per-step time (host, hidden 128); chunks of 8, 16 and 32 steps all ran as fast as the
# unrolled code (tests/codegen/test_rnn_loops.py), 8 holds the least.
CHUNK_STEPS = 8

# ----------------------------------------------------------------------------- activations


def _softplus(x, a, b):
    # log(1 + e^x) without overflow: max(x, 0) + log(1 + e^-|x|)
    return E.add(E.relu(x), E.log(E.add(E.exp(E.neg(E.abs(x))), 1.0)))


# lower-cased name: (fn(x, alpha, beta), alpha default, beta default); "-" = not used,
# None = used but without an ONNX default
_ACTIVATIONS: dict[str, tuple[Callable, float | str | None, float | str | None]] = {
    "sigmoid": (lambda x, a, b: E.sigmoid(x), "-", "-"),
    "tanh": (lambda x, a, b: E.tanh(x), "-", "-"),
    "relu": (lambda x, a, b: E.relu(x), "-", "-"),
    "softsign": (lambda x, a, b: E.div(x, E.add(E.abs(x), 1.0)), "-", "-"),
    "softplus": (_softplus, "-", "-"),
    "leakyrelu": (lambda x, a, b: E.leaky_relu(x, a), 0.01, "-"),
    "elu": (lambda x, a, b: E.elu(x, a), 1.0, "-"),
    "thresholdedrelu": (lambda x, a, b: E.where(E.greater(x, a), x, 0.0), 1.0, "-"),
    "hardsigmoid": (lambda x, a, b: E.clip(E.add(E.mul(x, a), b), 0.0, 1.0), 0.2, 0.5),
    "affine": (lambda x, a, b: E.add(E.mul(x, a), b), 1.0, 0.0),
    "scaledtanh": (lambda x, a, b: E.mul(E.tanh(E.mul(x, b)), a), None, None),
}


@dataclass(frozen=True)
class _Act:
    name: str
    fn: Callable
    alpha: float | None
    beta: float | None

    def __call__(self, x: Tensor) -> Tensor:
        return self.fn(x, self.alpha, self.beta)


def _activations(node, defaults: list[str], dirs: int) -> list[list[_Act]]:
    """The activation functions of each direction: [[f, g, h] per direction] for LSTM."""
    names = node.attr("activations") or defaults * dirs
    per = len(defaults)
    if len(names) != per * dirs:
        raise _bad(node, f"{len(names)} activations given; {node.op} needs {per} per direction "
                         f"({per * dirs} for {dirs} direction{'s' if dirs > 1 else ''})")
    alphas = iter(node.attr("activation_alpha") or [])
    betas = iter(node.attr("activation_beta") or [])
    acts = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise node.unsupported(f"activation '{name}' is not one ONNX defines for recurrent layers "
                                   f"({', '.join(sorted(_ACTIVATIONS))})")
        fn, alpha_default, beta_default = _ACTIVATIONS[key]
        params = []
        for default, values, what in ((alpha_default, alphas, "alpha"), (beta_default, betas, "beta")):
            value = None if default == "-" else next(values, default)
            if value is None and default != "-":
                raise node.unsupported(f"activation '{name}' needs an explicit activation_{what}: "
                                       "ONNX defines no default for it")
            params.append(value)
        acts.append(_Act(key, fn, *params))
    return [acts[d * per:(d + 1) * per] for d in range(dirs)]


# ----------------------------------------------------------------------------- values
# Inputs are numpy arrays (initializers, known at import time) or Tensors (graph inputs);
# these helpers keep numpy values numpy so that constant weights stay plain constants.


def _t(v) -> Tensor:
    return v if isinstance(v, Tensor) else constant(v)


def _cols(v, lo: int, hi: int):
    """v[..., lo:hi]."""
    if isinstance(v, np.ndarray):
        return v[..., lo:hi]
    return S.slice_(v, [lo], [hi], axes=[-1])


def _row(v, d: int):
    """v[d] (drops the leading axis)."""
    if isinstance(v, np.ndarray):
        return v[d]
    return S.reshape(S.slice_(v, [d], [d + 1], axes=[0]), v.shape[1:])


def _rows(v, lo: int, hi: int):
    """v[lo:hi]."""
    if isinstance(v, np.ndarray):
        return v[lo:hi]
    return S.slice_(v, [lo], [hi], axes=[0])


def _plus(a, b):
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a + b
    return E.add(_t(a), _t(b))


def _cat(vs, axis: int):
    if all(isinstance(v, np.ndarray) for v in vs):
        return np.concatenate(vs, axis=axis)
    return S.concat([_t(v) for v in vs], axis=axis)


def _is_zero(v) -> bool:
    return isinstance(v, np.ndarray) and not np.any(v)


# ----------------------------------------------------------------------------- common part


@dataclass
class _Layer:
    """What the three ops share: checked shapes, per-direction weights and activations."""

    dirs: int
    reverse: list[bool]  # per direction: run from the last time step to the first
    layout: int
    seq: int
    batch: int
    hidden: int
    dtype: str
    x: Tensor  # [seq, batch, input] (layout=1: [batch, seq, input])
    w: object  # [dirs, gates*hidden, input]
    r: list  # per direction [gates*hidden, hidden]
    b: object  # [dirs, 2*gates*hidden] or None
    h0: list  # per direction [batch, hidden] or None
    acts: list[list[_Act]]
    clip: float | None

    def gate(self, x: Tensor, act: _Act) -> Tensor:
        """act(clip(x)): ONNX clips the input of every gate activation."""
        if self.clip is not None:
            x = E.clip(x, -self.clip, self.clip)
        return act(x)

    def default_gates(self, names: list[str]) -> bool:
        """Whether every direction has these activations (no alpha or beta) and no clip: the
        cases the lstm_cell and gru_cell ops compute."""
        return self.clip is None and all([a.name for a in acts] == names for acts in self.acts)

    def project(self, bias: list | None) -> list[list[Tensor]]:
        """X @ W^T + bias for every time step and direction, as one gemm: [dir][t] -> [batch, G*hidden]."""
        seq, batch = self.seq, self.batch
        x = S.transpose(self.x, (1, 0, 2)) if self.layout == 1 else self.x
        rows = S.reshape(x, (seq * batch, x.shape[2]))
        w = self.w
        w_all = w.reshape(-1, w.shape[2]) if isinstance(w, np.ndarray) else S.reshape(w, (-1, w.shape[2]))
        c = None if bias is None else _t(_cat(bias, 0))
        proj = N.gemm(rows, _t(w_all), c, trans_b=True)  # [seq*batch, dirs*G*hidden]
        parts = S.split(proj, self.dirs, axis=1) if self.dirs > 1 else (proj,)
        return [list(S.split(p, seq, axis=0)) if seq > 1 else [p] for p in parts]

    def initial(self, node, i: int, what: str) -> list:
        """An initial state (input i) per direction as [batch, hidden], or None when absent or zero."""
        if not node.has(i):
            return [None] * self.dirs
        v = node.inputs[i]
        want = (self.dirs, self.batch, self.hidden)
        if self.layout == 1:
            want = (self.batch, self.dirs, self.hidden)
        _check(node, i, what, want, self.dtype)
        if _is_zero(v):
            return [None] * self.dirs
        if self.layout == 1:
            v = np.swapaxes(v, 0, 1) if isinstance(v, np.ndarray) else S.transpose(v, (1, 0, 2))
        return [_row(v, d) for d in range(self.dirs)]

    def outputs(self, node, ys: list | None, finals: list[list[Tensor]]) -> list:
        """Y from ``ys`` (per direction: the steps' h in time order, a list of [batch, hidden]
        or one [seq, batch, hidden]; None: Y is not read), then Y_h, Y_c... from finals[k][dir],
        in ONNX's shapes and layout."""
        outs = []
        if node.num_outputs > 0:
            outs.append(None if ys is None else self._y(ys))
        for states in finals[: max(node.num_outputs - 1, 0)]:
            s = S.concat(states, axis=0) if self.dirs > 1 else states[0]
            s = S.reshape(s, (self.dirs, self.batch, self.hidden))
            outs.append(S.transpose(s, (1, 0, 2)) if self.layout == 1 else s)
        return outs

    def _y(self, ys: list) -> Tensor:
        seq, dirs, batch, hidden = self.seq, self.dirs, self.batch, self.hidden
        if isinstance(ys[0], list):  # unrolled: one concat of every step and direction
            pieces = [ys[d][t] for t in range(seq) for d in range(dirs)]
            y = S.concat(pieces, axis=0) if len(pieces) > 1 else pieces[0]
        else:
            y = S.concat([S.reshape(v, (seq, 1, batch, hidden)) for v in ys], axis=1) if dirs > 1 else ys[0]
        y = S.reshape(y, (seq, dirs, batch, hidden))
        return S.transpose(y, (2, 0, 1, 3)) if self.layout == 1 else y


def _bad(node, reason: str) -> OnnxImportError:
    """A malformed node (shapes or attributes the ONNX spec does not allow)."""
    return OnnxImportError(f"{node.where()}: {reason}")


def _check(node, i: int, what: str, want: tuple, dtype: str) -> None:
    shape, got = node.shape(i), node.dtype(i)
    if shape != want:
        raise _bad(node, f"input {what} has shape {list(shape)}, expected {list(want)}")
    if got != dtype:
        raise _bad(node, f"input {what} is {got}, X is {dtype}")


def _layer(node, gates: int, default_acts: list[str]) -> _Layer:
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise _bad(node, f"direction '{direction}' is not forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    layout = node.attr("layout", 0)
    if layout not in (0, 1):
        raise _bad(node, f"layout {layout} is not 0 or 1")
    for i, what in ((0, "X"), (1, "W"), (2, "R")):
        if not node.has(i):
            raise _bad(node, f"input {what} is missing")
    dtype = node.dtype(0)
    if not dtypes.is_float(dtype):
        raise node.unsupported(f"X is {dtype}; recurrent layers take float16, float32 or float64")
    xshape = node.shape(0)
    if len(xshape) != 3:
        raise _bad(node, f"X has shape {list(xshape)}, expected rank 3")
    seq, batch, inputs = xshape if layout == 0 else (xshape[1], xshape[0], xshape[2])
    rshape = node.shape(2)
    if len(rshape) != 3:
        raise _bad(node, f"R has shape {list(rshape)}, expected [{dirs}, {gates}*hidden, hidden]")
    hidden = rshape[2]
    if 0 in (seq, batch, hidden):
        raise node.unsupported(f"X has shape {list(xshape)} and R {list(rshape)}: an empty sequence, batch "
                               "or hidden state is not supported")
    if node.attr("hidden_size") is not None and node.attr("hidden_size") != hidden:
        raise _bad(node, f"hidden_size {node.attr('hidden_size')} but R has shape {list(rshape)}")
    _check(node, 1, "W", (dirs, gates * hidden, inputs), dtype)
    _check(node, 2, "R", (dirs, gates * hidden, hidden), dtype)
    b = None
    if node.has(3):
        _check(node, 3, "B", (dirs, 2 * gates * hidden), dtype)
        b = None if _is_zero(node.inputs[3]) else node.inputs[3]
    if node.has(4):
        lens = node.const(4, "(sequence_lens) ")
        if lens.shape != (batch,) or np.any(lens != seq):
            raise node.unsupported(f"sequence_lens {lens.tolist()} must equal seq_length {seq} for every "
                                   "batch entry: flowc runs a static number of time steps, so only "
                                   "full-length sequences are supported")
    clip = node.attr("clip")
    layer = _Layer(
        dirs=dirs,
        reverse=[direction == "reverse" or d == 1 for d in range(dirs)],
        layout=layout, seq=seq, batch=batch, hidden=hidden, dtype=dtype, x=node.tensor(0),
        w=node.inputs[1], r=[_row(node.inputs[2], d) for d in range(dirs)], b=b, h0=[],
        acts=_activations(node, default_acts, dirs),
        clip=None if clip is None else float(clip),
    )
    layer.h0 = layer.initial(node, 5, "initial_h")
    return layer


def _recur(h, r, c):
    """c + h @ r^T, or c alone while h is the zero initial state."""
    return c if h is None else N.gemm(h, _t(r), c, trans_b=True)


def _merged_bias(layer: _Layer, gh: int, r_count: int | None = None) -> list | None:
    """Wb + Rb per direction, for the input projection; only the first ``r_count`` entries of
    Rb when given (the rest of Rb is then added inside the recurrence)."""
    if layer.b is None:
        return None
    out = []
    for d in range(layer.dirs):
        row = _row(layer.b, d)
        wb, rb = _cols(row, 0, gh), _cols(row, gh, 2 * gh)
        if r_count is not None:
            rb = _cat([_cols(rb, 0, r_count), np.zeros(gh - r_count, dtypes.np_dtype(layer.dtype))], 0)
        out.append(_plus(wb, rb))
    return out


# ----------------------------------------------------------------------------- the recurrence
# A cell is made per direction (``cell(d)``: weights sliced and made constants once, outside
# any loop) and gives ``step(gates, *state) -> state``: the step's input projection and the
# state before it (h, or h and c; None: a zero state) to the state after it.


def _zeros(layer: _Layer) -> Tensor:
    return fill((layer.batch, layer.hidden), 0.0, layer.dtype)


def _recurrence(node, layer: _Layer, cell, states0: list[list], bias: list | None) -> list:
    """The layer's outputs: ``cell`` run over the time steps of every direction from the
    initial states ``states0[k][d]`` (per state, per direction), unrolled or as a loop."""
    looped = layer.seq > UNROLL_STEPS
    want_y = node.used(0)
    proj = None if looped else layer.project(bias)
    ys, finals = [], [[] for _ in states0]
    for d in range(layer.dirs):
        init = [s[d] for s in states0]
        if looped:
            y, last = _looped(layer, d, cell(d), init, bias, want_y)
        else:
            y, last = _unrolled(layer, d, cell(d), init, proj[d])
        ys.append(y)
        for k, v in enumerate(last):
            finals[k].append(v)
    how = (
        f"a loop over its {layer.seq} time steps" if looped
        else f"unrolled, {layer.seq} time step{'s' if layer.seq > 1 else ''} (at most {UNROLL_STEPS})"
    )
    dirs = "bidirectional" if layer.dirs > 1 else ("reverse" if layer.reverse[0] else "forward")
    node.note(f"recurrent layer {node.op} '{node.name}' ({dirs}): {how}{'' if want_y else ', Y not read'}")
    return layer.outputs(node, ys if want_y else None, finals)


def _unrolled(layer: _Layer, d: int, step, state: list, proj: list) -> tuple[list, list]:
    """One cell per time step: (h of every step in time order, the final state)."""
    ys = [None] * layer.seq
    for t in range(layer.seq - 1, -1, -1) if layer.reverse[d] else range(layer.seq):
        state = step(proj[t], *state)
        ys[t] = state[0]
    return ys, list(state)


def _looped(layer: _Layer, d: int, step, state: list, bias: list | None, want_y: bool) -> tuple:
    """A loop over chunks of ``CHUNK_STEPS`` time steps, each one gemm (their input
    projection) and a loop of one cell step: (h of every step [seq, batch, hidden] in time
    order or None, the final state). A sequence that chunks do not divide pads its last chunk:
    its projection reads the direction's last time step again for the missing ones, and its
    inner loop runs only the steps that are there (a run-time trip count)."""
    seq, batch, k = layer.seq, layer.batch, min(CHUNK_STEPS, layer.seq)
    chunks = -(-seq // k)
    ragged = seq % k != 0
    init = [_zeros(layer) if v is None else _t(v) for v in state]
    w = _t(_row(layer.w, d))  # [G*hidden, input]
    c = None if bias is None else _t(bias[d])
    axis = 1 if layer.layout == 1 else 0
    i64 = lambda v: constant(np.asarray(v, np.int64))  # noqa: E731

    def outer(j, *state):
        first = E.mul(j, i64(k))
        steps = E.add(first, i64(np.arange(k)))
        if ragged:
            steps = E.minimum(steps, i64(seq - 1))
        t = E.sub(i64(seq - 1), steps) if layer.reverse[d] else steps
        xs = S.gather(layer.x, t, axis=axis)  # [k, batch, input] (layout 1: [batch, k, input])
        rows = S.reshape(xs, (k * batch, xs.shape[2]))
        proj = S.reshape(N.gemm(rows, w, c, trans_b=True), (*xs.shape[:2], w.shape[0]))
        trip = E.minimum(i64(k), E.sub(i64(seq), first)) if ragged else None

        def inner(i, *state):
            new = step(S.gather(proj, i, axis=axis), *state)
            return list(new), [new[0]] if want_y else []

        fin, scans, _ = loop(lambda i, *s: True, inner, list(state), trip=trip, max_iterations=k)
        return fin, scans

    finals, scans, _ = loop(lambda j, *state: True, outer, init, max_iterations=chunks)
    y = None
    if want_y:
        y = S.reshape(scans[0], (chunks * k, batch, layer.hidden))  # in iteration order
        if layer.reverse[d]:  # its first seq rows flipped
            y = S.slice_(y, [seq - 1], [-(chunks * k + 1)], axes=[0], steps=[-1])
        elif ragged:
            y = S.slice_(y, [0], [seq], axes=[0])
    return y, finals


# ----------------------------------------------------------------------------- converters


@converter("LSTM", 7)
def _lstm(node):
    layer = _layer(node, 4, ["Sigmoid", "Tanh", "Tanh"])
    hidden, dirs = layer.hidden, layer.dirs
    c0 = layer.initial(node, 6, "initial_c")
    peep = [None] * dirs
    if node.has(7):
        _check(node, 7, "P", (dirs, 3 * hidden), layer.dtype)
        if not _is_zero(node.inputs[7]):
            rows = [_row(node.inputs[7], d) for d in range(dirs)]
            peep = [[_t(_cols(p, k * hidden, (k + 1) * hidden)) for k in range(3)] for p in rows]  # i, o, f
    coupled = bool(node.attr("input_forget", 0))
    fused = layer.default_gates(["sigmoid", "tanh", "tanh"]) and not coupled and all(p is None for p in peep)

    def cell(d):
        if fused:  # one lstm_cell a step; a zero h with a given c is passed as zeros
            r = _t(_transposed(layer.r[d]))

            def fused_step(x, h, c):
                if h is None and c is not None:
                    h = _zeros(layer)
                return C.lstm_cell(x, r, h, c)

            return fused_step
        f, g, h_act = layer.acts[d]
        r, p = _t(layer.r[d]), peep[d]

        def step(x, h, c):
            i_, o_, f_, c_ = S.split(_recur(h, r, x), 4, axis=1)
            if p is not None and c is not None:
                i_ = E.add(i_, E.mul(p[0], c))
                f_ = E.add(f_, E.mul(p[2], c))
            i_ = layer.gate(i_, f)
            f_ = E.sub(1.0, i_) if coupled else layer.gate(f_, f)
            c_ = layer.gate(c_, g)
            c = E.mul(i_, c_) if c is None else E.add(E.mul(f_, c), E.mul(i_, c_))
            if p is not None:
                o_ = E.add(o_, E.mul(p[1], c))
            return E.mul(layer.gate(o_, f), h_act(c)), c

        return step

    return _recurrence(node, layer, cell, [layer.h0, c0], _merged_bias(layer, 4 * hidden))


@converter("GRU", 7)
def _gru(node):
    layer = _layer(node, 3, ["Sigmoid", "Tanh"])
    hidden = layer.hidden
    linear = bool(node.attr("linear_before_reset", 0))
    fused = layer.default_gates(["sigmoid", "tanh"])

    def rbh(d):  # Rb of the hidden gate (ONNX adds it apart from the others)
        return None if layer.b is None else _t(_cols(_row(layer.b, d), 5 * hidden, 6 * hidden))

    def cell(d):
        if fused:  # one gru_cell a step: it adds rbh where ONNX does
            r = _t(_transposed(layer.r[d]))
            bias = rbh(d)
            if bias is None:
                bias = _t(np.zeros(hidden, dtypes.np_dtype(layer.dtype)))
            return lambda x, h: (C.gru_cell(x, r, bias, h, linear_before_reset=linear),)
        f, g = layer.acts[d]
        r_zr, r_h = _t(_rows(layer.r[d], 0, 2 * hidden)), _t(_rows(layer.r[d], 2 * hidden, 3 * hidden))
        rb = rbh(d) if linear else None

        def step(x, h):
            x_zr, x_h = S.split(x, (2 * hidden, hidden), axis=1)
            z, r = S.split(_recur(h, r_zr, x_zr), 2, axis=1)
            z = layer.gate(z, f)
            if linear or h is not None:  # r multiplies a zero H otherwise
                r = layer.gate(r, f)
            if linear:
                rec = rb if h is None else N.gemm(h, r_h, rb, trans_b=True)
                pre = x_h if rec is None else E.add(x_h, E.mul(r, rec))
            else:
                pre = x_h if h is None else N.gemm(E.mul(r, h), r_h, x_h, trans_b=True)
            cand = layer.gate(pre, g)
            keep = E.sub(1.0, z)
            return (E.mul(keep, cand) if h is None else E.add(E.mul(keep, cand), E.mul(z, h)),)

        return step

    # Rb of the hidden gate sits inside r * (...) when linear_before_reset, and the cells add it
    # themselves: keep it out of the projection then
    bias = _merged_bias(layer, 3 * hidden, 2 * hidden if linear or fused else None)
    return _recurrence(node, layer, cell, [layer.h0], bias)


def _transposed(r):
    """R [G*hidden, hidden] as the cells take it: [hidden, G*hidden] (numpy stays numpy)."""
    return np.ascontiguousarray(r.T) if isinstance(r, np.ndarray) else S.transpose(r, (1, 0))


@converter("RNN", 7)
def _rnn(node):
    layer = _layer(node, 1, ["Tanh"])

    def cell(d):
        (f,) = layer.acts[d]
        r = _t(layer.r[d])
        return lambda x, h: (layer.gate(_recur(h, r, x), f),)

    return _recurrence(node, layer, cell, [layer.h0], _merged_bias(layer, layer.hidden))
