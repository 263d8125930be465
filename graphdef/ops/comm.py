"""Communication between ranks: the steps a partitioned graph's Send/Recv pairs become.

``codegen.partition`` puts them into each rank's graph (a graph built in Python never holds
them): ``send`` on the producer's rank, ``recv`` (the receive posted into the value's buffer)
and ``recv_wait`` (the value, once it has arrived) on the receiving rank. Their numpy
reference is the multi-rank one, ``codegen.partition.simulate``; alone they have none.
"""

from __future__ import annotations

from ..errors import FlowcError
from ..ir import TensorType
from ..registry import COMMUNICATION, Attr, NotDifferentiable, defop

_COMM = NotDifferentiable("communication between ranks exists only in compiled partitions", error=True)
# peer: the other rank; tag: the pair's own MPI tag; tensor: the value's name, for messages
_PEER = {"peer": Attr("int"), "tag": Attr("int"), "tensor": Attr("str", "")}


def _no_flops(ins, outs, attrs) -> int:
    return 0


def _on_other_rank(xs, attrs):
    raise FlowcError(
        f"tensor '{attrs['tensor']}' is received from rank {attrs['peer']} (tag {attrs['tag']}): "
        "a partition runs with codegen.partition.simulate"
    )


defop(
    "recv",
    (),
    lambda ts, a: TensorType(a["shape"], a["dtype"]),
    _on_other_rank,
    _COMM,
    attrs={**_PEER, "shape": Attr("ints"), "dtype": Attr("dtype")},
    kind=COMMUNICATION,
    flops=_no_flops,
    doc="post the receive of a tensor from rank 'peer' into this value's buffer (tag 'tag')",
)
defop(
    "recv_wait",
    ("received",),
    lambda ts, a: ts[0],
    lambda xs, a: xs[0],
    _COMM,
    attrs=_PEER,
    kind=COMMUNICATION,
    flops=_no_flops,
    in_place=True,
    doc="wait until the receive posted by 'received' has completed; the value, in its buffer",
)
defop(
    "send",
    ("x",),
    lambda ts, a: (),
    lambda xs, a: (),
    _COMM,
    attrs=_PEER,
    kind=COMMUNICATION,
    flops=_no_flops,
    holds_inputs=True,
    doc="send x to rank 'peer' (tag 'tag'), asynchronously: x is read until the run's final wait",
)
