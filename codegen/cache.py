"""The build cache: compiled libraries under ~/.cache/flowc (or $FLOWC_CACHE), keyed by the
content of everything a build depends on (the graph's nodes, arrays and outputs, every
option, the target's C flags, and flowc's own templates, runtime and Python sources), so an
unchanged graph loads its library instead of compiling again. Every backend's compile uses it.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from graphdef.ir import Graph
from graphdef.serialize import to_json

from . import pipeline
from .backends.c import toolchain
from .cachedir import cache_root
from .render.sources import RUNTIME, TEMPLATES, VERSION
from .target import Target

_loaded: dict[str, tuple] = {}
COMPLETE = ".flowc-complete"  # written last into a stored export
_source_hash: list[str] = []


def _flowc_sources_hash() -> str:
    if not _source_hash:
        h = hashlib.sha256(VERSION.encode())
        # the templates, the runtime's C, the MPI layer's and codegen itself
        for folder in (TEMPLATES, RUNTIME, Path(__file__).parents[1] / "mpi", Path(__file__).parent):
            for path in sorted(folder.rglob("*")):
                if path.is_file() and path.suffix in (".j2", ".h", ".c", ".inc", ".py", ".cuh"):
                    h.update(str(path.relative_to(folder)).encode())
                    h.update(path.read_bytes())
        _source_hash.append(h.hexdigest())
    return _source_hash[0]


def graph_key(graph: Graph, outputs, options: dict) -> str:
    """Content hash of everything a compiled library depends on."""
    h = hashlib.sha256()
    h.update(json.dumps(to_json(graph), sort_keys=True, default=str).encode())
    for store in (graph.constants, graph.variables):
        for name in sorted(store):
            a = store[name]
            h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))  # no copy
    h.update(json.dumps([str(o) for o in outputs], sort_keys=True).encode())
    h.update(json.dumps(options, sort_keys=True).encode())
    h.update(_flowc_sources_hash().encode())
    return h.hexdigest()[:32]


def build_cached(graph: Graph, options: pipeline.Options, key: str, cache: bool) -> tuple[Path, dict]:
    """(library, metadata) of the build under ``key`` in the cache, built when missing."""
    if key in _loaded:
        return _loaded[key]
    folder = cache_root() / key
    library, meta_path = folder / f"lib{options.name}.so", folder / "metadata.json"
    if not (cache and library.is_file() and meta_path.is_file()):
        tmp = _beside(folder)
        if tmp is None:  # a cache that cannot be written: built in a folder of this process's own
            folder = _private_folder()
            library, meta_path = folder / f"lib{options.name}.so", folder / "metadata.json"
            pipeline.run(graph, options, until="build", folder=folder)
        else:
            try:
                pipeline.run(graph, options, until="build", folder=tmp)
                _place(tmp, folder, lambda: library.is_file() and meta_path.is_file())
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    metadata = json.loads(meta_path.read_text())
    _loaded[key] = (library, metadata)
    return library, metadata


def key_options(options: pipeline.Options) -> dict:
    """Every option as plain data for the cache key (the outputs: graph_key hashes them
    resolved); the target's with the C flags its build passes (Target.key)."""
    key = {}
    for f in dataclasses.fields(options):
        if f.name == "outputs":
            continue
        value = getattr(options, f.name)
        if isinstance(value, Target):
            value = value.key()
        key[f.name] = list(value) if isinstance(value, tuple) else value
    return key


def build_key(graph: Graph, options: pipeline.Options) -> str:
    """The cache key of a build of ``graph`` with ``options``: every option and the graph."""
    opts = key_options(options)
    return graph_key(graph, options.outputs or graph.outputs, opts)


def _export_folder(key: str) -> Path:
    return cache_root() / "exports" / key


def restore_export(key: str, into: Path) -> bool:
    """Copy the project folder an earlier export stored under ``key`` into the empty folder
    ``into`` (files with their modes); False when there is none."""
    folder = _export_folder(key)
    if not (folder / COMPLETE).is_file():
        return False
    for src in sorted(folder.rglob("*")):
        dest = into / src.relative_to(folder)
        if src.is_dir():
            os.mkdir(dest)  # 0777 less the umask, as a new build's folders
        elif src.name != COMPLETE:
            executable = os.stat(src).st_mode & 0o111
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777 if executable else 0o666)
            with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    return True


def store_export(key: str, folder: Path) -> None:
    """Keep a copy of the built project ``folder`` under ``key`` (written beside, renamed into
    place, marked complete last); a cache that cannot be written is skipped, not an error."""
    dest = _export_folder(key)
    if (dest / COMPLETE).is_file():
        return
    try:
        tmp = toolchain.temp_dir_beside(dest)
        try:
            shutil.copytree(folder, tmp, dirs_exist_ok=True)
            (tmp / COMPLETE).write_text("")
            _place(tmp, dest, (dest / COMPLETE).is_file)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass


def bundle_cached(items, options_of) -> tuple[Path, list[dict]]:
    """compile_many's build: each (name, graph, outputs) of ``items`` through the pipeline to
    its sources (``options_of(name, outputs)``), all of them built by their backend's
    ``bundle`` into one shared library, cached under the key of them all. (library, the
    models' metadata, in order)."""
    key = hashlib.sha256("".join(build_key(g, options_of(n, o)) for n, g, o in items).encode()).hexdigest()[
        :32
    ]
    folder = cache_root() / key
    library = folder / "libbundle.so"
    if not library.is_file():
        tmp = _beside(folder)
        if tmp is None:  # a cache that cannot be written: built in a folder of this process's own
            folder = tmp = _private_folder()
            library = folder / "libbundle.so"
        try:
            runs = [pipeline.run(g, options_of(n, o), until="render") for n, g, o in items]
            runs[0].backend.bundle([c.sources for c in runs], tmp, runs[0].options)
            for (n, _, _), c in zip(items, runs):
                (tmp / f"{n}.metadata.json").write_text(json.dumps(c.sources.metadata))
            if tmp != folder:
                _place(tmp, folder, library.is_file)
        finally:
            if tmp != folder:
                shutil.rmtree(tmp, ignore_errors=True)
    return library, [json.loads((folder / f"{n}.metadata.json").read_text()) for n, _, _ in items]


def _place(tmp: Path, folder: Path, complete) -> None:
    """Rename the finished build ``tmp`` to ``folder``. Another process (a test worker, a second
    compile) may have put the same build there first, and may be loading it: then it stays and
    ``tmp`` is dropped. An incomplete folder left there (``complete()`` false) is replaced."""
    try:
        os.rename(tmp, folder)
        return
    except OSError:
        if complete():
            return
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def _beside(folder: Path) -> Path | None:
    """A new temporary folder beside ``folder`` in the cache, None when the cache cannot be
    written (a file, a read-only folder)."""
    try:
        return toolchain.temp_dir_beside(folder)
    except OSError:
        return None


def _private_folder() -> Path:
    """A temporary folder of this process's own, removed when it exits (its libraries stay
    loaded until then)."""
    folder = Path(tempfile.mkdtemp(prefix="flowc-build-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder
