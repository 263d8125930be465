"""Render C sources from a Program: Python builds the contexts, Jinja2 templates print them.

Every name, type, size, offset and loop bound is decided here or in the op table
(op_table.py, ops/); the templates in templates/c/ and templates/build/ only loop over these
contexts (StrictUndefined). Three phases, in order: the frame (render/frame.py: the interface,
the weights, where each value lives, each step's call, the entry points, the metadata), the
steps (step_code.py: one step function per step), then here the context of the templates, the
run function, the model's files and the project files.
"""

from __future__ import annotations

import functools
import json
import re

import jinja2
import numpy as np

from ...program import Program
from ...render.frame import MAIN_ARGS, Frame, frame
from ...render.sources import RUNTIME, VERSION, Sources, environment  # noqa: F401  (re-read by tests)
from ...render.spelling import c_comment, value_lines
from ...storage import ALIGN
from ...target import Target
from .control_steps import Statement
from .sgemm import ISA_IDS
from .step_code import Steps, steps

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
# (files.c: every open, temporary and rename), .npy / .npz I/O, checkpoints, the command line
# and .npy I/O every main shares (driver.c), and the binary's main itself (main_driver.c)
DRIVER_C = (
    "runtime/files.c",
    "runtime/npy.c",
    "runtime/npz.c",
    "runtime/checkpoint.c",
    "runtime/driver.c",
    "runtime/main_driver.c",
)
# what the SPMD program's main.c links: the same, and its main over MPI ranks, beside the MPI
# layer since it calls MPI (runtime_c builds without it)
SPMD_DRIVER_C = (*DRIVER_C, "mpi/fc_spmd_main.c")


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


# ----------------------------------------------------------------------------- the model


def emit(
    program: Program,
    name: str,
    weights_mode: str = "auto",
    target: Target | None = None,
    isa: str = "scalar",
    rank: int | None = None,
    int8: str | None = None,
) -> Sources:
    """All generated files of one model called ``name`` (already a valid C identifier), for a
    build whose compiler selects the float32 GEMM kernel ``isa`` and the integer kernel's
    features ``int8`` (ops/quant.py ``int8_features``; None: read as ``isa``). ``rank``: the model is one
    rank's part of an SPMD program (codegen/backends/c/spmd.py): its run takes the MPI
    context, and only its model files are made (the SPMD program has the drivers)."""
    target = target or Target()
    f = frame(
        program,
        name,
        RESERVED,
        weights_mode=weights_mode,
        weight_align=target.spec.weight_align,
        threads=target.threads,
        mpi=rank is not None,
    )
    env = environment()
    st = steps(env, f, target.threads, isa, int8)
    m = context(f, st, target, isa, rank)
    src = Sources(api=m["api"], context=m)
    src.files[f"{name}.h"] = env.get_template("c/header.h.j2").render(m=m)
    files = step_files(st.steps, name, target, rank)
    m["steps"], m["step_files"] = files[0][1], [{"file": f, "steps": s} for f, s in files[1:]]
    src.files[f"{name}.c"] = env.get_template("c/model.c.j2").render(m=m)
    for sf in m["step_files"]:
        src.files[sf["file"]] = env.get_template("c/steps.c.j2").render(
            m=m, steps=sf["steps"], file=sf["file"]
        )
    blob = f.weights.blob
    if blob is not None:
        src.files[f"{name}_weights.c"] = env.get_template("c/weights_blob.c.j2").render(m=m)
        src.files[f"{name}_weights.bin"] = blob
    src.c_files = [file for file, _ in files] + ([f"{name}_weights.c"] if blob is not None else [])
    src.c_files += kernel_sources(st.headers, target)
    src.c_files += [THREADPOOL] if target.threads > 1 and rank is None else []
    weights = "blob" if f.weights.blob is not None else "c"
    src.metadata = {**f.about, "weights": weights, "schedule": f.schedule, "api": m["api"].to_json()}
    if rank is not None:  # the SPMD program's drivers and build files come from spmd.py
        return src
    src.files.update(project_files(env, m, src.c_files, target, f.ins))
    src.metadata["arch"] = target.arch
    src.metadata["threads"] = target.threads
    src.files["metadata.json"] = json.dumps(src.metadata, indent=1) + "\n"
    return src


RESERVED = frozenset({"mem", "st", "status", "arena", "state", "pool", "i", "r", "mpi", "fc_m", "req"})
"""The C names the model's run function and step calls use: never given to a tensor."""


def context(f: Frame, st: Steps, target: Target, isa: str, rank: int | None) -> dict:
    """What the C templates print of one model (``m``): the frame, its steps and the build."""
    program, name, ins, outs = f.program, f.name, f.ins, f.outs
    api = f.api
    has_state = bool(program.variables)
    uses_arena = "mem" in f.ptr.bases or st.scratch_in_arena
    unused = list(f.unread_inputs)
    if not uses_arena:
        unused.append("arena")
    if target.threads > 1 and not st.uses_pool:
        unused.append("pool")
    if rank is not None and not st.requests:
        unused.append("mpi")
    null_checks = [f"!{t['cname']}" for t in ins + outs] + (["!arena"] if uses_arena else [])
    null_checks += ["!mpi"] if st.requests else []
    null_checks += ["!state"] if has_state else []
    return {
        "name": name,
        "NAME": name.upper(),
        "version": VERSION,
        "source_comment": f.source_comment,
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
        "decl": api.declarations(),
        # how the drivers call the model: main.c on the buffers of runtime_c/main_driver.c (its
        # fc_main_args), firmware.c with static arrays
        "main_call": api.run.call(
            {
                "input": lambda p: f"(const {ins[p.index]['ctype']} *)a->in[{p.index}]",
                "output": lambda p: f"({outs[p.index]['ctype']} *)a->out[{p.index}]",
                **MAIN_ARGS,
            }
        ),
        "main": f.main,
        # the README.txt example's call, on static arrays named as the parameters
        "user_call": api.run.call(
            {
                **{p.role: p.role for p in api.run.params},  # (state, pool, mpi, ...: named as their role)
                "input": lambda p: ins[p.index]["cname"],
                "output": lambda p: outs[p.index]["cname"],
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
        "consts": f.weights.consts,
        "blob": f"{name}_weights.bin" if f.weights.blob is not None else None,
        "steps": st.steps,
        "step_files": [],  # (file, steps) after the model's own (step_files)
        "calls": st.calls,
        "run_lines": [line for _, line in run_lines(st.calls)],
        "profile_names": st.names,
        "run_parts": run_parts(
            name, st.calls, run_params(ins, outs, uses_arena, has_state, st.uses_pool, bool(st.requests))
        ),
        "copies": f.copies,
        "state_init": f.state_init,
        "state_vars": f.state_vars,
        "trainer": False,  # main.c also runs the training driver (trainer.py)
        "mpi": False,  # built with MPI's compiler (a data-parallel training binary)
        "uses_arena": uses_arena,
        "null_checks": null_checks or ["0"],
        "unused": unused,
        "cflags": " ".join(target.cflags()),
        "optflags": " ".join(target.opt_flags()),
        "isaflags": " ".join(target.isa_flags()),
        "threads": target.threads,
        # the Makefile's compiler: the host's unless set, a cross target's own
        "cc_line": f"CC = {target.compiler}" if target.compiler else "CC ?= cc",
        "ldflags": " ".join(target.ldflags()),
        "arch": target.arch,
        # every step a function of its own: the stack bound and the footprint split see them, and
        # GCC's guessed profile of one long run function calls its later code cold (a chain of
        # status checks) and then leaves its loops scalar (an elementwise step 10x slower)
        "step_storage": "static FC_NOINLINE",
        "const_align": f.weights.align,
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


def project_files(env: jinja2.Environment, m: dict, sources: list[str], target: Target, ins) -> dict:
    """The driver and build files of a standalone model: main.c, Makefile and CMakeLists.txt,
    or for a microcontroller a static library's Makefile and a firmware that runs it on a
    QEMU board."""
    files = {}
    if target.spec.product == "library":
        mcu = {
            "board": target.spec.board,
            "ar": f"{target.spec.prefix}ar",
            "ldflags": " ".join(firmware_ldflags(target)),
            "ld_script": target.spec.ld_script,
        }
        files["firmware.c"] = env.get_template("build/firmware.c.j2").render(m=m)
        files["firmware_data.h"] = firmware_data(env, firmware_arrays(ins))
        files["Makefile"] = env.get_template("build/Makefile.mcu.j2").render(m=m, mcu=mcu, sources=sources)
    else:
        files["main.c"] = env.get_template("build/main.c.j2").render(m=m)
        files["Makefile"] = env.get_template("build/Makefile.j2").render(
            m=m, sources=sources, driver=DRIVER_C
        )
    files["CMakeLists.txt"] = env.get_template("build/CMakeLists.txt.j2").render(
        m=m, sources=sources, driver=DRIVER_C
    )
    files["README.txt"] = env.get_template("build/README.txt.j2").render(
        m=m, mcu=target.spec.product == "library", cc=target.compiler or "cc"
    )
    return files


# How the firmware is linked (the Makefile's `firmware.elf` rule and codegen.mcu run the same):
# flowc's start-up and linker script, newlib-nano for memcpy and libm, unused sections dropped.
def firmware_ldflags(target: Target) -> tuple[str, ...]:
    return (
        "-T",
        f"runtime/mcu/{target.spec.ld_script}",
        "-nostartfiles",
        "--specs=nano.specs",
        "-Wl,--gc-sections",
    )


def firmware_arrays(ins: list[dict], values: dict | None = None) -> list[dict]:
    """The inputs the firmware runs on (``ins``: the input contexts: cname, ctype, size), with
    ``values`` (label -> array) as C literal lines, or zeroed (no lines) where None."""
    return [
        {
            "cname": t["cname"],
            "ctype": t["ctype"],
            "count": max(t["size"], 1),
            "lines": None if values is None else value_lines(np.asarray(values[t["label"]]).reshape(-1)),
        }
        for t in ins
    ]


def firmware_data(env: jinja2.Environment, arrays: list[dict], runs: int = 1) -> str:
    """firmware_data.h: the inputs the firmware runs on (``firmware_arrays``), as const arrays
    (in flash) where they have values, else zeroed arrays (in RAM), and how many times it calls
    the model on them."""
    return env.get_template("build/firmware_data.h.j2").render(arrays=arrays, version=VERSION, runs=int(runs))


RUN_STEPS = 256
"""The most step calls one C function makes: a longer run calls functions of this many steps
each (``run_parts``). GCC's time on one function grows faster than its length: splitting the
13,330 calls of a 20,000-node graph's run function so cut its -O3 build from 59 s to 48 s
(bench/compile_time.py ``--kinds fan --cc``); the extra call per part costs nothing measurable."""


def run_lines(calls: list[str]) -> list[tuple[int, str]]:
    """(depth after, line) of the run function for each call: a step call checked for its
    status, or a loop's or branch's own C (control_steps.Statement), indented by nesting."""
    out, depth = [], 0
    for i, c in enumerate(calls):
        if isinstance(c, Statement):
            lines = []
            for line in c.split("\n"):
                if line.startswith("}"):
                    depth -= 1
                lines.append("    " * (depth + 1) + line)
                if line.endswith("{"):
                    depth += 1
            out.append((depth, "\n".join(lines)))
        else:
            out.append(
                (depth, "    " * (depth + 1) + f"if ((status = FC_STEP({i}, {c})) != FC_OK) return status;")
            )
    return out


def run_parts(name: str, calls: list[str], params: list[tuple[str, str]]) -> list[dict]:
    """The run function's step calls as ``<name>_run_part_<k>`` functions of at most RUN_STEPS
    calls each (more where a loop or branch would otherwise be cut), in order; none when all
    fit in one. ``params``: (C name, declaration) of what a call may read besides globals (the
    run's tensors, ``mem``, ``st``, ...); a part takes those its calls name. Each part: func,
    params, its lines (run_lines), first and last index, and the call the run makes."""
    if len(calls) <= RUN_STEPS:
        return []
    lines = run_lines(calls)
    chunks, first = [], 0
    for i, (depth, _) in enumerate(lines):
        if depth == 0 and (i + 1 - first >= RUN_STEPS or i == len(lines) - 1):
            chunks.append((first, i + 1))
            first = i + 1
    if first < len(lines):
        chunks.append((first, len(lines)))
    if len(chunks) == 1:
        return []
    parts = []
    for k, (first, stop) in enumerate(chunks):
        chunk = calls[first:stop]
        words = set(re.findall(r"[A-Za-z_]\w*", "\n".join(chunk)))
        used = [(n, decl) for n, decl in params if n in words]
        func = f"{name}_run_part_{k}"
        parts.append(
            {
                "func": func,
                "params": [decl for _, decl in used] or ["void"],
                "lines": [line for _, line in lines[first:stop]],
                "first": first,
                "last": stop - 1,
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
