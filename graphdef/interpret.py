"""The numpy interpreter: the reference every compiled model is checked against.

``run(graph, feeds, fetches)`` executes only the nodes the fetches need (partial execution,
as in TensorFlow), after their control dependencies, and keeps variable values across calls
in the graph's default ``Session``.
"""

from __future__ import annotations

import weakref

import numpy as np

from . import dtypes
from .builder import Tensor
from .errors import ExecutionError, FeedError, FlowcError
from .ir import Graph, TensorType, ValueRef, toposort
from .registry import get_op
from .verify import verify


def _ref_of(graph: Graph, key) -> ValueRef:
    if isinstance(key, Tensor):
        if key.graph is not graph:
            raise FeedError(f"tensor '{key.name}' belongs to graph '{key.graph.name}', not '{graph.name}'")
        return key.ref
    return graph.resolve(key)


def feed_value(ref, want: TensorType, value) -> np.ndarray:
    """``value`` checked and converted for a tensor of type ``want`` (``ref`` names it)."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype != dtypes.np_dtype(want.dtype):
            raise FeedError(
                f"feed '{ref}' has dtype {array.dtype}, expected {want.dtype} "
                f"(convert with .astype(np.{want.dtype}))"
            )
    else:
        try:
            array = np.asarray(value)
            if array.dtype == object:
                raise ValueError
            converted = array.astype(dtypes.np_dtype(want.dtype))
            if not np.array_equal(converted, array):
                raise ValueError
            array = converted
        except (TypeError, ValueError):
            raise FeedError(f"feed '{ref}' ({str(value)[:40]}) cannot be read as {want.dtype}") from None
    if array.shape != want.shape:
        raise FeedError(f"feed '{ref}' has shape {array.shape}, expected {want.shape}")
    return array


class Session:
    """Variable state plus execution. ``gd.run`` uses one default Session per graph."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._state: dict[str, np.ndarray] = {}
        self._plans: dict = {}

    def variable(self, name: str) -> np.ndarray:
        """The current value of variable ``name`` (a copy)."""
        node = self.graph.node(name)
        if node.op != "variable":
            raise FeedError(f"node '{name}' is a {node.op}, not a variable")
        return self._value_of_variable(name).copy()

    def _value_of_variable(self, name: str) -> np.ndarray:
        if name not in self._state:
            self._state[name] = self.graph.variables[name]
        return self._state[name]

    def reset(self) -> None:
        """Forget assigned values: variables return to their initial values."""
        self._state.clear()

    def _variable_names(self) -> list[str]:
        return [n.name for n in self.graph.nodes if n.op == "variable"]

    def save_checkpoint(self, path):
        """Every variable's current value to ``path`` (graphdef/checkpoint.py's .npz, written
        atomically); the step is ``global_step``'s where the graph has one."""
        from . import checkpoint

        values = {n: self._value_of_variable(n) for n in self._variable_names()}
        step = values.get("global_step")
        return checkpoint.save(path, values, self.graph.name, None if step is None else int(step))

    def restore(self, path) -> dict:
        """Variables from a checkpoint of this graph's variables (refused, naming the first
        variable that differs, when it is another model's); returns its header."""
        from . import checkpoint

        initial = self.graph.variables
        specs = {n: (initial[n].shape, initial[n].dtype) for n in self._variable_names()}
        values, header = checkpoint.load(path, specs, self.graph.name)
        self._state.update(values)
        return header

    def _plan(self, fetched: tuple, fed: frozenset) -> list:
        key = (len(self.graph.nodes), fetched, fed)
        if key not in self._plans:
            graph = self.graph
            needed: set[str] = set()
            stack = [r.node for r in fetched if r not in fed]
            while stack:
                name = stack.pop()
                if name in needed:
                    continue
                needed.add(name)
                node = graph.node(name)
                stack.extend(r.node for r in node.inputs if r not in fed)
                stack.extend(node.control_inputs)
            order = graph.derived("order", lambda: toposort(graph.nodes).order)
            self._plans[key] = [n for n in order if n.name in needed]
        return self._plans[key]

    def run(self, feeds=None, fetches=()):
        """Values of ``fetches`` (a name/Tensor, or a list of them) given ``feeds``."""
        graph = verify(self.graph)
        single = isinstance(fetches, (str, Tensor, ValueRef))
        fetch_refs = tuple(_ref_of(graph, f) for f in ([fetches] if single else fetches))
        values: dict[ValueRef, np.ndarray] = {}
        for key, value in (feeds or {}).items():
            ref = _ref_of(graph, key)
            values[ref] = feed_value(ref, graph.type_of(ref), value)
        plan = self._plan(fetch_refs, frozenset(values))
        missing = [n for n in plan if n.op == "placeholder"]
        if missing:
            names = ", ".join(f"'{n.name}' ({n.outputs[0]})" for n in missing)
            raise FeedError(f"graph '{graph.name}' needs a feed for placeholder(s) {names}")
        start = {n.name: self._value_of_variable(n.name) for n in plan if n.op == "variable"}
        updates: dict[str, np.ndarray] = {}
        for node in plan:
            outs = self._execute(node, values, start)
            for i, v in enumerate(outs):
                values.setdefault(node.ref(i), v)
            if get_op(node.op).stateful:
                updates[node.inputs[0].node] = outs[0]
        self._state.update(updates)
        results = [np.array(values[r], copy=True) for r in fetch_refs]
        return results[0] if single else results

    def _execute(self, node, values, start) -> tuple:
        graph = self.graph
        if node.op == "constant":
            return (graph.constants[node.name],)
        if node.op == "variable":
            return (start[node.name],)
        opdef = get_op(node.op)
        inputs = [values[r] for r in node.inputs]
        try:
            with np.errstate(all="ignore"):
                out = opdef.ref(inputs, node.attrs)
        except FlowcError as e:
            raise type(e)(f"{node.describe(graph.type_of(r) for r in node.inputs)}: {e}") from None
        except Exception as e:  # a numpy failure inside a reference: name the node
            raise ExecutionError(
                f"{node.describe(graph.type_of(r) for r in node.inputs)} failed: {type(e).__name__}: {e}"
            ) from None
        outs = out if isinstance(out, tuple) else (out,)
        got = tuple(TensorType.of(o) for o in outs)
        if got != node.outputs:
            raise ExecutionError(
                f"internal: reference of op {node.op} gave {', '.join(map(str, got))} for "
                f"{node.describe()}, which declares {', '.join(map(str, node.outputs))}"
            )
        return outs


_SESSIONS: dict[int, Session] = {}


def session(graph: Graph) -> Session:
    """The default Session of ``graph`` (created on first use, forgotten with the graph)."""
    key = id(graph)
    if key not in _SESSIONS:
        _SESSIONS[key] = Session(graph)
        weakref.finalize(graph, _SESSIONS.pop, key, None)
    return _SESSIONS[key]


def run(graph: Graph, feeds=None, fetches=()):
    """Run ``graph`` with the numpy references; returns arrays in fetch order.

    >>> import numpy as np, graphdef as gd
    >>> with gd.Graph("g") as g:
    ...     x = gd.placeholder("x", (2,))
    ...     y = gd.relu(x - 1.0, name="y")
    >>> gd.run(g, {"x": np.array([0.5, 3], np.float32)}, ["y"])
    [array([0., 2.], dtype=float32)]
    """
    return session(graph).run(feeds, fetches)
