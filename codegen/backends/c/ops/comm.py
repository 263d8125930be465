"""The C of the communication steps of a partitioned graph (graphdef/ops/comm.py): calls
into the MPI layer (mpi/fc_mpi.h) with the step's own request. A send and a receive are
posted (nonblocking); the receive's wait completes it; the run waits for its sends at its end.
Each op's body is its own template, templates/mpi/ops/<op>.c.j2.
"""

from __future__ import annotations

from ....render import layout as L
from ....render.spelling import c_string
from ..op_table import Call, kernel
from .shape import COPY_H


@kernel("send", "recv", "recv_wait", "allreduce_start", "allreduce_wait")
def _comm(step) -> Call:
    op, a = step.node.op, step.attrs
    if op.startswith("allreduce"):
        return _allreduce(step)
    k = {"op": op, "peer": a["peer"], "tag": a["tag"], "tensor": c_string(a["tensor"]), "unused": []}
    if op == "send":
        k.update(buf=step.x[0], nbytes=step.ins[0].nbytes)
    elif op == "recv":
        k.update(buf=step.y[0], nbytes=step.outs[0].nbytes)
    else:  # the wait: the buffer is the value, in place
        k["unused"] = [step.x[0], step.y[0]]
    return Call(f"mpi/ops/{op}", k, headers=("fc_mpi.h",), comm=True)


def _allreduce(step) -> Call:
    """A data-parallel gradient bucket (graphdef/ops/comm.py): the start packs the gradients into
    the fusion buffer and posts the sum; the wait completes it and unpacks each mean."""
    a = step.attrs
    grads = step.ins if step.node.op == "allreduce_start" else step.outs
    offsets, at = [], 0
    for t in grads:
        offsets.append(at)
        at += t.size
    k = {
        "op": step.node.op,
        "what": c_string(f"gradient bucket {a['bucket']}"),
        "f16": int(a["wire"] == "float16"),
        "count": at,
        "grads": [{"var": v, "offset": o, "size": t.size} for v, o, t in zip(
            step.x if step.node.op == "allreduce_start" else step.y, offsets, grads)],
        "buf": step.y[0] if step.node.op == "allreduce_start" else step.x[0],
        "unused": [],
    }  # fmt: skip
    headers = ("fc_mpi.h", "fc_allreduce.h") if k["f16"] else ("fc_mpi.h",)
    return Call(f"mpi/ops/{step.node.op}", k, headers=headers, comm=True)


@kernel("cross_rank_mean")
def _one_rank_mean(step) -> Call:
    """On one process the mean over the ranks is the value itself: a copy. (The pipeline drops
    the op before lowering, or fuses it into allreduce buckets in a data-parallel step.)"""
    y = step.outs[0]
    st = L.strides(y.shape)
    return Call("copy", L.copy_plan(y.shape, st, st, itemsize=L.itemsize(y.dtype)), COPY_H)
