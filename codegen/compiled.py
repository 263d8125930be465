"""compile(): a graph to a shared library loaded in this process; export(): a project folder.

Builds are cached by content: the key hashes the graph (nodes, arrays, outputs), the options,
the compiler, and flowc's own templates and runtime sources, so an unchanged graph loads its
library from the cache (~/.cache/flowc, or $FLOWC_CACHE) instead of compiling again.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from graphdef import dtypes
from graphdef.errors import ExecutionError, FeedError, FlowcError
from graphdef.interpret import feed_value
from graphdef.ir import Graph, TensorType

from . import pipeline
from .backends.c import toolchain
from .cache import build_cached, build_key, bundle_cached
from .loaded import Guarded, TensorSpec, check_name, with_train
from .program import Program
from .render.api import EntryPoints
from .storage import ALIGN
from .target import Target


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


class CompiledModel(Guarded):
    """A compiled graph loaded in this process. Call it with keyword feeds:

    >>> import numpy as np, graphdef as gd, codegen
    >>> with gd.Graph("tiny") as g:
    ...     y = gd.relu(gd.placeholder("x", (3,)) - 1.0, name="y")
    >>> m = codegen.compile(g)
    >>> m(x=np.array([0, 1, 2], np.float32))["y"]
    array([0., 0., 1.], dtype=float32)

    Calls from several Python threads are safe (``Guarded``): a model with a thread pool
    (``threads`` > 1) or state variables runs one call at a time; any other runs them in
    parallel, each calling thread with its own arena. ``m.close()`` (or ``with``) frees it.
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
        self._state_ptr = ffi.from_buffer(self._state)
        # per call, only what the feeds change: each input's type and numpy dtype, each output's
        # numpy dtype, and where each run() parameter comes from, worked out once here
        self._input_names = frozenset(t.name for t in self.inputs)
        self._in_types = [(TensorType(t.shape, t.dtype), dtypes.np_dtype(t.dtype)) for t in self.inputs]
        self._out_dtypes = [dtypes.np_dtype(t.dtype) for t in self.outputs]
        self._params = [(p.role, p.index) for p in self.api.run.params]
        self._arenas = threading.local()  # each calling thread its own arena, kept between calls
        self._guard_init(serial=self._pool is not None or self._stateful)
        self.reset()

    def _release(self) -> None:
        if self._pool is not None:
            self._ffi.release(self._pool)  # stops and joins its threads now
        if getattr(self, "_mpi", None) is not None:
            self._ffi.release(self._mpi)
        self._pool = self._mpi = self._arenas = self._state = self._state_ptr = None
        self._ffi.dlclose(self._lib)
        self._lib = self._run = None

    @staticmethod
    def _aligned(nbytes: int) -> np.ndarray:
        raw = np.zeros(nbytes + ALIGN, np.uint8)
        start = (-raw.ctypes.data) % ALIGN
        return raw[start : start + nbytes]

    def _arena(self):
        """This thread's arena (allocated on its first call, reused by its later ones: a fresh
        zeroed arena a call cost EfficientNet-B0 its 3.3 MB of page faults every time)."""
        held = getattr(self._arenas, "held", None)
        if held is None:
            buf = self._aligned(max(self.arena_bytes, 1))
            held = self._arenas.held = (buf, self._ffi.from_buffer(buf))
        return held[1]

    def reset(self) -> None:
        """Variables back to their initial values."""
        with self._use():
            if self.api.state_init:
                getattr(self._lib, self.api.state_init.name)(self._state_ptr)

    def variable(self, name: str) -> np.ndarray:
        """The current value of a state variable (a copy)."""
        held = self._state_vars()
        if name not in held:
            raise FeedError(f"model '{self.name}' has no state variable '{name}'")
        t, offset = held[name]
        with self._use():
            raw = self._state[offset : offset + t.nbytes]
            return raw.view(dtypes.np_dtype(t.dtype)).reshape(t.shape).copy()

    def _state_vars(self) -> dict:
        held = self.metadata["state"]
        return {v["name"]: (TensorType(tuple(v["shape"]), v["dtype"]), v["offset"]) for v in held}

    def save_checkpoint(self, path):
        """The state variables (weights, optimizer slots, ``global_step``) to ``path``: the
        .npz of graphdef/checkpoint.py, written atomically, readable by ``gd.Session.restore``."""
        from graphdef import checkpoint

        with self._use():  # one consistent state, not one torn by a step of another thread
            values = {n: self.variable(n) for n in self._state_vars()}
        step = values.get("global_step")
        return checkpoint.save(path, values, self.name, None if step is None else int(step))

    def load_checkpoint(self, path) -> dict:
        """State variables from a checkpoint (of this model's variables: another model's is
        refused, naming the first variable that differs); returns its header."""
        from graphdef import checkpoint

        held = self._state_vars()
        specs = {n: (t.shape, dtypes.np_dtype(t.dtype)) for n, (t, _) in held.items()}
        values, header = checkpoint.load(path, specs, self.name)
        with self._use():
            for name, (t, offset) in held.items():
                raw = np.ascontiguousarray(values[name]).reshape(-1).view(np.uint8)
                self._state[offset : offset + t.nbytes] = raw
        return header

    def __call__(self, **feeds) -> dict[str, np.ndarray]:
        return self.run(feeds)

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        """Outputs by name, as fresh arrays. Feeds must match the inputs' shapes and dtypes."""
        return self._call(feeds, self.inputs, self.outputs)

    def _bounded(self, feeds: dict) -> dict:
        """Inputs of run-time length (metadata ``length_axis``) padded with zeros to their
        compiled length, their length input (``<name>_length``) set; a longer one refused."""
        spans = {t["name"]: t["length_axis"] for t in self.metadata["inputs"] if "length_axis" in t}
        if not spans or not any(name in feeds for name in spans):
            return feeds
        feeds = dict(feeds)
        for t in self.inputs:
            if t.name not in spans or t.name not in feeds:
                continue
            axis, a = spans[t.name], np.asarray(feeds[t.name])
            other = f"{t.name}_length"
            if other in feeds and other in self._input_names:
                raise FeedError(
                    f"model '{self.name}' sets input '{other}' (the length of '{t.name}'): leave it out"
                )
            if a.ndim == len(t.shape) and a.shape[axis] > t.shape[axis]:
                raise FeedError(
                    f"input '{t.name}' is {a.shape[axis]} long on axis {axis}, more than the compiled "
                    f"maximum {t.shape[axis]}"
                )
            if (
                a.ndim == len(t.shape)
                and a.shape[:axis] + a.shape[axis + 1 :] == t.shape[:axis] + t.shape[axis + 1 :]
            ):
                pad = [(0, 0)] * a.ndim
                pad[axis] = (0, t.shape[axis] - a.shape[axis])
                feeds[t.name] = np.pad(a, pad)
                if other in self._input_names:
                    feeds[other] = np.int64(a.shape[axis])
        return feeds

    def _call(self, feeds: dict, needed, produced) -> dict[str, np.ndarray]:
        """Run with the ``needed`` inputs fed (the others NULL); the ``produced`` outputs."""
        known = self._input_names
        feeds = self._bounded(feeds)
        unknown = sorted(set(feeds) - known)
        if unknown:
            raise FeedError(
                f"model '{self.name}' has no input(s) {', '.join(map(repr, unknown))}; "
                f"inputs: {', '.join(sorted(known))}"
            )
        missing = [t for t in needed if t.name not in feeds]
        if missing:
            raise FeedError(
                f"model '{self.name}' needs feed(s) "
                + ", ".join(f"'{t.name}' ({TensorType(t.shape, t.dtype)})" for t in missing)
            )
        ffi, ins, outs, results = self._ffi, [], [], {}
        for t, (want, np_dtype) in zip(self.inputs, self._in_types):
            if t not in needed:
                ins.append(ffi.NULL)
                continue
            a = feeds[t.name]
            if not (  # an array as it is needed is passed as it is; anything else checked first
                type(a) is np.ndarray and a.dtype == np_dtype and a.shape == t.shape and a.flags.c_contiguous
            ):
                a = np.ascontiguousarray(feed_value(t.name, want, a))
            ins.append(ffi.from_buffer(a if a.size else np.zeros(1, np.uint8)))
        for t, np_dtype in zip(self.outputs, self._out_dtypes):
            if t not in produced:
                outs.append(ffi.NULL)
                continue
            out = np.empty(t.shape, np_dtype)
            results[t.name] = out
            outs.append(ffi.from_buffer(out if out.size else np.zeros(1, np.uint8)))
        with self._use():
            by_role = {
                "input": ins,
                "output": outs,
                "arena": (self._arena(),),
                "state": (self._state_ptr,),
                "pool": (self._pool,),
                "mpi": (getattr(self, "_mpi", None),),
            }
            status = self._run(*[by_role[role][index] for role, index in self._params])
            if status:
                msg = ffi.string(getattr(self._lib, self.api.status_string.name)(status)).decode()
        if status:
            raise ExecutionError(f"model '{self.name}' failed: {msg} (status {status})")
        return results

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}: {TensorType(t.shape, t.dtype)}" for t in self.inputs)
        return f"<CompiledModel {self.name}({ins}), arena {self.arena_bytes} B>"


class RankModel(CompiledModel):
    """One rank's handle on a graph compiled over MPI ranks (``compile(..., ranks=N, comm=c)``),
    loaded in every process of the communicator. Every rank calls it with the same feeds (the
    inputs its part reads are required; the others may be left out): it returns the outputs
    this rank computes, or every output on every rank with ``gather=True`` (broadcast from
    their owners). ``rank`` / ``ranks``; ``owner`` maps each input and output name to its rank.
    """

    def __init__(self, library: Path, metadata: dict, comm, gather: bool):
        from mpi4py import MPI

        super().__init__(library, metadata)
        self.comm, self.gather = comm, gather
        self.rank, self.ranks = comm.Get_rank(), metadata["ranks"]
        self.owner = {t["name"]: t["rank"] for t in metadata["inputs"] + metadata["outputs"]}
        ffi, lib = self._ffi, self._lib
        nbytes, start, stop = (getattr(lib, f.name) for f in self.api.mpi)
        ctx = ffi.new("char[]", nbytes())
        if start(ctx, ffi.cast("void *", MPI._addressof(comm))):  # one line on stderr said why
            raise ExecutionError(
                f"model '{self.name}' is compiled for {self.ranks} ranks; "
                f"the communicator has {comm.Get_size()}"
            )
        self._mpi = ffi.gc(ctx, stop)
        self._serial = threading.RLock()  # every call takes part in the ranks' transfers
        self.arena_bytes = getattr(lib, self.api.arena_bytes.name)(self.rank)

    def run(self, feeds: dict) -> dict[str, np.ndarray]:
        mine = [t for t in self.outputs if self.owner[t.name] == self.rank]
        needed = [t for t in self.inputs if self.owner[t.name] == self.rank]
        results = self._call(feeds, needed, mine)
        if not self.gather:
            return results
        out = {}
        for t in self.outputs:
            a = results[t.name] if t in mine else np.empty(t.shape, dtypes.np_dtype(t.dtype))
            self.comm.Bcast(a.reshape(-1).view(np.uint8), root=self.owner[t.name])
            out[t.name] = a
        return out

    def __repr__(self) -> str:
        return f"<RankModel {self.name} rank {self.rank} of {self.ranks}, arena {self.arena_bytes} B>"


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
    ranks: int | None = None,
    comm=None,
    gather: bool = False,
    placement: str = "auto",
    compress: str | None = None,
    train=None,
    target: str = "c",
    sm=(80, 90),
    precision: str = "fp32",
    lengths=None,
) -> CompiledModel:  # noqa: A001 - the public spelling
    """Compile ``graph`` to C, build it as a shared library and load it with cffi.

    ``target="cuda"``: CUDA for one GPU instead, built with nvcc for the architectures ``sm``
    (or, ``cc`` naming a host C++ compiler, through the CPU simulator) with arithmetic
    ``precision`` (fp32, tf32, bf16, fp16: codegen/backends/cuda/precision.py): a ``CudaModel``
    (codegen/compiled_cuda.py); ``threads``, ``ranks`` and ``portable`` are for C.

    ``portable``: no -march=native; ``threads``: worker threads for the heavy steps.

    ``ranks``: split the graph over that many MPI ranks (``placement``: codegen.partition's
    algorithm or "auto"; ``compress``: "fp16" / "bf16" on the wire) and return a ``RankModel``
    for this process; every process of ``comm`` (an mpi4py communicator of ``ranks``
    processes; default MPI.COMM_WORLD) calls compile and then the model alike. Rank 0 builds
    with mpicc, the others load its build (or build it themselves where the cache folder is
    not shared).

    ``train``: a train op (``gd.train.<Optimizer>.minimize``'s result, or its name): each call
    then also runs it, one training step (forward, backward and the updates of the variables
    and slots held in the model's state); its value, the loss, comes back under its name.

    ``lengths``: {input: axis} of inputs of run-time length: the model is compiled (and its
    arena planned) for the input's shape, a call may feed it shorter along the axis (down to
    0; longer is refused), padded with zeros; an int64 scalar input ``<input>_length``, if the
    graph has one, then gets the length (the call leaves it out).
    """
    if target == "cuda":
        if ranks is not None or threads != 1:
            raise FlowcError("compile(target='cuda') runs on one GPU: leave ranks and threads out")
        from . import compiled_cuda

        return compiled_cuda.compile(graph, outputs, name, cache, cc, sm, planner, train, precision)
    if target != "c":
        raise FlowcError(f"unknown target {target!r}: 'c' or 'cuda'")
    check_name(name)
    outputs = with_train(graph, outputs, train)
    target = Target("host", portable, threads)
    options = pipeline.Options(
        target=target,
        outputs=outputs,
        planner=planner,
        cc=toolchain.find_cc(cc) if ranks is None else toolchain.find_mpicc(cc),
        flags=tuple(flags),
        name=name,
        product="shared",
        ranks=ranks,
        placement=placement,
        compress=compress,
        lengths=tuple(sorted((lengths or {}).items())),
    )
    key = build_key(graph, options)
    if ranks is None:
        return CompiledModel(*build_cached(graph, options, key, cache))
    comm = _communicator(comm, ranks)
    error = None
    if comm.Get_rank() == 0:
        try:
            build_cached(graph, options, key, cache)
        except FlowcError as e:
            error = str(e)
    error = comm.bcast(error, root=0)
    if error is not None:  # every rank raises rank 0's error
        raise FlowcError(error)
    return RankModel(*build_cached(graph, options, key, True), comm, gather)


def _communicator(comm, ranks: int):
    """``comm`` (default: mpi4py's COMM_WORLD), checked to have ``ranks`` processes."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise FlowcError(
            "compile(..., ranks=N) runs under MPI: pip install 'flowc[mpi]' (mpi4py, mpich)"
        ) from e
    comm = MPI.COMM_WORLD if comm is None else comm
    if comm.Get_size() != ranks:
        raise FlowcError(
            f"compile(..., ranks={ranks}) needs a communicator of {ranks} processes (mpiexec -n {ranks}); "
            f"this one has {comm.Get_size()}"
        )
    return comm


def compile_many(
    graphs,
    cc: str | None = None,
    flags=(),
    planner: str = "best",
    portable: bool = False,
    threads: int = 1,
    opt: str | None = "-O1",
) -> list[CompiledModel]:
    """Compile several graphs into ONE shared library (one compiler call), for bulk testing.

    ``graphs`` is a list of ``(name, graph)`` or ``(name, graph, outputs)``; names must differ.
    Each goes through the pipeline up to "render" (weights as C arrays); the generated model
    sources are included into a single translation unit. A bundle checks results, not speed:
    ``opt`` (default -O1, about half the compile time of the -O3 every other build uses; None:
    the target's own flags) comes after the target's flags, the same instruction set kept.
    """
    flags = (*((opt,) if opt else ()), *flags)
    cc = toolchain.find_cc(cc)
    items = [(g[0], g[1], g[2] if len(g) > 2 else None) for g in graphs]
    names = [check_name(n) for n, _, _ in items]
    if len(set(names)) != len(names):
        raise FlowcError("compile_many needs distinct model names")
    base = pipeline.Options(
        target=Target("host", portable, threads), planner=planner, cc=cc, flags=tuple(flags), weights="c",
        product="bundle",
    )  # fmt: skip
    library, metadata = bundle_cached(items, lambda n, o: base.with_(name=n, outputs=o))
    return [CompiledModel(library, meta) for meta in metadata]
