"""CUDA models in this process: ``codegen.compile(graph, target="cuda")`` -> ``CudaModel``.

The shared library is the CUDA backend's (codegen/backends/cuda/) built with nvcc, or, with
``cc`` naming a host C++ compiler, through the CPU simulator (runtime_c/cuda/sim.h): the same
generated code and the same calls, so tests check the CUDA path here without a GPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphdef import dtypes
from graphdef.errors import ExecutionError, FeedError, FlowcError
from graphdef.interpret import feed_value
from graphdef.ir import Graph, TensorType

from . import pipeline
from .cache import build_cached, build_key, bundle_cached
from .loaded import Guarded, TensorSpec, check_name, with_train
from .render import layout as L


class CudaModel(Guarded):
    """A model compiled for CUDA and loaded in this process, its context (device arena and
    weights) made once. Call it with numpy feeds (copied to the GPU and back, synchronously), or
    with device arrays (``__cuda_array_interface__`` or DLPack on a CUDA device, e.g. torch or
    CuPy tensors: the outputs are then new device arrays of the same library, or the ones given
    to ``run(feeds, out)``, and the run is enqueued on that library's current stream and waited
    for). Calls from several Python threads run one at a time (one device context); ``close()``
    frees the context (``Guarded``)."""

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
        self._guard_init(serial=True)

    def _release(self) -> None:
        self._ffi.release(self._ctx)
        self._ffi.dlclose(self._lib)
        self._ctx = self._lib = self._fn = None

    def _error(self, ctx=None) -> str:
        return self._ffi.string(self._fn["error"](self._ctx if ctx is None else ctx)).decode(errors="replace")

    def use_graph(self, on: bool) -> None:
        """Replay runs from a CUDA Graph (the default) or launch every kernel each run."""
        with self._use():
            self._fn["use_graph"](self._ctx, int(bool(on)))

    def __call__(self, **feeds):
        return self.run(feeds)

    def run(self, feeds: dict, out: dict | None = None) -> dict:
        """Outputs by name. With device feeds, ``out`` may hold the output device arrays to
        write (the same arrays run after run let the run replay its CUDA Graph)."""
        self._check_names(feeds)
        if any(on_gpu(v) for v in feeds.values()):
            return self._run_device(feeds, out or {})
        ffi, ins, results, outs = self._ffi, [], {}, []
        for t in self.inputs:
            a = np.ascontiguousarray(feed_value(t.name, TensorType(t.shape, t.dtype), feeds[t.name]))
            ins.append(ffi.from_buffer(a if a.size else np.zeros(1, np.uint8)))
        for t in self.outputs:
            out = results[t.name] = np.empty(t.shape, dtypes.np_dtype(t.dtype))
            outs.append(ffi.from_buffer(out if out.size else np.zeros(1, np.uint8)))
        with self._use():
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
        """Device arrays in (``__cuda_array_interface__`` or DLPack); out: the ``given`` device
        arrays, else new ones of the inputs' library (torch or CuPy)."""
        first = next(v for v in feeds.values() if on_gpu(v))
        lib = type(first).__module__.split(".")[0]
        ptrs, outs, results = [], [], {}
        for kind, specs, values in (("feed", self.inputs, feeds), ("output", self.outputs, given)):
            for t in specs:
                v = values[t.name] if t.name in values else _device_empty(lib, first, t)
                if not on_gpu(v):
                    raise FeedError(
                        f"{kind} '{t.name}' is not on the GPU: pass every array on the GPU, or numpy"
                    )
                view = device_view(v)
                if view is None or view[1:3] != (t.shape, np.dtype(dtypes.np_dtype(t.dtype))):
                    raise FeedError(
                        f"{kind} '{t.name}': expected a device array {TensorType(t.shape, t.dtype)}"
                    )
                if not view[3]:
                    raise FeedError(f"{kind} '{t.name}': the device array must be C-contiguous")
                (ptrs if kind == "feed" else outs).append(view[0])
                if kind == "output":
                    results[t.name] = v
        stream = _current_stream(lib)
        ffi = self._ffi
        args = [ffi.cast("void *", p) for p in ptrs + outs]
        with self._use():
            status = self._fn["run"](self._ctx, *args, ffi.cast("void *", stream))
            status = status or self._fn["wait"](self._ctx, ffi.cast("void *", stream))
            if status:
                raise ExecutionError(f"model '{self.name}' failed: {self._error()}")
        return results

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}: {TensorType(t.shape, t.dtype)}" for t in self.inputs)
        return f"<CudaModel {self.name}({ins}), device arena {self.arena_bytes} B>"


def on_gpu(value) -> bool:
    """Whether ``value`` is an array in CUDA device memory (``__cuda_array_interface__``, or a
    DLPack producer on a CUDA device)."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    dev = getattr(value, "__dlpack_device__", None)
    return dev is not None and int(dev()[0]) in (DL_CUDA, DL_CUDA_MANAGED)


DL_CUDA, DL_CUDA_MANAGED = 2, 13  # DLPack device types


def device_view(value):
    """(address, shape, numpy dtype, C-contiguous) of an array through its
    ``__cuda_array_interface__``, else its DLPack capsule (any device); None for neither."""
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        shape, dtype = tuple(cai["shape"]), np.dtype(cai["typestr"])
        strides = cai.get("strides")
        return (
            cai["data"][0],
            shape,
            dtype,
            strides is None or tuple(strides) == _c_strides(shape, dtype.itemsize),
        )
    if not hasattr(value, "__dlpack__"):
        return None
    return _dlpack_view(value.__dlpack__())


def _c_strides(shape, itemsize: int) -> tuple:
    return tuple(st * itemsize for st in L.strides(shape))


_DL_TYPES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
             (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64", (2, 16): "float16",
             (2, 32): "float32", (2, 64): "float64", (6, 8): "bool"}  # fmt: skip


def _dlpack_view(capsule):
    """Read a (legacy, "dltensor") DLPack capsule without consuming it: its producer keeps the
    memory while the array lives, and the capsule's own destructor frees the description."""
    import ctypes as C

    class Device(C.Structure):
        _fields_ = [("type", C.c_int32), ("id", C.c_int32)]

    class DType(C.Structure):
        _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]

    class Tensor(C.Structure):
        _fields_ = [("data", C.c_void_p), ("device", Device), ("ndim", C.c_int32), ("dtype", DType),
                    ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)),
                    ("byte_offset", C.c_uint64)]  # fmt: skip

    get = C.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = C.c_void_p, [C.py_object, C.c_char_p]
    t = Tensor.from_address(get(capsule, b"dltensor"))  # a DLManagedTensor starts with its DLTensor
    name = _DL_TYPES.get((t.dtype.code, t.dtype.bits)) if t.dtype.lanes == 1 else None
    if name is None:
        return None
    dtype = np.dtype(name)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    contiguous = not t.strides or all(
        t.strides[i] * dtype.itemsize == s
        for i, s in enumerate(_c_strides(shape, dtype.itemsize))
        if shape[i] > 1
    )
    return (t.data or 0) + t.byte_offset, shape, dtype, contiguous


def _device_empty(lib: str, like, t: TensorSpec):
    if lib == "torch":
        import torch

        return torch.empty(t.shape, dtype=getattr(torch, t.dtype), device=like.device)
    if lib == "cupy":
        import cupy

        return cupy.empty(t.shape, dtypes.np_dtype(t.dtype))
    raise FeedError(
        f"new output arrays of {lib} cannot be made here (torch and CuPy can): pass them as out= (device "
        "arrays with __cuda_array_interface__ or DLPack), or pass numpy arrays"
    )


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
    key = build_key(graph, o)
    return CudaModel(*build_cached(graph, o, key, cache))


def compile_many(graphs, cc=None, sm=(80, 90), precision="fp32") -> list[CudaModel]:
    """Several graphs in one shared library (one compiler call for their .cu files), for bulk
    tests; ``graphs``: (name, graph) or (name, graph, outputs)."""
    items = [(g[0], g[1], g[2] if len(g) > 2 else None) for g in graphs]
    names = [check_name(n) for n, _, _ in items]
    if len(set(names)) != len(names):
        raise FlowcError("compile_many needs distinct model names")

    def made(name, outputs):
        return options(name, cc, sm, outputs=outputs, precision=precision)

    library, metadata = bundle_cached(items, made)
    return [CudaModel(library, meta) for meta in metadata]


def export(
    graph: Graph, out_dir, name="model", sm=(80, 90), build_binary=True, cc=None, outputs=None,
    precision="fp32", ranks=None, placement="auto", compress=None,
) -> Path:  # fmt: skip
    """``flowc compile --target cuda``: the project folder (the model's .cu and header, main.c,
    Makefile, CMakeLists.txt, metadata.json, runtime) and, unless ``build_binary`` is False,
    its binary built with nvcc (or with ``cc``, a host C++ compiler, for the CPU simulator).
    ``ranks``: split over that many MPI ranks, a GPU each (``placement``, ``compress`` as for C):
    one SPMD program that ``mpiexec -n ranks`` runs (codegen/exports.py ``write``).
    The folder is replaced only when everything is written and built."""
    from .exports import project_options, write

    o = project_options(
        name=name, target="cuda", sm=sm, build_binary=build_binary, cc=cc, outputs=outputs,
        precision=precision, ranks=ranks, placement=placement, compress=compress,
    )  # fmt: skip
    return write(graph, out_dir, o, cache=False)


def parse_sm(text: str) -> tuple[int, ...]:
    """``--sm 80,90`` -> (80, 90)."""
    try:
        sm = tuple(int(v) for v in str(text).replace(" ", "").split(",") if v)
    except ValueError:
        sm = ()
    if not sm or any(v < 50 or v > 200 for v in sm):
        raise FlowcError(f"--sm expects compute capabilities like 80,90 (sm_80, sm_90); got {text!r}")
    return sm
