"""Loops and branches in generated code: ``while_loop`` and ``cond`` nodes flattened into
regions of one graph, kept contiguous by the schedule, their memory planned once.

``flatten`` (the first target-neutral pass) replaces each ``while_loop`` by

    loop_begin(init...)            -> carried values, count, scan rows: copies in, opens the loop
    [the condition's nodes]           read the carried values
    loop_check(carried..., flag)   -> the same memory: leaves the loop when flag is false
    [the body's nodes]                read loop_check's outputs
    loop_end(carried..., next..., scanned...) -> the same memory: next into carried, one
                                      scan row, count + 1, back to the top

and each ``cond`` by ``branch_begin(pred)`` (the results' buffers; ``if (pred) {``), the true
branch's nodes, ``branch_else`` (their values into the results; ``} else {``), the false
branch's, ``branch_end``. The nodes of a subgraph are renamed ``<node>/<name>``; a branch's carry
a control edge on its opening so that they stay inside it. Every pass after sees plain nodes
(products are lowered inside a loop as outside); the control ops are never folded or merged.

A region is the nodes from an opening to its end. ``regions`` finds them in a run order;
``contiguous`` moves out of a region the nodes a schedule put there that do not belong to it
(a loop's body is the nodes reachable from its opening that its end needs: a node of the body
that reads only outer values is loop-invariant and runs once, before the loop).

Memory (codegen/storage.py): the outputs of loop_check, loop_end, branch_else and branch_end
are their inputs' memory (``passes_through``); a value from before a loop that the loop reads
stays live to the loop's end (the next iteration reads it again), so its buffer is never
reused inside.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphdef.errors import UnsupportedError
from graphdef.ir import Attrs, Graph, Node, TensorType, ValueRef
from graphdef.ops.control import loop_layout
from graphdef.registry import get_op

OPENS = ("loop_begin", "branch_begin")
CLOSES = ("loop_end", "branch_end")
CONTROL = ("loop_begin", "loop_check", "loop_end", "branch_begin", "branch_else", "branch_end")


def has_regions(graph: Graph) -> bool:
    """Whether ``graph`` (flattened) holds a loop or branch."""
    return any(n.op in OPENS for n in graph.nodes)


def has_control(graph: Graph) -> bool:
    return any(n.op in ("while_loop", "cond") for n in graph.nodes)


class _Flat:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[Node] = []
        self.names = {n.name for n in graph.nodes}

    def name(self, want: str) -> str:
        out, k = want, 0
        while out in self.names:
            k += 1
            out = f"{want}_{k}"
        self.names.add(out)
        return out

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def inline(
        self, graph: Graph, env: dict, prefix: str, device, controls: tuple[str, ...]
    ) -> list[ValueRef]:
        """The non-placeholder nodes of ``graph`` added with their inputs renamed (``env``
        maps its values to the flat graph's; its placeholders must be there); its outputs."""
        for node in graph.nodes:
            if node.op == "placeholder":
                if node.ref() not in env:
                    raise UnsupportedError(
                        f"internal: placeholder '{node.name}' of '{graph.name}' is not bound"
                    )
                continue
            refs = [env[r] for r in node.inputs]
            if node.op == "while_loop":
                outs = self.loop(node, refs, prefix, device, controls)
            elif node.op == "cond":
                outs = self.branch(node, refs, prefix, device, controls)
            else:
                new = self.add(
                    Node(
                        self.name(prefix + node.name) if prefix else node.name,
                        node.op,
                        tuple(refs),
                        node.attrs,
                        node.outputs,
                        node.device if node.device is not None else device,
                        tuple(env[ValueRef(c)].node for c in node.control_inputs if ValueRef(c) in env)
                        + controls,
                    )
                )
                outs = [new.ref(i) for i in range(len(node.outputs))]
            for i, r in enumerate(outs):
                env[node.ref(i)] = r
        return [env[r] for r in graph.outputs]

    def loop(self, node: Node, refs, prefix, device, controls) -> list[ValueRef]:
        a = node.attrs
        trip, n, _ = loop_layout(a, len(refs))
        inits, caps = refs[trip : trip + n], refs[trip + n :]
        body_types = [a["body"].type_of(r) for r in a["body"].outputs]
        scans = body_types[n:]
        base = (prefix + node.name) if prefix else node.name
        begin = self.add(
            Node(
                self.name(f"{base}/begin"),
                "loop_begin",
                tuple(inits),
                Attrs(
                    {
                        "vars": n,
                        "max_iterations": a["max_iterations"],
                        "scan_shapes": tuple(t.shape for t in scans),
                        "scan_dtypes": tuple(t.dtype for t in scans),
                        "trip": False,
                        "bound": a["bound"],
                    }
                ),
                tuple(body_types[:n])
                + (TensorType((), "int64"),)
                + tuple(TensorType((a["max_iterations"], *t.shape), t.dtype) for t in scans),
                device,
                controls,
            )
        )
        carried = len(begin.outputs)
        held = [begin.ref(i) for i in range(carried)]

        def bind(sub: Graph, values) -> dict:
            names = sub.inputs
            return {
                sub.node(names[0]).ref(): values[n],
                **{sub.node(p).ref(): v for p, v in zip(names[1:], values[:n] + caps)},
            }

        (flag,) = self.inline(a["cond"], bind(a["cond"], held), f"{base}/cond/", device, controls)
        check = self.add(
            Node(
                self.name(f"{base}/check"),
                "loop_check",
                tuple(held) + (flag,) + ((refs[0],) if trip else ()),
                Attrs(
                    {
                        "carried": carried,
                        "vars": n,
                        "max_iterations": a["max_iterations"],
                        "trip": bool(trip),
                        "bound": a["bound"],
                        "region": begin.name,
                    }
                ),
                begin.outputs,
                device,
                controls,
            )
        )
        inside = [check.ref(i) for i in range(carried)]
        outs = self.inline(a["body"], bind(a["body"], inside), f"{base}/", device, controls)
        nexts = []
        for k, r in enumerate(outs[:n]):
            if r.node in (begin.name, check.name):  # a carried value passed on: its own buffer
                copy = self.add(
                    Node(
                        self.name(f"{base}/pass_{k}"),
                        "loop_copy",
                        (r,),
                        Attrs({}),
                        (body_types[k],),
                        device,
                        controls,
                    )
                )
                r = copy.ref()
            nexts.append(r)
        end = self.add(
            Node(
                self.name(f"{base}/end"),
                "loop_end",
                tuple(inside) + tuple(nexts) + tuple(outs[n:]),
                Attrs({"carried": carried, "vars": n, "region": begin.name}),
                begin.outputs,
                device,
                controls,
            )
        )
        # the node's outputs: final values, scans, count (loop_end: values, count, scans)
        return [end.ref(k) for k in range(n)] + [end.ref(n + 1 + j) for j in range(len(scans))] + [end.ref(n)]

    def branch(self, node: Node, refs, prefix, device, controls) -> list[ValueRef]:
        a = node.attrs
        pred, caps = refs[0], refs[1:]
        base = (prefix + node.name) if prefix else node.name
        types = node.outputs
        begin = self.add(
            Node(
                self.name(f"{base}/begin"),
                "branch_begin",
                (pred,),
                Attrs({"shapes": tuple(t.shape for t in types), "dtypes": tuple(t.dtype for t in types)}),
                types,
                device,
                controls,
            )
        )
        m = len(types)

        def bind(sub: Graph) -> dict:
            return {sub.node(p).ref(): v for p, v in zip(sub.inputs, caps)}

        def side(op: str, values: list[ValueRef], after: Node) -> Node:
            """branch_else or branch_end: ``values`` into the results, after ``after``."""
            return self.add(
                Node(
                    self.name(f"{base}/{op.removeprefix('branch_')}"),
                    op,
                    tuple(after.ref(k) for k in range(m)) + tuple(values),
                    Attrs({"carried": m, "region": begin.name}),
                    types,
                    device,
                    controls + (after.name,),
                )
            )

        then = self.inline(
            a["then_branch"], bind(a["then_branch"]), f"{base}/then/", device, controls + (begin.name,)
        )
        middle = side("branch_else", then, begin)
        other = self.inline(
            a["else_branch"], bind(a["else_branch"]), f"{base}/else/", device, controls + (middle.name,)
        )
        end = side("branch_end", other, middle)
        return [end.ref(k) for k in range(m)]


def flatten(graph: Graph) -> Graph:
    """``graph`` with every while_loop and cond (nested ones included) flattened into regions
    (see the module docstring); the graph itself when it has none."""
    if not has_control(graph):
        return graph
    graph = merge_stacked(graph)
    flat = _Flat(graph)
    env: dict[ValueRef, ValueRef] = {}
    for node in graph.nodes:
        if node.op == "placeholder":
            flat.add(node)
            env[node.ref()] = node.ref()
    flat.inline(Graph(graph.name, graph.nodes, graph.outputs), env, "", None, ())
    refs = [env[r] for r in graph.declared_outputs]
    return Graph(graph.name, flat.nodes, refs, graph.constants, graph.variables)


def merge_stacked(graph: Graph) -> Graph:
    """One loop where two run the same iterations on the same inputs and one only gives more
    (a gradient's copy of a forward loop that also stacks each iteration's values:
    graphdef/loop_grad.py): the other's outputs read from it, which runs in its place."""

    def key(n: Node):
        a = n.attrs
        body = a["body"]
        rest = tuple((k, v) for k, v in a.items() if k not in ("body", "scans"))
        return (n.inputs, rest, body.nodes, body.inputs)

    loops = [n for n in graph.nodes if n.op == "while_loop"]
    groups: dict = {}
    for n in loops:
        groups.setdefault(key(n), []).append(n)
    into: dict[str, Node] = {}  # a loop -> the loop that runs in its place
    for members in groups.values():
        widest = max(members, key=lambda n: len(n.outputs))
        outs = widest.attrs["body"].outputs
        for n in members:
            mine = n.attrs["body"].outputs
            if n is not widest and tuple(outs[: len(mine)]) == tuple(mine):
                into[n.name] = widest
    if not into:
        return graph
    refs: dict[ValueRef, ValueRef] = {}
    for name, wide in into.items():
        n = graph.node(name)
        for i in range(len(n.outputs) - 1):  # the values and scans, then the count (the last)
            refs[n.ref(i)] = wide.ref(i)
        refs[n.ref(len(n.outputs) - 1)] = wide.ref(len(wide.outputs) - 1)
    placed = {w.name: name for name, w in reversed(list(into.items()))}  # the first one it stands for
    nodes = []
    for n in graph.nodes:
        if n.name in into:
            wide = into[n.name]
            if placed.get(wide.name) == n.name:  # where the first loop it stands for was
                n = wide
            else:
                continue
        elif n.name in placed:
            continue  # already placed
        nodes.append(Node(n.name, n.op, tuple(refs.get(r, r) for r in n.inputs), n.attrs, n.outputs,
                          n.device, n.control_inputs))  # fmt: skip
    outputs = [refs.get(r, r) for r in graph.declared_outputs]
    return Graph(graph.name, nodes, outputs, graph.constants, graph.variables)


# ----------------------------------------------------------------------------- regions
@dataclass(frozen=True)
class Region:
    """A loop or branch in a run order: positions of its opening and its end."""

    kind: str  # "loop" or "branch"
    begin: int
    end: int


def regions(order) -> list[Region]:
    """The regions of ``order`` (nodes), by position, openings in order."""
    where = {n.name: i for i, n in enumerate(order)}
    out = []
    for i, n in enumerate(order):
        if n.op in CLOSES:
            out.append(Region("loop" if n.op == "loop_end" else "branch", where[n.attrs["region"]], i))
    return sorted(out, key=lambda r: r.begin)


def _members(nodes: list[Node]) -> dict[str, set[str]]:
    """Each opening's region: the nodes reachable from it (data and control edges, not past
    its end) that its end needs, the opening and the end included."""
    readers: dict[str, list[str]] = {n.name: [] for n in nodes}
    for n in nodes:
        for p in {r.node for r in n.inputs} | set(n.control_inputs):
            if p in readers:
                readers[p].append(n.name)
    by_name = {n.name: n for n in nodes}
    ends = {n.attrs["region"]: n.name for n in nodes if n.op in CLOSES}
    out = {}
    for opening in (n.name for n in nodes if n.op in OPENS):
        end = ends[opening]
        reach, stack = {opening}, [opening]
        while stack:
            for s in readers[stack.pop()]:
                if s not in reach and s != end:
                    reach.add(s)
                    stack.append(s)
        needed, stack = {end}, [end]
        while stack:
            node = by_name[stack.pop()]
            for p in {r.node for r in node.inputs} | set(node.control_inputs):
                if p in reach and p not in needed:
                    needed.add(p)
                    stack.append(p)
        out[opening] = (reach & needed) | {opening, end}
    return out


def region_of(nodes) -> dict[str, str | None]:
    """Each node's innermost region (its opening's name; None outside every region; an
    opening and its end belong to the region around them)."""
    nodes = list(nodes)
    out: dict[str, str | None] = {n.name: None for n in nodes}
    members = _members(nodes)
    # outer regions hold inner ones: assign the larger first, the smaller override
    for opening, names in sorted(members.items(), key=lambda kv: -len(kv[1])):
        for name in names:
            if name != opening and name not in _ends(nodes, opening):
                out[name] = opening
    return out


def outermost(nodes) -> dict[str, str]:
    """Each node inside a region (its opening included) -> the opening of the outermost
    region holding it."""
    nodes = list(nodes)
    out: dict[str, str] = {}
    for opening, names in sorted(_members(nodes).items(), key=lambda kv: len(kv[1])):
        for name in names:
            out[name] = opening  # larger regions later: the outermost wins
    return out


def _ends(nodes, opening: str) -> set[str]:
    return {n.name for n in nodes if n.op in CLOSES and n.attrs["region"] == opening}


def contiguous(order: list[Node]) -> list[Node]:
    """``order`` with each region's own nodes between its opening and its end and every other
    node before the opening (see the module docstring); unchanged without regions."""
    if not any(n.op in OPENS for n in order):
        return order
    members = _members(order)
    ends = {n.attrs["region"]: n.name for n in order if n.op in CLOSES}
    order = list(order)
    for opening in [n.name for n in order if n.op in OPENS]:
        end, inside = ends[opening], members[opening]
        b = next(i for i, n in enumerate(order) if n.name == opening)
        e = next(i for i, n in enumerate(order) if n.name == end)
        late = [n.name for n in order[e + 1 :] if n.name in inside]
        if late:
            raise UnsupportedError(
                f"internal: node '{late[0]}' of the region of '{opening}' was scheduled after its end"
            )
        middle = order[b + 1 : e]
        order = (
            order[:b]
            + [n for n in middle if n.name not in inside]
            + [order[b]]
            + [n for n in middle if n.name in inside]
            + [order[e]]
            + order[e + 1 :]
        )
    return order


def loop_extents(steps) -> list[tuple[int, int]]:
    """(opening, end) positions in ``steps`` of every loop (not branch) region."""
    return [(r.begin, r.end) for r in regions(steps) if r.kind == "loop"]


def depth(steps) -> list[int]:
    """Each step's nesting depth (an opening, a branch's else and its end at the outer depth)."""
    out, d = [], 0
    for n in steps:
        if n.op in CLOSES:
            d -= 1
        out.append(d - (n.op == "branch_else"))
        if n.op in OPENS:
            d += 1
    return out


def check_compilable(graph: Graph) -> None:
    for n in graph.nodes:
        if n.op in ("while_loop", "cond"):
            for key, sub in n.attrs.items():
                if isinstance(sub, Graph):
                    for m in sub.nodes:
                        if get_op(m.op).stateful:
                            raise UnsupportedError(
                                f"{n.describe()}: {m.describe()} inside its {key} changes state"
                            )
