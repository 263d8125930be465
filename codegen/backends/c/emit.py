"""Render C sources from a Program: Python builds the contexts, Jinja2 templates print them.

Every name, type, size, offset and loop bound is decided here or in the op table
(op_table.py, ops/); the templates in templates/c/ and templates/build/ only loop over these
contexts (StrictUndefined). The parts, in order: the tensors of the interface (``io``), the
entry points (api.py), the weights (C arrays or one blob), where each value lives
(``Pointers``), one step function per step, the run function, and the project files.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

import jinja2
import numpy as np

from graphdef import dtypes
from graphdef.ir import ValueRef
from graphdef.registry import ELEMENTWISE, get_op

from ... import schedule
from ...program import Program
from ...storage import ALIGN, Loc
from ...target import Target
from ..contract import RUNTIME, VERSION, Sources, environment  # noqa: F401  (re-read by tests)
from .api import EntryPoints, entry_points
from .c_spelling import PUBLIC, STORAGE, Names, c_comment, c_literal, c_string
from .op_table import Call, Step, TensorCtx, kernel_of, part_bounds, part_scratch, parts_of, split_of
from .ops.elementwise import elementwise_step
from .sgemm import ISA_IDS

BLOB_THRESHOLD = 64 * 1024  # weights above this go into a binary blob pulled in by the assembler
THREADPOOL = "runtime/threadpool.c"
# a model's steps beyond about this much C (step functions and their plans) go into files of
# their own, <name>_steps1.c, ..., so that the C compiler builds them on several cores at once
STEP_FILE_BYTES = 48_000
# the kernel headers whose tile kernels compile apart (FC_KERNELS_APART, kernels/sgemm.h): a model
# that includes one (directly or through another header) builds its .c file beside its own
KERNEL_SOURCES = {
    "kernels/sgemm.h": "runtime/kernels/sgemm.c",
    "kernels/conv_tiles.h": "runtime/kernels/conv_tiles.c",
}
# what a standalone program's driver (main.c, train.c) links besides the model: file handling
# (files.c: every open, temporary and rename), .npy / .npz I/O, checkpoints, and the command
# line and .npy I/O every main shares (driver.c)
DRIVER_C = ("runtime/files.c", "runtime/npy.c", "runtime/npz.c", "runtime/checkpoint.c", "runtime/driver.c")


@functools.cache
def _included(header: str) -> frozenset[str]:
    """``header`` and every runtime_c header it includes, directly or not."""
    out = {header}
    if not (RUNTIME / header).is_file():  # another layer's (mpi/fc_mpi.h)
        return frozenset(out)
    for inc in re.findall(r'^#include "([^"]+)"', (RUNTIME / header).read_text(), re.M):
        if (RUNTIME / inc).is_file() and inc not in out:
            out |= _included(inc)
    return frozenset(out)


def kernel_sources(headers, target: Target) -> list[str]:
    """The kernel files a model including ``headers`` builds beside its own (KERNEL_SOURCES);
    none for a microcontroller, whose library keeps its kernels in the model's object."""
    if target.spec.product == "library":
        return []
    used = set().union(*(_included(h) for h in headers)) if headers else set()
    return [c for h, c in KERNEL_SOURCES.items() if h in used]


def step_files(steps: list[dict], name: str, target: Target, rank) -> list[tuple[str, list[dict]]]:
    """The steps in files of about STEP_FILE_BYTES of C each, in run order: [(file, steps)],
    the model's own file first. One file for a microcontroller's library (its footprint and
    stack bound read one object) and for a rank of an SPMD program."""
    sizes = [len(s["body"]) + len(s["prelude"]) for s in steps]
    count = -(-sum(sizes) // STEP_FILE_BYTES) if target.spec.product != "library" and rank is None else 1
    if count <= 1:
        return [(f"{name}.c", steps)]
    out, group, filled, share = [], [], 0, sum(sizes) / count
    for step, size in zip(steps, sizes):
        if group and filled + size / 2 > share * (len(out) + 1) and len(out) < count - 1:
            out.append(group)
            group = []
        group.append(step)
        filled += size
    out.append(group)
    return [(f"{name}.c" if k == 0 else f"{name}_steps{k}.c", g) for k, g in enumerate(out)]


# ----------------------------------------------------------------------------- interface
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


def _file_name(label: str, cname: str) -> str:
    # at most 200 bytes: the binary's temporary .<name>.npy.XXXXXX must fit in NAME_MAX (255)
    ok = (
        label
        and all(ch.isalnum() or ch in "_-." for ch in label)
        and not label.startswith(".")
        and len(label.encode("utf-8")) <= 200
    )
    return label if ok else cname


# ----------------------------------------------------------------------------- weights
def _value_lines(array: np.ndarray, per_line: int = 8) -> list[str]:
    dtype = dtypes.as_dtype(array.dtype)
    flat = array.reshape(-1)
    if dtype == "float16":
        items = [f"0x{v:04x}" for v in flat.view(np.uint16).tolist()]
    elif dtype == "bool":
        items = ["1" if v else "0" for v in flat.tolist()]
    else:
        items = [c_literal(v, dtype) for v in flat.tolist()]
    items = items or ["0"]
    return [", ".join(items[i : i + per_line]) + "," for i in range(0, len(items), per_line)]


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
    consts, expr, blob, offset = [], {}, bytearray(), 0
    for key, array in arrays:
        dt = dtypes.as_dtype(array.dtype)
        ctype = STORAGE[dt]
        if blob_mode:
            expr[key] = f"((const {ctype} *)({name}_weights + {offset}))"
            data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
            blob += data + bytes(_align(len(data), align) - len(data))
            offset += _align(len(data), align)
        else:
            cname = names(f"{name}_w_{key}", "w")
            expr[key] = cname
            consts.append(
                {
                    "cname": cname,
                    "ctype": ctype,
                    "count": max(array.size, 1),
                    "lines": _value_lines(array),
                    "comment": c_comment(f"{key}: {dt}{list(array.shape)}"),
                }
            )
    return Weights(expr, consts, bytes(blob) if blob_mode else None, align)


# ----------------------------------------------------------------------------- values
@dataclass
class Pointers:
    """The C pointer expression of every value, inside the run function: inputs and outputs
    by parameter name, weights by ``Weights.expr``, state and arena values at their offsets
    (``st``, ``mem``: the run function's byte pointers)."""

    program: Program
    ins: list[dict]
    outs: list[dict]
    weights: Weights

    def __call__(self, ref: ValueRef) -> str:
        loc = self.program.loc[ref]
        dtype = self.program.graph.type_of(ref).dtype
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


# ----------------------------------------------------------------------------- steps
@dataclass
class Steps:
    steps: list[dict]  # step functions: name, parameters, body, prelude
    calls: list[str]  # their calls in the run function, in order
    headers: set[str]
    uses_pool: bool
    requests: int = 0  # MPI requests of the communication steps (sends and receives)


def lower_step(node, index: int, name: str, graph, isa: str = "scalar", parts: int = 1) -> tuple[Step, Call]:
    """The Step a lowering sees and the Call it makes (elementwise steps share one loop);
    ``parts`` > 1: the lowering renders a range of the step's units (table.Split)."""
    in_t = [graph.type_of(r) for r in node.inputs]
    step = Step(
        node=node,
        ins=[TensorCtx.of(t) for t in in_t],
        outs=[TensorCtx.of(t) for t in node.outputs],
        x=[f"x{j}" for j in range(len(in_t))],
        y=[f"y{j}" for j in range(len(node.outputs))],
        func=f"{name}_step_{index}",
        isa=isa,
        parts=parts,
    )
    if get_op(node.op).kind == ELEMENTWISE:
        return step, elementwise_step(step)
    return step, kernel_of(node.op).lower(step)


def split_step(
    env: jinja2.Environment, step: Step, in_t, params: list[str], takes_scratch: bool, unused, body: str
) -> tuple[str, str]:
    """(prelude, body) of a step split in ``step.parts`` (templates/c/ops/parts*.c.j2): the
    op's ``body``, rendered for units [lo, hi), becomes a function of its own; each part calls
    it on its bounds (whole grains of the step's Split) and its slice of the scratch, and the
    step function runs the parts on the pool and returns the last failure, as one thread would."""
    node, parts = step.node, step.parts
    fields = params[: len(step.x) + len(step.y)]
    init = step.x + step.y
    call = [f"A->{v}" for v in init]
    if takes_scratch:
        fields.append("unsigned char *scratch")
        init.append("(unsigned char *)scratch")
        per_part = part_scratch(node, in_t, step.isa, parts)
        call.append(f"A->scratch ? A->scratch + (long)part * {per_part} : NULL" if per_part else "A->scratch")
    split = {
        "parts": parts,
        "bounds": part_bounds(split_of(node, in_t), parts),
        "params": params + ["long lo", "long hi"],
        "fields": fields,
        "init": init,
        "call": call + ["bounds[part]", "bounds[part + 1]"],
        "unused": unused,
        "body": body,
    }
    return (
        env.get_template("c/ops/parts.prelude.c.j2").render(func=step.func, split=split),
        env.get_template("c/ops/parts.c.j2").render(func=step.func, split=split),
    )


def steps(
    env: jinja2.Environment, program: Program, name: str, ptr: Pointers, threads: int, isa: str
) -> Steps:
    out = Steps([], [], {"kernels/scalar.h"}, False)
    g = program.graph
    request: dict[str, int] = {}  # a send's or receive's request; a wait uses its receive's
    for index, node in enumerate(program.steps):
        if all(t.size == 0 for t in node.outputs or [g.type_of(r) for r in node.inputs]):
            continue  # nothing to compute (or to send: an empty tensor's receive is left out too)
        in_t = [g.type_of(r) for r in node.inputs]
        parts = parts_of(node, in_t, threads)
        step, call = lower_step(node, index, name, g, isa, parts)
        takes_scratch = get_op(node.op).kind != ELEMENTWISE and kernel_of(node.op).scratch is not None
        parallel = call.parallel or parts > 1
        out.headers.update(call.headers)
        args = {"x": step.x, "y": step.y, "k": call.k, "func": step.func, "ins": step.ins, "outs": step.outs}
        where = call.template if "/" in call.template else f"c/ops/{call.template}"
        body = env.get_template(f"{where}.c.j2").render(**args)
        prelude = (
            env.get_template(f"c/ops/{call.prelude}.prelude.c.j2").render(**args) if call.prelude else ""
        )
        params = [f"const {t.ctype} *{v}" for t, v in zip(step.ins, step.x)]
        params += [f"{t.ctype} *{v}" for t, v in zip(step.outs, step.y)]
        params += ["void *scratch"] if takes_scratch else []
        unused = call.k.get("unused", [])
        if parts > 1:  # the body computes units [lo, hi) in a function of its own; the step runs the parts
            prelude_parts, body = split_step(env, step, in_t, params, takes_scratch, unused, body)
            prelude += prelude_parts
            unused = []
        params += ["void *pool"] if parallel else []
        params += ["fc_mpi *mpi", "MPI_Request *req"] if call.comm else []
        out.steps.append(
            {
                "index": index,
                "func": step.func,
                "op": node.op,
                "comment": c_comment(repr(node.name)[1:-1]),
                "types": ", ".join(str(t) for t in node.outputs),
                "params": params,
                "unused": unused,
                "body": body,
                "prelude": prelude,
            }
        )
        call_args = [ptr(r) for r in node.inputs] + [ptr(node.ref(i)) for i in range(len(node.outputs))]
        if takes_scratch:
            off = program.scratch.get(node.name)
            call_args.append("NULL" if off is None else f"(void *)(mem + {off})")
        if parallel:
            call_args.append("pool")
            out.uses_pool = True
        if call.comm:
            if node.op in ("recv_wait", "allreduce_wait"):
                slot = request[node.inputs[0].node]
            else:
                slot = request[node.name] = len(request)
            call_args += ["fc_m", f"&req[{slot}]"]
        out.calls.append(f"{step.func}({', '.join(call_args)})")
    if threads > 1:
        out.headers.add("threadpool.h")
    out.requests = len(request)
    return out


RUN_STEPS = 256
"""The most step calls one C function makes: a longer run calls functions of this many steps
each (``run_parts``). GCC's time on one function grows faster than its length: splitting the
13,330 calls of a 20,000-node graph's run function so cut its -O3 build from 59 s to 48 s
(bench/compile_time.py ``--kinds fan --cc``); the extra call per part costs nothing measurable."""


def run_parts(name: str, calls: list[str], params: list[tuple[str, str]]) -> list[dict]:
    """The run function's step calls as ``<name>_run_part_<k>`` functions of at most RUN_STEPS
    calls each, in order; none when all fit in one. ``params``: (C name, declaration) of what
    a call may read besides globals (the run's tensors, ``mem``, ``st``, ...); a part takes
    those its calls name. Each part: func, params, its calls (the index of each among all
    calls: the profile's step), first and last index, and the call the run makes."""
    if len(calls) <= RUN_STEPS:
        return []
    parts = []
    for k, first in enumerate(range(0, len(calls), RUN_STEPS)):
        chunk = calls[first : first + RUN_STEPS]
        words = set(re.findall(r"[A-Za-z_]\w*", "\n".join(chunk)))
        used = [(n, decl) for n, decl in params if n in words]
        func = f"{name}_run_part_{k}"
        parts.append(
            {
                "func": func,
                "params": [decl for _, decl in used] or ["void"],
                "calls": [{"index": first + i, "call": c} for i, c in enumerate(chunk)],
                "first": first,
                "last": first + len(chunk) - 1,
                "call": f"{func}({', '.join(n for n, _ in used)})",
            }
        )
    return parts


def run_params(ins: list[dict], outs: list[dict], arena: bool, state: bool, pool: bool, mpi: bool):
    """(C name, declaration) of every local or parameter of the run function a step call may
    read: the inputs and outputs, the arena and state byte pointers, the pool, the MPI context
    and requests (see Pointers and ``steps``)."""
    out = [(t["cname"], f"const {t['ctype']} *{t['cname']}") for t in ins]
    out += [(t["cname"], f"{t['ctype']} *{t['cname']}") for t in outs]
    out += [("mem", "unsigned char *mem")] if arena else []
    out += [("st", "unsigned char *st")] if state else []
    out += [("pool", "void *pool")] if pool else []
    out += [("fc_m", "fc_mpi *fc_m"), ("req", "MPI_Request *req")] if mpi else []
    return out


# ----------------------------------------------------------------------------- the model
def run_copies(program: Program, outs: list[dict], ptr: Pointers, w: Weights) -> tuple[list, list]:
    """(copies at the end of a run: outputs that are other values, assigned values into the
    state; the state's initial values from the weights), as the templates print them."""
    g = program.graph
    copies = [
        {"dst": outs[k]["cname"], "src": ptr(ref), "nbytes": outs[k]["nbytes"],
         "comment": f"output {k} is another value's copy"}
        for k, ref in program.output_copies
    ]  # fmt: skip
    var_index = {v: i for i, v in enumerate(program.variables)}
    copies += [
        {"dst": f"(st + {program.state_offsets[var_index[var]]})", "src": ptr(ref),
         "nbytes": g.type_of(ref).nbytes, "comment": "store the assigned value"}
        for var, ref in program.state_updates
    ]  # fmt: skip
    state_init = [
        {"offset": program.state_offsets[i], "src": w.expr[f"init:{v}"],
         "nbytes": g.node(v).outputs[0].nbytes, "comment": c_comment(v)}
        for i, v in enumerate(program.variables)
    ]  # fmt: skip
    return copies, state_init


def emit(
    program: Program,
    name: str,
    weights_mode: str = "auto",
    target: Target | None = None,
    isa: str = "scalar",
    rank: int | None = None,
) -> Sources:
    """All generated files of one model called ``name`` (already a valid C identifier), for a
    build whose compiler selects the float32 GEMM kernel ``isa``. ``rank``: the model is one
    rank's part of an SPMD program (codegen/backends/c/spmd.py): its run takes the MPI
    context, and only its model files are made (the SPMD program has the drivers)."""
    target = target or Target()
    g = program.graph
    env = environment()
    reserved = {"mem", "st", "status", "arena", "state", "pool", "i", "r", "mpi", "fc_m", "req", name}
    names = Names(reserved=reserved)
    ins, outs = io_tensors(program, name, names)
    api = entry_points(
        name,
        [(t["cname"], t["ctype"]) for t in ins],
        [(t["cname"], t["ctype"]) for t in outs],
        stateful=bool(program.variables),
        threads=target.threads,
        mpi=rank is not None,
    )
    w = weights(program, name, names, weights_mode, target.spec.weight_align)
    ptr = Pointers(program, ins, outs, w)
    st = steps(env, program, name, ptr, target.threads, isa)

    copies, state_init = run_copies(program, outs, ptr, w)

    has_state = bool(program.variables)
    uses_arena = any("mem +" in c for c in st.calls) or any("mem +" in c["src"] for c in copies)
    read = {program.loc[r] for n in program.steps for r in n.inputs} | {
        program.loc[r] for _, r in program.output_copies
    }
    unused = [t["cname"] for k, t in enumerate(ins) if Loc("input", k) not in read]
    if not uses_arena:
        unused.append("arena")
    if target.threads > 1 and not st.uses_pool:
        unused.append("pool")
    if rank is not None and not st.requests:
        unused.append("mpi")
    null_checks = [f"!{t['cname']}" for t in ins + outs] + (["!arena"] if uses_arena else [])
    null_checks += ["!mpi"] if st.requests else []
    null_checks += ["!state"] if has_state else []
    m = {
        "name": name,
        "NAME": name.upper(),
        "version": VERSION,
        "source_comment": c_comment(repr(g.name)),
        "arena_bytes": program.arena_bytes,
        "lower_bound": program.lower_bound,
        "align": ALIGN,
        "weight_bytes": program.weight_bytes,
        "state_bytes": program.state_bytes,
        "has_state": has_state,
        "inputs": ins,
        "outputs": outs,
        "api": api,
        "run_decl": api.run.declaration(),
        "decl": {
            "run": api.run.declaration(),
            "run_args": ", ".join(p.name for p in api.run.params),
            "state_init": _decl(api.state_init),
            "pool": [_decl(f) for f in api.pool],
            "status": _decl(api.status_string),
        },
        # how the drivers call the model: main.c with its .npy buffers, firmware.c with static arrays
        "main_call": api.run.call(
            {
                "input": lambda p: f"(const {ins[p.index]['ctype']} *)in[{p.index}].data",
                "output": lambda p: f"({outs[p.index]['ctype']} *)out[{p.index}]",
                "arena": "arena",
                "state": "state",
                "pool": "pool",
                "mpi": "mpi",
            }
        ),
        "firmware_call": api.run.call(
            {
                "input": lambda p: f"fw_{ins[p.index]['cname']}",
                "output": lambda p: f"fw_{outs[p.index]['cname']}",
                "arena": "fw_arena",
                "state": "fw_state",
                "pool": "NULL",
                "mpi": "NULL",
            }
        ),
        "headers": sorted(st.headers),
        "kernels_apart": bool(kernel_sources(st.headers, target)),
        # a rank's part of an SPMD program: its MPI requests, waited for at the end of a run
        "comm": {"requests": st.requests, "rank": rank} if st.requests else None,
        # products planned for the GEMM kernel of this build's flags: another kernel would need
        # other scratch sizes, so a rebuild with other flags stops with this message
        "isa_guard": (
            {"id": ISA_IDS[isa], "isa": isa, "flags": c_comment(" ".join(target.cflags()), limit=200)}
            if "kernels/sgemm.h" in st.headers
            else None
        ),
        "consts": w.consts,
        "blob": f"{name}_weights.bin" if w.blob is not None else None,
        "steps": st.steps,
        "step_files": [],  # (file, steps) after the model's own (step_files)
        "calls": st.calls,
        "run_parts": run_parts(
            name, st.calls, run_params(ins, outs, uses_arena, has_state, st.uses_pool, bool(st.requests))
        ),
        "copies": copies,
        "state_init": state_init,
        "state_vars": [
            {
                "name": c_string(v),
                "dtype": g.node(v).outputs[0].dtype,
                "rank": len(g.node(v).outputs[0].shape),
                "shape": list(g.node(v).outputs[0].shape),
                "offset": program.state_offsets[i],
            }
            for i, v in enumerate(program.variables)
        ],  # fmt: skip
        "trainer": False,  # main.c also runs the training driver (trainer.py)
        "cuda": False,  # main.c drives a CUDA model's context (backends/cuda/emit.py)
        "mpi": False,  # built with MPI's compiler (a data-parallel training binary)
        "uses_arena": uses_arena,
        "null_checks": null_checks or ["0"],
        "unused": unused,
        "cflags": " ".join(target.cflags()),
        "threads": target.threads,
        # the Makefile's compiler: the host's unless set, a cross target's own
        "cc_line": f"CC = {target.compiler}" if target.compiler else "CC ?= cc",
        "ldflags": " ".join(target.ldflags()),
        "arch": target.arch,
        # every step a function of its own: the stack bound and the footprint split see them, and
        # GCC's guessed profile of one long run function calls its later code cold (a chain of
        # status checks) and then leaves its loops scalar (an elementwise step 10x slower)
        "step_storage": "static FC_NOINLINE",
        "const_align": w.align,
        "program": target.spec.product == "program",
        "cmake_hint": (
            f"cross build: cmake -DCMAKE_C_COMPILER={target.compiler} -DCMAKE_SYSTEM_NAME="
            + (
                "Linux"
                if target.spec.product == "program"
                else "Generic -DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY"
            )
            if target.compiler
            else ""
        ),
    }
    src = Sources(api=api, context=m)
    src.files[f"{name}.h"] = env.get_template("c/header.h.j2").render(m=m)
    files = step_files(st.steps, name, target, rank)
    m["steps"], m["step_files"] = files[0][1], [{"file": f, "steps": s} for f, s in files[1:]]
    src.files[f"{name}.c"] = env.get_template("c/model.c.j2").render(m=m)
    for f in m["step_files"]:
        src.files[f["file"]] = env.get_template("c/steps.c.j2").render(m=m, steps=f["steps"], file=f["file"])
    if w.blob is not None:
        src.files[f"{name}_weights.c"] = env.get_template("c/weights_blob.c.j2").render(m=m)
        src.files[f"{name}_weights.bin"] = w.blob
    src.c_files = [f for f, _ in files] + ([f"{name}_weights.c"] if w.blob is not None else [])
    src.c_files += kernel_sources(st.headers, target)
    src.c_files += [THREADPOOL] if target.threads > 1 and rank is None else []
    if rank is not None:  # the SPMD program's drivers and build files come from spmd.py
        src.metadata = _metadata(program, name, ins, outs, w.blob is not None, api)
        return src
    if target.spec.product == "library":  # a static library, and a firmware that runs it on a QEMU board
        mcu = {
            "board": target.spec.board,
            "ar": f"{target.spec.prefix}ar",
            "ldflags": " ".join(FIRMWARE_LDFLAGS),
        }
        src.files["firmware.c"] = env.get_template("build/firmware.c.j2").render(m=m)
        src.files["firmware_data.h"] = firmware_data(env, ins, None)
        src.files["Makefile"] = env.get_template("build/Makefile.mcu.j2").render(
            m=m, mcu=mcu, sources=src.c_files
        )
    else:
        src.files["main.c"] = env.get_template("build/main.c.j2").render(m=m)
        src.files["Makefile"] = env.get_template("build/Makefile.j2").render(
            m=m, sources=src.c_files, driver=DRIVER_C
        )
    src.files["CMakeLists.txt"] = env.get_template("build/CMakeLists.txt.j2").render(
        m=m, sources=src.c_files, driver=DRIVER_C
    )
    src.metadata = _metadata(program, name, ins, outs, w.blob is not None, api)
    src.metadata["arch"] = target.arch
    src.metadata["threads"] = target.threads
    src.files["metadata.json"] = json.dumps(src.metadata, indent=1) + "\n"
    return src


def _decl(f) -> dict | None:
    return None if f is None else {"text": f.declaration(), "doc": c_comment(f.doc, limit=200)}


# How the firmware is linked (the Makefile's `firmware.elf` rule and codegen.mcu run the same):
# flowc's start-up and linker script, newlib-nano for memcpy and libm, unused sections dropped.
FIRMWARE_LDFLAGS = ("-T", "runtime/mcu/mps2.ld", "-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections")


def firmware_data(env: jinja2.Environment, ins: list[dict], feeds: dict | None, runs: int = 1) -> str:
    """firmware_data.h: the inputs the firmware runs on, as const arrays (in flash), or zeroed
    arrays (in RAM) when ``feeds`` is None, and how many times it calls the model on them.
    ``ins``: the input contexts (cname, ctype, size)."""
    arrays = []
    for t in ins:
        value = None if feeds is None else feeds[t["label"]]
        arrays.append(
            {
                "cname": t["cname"],
                "ctype": t["ctype"],
                "count": max(t["size"], 1),
                "lines": None if value is None else _value_lines(np.asarray(value).reshape(-1)),
            }
        )
    return env.get_template("build/firmware_data.h.j2").render(arrays=arrays, version=VERSION, runs=int(runs))


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
        }
        for t in items
    ]


def state_metadata(program: Program) -> list[dict]:
    """The state variables as metadata.json lists them: name, dtype, shape, byte offset."""
    g = program.graph
    return [
        {"name": v, "dtype": t.dtype, "shape": list(t.shape), "offset": off}
        for v, off in zip(program.variables, program.state_offsets)
        for t in (g.node(v).outputs[0],)
    ]


def _metadata(program: Program, name: str, ins, outs, blob_mode: bool, api: EntryPoints) -> dict:
    g = program.graph
    io = io_metadata
    return {
        "flowc": VERSION,
        "name": name,
        "graph": g.name,
        "inputs": io(ins),
        "outputs": io(outs),
        "arena_bytes": program.arena_bytes,
        "arena_lower_bound": program.lower_bound,
        "weight_bytes": program.weight_bytes,
        "state_bytes": program.state_bytes,
        "weights": "blob" if blob_mode else "c",
        "state": state_metadata(program),
        "schedule": [
            {"step": i, "node": n.name, "op": n.op, "flops": schedule.cost(g, n).flops}
            for i, n in enumerate(program.steps)
        ],
        "api": api.to_json(),
    }
