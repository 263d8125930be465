"""compile(): a graph to a shared library loaded in this process; export(): a project folder.

Builds are cached by content: the key hashes the graph (nodes, arrays, outputs), the options,
the compiler, and flowc's own templates and runtime sources, so an unchanged graph loads its
library from the cache (~/.cache/flowc, or $FLOWC_CACHE) instead of compiling again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphdef import dtypes
from graphdef.errors import ExecutionError, FeedError, FlowcError
from graphdef.interpret import feed_value
from graphdef.ir import Graph, TensorType
from graphdef.serialize import to_json

from . import pipeline
from .backends.c import toolchain
from .backends.c.api import EntryPoints
from .backends.c.cnames import C_KEYWORDS
from .backends.c.emit import RUNTIME, TEMPLATES, THREADPOOL, VERSION
from .program import Program
from .storage import ALIGN
from .target import Target, parse_bytes

_loaded: dict[str, tuple] = {}
_source_hash: list[str] = []


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str


def check_name(name: str) -> str:
    if (
        not isinstance(name, str)
        or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name)
        or name in C_KEYWORDS
    ):
        raise FlowcError(f"model name {name!r} must be a C identifier (letters, digits, '_'; not a keyword)")
    return name


def cache_root() -> Path:
    return Path(os.environ.get("FLOWC_CACHE") or Path.home() / ".cache" / "flowc")


def _flowc_sources_hash() -> str:
    if not _source_hash:
        h = hashlib.sha256(VERSION.encode())
        for folder in (TEMPLATES, RUNTIME, Path(__file__).parent):
            for path in sorted(folder.rglob("*")):
                if path.is_file() and path.suffix in (".j2", ".h", ".c", ".inc", ".py"):
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


def program_for(
    graph: Graph,
    outputs=None,
    planner: str = "best",
    time_limit: float = 5.0,
    target: Target | None = None,
    cc: str | None = None,
    flags=(),
) -> Program:
    """The Program the pipeline makes for ``target`` (passes, lowering, schedule, storage and
    memory plan): what every backend renders."""
    options = pipeline.Options(
        target=target or Target(), outputs=outputs, planner=planner, time_limit=time_limit, cc=cc,
        flags=tuple(flags),
    )  # fmt: skip
    return pipeline.run(graph, options, until="plan").program


class CompiledModel:
    """A compiled graph loaded in this process. Call it with keyword feeds:

    >>> import numpy as np, graphdef as gd, codegen
    >>> with gd.Graph("tiny") as g:
    ...     y = gd.relu(gd.placeholder("x", (3,)) - 1.0, name="y")
    >>> m = codegen.compile(g)
    >>> m(x=np.array([0, 1, 2], np.float32))["y"]
    array([0., 0., 1.], dtype=float32)
    """

    def __init__(self, library: Path, metadata: dict):
        import cffi

        self.metadata = metadata
        self.name = metadata["name"]
        self.inputs = [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in metadata["inputs"]]
        self.outputs = [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in metadata["outputs"]]
        self.arena_bytes = metadata["arena_bytes"]
        self.lower_bound_bytes = metadata["arena_lower_bound"]
        self.weight_bytes = metadata["weight_bytes"]
        self.state_bytes = metadata["state_bytes"]
        self._stateful = bool(metadata["state"])
        self.threads = metadata.get("threads", 1)
        self.api = EntryPoints.from_json(metadata["api"])
        ffi = cffi.FFI()
        ffi.cdef(self.api.cdef())
        self._ffi = ffi
        self._lib = ffi.dlopen(str(library))
        self._pool = None
        if self.api.pool:  # started once, stopped when the model is collected
            nbytes, start, stop = (getattr(self._lib, f.name) for f in self.api.pool)
            self._pool = ffi.new("char[]", nbytes() + 64)
            if start(self._pool):
                raise ExecutionError(f"model '{self.name}': cannot start {self.threads} threads")
            self._pool = ffi.gc(self._pool, stop)
        self._run = getattr(self._lib, self.api.run.name)
        self._state = self._aligned(self.state_bytes)
        self.reset()

    @staticmethod
    def _aligned(nbytes: int) -> np.ndarray:
        raw = np.zeros(nbytes + ALIGN, np.uint8)
        start = (-raw.ctypes.data) % ALIGN
        return raw[start : start + nbytes]

    def reset(self) -> None:
        """Variables back to their initial values."""
        if self.api.state_init:
            getattr(self._lib, self.api.state_init.name)(self._ffi.from_buffer(self._state))

    def variable(self, name: str) -> np.ndarray:
        """The current value of a state variable (a copy)."""
        for v in self.metadata["state"]:
            if v["name"] == name:
                t = TensorType(tuple(v["shape"]), v["dtype"])
                raw = self._state[v["offset"] : v["offset"] + t.nbytes]
                return raw.view(dtypes.np_dtype(t.dtype)).reshape(t.shape).copy()
        raise FeedError(f"model '{self.name}' has no state variable '{name}'")

    def __call__(self, **feeds) -> dict[str, np.ndarray]:
        return self.run(feeds)

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        """Outputs by name, as fresh arrays. Feeds must match the inputs' shapes and dtypes."""
        known = {t.name for t in self.inputs}
        unknown = sorted(set(feeds) - known)
        if unknown:
            raise FeedError(
                f"model '{self.name}' has no input(s) {', '.join(map(repr, unknown))}; "
                f"inputs: {', '.join(sorted(known))}"
            )
        missing = [t for t in self.inputs if t.name not in feeds]
        if missing:
            raise FeedError(
                f"model '{self.name}' needs feed(s) "
                + ", ".join(f"'{t.name}' ({TensorType(t.shape, t.dtype)})" for t in missing)
            )
        ins = []
        for t in self.inputs:
            a = np.ascontiguousarray(feed_value(t.name, TensorType(t.shape, t.dtype), feeds[t.name]))
            ins.append(self._ffi.from_buffer(a if a.size else np.zeros(1, np.uint8)))
        results, outs = {}, []
        for t in self.outputs:
            out = np.empty(t.shape, dtypes.np_dtype(t.dtype))
            results[t.name] = out
            outs.append(self._ffi.from_buffer(out if out.size else np.zeros(1, np.uint8)))
        by_role = {
            "input": ins,
            "output": outs,
            "arena": [self._ffi.from_buffer(self._aligned(max(self.arena_bytes, 1)))],
            "state": [self._ffi.from_buffer(self._state)],
            "pool": [self._pool],
        }
        status = self._run(*(by_role[p.role][p.index] for p in self.api.run.params))
        if status:
            msg = self._ffi.string(getattr(self._lib, self.api.status_string.name)(status)).decode()
            raise ExecutionError(f"model '{self.name}' failed: {msg} (status {status})")
        return results

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}: {TensorType(t.shape, t.dtype)}" for t in self.inputs)
        return f"<CompiledModel {self.name}({ins}), arena {self.arena_bytes} B>"


def compile(
    graph: Graph,
    outputs=None,
    name: str = "model",
    cache: bool = True,
    cc: str | None = None,
    flags=(),
    planner: str = "best",
    portable: bool = False,
    threads: int = 1,
) -> CompiledModel:  # noqa: A001 - the public spelling
    """Compile ``graph`` to C, build it as a shared library and load it with cffi.

    ``portable``: no -march=native; ``threads``: worker threads for the heavy steps.
    """
    check_name(name)
    cc = toolchain.find_cc(cc)
    target = Target("host", portable, threads)
    options = pipeline.Options(
        target=target,
        outputs=outputs,
        planner=planner,
        cc=cc,
        flags=tuple(flags),
        name=name,
        product="shared",
    )
    key = graph_key(graph, outputs or graph.outputs, _key_options(options))
    if key in _loaded:
        return CompiledModel(*_loaded[key])
    folder = cache_root() / key
    library, meta_path = folder / f"lib{name}.so", folder / "metadata.json"
    if not (cache and library.is_file() and meta_path.is_file()):
        tmp = toolchain.temp_dir_beside(folder)
        try:
            pipeline.run(graph, options, until="build", folder=tmp)
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    metadata = json.loads(meta_path.read_text())
    _loaded[key] = (library, metadata)
    return CompiledModel(library, metadata)


def _key_options(options: pipeline.Options) -> dict:
    """The options as plain data for the cache key."""
    return {
        "name": options.name,
        "cc": options.cc,
        "flags": list(options.flags),
        "planner": options.planner,
        "kind": options.product,
        "target": options.target.key(),
        "backend": options.backend,
        "weights": options.weights,
    }


def export(
    graph: Graph,
    out_dir,
    name: str = "model",
    arch: str = "host",
    outputs=None,
    build_binary: bool = True,
    cc: str | None = None,
    flags=(),
    planner: str = "best",
    portable: bool = False,
    threads: int = 1,
    max_ram=None,
    max_flash=None,
) -> Path:
    """Write a project folder (header, sources, Makefile, CMakeLists.txt, metadata.json) and,
    unless ``build_binary`` is False, build it:

    - host and Linux arches (``aarch64-linux``, ``armv7-linux``, ``riscv64-linux``): main.c
      and the standalone program ``out_dir/name`` (statically linked when cross-compiled);
    - microcontrollers (``cortex-m0plus``, ``cortex-m4``, ``cortex-m7``): ``lib<name>.a``, a
      test firmware for QEMU (firmware.c, firmware.elf) and the footprint, which is printed by
      ``flowc compile`` and stored under "footprint" in metadata.json (see
      codegen/backends/c/mcu.py).

    ``max_ram`` / ``max_flash`` (bytes, or strings such as "64K"): a model that does not fit
    is refused with a FlowcError giving both numbers, and nothing is written. They bound the
    arena (+ state, + stack and C library data on an MCU) and the weights (+ code on an MCU).

    The folder appears complete or not at all: it is written beside and renamed into place.
    """
    check_name(name)
    target = Target(arch, portable, threads)
    limits = {
        "max_ram": None if max_ram is None else parse_bytes(max_ram, "max-ram"),
        "max_flash": None if max_flash is None else parse_bytes(max_flash, "max-flash"),
    }
    out_dir = Path(out_dir)
    options = pipeline.Options(
        target=target, outputs=outputs, planner=planner, cc=toolchain.find_cc(cc, target), flags=tuple(flags),
        name=name, product=None if build_binary else "none",
    )  # fmt: skip
    c = pipeline.run(graph, options, until="render")
    program = c.program
    ram = {"arena": program.arena_bytes, "state": program.state_bytes}
    check_limits(name, target, limits, ram, {"weights": program.weight_bytes})
    tmp = toolchain.temp_dir_beside(out_dir)
    try:
        built = c.backend.build(c.sources, tmp, options.with_(product=options.product or target.spec.product))
        if built.footprint is not None:
            fp = built.footprint
            check_limits(
                name,
                target,
                limits,
                {**ram, "stack": fp.stack, "data": fp.data},
                {"code": fp.code, "weights": fp.weights},
            )
            c.sources.metadata["footprint"] = fp.to_json()
            (tmp / "metadata.json").write_text(json.dumps(c.sources.metadata, indent=1) + "\n")
        toolchain.replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def check_limits(name: str, target: Target, limits: dict, ram: dict, flash: dict) -> None:
    """Refuse a model whose RAM or flash parts (name -> bytes) exceed max_ram / max_flash."""
    for key, parts in (("max_ram", ram), ("max_flash", flash)):
        limit, need = limits[key], sum(parts.values())
        if limit is not None and need > limit:
            what = " + ".join(f"{k} {v} B" for k, v in parts.items() if v)
            raise FlowcError(
                f"model '{name}' does not fit {key.replace('_', '-')} {limit} B on {target.arch}: "
                f"it needs {need} B ({what or 'nothing'})"
            )


def compile_many(
    graphs, cc: str | None = None, flags=(), planner: str = "best", portable: bool = False, threads: int = 1
) -> list[CompiledModel]:
    """Compile several graphs into ONE shared library (one compiler call), for bulk testing.

    ``graphs`` is a list of ``(name, graph)`` or ``(name, graph, outputs)``; names must differ.
    Each goes through the pipeline up to "render" (weights as C arrays); the generated model
    sources are included into a single translation unit.
    """
    cc = toolchain.find_cc(cc)
    items = [(g[0], g[1], g[2] if len(g) > 2 else None) for g in graphs]
    names = [check_name(n) for n, _, _ in items]
    if len(set(names)) != len(names):
        raise FlowcError("compile_many needs distinct model names")
    target = Target("host", portable, threads)
    base = pipeline.Options(
        target=target, planner=planner, cc=cc, flags=tuple(flags), weights="c", product="bundle"
    )
    key = hashlib.sha256(
        "".join(graph_key(g, o or g.outputs, _key_options(base.with_(name=n))) for n, g, o in items).encode()
    ).hexdigest()[:32]
    folder = cache_root() / key
    library = folder / "libbundle.so"
    if not library.is_file():
        tmp = toolchain.temp_dir_beside(folder)
        try:
            bundle = []
            toolchain.copy_runtime(tmp)
            for n, g, o in items:
                sources = pipeline.run(g, base.with_(name=n, outputs=o), until="render").sources
                for f in (f"{n}.h", f"{n}.c"):
                    (tmp / f).write_text(sources.files[f])
                (tmp / f"{n}.metadata.json").write_text(sources.files["metadata.json"])
                bundle.append(f'#include "{n}.c"\n')
            (tmp / "bundle.c").write_text("".join(bundle))
            files = ["bundle.c"] + ([THREADPOOL] if target.threads > 1 else [])
            cmd = [*toolchain.compile_command(cc, target, flags), "-fPIC", "-shared", "-o", "libbundle.so"]
            toolchain.run([*cmd, *files, *toolchain.libraries(target)], cwd=tmp)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return [
        CompiledModel(library, json.loads((folder / f"{n}.metadata.json").read_text())) for n, _, _ in items
    ]
