"""The render core: what every backend renders of a model, whatever its target.

``frame(program, name, ...)`` decides, once, the parts of a model's sources that do not depend
on the target: the tensors of its interface (C names, size macros, escaped labels, .npy file
names), its weights (C arrays or one blob), where each value lives (``Pointers``: the C
expression of every value inside the run function), each step's call (``step_calls``: the
pointers it passes), the copies at the end of a run, the state and its initial values, the
entry points (api.py), what a program's main tells its driver, and the metadata. It lays out
first and spells the model's untrusted names and values last (spelling.py). The backends then
lower and render their steps from it (C: backends/c/step_code.py) and print it through their
templates; the op plans (plans.py), the work splits (splits.py) and ``Sources``/``Built``
(sources.py) sit beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphdef.ir import ValueRef
from graphdef.registry import get_op

from ..program import Program
from ..storage import ALIGN, Loc
from .api import EntryPoints, entry_points
from .sources import VERSION
from .spelling import PUBLIC, STORAGE, Names, c_comment, c_string, value_lines

BLOB_THRESHOLD = 64 * 1024  # weights above this go into a binary blob pulled in by the assembler


def io_tensors(program: Program, name: str, names: Names) -> tuple[list[dict], list[dict]]:
    """The inputs and outputs as the templates see them: C name, size macro, string literal
    of the model's (untrusted) name, shape, sizes, .npy file name (unique among the outputs,
    ignoring case: the binary writes each output to its own file)."""
    macros = Names()
    out = {}
    for kind, items in (("in", program.inputs), ("out", program.outputs)):
        out[kind] = []
        for k, (label, _, t) in enumerate(items):
            cname = names(f"{kind}_{label}", "t")
            out[kind].append(
                {
                    "index": k,
                    "label": label,
                    "cname": cname,
                    "literal": c_string(label),
                    "comment": c_comment(label),
                    "macro": macros(f"{name.upper()}_{cname.upper()}"),
                    "dtype": t.dtype,
                    "ctype": PUBLIC[t.dtype],
                    "rank": t.rank,
                    "shape": list(t.shape),
                    "shape8": (list(t.shape) + [0] * 8)[:8],
                    "size": t.size,
                    "nbytes": t.nbytes,
                    "file": _file_name(label, cname),
                    **(_length(program, label) if kind == "in" else {"bound": 0, "length": 0}),
                }
            )
    # Two outputs must not share a file (``y/2`` falls back to out_y_2, the file of an output
    # named ``out_y_2``; ``Y`` and ``y`` are one file on macOS and Windows): outputs named by
    # their own label come first, then the first of each name keeps it and a later clash gets
    # a suffix that no other output uses.
    taken = {t["file"].casefold() for t in out["out"]}
    seen: set[str] = set()
    for t in sorted(out["out"], key=lambda t: t["file"] != t["label"]):
        if t["file"].casefold() in seen:
            base, k = t["file"], 2
            while f"{base}_{k}".casefold() in taken:
                k += 1
            t["file"] = f"{base}_{k}"
            taken.add(t["file"].casefold())
        seen.add(t["file"].casefold())
    return out["in"], out["out"]


def _length(program: Program, label: str) -> dict:
    """An input of run-time length (Program.lengths): ``bound`` 1 + its axis, ``length`` 1 +
    the index of the input ``<label>_length`` the run gets its length in (0: none)."""
    if label not in getattr(program, "lengths", {}):  # (an SPMD program's interface: none)
        return {"bound": 0, "length": 0}
    names = [n for n, _, _ in program.inputs]
    other = f"{label}_length"
    return {"bound": program.lengths[label] + 1, "length": names.index(other) + 1 if other in names else 0}


def _file_name(label: str, cname: str) -> str:
    # at most 200 bytes: the binary's temporary .<name>.npy.XXXXXX must fit in NAME_MAX (255)
    ok = (
        label
        and all(ch.isalnum() or ch in "_-." for ch in label)
        and not label.startswith(".")
        and len(label.encode("utf-8")) <= 200
    )
    return label if ok else cname


def _align(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


@dataclass
class Weights:
    """Every constant and the initial values of state variables (key ``init:<variable>``):
    as C arrays (``consts``), or as one blob of bytes; ``expr`` gives each one's C pointer."""

    expr: dict[str, str]
    consts: list[dict]
    blob: bytes | None
    align: int


def weights(program: Program, name: str, names: Names, mode: str, align: int) -> Weights:
    """``mode``: "c" (arrays), "blob", or "auto" (a blob above BLOB_THRESHOLD bytes);
    ``align``: bytes between tensors (the target's ``weight_align``)."""
    g = program.graph
    arrays = [(c, g.constants[c]) for c in program.constants]
    arrays += [(f"init:{v}", g.variables[v]) for v in program.variables]
    total = sum(_align(a.nbytes) for _, a in arrays)
    blob_mode = mode == "blob" or (mode == "auto" and total > BLOB_THRESHOLD)
    consts, expr, blob, offset = [], {}, [], 0
    for key, array in arrays:
        dt = array.dtype.name
        ctype = STORAGE[dt]
        if blob_mode:
            expr[key] = f"((const {ctype} *)({name}_weights + {offset}))"
            data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
            blob += [data, bytes(_align(len(data), align) - len(data))]
            offset += _align(len(data), align)
        else:
            cname = names(f"{name}_w_{key}", "w")
            expr[key] = cname
            consts.append(
                {
                    "cname": cname,
                    "ctype": ctype,
                    "count": max(array.size, 1),
                    "lines": array,  # as C lines at the end of frame()
                    "comment": f"{key}: {dt}{list(array.shape)}",
                }
            )
    return Weights(expr, consts, b"".join(blob) if blob_mode else None, align)


@dataclass
class Pointers:
    """The C pointer expression of every value, inside the run function: inputs and outputs
    by parameter name, weights by ``Weights.expr``, state and arena values at their offsets
    (``st``, ``mem``: the run function's byte pointers)."""

    program: Program
    ins: list[dict]
    outs: list[dict]
    weights: Weights
    bases: set[str] = field(default_factory=set)  # what the expressions given so far read: mem, st, weights

    def __call__(self, ref: ValueRef) -> str:
        loc = self.program.loc[ref]
        self.bases.add({"arena": "mem", "state": "st", "const": "weights"}.get(loc.kind, loc.kind))
        dtype = self.program.types[ref].dtype
        ctype = STORAGE[dtype]
        if loc.kind == "input":
            return self.ins[loc.index]["cname"]
        if loc.kind == "output":  # an in-place step may keep another dtype of the same size there
            o = self.outs[loc.index]
            return o["cname"] if o["dtype"] == dtype else f"(({ctype} *){o['cname']})"
        if loc.kind == "const":
            return self.weights.expr[self.program.constants[loc.index]]
        if loc.kind == "state":
            return f"(({ctype} *)(st + {loc.offset}))"
        return f"(({ctype} *)(mem + {loc.offset}))"

    def scratch(self, node, null: str = "NULL") -> str:
        """The step-local memory of ``node``'s step (its place in the arena), or ``null``."""
        off = self.program.scratch.get(node.name)
        if off is None:
            return null
        self.bases.add("mem")
        return f"(void *)(mem + {off})"


def run_copies(program: Program, outs: list[dict], ptr: Pointers, w: Weights) -> tuple[list, list]:
    """(copies at the end of a run: outputs that are other values, assigned values into the
    state; the state's initial values from the weights), as the templates print them."""
    types = program.types
    copies = [
        {"dst": outs[k]["cname"], "src": ptr(ref), "nbytes": outs[k]["nbytes"],
         "comment": f"output {k} is another value's copy"}
        for k, ref in program.output_copies
    ]  # fmt: skip
    var_index = {v: i for i, v in enumerate(program.variables)}
    copies += [
        {"dst": f"(st + {program.state_offsets[var_index[var]]})", "src": ptr(ref),
         "nbytes": types[ref].nbytes, "comment": "store the assigned value"}
        for var, ref in program.state_updates
    ]  # fmt: skip
    state_init = [
        {"offset": program.state_offsets[i], "src": w.expr[f"init:{v}"],
         "nbytes": types[ValueRef(v, 0)].nbytes, "comment": v}
        for i, v in enumerate(program.variables)
    ]  # fmt: skip
    return copies, state_init


def io_metadata(items) -> list[dict]:
    """The inputs or outputs (io_tensors) as metadata.json lists them; an "owner" (the rank that
    reads or writes the tensor, in a model over MPI ranks) as "rank"."""
    return [
        {
            "name": t["label"],
            "c_name": t["cname"],
            "dtype": t["dtype"],
            "shape": t["shape"],
            "file": t["file"] + ".npy",
            **({"rank": t["owner"]} if "owner" in t else {}),
            **({"length_axis": t["bound"] - 1} if t.get("bound") else {}),
        }
        for t in items
    ]


def main_descriptor(
    name: str, ins: list[dict], outs: list[dict], state_vars=(), pool: bool = False, arena: bool = True
) -> dict:
    """What a program's main.c tells its driver of the model (runtime_c/main_driver.h; the SPMD
    program's mpi/fc_spmd_main.h), for templates/build/main_model.c.j2 and the mains around it:
    the tensors as fc_main_tensor rows (escaped name, dtype, rank, shape, bytes of one run, an
    output's file, the rank that owns it: 0 in one process) and the sizes and entry points the
    driver reads, each a C expression, 0 or NULL where the model has none. ``state_vars``: the
    variables of a model whose state the program sets up (Frame.state_vars); ``pool``: the model
    runs on a thread pool; ``arena``: the driver allocates the model's arena (else the model
    keeps its memory in a context, and its state, if any, is read and written through it)."""
    NAME = name.upper()

    def rows(items: list[dict], output: bool) -> list[dict]:
        return [
            {
                "literal": t["literal"],
                "dtype": t["dtype"],
                "rank": t["rank"],
                "shape8": t["shape8"],
                "nbytes": t["nbytes"],
                "file": f'"{t["file"]}.npy"' if output else "NULL",
                "owner": t.get("owner", 0),
                "bound": t.get("bound", 0),
                "length": t.get("length", 0),
            }
            for t in items
        ]

    state = bool(state_vars)
    context = state and not arena  # a context's state: read and written through its adapters
    return {
        "inputs": rows(ins, False),
        "outputs": rows(outs, True),
        "arena_bytes": f"{NAME}_ARENA_BYTES" if arena else "0",
        "state_bytes": f"{NAME}_STATE_BYTES" if state else "0",
        "state_init": f"{name}_state_init" if state and arena else "NULL",
        "state_read": "state_read" if context else "NULL",  # templates/cuda/main.c.j2
        "state_write": "state_write" if context else "NULL",
        "vars": "vars" if state else "NULL",  # templates/build/state_vars.c.j2
        "n_vars": len(state_vars),
        **{f: f"{name}_{f}" if pool else "NULL" for f in ("pool_bytes", "pool_start", "pool_stop")},
    }


MAIN_ARGS = {"arena": "a->arena", "state": "a->state", "pool": "a->pool", "mpi": "a->ctx"}
"""How main.c's run adapter passes the driver's buffers (fc_main_args *a) to the model's run."""


def state_metadata(program: Program) -> list[dict]:
    """The state variables as metadata.json lists them: name, dtype, shape, byte offset."""
    return [
        {"name": v, "dtype": t.dtype, "shape": list(t.shape), "offset": off}
        for v, off in zip(program.variables, program.state_offsets)
        for t in (program.types[ValueRef(v, 0)],)
    ]


def step_calls(program: Program, ptr: Pointers) -> list[dict | None]:
    """What every backend's call of each step (``program.steps``, in order) takes of the frame:
    its comment (the node's name, escaped), output types, the pointers of its inputs and outputs
    and of its scratch memory (None for none); None for a step with nothing to compute (every
    output empty, or a step without outputs whose inputs are: an empty tensor's send)."""
    out = []
    for node in program.steps:
        off = program.scratch.get(node.name)
        types = [program.types[r] for r in node.inputs]
        if all(t.size == 0 for t in node.outputs or types) and not get_op(node.op).control:
            out.append(None)
            continue
        out.append(
            {
                "comment": repr(node.name)[1:-1],
                "types": ", ".join(str(t) for t in node.outputs),
                "in_types": types,
                "args": [ptr(r) for r in node.inputs] + [ptr(node.ref(i)) for i in range(len(node.outputs))],
                # in the arena, read only by a backend whose step takes it (it then marks "mem")
                "scratch": None if off is None else f"(void *)(mem + {off})",
            }
        )
    return out


@dataclass
class Frame:
    """The target-neutral part of one model's sources (``frame``)."""

    program: Program
    name: str
    names: Names  # the C names given so far (a backend adds its own through it)
    ins: list[dict]  # the interface's tensors (io_tensors)
    outs: list[dict]
    weights: Weights
    ptr: Pointers
    copies: list[dict]  # at the end of a run: outputs that are other values, assigned state
    state_init: list[dict]  # the state's initial values, from the weights
    state_vars: list[dict]  # name (escaped), dtype, rank, shape, offset
    calls: list[dict | None]  # each step's call (step_calls)
    api: EntryPoints  # the C API of a build with the threads and MPI frame() was given
    main: dict  # what a program's main.c tells its driver (main_descriptor)
    unread_inputs: list[str]  # the C names of the inputs no step and no output copy reads
    source_comment: str  # the graph's name, escaped for a C comment
    schedule: list[dict]  # metadata.json's schedule: each step's node, op and cost
    about: dict  # what metadata.json says of every model: version, names, interface, memory, state

    def entry_points(self, threads: int, mpi: bool, stateful: bool | None = None) -> EntryPoints:
        """The model's C API over these inputs and outputs (api.py)."""
        return entry_points(
            self.name,
            [(t["cname"], t["ctype"]) for t in self.ins],
            [(t["cname"], t["ctype"]) for t in self.outs],
            stateful=bool(self.program.variables) if stateful is None else stateful,
            threads=threads,
            mpi=mpi,
        )

    def metadata(self, **extra) -> dict:
        """What metadata.json says of every model (``about``), then a backend's ``extra`` and
        the schedule with each step's cost."""
        return {**self.about, **extra, "schedule": self.schedule}


def frame(
    program: Program,
    name: str,
    reserved: set[str],
    weights_name: str | None = None,
    weights_mode: str = "auto",
    weight_align: int = ALIGN,
    threads: int = 1,
    mpi: bool = False,
) -> Frame:
    """The ``Frame`` of the model ``name`` (a valid C identifier): ``reserved``, the C names
    its backend's code uses (never given to a tensor); the weights as ``weights_mode`` says
    (``weights``), a blob read through the pointer ``<weights_name>_weights``; its C API for a
    build with ``threads`` threads, over MPI ranks where ``mpi``."""
    names = Names(reserved={*reserved, name})
    ins, outs = io_tensors(program, name, names)
    w = weights(program, weights_name or name, names, weights_mode, weight_align)
    ptr = Pointers(program, ins, outs, w)
    copies, state_init = run_copies(program, outs, ptr, w)
    calls = step_calls(program, ptr)
    state_vars = [
        {"name": v, "dtype": t.dtype, "rank": t.rank, "shape": list(t.shape), "offset": off}
        for v, off in zip(program.variables, program.state_offsets)
        for t in (program.types[ValueRef(v, 0)],)
    ]
    read = {program.loc[r] for n in program.steps for r in n.inputs}
    read |= {program.loc[r] for _, r in program.output_copies}
    unread = [t["cname"] for k, t in enumerate(ins) if Loc("input", k) not in read]
    main = main_descriptor(name, ins, outs, state_vars, threads > 1)
    about = {
        "flowc": VERSION,
        "name": name,
        "graph": program.graph.name,
        "inputs": io_metadata(ins),
        "outputs": io_metadata(outs),
        "arena_bytes": program.arena_bytes,
        "arena_lower_bound": program.lower_bound,
        "weight_bytes": program.weight_bytes,
        "state_bytes": program.state_bytes,
        "state": state_metadata(program),
    }
    costs = [
        {"step": i, "node": n.name, "op": n.op, "flops": flops}
        for i, (n, flops) in enumerate(zip(program.steps, program.flops))
    ]
    api = entry_points(
        name,
        [(t["cname"], t["ctype"]) for t in ins],
        [(t["cname"], t["ctype"]) for t in outs],
        stateful=bool(program.variables),
        threads=threads,
        mpi=mpi,
    )
    # the model's (untrusted) names and values as C text, last: escaped comments and strings,
    # the weights of C arrays as initializer lines
    for c in [*w.consts, *state_init, *(c for c in calls if c is not None)]:
        c["comment"] = c_comment(c["comment"])
    for c in w.consts:
        c["lines"] = value_lines(c["lines"])
    for v in state_vars:
        v["name"] = c_string(v["name"])
    comment = c_comment(repr(program.graph.name))
    return Frame(
        program, name, names, ins, outs, w, ptr, copies, state_init, state_vars, calls, api, main, unread,
        comment, costs, about,
    )  # fmt: skip
