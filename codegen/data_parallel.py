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

from dataclasses import dataclass

import numpy as np

from graphdef.builder import Tensor, apply, default_graph_scope
from graphdef.errors import FlowcError
from graphdef.ir import Graph, Node

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


@dataclass(frozen=True)
class StepPrediction:
    """One data-parallel training step on ``ranks`` ranks, by the cost model: ``compute`` the
    step's own work (each rank its batch), ``allreduce`` the buckets' transfer time, ``exposed``
    the part of it backward did not hide; ``seconds`` the step."""

    ranks: int
    seconds: float
    compute: float
    allreduce: float
    exposed: float

    @property
    def efficiency(self) -> float:
        """The step's compute over its time: the samples/s of R ranks over R times one rank's."""
        return self.compute / self.seconds if self.seconds else 1.0

    def describe(self) -> str:
        return (
            f"{self.ranks} ranks: step {self.seconds * 1e3:.2f} ms = compute {self.compute * 1e3:.2f} ms + "
            f"allreduce waits {self.exposed * 1e3:.2f} ms (of {self.allreduce * 1e3:.2f} ms of transfers), "
            f"efficiency {100 * self.efficiency:.0f}%"
        )


def ring_seconds(nbytes: int, ranks: int, alpha: float, beta: float) -> float:
    """A ring allreduce of ``nbytes`` over ``ranks``: 2 (R - 1) messages of nbytes / R each
    (reduce-scatter, then allgather), every rank sending and receiving at once."""
    if ranks < 2:
        return 0.0
    return 2 * (ranks - 1) * (alpha + nbytes / ranks / beta)


def predict_step(
    graph: Graph, order, ranks: int, alpha: float, beta: float, time_of, overlap: bool = False
) -> StepPrediction:
    """Simulate one step of the data-parallel training graph in its run order ``order``: the
    compute in order (``time_of(graph, node)``), the buckets one after the other on the network
    (a ring allreduce each: ``ring_seconds``, plus the sums' arithmetic), a wait blocking until
    its bucket's sum is done. ``overlap``: a bucket's sum goes on from its start, while backward
    runs (an MPI progress thread or offload); else (MPICH's and Open MPI's default progress,
    inside MPI calls only) from its wait."""
    from .schedule import current_rates

    _, RUN_BANDWIDTH = current_rates()  # noqa: N806 - the cost model's memory rate
    clock = compute = network = transfers = 0.0
    posted: dict[int, float] = {}
    for n in order:
        if n.op == "allreduce_start":
            nbytes = n.outputs[0].nbytes
            clock += 2 * nbytes / RUN_BANDWIDTH  # packing the bucket: part of the step's work
            compute += 2 * nbytes / RUN_BANDWIDTH
            # the transfers, and summing (R - 1) / R of the bucket's elements on each rank
            summing = 3 * nbytes * (ranks - 1) / ranks / RUN_BANDWIDTH
            posted[n.attrs["bucket"]] = (clock, ring_seconds(nbytes, ranks, alpha, beta) + summing)
        elif n.op == "allreduce_wait":
            start, seconds = posted.get(n.attrs["bucket"], (clock, 0.0))
            network = max(network, start if overlap else clock) + seconds
            transfers += seconds
            clock = max(clock, network)
            unpack = 2 * sum(t.nbytes for t in n.outputs) / RUN_BANDWIDTH
            clock += unpack
            compute += unpack
        else:
            t = time_of(graph, n)
            clock += t
            compute += t
    return StepPrediction(ranks, clock, compute, transfers, clock - compute)


ACCUMULATE = "fc_accumulate"  # the accumulation's state variables: <ACCUMULATE>/apply, /scale, /<k>


def accumulate(graph: Graph, train: str) -> Graph:
    """The training step ``graph`` (train op ``train``) made to accumulate gradients over K calls
    (``flowc compile --train --accumulate``; the driver's ``--accumulate K`` picks K at run time).
    Two state variables steer it: ``apply`` (1 on the K-th call, else 0) and ``scale`` (1 / K),
    written by the driver before each call. Each gradient g becomes (acc + g) x scale before its
    cross-rank mean, and acc := (apply ? 0 : acc + g); every other assignment (the optimizer's
    update, its slots, global_step) stores its new value only when ``apply`` is set (a select, so
    the value stored is the one the plain step computes). With apply = scale = 1 (their initial
    values) it is the plain step. K calls on batches of B equal one step on their K x B samples,
    to float32 rounding, for losses that average over the batch."""
    from graphdef import builder
    from graphdef.ops import elementwise as E
    from graphdef.ops import state as S
    from graphdef.ops.shape import identity

    means = [n for n in graph.nodes if n.op == "cross_rank_mean"]
    if not means:
        raise FlowcError(f"--accumulate: the train op '{train}' computes no gradient (as gd.train's do)")
    rb = Rebuild(graph)
    with default_graph_scope(rb.new):
        apply_v = builder.variable(f"{ACCUMULATE}/apply", np.float32(1.0), trainable=False)
        scale = builder.variable(f"{ACCUMULATE}/scale", np.float32(1.0), trainable=False)
        on = E.greater(apply_v, builder.constant(np.float32(0.5)))
        # the driver writes them: state variables (an assignment of their own keeps them from
        # being frozen into constants)
        kept = [S.assign(v, identity(v)).ref.node for v in (apply_v, scale)]
    updates: list[str] = []
    train_node = graph.resolve(train).node
    for node in graph.nodes:
        if node.op == "cross_rank_mean":
            (g,) = rb.inputs(node)
            with rb.building(node):
                zeros = np.zeros(g.shape, g.dtype)
                acc = builder.variable(f"{ACCUMULATE}/{len(updates)}", zeros, trainable=False)
                total = E.add(acc, g)
                zero = builder.constant(np.zeros((), g.dtype))
                updates.append(S.assign(acc, E.where(on, zero, total)).ref.node)
                mean = builder.apply("cross_rank_mean", [E.mul(total, scale)], None, **node.attrs)
            rb.bind(node, [mean.ref])
        elif node.op in ("assign", "assign_add", "assign_sub"):
            var, value = rb.inputs(node)
            with rb.building(node):
                unchanged = var if node.op == "assign" else builder.constant(np.zeros((), value.dtype))
                out = builder.apply(node.op, [var, E.where(on, value, unchanged)], None, **node.attrs)
            rb.bind(node, [out.ref])
        elif node.name == train_node:
            inputs = [rb.refs[r] for r in node.inputs]
            copy = Node(node.name, node.op, tuple(inputs), node.attrs, node.outputs, node.device,
                        rb.controls(node) + tuple(updates) + tuple(kept))  # fmt: skip
            rb.new.add(copy)
            rb.bind(node, [copy.ref(i) for i in range(len(node.outputs))])
        else:
            rb.keep(node)
    return rb.finish()
