"""The IR: TensorType, ValueRef, Node and Graph.

A ``Graph`` is a list of ``Node`` records in topological order plus the arrays of its
constants and the initial values of its variables. Nodes, types and graphs are immutable:
passes return new graphs. Building a graph in a program (``with g: ...``) is the builder's
business (graphdef/builder.py); this module imports nothing above it.

>>> t = TensorType((1, 784), "float32")
>>> t.size, t.nbytes, str(t)
(784, 3136, 'float32[1,784]')
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from . import dtypes
from .errors import FeedError, ShapeError


@dataclass(frozen=True)
class TensorType:
    """Static shape and element type of one tensor."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        try:
            shape = tuple(int(d) for d in self.shape)
        except (TypeError, ValueError):
            raise ShapeError(f"shape must be a tuple of ints, got {self.shape!r}") from None
        if any(d < 0 for d in shape):
            raise ShapeError(f"shape {shape} has a negative dimension")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtypes.as_dtype(self.dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * dtypes.itemsize(self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @classmethod
    def of(cls, array) -> TensorType:
        array = np.asarray(array)
        return cls(array.shape, dtypes.as_dtype(array.dtype))


@dataclass(frozen=True, order=True)
class ValueRef:
    """Output ``index`` of node ``node``; written ``node`` for index 0, else ``node:index``."""

    node: str
    index: int = 0

    def __str__(self) -> str:
        return self.node if self.index == 0 else f"{self.node}:{self.index}"


def _freeze(value):
    """Normalize an attribute value to a hashable, comparable plain value."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.ndarray):
        return tuple(_freeze(v) for v in value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Graph) and not hasattr(value, "add"):  # a subgraph (immutable)
        return value
    raise TypeError(f"attribute value {value!r} of type {type(value).__name__} is not plain data")


class Attrs(Mapping):
    """An immutable, hashable mapping of attribute names to plain values."""

    __slots__ = ("_items", "_dict")

    def __init__(self, items: Mapping | Iterable = ()):
        d = dict(items)
        self._dict = {k: _freeze(d[k]) for k in sorted(d)}
        self._items = tuple(self._dict.items())

    def __getitem__(self, key):
        return self._dict[key]

    def __iter__(self):
        return iter(self._dict)

    def __len__(self):
        return len(self._dict)

    def __hash__(self):
        return hash(self._items)

    def __eq__(self, other):
        if isinstance(other, Attrs):
            return self._items == other._items
        return isinstance(other, Mapping) and self._dict == dict(other)

    def __repr__(self):
        return f"Attrs({self._dict!r})"

    def replace(self, **changes) -> Attrs:
        return Attrs({**self._dict, **changes})


@dataclass(frozen=True)
class Node:
    """One operation: ``op`` applied to ``inputs`` with ``attrs``, producing ``outputs``.

    ``control_inputs`` name nodes that must run first although no value flows from them;
    ``device`` is a placement such as ``"rank:1"`` or ``"gpu:0"`` (``None``: unplaced).
    """

    name: str
    op: str
    inputs: tuple[ValueRef, ...]
    attrs: Attrs
    outputs: tuple[TensorType, ...]
    device: str | None = None
    control_inputs: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "control_inputs", tuple(self.control_inputs))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    def ref(self, index: int = 0) -> ValueRef:
        return ValueRef(self.name, index)

    def describe(self, input_types: Iterable[TensorType] = ()) -> str:
        """``node 'n' (op add, inputs float32[2,3], float32[3])`` for error messages."""
        types = ", ".join(str(t) for t in input_types)
        return f"node '{self.name}' (op {self.op}" + (f", inputs {types})" if types else ")")


def _readonly(array) -> np.ndarray:
    """A read-only, C-ordered array the graph owns: shared when it already is one (arrays
    pass from graph to graph unchanged) or a read-only view of an immutable bytes object (an
    ONNX file's tensor data: no copy of ResNet-50's 100 MB), else a copy."""
    if isinstance(array, np.ndarray) and not array.flags.writeable and array.flags.c_contiguous:
        base = array
        while isinstance(base, np.ndarray) and not base.flags.owndata:
            base = base.base
        if base is array or isinstance(base, bytes):
            return array
    array = np.array(array, copy=True, order="C")
    array.flags.writeable = False
    return array


def parse_ref(text: str) -> ValueRef:
    """``"y"`` -> ValueRef("y", 0); ``"split:1"`` -> ValueRef("split", 1)."""
    name, sep, index = text.rpartition(":")
    if sep and name and index.isdigit():
        return ValueRef(name, int(index))
    return ValueRef(text, 0)


class Graph:
    """A dataflow graph: nodes in topological order, declared outputs, constants and variables.

    A Graph never changes: passes make new ones (``Graph(name, nodes, outputs, constants,
    variables)``, taken as given: call ``verify`` to check it). Programs build graphs with
    ``graphdef.builder.Graph`` (``gd.Graph``), the growable subclass that is the builder's
    context (``with g: ...``); everything else only reads.

    >>> a = Graph("a", [Node("x", "placeholder", (), {"shape": (2,), "dtype": "float32"},
    ...                      (TensorType((2,), "float32"),))])
    >>> [n.name for n in a.nodes], a.inputs
    (['x'], ('x',))
    """

    def __init__(
        self,
        name: str = "graph",
        nodes: Iterable[Node] = (),
        outputs: Iterable[ValueRef] = (),
        constants: Mapping[str, np.ndarray] | None = None,
        variables: Mapping[str, np.ndarray] | None = None,
    ):
        if not isinstance(name, str) or not name:
            raise ShapeError(f"graph name must be a non-empty string, got {name!r}")
        self._name = name
        self._node_list: list[Node] = list(nodes)
        self._by_name: dict[str, Node] = {}
        for node in self._node_list:
            self._by_name.setdefault(node.name, node)
        self._outputs: tuple[ValueRef, ...] = tuple(outputs)
        self._constants = {k: _readonly(v) for k, v in (constants or {}).items()}
        self._variables = {k: _readonly(v) for k, v in (variables or {}).items()}
        self._derived: dict = {}

    @classmethod
    def from_parts(cls, name, nodes, outputs=(), constants=None, variables=None) -> Graph:
        """The same as ``Graph(name, nodes, outputs, constants, variables)``."""
        return cls(name, nodes, outputs, constants, variables)

    def derived(self, key, compute):
        """A value computed once from this graph (``compute()``), e.g. an index or an order.
        A graph's content never changes, so the value stays right (a growing builder graph
        forgets them when a node is added)."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    def with_outputs(self, refs: Iterable[ValueRef]) -> Graph:
        """The same graph with other declared outputs."""
        return Graph(self.name, self._node_list, refs, self._constants, self._variables)

    # ----------------------------------------------------------------- reading
    @property
    def name(self) -> str:
        return self._name

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.derived("nodes", lambda: tuple(self._node_list))

    @property
    def constants(self) -> Mapping[str, np.ndarray]:
        """Constant node name -> its (read-only) array."""
        return MappingProxyType(self._constants)

    @property
    def variables(self) -> Mapping[str, np.ndarray]:
        """Variable node name -> its (read-only) initial value."""
        return MappingProxyType(self._variables)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Names of the placeholder nodes, in creation order."""
        return tuple(n.name for n in self._node_list if n.op == "placeholder")

    @property
    def outputs(self) -> tuple[ValueRef, ...]:
        """The declared outputs, or else every value no node consumes (nodes without inputs,
        which hold data rather than compute it, excluded)."""
        if self._outputs:
            return self._outputs

        def sinks():
            used = {r for n in self._node_list for r in n.inputs}
            used_nodes = {c for n in self._node_list for c in n.control_inputs}
            return tuple(
                n.ref(i)
                for n in self._node_list
                if n.inputs and n.name not in used_nodes
                for i in range(len(n.outputs))
                if n.ref(i) not in used
            )

        return self.derived("sinks", sinks)

    @property
    def declared_outputs(self) -> tuple[ValueRef, ...]:
        return self._outputs

    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise FeedError(f"graph '{self.name}' has no node named '{name}'") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def type_of(self, ref: ValueRef) -> TensorType:
        node = self.node(ref.node)
        if not 0 <= ref.index < len(node.outputs):
            raise FeedError(f"node '{ref.node}' has {len(node.outputs)} output(s), not {ref.index + 1}")
        return node.outputs[ref.index]

    def resolve(self, name) -> ValueRef:
        """A ValueRef for a name such as ``"y"`` or ``"split:1"`` (exact node names win)."""
        if isinstance(name, ValueRef):
            ref = name
        elif isinstance(name, str):
            ref = ValueRef(name, 0) if name in self._by_name else parse_ref(name)
        else:
            raise FeedError(f"expected a tensor name, got {type(name).__name__} {name!r}")
        self.type_of(ref)
        return ref

    def consumers(self) -> dict[str, list[str]]:
        """Node name -> names of the nodes that read one of its outputs (data edges)."""

        def build():
            out: dict[str, list[str]] = {n.name: [] for n in self._node_list}
            for n in self._node_list:
                for r in dict.fromkeys(r.node for r in n.inputs):
                    out.setdefault(r, []).append(n.name)
            return out

        return self.derived("consumers", build)

    def array(self, name: str) -> np.ndarray | None:
        """The array stored for a constant node, or the initial value of a variable node
        (None for other nodes)."""
        return self._constants.get(name, self._variables.get(name))

    # ----------------------------------------------------------------- comparison
    def __eq__(self, other):
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self.name == other.name
            and self.nodes == other.nodes
            and self._outputs == other._outputs
            and _same_arrays(self._constants, other._constants)
            and _same_arrays(self._variables, other._variables)
        )

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<Graph '{self.name}': {len(self._node_list)} nodes>"

    def summary(self) -> str:
        """One line per node: ``name = op(inputs) {attrs} -> types``."""
        lines = [f"graph {self.name}"]
        for n in self._node_list:
            args = ", ".join(str(r) for r in n.inputs)
            attrs = " ".join(f"{k}={v}" for k, v in n.attrs.items())
            outs = ", ".join(str(t) for t in n.outputs)
            extra = f" @{n.device}" if n.device else ""
            extra += f" after {','.join(n.control_inputs)}" if n.control_inputs else ""
            lines.append(f"  {n.name} = {n.op}({args}){' {' + attrs + '}' if attrs else ''} -> {outs}{extra}")
        lines.append(f"  outputs: {', '.join(str(r) for r in self.outputs)}")
        return "\n".join(lines)


def _same_arrays(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype
        and a[k].shape == b[k].shape
        and np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f")
        for k in a
    )


@dataclass
class _Topo:
    order: list[Node] = field(default_factory=list)
    cycle: list[str] = field(default_factory=list)


def toposort(nodes: Iterable[Node]) -> _Topo:
    """Kahn's algorithm over data and control edges, stable in the given order.

    Edges to unknown nodes are ignored here (``verify`` reports them). When a cycle
    exists, ``cycle`` names its nodes in order and ``order`` holds the acyclic part.
    """
    nodes = list(nodes)
    names = {n.name for n in nodes}
    preds = {n.name: {r.node for r in n.inputs} | set(n.control_inputs) for n in nodes}
    preds = {k: {p for p in v if p in names} for k, v in preds.items()}
    succs: dict[str, list[str]] = {n.name: [] for n in nodes}
    for k, v in preds.items():
        for p in v:
            succs[p].append(k)
    indeg = {k: len(v) for k, v in preds.items()}
    index = {n.name: i for i, n in enumerate(nodes)}
    by_name = {n.name: n for n in nodes}
    import heapq

    ready = [index[k] for k, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    result = _Topo()
    while ready:
        n = nodes[heapq.heappop(ready)]
        result.order.append(n)
        for s in succs[n.name]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, index[s])
    if len(result.order) < len(by_name):
        # Walk predecessors among the stuck nodes until one repeats: that is a cycle.
        stuck = {k for k, d in indeg.items() if d > 0}
        start = min(stuck, key=index.__getitem__)
        path, seen = [start], {start: 0}
        while True:
            nxt = min((p for p in preds[path[-1]] if p in stuck), key=index.__getitem__)
            if nxt in seen:
                cyc = list(reversed(path[seen[nxt] :]))  # in edge direction
                first = min(range(len(cyc)), key=lambda i: index[cyc[i]])
                cyc = cyc[first:] + cyc[:first]
                result.cycle = cyc + [cyc[0]]
                break
            seen[nxt] = len(path)
            path.append(nxt)
    return result
