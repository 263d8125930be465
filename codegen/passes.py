"""Graph -> Graph passes, each a pure function, run in the flat order of ``PIPELINE``.

Every pass returns a new graph that passes ``graphdef.verify``; node names of surviving
nodes are kept, so outputs, feeds and error messages keep meaning the same thing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable

import numpy as np

import graphdef as gd
from graphdef.builder import Tensor, control_dependencies, default_graph_scope, device
from graphdef.errors import ExecutionError, FlowcError, GraphError
from graphdef.ir import SOURCE_OPS, Attrs, Graph, Node, TensorType, ValueRef
from graphdef.registry import get_op


class Rebuild:
    """Copies a graph node by node into a fresh graph, letting a pass replace nodes."""

    def __init__(self, graph: Graph):
        self.old = graph
        self.new = Graph(graph.name)
        self.new._reserved = {n.name for n in graph.nodes}
        self.refs: dict[ValueRef, ValueRef] = {}
        self.names: dict[str, str] = {}

    def _controls(self, node: Node) -> tuple[str, ...]:
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
            self._controls(node),
        )
        self.new._append(
            copy,
            constant=self.old._constants.get(node.name) if node.op == "constant" else None,
            variable=self.old._variables.get(node.name) if node.op == "variable" else None,
        )
        self._map(node, [copy.ref(i) for i in range(len(node.outputs))])

    def constant(self, node: Node, value: np.ndarray) -> None:
        """Replace ``node`` by a constant of the same name holding ``value``."""
        t = TensorType.of(value)
        const = Node(
            node.name, "constant", (), Attrs({"shape": t.shape, "dtype": t.dtype}), (t,), node.device
        )
        self.new._append(const, constant=value)
        self._map(node, [const.ref()])

    def replace(self, node: Node, build: Callable[[list[Tensor]], Iterable[Tensor]]) -> None:
        """Replace ``node`` by what ``build(inputs)`` makes with the builder in the new graph."""
        inputs = [Tensor(self.new, self.refs[r]) for r in node.inputs]
        with default_graph_scope(self.new), device(node.device), control_dependencies(self._controls(node)):
            outs = list(build(inputs))
        self._map(node, [t.ref for t in outs])

    def inputs(self, node: Node) -> list[Tensor]:
        return [Tensor(self.new, self.refs[r]) for r in node.inputs]

    def _map(self, node: Node, refs: list[ValueRef]) -> None:
        for i, r in enumerate(refs):
            self.refs[node.ref(i)] = r
        if refs:
            self.names[node.name] = refs[0].node

    def finish(self) -> Graph:
        self.new._outputs = tuple(self.refs[r] for r in self.old.declared_outputs)
        self.new._reserved = set()
        return self.new


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
    out = Graph.from_parts(graph.name, graph.nodes, refs, graph._constants, graph._variables)
    return out


def prune(graph: Graph) -> Graph:
    """Keep only what the outputs need, through data and control edges (partial execution).

    Placeholders always stay: they are the compiled model's interface, used or not.
    """
    needed: set[str] = set()
    stack = [r.node for r in graph.declared_outputs] + [n.name for n in graph.nodes if n.op == "placeholder"]
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            node = graph.node(name)
            stack.extend(r.node for r in node.inputs)
            stack.extend(node.control_inputs)
    nodes = [n for n in graph.nodes if n.name in needed]
    return Graph.from_parts(
        graph.name,
        nodes,
        graph.declared_outputs,
        {k: v for k, v in graph._constants.items() if k in needed},
        {k: v for k, v in graph._variables.items() if k in needed},
    )


def freeze_variables(graph: Graph) -> Graph:
    """Variables that no assign op changes are constants for the compiled code."""
    assigned = {n.inputs[0].node for n in graph.nodes if get_op(n.op).stateful}
    rb = Rebuild(graph)
    for node in graph.nodes:
        if node.op == "variable" and node.name not in assigned:
            rb.constant(node, graph._variables[node.name])
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
        node = graph.node(ref.node)
        return graph._constants[node.name] if node.op == "constant" else None

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
        with default_graph_scope(rb.new), device(node.device):
            x = Tensor(rb.new, rb.refs[prod.inputs[0]])
            if prod.op == "conv":
                out = gd.conv(
                    x, w2(w.astype(w0.dtype)), w2(b2), a["strides"], a["pads"], a["dilations"], a["group"]
                )
            else:
                out = gd.gemm(x, w2(w.astype(w0.dtype)), w2(b2), 1.0, 1.0, a["trans_a"], a["trans_b"])
        rb._map(node, [out.ref])
    return rb.finish()


class _Rewrite:
    """What a decomposition sees: the node, its inputs (Tensors in the new graph), attrs."""

    def __init__(self, node: Node, inputs: list[Tensor]):
        self.node, self.inputs, self.attrs = node, inputs, node.attrs


def decompose(graph: Graph) -> Graph:
    """Replace nodes whose op record decomposes them (repeats until nothing changes)."""
    while True:
        rb, changed = Rebuild(graph), False
        for node in graph.nodes:
            fn = get_op(node.op).decompose
            if fn is not None:
                with default_graph_scope(rb.new), device(node.device):
                    outs = fn(_Rewrite(node, rb.inputs(node)))
                if outs is not None:
                    rb._map(node, [t.ref for t in outs])
                    changed = True
                    continue
            rb.keep(node)
        graph = rb.finish()
        if not changed:
            return graph


def fold_constants(graph: Graph, max_bytes: int = 1 << 16) -> Graph:
    """Evaluate nodes whose inputs are all constants, when the result is not much larger.

    A result is folded if it is at most ``max_bytes`` or no larger than its inputs together,
    so broadcasting a scalar into a big tensor stays a cheap op instead of a big constant.
    """
    rb = Rebuild(graph)
    const = set()
    for node in graph.nodes:
        opdef = get_op(node.op)
        foldable = (
            node.op not in SOURCE_OPS
            and not opdef.stateful
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
            if node.outputs[0].nbytes <= max(max_bytes, in_bytes):
                values = [rb.new._constants[rb.refs[r].node] for r in node.inputs]
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


def cse(graph: Graph) -> Graph:
    """Common-subexpression elimination: one node per (op, inputs, attrs, device).

    Equal constants merge too (by dtype, shape and bytes). Stateful ops, placeholders,
    variables and nodes with control inputs are never merged.
    """
    rb = Rebuild(graph)
    seen: dict = {}
    outputs = {r.node for r in graph.declared_outputs}
    for node in graph.nodes:
        opdef = get_op(node.op)
        if node.op in ("placeholder", "variable") or opdef.stateful or node.control_inputs:
            rb.keep(node)
            continue
        if node.op == "constant":
            array = graph._constants[node.name]
            key = (
                "constant",
                array.dtype.str,
                array.shape,
                hashlib.sha256(array.tobytes()).hexdigest(),
                node.device,
            )
        else:
            key = (node.op, tuple(rb.refs[r] for r in node.inputs), node.attrs, node.device)
        if key in seen and node.name not in outputs:
            rb._map(node, [ValueRef(seen[key], i) for i in range(len(node.outputs))])
            continue
        seen.setdefault(key, node.name)
        rb.keep(node)
    return rb.finish()


def _scalar_constant(graph: Graph, ref: ValueRef, out_rank: int):
    node = graph.node(ref.node)
    if node.op == "constant" and node.outputs[0].size == 1 and node.outputs[0].rank <= out_rank:
        return graph._constants[node.name].reshape(()).item()
    return None


def fuse_elementwise(graph: Graph) -> Graph:
    """Merge chains of elementwise ops into ``fused`` nodes evaluated in one loop.

    A producer joins its consumer's group when it is elementwise and not stateful, all of
    its consumers are in the group, its output has the group's output shape (inputs from
    outside may broadcast), it is not a graph output, and it shares the device and has no
    control edges. Scalar constants become inline literals. The group keeps the name of
    its last node.
    """
    consumers: dict[str, set[str]] = {n.name: set() for n in graph.nodes}
    for n in graph.nodes:
        for r in n.inputs:
            consumers[r.node].add(n.name)
    controlled = {c for n in graph.nodes for c in n.control_inputs}
    outputs = {r.node for r in graph.declared_outputs}
    index = {n.name: i for i, n in enumerate(graph.nodes)}

    def fusable(n: Node) -> bool:
        opdef = get_op(n.op)
        return opdef.elementwise and not opdef.stateful and n.op != "fused" and len(n.outputs) == 1

    group_of: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for root in reversed(graph.nodes):
        if not fusable(root) or root.name in group_of:
            continue
        members = {root.name}
        changed = True
        while changed:
            changed = False
            for m in sorted(members, key=index.__getitem__):
                for r in graph.node(m).inputs:
                    p = graph.node(r.node)
                    if (
                        p.name not in members
                        and p.name not in group_of
                        and fusable(p)
                        and consumers[p.name] <= members
                        and p.name not in outputs
                        and p.outputs[0].shape == root.outputs[0].shape
                        and p.device == root.device
                        and not p.control_inputs
                        and p.name not in controlled
                    ):
                        members.add(p.name)
                        changed = True
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
            rb._controls(node),
        )
        rb.new._append(fused)
        rb._map(node, [fused.ref()])
    return rb.finish()


def _group_program(graph: Graph, members: list[Node], rank: int):
    """External inputs of a group, and its instructions (scalar constants become ``fill``)."""
    inside = {m.ref() for m in members}
    inputs: list[ValueRef] = []
    for m in members:
        for r in m.inputs:
            if r not in inside and r not in inputs and _scalar_constant(graph, r, rank) is None:
                inputs.append(r)
    slot = {r: i for i, r in enumerate(inputs)}
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


PIPELINE: tuple[tuple[str, Callable[[Graph], Graph]], ...] = (
    ("prune", prune),
    ("freeze_variables", freeze_variables),
    ("fold_batch_norm", fold_batch_norm),
    ("decompose", decompose),
    ("fold_constants", fold_constants),
    ("cse", cse),
    ("prune_dead", prune),
    ("fuse_elementwise", fuse_elementwise),
    ("prune_inlined", prune),
)


def run(
    graph: Graph,
    outputs=None,
    check: bool = True,
    trace: list | None = None,
    isa: str | None = None,
    threads: int = 1,
) -> Graph:
    """Run every pass of ``PIPELINE`` in order, then (given the target's ``isa``) put float32
    products on the fast GEMM with ``lower_linear`` (split over ``threads`` where they are
    big enough) and fold their elementwise consumers into them with ``fuse_epilogues``;
    ``trace`` collects (stage, graph) pairs."""
    graph = select_outputs(graph, outputs)
    if check:
        gd.verify(graph)
    if trace is not None:
        trace.append(("input", graph))
    for name, step in PIPELINE:
        graph = step(graph)
        if check:
            gd.verify(graph)
        if trace is not None:
            trace.append((name, graph))
    if isa is not None:
        graph = prune(fuse_epilogues(lower_linear(graph, isa, threads)))
        if check:
            gd.verify(graph)
        if trace is not None:
            trace.append(("lower_linear+fuse_epilogues", graph))
    return graph


# ----------------------------------------------------------------------------- fast float32 products
def _const_array(graph: Graph, ref: ValueRef):
    node = graph.node(ref.node)
    return graph._constants[node.name] if node.op == "constant" else None


PARALLEL_FLOPS = 200_000
"""A product is split over the model's threads from this many floating-point operations on
(handing work to the pool costs about a microsecond)."""


def lower_linear(graph: Graph, isa: str, threads: int = 1) -> Graph:
    """Put float32 matmul, gemm and conv on the fast GEMM of ``isa`` (runtime_c/kernels/sgemm.h).

    Constant operands are packed now for the ISA's micro-tile (a weight matrix becomes a
    packed constant), so the C code never packs them. Rewritten:
    - matmul: a 2-D constant right operand (dense layers; leading axes of the left operand
      fold into its rows), or any batched product of raw operands;
    - gemm with a constant b and a bias per column (or none);
    - conv with constant weights (and bias), except depthwise ones (group == channels, one
      input channel per group), which keep their direct kernel.
    Everything else (other dtypes, conv_transpose, ...) is left as it is. Products of at
    least ``PARALLEL_FLOPS`` get ``parts = threads``.
    """
    from graphdef.ops import _sgemm_pack as SP

    def f32(*refs):
        return all(graph.type_of(r).dtype == "float32" for r in refs)

    rb = Rebuild(graph)
    for node in graph.nodes:
        op, a = node.op, node.attrs
        ins = [graph.type_of(r) for r in node.inputs]
        new = None
        if op == "matmul" and f32(*node.inputs) and node.outputs[0].size:
            new = _lower_matmul(graph, node, ins, isa, SP)
        elif op == "gemm" and f32(*node.inputs) and node.outputs[0].size:
            new = _lower_gemm(graph, node, ins, isa, SP)
        elif (
            op == "conv"
            and f32(*node.inputs)
            and node.outputs[0].size
            and _const_array(graph, node.inputs[1]) is not None
        ):
            cg = ins[1].shape[1]
            depthwise = a["group"] == ins[0].shape[1] and cg == 1 and a["group"] > 1
            if not depthwise and (len(node.inputs) < 3 or _const_array(graph, node.inputs[2]) is not None):
                new = _lower_conv(graph, node, ins, isa, SP)
        if new is None:
            rb.keep(node)
            continue
        op_name, operands, attrs = new
        if threads > 1 and get_op(op_name).flops(ins, node.outputs, Attrs(attrs)) >= PARALLEL_FLOPS:
            attrs["parts"] = threads
        with default_graph_scope(rb.new), device(node.device), control_dependencies(rb._controls(node)):
            inputs = [
                Tensor(rb.new, rb.refs[r]) if isinstance(r, ValueRef) else gd.constant(r) for r in operands
            ]
            out = gd.apply(op_name, inputs, None, **attrs)
        rb._map(node, [out.ref])
    return rb.finish()


def fuse_epilogues(graph: Graph) -> Graph:
    """Fold the elementwise consumer of a fast-GEMM product into the product as its epilogue.

    Legal when the product (sgemm or conv_gemm, float32) has that one consumer and is not a
    graph output, the consumer is float32 throughout and has the product's shape, and every
    other input of the consumer is read with a fixed stride per matrix row, column and batch
    entry (full tensors such as a residual, per-channel or per-column vectors, scalars). The
    merged node keeps the consumer's name and place (all its inputs exist there).
    """
    from graphdef.ops.fused import program_of

    consumers: dict[str, list[str]] = {n.name: [] for n in graph.nodes}
    for n in graph.nodes:
        for r in n.inputs:
            consumers[r.node].append(n.name)
    controlled = {c for n in graph.nodes for c in n.control_inputs}
    outputs = set(graph.declared_outputs)
    merge, absorbed = {}, set()
    for e in graph.nodes:
        opdef = get_op(e.op)
        if not opdef.elementwise or opdef.stateful or len(e.outputs) != 1:
            continue
        if any(t.dtype != "float32" for t in [*e.outputs, *(graph.type_of(r) for r in e.inputs)]):
            continue
        for slot, r in enumerate(e.inputs):
            prod = graph.node(r.node)
            if (
                prod.op not in ("sgemm", "conv_gemm")
                or prod.attrs["epilogue"]
                or consumers[prod.name] != [e.name]
                or r in outputs
                or prod.name in controlled
                or prod.device != e.device
                or prod.outputs[0].shape != e.outputs[0].shape
            ):
                continue
            extras = [x for x in e.inputs if x != r]
            layouts = [_epilogue_layout(prod, graph.type_of(x).shape) for x in extras]
            if any(lay is None for lay in layouts):
                continue
            merge[e.name] = (prod, slot, extras, tuple(layouts))
            absorbed.add(prod.name)
            break
    if not merge:
        return graph
    rb = Rebuild(graph)
    for node in graph.nodes:
        if node.name in absorbed:
            continue
        if node.name not in merge:
            rb.keep(node)
            continue
        prod, slot, extras, layouts = merge[node.name]
        attrs = dict(prod.attrs.items())
        attrs["epilogue"] = (program_of(node), slot, layouts)
        merged = Node(
            node.name,
            prod.op,
            tuple(rb.refs[r] for r in (*prod.inputs, *extras)),
            Attrs(attrs),
            node.outputs,
            node.device,
            tuple(dict.fromkeys(rb._controls(prod) + rb._controls(node))),
        )
        rb.new._append(merged)
        rb._map(node, [merged.ref()])
    return rb.finish()


def _product_geometry(node: Node):
    """(batch axes innermost first as (size, output stride), m, n, ldc) of a product node."""
    from graphdef.ops.linear import plan_of

    p = plan_of(node.attrs)
    if node.op == "sgemm":
        return [(size, c) for size, _, _, c in node.attrs["batch"]], p.m, p.n, p.ldc
    out = node.outputs[0].shape
    g = node.attrs["group"]
    return [(g, p.m * p.n), (out[0], p.m * g * p.n)], p.m, p.n, p.n


def _epilogue_layout(node: Node, shape: tuple[int, ...]):
    """(rs, cs, batch strides) reading a tensor of ``shape``, broadcast to the product's
    output, at matrix position (i, j) of every batch entry; None if no fixed strides do."""
    out = node.outputs[0].shape
    axes, m, n, ldc = _product_geometry(node)
    if len(shape) > len(out):
        return None
    index = np.broadcast_to(np.arange(math.prod(shape)).reshape(shape), out).reshape(-1)
    i, j = np.ix_(np.arange(m), np.arange(n))
    rs = int(index[ldc]) if m > 1 else 0
    cs = int(index[1]) if n > 1 else 0
    strides = [int(index[c]) if size > 1 else 0 for size, c in axes]
    local = i * rs + j * cs
    for entry in np.ndindex(*[size for size, _ in reversed(axes)]):
        entry = entry[::-1]  # innermost first, like ``axes``
        c_off = sum(k * c for k, (_, c) in zip(entry, axes))
        e_off = sum(k * s for k, s in zip(entry, strides))
        if not np.array_equal(index[c_off + i * ldc + j], e_off + local):
            return None
    return rs, cs, tuple(strides)


def _lower_matmul(graph, node, ins, isa, SP):
    a_t, b_t = ins
    if a_t.rank == 0 or b_t.rank == 0:
        return None
    b_const = _const_array(graph, node.inputs[1])
    if b_const is not None and b_t.rank == 2:
        k, n = b_t.shape
        m = a_t.size // k
        plan = SP.make_plan(m, n, k, isa=isa, b="packed")
        attrs = {"plan": _plan_tuple(plan), "isa": isa, "batch": (), "shape": node.outputs[0].shape}
        return "sgemm", [node.inputs[0], SP.pack_b(b_const.astype(np.float32), plan)], attrs
    # raw operands, batched over the broadcast leading axes
    from graphdef.ops import _lower as L

    ash = (1,) + a_t.shape if a_t.rank == 1 else a_t.shape
    bsh = b_t.shape + (1,) if b_t.rank == 1 else b_t.shape
    batch = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
    m, k, n = ash[-2], ash[-1], bsh[-1]
    a_st = [s * m * k for s in L.broadcast_strides(ash[:-2], batch)] if batch else []
    b_st = [s * k * n for s in L.broadcast_strides(bsh[:-2], batch)] if batch else []
    c_st = [s * m * n for s in L.strides(batch)]
    plan = SP.make_plan(m, n, k, isa=isa)
    # one batch axis per leading output axis (not merged: an epilogue input may broadcast
    # along some of them), innermost first
    axes = tuple((d, sa, sb, sc) for d, sa, sb, sc in zip(batch, a_st, b_st, c_st) if d > 1)[::-1]
    attrs = {"plan": _plan_tuple(plan), "isa": isa, "batch": axes, "shape": node.outputs[0].shape}
    return "sgemm", list(node.inputs), attrs


def _lower_gemm(graph, node, ins, isa, SP):
    a = node.attrs
    b_const = _const_array(graph, node.inputs[1])
    if b_const is None:
        return None
    m, n = node.outputs[0].shape
    k = ins[0].shape[0] if a["trans_a"] else ins[0].shape[1]
    logical_b = b_const.T if a["trans_b"] else b_const
    bias = None
    if len(node.inputs) == 3:
        c = _const_array(graph, node.inputs[2])
        if c is None or c.size not in (1, n) or (c.ndim == 2 and c.shape[0] != 1 and c.size != 1):
            return None
        bias = (np.broadcast_to(c.reshape(-1), (n,)) * a["beta"]).astype(np.float32)
    plan = SP.make_plan(
        m,
        n,
        k,
        isa=isa,
        a="trans" if a["trans_a"] else "row",
        b="packed",
        alpha=a["alpha"],
        bias="col" if bias is not None else "none",
    )
    attrs = {"plan": _plan_tuple(plan), "isa": isa, "batch": (), "shape": node.outputs[0].shape}
    operands = [node.inputs[0], SP.pack_b(logical_b.astype(np.float32), plan)]
    return "sgemm", operands + ([bias] if bias is not None else []), attrs


def _lower_conv(graph, node, ins, isa, SP):
    a = node.attrs
    x_t, w_t = ins[:2]
    w = _const_array(graph, node.inputs[1]).astype(np.float32)
    g = a["group"]
    m, cg = w_t.shape[:2]
    kernel = w_t.shape[2:]
    out_sp = node.outputs[0].shape[2:]
    kg, p = cg * math.prod(kernel), math.prod(out_sp)
    plan = SP.make_plan(m // g, p, kg, isa=isa, a="packed", bias="row" if len(node.inputs) == 3 else "none")
    packed = np.concatenate(
        [SP.pack_a(w[i * (m // g) : (i + 1) * (m // g)].reshape(m // g, kg), plan) for i in range(g)]
    )
    direct = (
        all(k == 1 for k in kernel)
        and all(s == 1 for s in a["strides"])
        and not any(a["pads"])
        and tuple(out_sp) == tuple(x_t.shape[2:])
    )
    attrs = {
        "plan": _plan_tuple(plan),
        "isa": isa,
        "kernel": kernel,
        "out": out_sp,
        "strides": a["strides"],
        "pads": a["pads"],
        "dilations": a["dilations"],
        "group": g,
        "direct": direct,
    }
    operands = [node.inputs[0], packed]
    if len(node.inputs) == 3:
        operands.append(_const_array(graph, node.inputs[2]).astype(np.float32))
    return "conv_gemm", operands, attrs


def _plan_tuple(plan) -> tuple:
    from graphdef.ops._sgemm_pack import FIELDS

    return tuple(getattr(plan, f) for f in FIELDS)
