"""The storage stage: where every value of a scheduled graph lives.

Rules, in order:
- placeholders, constants and variables live where the caller / the weights / the state
  put them; aliases (reshape and friends) and in-place steps (a receive completing) share
  their input's memory;
- an elementwise step may write over an input that dies at that step (same bytes, same
  shape), so the two values share one buffer;
- a computed value that is a graph output is written straight into the caller's output
  buffer; everything else gets an arena buffer, a ``memory.BufferReq`` (size, first step,
  last step) that the memory plan places;
- a step's scratch memory (the backend says how much) is one more buffer, live at that step;
- the inputs of a step that holds them (an asynchronous send) stay live until the run ends;
- outputs that are inputs, constants, state or a second name of another output are copied
  at the end of the run; assign ops store their new values into the state at the end, or
  straight into it at their step where no later step reads the variable.

Offsets inside the arena are the next stage's business (``program.place``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from graphdef.ir import Graph, Node, TensorType, ValueRef
from graphdef.registry import ALIAS, get_op

from . import control, memory, schedule

ALIGN = 64


@dataclass(frozen=True)
class Loc:
    """Where a value lives: ``kind`` in input/output/const/state/arena, which one (for the
    arena: which buffer), at what byte offset (state and, once placed, arena)."""

    kind: str
    index: int
    offset: int = 0


@dataclass
class Storage:
    graph: Graph
    order: list[Node]  # every node, in schedule order
    steps: list[Node]  # the nodes that become code, in order
    inplace: set[str]  # steps that write over one of their inputs
    loc: dict[ValueRef, Loc]
    inputs: list[tuple[str, ValueRef, TensorType]]  # (name, ref, type) per graph input
    outputs: list[tuple[str, ValueRef, TensorType]]  # (name, ref, type) per graph output
    constants: list[str]  # constant node names, in Loc index order
    variables: list[str]  # state variable node names, in Loc index order
    state_offsets: list[int]
    state_bytes: int
    buffers: list[memory.BufferReq]  # arena buffers, then the steps' scratch buffers
    output_copies: list[tuple[int, ValueRef]] = field(default_factory=list)  # (output index, value)
    state_updates: list[tuple[str, ValueRef]] = field(default_factory=list)  # (variable, new value)
    scratch_buffer: dict[str, int] = field(default_factory=dict)  # step -> its scratch buffer
    lengths: dict[str, int] = field(default_factory=dict)  # input -> the axis of its run-time length

    @property
    def weight_bytes(self) -> int:
        return sum(self.graph.node(c).outputs[0].nbytes for c in self.constants)

    def describe(self) -> str:
        """One line per value that is not a source: where it lives."""
        lines = [
            f"storage: {len(self.buffers)} arena buffers ({len(self.scratch_buffer)} scratch), "
            f"state {self.state_bytes} B, weights {self.weight_bytes} B, "
            f"{len(self.inplace)} steps in place, {len(self.output_copies)} output copies"
        ]
        for n in self.steps:
            for i in range(len(n.outputs)):
                place = self.loc[n.ref(i)]
                what = f"buffer {place.index}" if place.kind == "arena" else f"{place.kind} {place.index}"
                extra = " (in place)" if n.name in self.inplace and i == 0 else ""
                lines.append(f"  {str(n.ref(i)):40s} {what}{extra}")
        return "\n".join(lines)


class _Groups:
    """Union-find over values: members of a group share one piece of memory."""

    def __init__(self):
        self.parent: dict[ValueRef, ValueRef] = {}

    def find(self, v: ValueRef) -> ValueRef:
        self.parent.setdefault(v, v)
        while self.parent[v] != v:
            self.parent[v] = self.parent[self.parent[v]]
            v = self.parent[v]
        return v

    def union(self, keep: ValueRef, other: ValueRef) -> None:
        self.parent[self.find(other)] = self.find(keep)


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def assign(
    sched: schedule.Schedule,
    output_names: list[str],
    scratch: Callable[[Node, list[TensorType]], int] = lambda node, ins: 0,
) -> Storage:
    """The storage of every value of ``sched.graph`` (see the module docstring); ``scratch``
    gives the bytes of step-local memory a step needs (the backend's ``scratch_bytes``)."""
    graph = sched.graph
    order = list(sched.order)
    steps = list(sched.steps)
    pos = {n.name: i for i, n in enumerate(steps)}
    end = len(steps)  # output copies and state updates happen after the last step

    groups = _Groups()
    for n in order:
        for i in range(len(n.outputs)):
            groups.find(n.ref(i))
        if get_op(n.op).kind == ALIAS or get_op(n.op).in_place:
            groups.union(n.inputs[0], n.ref())
        if get_op(n.op).passes_through:  # a loop's carried values, a branch's results
            for i in range(len(n.outputs)):
                groups.union(n.inputs[i], n.ref(i))

    outputs_of: dict[ValueRef, list[int]] = {}
    for k, r in enumerate(graph.declared_outputs):
        outputs_of.setdefault(r, []).append(k)
    updates = [(n.inputs[0].node, n.ref()) for n in steps if get_op(n.op).stateful]

    # the last step that reads each group (end: read after the steps), kept up to date as
    # groups merge (the merged group's last use is the later of the two)
    last: dict[ValueRef, int] = {}
    for n in steps:
        for r in n.inputs:
            g = groups.find(r)
            last[g] = max(last.get(g, -1), pos[n.name])
    # a loop reads what it reads from before it again at every iteration: live to its end
    written: dict[ValueRef, int] = {}
    for n in steps:
        for i in range(len(n.outputs)):
            written.setdefault(groups.find(n.ref(i)), pos[n.name])
    for b, e in control.loop_extents(steps):
        for n in steps[b + 1 : e + 1]:
            for r in n.inputs:
                g = groups.find(r)
                if written.get(g, -1) <= b:
                    last[g] = max(last.get(g, -1), e)
    held = [r for n in steps if get_op(n.op).holds_inputs for r in n.inputs]  # async sends
    for r in list(outputs_of) + [v for _, v in updates] + held:
        last[groups.find(r)] = end

    def root_node(g: ValueRef) -> Node:
        return graph.node(g.node)

    # an assign writes its new value straight into the variable's state when no later step
    # reads the variable (which would see the new value, not the run's starting one) and no
    # other assign sets it: no copy into the state after the run
    assigns: dict[str, list[Node]] = {}
    for n in steps:
        if get_op(n.op).stateful:
            assigns.setdefault(n.inputs[0].node, []).append(n)
    for n, *others in assigns.values():
        gv, go = groups.find(n.inputs[0]), groups.find(n.ref())
        if not others and get_op(n.op).elementwise and last.get(gv, -1) <= pos[n.name] and gv != go:
            groups.union(n.inputs[0], n.ref())
            last[groups.find(gv)] = end

    inplace: set[str] = set()
    # a loop's next value written straight over its carried value where the elementwise step
    # that makes it comes after every other read of the carried value in the body: the copy at
    # the loop's end then has nothing to do (a key/value cache updated in its own buffer)
    for end in (n for n in steps if n.op == "loop_end"):
        c, count = end.attrs["carried"], end.attrs["vars"]
        b, e = pos[end.attrs["region"]], pos[end.name]
        nexts = list(end.inputs[c : c + count])
        for k, r in enumerate(nexts):
            g, made = groups.find(end.inputs[k]), groups.find(r)
            producer = graph.node(r.node)
            opdef = get_op(producer.op)
            if (
                producer.name not in pos
                or not b < pos[producer.name] < e
                or not opdef.elementwise
                or opdef.stateful
                or len(producer.outputs) != 1
                or nexts.count(r) != 1
                or any(groups.find(q) == made for j, q in enumerate(nexts) if j != k)
                or sum(1 for v in groups.parent if groups.find(v) == made) != 1
            ):
                continue
            at = pos[producer.name]
            if any(groups.find(q) == g for q in end.inputs[c + count :]):
                continue  # a scan of the carried value: the end reads it as it was
            reads = [pos[n.name] for n in steps[b + 1 : e] if any(groups.find(q) == g for q in n.inputs)]
            if all(p <= at for p in reads):
                groups.union(end.inputs[k], r)
                inplace.add(producer.name)

    # in place: an elementwise step takes over the buffer of an input that dies there
    for n in steps:
        if not get_op(n.op).elementwise or get_op(n.op).stateful or len(n.outputs) != 1 or n.name in inplace:
            continue  # (in place already: over a loop's carried value, which lives on)
        out = n.ref()
        for r in n.inputs:
            g = groups.find(r)
            src = root_node(g)
            t = graph.type_of(r)
            same_reads = all(graph.type_of(q).shape == t.shape for q in n.inputs if groups.find(q) == g)
            if (
                schedule.is_step(src)
                and last.get(g) == pos[n.name]
                and t.shape == n.outputs[0].shape
                and t.nbytes == n.outputs[0].nbytes
                and groups.find(out) != g
                and same_reads
            ):
                before = groups.find(out)
                groups.union(r, out)
                merged = groups.find(r)
                uses = [last[k] for k in (g, before) if k in last]
                if uses:
                    last[merged] = max(uses)
                inplace.add(n.name)
                break

    # storage per group
    members: dict[ValueRef, list[ValueRef]] = {}
    for v in groups.parent:
        members.setdefault(groups.find(v), []).append(v)
    inputs = [(name, graph.node(name).ref(), graph.node(name).outputs[0]) for name in graph.inputs]
    input_index = {r: k for k, (_, r, _) in enumerate(inputs)}
    constants = [n.name for n in graph.nodes if n.op == "constant"]
    constant_index = {name: k for k, name in enumerate(constants)}
    variables = [n.name for n in graph.nodes if n.op == "variable"]
    variable_index = {name: k for k, name in enumerate(variables)}
    loc: dict[ValueRef, Loc] = {}
    claimed: set[int] = set()
    buffers: list[memory.BufferReq] = []
    first_write = {}
    for n in steps:
        for i in range(len(n.outputs)):
            g = groups.find(n.ref(i))
            first_write.setdefault(g, pos[n.name])
    state_offsets, off = [], 0
    for name in variables:
        state_offsets.append(off)
        off += _round(graph.node(name).outputs[0].nbytes)
    for g, vs in sorted(members.items(), key=lambda kv: (first_write.get(kv[0], -1), kv[0])):
        src = root_node(g)
        if src.op == "placeholder":
            place = Loc("input", input_index[g])
        elif src.op == "constant":
            place = Loc("const", constant_index[src.name])
        elif src.op == "variable":
            index = variable_index[src.name]
            place = Loc("state", index, state_offsets[index])
        else:
            outs = sorted(k for v in vs for k in outputs_of.get(v, []) if k not in claimed)
            if outs:
                claimed.add(outs[0])
                place = Loc("output", outs[0])
            else:
                size = max(graph.type_of(v).nbytes for v in vs)
                place = Loc("arena", len(buffers))
                buffers.append(
                    memory.BufferReq(size, first_write[g], max(last.get(g, first_write[g]), first_write[g]))
                )
        for v in vs:
            loc[v] = place

    output_copies = [(k, r) for k, r in enumerate(graph.declared_outputs) if loc[r] != Loc("output", k)]
    updates = [(var, r) for var, r in updates if loc[r].kind != "state"]  # the others wrote it in place
    scratch_buffer: dict[str, int] = {}
    for n in steps:
        size = scratch(n, [graph.type_of(r) for r in n.inputs])
        if size:
            scratch_buffer[n.name] = len(buffers)
            buffers.append(memory.BufferReq(size, pos[n.name], pos[n.name]))

    outputs = [(name, r, graph.type_of(r)) for name, r in zip(output_names, graph.declared_outputs)]
    return Storage(
        graph,
        order,
        steps,
        inplace,
        loc,
        inputs,
        outputs,
        constants,
        variables,
        state_offsets,
        off,
        buffers,
        output_copies,
        updates,
        scratch_buffer,
    )
