"""Scheduling: a cost model, ASAP/ALAP levels and the critical path, and a memory-aware
list schedule. A schedule is a list of nodes; lifetimes and memory come from it.

Only nodes that compute get a step: placeholders, constants and variables are data, and
aliases (reshape and friends) take no time and no memory of their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
from dataclasses import dataclass

from graphdef.ir import Graph, Node
from graphdef.registry import ALIAS, SOURCE, get_op

# A rough machine for the cost model: one core's FMA throughput and memory bandwidth.
PEAK_FLOPS = 50e9
BANDWIDTH = 20e9
# One core of this machine as the generated code runs on it (the time model of the partition
# over ranks): the packed GEMM's FLOP rate, and the rate at which a step streams what it
# touches from memory. Fitted to a -DFC_PROFILE profile of ResNet-18 (batch 1): a 3x3
# convolution of 231 MFLOP takes 1.55 ms on 56x56 outputs and 2.55 ms on 7x7 outputs, where
# its 9.4 MB of weights are read once for only 49 rows: the two add up, they do not overlap.
RUN_FLOPS = 150e9
RUN_BANDWIDTH = 10e9
# the rates run_seconds uses: RUN_FLOPS and RUN_BANDWIDTH unless a compilation gives its own
# (pipeline.Options.run_flops / run_bandwidth: --gflops, --mem-gbps)
_RATES: contextvars.ContextVar = contextvars.ContextVar("run_rates", default=(RUN_FLOPS, RUN_BANDWIDTH))


@contextlib.contextmanager
def run_rates(flops: float | None = None, bandwidth: float | None = None):
    """Within: run_seconds at ``flops`` FLOP/s and ``bandwidth`` B/s (None: the defaults)."""
    token = _RATES.set((flops or RUN_FLOPS, bandwidth or RUN_BANDWIDTH))
    try:
        yield
    finally:
        _RATES.reset(token)


def current_rates() -> tuple[float, float]:
    """(FLOP/s, B/s) run_seconds uses now."""
    return _RATES.get()


@dataclass(frozen=True)
class Cost:
    flops: int
    bytes: int

    @property
    def seconds(self) -> float:
        """Roofline estimate: the larger of compute time and memory time."""
        return max(self.flops / PEAK_FLOPS, self.bytes / BANDWIDTH)

    @property
    def run_seconds(self) -> float:
        """This machine's time for the step: compute time plus memory time (RUN_FLOPS,
        RUN_BANDWIDTH, or a compilation's own: run_rates), what the partition balances ranks
        with and predicts from."""
        flops, bandwidth = _RATES.get()
        return self.flops / flops + self.bytes / bandwidth


def is_step(node: Node) -> bool:
    """Whether a node becomes code (sources and aliases do not)."""
    return get_op(node.op).kind not in (SOURCE, ALIAS)


def cost(graph: Graph, node: Node) -> Cost:
    """FLOPs from the op record (default: one per output element) and bytes touched."""
    opdef = get_op(node.op)
    if not is_step(node):
        return Cost(0, 0)
    ins = [graph.type_of(r) for r in node.inputs]
    flops = opdef.flops(ins, node.outputs, node.attrs) if opdef.flops else sum(t.size for t in node.outputs)
    return Cost(int(flops), sum(t.nbytes for t in ins) + sum(t.nbytes for t in node.outputs))


@dataclass(frozen=True)
class Levels:
    """Earliest (ASAP) and latest (ALAP) start times in seconds, and the critical path."""

    asap: dict[str, float]
    alap: dict[str, float]
    duration: dict[str, float]
    makespan: float
    critical: tuple[str, ...]

    def slack(self, name: str) -> float:
        return self.alap[name] - self.asap[name]


def _preds(node: Node) -> list[str]:
    return list(dict.fromkeys([r.node for r in node.inputs] + list(node.control_inputs)))


def levels(graph: Graph) -> Levels:
    """ASAP/ALAP start times on an unbounded machine (TensorFlow whitepaper, section 5.2)."""
    nodes = graph.nodes
    dur = {n.name: cost(graph, n).seconds for n in nodes}
    asap: dict[str, float] = {}
    for n in nodes:
        asap[n.name] = max((asap[p] + dur[p] for p in _preds(n)), default=0.0)
    makespan = max((asap[n.name] + dur[n.name] for n in nodes), default=0.0)
    succs: dict[str, list[str]] = {n.name: [] for n in nodes}
    for n in nodes:
        for p in _preds(n):
            succs[p].append(n.name)
    alap: dict[str, float] = {}
    for n in reversed(nodes):
        alap[n.name] = min((alap[s] for s in succs[n.name]), default=makespan) - dur[n.name]
    eps = 1e-15 + 1e-9 * makespan
    critical = tuple(n.name for n in nodes if alap[n.name] - asap[n.name] <= eps and dur[n.name] > 0)
    return Levels(asap, alap, dur, makespan, critical)


def _value_bytes(graph: Graph, node: Node) -> int:
    """Bytes a node's outputs occupy while live (0 for data and aliases)."""
    if not is_step(node):
        return 0
    return sum(t.nbytes for t in node.outputs)


def peak_bytes(graph: Graph, order: list[Node]) -> int:
    """Largest sum of live computed values when steps run in ``order`` (no reuse in place)."""
    last_use: dict[str, int] = {}
    root = _alias_roots(graph)
    position = {n.name: i for i, n in enumerate(order)}
    for n in order:
        for r in n.inputs:
            last_use[root[r.node]] = max(last_use.get(root[r.node], -1), position[n.name])
    outputs = {root[r.node] for r in graph.declared_outputs}
    live = peak = 0
    frees: dict[int, int] = {}
    for i, n in enumerate(order):
        size = _value_bytes(graph, n)
        live += size
        peak = max(peak, live)
        if n.name not in outputs:
            end = last_use.get(n.name, i)
            frees[end] = frees.get(end, 0) + size
        live -= frees.pop(i, 0)
    return peak


def _alias_roots(graph: Graph) -> dict[str, str]:
    """Node name -> the node whose memory it uses (itself unless it is an alias)."""
    root: dict[str, str] = {}
    for n in graph.nodes:
        if get_op(n.op).kind == ALIAS and n.inputs:
            root[n.name] = root[n.inputs[0].node]
        else:
            root[n.name] = n.name
    return root


def topological(graph: Graph) -> list[Node]:
    """The graph's own order (it is topological by construction)."""
    return list(graph.nodes)


def depth_first(graph: Graph) -> list[Node]:
    """Post-order from the outputs: each value's inputs are finished right before it, so
    few branches are live at once. Inputs whose subtree needs more memory go first."""
    weight: dict[str, int] = {}
    for n in graph.nodes:
        weight[n.name] = _value_bytes(graph, n) + sum(weight[p] for p in _preds(n))
    done: set[str] = set()
    order: list[Node] = []
    roots = [r.node for r in graph.declared_outputs] + [n.name for n in graph.nodes]
    for start in roots:
        stack = [(start, False)]
        while stack:
            name, expanded = stack.pop()
            if name in done:
                continue
            if expanded:
                done.add(name)
                order.append(graph.node(name))
                continue
            stack.append((name, True))
            preds = sorted(_preds(graph.node(name)), key=lambda p: weight[p])
            stack.extend((p, False) for p in preds if p not in done)
    return order


def greedy_free(graph: Graph) -> list[Node]:
    """A list schedule that prefers steps which free memory.

    Steps: keep the set of ready nodes; repeatedly take the one with the largest
    (bytes freed by its inputs' last use) - (bytes it allocates); ties go to the smaller
    ALAP time (critical work first), then to graph order. Greedy: it does not search, so
    it can miss orders a lookahead would find.
    """
    nodes = graph.nodes
    lv = levels(graph)
    root = _alias_roots(graph)
    index = {n.name: i for i, n in enumerate(nodes)}
    preds = {n.name: set(_preds(n)) for n in nodes}
    succs: dict[str, list[str]] = {n.name: [] for n in nodes}
    for n in nodes:
        for p in preds[n.name]:
            succs[p].append(n.name)
    readers: dict[str, set[str]] = {n.name: set() for n in nodes}
    for n in nodes:
        for r in n.inputs:
            readers[root[r.node]].add(n.name)
    outputs = {root[r.node] for r in graph.declared_outputs}
    remaining = {k: set(v) for k, v in readers.items()}
    waiting = {n.name: len(preds[n.name]) for n in nodes}
    bytes_of = {n.name: _value_bytes(graph, n) for n in nodes}
    inputs_of = {n.name: {root[r.node] for r in n.inputs} for n in nodes}

    def score(name: str):
        freed = sum(bytes_of[v] for v in inputs_of[name] if remaining[v] == {name} and v not in outputs)
        return (-(freed - bytes_of[name]), lv.alap[name], index[name])

    # the ready nodes in a heap by score; a score changes only when the node becomes the last
    # reader of an input, so it is pushed again then, and stale entries are skipped
    current: dict[str, tuple] = {}
    heap: list[tuple] = []

    def push(name: str) -> None:
        current[name] = score(name)
        heapq.heappush(heap, current[name])

    for n in nodes:
        if waiting[n.name] == 0:
            push(n.name)
    order: list[Node] = []
    by_index = list(nodes)
    while heap:
        entry = heapq.heappop(heap)
        name = by_index[entry[2]].name
        if current.get(name) != entry:
            continue  # stale
        del current[name]
        order.append(by_index[entry[2]])
        for v in inputs_of[name]:
            remaining[v].discard(name)
            if len(remaining[v]) == 1:
                (last,) = remaining[v]
                if last in current:
                    push(last)
        for s in succs[name]:
            waiting[s] -= 1
            if waiting[s] == 0:
                push(s)
    return order


def memory_aware(graph: Graph) -> list[Node]:
    """The order with the smallest peak of live bytes among the heuristics above
    (graph order, depth-first, greedy-free), so it is never worse than graph order."""
    best = None
    for candidate in (topological(graph), depth_first(graph), greedy_free(graph)):
        peak = peak_bytes(graph, candidate)
        if best is None or peak < best[0]:
            best = (peak, candidate)
    return best[1]


ALGORITHMS = {
    "topological": topological,
    "depth_first": depth_first,
    "greedy_free": greedy_free,
    "memory": memory_aware,
}


def schedule(graph: Graph, algorithm: str = "memory") -> list[Node]:
    """The order in which nodes run, chosen by name (``memory`` or ``topological``)."""
    return ALGORITHMS[algorithm](graph)


@dataclass(frozen=True)
class Schedule:
    """The schedule stage's output: every node in order, and the steps among them (the nodes
    that become code)."""

    graph: Graph
    order: tuple[Node, ...]
    algorithm: str

    @property
    def steps(self) -> tuple[Node, ...]:
        return tuple(n for n in self.order if is_step(n))

    def describe(self) -> str:
        lines = [f"schedule ({self.algorithm}): {len(self.steps)} steps of {len(self.order)} nodes"]
        for i, n in enumerate(self.steps):
            lines.append(f"  {i:4d} {n.op:16s} {n.name}")
        return "\n".join(lines)


def make(graph: Graph, algorithm: str = "memory") -> Schedule:
    """The schedule stage: the order of ``graph``'s nodes by the named algorithm."""
    from . import control

    return Schedule(graph, tuple(control.contiguous(schedule(graph, algorithm))), algorithm)
