"""CUDA models in this process: ``codegen.compile(graph, target="cuda")`` -> ``CudaModel``.

The shared library is the CUDA backend's (codegen/backends/cuda/) built with nvcc, or, with
``cc`` naming a host C++ compiler, through the CPU simulator (runtime_c/cuda/sim.h): the same
generated code and the same calls, so tests check the CUDA path here without a GPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from graphdef import dtypes
from graphdef.errors import ExecutionError, FeedError, FlowcError
from graphdef.interpret import feed_value
from graphdef.ir import Graph, TensorType

from . import pipeline
from .backends.c import toolchain as ctool
from .backends.cuda import toolchain
from .compiled import TensorSpec, _key_options, cache_root, check_name, graph_key, with_train


class CudaModel:
    """A model compiled for CUDA and loaded in this process, its context (device arena and
    weights) made once. Call it with numpy feeds (copied to the GPU and back, synchronously), or
    with device arrays (anything with ``__cuda_array_interface__``, e.g. torch or CuPy tensors
    on the GPU: the outputs are then new device arrays of the same library, and the run is
    enqueued on that library's current stream and waited for)."""

    def __init__(self, library: Path, metadata: dict):
        import cffi

        self.metadata = metadata
        self.name = n = metadata["name"]
        self.inputs = [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in metadata["inputs"]]
        self.outputs = [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in metadata["outputs"]]
        self.arena_bytes = metadata["arena_bytes"]
        self.lower_bound_bytes = metadata["arena_lower_bound"]
        self.weight_bytes = metadata["weight_bytes"]
        io = ", ".join(["void *"] * (len(self.inputs) + len(self.outputs)))
        ffi = cffi.FFI()
        ffi.cdef(
            f"int {n}_init(void **ctx, void *stream);\n"
            f"int {n}_run(void *ctx, {io}, void *stream);\n"
            f"int {n}_wait(void *ctx, void *stream);\n"
            f"int {n}_run_host(void *ctx, {io});\n"
            f"void {n}_use_graph(void *ctx, int on);\n"
            f"void {n}_free(void *ctx);\n"
            f"const char *{n}_error(void *ctx);\n"
        )
        self._ffi, self._lib = ffi, ffi.dlopen(str(library))
        self._fn = {
            f: getattr(self._lib, f"{n}_{f}") for f in ("run", "wait", "run_host", "use_graph", "error")
        }
        holder = ffi.new("void **")
        status = getattr(self._lib, f"{n}_init")(holder, ffi.NULL)
        ctx = holder[0]
        if status:
            msg = self._error(ctx)
            getattr(self._lib, f"{n}_free")(ctx)
            raise ExecutionError(msg)
        self._ctx = ffi.gc(ctx, getattr(self._lib, f"{n}_free"))

    def _error(self, ctx=None) -> str:
        return self._ffi.string(self._fn["error"](self._ctx if ctx is None else ctx)).decode(errors="replace")

    def use_graph(self, on: bool) -> None:
        """Replay runs from a CUDA Graph (the default) or launch every kernel each run."""
        self._fn["use_graph"](self._ctx, int(bool(on)))

    def __call__(self, **feeds):
        return self.run(feeds)

    def run(self, feeds: dict, out: dict | None = None) -> dict:
        """Outputs by name. With device feeds, ``out`` may hold the output device arrays to
        write (the same arrays run after run let the run replay its CUDA Graph)."""
        self._check_names(feeds)
        if any(hasattr(v, "__cuda_array_interface__") for v in feeds.values()):
            return self._run_device(feeds, out or {})
        ffi, ins, results, outs = self._ffi, [], {}, []
        for t in self.inputs:
            a = np.ascontiguousarray(feed_value(t.name, TensorType(t.shape, t.dtype), feeds[t.name]))
            ins.append(ffi.from_buffer(a if a.size else np.zeros(1, np.uint8)))
        for t in self.outputs:
            out = results[t.name] = np.empty(t.shape, dtypes.np_dtype(t.dtype))
            outs.append(ffi.from_buffer(out if out.size else np.zeros(1, np.uint8)))
        if self._fn["run_host"](self._ctx, *ins, *outs):
            raise ExecutionError(f"model '{self.name}' failed: {self._error()}")
        return results

    def _check_names(self, feeds: dict) -> None:
        known = {t.name for t in self.inputs}
        unknown = sorted(set(feeds) - known)
        missing = [t for t in self.inputs if t.name not in feeds]
        if unknown or missing:
            raise FeedError(
                f"model '{self.name}': unknown feed(s) {unknown}, missing {[t.name for t in missing]}; "
                f"inputs: {', '.join(sorted(known))}"
            )

    def _run_device(self, feeds: dict, given: dict) -> dict:
        """Device arrays in; out: the ``given`` device arrays, else new ones of the same library."""
        first = next(v for v in feeds.values() if hasattr(v, "__cuda_array_interface__"))
        lib = type(first).__module__.split(".")[0]
        ptrs = []
        for t in self.inputs:
            v = feeds[t.name]
            cai = getattr(v, "__cuda_array_interface__", None)
            want = np.dtype(dtypes.np_dtype(t.dtype))
            if cai is None or tuple(cai["shape"]) != t.shape or np.dtype(cai["typestr"]) != want:
                raise FeedError(f"feed '{t.name}': expected a device array {TensorType(t.shape, t.dtype)}")
            if cai.get("strides") is not None and cai["strides"] != tuple(np.empty(t.shape, want).strides):
                raise FeedError(f"feed '{t.name}': the device array must be C-contiguous")
            ptrs.append(cai["data"][0])
        results, outs = {}, []
        for t in self.outputs:
            out = results[t.name] = given[t.name] if t.name in given else _device_empty(lib, first, t)
            cai, want = out.__cuda_array_interface__, np.dtype(dtypes.np_dtype(t.dtype))
            if tuple(cai["shape"]) != t.shape or np.dtype(cai["typestr"]) != want:
                raise FeedError(f"output '{t.name}': expected a device array {TensorType(t.shape, t.dtype)}")
            outs.append(cai["data"][0])
        stream = _current_stream(lib)
        ffi = self._ffi
        args = [ffi.cast("void *", p) for p in ptrs + outs]
        status = self._fn["run"](self._ctx, *args, ffi.cast("void *", stream))
        status = status or self._fn["wait"](self._ctx, ffi.cast("void *", stream))
        if status:
            raise ExecutionError(f"model '{self.name}' failed: {self._error()}")
        return results

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}: {TensorType(t.shape, t.dtype)}" for t in self.inputs)
        return f"<CudaModel {self.name}({ins}), device arena {self.arena_bytes} B>"


def _device_empty(lib: str, like, t: TensorSpec):
    if lib == "torch":
        import torch

        return torch.empty(t.shape, dtype=getattr(torch, t.dtype), device=like.device)
    if lib == "cupy":
        import cupy

        return cupy.empty(t.shape, dtypes.np_dtype(t.dtype))
    raise FeedError(f"device arrays of {lib} are not supported (torch and CuPy are); pass numpy arrays")


def _current_stream(lib: str) -> int:
    if lib == "torch":
        import torch

        return torch.cuda.current_stream().cuda_stream
    import cupy

    return cupy.cuda.get_current_stream().ptr


def options(name: str, cc, sm, planner: str = "best", outputs=None, precision="fp32") -> pipeline.Options:
    return pipeline.Options(
        backend="cuda", outputs=outputs, name=name, cc=cc, sm=tuple(sm), planner=planner, product="shared",
        precision=precision,
    )  # fmt: skip


def compile(  # noqa: A001
    graph: Graph, outputs=None, name="model", cache=True, cc=None, sm=(80, 90), planner="best", train=None,
    precision="fp32",
):  # fmt: skip
    """``codegen.compile(graph, target="cuda", ...)``: see codegen.compile."""
    check_name(name)
    o = options(name, cc, sm, planner, with_train(graph, outputs, train), precision)
    key = graph_key(graph, o.outputs or graph.outputs, _key_options(o))
    folder = cache_root() / key
    library, meta = folder / f"lib{name}.so", folder / "metadata.json"
    if not (cache and library.is_file() and meta.is_file()):
        tmp = ctool.temp_dir_beside(folder)
        try:
            pipeline.run(graph, o, until="build", folder=tmp)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return CudaModel(library, json.loads(meta.read_text()))


def compile_many(graphs, cc=None, sm=(80, 90), precision="fp32") -> list[CudaModel]:
    """Several graphs in one shared library (one compiler call for their .cu files), for bulk
    tests; ``graphs``: (name, graph) or (name, graph, outputs)."""
    items = [(g[0], g[1], g[2] if len(g) > 2 else None) for g in graphs]
    names = [check_name(n) for n, _, _ in items]
    if len(set(names)) != len(names):
        raise FlowcError("compile_many needs distinct model names")

    def made(name, outputs):
        return options(name, cc, sm, outputs=outputs, precision=precision)

    key = hashlib.sha256(
        "".join(graph_key(g, o or g.outputs, _key_options(made(n, o))) for n, g, o in items).encode()
    ).hexdigest()[:32]
    folder = cache_root() / f"cuda-{key}"
    library = folder / "libbundle.so"
    if not library.is_file():
        tmp = ctool.temp_dir_beside(folder)
        try:
            bundle, c_files = [], []
            for n, g, o in items:
                sources = pipeline.run(g, made(n, o), until="render").sources
                sources.files = {f: v for f, v in sources.files.items() if f.startswith(n)}
                toolchain.write_sources(sources, tmp)
                (tmp / f"{n}.metadata.json").write_text(json.dumps(sources.metadata))
                bundle.append(f'#include "{n}.cu"\n')
                c_files += sources.c_files
            (tmp / "bundle.cu").write_text("".join(bundle))
            sources.c_files = c_files
            toolchain.build(tmp, "bundle", sources, cc, sm, shared=True)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return [CudaModel(library, json.loads((folder / f"{n}.metadata.json").read_text())) for n, _, _ in items]


def export(
    graph: Graph, out_dir, name="model", sm=(80, 90), build_binary=True, cc=None, outputs=None,
    precision="fp32", ranks=None, placement="auto", compress=None,
) -> Path:  # fmt: skip
    """``flowc compile --target cuda``: the project folder (the model's .cu and header, main.c,
    Makefile, CMakeLists.txt, metadata.json, runtime) and, unless ``build_binary`` is False,
    its binary built with nvcc (or with ``cc``, a host C++ compiler, for the CPU simulator).
    ``ranks``: split over that many MPI ranks, a GPU each (``placement``, ``compress`` as for C):
    one SPMD program that ``mpiexec -n ranks`` runs.
    The folder is replaced only when everything is written and built."""
    check_name(name)
    out = Path(out_dir)
    o = options(name, cc, sm, outputs=outputs, precision=precision)
    o = o.with_(
        product="program" if build_binary else "none", ranks=ranks, placement=placement, compress=compress
    )
    tmp = ctool.temp_dir_beside(out)
    try:
        pipeline.run(graph, o, until="build", folder=tmp)
        ctool.replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def parse_sm(text: str) -> tuple[int, ...]:
    """``--sm 80,90`` -> (80, 90)."""
    try:
        sm = tuple(int(v) for v in str(text).replace(" ", "").split(",") if v)
    except ValueError:
        sm = ()
    if not sm or any(v < 50 or v > 200 for v in sm):
        raise FlowcError(f"--sm expects compute capabilities like 80,90 (sm_80, sm_90); got {text!r}")
    return sm
