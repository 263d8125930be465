"""Data-parallel training: the gradient averaging of a training step over MPI ranks.

``gd.train``'s optimizers put ``cross_rank_mean`` on every gradient (graphdef/ops/comm.py).
One process (``codegen.compile``, a training binary built without MPI) compiles it away
(``single_process``). A training binary built with MPI (``flowc compile --train``) fuses the
gradients into buckets, as Horovod's fusion buffer and PyTorch DDP's buckets do
(``fuse``): in the graph's order, which for gradients is the order backward produces them (the
last layer's first), a bucket fills up to ``BUCKET_BYTES`` and is closed early when a step
needs one of its means. Each bucket is an ``allreduce_start`` (pack into the fusion buffer,
post a nonblocking sum) and an ``allreduce_wait`` (complete it, unpack each mean).
``overlap`` then moves every start to just after its last gradient and every wait to just
before the first step that reads it, so that the sum is in flight while backward goes on.

Every rank sums the same buckets in the same order, so the ranks' variables stay equal; the
result equals one process training on the global batch (the ranks' slices of it), up to
float32 rounding, for losses that average over the batch (the gd.train losses' default).
"""

from __future__ import annotations

from graphdef.builder import Tensor, apply, default_graph_scope
from graphdef.errors import FlowcError
from graphdef.ir import Graph

from .passes import Rebuild

BUCKET_BYTES = 256 << 10  # a bucket's gradients, float32 bytes (DDP's first bucket is 1 MiB)
WIRES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16"}


def single_process(graph: Graph) -> Graph:
    """``graph`` with every ``cross_rank_mean`` replaced by its input."""
    if not any(n.op == "cross_rank_mean" for n in graph.nodes):
        return graph
    rb = Rebuild(graph)
    for node in graph.nodes:
        if node.op == "cross_rank_mean":
            rb.bind(node, [rb.refs[node.inputs[0]]])
        else:
            rb.keep(node)
    return rb.finish()


def fuse(graph: Graph, wire: str = "float32", bucket_bytes: int = BUCKET_BYTES) -> Graph:
    """``graph`` with its ``cross_rank_mean`` nodes fused into allreduce buckets (see above)."""
    if wire not in WIRES:
        raise FlowcError(f"unknown allreduce compression '{wire}'; known: {', '.join(sorted(WIRES))}")
    wire = WIRES[wire]
    if not any(n.op == "cross_rank_mean" for n in graph.nodes):
        return graph
    rb = Rebuild(graph)
    open_: list = []  # the means of the bucket being filled
    count = 0

    def flush():
        nonlocal count
        if not open_:
            return
        grads = [Tensor(rb.new, rb.refs[m.inputs[0]]) for m in open_]
        shapes = [v for m in open_ for v in (len(m.outputs[0].shape), *m.outputs[0].shape)]
        with default_graph_scope(rb.new):
            fused = apply("allreduce_start", grads, f"allreduce/start_{count}", bucket=count, wire=wire)
            outs = apply("allreduce_wait", [fused], f"allreduce/wait_{count}", bucket=count, wire=wire,
                         shapes=shapes)  # fmt: skip
        outs = outs if isinstance(outs, tuple) else (outs,)
        for m, o in zip(open_, outs):
            rb.bind(m, [o.ref])
        open_.clear()
        count += 1

    pending = set()
    for node in graph.nodes:
        if node.op == "cross_rank_mean":
            t = node.outputs[0]
            if t.dtype != "float32":
                raise FlowcError(
                    f"data-parallel training averages float32 gradients; '{node.inputs[0].node}' is {t.dtype}"
                )
            open_.append(node)
            pending.add(node.name)
            if sum(m.outputs[0].nbytes for m in open_) >= bucket_bytes:
                flush()
                pending.clear()
            continue
        if any(r.node in pending for r in node.inputs) or any(c in pending for c in node.control_inputs):
            flush()
            pending.clear()
        rb.keep(node)
    flush()
    return rb.finish()


def overlap(order, graph: Graph) -> list:
    """``order`` (a schedule's nodes) with each ``allreduce_start`` right after the last node it
    reads and each ``allreduce_wait`` right before the first node that reads it."""
    order = list(order)
    if not any(n.op == "allreduce_start" for n in order):
        return order
    starts = [n for n in order if n.op == "allreduce_start"]
    waits = [n for n in order if n.op == "allreduce_wait"]
    rest = [n for n in order if n.op not in ("allreduce_start", "allreduce_wait")]
    readers: dict[str, list] = {}
    for n in rest:
        for r in {r.node for r in n.inputs} | set(n.control_inputs):
            readers.setdefault(r, []).append(n)
    out = list(rest)

    def at(name):
        return next(i for i, n in enumerate(out) if n.name == name)

    for s in starts:  # after its last input
        out.insert(max((at(r.node) for r in s.inputs), default=-1) + 1, s)
    for w in waits:  # before its first reader, after its start
        first = min((at(n.name) for n in readers.get(w.name, ())), default=len(out))
        out.insert(max(first, at(w.inputs[0].node) + 1), w)
    return out


def wire_bytes(graph: Graph) -> int:
    """Bytes each rank's fusion buffers hold (what a step sends, per allreduce)."""
    return sum(n.outputs[0].nbytes for n in graph.nodes if n.op == "allreduce_start")
