"""Target-neutral Graph -> Graph passes, each a pure function, run in the flat order of
``pipeline()`` (the first stages of codegen.pipeline).

Every pass returns a new graph that passes ``graphdef.verify``; node names of surviving
nodes are kept, so outputs, feeds and error messages keep meaning the same thing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping

import numpy as np

import graphdef as gd
from graphdef import builder
from graphdef.builder import Tensor, control_dependencies, default_graph_scope, device, source_scope
from graphdef.errors import ExecutionError, FlowcError, GraphError
from graphdef.ir import Attrs, Graph, Node, TensorType, ValueRef
from graphdef.registry import get_op

from . import control


class Rebuild:
    """Copies a graph node by node into a fresh graph, letting a pass replace nodes."""

    def __init__(self, graph: Graph):
        self.old = graph
        self.new = builder.Graph(graph.name, reserved={n.name for n in graph.nodes})
        self.refs: dict[ValueRef, ValueRef] = {}
        self.names: dict[str, str] = {}

    def controls(self, node: Node) -> tuple[str, ...]:
        """The new names of ``node``'s control inputs."""
        return tuple(dict.fromkeys(self.names[c] for c in node.control_inputs if c in self.names))

    def keep(self, node: Node) -> None:
        """Copy ``node`` unchanged (inputs renamed to their new producers)."""
        copy = Node(
            node.name,
            node.op,
            tuple(self.refs[r] for r in node.inputs),
            node.attrs,
            node.outputs,
            node.device,
            self.controls(node),
        )
        self.new.add(
            copy,
            constant=self.old.constants.get(node.name) if node.op == "constant" else None,
            variable=self.old.variables.get(node.name) if node.op == "variable" else None,
        )
        self.bind(node, [copy.ref(i) for i in range(len(node.outputs))])

    def constant(self, node: Node, value: np.ndarray) -> None:
        """Replace ``node`` by a constant of the same name holding ``value``."""
        t = TensorType.of(value)
        const = Node(
            node.name, "constant", (), Attrs({"shape": t.shape, "dtype": t.dtype}), (t,), node.device
        )
        self.new.add(const, constant=value)
        self.bind(node, [const.ref()])

    @contextlib.contextmanager
    def building(self, node: Node, controls: bool = True):
        """Build in the new graph what stands for ``node``: on its device, after its control
        inputs (``controls``), the new nodes named after it (``source_scope``), so messages and
        ``flowc inspect`` still say which node, an ONNX node's name included, a step comes from."""
        with default_graph_scope(self.new), source_scope(node.name), device(node.device):
            if controls:
                with control_dependencies(self.controls(node)):
                    yield
            else:
                yield

    def replace(self, node: Node, build: Callable[[list[Tensor]], Iterable[Tensor]]) -> None:
        """Replace ``node`` by what ``build(inputs)`` makes with the builder in the new graph."""
        inputs = [Tensor(self.new, self.refs[r]) for r in node.inputs]
        with self.building(node):
            outs = list(build(inputs))
        self.bind(node, [t.ref for t in outs])

    def inputs(self, node: Node) -> list[Tensor]:
        return [Tensor(self.new, self.refs[r]) for r in node.inputs]

    def bind(self, node: Node, refs: list[ValueRef]) -> None:
        """Let ``refs`` (values of the new graph) stand for the outputs of old ``node``."""
        for i, r in enumerate(refs):
            self.refs[node.ref(i)] = r
        if refs:
            self.names[node.name] = refs[0].node

    def finish(self) -> Graph:
        """The new graph (immutable), with the old one's outputs renamed to their producers."""
        return self.new.freeze().with_outputs(self.refs[r] for r in self.old.declared_outputs)


# ----------------------------------------------------------------------------- the passes
def select_outputs(graph: Graph, outputs=None) -> Graph:
    """Declare the outputs (names, Tensors or refs; default: the graph's outputs)."""
    refs = (
        graph.outputs
        if outputs is None
        else tuple(o.ref if isinstance(o, Tensor) else graph.resolve(o) for o in outputs)
    )
    if not refs:
        raise GraphError(f"graph '{graph.name}' has no outputs to compile")
    return Graph(graph.name, graph.nodes, refs, graph.constants, graph.variables)


def constant_value(graph: Graph, ref) -> np.ndarray | None:
    """The array of the value ``ref`` when a constant node makes it, else None."""
    node = graph.node(ref.node)
    return graph.constants[node.name] if node.op == "constant" else None


def consumers(graph: Graph) -> dict[str, list[str]]:
    """The names of each node's consumers, a consumer once per input it reads of the node."""
    out: dict[str, list[str]] = {n.name: [] for n in graph.nodes}
    for n in graph.nodes:
        for r in n.inputs:
            out[r.node].append(n.name)
    return out


def merge_nodes(graph: Graph, plan: dict, absorbed: set[str], make: Callable) -> Graph:
    """``graph`` with the nodes named in ``absorbed`` dropped and each node named in ``plan``
    replaced by ``make(rb, node, plan[name])``, which adds its replacement to the Rebuild ``rb``
    and binds it; ``graph`` itself when ``plan`` is empty."""
    if not plan:
        return graph
    rb = Rebuild(graph)
    for node in graph.nodes:
        if node.name in absorbed:
            continue
        if node.name in plan:
            make(rb, node, plan[node.name])
        else:
            rb.keep(node)
    return rb.finish()


def prune(graph: Graph, keep_inputs: bool = True) -> Graph:
    """Keep only what the outputs need, through data and control edges (partial execution).

    Placeholders stay (``keep_inputs``): they are the compiled model's interface, used or not.
    """
    needed: set[str] = set()
    stack = [r.node for r in graph.declared_outputs]
    stack += [n.name for n in graph.nodes if n.op == "placeholder"] if keep_inputs else []
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            node = graph.node(name)
            stack.extend(r.node for r in node.inputs)
            stack.extend(node.control_inputs)
    nodes = [n for n in graph.nodes if n.name in needed]
    return Graph(
        graph.name,
        nodes,
        graph.declared_outputs,
        {k: v for k, v in graph.constants.items() if k in needed},
        {k: v for k, v in graph.variables.items() if k in needed},
    )


def freeze_variables(graph: Graph) -> Graph:
    """Variables that no assign op changes are constants for the compiled code."""
    assigned = {n.inputs[0].node for n in graph.nodes if get_op(n.op).stateful}
    rb = Rebuild(graph)
    for node in graph.nodes:
        if node.op == "variable" and node.name not in assigned:
            rb.constant(node, graph.variables[node.name])
        else:
            rb.keep(node)
    return rb.finish()


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold inference batch norm into the conv or gemm before it, where that is exact.

    Legal when the producer is a ``conv`` or a ``gemm`` (bias absent or per output column)
    with constant weights and bias, its output feeds only the batch norm and is not a graph
    output, and the batch norm's parameters are constants: w' = w * s per output channel,
    b' = (b - mean) * s + bias with s = scale / sqrt(var + eps). Others are left to
    ``decompose``.
    """
    uses: dict[str, int] = {}
    for n in graph.nodes:
        for r in n.inputs:
            uses[r.node] = uses.get(r.node, 0) + 1
    outputs = {r.node for r in graph.declared_outputs}

    def const(ref):
        return constant_value(graph, ref)

    def foldable(bn: Node, prod: Node) -> bool:
        if prod.op not in ("conv", "gemm") or uses.get(prod.name) != 1 or prod.name in outputs:
            return False
        if prod.control_inputs or prod.device != bn.device:
            return False
        if any(const(r) is None for r in list(bn.inputs[1:]) + list(prod.inputs[1:])):
            return False
        return (
            prod.op == "conv"
            or len(prod.inputs) < 3
            or const(prod.inputs[2]).size in (1, prod.outputs[0].shape[1])
        )

    plan = {
        n.name: graph.node(n.inputs[0].node)
        for n in graph.nodes
        if n.op == "batch_norm" and foldable(n, graph.node(n.inputs[0].node))
    }
    if not plan:
        return graph
    folded = {p.name for p in plan.values()}
    rb = Rebuild(graph)
    for node in graph.nodes:
        if node.name in folded:
            continue  # rebuilt together with its batch norm
        if node.name not in plan:
            rb.keep(node)
            continue
        prod, a = plan[node.name], plan[node.name].attrs
        scale, bias, mean, var = (const(r).astype(np.float64) for r in node.inputs[1:])
        s = scale / np.sqrt(var + node.attrs["epsilon"])
        w0 = const(prod.inputs[1])
        w = w0.astype(np.float64)
        if prod.op == "conv":
            w = w * s.reshape((-1,) + (1,) * (w.ndim - 1))
            b = const(prod.inputs[2]).astype(np.float64) if len(prod.inputs) == 3 else 0.0
        else:  # gemm: y = alpha * a' @ b' + beta * c; scale the output columns
            w = w * a["alpha"] * (s.reshape(-1, 1) if a["trans_b"] else s.reshape(1, -1))
            b = (
                const(prod.inputs[2]).astype(np.float64).reshape(-1) * a["beta"]
                if len(prod.inputs) == 3
                else 0.0
            )
        w2, b2 = gd.constant, ((b - mean) * s + bias).astype(w0.dtype)
        with rb.building(node, controls=False):
            x = Tensor(rb.new, rb.refs[prod.inputs[0]])
            if prod.op == "conv":
                out = gd.conv(
                    x, w2(w.astype(w0.dtype)), w2(b2), a["strides"], a["pads"], a["dilations"], a["group"]
                )
            else:
                out = gd.gemm(x, w2(w.astype(w0.dtype)), w2(b2), 1.0, 1.0, a["trans_a"], a["trans_b"])
        rb.bind(node, [out.ref])
    return rb.finish()


class _Rewrite:
    """What a decomposition sees: the node, its inputs (Tensors in the new graph), attrs."""

    def __init__(self, node: Node, inputs: list[Tensor]):
        self.node, self.inputs, self.attrs = node, inputs, node.attrs


def decompose(graph: Graph, rules: Mapping[str, Callable] | None = None) -> Graph:
    """Replace nodes that their op record decomposes, or that one of ``rules`` (op -> rewrite:
    a backend's legalizations into the forms its kernels take) rewrites. A decomposition or
    rule sees the node, its inputs as builder Tensors and its attributes, and returns the new
    outputs, or None to keep the node. Repeats until nothing changes."""
    rules = rules or {}
    while True:
        rb, changed = Rebuild(graph), False
        for node in graph.nodes:
            for fn in (get_op(node.op).decompose, rules.get(node.op)):
                if fn is None:
                    continue
                with rb.building(node, controls=False):
                    outs = fn(_Rewrite(node, rb.inputs(node)))
                if outs is not None:
                    rb.bind(node, [t.ref for t in outs])
                    changed = True
                    break
            else:
                rb.keep(node)
        graph = rb.finish()
        if not changed:
            return graph


FOLD_LIMIT = 64 << 20
"""The largest constant (bytes) fold_constants makes, whatever its inputs."""


def fold_constants(graph: Graph, max_bytes: int = 1 << 16, limit: int = FOLD_LIMIT) -> Graph:
    """Evaluate nodes whose inputs are all constants, when the result is not much larger.

    A result is folded if it is at most ``max_bytes`` or no larger than its inputs together,
    so broadcasting a scalar into a big tensor stays a cheap op instead of a big constant; and
    never above ``limit`` bytes. The size is known from the node's type before anything is
    computed, so nothing is allocated to find out: a result too big stays a run-time step.
    """
    rb = Rebuild(graph)
    const = set()
    for node in graph.nodes:
        opdef = get_op(node.op)
        foldable = (
            not opdef.stateful
            and not opdef.control
            and node.inputs
            and all(r in const for r in node.inputs)
            and len(node.outputs) == 1
        )
        if node.op == "constant":
            rb.keep(node)
            const.add(node.ref())
            continue
        if foldable:
            in_bytes = sum(graph.type_of(r).nbytes for r in node.inputs)
            if node.outputs[0].nbytes <= min(limit, max(max_bytes, in_bytes)):
                values = [rb.new.constants[rb.refs[r].node] for r in node.inputs]
                try:
                    with np.errstate(all="ignore"):
                        out = opdef.ref(values, node.attrs)
                except FlowcError as e:
                    raise ExecutionError(
                        f"{node.describe(graph.type_of(r) for r in node.inputs)}: {e}"
                    ) from None
                rb.constant(node, np.asarray(out))
                const.add(node.ref())
                continue
        rb.keep(node)
    return rb.finish()


def check_constants(graph: Graph) -> Graph:
    """Refuse now what would fail at run time: inputs that are constants are checked by their
    op's ``check_constants`` (indices out of range, ...), naming the node and the value. The
    graph is returned unchanged."""
    for node in graph.nodes:
        check = get_op(node.op).check_constants
        if check is None:
            continue
        consts = {
            i: graph.constants[r.node]
            for i, r in enumerate(node.inputs)
            if graph.node(r.node).op == "constant"
        }
        if not consts:
            continue
        types = [graph.type_of(r) for r in node.inputs]
        try:
            check(types, node.attrs, consts)
        except FlowcError as e:
            raise ExecutionError(f"{node.describe(types)}: {e}") from None
    return graph


def cse(graph: Graph) -> Graph:
    """Common-subexpression elimination: one node per (op, inputs, attrs, device).

    Equal constants merge too (by dtype, shape and bytes). Stateful ops, placeholders,
    variables and nodes with control inputs are never merged.
    """
    rb = Rebuild(graph)
    seen: dict = {}
    alike: dict = {}  # constants' dtype, shape, first and last bytes -> their distinct byte arrays
    outputs = {r.node for r in graph.declared_outputs}
    for node in graph.nodes:
        opdef = get_op(node.op)
        if node.op in ("placeholder", "variable") or opdef.stateful or opdef.control or node.control_inputs:
            rb.keep(node)
            continue
        if node.op == "constant":
            key = _constant_key(graph, node, alike)
        else:
            key = (node.op, tuple(rb.refs[r] for r in node.inputs), node.attrs, node.device)
        if key in seen and node.name not in outputs:
            rb.bind(node, [ValueRef(seen[key], i) for i in range(len(node.outputs))])
            continue
        seen.setdefault(key, node.name)
        rb.keep(node)
    return rb.finish()


def _constant_key(graph: Graph, node: Node, alike: dict) -> tuple:
    """A key equal for constants of equal dtype, shape, bytes and device: compared byte for
    byte only with those alike at both ends (``alike``: their distinct byte arrays so far;
    hashing all of ResNet-50's 100 MB of weights took 0.09 s)."""
    array = graph.constants[node.name]
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    key = ("constant", array.dtype.str, array.shape, bytes(flat[:64]), bytes(flat[-64:]), node.device)
    group = alike.setdefault(key, [])
    same = next((i for i, other in enumerate(group) if np.array_equal(other, flat)), None)
    if same is None:
        same = len(group)
        group.append(flat)
    return key + (same,)


def merge_constants(graph: Graph) -> Graph:
    """Equal constants as one (those a backend's lowering makes: two products of one weight
    matrix, each packing it alike, store it once)."""
    rb = Rebuild(graph)
    seen: dict = {}
    alike: dict = {}
    outputs = {r.node for r in graph.declared_outputs}
    for node in graph.nodes:
        if node.op == "constant" and node.name not in outputs:
            key = _constant_key(graph, node, alike)
            if key in seen:
                rb.bind(node, [ValueRef(seen[key], 0)])
                continue
            seen[key] = node.name
        rb.keep(node)
    return rb.finish()


def _scalar_constant(graph: Graph, ref: ValueRef, out_rank: int):
    node = graph.node(ref.node)
    if node.op == "constant" and node.outputs[0].size == 1 and node.outputs[0].rank <= out_rank:
        return graph.constants[node.name].reshape(()).item()
    return None


POW_EXPONENTS = (-1.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
"""Constant exponents ``reduce_pow`` rewrites: small integers into multiplications, halves
into a square root (times a power)."""


def reduce_pow(graph: Graph) -> Graph:
    """``pow(x, c)`` of a float x with a constant scalar c in POW_EXPONENTS as multiplications
    and square roots, which fuse into the elementwise loop instead of calling libm's pow per
    element (GPT-2's tanh-GELU: ``x + 0.044715 * pow(x, 3)``).

    Integers: x * x (2, exact), (x * x) * x (3), (x * x) * (x * x) (4), 1 / x (-1, exact);
    within 1 ulp of pow for each multiplication. 0.5: sqrt(x), exactly what numpy computes
    for it. 1.5 and 2.5: b^n * sqrt(b) with b = x + 0 (pow(-0, 1.5) is +0) and b = +inf
    where x is -inf (pow(-inf, 1.5) is +inf; sqrt would give NaN). Negative x gives NaN, as
    pow does.
    """
    targets = {}
    for n in graph.nodes:
        if n.op == "pow" and n.outputs[0].dtype in ("float16", "float32", "float64"):
            c = _scalar_constant(graph, n.inputs[1], n.outputs[0].rank)
            if c is not None and float(c) in POW_EXPONENTS and graph.type_of(n.inputs[0]) == n.outputs[0]:
                targets[n.name] = float(c)
    return rewrite_nodes(graph, targets, _reduce_pow_node)


def _reduce_pow_node(rb: Rebuild, node: Node, c: float) -> None:
    with rb.building(node, controls=False):
        x = rb.inputs(node)[0]
        if c == -1.0:
            y = gd.reciprocal(x)
        elif c == 1.0:
            y = gd.identity(x)
        elif c == 0.5:
            y = gd.sqrt(x)
        else:
            whole = int(c)
            base = x if c == whole else gd.where(gd.equal(x, -np.inf), np.inf, gd.add(x, 0.0))
            sq = gd.mul(base, base) if whole >= 2 else None
            parts = {1: base, 2: sq, 3: None if sq is None else gd.mul(sq, base),
                     4: None if sq is None else gd.mul(sq, sq)}  # fmt: skip
            y = parts[whole] if c == whole else gd.mul(parts[whole], gd.sqrt(base))
    rb.bind(node, [y.ref])


def cancel_transposes(graph: Graph) -> Graph:
    """A transpose of a transpose as one transpose, or as nothing where the two permutations
    undo each other (a model imported from NHWC layout: each convolution's input goes to
    NCHW and its output back, and the pairs between consecutive convolutions cancel). The
    values are moved, never computed: exact."""
    producer = {n.name: n for n in graph.nodes}
    targets = {}
    for n in graph.nodes:
        if n.op == "transpose":
            first = producer[n.inputs[0].node]
            if first.op == "transpose" and not n.control_inputs:
                outer, inner = n.attrs["perm"], first.attrs["perm"]
                targets[n.name] = (first.inputs[0], tuple(inner[p] for p in outer))
    return rewrite_nodes(graph, targets, _cancel_transpose_node)


SINKS = ("qadd",)
"""Kernel ops that compute each output element from the inputs' elements at its position alone
(as an elementwise op does, without broadcasting): ``sink_transposes`` moves a transpose of
all their inputs past them too."""


def sink_transposes(graph: Graph) -> Graph:
    """An elementwise op (or one of SINKS) whose inputs are all transposes, by one permutation,
    of tensors of its output's shape permuted back, computes on those tensors, and its result is
    transposed once: in a model imported from NHWC, the transposes around a residual add
    between convolutions then undo those of the convolutions (``cancel_transposes``), and the
    add reads and writes the convolutions' layout. Element for element the same: exact."""
    transposed: dict[ValueRef, tuple[ValueRef, tuple]] = {}  # new value -> (source, perm)
    users, by_name = consumers(graph), {n.name: n for n in graph.nodes}

    def movable(n: Node) -> bool:
        opdef = get_op(n.op)
        return (opdef.elementwise or n.op in SINKS) and not opdef.stateful

    def spare(ref: ValueRef) -> bool:  # its transpose is needed by no other kind of reader
        return all(by_name[u].op == "transpose" or movable(by_name[u]) for u in users[ref.node])

    rb, changed = Rebuild(graph), False
    for node in graph.nodes:
        ins = [rb.refs[r] for r in node.inputs]
        perms = {transposed[r][1] if r in transposed else None for r in ins}
        sink = (
            movable(node)
            and all(spare(r) for r in node.inputs)
            and ins
            and len(node.outputs) == 1
            and not node.control_inputs
            and len(perms) == 1
            and None not in perms
            and all(graph.type_of(r).shape == node.outputs[0].shape for r in node.inputs)
        )
        if sink:
            (perm,) = perms
            with rb.building(node):
                y = gd.apply(
                    node.op, [Tensor(rb.new, transposed[r][0]) for r in ins], None, **dict(node.attrs.items())
                )
                out = gd.transpose(y, perm)
            rb.bind(node, [out.ref])
            transposed[out.ref] = (y.ref, tuple(perm))
            changed = True
            continue
        if node.op == "transpose" and not node.control_inputs and ins[0] in transposed:
            # a transpose of one made or kept here: one transpose of its source, or none (as
            # cancel_transposes would), so that what reads it sees the source's layout
            source, inner = transposed[ins[0]]
            perm = tuple(inner[p] for p in node.attrs["perm"])
            if perm == tuple(range(len(perm))):
                rb.bind(node, [source])
                continue
            with rb.building(node, controls=False):
                out = gd.transpose(Tensor(rb.new, source), perm)
            rb.bind(node, [out.ref])
            transposed[out.ref] = (source, perm)
            changed = True
            continue
        rb.keep(node)
        if node.op == "transpose" and not node.control_inputs:
            transposed[rb.refs[node.ref(0)]] = (rb.refs[node.inputs[0]], tuple(node.attrs["perm"]))
    return rb.finish() if changed else graph


def _cancel_transpose_node(rb: Rebuild, node: Node, target) -> None:
    source, perm = target
    if perm == tuple(range(len(perm))):
        rb.bind(node, [rb.refs[source]])
        return
    with rb.building(node, controls=False):
        y = gd.transpose(Tensor(rb.new, rb.refs[source]), perm)
    rb.bind(node, [y.ref])


def rewrite_nodes(graph: Graph, targets: dict, rewrite: Callable) -> Graph:
    """``graph`` with each node named in ``targets`` replaced by what ``rewrite(rb, node,
    targets[name])`` binds in the Rebuild ``rb``, every other node kept; ``graph`` itself when
    ``targets`` is empty."""
    if not targets:
        return graph
    rb = Rebuild(graph)
    for node in graph.nodes:
        if node.name in targets:
            rewrite(rb, node, targets[node.name])
        else:
            rb.keep(node)
    return rb.finish()


FUSE_MAX_OPS = 128
"""The most ops one ``fused`` node evaluates. Its loop body is one basic block, and GCC's time
per op grows with the block past a few hundred ops (PRE, loop splitting, points-to analysis):
at -O3, a 12,500-op chain with a constant of its own in every op (bench/compile_time.py
``--kinds distinct --cc``) took 0.24 ms of GCC per op in groups of 128 or 256 ops, 0.26 in
groups of 512, 0.35 of 1024, 0.58 of 2048 and 1.5 as one loop (18 s); smaller groups cost
more again (32: 0.38 ms, a function each). 128 keeps a margin below where the growth starts;
the buffer between two groups costs nothing measurable. Groups of real models are far smaller
(a tanh-GELU: 9 ops)."""


def fuse_elementwise(graph: Graph, max_ops: int = FUSE_MAX_OPS) -> Graph:
    """Merge chains of elementwise ops into ``fused`` nodes evaluated in one loop.

    A producer joins its consumer's group when it is elementwise and not stateful, all of
    its consumers are in the group, its output has the group's output shape (inputs from
    outside may broadcast), it is not a graph output, and it shares the device and has no
    control edges. Scalar constants become inline literals. The group keeps the name of
    its last node. A group holds at most ``max_ops`` ops (FUSE_MAX_OPS): a longer chain
    becomes consecutive groups, each reading the one before through a buffer.
    """
    consumers: dict[str, set[str]] = {n.name: set() for n in graph.nodes}
    for n in graph.nodes:
        for r in n.inputs:
            consumers[r.node].add(n.name)
    controlled = {c for n in graph.nodes for c in n.control_inputs}
    # a loop's body never takes in a value computed once before the loop (codegen/control.py)
    region = control.region_of(graph.nodes) if control.has_regions(graph) else {}
    outputs = {r.node for r in graph.declared_outputs}
    index = {n.name: i for i, n in enumerate(graph.nodes)}

    def fusable(n: Node) -> bool:
        opdef = get_op(n.op)
        return opdef.elementwise and not opdef.stateful and n.op != "fused" and len(n.outputs) == 1

    def joins(p: Node, root: Node) -> bool:  # the conditions that do not change while a group grows
        return (
            p.name not in group_of
            and fusable(p)
            and p.name not in outputs
            and p.outputs[0].shape == root.outputs[0].shape
            and p.device == root.device
            and not p.control_inputs
            and p.name not in controlled
            and region.get(p.name) == region.get(root.name)
        )

    group_of: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for root in reversed(graph.nodes):
        if not fusable(root) or root.name in group_of:
            continue
        # a worklist: a producer joins once every one of its consumers is in the group, which
        # a count of its consumers inside tells in O(1) (linear in the group's edges)
        members, inside, work = {root.name}, {}, [root]
        while work:
            m = work.pop()
            for name in dict.fromkeys(r.node for r in m.inputs):
                if name in members:
                    continue
                inside[name] = inside.get(name, 0) + 1
                p = graph.node(name)
                if inside[name] == len(consumers[name]) and len(members) < max_ops and joins(p, root):
                    members.add(name)
                    work.append(p)
        for m in members:
            group_of[m] = root.name
        groups[root.name] = sorted(members, key=index.__getitem__)

    rb = Rebuild(graph)
    for node in graph.nodes:
        group = groups.get(group_of.get(node.name, ""))
        if group is None:
            rb.keep(node)
            continue
        if node.name != group[-1]:
            continue  # emitted with its group's root
        inputs, program = _group_program(graph, [graph.node(m) for m in group], node.outputs[0].rank)
        if len(program) == 1:
            rb.keep(node)
            continue
        fused = Node(
            node.name,
            "fused",
            tuple(rb.refs[r] for r in inputs),
            Attrs({"program": program}),
            node.outputs,
            node.device,
            rb.controls(node),
        )
        rb.new.add(fused)
        rb.bind(node, [fused.ref()])
    return rb.finish()


def _group_program(graph: Graph, members: list[Node], rank: int):
    """External inputs of a group, and its instructions (scalar constants become ``fill``)."""
    inside = {m.ref() for m in members}
    slot: dict[ValueRef, int] = {}
    for m in members:
        for r in m.inputs:
            if r not in inside and r not in slot and _scalar_constant(graph, r, rank) is None:
                slot[r] = len(slot)
    inputs = list(slot)
    program: list = []
    for m in members:
        operands = []
        for r in m.inputs:
            if r not in slot:  # an inline scalar, defined where it is first used
                t = graph.type_of(r)
                value = _scalar_constant(graph, r, rank)
                program.append(("fill", (), (("dtype", t.dtype), ("shape", ()), ("value", value))))
                slot[r] = len(inputs) + len(program) - 1
            operands.append(slot[r])
        program.append((m.op, tuple(operands), tuple(m.attrs.items())))
        slot[m.ref()] = len(inputs) + len(program) - 1
    return inputs, tuple(program)


def pipeline(
    rules: Mapping[str, Callable] | None = None, fold_limit: int = FOLD_LIMIT, freeze: bool = True
) -> tuple[tuple[str, Callable[[Graph], Graph]], ...]:
    """The target-neutral passes, in order, as (name, pass); ``rules``: a backend's
    legalizations, applied by ``decompose`` (see there); ``fold_limit``: see fold_constants;
    ``freeze``: variables no step assigns become constants (not for a model that reads its
    variables from a checkpoint)."""
    return (
        ("control_flow", control.flatten),
        ("prune", prune),
        ("freeze_variables", freeze_variables if freeze else (lambda g: g)),
        ("fold_batch_norm", fold_batch_norm),
        ("decompose", lambda g: decompose(g, rules)),
        ("fold_constants", lambda g: fold_constants(g, limit=fold_limit)),
        ("check_constants", check_constants),
        ("reduce_pow", reduce_pow),
        ("cse", cse),
        ("sink_transposes", sink_transposes),
        ("cancel_transposes", cancel_transposes),
        ("prune_dead", prune),
        ("fuse_elementwise", fuse_elementwise),
        ("prune_inlined", prune),
    )
