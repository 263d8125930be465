"""The C of the communication steps of a partitioned graph (graphdef/ops/comm.py): calls
into the MPI layer (mpi/fc_mpi.h) with the step's own request. A send and a receive are
posted (nonblocking); the receive's wait completes it; the run waits for its sends at its end.
"""

from __future__ import annotations

from ..cnames import c_string
from ..table import Call, kernel


@kernel("send", "recv", "recv_wait")
def _comm(step) -> Call:
    op, a = step.node.op, step.attrs
    k = {"op": op, "peer": a["peer"], "tag": a["tag"], "tensor": c_string(a["tensor"]), "unused": []}
    if op == "send":
        k.update(buf=step.x[0], nbytes=step.ins[0].nbytes)
    elif op == "recv":
        k.update(buf=step.y[0], nbytes=step.outs[0].nbytes)
    else:  # the wait: the buffer is the value, in place
        k["unused"] = [step.x[0], step.y[0]]
    return Call("mpi/step", k, headers=("fc_mpi.h",), comm=True)
