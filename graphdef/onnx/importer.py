"""The ONNX importer: file checks, initializers and external data, inputs with static shapes,
constant evaluation of shape subgraphs, and dispatch to per-op converters.

Values flow as either a numpy array (known at import time: initializers, Constant nodes and
everything computed only from them, such as Shape -> Gather -> Concat) or a Tensor in the
graph being built. A node whose inputs are all known is evaluated right away with flowc's own
op references, so shapes are static in the imported graph.

Subgraphs (the GRAPH attributes of If, Loop and Scan) are converted by ``_Importer.subgraph``:
their nodes see every name of the enclosing scopes, their inputs are bound to given values, and
their outputs are returned. The converters (graphdef/onnx/ops_control.py) call it inside the
functions that flowc's ``cond`` and ``loop`` trace into subgraphs of their own, or once per
iteration to unroll a short loop, or to inline the branch a known condition picks.
"""

from __future__ import annotations

import functools
import math
import os
import stat
from collections import ChainMap, Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import dtypes
from ..builder import (
    Graph,
    Tensor,
    constant,
    default_graph_scope,
    fill,
    placeholder,
    source_scope,
    variable,
)
from ..errors import NAME_LIMIT, FlowcError, GraphError, ShapeError, UnsupportedError, printable
from ..interpret import run
from ..ops.shape import identity
from . import qdq

MAX_TENSOR_BYTES = 1 << 34  # 16 GiB: declared sizes above this are refused before allocating
FOLD_LIMIT_BYTES = 64 << 20  # 64 MiB: the most the importer computes at import time for one node
CONST_LIMIT_BYTES = 1 << 30  # 1 GiB: a helper constant a converter builds (a mask, an index table)
MAX_VALUE_BYTES = (1 << 63) - 1  # no machine addresses a larger tensor: a type beyond it is an overflow
MAX_CONVERSIONS = 1_000_000  # node conversions (unrolled loop bodies count each time): more are refused
MIN_OPSET = 7  # the oldest default-domain opset flowc reads (the newest: what the installed onnx knows)


class OnnxImportError(FlowcError):
    """A model file that cannot be read or imported."""


_CONVERTERS: dict[tuple[str, str], list[tuple[int, Callable]]] = {}
# ONNX element types flowc supports, by TensorProto enum value
_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}


def converter(op_type: str, since: int = 1, domain: str = ""):
    """Register ``fn(node: OnnxNode) -> list of outputs`` for ``op_type`` from opset ``since``."""

    def register(fn):
        _CONVERTERS.setdefault((domain, op_type), []).append((since, fn))
        _CONVERTERS[(domain, op_type)].sort(key=lambda t: t[0])
        return fn

    return register


def _lookup(domain: str, op_type: str, opset: int):
    versions = _CONVERTERS.get((domain, op_type))
    if not versions:
        return None
    usable = [fn for since, fn in versions if since <= opset]
    return usable[-1] if usable else None


def onnx_dtype(elem_type: int, what: str) -> str:
    if elem_type not in _DTYPES:
        from onnx import TensorProto

        try:
            name = TensorProto.DataType.Name(elem_type)
        except ValueError:
            name = f"type {elem_type}"
        raise UnsupportedError(f"{what} has element type {name}, which flowc does not support")
    return _DTYPES[elem_type]


Value = Tensor | np.ndarray


def nbytes_of(shape, dtype: str) -> int:
    """Bytes of a ``dtype`` array of ``shape``, in Python ints (no overflow); the shape must
    be non-negative ints (a ShapeError says which entry is not)."""
    dims = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or int(d) < 0:
            raise ShapeError(f"shape {list(shape)} has entry {d!r}, not a non-negative integer")
        dims.append(int(d))
    return math.prod(dims) * dtypes.itemsize(dtypes.as_dtype(dtype))


@dataclass
class OnnxNode:
    """What a converter sees: the ONNX node, its opset, attributes and input values."""

    op: str
    name: str
    opset: int
    attrs: dict
    inputs: list  # Value or None (missing optional input)
    num_outputs: int
    importer: _Importer = field(repr=False)
    output_names: tuple[str, ...] = ()

    def used(self, k: int) -> bool:
        """Whether output ``k`` is read: named, and read by a node of the model (at any depth of
        subgraphs) or one of its graphs' outputs. An unread output need not be computed (an
        RNN's Y is a scan of every time step)."""
        if k >= len(self.output_names) or not self.output_names[k]:
            return False
        return self.output_names[k] in self.importer.read_names()

    def note(self, text: str) -> None:
        """A line for the graph's notes (``flowc inspect`` prints them), once per text."""
        if text not in self.importer.notes:
            self.importer.notes.append(text)

    def where(self) -> str:
        return f"node '{self.name}' ({self.op}, opset {self.opset})"

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def is_const(self, i: int) -> bool:
        return self.has(i) and isinstance(self.inputs[i], np.ndarray)

    def const(self, i: int, what: str = "") -> np.ndarray:
        """Input i as a numpy array; it must be known when the model is imported."""
        if not self.has(i):
            raise UnsupportedError(f"{self.where()}: input {i} {what}is missing")
        v = self.inputs[i]
        if isinstance(v, Tensor):
            big = self.importer.unfolded_source(v)
            if big is not None:
                node, nbytes = big
                raise OnnxImportError(
                    f"{self.where()}: input {i} {what}must be known at import time, but it is computed from "
                    f"node '{node}', whose {nbytes} bytes exceed the import-time limit "
                    f"({self.importer.fold_limit} bytes), so it is only computed at run time"
                )
        if not isinstance(v, np.ndarray):
            raise UnsupportedError(
                f"{self.where()}: input {i} {what}must be a constant{value_source(v)}: flowc "
                "compiles static shapes, so this value has to be known at import time"
            )
        return v

    def tensor(self, i: int) -> Tensor:
        """Input i as a Tensor (constants become constant nodes)."""
        v = self.inputs[i]
        return v if isinstance(v, Tensor) else constant(v)

    def dtype(self, i: int) -> str:
        v = self.inputs[i]
        return v.dtype if isinstance(v, Tensor) else dtypes.as_dtype(v.dtype)

    def shape(self, i: int) -> tuple[int, ...]:
        v = self.inputs[i]
        return tuple(v.shape)

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def check_size(self, shape, dtype: str, what: str) -> int:
        """Refuse, before it is allocated, a helper constant of ``shape`` and ``dtype`` (a
        mask, an index table) that this converter builds at import time, when it exceeds the
        importer's ``const_limit``; returns its bytes. The range of one axis counts as well
        (an ``np.arange`` per axis builds many such tables, and one axis of an empty shape
        can still be huge)."""
        try:
            nbytes = nbytes_of(shape, dtype)
        except ShapeError as e:
            raise ShapeError(f"{self.where()}: {what}: {e}") from None
        nbytes = max(
            nbytes, max((int(d) for d in shape), default=0) * dtypes.itemsize(dtypes.as_dtype(dtype))
        )
        if nbytes > self.importer.const_limit:
            raise OnnxImportError(
                f"{self.where()}: {what} of shape {list(shape)} would take {nbytes} bytes at import time, "
                f"more than flowc builds ({self.importer.const_limit} bytes)"
            )
        return nbytes

    def full(self, shape, value, dtype: str) -> Value:
        """``value`` repeated over ``shape``: a numpy array when small, else a ``fill`` node
        (computed at run time, nothing allocated now)."""
        shape = tuple(int(d) for d in shape)
        nbytes_of(shape, dtype)
        if math.prod(shape) <= FULL_ARRAY_ELEMENTS:
            return np.full(shape, value, dtype=dtypes.np_dtype(dtype))
        return fill(shape, float(value) if isinstance(value, (bool, np.bool_)) else value, dtype)

    def unsupported(self, reason: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where()}: {reason}")

    def subgraph(self, attr: str, values: list, what: str = "") -> list:
        """Convert the GRAPH attribute ``attr`` in place with its inputs bound to ``values``;
        return the values of its outputs (see ``_Importer.subgraph``)."""
        g = self.attrs.get(attr)
        if g is None or not hasattr(g, "node"):
            raise self.unsupported(f"attribute {_q(attr)} (a graph) is missing")
        return self.importer.subgraph(g, values, f"{self.where()} {what or attr}")


FULL_ARRAY_ELEMENTS = 4096  # OnnxNode.full: larger values become fill nodes


def value_source(v: Value) -> str:
    """Where a run-time value comes from, for refusals that need it known at import time:
    " (model input 'x': fix it with --value)" when it is a model input or is computed only
    from model inputs (and constants), else ""."""
    if not isinstance(v, Tensor):
        return ""
    if v.op == "placeholder" and getattr(v.graph, "parent", None) is None:
        return f" (model input {_q(v.name)}: fix it with --value)"
    seen, stack, inputs, other = set(), [v], [], False
    while stack:
        t = stack.pop()
        graph, node = t.graph, t.graph.node(t.ref.node)
        if (id(graph), node.name) in seen:
            continue
        seen.add((id(graph), node.name))
        outer = _captured(graph).get(node.name) if node.op == "placeholder" else None
        if outer is not None:  # a loop's or branch's copy of an enclosing graph's value
            stack.append(outer)
        elif node.op == "placeholder" and getattr(graph, "parent", None) is not None:
            return " (it changes from one loop iteration to the next)"
        elif node.op == "placeholder":
            inputs.append(node.name)
        elif not node.inputs and node.op not in ("constant", "fill"):
            other = True  # a variable or another source a --value cannot fix
        stack.extend(Tensor(graph, r) for r in node.inputs)
    if not inputs or other:
        return ""
    first, *rest = sorted(inputs)
    more = f"; also from {', '.join(repr(n) for n in rest)}" if rest else ""
    return f" (computed from model input {_q(first)}: fix it with --value{more})"


def _captured(graph) -> dict[str, Tensor]:
    """A subgraph's capture placeholders (by node name) -> the enclosing graphs' tensors they
    stand for; empty for a graph that is no subgraph."""
    pairs = zip(getattr(graph, "captured", {}).values(), getattr(graph, "captures", []))
    return {p.ref.node: t for p, t in pairs}


def _attr_value(a):
    from onnx import AttributeProto

    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return a.s.decode("utf-8", "replace")
    if t == AttributeProto.TENSOR:
        return _tensor_array(a.t, None, "attribute " + a.name)
    if t == AttributeProto.FLOATS:
        return [float(v) for v in a.floats]
    if t == AttributeProto.INTS:
        return [int(v) for v in a.ints]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if t == AttributeProto.GRAPH:
        return a.g
    if t == AttributeProto.GRAPHS:
        return list(a.graphs)
    if t == AttributeProto.SPARSE_TENSOR:
        return _tensor_array(a.sparse_tensor.values, None, "attribute " + a.name)  # densified by converters
    return None


def _tensor_array(t, base: Path | None, what: str) -> np.ndarray:
    """A TensorProto as a numpy array, refusing huge declared sizes and escaping paths."""
    from onnx import TensorProto, numpy_helper

    dtype = onnx_dtype(t.data_type, f"{what} {_q(t.name)}")
    dims = [int(d) for d in t.dims]
    nbytes = math.prod(dims) * dtypes.itemsize(dtype)
    if any(d < 0 for d in dims) or nbytes > MAX_TENSOR_BYTES:
        raise OnnxImportError(
            f"tensor {_q(t.name)} declares {nbytes} bytes (shape {dims}), more than flowc "
            f"will allocate ({MAX_TENSOR_BYTES} bytes)"
        )
    if t.data_location == TensorProto.EXTERNAL:
        return _external_array(t, base, dims, dtype, nbytes)
    if t.HasField("raw_data"):
        raw = t.raw_data  # each read of the field copies it: read once
        if len(raw) != nbytes:
            raise OnnxImportError(f"tensor {_q(t.name)}: {len(raw)} bytes of data for {nbytes} declared")
        np_type = dtypes.np_dtype(dtype)
        if np_type.kind in "biuf" and np_type.itemsize == dtypes.itemsize(dtype):
            # little-endian bytes as they are (a read-only view of them, no copy)
            data = np.frombuffer(raw, dtype=np_type.newbyteorder("<"))
            return data.astype(np_type, copy=False).reshape(dims)
    try:
        array = numpy_helper.to_array(t)
        return np.asarray(array, dtype=dtypes.np_dtype(dtype)).reshape(tuple(dims))
    except Exception as e:  # malformed data fields
        raise OnnxImportError(f"tensor {_q(t.name)}: unreadable data ({type(e).__name__}: {e})") from None


def _external_field(t, info: dict, key: str, default: int) -> int:
    """The ``offset`` or ``length`` of external data: decimal digits only."""
    text = info.get(key)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) >= 1 << 63:
        raise OnnxImportError(
            f"tensor {_q(t.name)}: external data {key} {text[:40]!r} is not a decimal integer in [0, 2^63)"
        )
    return int(text)


def _external_array(t, base: Path | None, dims: list, dtype: str, nbytes: int) -> np.ndarray:
    """The data of a tensor stored in a file beside the model: a regular file inside the
    model's folder, at a decimal offset, exactly the declared bytes long."""
    if base is None:
        raise OnnxImportError(f"tensor {_q(t.name)} uses external data, which needs the model's folder")
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    try:
        path = (base / location).resolve()
        inside = bool(location) and not os.path.isabs(location) and base.resolve() in path.parents
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop
        inside = False
    if not inside:
        raise OnnxImportError(
            f"tensor {_q(t.name)}: external data {_q(location)} is outside the model's folder {base}; refused"
        )
    offset = _external_field(t, info, "offset", 0)
    length = _external_field(t, info, "length", nbytes)
    if length != nbytes:
        raise OnnxImportError(
            f"tensor {_q(t.name)}: external data length {length} != {nbytes} bytes declared"
        )
    try:
        st = path.stat()
    except (OSError, ValueError):
        raise OnnxImportError(f"tensor {_q(t.name)}: external data file {_q(location)} not found") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise OnnxImportError(
            f"tensor {_q(t.name)}: external data location {_q(location)} is {kind}; refused"
        )
    if offset + length > st.st_size:
        raise OnnxImportError(
            f"tensor {_q(t.name)}: external data {_q(location)} has {st.st_size} bytes, "
            f"needs {offset + length}"
        )
    array = np.empty(tuple(dims), dtype=dtypes.np_dtype(dtype).newbyteorder("<"))
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            got = f.readinto(memoryview(array.reshape(-1).view(np.uint8))) if nbytes else 0
    except OSError as e:
        raise OnnxImportError(
            f"tensor {_q(t.name)}: cannot read external data {_q(location)} ({e.strerror})"
        ) from None
    if got != nbytes:
        raise OnnxImportError(
            f"tensor {_q(t.name)}: external data {_q(location)} gave {got} bytes, needs {nbytes}"
        )
    return array


FROZEN_INPUTS = {"Resize": (1, 2, 3), "Upsample": (1,), "BatchNormalization": (3, 4)}
"""Inputs read as import-time constants (or kept as constants when fine-tuning: batch norm's
running mean and variance): initializers there stay constants with ``trainable``."""


class _Importer:
    def __init__(
        self,
        model,
        base: Path | None,
        shapes: dict,
        label: str,
        values: dict | None = None,
        fold_limit: int = FOLD_LIMIT_BYTES,
        const_limit: int = CONST_LIMIT_BYTES,
        trainable=False,
        loop_bound: int | None = None,
    ):
        self.model = model
        self.loop_bound = loop_bound  # the most iterations of a Loop whose length is a run-time value
        self.trainable = trainable
        self.fold_limit = int(fold_limit)
        self.const_limit = int(const_limit)
        # graph node -> (ONNX node, bytes) of values known from constants but too large to compute
        # at import (see _evaluate): they are computed at run time
        self.unfolded: dict[str, tuple[str, int]] = {}
        self.conversions = 0
        self.base = base
        self.shapes = {k: tuple(int(d) for d in v) for k, v in (shapes or {}).items()}
        self.values = {k: np.asarray(v) for k, v in (values or {}).items()}
        self.label = label
        self.opsets = {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import}
        self.opset = self.opsets.get("ai.onnx", 0)
        self.env: MutableMapping[str, Value] = {}  # a ChainMap of scopes inside subgraphs
        self.notes: list[str] = []  # what converters say about the model (OnnxNode.note)
        self._read: set[str] | None = None

    # ------------------------------------------------------------------ graph
    def run(self, name: str | None) -> Graph:
        g = self.model.graph
        # the graph's outputs are named after their tensors at the end: automatic names avoid them
        graph = Graph(name or (g.name or "model"), reserved={vi.name for vi in g.output})
        self.graph = graph
        _check_producers(g, self.label)
        self._check_ops(g)
        inits = {t.name for t in g.initializer}
        for t in g.initializer:
            self.env[t.name] = _tensor_array(t, self.base, "initializer")
        with graph:
            for name in self._trainable(g):
                array = self.env[name]
                self.env[name] = variable(name, array, dtype=dtypes.as_dtype(array.dtype))
            for vi in g.input:
                if vi.name in inits:
                    continue
                if vi.name in self.values:  # fixed when compiling: a constant from now on
                    self.env[vi.name] = self.values[vi.name].astype(dtypes.np_dtype(self._value_dtype(vi)))
                    continue
                x = placeholder(vi.name, self._input_shape(vi), self._value_dtype(vi))
                if x.type.nbytes > MAX_VALUE_BYTES:
                    raise OnnxImportError(
                        f"input {_q(vi.name)} ({x.type}) would take {x.type.nbytes} bytes, more than any "
                        f"machine addresses ({MAX_VALUE_BYTES}): its size overflows"
                    )
                self.env[vi.name] = x
            unknown = (set(self.shapes) | set(self.values)) - {vi.name for vi in g.input}
            if unknown:
                raise OnnxImportError(
                    f"{self.label}: --shape/--value name unknown input(s) {', '.join(sorted(unknown))}"
                )
            # QDQ convolutions and dense layers as QLinearConv, as onnxruntime runs them (qdq.py)
            known = {k: v for k, v in self.env.items() if isinstance(v, np.ndarray)}
            nodes, made, self.qdq_notes = qdq.fuse(g.node, known, {vi.name for vi in g.output}, self.opset)
            if any(n.domain == "com.microsoft" for n in nodes):  # (QLinearSoftmax made of a QDQ Softmax)
                self.opsets.setdefault("com.microsoft", 1)
            self.env.update(made)
            self._convert_nodes(nodes)
            outs = []
            for vi in g.output:
                if vi.name not in self.env:
                    raise OnnxImportError(
                        f"{self.label}: graph output {_q(vi.name)} is not produced by any node"
                    )
                v = self.env[vi.name]
                if isinstance(v, np.ndarray):
                    outs.append(constant(v, name=vi.name))
                elif v.name != vi.name:
                    outs.append(identity(v, name=vi.name))
                else:
                    outs.append(v)
            graph.set_outputs(*outs)
        graph.notes = [f"left in float: {n}" for n in self.qdq_notes] + self.notes
        return graph

    def read_names(self) -> set[str]:
        """Every name a node of the model reads or a graph of it (subgraphs too) gives out."""
        if self._read is None:
            g = self.model.graph
            self._read = {vi.name for vi in g.output}
            for node in _all_nodes(g):
                self._read.update(node.input)
                for sub in _subgraphs(node):
                    self._read.update(vi.name for vi in sub.output)
        return self._read

    def _trainable(self, g) -> list[str]:
        """The initializers that become variables (``trainable``: True, or a collection of
        names): float arrays of at least one dimension that no node reads where an import-time
        constant is needed (FROZEN_INPUTS: resize scales, batch norm's running statistics) and no
        subgraph reads; in initializer order."""
        if not self.trainable:
            return []
        frozen = set()
        for node in g.node:
            for i in FROZEN_INPUTS.get(node.op_type, ()):
                if i < len(node.input):
                    frozen.add(node.input[i])
            for sub in _subgraphs(node):
                frozen.update(name for n in _all_nodes(sub) for name in n.input)
        wanted = None if self.trainable is True else set(self.trainable)
        names = []
        for t in g.initializer:
            a = self.env[t.name]
            if wanted is not None and t.name not in wanted:
                continue
            if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.ndim >= 1 and t.name not in frozen:
                names.append(t.name)
            elif wanted is not None:
                raise OnnxImportError(
                    f"{self.label}: initializer {_q(t.name)} ({a.dtype}{list(a.shape)}) cannot be trainable: "
                    "only float arrays of at least one dimension read as data are"
                )
        if wanted is not None and wanted - set(names):
            missing = sorted(wanted - {t.name for t in g.initializer})
            raise OnnxImportError(f"{self.label}: no initializer named '{missing[0]}' to make trainable")
        return names

    def _check_ops(self, g) -> None:
        """Refuse every op flowc has no converter for at once, with counts and the first
        (named) ONNX node of each."""
        missing: Counter = Counter()
        first: dict[tuple, str] = {}
        for node in _all_nodes(g):
            domain = "" if node.domain in ("", "ai.onnx") else node.domain
            opset = self.opsets.get(node.domain or "ai.onnx", 0)
            if _lookup(domain, node.op_type, opset) is None:
                key = (node.domain or "ai.onnx", node.op_type, opset)
                missing[key] += 1
                if node.name:
                    first.setdefault(key, node.name)

        def part(key, n):
            dom, op, v = key
            named = "" if key not in first else f", node {_q(first[key])}" + (" ..." if n > 1 else "")
            return f"{printable(op, NAME_LIMIT)} x{n} ({printable(dom, NAME_LIMIT)} opset {v}{named})"

        if missing:
            parts = ", ".join(part(k, n) for k, n in sorted(missing.items()))
            raise UnsupportedError(f"{self.label}: unsupported ops: {parts}")

    def _value_dtype(self, vi) -> str:
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedError(f"input {_q(vi.name)} is a {vi.type.WhichOneof('value')}, not a tensor")
        return onnx_dtype(vi.type.tensor_type.elem_type, f"input {_q(vi.name)}")

    def _input_shape(self, vi) -> tuple[int, ...]:
        tt = vi.type.tensor_type
        if vi.name in self.shapes:
            given = self.shapes[vi.name]
            if tt.HasField("shape"):
                dims = tt.shape.dim
                if len(dims) != len(given) or any(
                    d.HasField("dim_value") and d.dim_value != s for d, s in zip(dims, given)
                ):
                    declared = [
                        d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims
                    ]
                    raise OnnxImportError(
                        f"input {_q(vi.name)}: --shape {list(given)} does not fit declared {declared}"
                    )
            return given
        if not tt.HasField("shape"):
            raise OnnxImportError(
                f"input {_q(vi.name)} has no shape; give one with "
                f"--shape {printable(vi.name, NAME_LIMIT)}=D0xD1x..."
            )
        out = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                out.append(int(d.dim_value))
            elif d.HasField("dim_value") and d.dim_value == 0:
                out.append(0)
            else:
                sym = d.dim_param or "?"
                raise OnnxImportError(
                    f"input {_q(vi.name)} has symbolic dimension {_q(sym)} at axis {axis}; fix it with "
                    f"--shape {printable(vi.name, NAME_LIMIT)}=" + "x".join("N" for _ in tt.shape.dim)
                )
        return tuple(out)

    # ------------------------------------------------------------------ nodes
    def _convert_nodes(self, nodes) -> None:
        for index, node in enumerate(nodes):
            for name in node.input:
                if name and name not in self.env:
                    raise OnnxImportError(
                        f"{self.label}: {_node_label(node, index)} reads {_q(name)}, "
                        "which no earlier node or input defines (unsorted or cyclic graph)"
                    )
            self._convert(node, index)

    def _convert(self, node, index: int) -> None:
        self.conversions += 1
        if self.conversions > MAX_CONVERSIONS:
            raise OnnxImportError(
                f"{self.label}: more than {MAX_CONVERSIONS} node conversions (loops unrolled): refused"
            )
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        opset = self.opsets.get(node.domain or "ai.onnx", 0)
        fn = _lookup(domain, node.op_type, opset)
        inputs = [self.env[n] if n else None for n in node.input]
        # the ONNX node's name (or op and index): in messages, and the scope of the graph nodes
        # it becomes ("<ONNX name>/<op>"), so later stages and `flowc inspect` still name it
        label = printable(node.name or f"{node.op_type}_{index}", NAME_LIMIT)
        ctx = OnnxNode(node.op_type, label, opset, {}, inputs, len(node.output), self, tuple(node.output))
        _check_arity(ctx, node, domain)
        # a node with subgraphs also reads names of this scope that are not among its inputs:
        # its converter runs in place, and the subgraph's own nodes fold what is known
        known = (
            all(v is None or isinstance(v, np.ndarray) for v in inputs)
            and node.op_type not in _NONDETERMINISTIC
            and not _subgraphs(node)
        )
        try:
            ctx.attrs = {a.name: _attr_value(a) for a in node.attribute}
            with source_scope(label):
                outs = self._evaluate(fn, ctx) if known else None
                if outs is None:  # not all known, or too large to compute now: graph nodes
                    outs = fn(ctx)
                    if known:
                        self._mark_unfolded(ctx, outs)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            for i, v in enumerate(outs):
                if isinstance(v, Tensor) and v.type.nbytes > MAX_VALUE_BYTES:
                    raise OnnxImportError(
                        f"output {i} ({v.type}) would take {v.type.nbytes} bytes, more than any machine "
                        f"addresses ({MAX_VALUE_BYTES}): its size overflows"
                    )
        except FlowcError as e:
            msg = str(e)
            raise type(e)(msg if ctx.where() in msg else f"{ctx.where()}: {msg}") from None
        except RecursionError:
            raise
        except IndexError:  # a converter reading an input or output the node does not have
            raise OnnxImportError(
                f"{ctx.where()} has {_count(len(node.input), 'input')} and "
                f"{_count(len(node.output), 'output')}, fewer than its converter reads for {ctx.op}"
            ) from None
        except Exception as e:  # a converter failing on input it did not expect: name the node
            raise OnnxImportError(f"{ctx.where()}: cannot be imported ({type(e).__name__}: {e})") from None
        for name, value in zip(node.output, outs):
            if name:
                self.env[name] = value

    def _mark_unfolded(self, ctx: OnnxNode, outs) -> None:
        for v in outs if isinstance(outs, (list, tuple)) else [outs]:
            if isinstance(v, Tensor):
                self.unfolded[v.ref.node] = (ctx.name, v.type.nbytes)

    def unfolded_source(self, v: Tensor) -> tuple[str, int] | None:
        """(ONNX node, bytes) of a value too large to compute at import that ``v`` is computed
        from, or None."""
        if not self.unfolded or v.graph is not getattr(self, "graph", None):
            return None
        graph, seen, stack = v.graph, set(), [v.ref.node]
        while stack:
            name = stack.pop()
            if name in self.unfolded:
                return self.unfolded[name]
            if name in seen:
                continue
            seen.add(name)
            stack.extend(r.node for r in graph.node(name).inputs)
        return None

    def subgraph(self, g, values: list, where: str) -> list:
        """Convert the nodes of subgraph ``g`` (a GraphProto) into the graph being built.

        Names of the enclosing scopes stay visible, as ONNX lets a subgraph read them. ``g``'s
        initializers and its inputs, bound in order to ``values`` (arrays, Tensors or None),
        live in a scope of their own that ends with the call, so a loop body can be converted
        once per iteration. Returns the values of ``g``'s outputs, in order.
        """
        if len(values) != len(g.input):
            raise OnnxImportError(
                f"{where}: subgraph {_q(g.name)} declares {len(g.input)} input(s), {len(values)} given"
            )
        outer = self.env
        scope: dict[str, Value] = {}
        try:
            for t in g.initializer:
                scope[t.name] = _tensor_array(t, self.base, "initializer")
            scope.update((vi.name, v) for vi, v in zip(g.input, values))
            self.env = ChainMap(scope, outer)
            self._convert_nodes(g.node)
            for vi in g.output:
                if vi.name not in self.env:
                    raise OnnxImportError(f"subgraph output {_q(vi.name)} is not produced by any node")
                if self.env[vi.name] is None:
                    raise UnsupportedError(
                        f"subgraph output {_q(vi.name)} is an empty optional, not a tensor"
                    )
            return [self.env[vi.name] for vi in g.output]
        except FlowcError as e:
            raise type(e)(f"{where}: {e}") from None
        finally:
            self.env = outer

    def _evaluate(self, fn, ctx: OnnxNode) -> list | None:
        """Run a converter on constant inputs in a scratch graph and return numpy results;
        None when the scratch graph's values (their sizes are known from the types, before
        anything runs) exceed the import-time limit: the caller builds graph nodes instead."""
        scratch = Graph("const")
        with default_graph_scope(scratch):
            outs = fn(ctx)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        tensors = [o for o in outs if isinstance(o, Tensor)]
        if not tensors:
            return outs
        computed = sum(t.nbytes for n in scratch.nodes if n.op != "constant" for t in n.outputs)
        if computed > self.fold_limit:
            return None
        values = iter(run(scratch, {}, tensors))
        return [next(values) if isinstance(o, Tensor) else o for o in outs]


_NONDETERMINISTIC = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}


def _subgraphs(node) -> list:
    """The graphs held by a node's GRAPH and GRAPHS attributes."""
    out = []
    for a in node.attribute:
        if a.HasField("g"):
            out.append(a.g)
        out.extend(a.graphs)
    return out


def _all_nodes(g):
    """Every node of g and, depth first, of the subgraphs of its nodes."""
    for node in g.node:
        yield node
        for sub in _subgraphs(node):
            yield from _all_nodes(sub)


def _q(name) -> str:
    """A name from the file, quoted for a message: escaped and bounded."""
    return f"'{printable(name, NAME_LIMIT)}'"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _node_label(node, index: int) -> str:
    """``node 'name' (Op)``, or ``node 3 (Op)`` (its index in its graph) when it has no name."""
    op = printable(node.op_type, NAME_LIMIT)
    return f"node {_q(node.name)} ({op})" if node.name else f"node {index} ({op})"


def _graph_attrs(node):
    """(attribute name, graph) for the graphs a node holds (If's branches, a Loop's body)."""
    for a in node.attribute:
        name = printable(a.name, NAME_LIMIT)
        if a.HasField("g"):
            yield name, a.g
        for k, sub in enumerate(a.graphs):
            yield f"{name}[{k}]", sub


def _check_producers(g, label: str, outer: dict | None = None, where: str = "") -> None:
    """Every tensor of ``g`` has one producer (ONNX's single static assignment, which
    onnxruntime enforces): a graph input listed once, and no node output that repeats an input,
    an initializer, an earlier node's output or, in a subgraph (If, Loop, Scan), a name of an
    enclosing graph. Otherwise the importer would let the last one win; refused, naming both."""
    outer = outer or {}
    defined: dict[str, str] = {}
    for vi in g.input:
        if vi.name in defined:
            raise OnnxImportError(f"{label}: {where}graph input {_q(vi.name)} is listed twice")
        defined[vi.name] = f"graph input {_q(vi.name)}"
    for t in g.initializer:  # an initializer may also be listed as an input (IR < 4): one tensor
        defined.setdefault(t.name, f"initializer {_q(t.name)}")
    for index, node in enumerate(g.node):
        this = _node_label(node, index)
        for attr, sub in _graph_attrs(node):
            _check_producers(sub, label, {**outer, **defined}, f"{where}{this} attribute '{attr}': ")
        for name in node.output:
            if not name:
                continue
            first = defined.get(name) or (f"{outer[name]} of an enclosing graph" if name in outer else None)
            if first is not None:
                raise OnnxImportError(
                    f"{label}: {where}tensor {_q(name)} has two producers, {first} and {this}; "
                    "ONNX allows one per tensor"
                )
            defined[name] = this


def _check_utf8(model, label: str) -> None:
    """Every name the importer reads is text: protobuf hands a name that is not valid UTF-8 over
    as bytes (or with surrogates), which would fail later as something else."""

    def check(value, where: str) -> None:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
                return
            except UnicodeEncodeError:
                value = value.encode(
                    "utf-8", "surrogateescape" if _escapes_only(value) else "backslashreplace"
                )
        shown = repr(bytes(value[:60])) + ("..." if len(value) > 60 else "")
        raise OnnxImportError(f"{label}: {where} is not valid UTF-8 ({shown})")

    def tensors(ts, where: str) -> None:
        for k, t in enumerate(ts):
            check(t.name, f"{where} {k} name")
            for e in t.external_data:
                check(e.key, f"{where} {k} external data key")
                check(e.value, f"{where} {k} external data value")

    def graph(g, where: str) -> None:
        check(g.name, f"{where}graph name")
        for kind, vis in (("graph input", g.input), ("graph output", g.output)):
            for k, vi in enumerate(vis):
                check(vi.name, f"{where}{kind} {k} name")
        tensors(g.initializer, f"{where}initializer")
        for index, node in enumerate(g.node):
            check(node.op_type, f"{where}node {index} op type")
            check(node.domain, f"{where}node {index} ({node.op_type}) domain")
            check(node.name, f"{where}node {index} ({node.op_type}) name")
            this = _node_label(node, index)
            for kind, names in (("input", node.input), ("output", node.output)):
                for k, name in enumerate(names):
                    check(name, f"{where}{this} {kind} {k}")
            for k, a in enumerate(node.attribute):
                check(a.name, f"{where}{this} attribute {k} name")
                if a.HasField("t"):
                    tensors([a.t], f"{where}{this} attribute {_q(a.name)} tensor")
            for attr, sub in _graph_attrs(node):
                graph(sub, f"{where}{this} attribute '{attr}': ")

    for k, o in enumerate(model.opset_import):
        check(o.domain, f"opset import {k} domain")
    graph(model.graph, "")


def _escapes_only(text: str) -> bool:
    """Whether the only characters UTF-8 cannot encode are surrogateescape's (U+DC80..U+DCFF)."""
    return all(0xDC80 <= ord(c) <= 0xDCFF for c in text if 0xD800 <= ord(c) <= 0xDFFF)


def _check_opset(model, label: str) -> None:
    """The default domain's opset is one flowc reads: 7 to the newest the installed onnx knows."""
    import onnx.defs

    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and not MIN_OPSET <= o.version <= newest:
            raise OnnxImportError(
                f"{label}: opset {o.version} of the default ONNX domain is not supported; "
                f"flowc reads opsets {MIN_OPSET} to {newest}"
            )


@functools.cache
def _schema(op_type: str, opset: int, domain: str):
    """ONNX's schema of ``op_type`` at ``opset`` (its inputs: names, which are optional), or None
    for an op the installed onnx does not describe (another domain's)."""
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # onnx.defs.SchemaError: not an op of this domain and opset
        return None


def _check_arity(ctx: OnnxNode, node, domain: str) -> None:
    """The node has the inputs its op's ONNX schema requires, and no more than it takes: a
    converter reads ``inputs[k]`` of every required input."""
    schema = _schema(node.op_type, ctx.opset, domain)
    if schema is None:
        return
    from onnx.defs import OpSchema

    have = len(node.input)
    formal = list(schema.inputs)
    required = [f.name for f in formal if f.option == OpSchema.FormalParameterOption.Single]
    if have < schema.min_input:
        needs = ", ".join(required) or ", ".join(f.name for f in formal)
        raise OnnxImportError(
            f"{ctx.where()} has {_count(have, 'input')}; {ctx.op} needs {schema.min_input} ({needs})"
        )
    if have > schema.max_input:
        takes = ", ".join(f.name for f in formal)
        raise OnnxImportError(
            f"{ctx.where()} has {_count(have, 'input')}; {ctx.op} takes at most {schema.max_input} ({takes})"
        )
    for i, f in enumerate(formal[:have]):
        if f.option == OpSchema.FormalParameterOption.Single and not node.input[i]:
            raise OnnxImportError(f"{ctx.where()}: input {i} ({f.name}) is empty, but {ctx.op} needs it")


def load_onnx(
    path,
    shapes: dict | None = None,
    name: str | None = None,
    values: dict | None = None,
    fold_limit: int = FOLD_LIMIT_BYTES,
    const_limit: int = CONST_LIMIT_BYTES,
    trainable=False,
    loop_bound: int | None = None,
) -> Graph:
    """Import an ONNX model file into a Graph with static shapes.

    ``shapes`` fixes inputs with symbolic dimensions, e.g. ``{"input": (1, 3, 224, 224)}``.
    ``values`` fixes whole inputs to constants at compile time (for inputs that decide a
    shape, such as the axes of a reduction given as a graph input); they leave the interface.
    External data files are read only from inside the model's own folder.
    ``fold_limit`` bounds (in bytes) what one node may compute at import time: a value known
    from constants but larger is computed at run time, and one that must be known at import
    (it decides a shape) is refused. ``const_limit`` bounds the helper constants converters
    build from shapes (masks, index tables): a larger one is refused. Sizes are checked before
    anything is allocated.
    ``trainable``: True makes the float initializers read as data (weights, biases, norm scales;
    not batch norm's running statistics) trainable variables named as in the file, for
    fine-tuning with gd.train; or a collection of the initializer names to make trainable.
    ``loop_bound``: the most iterations any Loop whose length is only known at run time (a trip
    count or condition computed from inputs) may run: its scan outputs get that many rows (zeros
    past the last iteration), and running longer is an error at run time. Such a Loop with scan
    outputs needs it; one without runs unbounded without it. ``graph.notes`` says which loops
    were unrolled, which compiled as loops, and why (graphdef/onnx/ops_control.py).
    """
    if loop_bound is not None and (
        isinstance(loop_bound, bool) or not isinstance(loop_bound, (int, np.integer)) or loop_bound < 1
    ):
        raise OnnxImportError(f"loop_bound must be a positive integer, got {loop_bound!r}")
    try:
        import onnx
    except ImportError:
        raise UnsupportedError("ONNX import needs the onnx package: pip install 'flowc[onnx]'") from None
    path = Path(path)
    label = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise OnnxImportError(f"{label}: no such file") from None
    except OSError as e:
        raise OnnxImportError(f"{label}: cannot read ({e.strerror})") from None
    if not data:
        raise OnnxImportError(f"{label}: empty file")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # protobuf DecodeError and friends
        raise OnnxImportError(f"{label}: not an ONNX model (the file does not parse: {e})") from None
    if not model.HasField("graph") or not model.graph.output or model.ir_version <= 0:
        raise OnnxImportError(f"{label}: not an ONNX model (no graph, outputs or IR version)")
    try:
        _check_utf8(model, label)
        _check_opset(model, label)
        bound = None if loop_bound is None else int(loop_bound)
        graph = _Importer(
            model, path.parent, shapes or {}, label, values, fold_limit, const_limit, trainable, bound
        ).run(name)
    except RecursionError:
        raise OnnxImportError(f"{label}: graph is too deeply nested") from None
    except FlowcError:
        raise
    except Exception as e:  # outside any node (initializers, inputs, outputs): name the file
        raise OnnxImportError(f"{label}: cannot be imported ({type(e).__name__}: {e})") from None
    if not isinstance(graph, Graph):
        raise GraphError(f"{label}: import produced no graph")
    return graph
