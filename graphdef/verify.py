"""``verify(graph)``: the checks every graph must pass, run after every pass in tests.

It catches duplicate or empty names, unknown ops, dangling data or control inputs, cycles,
attributes that are not complete and resolved, types that disagree with the op's rule,
missing or mismatched constant/variable arrays, misuse of stateful ops and bad outputs.
Each problem is reported with the node it concerns.
"""

from __future__ import annotations

from .errors import FlowcError, GraphError
from .ir import Attrs, Graph, TensorType, ValueRef, toposort
from .registry import get_op


def verify(graph: Graph) -> Graph:
    """Raise GraphError naming the first problem found; return the graph when it is sound.

    >>> import graphdef as gd
    >>> with gd.Graph("ok") as g:
    ...     _ = gd.relu(gd.placeholder("x", (2,)))
    >>> gd.verify(g) is g
    True
    """
    graph.derived("verified", lambda: _check(graph))
    return graph


def _check(graph: Graph) -> bool:
    nodes = graph.nodes
    seen: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if not isinstance(n.name, str) or not n.name:
            raise GraphError(f"node #{i} (op {n.op}) has an empty or non-string name {n.name!r}")
        if n.name in seen:
            raise GraphError(f"duplicate node name '{n.name}' (nodes #{seen[n.name]} and #{i})")
        seen[n.name] = i
    by_name = {n.name: n for n in nodes}

    for n in nodes:
        try:
            get_op(n.op)
        except FlowcError:
            raise GraphError(f"node '{n.name}' has unknown op '{n.op}'") from None
        for j, r in enumerate(n.inputs):
            if not isinstance(r, ValueRef) or r.node not in by_name:
                raise GraphError(
                    f"node '{n.name}' (op {n.op}) input {j} refers to missing node '{getattr(r, 'node', r)}'"
                )
            if not 0 <= r.index < len(by_name[r.node].outputs):
                raise GraphError(
                    f"node '{n.name}' (op {n.op}) input {j} refers to output {r.index} "
                    f"of '{r.node}', which has {len(by_name[r.node].outputs)}"
                )
        for c in n.control_inputs:
            if c not in by_name:
                raise GraphError(f"node '{n.name}' (op {n.op}) has a control input on missing node '{c}'")
        if n.device is not None and (not isinstance(n.device, str) or not n.device):
            raise GraphError(f"node '{n.name}' has an invalid device {n.device!r}")

    topo = toposort(nodes)
    if topo.cycle:
        raise GraphError(f"graph '{graph.name}' has a cycle: {' -> '.join(topo.cycle)}")

    constants, variables = graph.constants, graph.variables
    for n in topo.order:
        opdef = get_op(n.op)
        types = [by_name[r.node].outputs[r.index] for r in n.inputs]
        where = n.describe(types)
        try:
            opdef.check_arity(len(types), where)
            attrs = opdef.normalize_attrs(n.attrs)
            if opdef.resolve is not None:
                attrs = opdef.resolve(types, attrs)
            if Attrs(attrs) != n.attrs:
                raise GraphError(f"{where}: attributes {dict(n.attrs)} are not in resolved form {attrs}")
            inferred = opdef.infer_types(types, n.attrs)
        except GraphError:
            raise
        except FlowcError as e:
            msg = str(e)
            raise GraphError(msg if msg.startswith(where) else f"{where}: {msg}") from None
        if tuple(inferred) != tuple(n.outputs):
            raise GraphError(
                f"{where}: recorded output types {', '.join(map(str, n.outputs))} "
                f"but the op gives {', '.join(map(str, inferred))}"
            )
        store = constants if n.op == "constant" else variables if n.op == "variable" else None
        if store is not None:
            if n.name not in store:
                raise GraphError(f"{where}: no array stored for it")
            if TensorType.of(store[n.name]) != n.outputs[0]:
                raise GraphError(
                    f"{where}: stored array is {TensorType.of(store[n.name])}, node says {n.outputs[0]}"
                )
        if opdef.stateful and (not n.inputs or by_name[n.inputs[0].node].op != "variable"):
            raise GraphError(f"{where}: first input must be a variable")
    for label, store, op in (("constant", constants, "constant"), ("variable", variables, "variable")):
        for name in store:
            if name not in by_name or by_name[name].op != op:
                raise GraphError(
                    f"graph '{graph.name}' stores a {label} array for '{name}', which is not a {label} node"
                )
    for r in graph.declared_outputs:
        if r.node not in by_name or not 0 <= r.index < len(by_name[r.node].outputs):
            raise GraphError(f"graph '{graph.name}' output '{r}' refers to a missing value")
    return True
