"""The generated C API, decided once: the entry points of a model and their parameters.

``entry_points(name, inputs, outputs, stateful, threads)`` describes every function the
model's header declares. The header (templates/c/header.h.j2), the model's C file, the drivers
(main.c, firmware.c), the cffi declarations of ``CompiledModel`` and metadata.json all read
this one description, so an argument added here (a communicator for MPI, a stream for CUDA)
reaches every caller. A model over MPI ranks (``mpi=True``) takes the rank's communication
context last (role "mpi") and, for the SPMD model, declares the functions that make that
context from a communicator (``mpi``) and give each rank's arena size (``arena_bytes``).

>>> api = entry_points("net", [("in_x", "float")], [("out_y", "float")], stateful=False, threads=1)
>>> api.run.declaration()
'int net_run(const float *in_x, float *out_y, void *arena)'
>>> api.run.call({"input": lambda p: p.name, "output": lambda p: p.name, "arena": "mem"})
'net_run(in_x, out_y, mem)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from .spelling import c_comment


@dataclass(frozen=True)
class Param:
    """One parameter: its C name and type, its ``role`` (input, output, arena, state, pool,
    mpi, comm, rank)
    and, for inputs and outputs, which one."""

    name: str
    ctype: str
    role: str
    index: int = 0


@dataclass(frozen=True)
class Function:
    name: str
    returns: str
    params: tuple[Param, ...]
    doc: str = ""

    def declaration(self) -> str:
        params = ", ".join(f"{p.ctype}{'' if p.ctype.endswith('*') else ' '}{p.name}" for p in self.params)
        sep = "" if self.returns.endswith("*") else " "
        return f"{self.returns}{sep}{self.name}({params or 'void'})"

    def cdef(self) -> str:
        """The declaration for cffi: pointers as ``void *`` (same ABI; cffi passes buffers)."""
        params = ", ".join("void *" if "*" in p.ctype else p.ctype for p in self.params)
        return f"{self.returns} {self.name}({params or 'void'});"

    def call(self, args: dict[str, str | Callable[[Param], str]]) -> str:
        """A call expression; ``args`` maps a role to the argument (text, or a function of
        the parameter, e.g. for inputs by index)."""
        out = []
        for p in self.params:
            a = args[p.role]
            out.append(a(p) if callable(a) else a)
        return f"{self.name}({', '.join(out)})"

    def roles(self) -> list[str]:
        return [p.role for p in self.params]


@dataclass(frozen=True)
class EntryPoints:
    """Every function of a generated model: ``run`` and the optional state and thread-pool
    functions (None / empty when the model has no state or one thread); for the SPMD model
    over MPI ranks, the communication context's functions and each rank's arena size."""

    name: str
    run: Function
    status_string: Function
    state_init: Function | None
    pool: tuple[Function, ...]
    mpi: tuple[Function, ...] = ()
    arena_bytes: Function | None = None

    def functions(self) -> list[Function]:
        return [self.run, *([self.state_init] if self.state_init else []), *self.pool, *self.mpi,
                *([self.arena_bytes] if self.arena_bytes else []), self.status_string]  # fmt: skip

    def cdef(self) -> str:
        return "\n".join(f.cdef() for f in self.functions())

    def declarations(self) -> dict:
        """What a header prints of them: the run's declaration and argument names, and the
        state, pool and status functions' declarations with their (escaped) comments."""

        def described(f):
            return None if f is None else {"text": f.declaration(), "doc": c_comment(f.doc, limit=200)}

        return {
            "run": self.run.declaration(),
            "run_args": ", ".join(p.name for p in self.run.params),
            "state_init": described(self.state_init),
            "pool": [described(f) for f in self.pool],
            "status": described(self.status_string),
        }

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> EntryPoints:
        def fn(d):
            return (
                None
                if d is None
                else Function(d["name"], d["returns"], tuple(Param(**p) for p in d["params"]), d["doc"])
            )

        return cls(doc["name"], fn(doc["run"]), fn(doc["status_string"]), fn(doc["state_init"]),
                   tuple(fn(f) for f in doc["pool"]), tuple(fn(f) for f in doc.get("mpi", ())),
                   fn(doc.get("arena_bytes")))  # fmt: skip


def entry_points(
    name: str, inputs, outputs, stateful: bool, threads: int, mpi: bool = False, spmd: bool = False
) -> EntryPoints:
    """``inputs`` / ``outputs``: (C parameter name, C element type) per tensor, in order;
    ``mpi``: the run takes a communication context; ``spmd``: the model over all ranks."""
    params = [Param(c, f"const {t} *", "input", k) for k, (c, t) in enumerate(inputs)]
    params += [Param(c, f"{t} *", "output", k) for k, (c, t) in enumerate(outputs)]
    params.append(Param("arena", "void *", "arena"))
    if stateful:
        params.append(Param("state", "void *", "state"))
    if threads > 1:
        params.append(Param("pool", "void *", "pool"))
    if mpi or spmd:
        params.append(Param("mpi", "void *", "mpi"))
    run = Function(
        f"{name}_run",
        "int",
        tuple(params),
        "computes every output from the inputs using only the caller's memory: no malloc, "
        "no global state, re-entrant",
    )
    state_init = (
        Function(
            f"{name}_state_init",
            "int",
            (Param("state", "void *", "state"),),
            f"Write the initial values of the variables into state ({name.upper()}_STATE_BYTES bytes).",
        )
        if stateful
        else None
    )
    pool = ()
    if threads > 1:
        pool = (
            Function(f"{name}_pool_bytes", "size_t", ()),
            Function(f"{name}_pool_start", "int", (Param("pool", "void *", "pool"),),
                     "0, or -1 if a thread could not start"),
            Function(f"{name}_pool_stop", "void", (Param("pool", "void *", "pool"),)),
        )  # fmt: skip
    status = Function(f"{name}_status_string", "const char *", (Param("status", "int", "status"),),
                      "A short English description of a status code.")  # fmt: skip
    if not spmd:
        return EntryPoints(name, run, status, state_init, pool)
    contexts = (
        Function(f"{name}_mpi_bytes", "size_t", (), "bytes of one communication context"),
        Function(f"{name}_mpi_start", "int",
                 (Param("mpi", "void *", "mpi"), Param("comm", "const void *", "comm")),
                 f"set up a context on the communicator at comm (an MPI_Comm *; NULL: MPI_COMM_WORLD) of "
                 f"{name.upper()}_RANKS ranks: 0, or non-zero after one line on stderr"),
        Function(f"{name}_mpi_stop", "void", (Param("mpi", "void *", "mpi"),),
                 "free the context's communicator"),
    )  # fmt: skip
    arena = Function(f"{name}_arena_bytes", "size_t", (Param("rank", "int", "rank"),),
                     "bytes of the arena rank 'rank' needs (0 for a rank outside the model)")  # fmt: skip
    return EntryPoints(name, run, status, state_init, pool, contexts, arena)
