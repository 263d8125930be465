"""Communication between ranks: the steps a partitioned graph's Send/Recv pairs become.

``codegen.partition`` puts them into each rank's graph (a graph built in Python never holds
them): ``send`` on the producer's rank, ``recv`` (the receive posted into the value's buffer)
and ``recv_wait`` (the value, once it has arrived) on the receiving rank. Their numpy
reference is the multi-rank one, ``codegen.partition.simulate``; alone they have none.

Data-parallel training (``gd.train``, ``flowc compile --train``) averages each gradient over
the ranks: ``cross_rank_mean``, which the optimizers put on every gradient. On one process (the
interpreter, ``codegen.compile``) it is the identity and compiles to nothing; in a training
binary built with MPI the C backend fuses these into buckets: ``allreduce_start`` copies a
bucket's gradients into one fusion buffer (float32, or float16 on the wire) and posts a
nonblocking sum over the ranks, ``allreduce_wait`` completes it and hands back each gradient
divided by the rank count. Their references are the one-rank ones (concatenate; split).
"""

from __future__ import annotations

import numpy as np

from ..errors import FlowcError
from ..ir import TensorType
from ..registry import COMMUNICATION, KERNEL, Attr, Example, NotDifferentiable, Sample, defop

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


# ----------------------------------------------------------------------------- data parallel
_MEAN_GRAD = NotDifferentiable("cross_rank_mean averages gradients: nothing differentiates through it")

defop(
    "cross_rank_mean",
    ("x",),
    lambda ts, a: ts[0],
    lambda xs, a: xs[0],
    _MEAN_GRAD,
    kind=KERNEL,
    flops=_no_flops,
    doc="the mean of x over the data-parallel ranks (one process: x itself)",
    examples=(Example((Sample((3, 4)),), {}, lambda x: x),),
)


def cross_rank_mean(x, name=None):
    """x averaged over the ranks of a data-parallel training run (the identity on one)."""
    from ..builder import apply

    return apply("cross_rank_mean", [x], name)


# wire: the dtype on the wire ("float32" or "float16"); sizes: the elements of each gradient
_BUCKET = {"bucket": Attr("int"), "wire": Attr("str", "float32")}


def _start_infer(ts, attrs):
    return TensorType((sum(t.size for t in ts),), attrs["wire"])


def _start_ref(xs, attrs):
    flat = [np.asarray(x, np.float32).reshape(-1) for x in xs]
    return np.concatenate(flat).astype(attrs["wire"])


def _wait_infer(ts, attrs):
    return [TensorType(tuple(s), "float32") for s in _shapes(attrs)]


def _shapes(attrs):
    flat, dims = attrs["shapes"], []
    k = 0
    while k < len(flat):
        rank = flat[k]
        dims.append(tuple(flat[k + 1 : k + 1 + rank]))
        k += 1 + rank
    return dims


def _wait_ref(xs, attrs):
    out, at = [], 0
    buf = np.asarray(xs[0], np.float32)
    for shape in _shapes(attrs):
        n = int(np.prod(shape, dtype=np.int64))
        out.append(buf[at : at + n].reshape(shape).copy())
        at += n
    return tuple(out)


defop(
    "allreduce_start",
    ("grads*",),
    _start_infer,
    _start_ref,
    _COMM,
    attrs=_BUCKET,
    kind=COMMUNICATION,
    flops=_no_flops,
    doc="copy a bucket of float32 gradients into one fusion buffer and post its sum over the ranks",
)
defop(
    "allreduce_wait",
    ("fused",),
    _wait_infer,
    _wait_ref,
    _COMM,
    attrs={**_BUCKET, "shapes": Attr("ints")},  # shapes: rank, dims, rank, dims, ... of the gradients
    kind=COMMUNICATION,
    flops=_no_flops,
    doc="wait for a bucket's sum over the ranks; each gradient of it, divided by the rank count",
)
