"""Pipeline-parallel training: a training step split into stages over MPI ranks, its global
batch run as microbatches (``flowc compile --train --ranks N``; the binary's ``train
--microbatches K --schedule 1f1b|gpipe``).

``split(step, train, stages)`` cuts the training step's graph (codegen/training.py) into three
functions per stage, each a model of its own compiled through the pipeline's stages:

- ``forward`` (F_s): a contiguous run of the forward nodes (those the loss needs), in the
  graph's order; the cut balances each stage's whole cost (forward, the backward nodes it
  anchors and its updates) by the cost model;
- ``backward`` (B_s): the gradient nodes anchored on the stage. A backward node's anchor is the
  latest forward position among the forward values and variables it reads and the anchors of
  the backward nodes that read it (a weight's gradient is anchored at the weight's first
  forward reader): so gradients only flow to the same or earlier stages, and a gradient is
  computed where its forward values are;
- ``update`` (U_s): the optimizer's assignments of the stage's variables (each variable belongs
  to the stage that reads it first in the forward pass; its slots follow it) with the scalar
  nodes they share, copied into every stage that needs them; a variable assigned without a
  gradient (global_step) is kept by every stage, each copy stepping alike.

F_s and B_s take the variables they read as inputs (the stage's update model keeps them as
state) and every value of another function as an input; each exports the values other
functions read. The binary's pipeline step (mpi/fc_pipeline.c) runs, on rank s, F_s on each
microbatch, B_s on each in the same order (GPipe: all forwards first; 1F1B: one forward, one
backward once the pipeline is full, so that at most N - s microbatches' activations are kept),
sums B_s's gradients over the microbatches, scales them by 1 / K and runs U_s once: the
update of one process stepping on the whole global batch, to float32 rounding, for losses that
average over the batch (batch statistics, as batch normalization's, are a microbatch's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graphdef.errors import FlowcError
from graphdef.ir import Attrs, Graph, Node, TensorType, ValueRef
from graphdef.registry import SOURCE, get_op

from . import schedule

KINDS = ("forward", "backward", "update")
SCHEDULES = ("1f1b", "gpipe")
ASSIGNS = ("assign", "assign_add", "assign_sub")
PREFIX = "fc_pipe/"  # the names of a function's inputs that stand for another function's values


@dataclass(frozen=True)
class Port:
    """One input or output of a function: ``kind`` "batch" (``key``: the step's input name, a
    microbatch's slice of it), "var" (the state variable ``key``), "value" (``key``: the index
    of a value in ``Plan.values``), "grad" (the index of a gradient in ``Plan.grads``) or "loss"
    (the loss, out of the last forward; into an update, the step's mean loss)."""

    kind: str
    key: object


@dataclass(frozen=True)
class Function:
    kind: str  # forward, backward, update
    stage: int
    graph: Graph
    inputs: tuple[Port, ...]  # in the order of graph's placeholders
    outputs: tuple[Port, ...]  # in the order of graph's declared outputs
    input_names: tuple[str, ...]  # the placeholders' names
    output_names: tuple[str, ...]  # the outputs' (str of their refs)

    @property
    def label(self) -> str:
        return f"{self.kind[0]}{self.stage}"


@dataclass(frozen=True)
class Value:
    """A value one function makes and others read: on ``stage`` by ``kind`` (forward or
    backward), read on ``readers`` (stage -> the kinds reading it there)."""

    ref: ValueRef
    type: TensorType
    stage: int
    kind: str
    readers: dict = field(hash=False, compare=False)


@dataclass(frozen=True)
class Grad:
    """A gradient: made by the stage's backward, summed over the microbatches, read by its
    update (the mean the optimizer applies)."""

    ref: ValueRef
    type: TensorType
    stage: int


@dataclass
class Plan:
    stages: int
    functions: list[Function]
    values: list[Value]
    grads: list[Grad]
    owner: dict  # variable -> its stage (-1: every stage keeps a copy)
    costs: list  # per stage: (forward, backward, update) seconds by the cost model
    cut: list  # per stage: (first, last) forward node names
    step: Graph  # the training step it splits
    loss_stage: int
    shards: int | None = (
        None  # data parallel, the optimizer's state sharded: functions F, B, U_0 .. U_{shards - 1}
    )

    @property
    def updates(self) -> list[Function]:
        """The update functions, one a stage (or a shard), in order: each a slice of the state."""
        return [f for f in self.functions if f.kind == "update"]

    def function(self, kind: str, stage: int) -> Function:
        return next(f for f in self.functions if f.kind == kind and f.stage == stage)

    def describe(self) -> str:
        if self.shards is not None:
            sizes = [sum(g.type.nbytes for g in self.grads if g.stage == r) for r in range(self.shards)]
            return (
                f"data parallel over {self.shards} ranks, the optimizer's state sharded (ZeRO stage 1): each "
                f"rank updates the variables of its shard of {len(self.grads)} gradients "
                f"({', '.join(map(str, sizes))} B of gradients a rank) and broadcasts them"
            )
        lines = [f"pipeline training over {self.stages} stages (ranks):"]
        for s in range(self.stages):
            f, b, u = self.costs[s]
            fn = [self.function(k, s) for k in KINDS]
            nodes = "/".join(str(sum(1 for n in x.graph.nodes if not _is_source(n))) for x in fn)
            lines.append(
                f"  stage {s}: forward {self.cut[s][0]} .. {self.cut[s][1]}; steps {nodes} (F/B/U); "
                f"cost model {f * 1e3:.3f} + {b * 1e3:.3f} ms a microbatch, update {u * 1e3:.3f} ms a step"
            )
        sent = [v for v in self.values if any(t != v.stage for t in v.readers)]
        lines.append(
            f"  {len(sent)} values cross stages ({sum(v.type.nbytes for v in sent)} B a microbatch), "
            f"{len(self.grads)} gradients ({sum(g.type.nbytes for g in self.grads)} B)"
        )
        return "\n".join(lines)


def _is_source(node: Node) -> bool:
    return get_op(node.op).kind == SOURCE and node.op in ("placeholder", "constant", "variable")


def _cone(graph: Graph, roots, stop=frozenset()) -> set[str]:
    """The names of the nodes ``roots`` (names) need, through data and control edges; the nodes
    of ``stop`` are in it, what they need is not."""
    seen, todo = set(), list(roots)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in stop:
            continue
        node = graph.node(n)
        todo += [r.node for r in node.inputs] + list(node.control_inputs)
    return seen


def _cut(weights: list[float], stages: int) -> list[int]:
    """The starts of ``stages`` contiguous runs of ``weights`` whose largest sum is smallest
    (each run non-empty)."""
    n = len(weights)

    def runs(limit: float):
        starts, total = [0], 0.0
        for i, w in enumerate(weights):
            if total + w > limit and total > 0:
                starts.append(i)
                total = 0.0
            total += w
        return starts

    lo, hi = max(weights), sum(weights)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if len(runs(mid)) <= stages else (mid, hi)
    starts = runs(hi)
    while len(starts) < stages:  # fewer runs than stages: split the longest ones
        i = max(range(len(starts)), key=lambda k: (starts[k + 1] if k + 1 < len(starts) else n) - starts[k])
        end = starts[i + 1] if i + 1 < len(starts) else n
        if end - starts[i] < 2:
            break
        starts.insert(i + 1, (starts[i] + end) // 2)
    return starts


def split(step: Graph, train: str, stages: int, shards: int | None = None) -> Plan:
    """The training step ``step`` (train op ``train``) as the functions of ``stages`` stages;
    ``shards`` (with one stage): data parallel with the optimizer's state sharded over that many
    ranks (ZeRO stage 1): one forward and one backward for all, an update for each shard."""
    if shards is not None and stages != 1:
        raise FlowcError("--shard: data parallel, one stage")
    nodes = {n.name: n for n in step.nodes}
    train_node = step.resolve(train).node
    if nodes[train_node].op != "identity" or not nodes[train_node].inputs:
        raise FlowcError(
            f"--train --ranks: the train op '{train}' is not a gd.train minimize (the loss with the updates)"
        )
    loss = nodes[train_node].inputs[0]
    means = [n for n in step.nodes if n.op == "cross_rank_mean"]
    if not means:
        raise FlowcError(f"--train --ranks: the train op '{train}' computes no gradient (as gd.train's do)")
    sources = {n.name for n in step.nodes if _is_source(n)}
    forward = _cone(step, [loss.node]) - sources
    backward = _cone(step, [m.inputs[0].node for m in means]) - forward - sources
    mean_names = {m.name for m in means}
    order = [n for n in step.nodes if n.name in forward and not _is_source(n)]
    if len(order) < stages:
        raise FlowcError(
            f"--train --ranks {stages}: the forward pass of '{step.name}' has {len(order)} steps; at most "
            f"{len(order)} stages can hold work"
        )
    index = {n.name: i for i, n in enumerate(order)}
    consumers = step.consumers()

    def first_reader(name: str) -> int | None:
        got = [index[c] for c in consumers[name] if c in index]
        return min(got) if got else None

    # ---- the variables: which stage's update assigns each
    assigns = [n for n in step.nodes if n.op in ASSIGNS]
    assigned = {a.inputs[0].node for a in assigns}
    ancestors_mean: dict[str, set[str]] = {}
    for a in assigns:
        ancestors_mean[a.name] = _cone(step, [a.inputs[1].node]) & mean_names
    var_anchor: dict[str, int | None] = {v: first_reader(v) for v in assigned}
    mean_anchor: dict[str, int] = {}
    for m in means:  # a gradient's mean: at the first forward reader of the variables it updates
        got = [var_anchor[a.inputs[0].node] for a in assigns if m.name in ancestors_mean[a.name]]
        got = [g for g in got if g is not None]
        if not got:
            raise FlowcError(
                f"--train --ranks: the gradient '{m.inputs[0].node}' updates no variable the forward pass "
                "reads"
            )
        mean_anchor[m.name] = min(got)

    # ---- the anchors: a forward position for every non-source node
    anchor: dict[str, int] = dict(index)
    anchor.update(mean_anchor)

    def source_anchor(name: str) -> int | None:
        n = nodes[name]
        if n.op == "placeholder":
            return first_reader(name)
        if n.op == "variable":
            return var_anchor.get(name, first_reader(name))
        return None

    # a backward step computed from variables alone (a weight's transpose) counts as the variable
    weights: dict[str, int] = {}
    for n in step.nodes:
        if n.name not in backward or not n.inputs:
            continue
        got = []
        for r in n.inputs:
            p = nodes[r.node]
            if r.node in weights:
                got.append(weights[r.node])
            elif p.op == "variable" and (a := source_anchor(r.node)) is not None:
                got.append(a)
            elif p.op != "constant":
                break
        else:
            if got:
                weights[n.name] = max(got)
    for n in reversed(step.nodes):
        if n.name not in backward or _is_source(n):
            continue
        got = [anchor[c] for c in consumers[n.name] if c in anchor and (c in backward or c in mean_names)]
        if n.name in weights:
            got.append(weights[n.name])
        for r in n.inputs:
            if r.node in index:
                got.append(index[r.node])
            elif r.node in weights:
                got.append(weights[r.node])
            elif _is_source(nodes[r.node]) and (a := source_anchor(r.node)) is not None:
                got.append(a)
        if not got:
            raise FlowcError(
                f"--train --ranks: cannot place the gradient step '{n.name}' (it reads nothing of the "
                "forward pass)"
            )
        anchor[n.name] = max(got)

    # ---- the cut: each forward position weighs its forward, backward and update cost
    weight = [0.0] * len(order)
    for n in step.nodes:
        if n.name in anchor and not _is_source(n):
            weight[anchor[n.name]] += schedule.cost(step, n).run_seconds
    starts = _cut([max(w, 1e-12) for w in weight], stages)
    stages = len(starts)

    def stage_of(position: int) -> int:
        return max(s for s, first in enumerate(starts) if first <= position)

    place = {n: stage_of(a) for n, a in anchor.items()}
    owner: dict[str, int] = {}
    parts = stages
    if shards is not None:  # each gradient's update on one shard: the largest first, on the least loaded
        parts, load = shards, [0] * shards
        for m in sorted(means, key=lambda m: (-m.outputs[0].nbytes, m.name)):
            place[m.name] = k = min(range(shards), key=lambda r: (load[r], r))
            load[k] += m.outputs[0].nbytes
    else:
        for v in assigned:
            if var_anchor[v] is not None:
                owner[v] = stage_of(var_anchor[v])
    for a in assigns:  # slots: with their gradient's stage; no gradient: every stage
        v = a.inputs[0].node
        got = {place[m] for m in ancestors_mean[a.name]}
        if len(got) > 1:
            raise FlowcError(
                f"--train --ranks: the update of '{v}' reads gradients of stages {sorted(got)} (as a global "
                f"gradient norm would): not supported in pipeline training"
            )
        want = got.pop() if got else -1
        if v in owner and owner[v] != want and want != -1:
            raise FlowcError(
                f"--train --ranks: the variable '{v}' is read on stage {owner[v]} and updated on {want}"
            )
        owner.setdefault(v, want)
        if want == -1 and (_cone(step, [a.inputs[1].node]) & (forward | backward)):
            raise FlowcError(
                f"--train --ranks: '{a.name}' assigns '{v}' a value of one batch (a moving statistic): not "
                f"supported in pipeline training"
            )

    # ---- each stage's update: the assignments of its variables and what they need
    update_nodes: list[set[str]] = []
    for s in range(parts):
        mine = [a.name for a in assigns if owner[a.inputs[0].node] in (s, -1)]
        cone = _cone(step, mine, stop=forward | backward | mean_names)
        update_nodes.append(cone)
        for n in cone:
            node = nodes[n]
            if node.op == "variable" and n in assigned and owner[n] not in (s, -1):
                raise FlowcError(
                    f"--train --ranks: the update of stage {s} reads '{n}', a variable of stage {owner[n]}"
                )
            for r in node.inputs:
                if (r.node in forward or r.node in backward) and n not in mean_names:
                    raise FlowcError(
                        f"--train --ranks: the update step '{n}' reads '{r.node}', a value of one microbatch "
                        f"(only gradients reach the updates in pipeline training)"
                    )
    for n in assigned:
        users = {place[c] for c in consumers[n] if c in forward or c in backward}
        if shards is not None and owner[n] == -1 and users:
            raise FlowcError(f"--shard: the forward pass reads '{n}', which every shard updates")
        if owner[n] != -1 and shards is None:
            if users - {owner[n]}:
                raise FlowcError(
                    f"--train --ranks: the variable '{n}' is read on stages "
                    f"{sorted(users | {owner[n]})} (tied weights): not supported in pipeline training"
                )

    return _functions(step, train_node, loss, stages, place, forward, backward, update_nodes, owner, order,
                      starts, mean_names, parts)  # fmt: skip


def _functions(step, train_node, loss, stages, place, forward, backward, update_nodes, owner, order, starts,
               mean_names, parts) -> Plan:  # fmt: skip
    nodes = {n.name: n for n in step.nodes}
    kind_of = {n: "forward" for n in forward} | {n: "backward" for n in backward}
    members: dict[tuple[str, int], list[Node]] = {
        (k, s): [] for s in range(max(stages, parts)) for k in KINDS
    }
    for n in step.nodes:
        if _is_source(n):
            continue
        if n.name in kind_of:
            members[(kind_of[n.name], place[n.name])].append(n)
        for s in range(parts):
            if n.name in update_nodes[s] and n.name not in mean_names:
                members[("update", s)].append(n)

    # the values that cross functions, and their readers
    values: dict[ValueRef, Value] = {}
    grads: dict[ValueRef, Grad] = {}
    for (k, s), ns in members.items():
        for n in ns:
            if k == "update":
                continue
            for r in n.inputs:
                p = nodes[r.node]
                if _is_source(p) or (kind_of[p.name], place[p.name]) == (k, s):
                    continue
                v = values.setdefault(r, Value(r, step.type_of(r), place[p.name], kind_of[p.name], {}))
                v.readers.setdefault(s, set()).add(k)
    for m in sorted(mean_names, key=lambda x: [n.name for n in step.nodes].index(x)):
        r = nodes[m].inputs[0]
        if r not in grads:
            grads[r] = Grad(r, step.type_of(r), place[m])
    value_list, grad_list = list(values.values()), list(grads.values())
    value_id = {v.ref: i for i, v in enumerate(value_list)}
    grad_id = {g.ref: i for i, g in enumerate(grad_list)}
    if loss.node not in kind_of or kind_of[loss.node] != "forward":
        raise FlowcError("--train --ranks: the loss is not computed by the forward pass")
    loss_stage = place[loss.node]

    functions = []
    costs = []
    for s in range(max(stages, parts)):
        cost = []
        for k in KINDS:
            if (k == "update" and s >= parts) or (k != "update" and s >= stages):
                continue
            own = members[(k, s)]
            cost.append(sum(schedule.cost(step, n).run_seconds for n in own))
            last = loss if k == "forward" and s == loss_stage else None
            functions.append(
                _function(step, k, s, own, kind_of, place, owner, value_id, grad_id, values, grads, last,
                          train_node, mean_names)
            )  # fmt: skip
        costs.append(tuple(cost))
    cut = [(order[a].name, order[(starts[i + 1] if i + 1 < len(starts) else len(order)) - 1].name)
           for i, a in enumerate(starts)]  # fmt: skip
    if parts != stages:  # sharded: the forward and the backward, then each shard's update
        functions = [f for f in functions if f.kind != "update"] + [
            f for f in functions if f.kind == "update"
        ]
    return Plan(stages, functions, value_list, grad_list, owner, costs, cut, step, loss_stage,
                parts if parts != stages else None)  # fmt: skip


def _function(step, kind, s, own, kind_of, place, owner, value_id, grad_id, values, grads, loss, train_node,
              mean_names) -> Function:  # fmt: skip
    """One function's graph: its nodes, the sources they read (constants copied, the batch's
    inputs and other functions' values as placeholders, the variables: placeholders in the
    forward and backward, state in the update) and its outputs."""
    nodes = {n.name: n for n in step.nodes}
    mine = {n.name for n in own}
    out_nodes: list[Node] = []
    constants, variables = {}, {}
    inputs: list[Port] = []
    renamed: dict[ValueRef, ValueRef] = {}
    added: set[str] = set()

    def placeholder(name: str, t: TensorType, port: Port) -> ValueRef:
        if name not in added:
            added.add(name)
            out_nodes.append(Node(name, "placeholder", (), Attrs({"shape": t.shape, "dtype": t.dtype}), (t,)))
            inputs.append(port)
        return ValueRef(name, 0)

    def source(r: ValueRef) -> ValueRef:
        p = nodes[r.node]
        if p.op == "placeholder":
            return placeholder(p.name, p.outputs[0], Port("batch", p.name))
        if p.op == "variable" and kind != "update" and owner.get(p.name) is not None:
            return placeholder(p.name, p.outputs[0], Port("var", p.name))
        if p.name not in added:
            added.add(p.name)
            out_nodes.append(p)
            if p.op == "constant":
                constants[p.name] = step.constants[p.name]
            else:
                variables[p.name] = step.variables[p.name]
        return r

    for n in own:
        ins = []
        for r in n.inputs:
            p = nodes[r.node]
            if r in renamed:
                ins.append(renamed[r])
            elif _is_source(p):
                ins.append(source(r))
            elif r.node in mine:
                ins.append(r)
            elif p.name in mean_names:  # an update reading a gradient's mean
                g = grads[p.inputs[0]]
                name = f"{PREFIX}grad/{p.inputs[0].node}/{p.inputs[0].index}"
                renamed[r] = placeholder(name, g.type, Port("grad", grad_id[g.ref]))
                ins.append(renamed[r])
            else:
                name = f"{PREFIX}{r.node}/{r.index}"
                renamed[r] = placeholder(name, step.type_of(r), Port("value", value_id[r]))
                ins.append(renamed[r])
        controls = tuple(c for c in n.control_inputs if c in mine)
        if n.name == train_node:  # the update's output: the step's loss, after its assignments
            t = n.outputs[0]
            ins = [placeholder(f"{PREFIX}loss", t, Port("loss", None))]
        out_nodes.append(Node(n.name, n.op, tuple(ins), n.attrs, n.outputs, None, controls))
    outputs: list[Port] = []
    refs: list[ValueRef] = []

    def output(r: ValueRef, port: Port) -> None:
        if r in refs:  # one value, two outputs: the second a copy
            t = step.type_of(r)
            copy = Node(f"{PREFIX}copy/{len(refs)}", "identity", (r,), Attrs({}), (t,))
            out_nodes.append(copy)
            r = copy.ref()
        refs.append(r)
        outputs.append(port)

    if kind != "update":
        for n in own:
            for i in range(len(n.outputs)):
                r = n.ref(i)
                if r in values and values[r].stage == s and values[r].kind == kind:
                    output(r, Port("value", value_id[r]))
                if r in grads and kind == "backward":
                    output(r, Port("grad", grad_id[r]))
        if loss is not None:
            output(loss, Port("loss", None))
    else:
        if train_node not in mine:  # a stage without the train op: its own, over its assignments
            t = nodes[train_node].outputs[0]
            src = placeholder(f"{PREFIX}loss", t, Port("loss", None))
            ctl = tuple(n.name for n in own if n.op in ASSIGNS)
            out_nodes.append(Node(train_node, "identity", (src,), Attrs({}), (t,), None, ctl))
        refs.append(ValueRef(train_node, 0))
        outputs.append(Port("loss", None))
    # placeholders first, in the order the ports were made
    ph = [n for n in out_nodes if n.op == "placeholder"]
    rest = [n for n in out_nodes if n.op != "placeholder"]
    graph = Graph(f"{step.name}_{kind[0]}{s}", ph + rest, refs, constants, variables)
    names = tuple(n.name for n in ph)
    return Function(kind, s, graph, tuple(inputs), tuple(outputs), names, tuple(str(r) for r in refs))


MAX_VALUES = 32000  # values crossing functions: each is an MPI tag (the smallest MPI_TAG_UB is 32767)


@dataclass(frozen=True)
class StepPrediction:
    """One pipeline-parallel training step of ``microbatches`` by the cost model: ``seconds`` the
    step (the last stage's update done), ``one`` one process's step on the same samples (every
    function of every stage in a row), ``busy`` each stage's computing."""

    schedule: str
    microbatches: int
    seconds: float
    one: float
    busy: tuple[float, ...]

    @property
    def speedup(self) -> float:
        return self.one / self.seconds if self.seconds else 1.0

    def describe(self) -> str:
        busy = ", ".join(f"{b * 1e3:.2f}" for b in self.busy)
        return (
            f"{self.schedule}, {self.microbatches} microbatches: step {self.seconds * 1e3:.2f} ms (stages "
            f"busy {busy} ms), one process {self.one * 1e3:.2f} ms: {self.speedup:.2f}x"
        )


def schedule_of(stages: int, stage: int, microbatches: int, schedule: str) -> list[tuple[str, int]]:
    """The (kind, microbatch) order stage ``stage`` runs a step in: mpi/fc_pipeline.c's."""
    k = microbatches
    if schedule == "gpipe":
        return [("forward", m) for m in range(k)] + [("backward", m) for m in range(k)]
    warm = min(stages - 1 - stage, k)
    order = [("forward", m) for m in range(warm)]
    for m in range(k):
        if warm + m < k:
            order.append(("forward", warm + m))
        order.append(("backward", m))
    return order


def predict(plan: Plan, microbatches: int, schedule: str = "1f1b", alpha: float = 0.85e-6,
            beta: float = 10.9e9, time_of=None) -> StepPrediction:  # fmt: skip
    """Simulate one step: each stage runs its functions in the schedule's order, a function
    starting when its stage is free and every value it reads from another stage has arrived (the
    maker's end plus alpha + bytes / beta); then each stage's update. ``time_of(kind, stage)``
    gives a function's seconds (default: the cost model's, ``plan.costs``)."""
    if schedule not in SCHEDULES:
        raise FlowcError(f"unknown schedule '{schedule}'; known: {', '.join(SCHEDULES)}")
    cost = time_of or (lambda kind, s: plan.costs[s][KINDS.index(kind)])
    n, k = plan.stages, microbatches
    needs: dict[
        tuple[str, int], list[tuple[str, int, int]]
    ] = {}  # (kind, stage) -> (maker kind, stage, bytes)
    for v in plan.values:
        for stage, kinds in v.readers.items():
            if stage != v.stage:
                for kind in kinds:
                    needs.setdefault((kind, stage), []).append((v.kind, v.stage, v.type.nbytes))
    done: dict[tuple[str, int, int], float] = {}
    clock, busy = [0.0] * n, [0.0] * n
    todo = [schedule_of(n, s, k, schedule) for s in range(n)]
    while any(todo):
        moved = False
        for s in range(n):
            while todo[s]:
                kind, m = todo[s][0]
                inputs = [(mk, ms, b) for mk, ms, b in needs.get((kind, s), ())]
                if kind == "backward":
                    inputs.append(("forward", s, 0))  # its own forward first
                if any((mk, ms, m) not in done for mk, ms, _ in inputs):
                    break
                ready = max([clock[s]] + [done[(mk, ms, m)] + (alpha + b / beta if ms != s else 0.0)
                                          for mk, ms, b in inputs])  # fmt: skip
                t = cost(kind, s)
                clock[s] = ready + t
                busy[s] += t
                done[(kind, s, m)] = clock[s]
                todo[s].pop(0)
                moved = True
        if not moved:
            raise FlowcError("internal: the pipeline schedule does not progress")
    end = max(clock)  # the loss's broadcast: every stage waits for the last
    seconds = max(end + cost("update", s) for s in range(n))
    one = sum(k * (cost("forward", s) + cost("backward", s)) + cost("update", s) for s in range(n))
    busy = [b + cost("update", s) for s, b in enumerate(busy)]
    return StepPrediction(schedule, k, seconds, one, tuple(busy))
