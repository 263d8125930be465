"""Save and load graphs: one ``.flowc`` file, a zip holding a readable ``graph.json`` and
one ``.npy`` per constant or variable (``unzip -p mlp.flowc graph.json`` shows the graph).

Files are written under a temporary name and renamed, so a failed save leaves nothing
half-written; the same graph always gives the same bytes. Loading trusts nothing: arrays
are read without pickle and the result passes ``verify``.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile

import numpy as np

from . import builder
from .errors import FlowcError, SerializationError
from .ir import Graph, Node, TensorType, ValueRef
from .verify import verify

FORMAT = "flowc-graph"
VERSION = 1
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def to_json(graph: Graph) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
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


def save(graph: Graph, path) -> None:
    """Write ``graph`` to ``path`` (conventionally ``*.flowc``)."""
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
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".flowc-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            for member, data in [("graph.json", text)] + entries:
                info = zipfile.ZipInfo(member, date_time=_EPOCH)
                info.external_attr = 0o644 << 16
                z.writestr(info, data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _need(cond, path, what):
    if not cond:
        raise SerializationError(f"{path}: {what}")


def load(path) -> builder.Graph:
    """Read a graph written by ``save`` (a ``gd.Graph``: it can be built on further)."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as z:
            doc = json.loads(z.read("graph.json"))
            _need(isinstance(doc, dict) and doc.get("format") == FORMAT, path, "not a flowc graph file")
            _need(doc.get("version") == VERSION, path, f"unsupported version {doc.get('version')!r}")
            tensors = doc.get("tensors", {})
            stores = {}
            for kind in ("constants", "variables"):
                stores[kind] = {}
                for name, member in dict(tensors.get(kind, {})).items():
                    with z.open(str(member)) as f:
                        stores[kind][name] = np.lib.format.read_array(f, allow_pickle=False)
    except FileNotFoundError:
        raise SerializationError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as e:
        raise SerializationError(f"{path}: not a readable flowc graph file ({e})") from None
    try:
        nodes = [
            Node(
                name=n["name"],
                op=n["op"],
                inputs=tuple(ValueRef(str(a), int(b)) for a, b in n["inputs"]),
                attrs=n["attrs"],
                outputs=tuple(TensorType(tuple(t["shape"]), t["dtype"]) for t in n["outputs"]),
                device=n.get("device"),
                control_inputs=tuple(n.get("control_inputs", ())),
            )
            for n in doc["nodes"]
        ]
        outputs = [ValueRef(str(a), int(b)) for a, b in doc.get("outputs", [])]
        graph = builder.Graph(str(doc["name"]), nodes, outputs, stores["constants"], stores["variables"])
    except FlowcError as e:
        raise SerializationError(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise SerializationError(f"{path}: malformed graph.json ({type(e).__name__}: {e})") from None
    verify(graph)
    return graph
