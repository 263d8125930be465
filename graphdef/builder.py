"""The TensorFlow-1-style builder: the graph being built, default graph, scopes, tensors and
node creation.

``Graph`` here (``gd.Graph``) is the growable subclass of the immutable ``ir.Graph``: builder
functions append nodes to the default graph (``with g:``); everything that reads a graph
(passes, the interpreter, codegen) sees an ``ir.Graph``. Shapes and dtypes are inferred as
each node is added, so a mistake is reported at the line that makes it.
"""

from __future__ import annotations

import contextlib
import re
import threading

import numpy as np

from . import dtypes, ir
from .errors import AttrError, FlowcError, GraphError, ShapeError
from .ir import Attrs, Node, TensorType, ValueRef
from .registry import get_op

_local = threading.local()


class Graph(ir.Graph):
    """A graph under construction: the default graph of the builder functions inside
    ``with g:`` (or ``with g.as_default():``). It reads like any ``ir.Graph``; nodes are only
    ever appended (``add``), by the builder functions or by a pass assembling a new graph.

    ``reserved``: names that automatic node names avoid (a pass rebuilding a graph reserves the
    old graph's names, so kept nodes keep theirs). ``notes``: lines an importer has to say about
    the model (``flowc inspect`` prints them: the QDQ patterns left in float, and why; the
    recurrent layers run as loops and those unrolled).
    """

    def __init__(self, name="graph", nodes=(), outputs=(), constants=None, variables=None, reserved=()):
        super().__init__(name, nodes, outputs, constants, variables)
        self._names_used: dict[str, int] = {}
        self.reserved: set[str] = set(reserved)
        self.notes: list[str] = []
        # a subgraph (a loop's body, a branch: graphdef/ops/control.py) sees the tensors of the
        # graphs it is built inside: each one it reads becomes one of its placeholders
        self.parent: Graph | None = None
        self.captured: dict[tuple[int, ValueRef], Tensor] = {}  # (outer graph, value) -> placeholder
        self.captures: list[Tensor] = []  # the outer tensors read, in order

    def capture(self, t: Tensor) -> Tensor:
        """``t`` as a tensor of this graph: itself, or (``t`` from a graph this one is built
        inside) the placeholder standing for it, made on first use."""
        if t.graph is self:
            return t
        if self.parent is None:
            raise GraphError(
                f"tensor '{t.name}' belongs to graph '{t.graph.name}', not to the default graph '{self.name}'"
            )
        outer = self.parent.capture(t)
        key = (id(outer.graph), outer.ref)
        if key not in self.captured:
            t_type = outer.type
            name = _unique_name(self, "capture", False)
            node = Node(
                name, "placeholder", (), Attrs({"shape": t_type.shape, "dtype": t_type.dtype}), (t_type,)
            )
            self.add(node)
            self.captured[key] = Tensor(self, node.ref())
            self.captures.append(outer)
        return self.captured[key]

    def add(self, node: Node, constant=None, variable=None) -> None:
        """Append ``node`` (its inputs must already be in the graph), with the array of a
        constant or the initial value of a variable."""
        if node.name in self:
            raise GraphError(f"a node named '{node.name}' already exists in graph '{self.name}'")
        self._node_list.append(node)
        self._by_name[node.name] = node
        if constant is not None:
            self._constants[node.name] = ir._readonly(constant)
        if variable is not None:
            self._variables[node.name] = ir._readonly(variable)
        self._derived.clear()

    def set_outputs(self, *values) -> None:
        """Declare the graph's outputs (Tensors or names); by default they are its sinks."""
        self._outputs = tuple(v.ref if isinstance(v, Tensor) else self.resolve(v) for v in values)
        self._derived.clear()

    def freeze(self) -> ir.Graph:
        """The immutable graph of the nodes added so far."""
        return ir.Graph(self.name, self._node_list, self._outputs, self._constants, self._variables)

    def as_default(self):
        return default_graph_scope(self)

    def __enter__(self):
        _push_graph(self)
        return self

    def __exit__(self, *exc):
        _pop_graph(self)
        return False


def _stack(name: str) -> list:
    if not hasattr(_local, name):
        setattr(_local, name, [])
    return getattr(_local, name)


def _push_graph(g: Graph) -> None:
    _stack("graphs").append(g)


def _pop_graph(g: Graph) -> None:
    stack = _stack("graphs")
    if not stack or stack[-1] is not g:
        raise GraphError(f"graph '{g.name}' exited out of order")
    stack.pop()


@contextlib.contextmanager
def default_graph_scope(g: Graph):
    _push_graph(g)
    try:
        yield g
    finally:
        _pop_graph(g)


def get_default_graph() -> Graph:
    stack = _stack("graphs")
    if not stack:
        raise GraphError("no default graph: build inside 'with gd.Graph(name):'")
    return stack[-1]


@contextlib.contextmanager
def name_scope(name: str):
    """Prefix the names of nodes created inside with ``name/``."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-/]+", name):
        raise AttrError(f"name scope must be letters, digits, '_', '.', '-' or '/', got {name!r}")
    _stack("scopes").append(name.strip("/"))
    try:
        yield
    finally:
        _stack("scopes").pop()


@contextlib.contextmanager
def source_scope(name: str):
    """Name the nodes created inside after ``name``, the node they come from (an ONNX node, or
    a node a pass replaces): automatic names become ``name/op`` (made unique), so error
    messages, ``flowc inspect`` and saved graphs say which source node a node belongs to. Unlike
    ``name_scope``, any non-empty string (names from model files are kept; C sees them only
    sanitized); callers pass untrusted names through ``errors.printable`` first."""
    _check_name(name)
    _stack("scopes").append(name)
    try:
        yield
    finally:
        _stack("scopes").pop()


_DEVICE = re.compile(r"(rank:\d+)?(/?(cpu|gpu):\d+)?|cpu|gpu")


@contextlib.contextmanager
def device(spec: str | None):
    """Place nodes created inside on ``spec`` (``"rank:1"``, ``"gpu:0"``, ``"rank:1/gpu:0"``).

    ``None`` clears the placement for the nodes inside.
    """
    if spec is not None and (not isinstance(spec, str) or not spec or not _DEVICE.fullmatch(spec)):
        raise AttrError(f"device must look like 'rank:1', 'gpu:0' or 'rank:1/gpu:0', got {spec!r}")
    _stack("devices").append(spec)
    try:
        yield
    finally:
        _stack("devices").pop()


@contextlib.contextmanager
def control_dependencies(deps):
    """Nodes created inside run only after every node in ``deps`` (``None``: clear)."""
    if deps is None:
        _stack("control").append(None)
    else:
        names = []
        for d in deps:
            if isinstance(d, Tensor):
                names.append(d.ref.node)
            elif isinstance(d, str):
                names.append(get_default_graph().resolve(d).node)
            else:
                raise GraphError(f"control dependency must be a Tensor or a name, got {d!r}")
        _stack("control").append(tuple(names))
    try:
        yield
    finally:
        _stack("control").pop()


def _current_controls() -> tuple[str, ...]:
    out: list[str] = []
    for entry in _stack("control"):
        out = [] if entry is None else out + list(entry)
    return tuple(dict.fromkeys(out))


def _current_device() -> str | None:
    stack = _stack("devices")
    return stack[-1] if stack else None


class Tensor:
    """A handle on one output of a node, with operator overloading for building."""

    __slots__ = ("graph", "ref")
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, graph: Graph, ref: ValueRef):
        self.graph = graph
        self.ref = ref

    @property
    def name(self) -> str:
        return str(self.ref)

    @property
    def node(self) -> Node:
        return self.graph.node(self.ref.node)

    @property
    def op(self) -> str:
        return self.node.op

    @property
    def type(self) -> TensorType:
        return self.node.outputs[self.ref.index]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<Tensor '{self.name}' {self.type}>"

    def __bool__(self):
        raise FlowcError(
            f"tensor '{self.name}' has no truth value while building a graph; "
            "use gd.where or compare values after gd.run"
        )

    def __iter__(self):
        raise FlowcError(f"tensor '{self.name}' is not iterable; use gd.split or indexing")

    def __len__(self):
        if not self.shape:
            raise FlowcError(f"tensor '{self.name}' is a scalar and has no length")
        return self.shape[0]

    # Operators are bound in graphdef/__init__.py once every op module is loaded.


def _unique_name(graph: Graph, base: str, explicit: bool) -> str:
    scope = ""
    for s in filter(None, _stack("scopes")):  # a source name may start with "/" ("/encoder/MatMul")
        scope = s if not scope else scope + s if s.startswith("/") else f"{scope}/{s}"
    full = f"{scope}/{base}" if scope else base
    if explicit:
        if full in graph:
            raise GraphError(f"a node named '{full}' already exists in graph '{graph.name}'")
        return full
    candidate, k = full, graph._names_used.get(full, 0)
    while candidate in graph or candidate in graph.reserved:
        k += 1
        candidate = f"{full}_{k}"
    graph._names_used[full] = k
    return candidate


def _check_name(name) -> str:
    """Any non-empty string (names from model files are kept as they are; C sees them only
    sanitized). A name like "y:1" is fine: lookups try exact node names first."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise AttrError(f"node name must be a non-empty string, got {name!r}")
    return name


def _graph_of(tensors) -> Graph:
    graphs = {id(t.graph): t.graph for t in tensors}
    if len(graphs) > 1:
        names = ", ".join(f"'{t.name}' in '{t.graph.name}'" for t in tensors)
        raise GraphError(f"inputs come from different graphs: {names}")
    if graphs:
        g = next(iter(graphs.values()))
        if not isinstance(g, Graph):
            raise GraphError(
                f"tensor '{tensors[0].name}' belongs to graph '{g.name}', which is immutable; "
                "build on a gd.Graph"
            )
        stack = _stack("graphs")
        if stack and stack[-1] is not g:
            raise GraphError(
                f"tensor '{tensors[0].name}' belongs to graph '{g.name}', "
                f"not to the default graph '{stack[-1].name}'"
            )
        return g
    return get_default_graph()


def apply(op: str, inputs, name: str | None = None, **attrs):
    """Add one ``op`` node with ``inputs`` (Tensors) and ``attrs``; return its output(s).

    Returns a Tensor, or a tuple of Tensors for ops with several outputs.
    """
    opdef = get_op(op)
    inputs = list(inputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise GraphError(f"op {op}: input {t!r} is not a Tensor (use gd.constant)")
    stack = _stack("graphs")
    if stack and getattr(stack[-1], "parent", None) is not None:  # building a subgraph
        inputs = [stack[-1].capture(t) for t in inputs]
    graph = _graph_of(inputs)
    explicit = name is not None
    node_name = _unique_name(graph, _check_name(name) if explicit else op, explicit)
    types = [t.type for t in inputs]
    where = f"node '{node_name}' (op {op}" + (f", inputs {', '.join(map(str, types))})" if types else ")")
    try:
        opdef.check_arity(len(inputs), where)
        resolved = opdef.normalize_attrs(attrs)
        if opdef.resolve is not None:
            resolved = opdef.resolve(types, resolved)
        frozen = Attrs(resolved)
        outputs = opdef.infer_types(types, frozen)
    except (ShapeError, AttrError) as e:
        msg = str(e)
        raise type(e)(msg if msg.startswith(where) else f"{where}: {msg}") from None
    node = Node(
        name=node_name,
        op=op,
        inputs=tuple(t.ref for t in inputs),
        attrs=frozen,
        outputs=outputs,
        device=_current_device(),
        control_inputs=_current_controls(),
    )
    graph.add(node)
    outs = tuple(Tensor(graph, node.ref(i)) for i in range(len(outputs)))
    return outs[0] if len(outs) == 1 else outs


def _source(op: str, name: str | None, data=None, variable=False, **attrs) -> Tensor:
    graph = get_default_graph()
    if getattr(graph, "parent", None) is not None and op in ("constant", "variable"):
        # a subgraph holds no arrays: its constants live in the outermost graph, captured
        if variable:
            raise GraphError(f"variable '{name}' cannot be made inside a loop or branch; make it outside")
        root = graph
        while root.parent is not None:
            root = root.parent
        with default_graph_scope(root), control_dependencies(None):
            return _source(op, name if name is None or name not in root else None, data, **attrs)
    opdef = get_op(op)
    explicit = name is not None
    node_name = _unique_name(graph, _check_name(name) if explicit else op, explicit)
    if data is not None:
        attrs.update(shape=data.shape, dtype=dtypes.as_dtype(data.dtype))
    try:
        frozen = Attrs(opdef.normalize_attrs(attrs))
        outputs = opdef.infer_types([], frozen)
    except (ShapeError, AttrError) as e:
        raise type(e)(f"node '{node_name}' (op {op}): {e}") from None
    node = Node(node_name, op, (), frozen, outputs, _current_device(), _current_controls())
    graph.add(node, constant=None if variable else data, variable=data if variable else None)
    return Tensor(graph, node.ref())


def _as_array(value, dtype) -> np.ndarray:
    """A numpy array; Python numbers default to float32 / int32 as in TensorFlow."""
    if isinstance(value, Tensor):
        raise GraphError(f"expected a value, got tensor '{value.name}'")
    if dtype is not None:
        return np.asarray(value, dtype=dtypes.np_dtype(dtypes.as_dtype(dtype)))
    if isinstance(value, np.ndarray):
        array = value
    else:
        array = np.asarray(value)
        if not isinstance(value, np.generic):
            if array.dtype == np.float64:
                array = array.astype(np.float32)
            elif array.dtype == np.int64:
                array = array.astype(np.int32)
    dtypes.as_dtype(array.dtype)
    return array


def placeholder(name: str, shape, dtype="float32") -> Tensor:
    """An input fed at run time.

    >>> import graphdef as gd
    >>> with gd.Graph("g"):
    ...     gd.placeholder("x", (1, 784))
    <Tensor 'x' float32[1,784]>
    """
    return _source("placeholder", name, shape=tuple(shape), dtype=dtype)


def constant(value, dtype=None, name: str | None = None) -> Tensor:
    """A constant tensor; Python floats become float32 and ints int32 unless ``dtype``."""
    return _source("constant", name, data=_as_array(value, dtype))


def variable(name: str, initial_value, dtype=None, trainable: bool = True) -> Tensor:
    """A stateful tensor: ``gd.run`` keeps its value across calls; assign ops change it."""
    return _source("variable", name, data=_as_array(initial_value, dtype), variable=True, trainable=trainable)


def fill(shape, value=0.0, dtype="float32", name: str | None = None) -> Tensor:
    """A tensor of ``shape`` filled with ``value`` (no array is stored in the graph)."""
    return _source("fill", name, shape=tuple(shape), value=value, dtype=dtype)


def zeros(shape, dtype="float32", name=None) -> Tensor:
    return fill(shape, 0, dtype, name)


def ones(shape, dtype="float32", name=None) -> Tensor:
    return fill(shape, 1, dtype, name)


def operand(value, like: Tensor | None = None) -> Tensor:
    """``value`` as a Tensor; Python scalars take the dtype of ``like`` (weak typing)."""
    if isinstance(value, Tensor):
        return value
    if like is not None and (isinstance(value, (bool, int, float, np.generic))):
        dt = like.dtype
        v = value.item() if isinstance(value, np.generic) else value
        if isinstance(v, float) and not dtypes.is_float(dt) and not float(v).is_integer():
            raise ShapeError(f"cannot combine {dt} tensor '{like.name}' with float scalar {v}")
        if isinstance(v, bool) != (dt == "bool") and dt == "bool":
            raise ShapeError(f"cannot combine bool tensor '{like.name}' with number {v}")
        with like.graph.as_default():
            return constant(np.asarray(v, dtype=dtypes.np_dtype(dt)))
    if like is not None:
        with like.graph.as_default():
            return constant(value)
    return constant(value)
