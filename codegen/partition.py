"""The partition stage: one graph per MPI rank, cut edges replaced by Send/Recv pairs.

``split(graph, ranks, algorithm)`` places every node on a rank, then builds each rank's graph:
its own nodes, the constants they read (copied: weights never travel), and for every value
that crosses to a rank one ``send`` on the producer's rank and, on the receiving rank, one
``recv`` (posting the receive into the value's buffer) and one ``recv_wait`` (completing it,
in place): one pair per tensor per destination rank, however many consumers the value has
there (TensorFlow whitepaper 3.2.2); every pair has its own tag.

Each rank's graph lists its nodes in the order they run: the whole graph's schedule
restricted to the rank, so that every rank meets its sends and receives in one global order
and no two ranks wait for each other. A send comes right after its value is made; a
receive is waited for right before the first step that reads it, and posted as late as
the cost model allows: the transfer's alpha-beta time before that wait (whitepaper 5.2),
so its buffer is not held earlier than needed.

Placement algorithms, chosen by name (``ALGORITHMS``):
- ``annotated``: ``gd.device("rank:N")`` decides (the other algorithms ignore it); an
  unannotated node goes where most of the bytes it reads are (ties: the higher rank: values flow forward);
- ``pipeline``: contiguous stages of the schedule, balanced by the cost model (FLOPs and
  bytes): the order is cut where the largest stage cost is smallest, each stage's live
  bytes under ``max_ram`` when given;
- ``greedy``: the whitepaper's 3.2.1 placement: simulate the graph in topological order and
  put each node on the rank where it would finish earliest, counting the transfer of its
  inputs (alpha-beta model) and the rank's busy time;
- ``tensor``: tensor parallelism (``tensor_split``, a pass before the backend's lowering):
  each large product with a constant matrix split by columns over all ranks, the rest on
  rank 0.
Placeholders go with their first consumer (or their annotation), constants with every
consumer (copied). Variables are state: each must be read and assigned on one rank.

``compress="fp16"`` (round to nearest) or ``"bf16"`` (the mantissa truncated) narrows every
float32 tensor on the wire (whitepaper 5.5): graph steps before the send and after the
wait, so the narrow buffers are planned like any other.

``simulate(partition, feeds)`` runs the rank graphs with the numpy references, handing sent
values to their receivers: the reference of a partition. ``predict(partition)`` estimates a
step's time per rank from the cost model and the alpha-beta transfer model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from graphdef.errors import FlowcError, ShapeError
from graphdef.ir import Attrs, Graph, Node, TensorType, ValueRef
from graphdef.registry import COMMUNICATION, SOURCE, get_op

from . import control, schedule

# ----------------------------------------------------------------------------- transfers
ALPHA = 0.85e-6
"""Seconds of latency per message (the alpha of the alpha-beta model), fitted by
bench/pingpong.py through MPICH between two processes of this 2-core machine (0.85 us; an
earlier machine of the same kind: 1.7 us). ``flowc inspect --alpha-us`` sets another."""
BETA = 10.9e9
"""Bytes per second of a large message (the beta), fitted likewise (10.9 GB/s; earlier:
5.1 GB/s). ``flowc inspect --beta-gbps`` sets another."""

EAGER_BYTES = 65536
"""Messages up to this size complete when sent (MPI buffers them: the eager protocol); larger
ones only once the receiver has posted its receive (rendezvous), which ``predict`` models."""

MAX_TAG = 32767  # the smallest MPI_TAG_UB the MPI standard allows

MAX_RANKS = 1024
"""The most ranks a graph is split over, whatever its size. Every rank is a model of its own,
rendered, written (two files) and built into the one SPMD program: 5000 ranks of a 6-node
model took 210 s and wrote 10,008 files, about 40 ms and two files a rank, so this many
build in under a minute. A pipeline over R ranks also passes a value through R - 1 messages
in a row; the model-parallel splits in use have tens of stages. Many more processes are data
parallelism (a training binary's allreduce, ``mpiexec -n`` any count), which this does not bound."""


def transfer_seconds(nbytes: int, alpha: float = ALPHA, beta: float = BETA) -> float:
    return alpha + nbytes / beta


def step_seconds(graph: Graph, node: Node) -> float:
    """A step's estimated time on one core (``schedule.Cost.run_seconds``: FLOPs and bytes)."""
    return schedule.cost(graph, node).run_seconds


# ----------------------------------------------------------------------------- placement
_RANK = re.compile(r"rank:(\d+)")


def annotated_rank(node: Node) -> int | None:
    m = _RANK.match(node.device or "")
    return int(m.group(1)) if m else None


def check_rank_count(ranks) -> None:
    """Refuse a rank count that is not an integer from 1 to MAX_RANKS, before any work."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise FlowcError(f"ranks must be an integer of at least 1, got {ranks!r}")
    if ranks > MAX_RANKS:
        raise FlowcError(
            f"--ranks {ranks}: at most {MAX_RANKS} ranks (every rank's code is built into one MPI program); "
            f"for more processes, run data-parallel copies of the model"
        )


def check_ranks(graph: Graph, ranks, algorithm: str = "pipeline") -> None:
    """Refuse ``ranks`` when more ranks than the graph can give work to, before placement: a
    rank holds at least one step (a node that is not a placeholder, constant or variable), so
    at most that many ranks hold work (``annotated``: or up to the highest rank a node names),
    and every rank past them would still be a program of its own, built and started for nothing.

    >>> import graphdef as gd
    >>> with gd.Graph("g") as g:
    ...     y = gd.relu(gd.placeholder("x", (4,)), name="y")
    >>> check_ranks(g, 2)
    Traceback (most recent call last):
    ...
    graphdef.errors.FlowcError: --ranks 2: the graph 'g' has 1 step to place; at most 1 rank can hold work
    """
    check_rank_count(ranks)
    steps = sum(1 for n in graph.nodes if not _is_source(n))
    named = (
        [r for r in map(annotated_rank, graph.nodes) if r is not None]
        if algorithm in ("annotated", "tensor")
        else []
    )
    usable = max([steps, *(r + 1 for r in named)])
    if ranks > usable:
        s = "" if steps == 1 else "s"
        raise FlowcError(
            f"--ranks {ranks}: the graph '{graph.name}' has {steps} step{s} to place; at most {usable} "
            f"rank{'' if usable == 1 else 's'} can hold work"
        )


def _check_annotations(graph: Graph, ranks: int) -> None:
    for n in sorted(graph.nodes, key=_is_source):  # name an op before a constant it made
        r = annotated_rank(n)
        if r is not None and r >= ranks:
            raise FlowcError(
                f"node '{n.name}' (op {n.op}) is placed on rank {r}, but the model is compiled for {ranks} "
                f"rank{'s' if ranks > 1 else ''} (ranks 0 to {ranks - 1})"
            )


def _is_source(node: Node) -> bool:
    return get_op(node.op).kind == SOURCE


def _is_data(node: Node) -> bool:
    """Constants and variables: copied to (or kept on) the ranks that read them, never sent."""
    return _is_source(node) and node.op != "placeholder"


def _settle_sources(graph: Graph, place: dict[str, int], annotations: bool = False) -> dict[str, int]:
    """Sources with their first consumer (``annotations``: theirs win); a source nobody reads
    on rank 0."""
    consumers = graph.consumers()
    for n in graph.nodes:
        if not _is_source(n):
            continue
        r = annotated_rank(n) if annotations else None
        if r is None:
            users = [place[c] for c in consumers[n.name] if c in place]
            r = users[0] if users else 0
        place[n.name] = r
    return place


def annotated(graph: Graph, ranks: int, **_) -> dict[str, int]:
    """``gd.device("rank:N")`` decides; others go where most of their input bytes are."""
    place: dict[str, int] = {}
    for n in graph.nodes:
        if _is_source(n):
            continue
        r = annotated_rank(n)
        if r is None:
            weight: dict[int, int] = {}
            for ref in n.inputs:
                src = graph.node(ref.node)
                if _is_source(src) and annotated_rank(src) is None:
                    continue  # data and unplaced inputs follow the node
                rr = place[ref.node] if ref.node in place else annotated_rank(src)
                weight[rr] = weight.get(rr, 0) + graph.type_of(ref).nbytes
            r = max(weight, key=lambda k: (weight[k], k)) if weight else 0
        place[n.name] = r
    return _settle_sources(graph, place, annotations=True)


def _stage_peak(graph: Graph, order: list[Node], start: int, end: int, last_use: dict) -> int:
    """Estimated live bytes of the stage ``order[start:end]``: values it makes (held to the
    stage's end when a later stage reads them: they are sent) and values it receives."""
    inside = {n.name for n in order[start:end]}
    events: dict[int, int] = {}
    received: dict[ValueRef, int] = {}
    for i in range(start, end):
        n = order[i]
        for ref in n.inputs:
            if ref.node not in inside and not _is_data(graph.node(ref.node)):
                received[ref] = i
        if not schedule.is_step(n):
            continue  # aliases share their input's bytes
        for k, t in enumerate(n.outputs):
            last = last_use.get(n.ref(k), i)
            stop = end - 1 if last >= end else last
            events[i] = events.get(i, 0) + t.nbytes
            events[stop + 1] = events.get(stop + 1, 0) - t.nbytes
    for ref, last in received.items():
        events[start] = events.get(start, 0) + graph.type_of(ref).nbytes
        events[last + 1] = events.get(last + 1, 0) - graph.type_of(ref).nbytes
    live = peak = 0
    for i in sorted(events):
        live += events[i]
        peak = max(peak, live)
    return peak


def pipeline(graph: Graph, ranks: int, order: list[Node] | None = None, max_ram: int | None = None, **_):
    """Contiguous stages of the schedule, balanced by the cost model: the cut points minimize
    the largest stage's estimated seconds (a linear partition, by bisection on that maximum);
    with ``max_ram``, a stage also ends before its estimated live bytes would pass it."""
    order = [n for n in (order or schedule.schedule(graph)) if not _is_source(n)]
    cost = [max(step_seconds(graph, n), 1e-12) for n in order]
    prefix = np.concatenate([[0.0], np.cumsum(cost)])
    last_use: dict[ValueRef, int] = {}
    for i, n in enumerate(order):
        for ref in n.inputs:
            last_use[ref] = i

    def mem_end(start: int, rank: int) -> int:
        """The largest end such that order[start:end] fits max_ram (binary search: the peak
        only grows with the stage)."""
        if max_ram is None:
            return len(order)
        lo, hi = start, len(order)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _stage_peak(graph, order, start, mid, last_use) <= max_ram:
                lo = mid
            else:
                hi = mid - 1
        if lo == start:
            n = order[start]
            raise FlowcError(
                f"node '{n.name}' (op {n.op}) needs {_stage_peak(graph, order, start, start + 1, last_use)} "
                f"bytes live on rank {rank}, more than --max-ram {max_ram}"
            )
        return lo

    def stages(limit: float, cap: int = ranks) -> list[int] | None:
        """The stage starts when each stage's cost is at most ``limit``; None past ``cap``."""
        starts, i = [], 0
        while i < len(order):
            if len(starts) == cap:
                return None
            starts.append(i)
            end = int(np.searchsorted(prefix, prefix[i] + limit * (1 + 1e-12), side="right")) - 1
            i = max(min(end, mem_end(i, len(starts) - 1)), i + 1)
        return starts or [0]

    lo, hi = max(cost, default=0.0), float(prefix[-1]) if order else 0.0
    best = stages(hi)
    if best is None:  # memory, not time, needs more ranks
        at = stages(float("inf"), len(order) + 1)[ranks - 1]  # where the last rank starts
        stuck, need = order[at], _stage_peak(graph, order, at, len(order), last_use)
        raise FlowcError(
            f"the pipeline placement cannot fit --max-ram {max_ram} bytes on {ranks} ranks: rank {ranks - 1} "
            f"would still need node '{stuck.name}' (op {stuck.op}) and the rest of the graph, {need} bytes"
        )
    for _ in range(60):
        mid = (lo + hi) / 2
        s = stages(mid)
        if s is None:
            lo = mid
        else:
            hi, best = mid, s
    place: dict[str, int] = {}
    for k, start in enumerate(best):
        end = best[k + 1] if k + 1 < len(best) else len(order)
        for n in order[start:end]:
            place[n.name] = k
    return _settle_sources(graph, place)


def greedy(graph: Graph, ranks: int, alpha: float = ALPHA, beta: float = BETA, **_) -> dict[str, int]:
    """Simulated execution (whitepaper 3.2.1): each node, in topological order, on the rank
    where it finishes earliest: max(rank free, inputs there) + its cost, where an input from
    another rank arrives after its transfer time. Ties: the lower rank."""
    free = [0.0] * ranks
    done: dict[str, float] = {}
    place: dict[str, int] = {}
    for n in graph.nodes:
        if _is_source(n):
            continue
        best = None
        for r in range(ranks):
            ready = free[r]
            for ref in n.inputs:
                if _is_source(graph.node(ref.node)):
                    continue  # inputs and weights are where they are needed
                t = done[ref.node]
                if place[ref.node] != r:
                    t += transfer_seconds(graph.type_of(ref).nbytes, alpha, beta)
                ready = max(ready, t)
            finish = ready + step_seconds(graph, n)
            if best is None or finish < best[0] - 1e-15:
                best = (finish, r)
        finish, r = best
        place[n.name], done[n.name], free[r] = r, finish, finish
    return _settle_sources(graph, place)


def _epilogue(graph: Graph, node: Node, n: int) -> Node | None:
    """The elementwise step after a product that can be split with it by columns: ``node``'s
    only reader, a ``fused`` (or single elementwise) step of the product's shape whose other
    inputs are constants that are scalars or rows of ``n`` (a bias)."""
    readers = graph.consumers()[node.name]
    if len(readers) != 1:
        return None
    e = graph.node(readers[0])
    if (
        get_op(e.op).kind != "elementwise"
        or len(e.outputs) != 1
        or e.outputs[0].shape != node.outputs[0].shape
    ):
        return None
    for r in e.inputs:
        if r.node == node.name:
            continue
        src = graph.node(r.node)
        t = graph.type_of(r)
        if src.op != "constant" or (t.size != 1 and (t.shape[-1:] != (n,) or t.size != n)):
            return None
    return e


COLUMN_BLOCK = 32  # the tensor split's column granularity: the widest packed GEMM panel (AVX-512, 2 x 16)


def tensor_split(graph: Graph, ranks: int, alpha: float = ALPHA, beta: float = BETA) -> Graph:
    """Tensor parallelism (``--placement tensor``): every product of a value and a constant
    matrix (``matmul``, X[..., K] @ W[K, N]) whose work the cost model says is worth more than
    its transfers is split by columns over the ranks: rank r computes X @ W[:, cols_r] (and the
    elementwise step after it, a bias and an activation, on its columns), the slices are joined
    on rank 0 (Megatron's column split; its row split, which ends in an allreduce, is left to
    the rank that joins). Every other node is annotated to rank 0 (unless the graph places it),
    so that the ``annotated`` placement sends X to every rank and the slices back. A split pays
    when (1 - 1/R) of the product's time exceeds the transfers: X to R - 1 ranks and their
    slices back (alpha-beta)."""
    from graphdef import builder
    from graphdef.ops.shape import concat

    from .passes import Rebuild

    rb = Rebuild(graph)
    done: set[str] = set()
    for node in graph.nodes:
        if node.name in done:
            continue
        w = graph.node(node.inputs[1].node) if node.op == "matmul" and len(node.inputs) == 2 else None
        if w is None or w.op != "constant" or len(w.outputs[0].shape) != 2 or node.device:
            src = node if node.device or _is_source(node) else Node(
                node.name, node.op, node.inputs, node.attrs, node.outputs, "rank:0", node.control_inputs
            )  # fmt: skip
            if src is node:
                rb.keep(node)
            else:
                rb.keep(src)
            continue
        k, n = w.outputs[0].shape
        epi = _epilogue(graph, node, n)
        seconds = step_seconds(graph, node) + (step_seconds(graph, epi) if epi else 0.0)
        x_bytes, y_bytes = graph.type_of(node.inputs[0]).nbytes, node.outputs[0].nbytes
        cost = (ranks - 1) * transfer_seconds(x_bytes, alpha, beta) + transfer_seconds(
            y_bytes // ranks, alpha, beta
        )
        if n < ranks or seconds * (1 - 1 / ranks) <= cost:
            rb.keep(
                Node(node.name, node.op, node.inputs, node.attrs, node.outputs, "rank:0", node.control_inputs)
            )
            continue
        x = rb.inputs(node)[0]
        weights = graph.constants[w.name]
        parts = []
        blocks = (
            np.array_split(np.arange(-(-n // COLUMN_BLOCK)), ranks) if n >= ranks * COLUMN_BLOCK else None
        )
        for r in range(ranks):
            if blocks is None:  # narrower than a block a rank: columns as even as they go
                cols = np.array_split(np.arange(n), ranks)[r]
                lo, hi = int(cols[0]), int(cols[-1]) + 1
            else:  # whole blocks of the packed GEMM's panel width: no rank pads a panel of its own
                lo, hi = int(blocks[r][0]) * COLUMN_BLOCK, min(n, (int(blocks[r][-1]) + 1) * COLUMN_BLOCK)
            with (
                builder.default_graph_scope(rb.new),
                builder.source_scope(node.name),
                builder.device(f"rank:{r}"),
            ):
                y = builder.apply("matmul", [x, builder.constant(np.ascontiguousarray(weights[:, lo:hi]))])
                if epi is not None:
                    ins = []
                    for ref in epi.inputs:
                        if ref == node.ref():
                            ins.append(y)
                            continue
                        c = graph.constants[ref.node]
                        ins.append(
                            builder.constant(c if c.size == 1 else np.ascontiguousarray(c[..., lo:hi]))
                        )
                    y = builder.apply(epi.op, ins, None, **epi.attrs)
            parts.append(y)
        with builder.default_graph_scope(rb.new), builder.source_scope(node.name), builder.device("rank:0"):
            joined = concat(parts, axis=-1)
        last = epi if epi is not None else node
        rb.bind(last, [joined.ref])
        done.add(last.name)
        if epi is not None:
            rb.bind(node, [joined.ref])  # nothing else reads it
    return rb.finish()


ALGORITHMS: dict[str, Callable[..., dict[str, int]]] = {
    "annotated": annotated,
    "pipeline": pipeline,
    "greedy": greedy,
    "tensor": annotated,  # after tensor_split: its annotations decide
}
COMPRESSIONS = ("fp16", "bf16")


# ----------------------------------------------------------------------------- the split
@dataclass(frozen=True)
class Edge:
    """One tensor crossing from rank ``src`` to rank ``dst`` with its tag; ``wire``: its type
    as sent (float16 or uint16 when compressed)."""

    value: ValueRef
    src: int
    dst: int
    tag: int
    type: TensorType
    wire: TensorType


@dataclass
class Partition:
    """The partition stage's output: one graph per rank (nodes in run order), where every
    node of ``graph`` went, the cut edges, and which rank reads each input / makes each output."""

    graph: Graph
    graphs: list[Graph]
    place: dict[str, int]
    edges: list[Edge]
    algorithm: str
    compress: str | None = None
    inputs: dict[str, int] = field(default_factory=dict)  # graph input -> the rank that reads it
    outputs: list[int] = field(default_factory=list)  # for each declared output, the rank that makes it

    @property
    def ranks(self) -> int:
        return len(self.graphs)

    @property
    def idle(self) -> list[int]:
        """The ranks the placement gave no step (a node that is not a placeholder, constant or
        variable): started and waiting for nothing, which fewer ranks would do the same."""
        busy = {r for name, r in self.place.items() if not _is_source(self.graph.node(name))}
        return [r for r in range(self.ranks) if r not in busy]

    def idle_note(self) -> str:
        """One line naming the idle ranks, or ""."""
        if not self.idle:
            return ""
        names = ", ".join(map(str, self.idle))
        busy = self.ranks - len(self.idle)
        many = len(self.idle) > 1
        why = (
            f"no node names {'them' if many else 'it'} with gd.device('rank:N'), as in any imported model: "
            "--placement pipeline or greedy split it"
            if self.algorithm == "annotated"
            else f"{self.algorithm} placement found no gain in {'them' if many else 'it'}"
        )
        return (
            f"note: rank{'s' if many else ''} {names} of {self.ranks} hold{'' if many else 's'} no step "
            f"({why}): --ranks {busy} does the same work"
        )

    def output_indices(self, rank: int) -> list[int]:
        """Positions among the graph's declared outputs of those ``rank`` makes (its graph's
        declared outputs, in order)."""
        return [k for k, r in enumerate(self.outputs) if r == rank]

    def bytes_sent(self) -> int:
        return sum(e.wire.nbytes for e in self.edges)

    def bytes_saved(self) -> int:
        """Bytes a run does not send thanks to compression."""
        return sum(e.type.nbytes - e.wire.nbytes for e in self.edges)

    def describe(self) -> str:
        lines = [f"partition ({self.algorithm}) over {self.ranks} ranks:"]
        for r, g in enumerate(self.graphs):
            computing = [n for n in g.nodes if get_op(n.op).kind not in (SOURCE, COMMUNICATION)]
            flops = sum(schedule.cost(g, n).flops for n in computing)
            sends = sum(1 for n in g.nodes if n.op == "send")
            recvs = sum(1 for n in g.nodes if n.op == "recv")
            ins = [k for k, v in self.inputs.items() if v == r]
            outs = [str(ref) for ref, v in zip(self.graph.declared_outputs, self.outputs) if v == r]
            lines.append(
                f"  rank {r}: {len(computing)} nodes, {flops} flops, {sends} sends, {recvs} receives; "
                f"inputs {', '.join(ins) or '-'}; outputs {', '.join(outs) or '-'}"
            )
        saved = f", {self.bytes_saved()} saved by {self.compress}" if self.compress else ""
        lines.append(f"cut edges: {len(self.edges)}, {self.bytes_sent()} bytes sent a run{saved}")
        for e in self.edges:
            wire = f" as {e.wire.dtype}" if e.wire != e.type else ""
            lines.append(
                f"  {str(e.value)[:48]:48s} rank {e.src} -> {e.dst}  tag {e.tag:<4d} {e.type}{wire} "
                f"{e.wire.nbytes} B"
            )
        return "\n".join(lines)


def split(
    graph: Graph,
    ranks: int,
    algorithm: str = "annotated",
    order: list[Node] | None = None,
    compress: str | None = None,
    max_ram: int | None = None,
    alpha: float = ALPHA,
    beta: float = BETA,
) -> Partition:
    """Place the nodes of ``graph`` (see the module docstring) and build one graph per rank;
    ``order``: the whole graph's schedule (default: the memory-aware one)."""
    check_rank_count(ranks)
    if algorithm not in ALGORITHMS:
        raise FlowcError(f"unknown placement '{algorithm}'; known: {', '.join(ALGORITHMS)}")
    check_ranks(graph, ranks, algorithm)
    if compress not in (None, *COMPRESSIONS):
        raise FlowcError(f"unknown compression '{compress}'; known: {', '.join(COMPRESSIONS)}")
    if max_ram is not None and (isinstance(max_ram, bool) or not isinstance(max_ram, int) or max_ram < 0):
        raise FlowcError(f"max_ram must be a number of bytes, got {max_ram!r}")
    if algorithm == "annotated":
        _check_annotations(graph, ranks)
    order = control.contiguous(list(order or schedule.schedule(graph)))
    place = ALGORITHMS[algorithm](graph, ranks, order=order, max_ram=max_ram, alpha=alpha, beta=beta)
    place = _whole_regions(graph, order, place)
    _check_state(graph, place)
    edges: list[Edge] = []
    seen: set[tuple[ValueRef, int]] = set()
    for n in order:  # the run order: tags in the order values are sent
        if _is_source(n):
            continue
        for ref in n.inputs:
            dst, src = place[n.name], place[ref.node]
            if _is_data(graph.node(ref.node)) or src == dst or (ref, dst) in seen:
                continue
            t = graph.type_of(ref)
            if t.nbytes > 2**31 - 1:
                raise ShapeError(
                    f"tensor '{ref}' ({t}) is {t.nbytes} bytes, more than one MPI message carries "
                    f"(2^31 - 1): place its producer and its consumer '{n.name}' on one rank"
                )
            if len(edges) > MAX_TAG:
                raise FlowcError(f"{len(edges)} tensors cross between ranks, more than MPI tags ({MAX_TAG})")
            seen.add((ref, dst))
            edges.append(Edge(ref, src, dst, len(edges), t, _wire_type(t, compress)))
    graphs = [
        _RankBuilder(graph, r, place, edges, order, compress, alpha, beta).build() for r in range(ranks)
    ]
    inputs = {n.name: place[n.name] for n in graph.nodes if n.op == "placeholder"}
    outputs = [place[r.node] for r in graph.declared_outputs]
    return Partition(graph, graphs, place, edges, algorithm, compress, inputs, outputs)


def _whole_regions(graph: Graph, order: list[Node], place: dict[str, int]) -> dict[str, int]:
    """A loop or branch runs on one rank: all its nodes go to the rank where the most of its
    work was placed (by the cost model)."""
    regions: dict[str, list[Node]] = {}
    where = control.outermost(order)
    for n in order:
        if n.name in where:
            regions.setdefault(where[n.name], []).append(n)
    if not regions:
        return place
    place = dict(place)
    for members in regions.values():
        work: dict[int, float] = {}
        for n in members:
            if schedule.is_step(n):
                work[place[n.name]] = work.get(place[n.name], 0.0) + step_seconds(graph, n)
        rank = max(sorted(work), key=lambda r: work[r]) if work else place[members[0].name]
        for n in members:
            place[n.name] = rank
    return place


def _wire_type(t: TensorType, compress: str | None) -> TensorType:
    if compress is None or t.dtype != "float32":
        return t
    return TensorType(t.shape, "float16" if compress == "fp16" else "uint16")


def _check_state(graph: Graph, place: dict[str, int]) -> None:
    """A variable lives on one rank: every node reading or assigning it must be there."""
    consumers = graph.consumers()
    for n in graph.nodes:
        if n.op != "variable":
            continue
        ranks = sorted({place[c] for c in consumers[n.name]})
        if len(ranks) > 1:
            raise FlowcError(
                f"variable '{n.name}' is read or assigned on ranks {', '.join(map(str, ranks))}: state is "
                f"not shared between ranks; place its readers on one rank (gd.device('rank:N'))"
            )


class _RankBuilder:
    """Builds one rank's graph: its nodes in run order with the communication steps."""

    def __init__(self, graph, rank, place, edges, order, compress, alpha, beta):
        self.graph, self.rank, self.place, self.compress = graph, rank, place, compress
        self.edges, self.order, self.alpha, self.beta = edges, order, alpha, beta
        self.taken = {n.name for n in graph.nodes}
        self.constants: dict[str, np.ndarray] = {}

    def name(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def build(self) -> Graph:
        g, rank, place = self.graph, self.rank, self.place
        outgoing: dict[ValueRef, list[Edge]] = {}
        incoming: dict[ValueRef, Edge] = {}
        for e in self.edges:
            if e.src == rank:
                outgoing.setdefault(e.value, []).append(e)
            if e.dst == rank:
                incoming[e.value] = e
        own = [n for n in self.order if place[n.name] == rank and not _is_data(n)]
        needed = {r.node for n in own for r in n.inputs if _is_data(g.node(r.node))}
        needed |= {r.node for r in g.declared_outputs if place[r.node] == rank and _is_data(g.node(r.node))}
        nodes: list[Node] = [n for n in self.order if n.name in needed]  # data first: no step
        received: dict[ValueRef, ValueRef] = {}
        posts: list[tuple[int, list[Node]]] = []  # (position of the wait, recv nodes) to place
        # a loop or branch receives what it reads from other ranks before it opens, once
        where = control.outermost(own)
        reads: dict[str, list[ValueRef]] = {}
        for n in own:
            if n.name in where:
                reads.setdefault(where[n.name], []).extend(n.inputs)
        for n in own:
            for ref in reads.get(n.name, []) if n.op in control.OPENS else n.inputs:
                if ref in incoming and ref not in received:
                    recv, tail = self.receive(incoming[ref])
                    posts.append((len(nodes), recv))
                    nodes += tail
                    received[ref] = tail[-1].ref()
            for ref in n.inputs:
                if ref in incoming and ref not in received:
                    recv, tail = self.receive(incoming[ref])
                    posts.append((len(nodes), recv))
                    nodes += tail
                    received[ref] = tail[-1].ref()
            ins = tuple(received.get(r, r) for r in n.inputs)
            controls = tuple(c for c in n.control_inputs if place.get(c) == rank)
            nodes.append(Node(n.name, n.op, ins, n.attrs, n.outputs, n.device, controls))
            for k in range(len(n.outputs)):
                for e in outgoing.get(n.ref(k), ()):
                    nodes += self.send(e)
        nodes = self.post_receives(nodes, posts)
        outputs = [r for r in g.declared_outputs if place[r.node] == rank]
        constants = {k: v for k, v in g.constants.items() if k in needed}
        constants.update(self.constants)
        variables = {k: v for k, v in g.variables.items() if k in needed}
        return Graph(f"{g.name}_rank{rank}", nodes, outputs, constants, variables)

    # -- sends and receives, with the narrowing and widening of compressed tensors
    def send(self, e: Edge) -> list[Node]:
        value, out = e.value, []
        if e.wire != e.type:
            out = self.narrow(value, e)
            value = out[-1].ref()
        attrs = Attrs({"peer": e.dst, "tag": e.tag, "tensor": str(e.value)})
        return out + [Node(self.name(f"{e.value}/send_to_{e.dst}"), "send", (value,), attrs, ())]

    def receive(self, e: Edge) -> tuple[list[Node], list[Node]]:
        """The recv (placed later, as late as the transfer allows) and what follows at the
        first use: the wait, and the widening of a compressed tensor."""
        w = e.wire
        attrs = {"peer": e.src, "tag": e.tag, "tensor": str(e.value)}
        recv = Node(self.name(f"{e.value}/recv_from_{e.src}"), "recv", (),
                    Attrs({**attrs, "shape": w.shape, "dtype": w.dtype}), (w,))  # fmt: skip
        wait = Node(self.name(f"{e.value}/wait_from_{e.src}"), "recv_wait", (recv.ref(),), Attrs(attrs), (w,))
        tail = [wait]
        if w != e.type:
            tail += self.widen(wait.ref(), e)
        return [recv], tail

    def _node(self, base: str, op: str, inputs, attrs: dict, out: TensorType) -> Node:
        return Node(self.name(base), op, tuple(inputs), Attrs(attrs), (out,))

    def narrow(self, value: ValueRef, e: Edge) -> list[Node]:
        s = e.type.shape
        base = f"{e.value}/{self.compress}_to_{e.dst}"
        if self.compress == "fp16":
            return [self._node(base, "cast", [value], {"to": "float16"}, TensorType(s, "float16"))]
        c = self.sixteen_node()
        bits = self._node(base + "/bits", "bitcast", [value], {"to": "uint32"}, TensorType(s, "uint32"))
        high = self._node(base + "/high", "bitshift", [bits.ref(), c.ref()], {"direction": "right"},
                          TensorType(s, "uint32"))  # fmt: skip
        wire = self._node(base, "cast", [high.ref()], {"to": "uint16"}, TensorType(s, "uint16"))
        return [c, bits, high, wire]

    def widen(self, value: ValueRef, e: Edge) -> list[Node]:
        s = e.type.shape
        base = f"{e.value}/{self.compress}_from_{e.src}"
        if self.compress == "fp16":
            return [self._node(base, "cast", [value], {"to": "float32"}, TensorType(s, "float32"))]
        c = self.sixteen_node()
        wide = self._node(base + "/wide", "cast", [value], {"to": "uint32"}, TensorType(s, "uint32"))
        bits = self._node(base + "/bits", "bitshift", [wide.ref(), c.ref()], {"direction": "left"},
                          TensorType(s, "uint32"))  # fmt: skip
        out = self._node(base, "bitcast", [bits.ref()], {"to": "float32"}, TensorType(s, "float32"))
        return [c, wide, bits, out]

    def sixteen_node(self) -> Node:
        """A uint32 constant 16 (the shift between a float32's bits and its bfloat16 half)."""
        name = self.name("bf16_shift")
        self.constants[name] = np.array(16, np.uint32)
        return Node(
            name, "constant", (), Attrs({"shape": (), "dtype": "uint32"}), (TensorType((), "uint32"),)
        )

    def post_receives(self, nodes: list[Node], posts: list[tuple[int, list[Node]]]) -> list[Node]:
        """Insert each recv at the latest position whose estimated start is at least the
        transfer's time before its wait (at ``position``), by the cost model of this rank's
        steps; never before the rank's first step."""
        g = self.graph_of(nodes)
        costs = [
            step_seconds(g, n) if schedule.is_step(n) and get_op(n.op).kind != COMMUNICATION else 0.0
            for n in nodes
        ]
        start = np.concatenate([[0.0], np.cumsum(costs)])
        at: dict[int, list[Node]] = {}
        # never inside a loop or branch (it would post again at each pass): before its opening
        opening_at, inside = {}, control.outermost(nodes)
        for i, n in enumerate(nodes):
            opening_at[n.name] = i
        for position, recv in posts:
            t = recv[0].outputs[0]
            need = transfer_seconds(t.nbytes, self.alpha, self.beta)
            p = max(int(np.searchsorted(start, start[position] - need, side="right")) - 1, 0)
            if p < len(nodes) and nodes[p].name in inside:
                p = opening_at[inside[nodes[p].name]]
            at.setdefault(p, []).extend(recv)
        out: list[Node] = []
        for i, n in enumerate(nodes):
            out += at.get(i, [])
            out.append(n)
        out += at.get(len(nodes), [])
        return out

    def graph_of(self, nodes: list[Node]) -> Graph:
        return Graph("rank", nodes, (), {**self.graph.constants, **self.constants}, self.graph.variables)


# ----------------------------------------------------------------------------- reference
def simulate(part: Partition, feeds: dict) -> dict[str, np.ndarray]:
    """Run the rank graphs with the numpy references, each rank in its own order, handing
    every sent value to its receiver: the outputs by name (from the ranks that own them).
    A rank waits (is passed over) while a value it must receive has not been sent yet."""
    inbox: dict[int, np.ndarray] = {}
    values: list[dict[ValueRef, np.ndarray]] = [{} for _ in part.graphs]
    pending = [list(g.nodes) for g in part.graphs]
    while any(pending):
        progressed = False
        for r, g in enumerate(part.graphs):
            while pending[r]:
                n = pending[r][0]
                if n.op == "recv_wait" and n.attrs["tag"] not in inbox:
                    break
                pending[r].pop(0)
                progressed = True
                vals = values[r]
                if n.op == "placeholder":
                    vals[n.ref()] = np.asarray(feeds[n.name])
                elif n.op == "constant":
                    vals[n.ref()] = g.constants[n.name]
                elif n.op == "variable":
                    vals[n.ref()] = g.variables[n.name]
                elif n.op == "recv":
                    continue
                elif n.op == "recv_wait":
                    vals[n.ref()] = inbox.pop(n.attrs["tag"])
                elif n.op == "send":
                    inbox[n.attrs["tag"]] = np.array(vals[n.inputs[0]], copy=True)
                else:
                    outs = get_op(n.op).ref([vals[i] for i in n.inputs], n.attrs)
                    for i, v in enumerate(outs if isinstance(outs, (tuple, list)) else (outs,)):
                        vals[n.ref(i)] = np.asarray(v)
        if not progressed:
            stuck = {r: p[0].name for r, p in enumerate(pending) if p}
            raise FlowcError(f"the partition deadlocks: ranks wait at {stuck}")
    out = {}
    for r, g in enumerate(part.graphs):
        for ref in g.declared_outputs:
            out[str(ref)] = values[r][ref]
    return out


# ----------------------------------------------------------------------------- prediction
@dataclass(frozen=True)
class Prediction:
    """A step's estimated time: per rank, seconds computing and waiting for receives; the
    step's time (the last rank to finish); with ``microbatches`` K, the time of K in a row."""

    compute: tuple[float, ...]
    wait: tuple[float, ...]
    seconds: float
    microbatches: int = 1

    def describe(self) -> str:
        per = ", ".join(f"rank {r} {c * 1e6:.1f} us + wait {w * 1e6:.1f} us"
                        for r, (c, w) in enumerate(zip(self.compute, self.wait)))  # fmt: skip
        k = f" for {self.microbatches} microbatches" if self.microbatches > 1 else ""
        return f"predicted step time{k}: {self.seconds * 1e6:.1f} us ({per})"


def predict(
    part: Partition,
    microbatches: int = 1,
    alpha: float = ALPHA,
    beta: float = BETA,
    time_of: Callable[[Graph, Node], float] | None = None,
) -> Prediction:
    """Simulate the ranks' run orders with the cost model (``time_of``; default
    ``step_seconds``) and the alpha-beta transfers. A message arrives its transfer time
    after it is sent or, above ``EAGER_BYTES``, after its receive is posted if that is later;
    a wait ends when the rank gets there or the value arrives, whichever is later; a run (one
    microbatch) ends when its own sends have arrived (the generated run's final wait)."""
    seconds = time_of or step_seconds
    ranks = part.ranks
    clock = [0.0] * ranks
    compute = [0.0] * ranks
    wait = [0.0] * ranks
    durations = [[seconds(g, n) if get_op(n.op).kind != COMMUNICATION else 0.0 for n in g.nodes]
                 for g in part.graphs]  # fmt: skip
    sizes = {e.tag: e.wire.nbytes for e in part.edges}

    def arrival(tag: int) -> float | None:
        """When the message ``tag`` arrives, once both its send and its receive are posted."""
        if tag not in sent or (sizes[tag] > EAGER_BYTES and tag not in posted):
            return None
        start = sent[tag] if sizes[tag] <= EAGER_BYTES else max(sent[tag], posted[tag])
        return start + transfer_seconds(sizes[tag], alpha, beta)

    def block(r: int, until: float) -> None:
        if until > clock[r]:
            wait[r] += until - clock[r]
            clock[r] = until

    for _ in range(microbatches):
        sent: dict[int, float] = {}
        posted: dict[int, float] = {}
        pos = [0] * ranks
        while any(pos[r] <= len(g.nodes) for r, g in enumerate(part.graphs)):
            progressed = False
            for r, g in enumerate(part.graphs):
                while pos[r] < len(g.nodes):
                    n = g.nodes[pos[r]]
                    if n.op == "recv_wait":
                        arrive = arrival(n.attrs["tag"])
                        if arrive is None:
                            break
                        block(r, arrive)
                    elif n.op == "send":
                        sent[n.attrs["tag"]] = clock[r]
                    elif n.op == "recv":
                        posted[n.attrs["tag"]] = clock[r]
                    d = durations[r][pos[r]]
                    clock[r] += d
                    compute[r] += d
                    pos[r] += 1
                    progressed = True
                if pos[r] == len(g.nodes):  # the final wait for this rank's sends
                    ends = [arrival(n.attrs["tag"]) for n in g.nodes if n.op == "send"]
                    if all(t is not None for t in ends):
                        block(r, max(ends, default=0.0))
                        pos[r] += 1
                        progressed = True
            if not progressed:
                raise FlowcError("the partition deadlocks")
    return Prediction(tuple(compute), tuple(wait), max(clock), microbatches)
