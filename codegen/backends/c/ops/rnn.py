"""C lowering of the recurrent cells lstm_cell and gru_cell (runtime_c/kernels/rnn.h): one
kernel call per time step, the recurrent product and the gate activations together, with
the gate accumulators in step scratch memory (FC_RNN_SCRATCH elements of the compute type).
"""

from __future__ import annotations

from ....render.spelling import COMPUTE
from ..op_table import Call, kernel

RNN_H = ("kernels/rnn.h",)


def _scratch(ins, outs, attrs, isa):
    """Bytes of FC_RNN_SCRATCH(batch, hidden): 5 rows of hidden per batch entry."""
    batch, hidden = outs[0].shape
    return 5 * batch * hidden * (8 if ins[0].dtype == "float64" else 4)


def _call(s, args: list) -> Call:
    batch, hidden = s.outs[0].shape
    k = {"fn": s.fn(f"fc_{s.node.op}"), "args": [*args, batch, hidden], "acc": COMPUTE[s.ins[0].dtype]}
    return Call("rnn_cell", k, RNN_H)


@kernel("lstm_cell", scratch=_scratch)
def _lstm_cell(s):
    return _call(s, [s.x[0], s.x[1], s.arg(2), s.arg(3), s.y[0], s.y[1]])


@kernel("gru_cell", scratch=_scratch)
def _gru_cell(s):
    call = _call(s, [s.x[0], s.x[1], s.x[2], s.arg(3), s.y[0]])
    call.k["args"].append(int(s.attrs["linear_before_reset"]))
    return call
