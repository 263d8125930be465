"""Save and load graphs: one ``.flowc`` file, a zip holding a readable ``graph.json`` and
one ``.npy`` per constant or variable (``unzip -p mlp.flowc graph.json`` shows the graph).

Files are written under a temporary name and renamed (graphdef/files.py), so a failed save
leaves nothing half-written; the same graph always gives the same bytes. Loading trusts
nothing: every size is checked before the data it announces is inflated (the archive as a
whole within files.MAX_RATIO of the file, graph.json within MAX_JSON_BYTES and
MAX_JSON_TOKENS, each array within MAX_ARRAY_BYTES and exactly the type of its node), arrays
are read without pickle straight into their final buffer, and the result passes ``verify``.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np

from . import builder, dtypes, files
from .errors import FlowcError, SerializationError
from .ir import Graph, Node, TensorType, ValueRef
from .verify import verify

FORMAT = "flowc-graph"
VERSION = 1
_EPOCH = (1980, 1, 1, 0, 0, 0)
# graph.json, refused larger by save and by load. flowc writes ~330 bytes and ~32 JSON tokens
# (',', ':', '[', '{') per node, parsed into ~50 bytes of Python objects per token; a crafted
# file reaches ~60 bytes per token, ~21 per byte (256 MiB of '[],' parse into 5-6 GiB). The
# bytes bound ~200k nodes (10x the largest ONNX graphs in use, gradients included); the tokens
# bound the parse of any file to ~0.5 GiB, within 2x of a real graph.json of that size.
MAX_JSON_BYTES = 64 << 20
MAX_JSON_TOKENS = 8 << 20
MAX_ARRAY_BYTES = 1 << 34  # 16 GiB: one .npy member's data
_MAX_INT = 1 << 64  # ints in graph.json lie in (-2^64, 2^64): a bigger one is an overflow, not a graph
_MAX_DIM = (1 << 63) - 1
_MAX_DEPTH = 32  # nested lists in an attribute value


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Graph):  # a loop's or a branch's subgraph: its nodes, no arrays
        return {"subgraph": _graph_json(value)}
    return value


def to_json(graph: Graph) -> dict:
    return {"format": FORMAT, "version": VERSION, **_graph_json(graph)}


def _graph_json(graph: Graph) -> dict:
    return {
        "name": graph.name,
        "nodes": [
            {
                "name": n.name,
                "op": n.op,
                "inputs": [[r.node, r.index] for r in n.inputs],
                "attrs": {k: _jsonable(v) for k, v in n.attrs.items()},
                "outputs": [{"shape": list(t.shape), "dtype": t.dtype} for t in n.outputs],
                "device": n.device,
                "control_inputs": list(n.control_inputs),
            }
            for n in graph.nodes
        ],
        "outputs": [[r.node, r.index] for r in graph.declared_outputs],
    }


def json_tokens(text: bytes) -> int:
    """An upper bound on the values of a JSON text (each follows one of ``,:[{`` but the
    first), which is what its parse costs: counted before parsing, at memory speed."""
    return sum(text.count(c) for c in (b",", b":", b"[", b"{"))


def save(graph: Graph, path) -> None:
    """Write ``graph`` to ``path`` (conventionally ``*.flowc``), atomically, with the
    permissions a plain ``open`` gives (graphdef/files.py)."""
    verify(graph)
    path = os.fspath(path)
    doc = to_json(graph)
    arrays = {"constants": graph.constants, "variables": graph.variables}
    doc["tensors"] = {}
    entries = []
    for kind, store in arrays.items():
        doc["tensors"][kind] = {}
        for i, name in enumerate(sorted(store)):
            member = f"{kind}/{i}.npy"
            doc["tensors"][kind][name] = member
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(store[name], order="C"), allow_pickle=False)
            entries.append((member, buf.getvalue()))
    text = json.dumps(doc, indent=1, sort_keys=False).encode()
    if len(text) > MAX_JSON_BYTES:
        raise SerializationError(
            f"{path}: graph.json would hold {len(text)} bytes, more than load accepts ({MAX_JSON_BYTES}); "
            "not written"
        )
    tokens = json_tokens(text)
    if tokens > MAX_JSON_TOKENS:
        raise SerializationError(
            f"{path}: graph.json would hold {tokens} JSON tokens, more than load accepts "
            f"({MAX_JSON_TOKENS}); not written"
        )
    with files.atomic_writer(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        for member, data in [("graph.json", text)] + entries:
            info = zipfile.ZipInfo(member, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            z.writestr(info, data)


def _need(cond, path, what):
    if not cond:
        raise SerializationError(f"{path}: {what}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _plain(value, depth: int = 0) -> bool:
    """An attribute value of JSON scalars and (nested) lists, ints within range (a subgraph,
    ``{"subgraph": ...}``, is checked by ``_subgraph``)."""
    if isinstance(value, dict) and list(value) == ["subgraph"]:
        return True
    if value is None or isinstance(value, (bool, str, float)):
        return True
    if _is_int(value):
        return -_MAX_INT < value < _MAX_INT
    if isinstance(value, list) and depth < _MAX_DEPTH:
        return all(_plain(v, depth + 1) for v in value)
    return False


def _ref(item, path, where: str) -> ValueRef:
    """A ``[node, index]`` pair of graph.json as a ValueRef."""
    _need(
        isinstance(item, list)
        and len(item) == 2
        and isinstance(item[0], str)
        and _is_int(item[1])
        and 0 <= item[1] < _MAX_INT,
        path,
        f"malformed graph.json: {where} {_short(item)} is not a [node name, output index] pair",
    )
    return ValueRef(item[0], item[1])


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _tensor_type(t, path, where: str) -> TensorType:
    _need(isinstance(t, dict), path, f"malformed graph.json: {where} is not an object")
    shape, dtype = t.get("shape"), t.get("dtype")
    _need(
        isinstance(shape, list) and all(_is_int(d) and 0 <= d <= _MAX_DIM for d in shape),
        path,
        f"malformed graph.json: {where} has shape {_short(shape)}, not a list of non-negative ints",
    )
    shown = dtype if isinstance(dtype, str) else _short(dtype)
    _need(
        isinstance(dtype, str) and dtype in dtypes.ALL,
        path,
        f"malformed graph.json: {where} has unsupported dtype {shown}",
    )
    t = TensorType(tuple(shape), dtype)
    _need(t.nbytes <= _MAX_DIM, path, f"malformed graph.json: {where} ({t}) has a size that overflows")
    return t


def _subgraph(doc, path, where: str, depth: int) -> Graph:
    """A subgraph attribute (a loop's body, a branch), checked as the graph is."""
    _need(depth < _MAX_DEPTH, path, f"malformed graph.json: {where} nests subgraphs too deeply")
    _need(isinstance(doc, dict), path, f"malformed graph.json: {where} is not an object")
    name, nodes, outputs = doc.get("name"), doc.get("nodes"), doc.get("outputs", [])
    _need(isinstance(name, str) and name, path, f"malformed graph.json: {where} has no name")
    _need(isinstance(nodes, list) and isinstance(outputs, list), path, f"malformed graph.json: {where}")
    return Graph(
        name,
        [_node(n, i, path, depth + 1) for i, n in enumerate(nodes)],
        [_ref(r, path, f"{where} output") for r in outputs],
    )


def _node(n, i: int, path, depth: int = 0) -> Node:
    """Node ``i`` of graph.json, every field checked for its type."""
    _need(isinstance(n, dict), path, f"malformed graph.json: node #{i} is not an object")
    name, op = n.get("name"), n.get("op")
    _need(isinstance(name, str) and name, path, f"malformed graph.json: node #{i} has no name")
    where = f"node '{name}'"
    _need(isinstance(op, str) and op, path, f"malformed graph.json: {where} has no op")
    inputs, attrs, outputs = n.get("inputs", []), n.get("attrs", {}), n.get("outputs")
    device, controls = n.get("device"), n.get("control_inputs", [])
    _need(isinstance(inputs, list), path, f"malformed graph.json: {where} inputs are not a list")
    _need(
        isinstance(attrs, dict) and all(_plain(v) for v in attrs.values()),
        path,
        f"malformed graph.json: {where} attrs are not an object of plain values",
    )
    _need(isinstance(outputs, list), path, f"malformed graph.json: {where} outputs are not a list")
    _need(device is None or isinstance(device, str), path, f"malformed graph.json: {where} device")
    _need(
        isinstance(controls, list) and all(isinstance(c, str) for c in controls),
        path,
        f"malformed graph.json: {where} control_inputs are not a list of names",
    )
    attrs = {
        k: _subgraph(v["subgraph"], path, f"{where} attribute '{k}'", depth) if isinstance(v, dict) else v
        for k, v in attrs.items()
    }
    return Node(
        name=name,
        op=op,
        inputs=tuple(_ref(r, path, f"{where} input") for r in inputs),
        attrs=attrs,
        outputs=tuple(_tensor_type(t, path, f"{where} output {k}") for k, t in enumerate(outputs)),
        device=device,
        control_inputs=tuple(controls),
    )


def _read_json(z: zipfile.ZipFile, path) -> dict:
    info = z.getinfo("graph.json")
    _need(
        info.file_size <= MAX_JSON_BYTES,
        path,
        f"graph.json declares {info.file_size} bytes, more than {MAX_JSON_BYTES}; refused",
    )
    text = files.read_member(z, info, SerializationError, path)
    tokens = json_tokens(text)
    _need(
        tokens <= MAX_JSON_TOKENS,
        path,
        f"graph.json holds {tokens} JSON tokens (',', ':', '[', '{{'), more than {MAX_JSON_TOKENS}; refused",
    )
    doc = json.loads(text)
    del text
    _need(isinstance(doc, dict) and doc.get("format") == FORMAT, path, "not a flowc graph file")
    _need(doc.get("version") == VERSION, path, f"unsupported version {_short(doc.get('version'))}")
    return doc


def _read_array(z: zipfile.ZipFile, member: str, want: TensorType | None, path, what: str) -> np.ndarray:
    """A .npy member, its header checked before any data is read: a flowc dtype (never an
    object array), a size within MAX_ARRAY_BYTES that matches the member's size and the type
    its node declares. The data is inflated straight into the array (files.read_npy)."""
    info = z.getinfo(member)
    head = files.npy_header(z, info)
    shape, descr, start, nbytes = head.shape, head.dtype, head.offset, head.nbytes
    _need(not descr.hasobject, path, f"{what} ({member}) holds Python objects; refused")
    try:
        dtype = dtypes.as_dtype(descr)
    except FlowcError:
        raise SerializationError(f"{path}: {what} ({member}) has unsupported dtype {descr}") from None
    _need(
        nbytes <= MAX_ARRAY_BYTES,
        path,
        f"{what} ({member}) declares {nbytes} bytes (shape {list(shape)}), more than {MAX_ARRAY_BYTES}",
    )
    _need(
        info.file_size == start + nbytes,
        path,
        f"{what} ({member}) is {info.file_size} bytes, its header says {start + nbytes}",
    )
    if want is not None:
        got = TensorType(shape, dtype)
        _need(got == want, path, f"{what} ({member}) holds {got}, its node declares {want}")
    array = files.read_npy(z, info, head, SerializationError, path)
    array.flags.writeable = False  # the graph keeps it as it is rather than copying it
    return array


def _tensors(doc: dict, path) -> dict:
    tensors = doc.get("tensors", {})
    _need(isinstance(tensors, dict), path, "malformed graph.json: tensors is not an object")
    out = {}
    for kind in ("constants", "variables"):
        table = tensors.get(kind, {})
        _need(
            isinstance(table, dict) and all(isinstance(m, str) for m in table.values()),
            path,
            f"malformed graph.json: tensors.{kind} is not an object of member names",
        )
        out[kind] = table
    return out


def _read(z: zipfile.ZipFile, path):
    """(name, nodes, outputs, constants, variables) of an open .flowc file."""
    doc = _read_json(z, path)
    name, nodes, outputs = doc.get("name"), doc.get("nodes"), doc.get("outputs", [])
    _need(isinstance(name, str) and name, path, "malformed graph.json: the graph has no name")
    _need(isinstance(nodes, list), path, "malformed graph.json: nodes is not a list")
    _need(isinstance(outputs, list), path, "malformed graph.json: outputs is not a list")
    nodes = [_node(n, i, path) for i, n in enumerate(nodes)]
    outputs = [_ref(r, path, "graph output") for r in outputs]
    by_name = {n.name: n for n in nodes}
    stores = {}
    for kind, table in _tensors(doc, path).items():
        op = kind[:-1]
        stores[kind] = {}
        for tensor, member in table.items():
            node = by_name.get(tensor)
            _need(
                node is not None and node.op == op and len(node.outputs) == 1,
                path,
                f"graph.json stores a {op} array for '{tensor}', which is not a {op} node",
            )
            stores[kind][tensor] = _read_array(z, member, node.outputs[0], path, f"{op} '{tensor}'")
    return name, nodes, outputs, stores["constants"], stores["variables"]


def load(path) -> builder.Graph:
    """Read a graph written by ``save`` (a ``gd.Graph``: it can be built on further).

    Every failure is one FlowcError naming the file: sizes are checked before anything is
    inflated (all members together at most files.MAX_RATIO times the file, graph.json at most
    MAX_JSON_BYTES and MAX_JSON_TOKENS, each array at most MAX_ARRAY_BYTES and exactly the
    size of its member and the type of its node), every field of graph.json is checked for
    its type, and the graph passes ``verify``. The peak memory of a load is its arrays and
    graph, plus one parse of graph.json.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f, zipfile.ZipFile(f) as z:
            files.check_archive(z, os.fstat(f.fileno()).st_size, SerializationError, path)
            parts = _read(z, path)
        graph = builder.Graph(*parts)
        verify(graph)
    except SerializationError:
        raise
    except FileNotFoundError:
        raise SerializationError(f"{path}: no such file") from None
    except FlowcError as e:
        raise type(e)(f"{path}: {e}") from None
    except Exception as e:  # zip, npy, json and zlib failures, nesting too deep: not a graph file
        raise SerializationError(
            f"{path}: not a readable flowc graph file ({type(e).__name__}: {e})"
        ) from None
    return graph
