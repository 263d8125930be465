"""Render C sources from a Program: Python builds the contexts, Jinja2 templates print them.

Every name, type, size, offset and loop bound is decided here; the templates in
templates/c/ and templates/build/ only loop over these contexts (StrictUndefined).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import numpy as np

from graphdef import dtypes
from graphdef.ir import Attrs, Node, TensorType, ValueRef
from graphdef.ops import _lower as L
from graphdef.ops.fused import program_of
from graphdef.registry import CExpr, CKernel, get_op

from . import schedule
from .cnames import COMPUTE, PUBLIC, STORAGE, Names, c_comment, c_literal, c_string
from .lower import ALIGN, Loc, Program
from .target import Target

VERSION = "0.1.0"
ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "templates"
RUNTIME = ROOT / "runtime_c"
BLOB_THRESHOLD = 64 * 1024  # weights above this go into a binary blob pulled in by the assembler


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


@dataclass
class Sources:
    """Generated files (name -> text or bytes) and the metadata written as metadata.json."""

    files: dict[str, str | bytes] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    c_files: list[str] = field(default_factory=list)  # what the model's build compiles (not main.c)


class TensorCtx(TensorType):
    """A tensor type as templates see it: also its kernel suffix and C storage type."""

    @property
    def sfx(self) -> str:
        return L.suffix(self.dtype)

    @property
    def ctype(self) -> str:
        return STORAGE[self.dtype]

    @classmethod
    def of(cls, t: TensorType) -> TensorCtx:
        return cls(t.shape, t.dtype)


# ----------------------------------------------------------------------------- elementwise
def offset_expr(dims, in_strides, out_strides, var: str) -> str:
    """C expression of an input's element offset at (collapsed) output position ``var``."""
    total = math.prod(dims)
    terms = []
    for d, s_in, s_out in zip(dims, in_strides, out_strides):
        if s_in == 0 or d == 1:
            continue
        t = var if s_out == 1 else f"{var} / {s_out}"
        if s_out * d != total:
            t = f"({t}) % {d}"
        terms.append(t if s_in == 1 else f"({t}) * {s_in}")
    return " + ".join(terms) or "0"


def loop_nest(in_shapes, out_shape) -> tuple[int, int, list[str], list[bool]]:
    """(outer, inner, base offset per input at outer index ``o``, inner stride is 1 per input).

    Output axes are merged as far as every input allows; the loop over the last merged axis
    is contiguous in the output and in each input that is not broadcast along it, so the C
    compiler can vectorize it. Broadcast inputs get their offset once per outer step.
    """
    out_shape = list(out_shape) or [1]
    strides = [L.broadcast_strides(s, out_shape) if s else [0] * len(out_shape) for s in in_shapes]
    dims, merged = L.merge_dims(out_shape, L.strides(out_shape), *strides)
    dims = dims or [1]
    merged = [m or [0] for m in merged]
    inner = dims[-1]
    outer_dims = dims[:-1]
    out_outer = [s // inner for s in merged[0][:-1]]  # output strides in units of inner rows
    bases = [
        ("0" if math.prod(outer_dims) == 1 else f"o * {inner}")
        if m[:-1] == merged[0][:-1]
        else offset_expr(outer_dims, m[:-1], out_outer, "o")
        for m in merged[1:]
    ]
    unit = [m[-1] == 1 for m in merged[1:]]
    return math.prod(outer_dims), inner, bases, unit


def elementwise_context(node: Node, ins: list[TensorType], out: TensorType, x: list[str]) -> dict:
    """Loop bounds, and the locals of one iteration: loads, then one value per instruction."""
    outer, inner, bases, unit = loop_nest([t.shape for t in ins], out.shape)
    values, types = [], list(ins)
    for j, t in enumerate(ins):
        base = "" if bases[j] == "0" else f"b{j} + "
        load = f"{x[j]}[{base}i]" if unit[j] else f"{x[j]}[{base.rstrip(' +') or '0'}]"
        values.append(
            {
                "ctype": COMPUTE[t.dtype],
                "name": f"a{j}",
                "expr": f"fc_h2f({load})" if t.dtype == "float16" else load,
            }
        )
    program_locals(program_of(node), types, values)
    last = values[-1]["name"]
    # an input no instruction reads (assign's variable operand) is not loaded at all: an unused
    # local is an error under -Werror
    used = " ".join(v["expr"] for v in values[len(ins) :]) + " " + last
    read = [bool(re.search(rf"\b{v['name']}\b", used)) for v in values[: len(ins)]]
    values = [v for v, r in zip(values, read) if r] + values[len(ins) :]
    return {
        "unread": [x[j] for j, r in enumerate(read) if not r],
        "outer": outer,
        "inner": inner,
        "bases": [{"name": f"b{j}", "expr": b} for j, b in enumerate(bases) if b != "0" and read[j]],
        "locals": values,
        "may_fail": any("&err" in v["expr"] for v in values),
        "store": f"fc_f2h({last})" if out.dtype == "float16" else last,
    }


def program_locals(program, types: list[TensorType], values: list[dict]) -> None:
    """Append to ``values`` (the C locals of the program's inputs, typed ``types``) one local
    per instruction of an elementwise program."""
    types = list(types)
    for k, (op, operands, attrs) in enumerate(program):
        opdef, a = get_op(op), Attrs(attrs)
        args = [types[i] for i in operands]
        t = opdef.infer_types(args, a)[0]
        if isinstance(opdef.c, CExpr):
            pattern = opdef.c.pattern([s.dtype for s in args], t.dtype, a, c_literal)
            names = [values[i]["name"] for i in operands]
            expr = pattern.format(*names, t=L.suffix(args[-1].dtype), err="&err")
            if t.dtype == "float16":
                expr = f"fc_narrow_f16({expr})"
        else:  # an inline scalar: fill with shape ()
            expr = c_literal(a["value"], a["dtype"])
        values.append({"ctype": COMPUTE[t.dtype], "name": f"v{k}", "expr": expr})
        types.append(t)


def epilogue_context(node: Node, in_t: list[TensorType]) -> dict | None:
    """The per-element code of a product's epilogue (see graphdef/ops/linear.py): the product's
    value is ``cr[j]`` in a tile row, epilogue input q is read through pointer ``e<q>``."""
    if not node.attrs.get("epilogue"):
        return None
    from graphdef.ops.linear import plan_of

    program, slot, layouts = node.attrs["epilogue"]
    first = 3 if plan_of(node.attrs).bias else 2
    extras = []
    for q, (rs, cs, strides) in enumerate(layouts):
        load = f"e{q}[j]" if cs == 1 else f"e{q}[j * {cs}]" if cs else f"e{q}[0]"
        extras.append({"i": q, "rs": rs, "cs": cs, "strides": strides, "load": load})
    loads = [e["load"] for e in extras]
    loads.insert(slot, "cr[j]")
    types = list(in_t[first:])
    types.insert(slot, node.outputs[0])
    values = [{"ctype": "float", "name": f"a{j}", "expr": load} for j, load in enumerate(loads)]
    program_locals(program, types, values)
    return {
        "extras": extras,
        "locals": values,
        "may_fail": any("&err" in v["expr"] for v in values),
        "store": values[-1]["name"],
        "first": first,
    }


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


# ----------------------------------------------------------------------------- the model
def emit(program: Program, name: str, weights: str = "auto", target: Target | None = None) -> Sources:
    """All generated files of one model called ``name`` (already a valid C identifier)."""
    target = target or Target()
    g = program.graph
    env = environment()
    names = Names(reserved={"mem", "st", "status", "arena", "state", "pool", "i", name})
    upper = name.upper()

    # inputs and outputs
    io = []
    macros = Names()
    for kind, items in (("in", program.inputs), ("out", program.outputs)):
        for k, (label, _, t) in enumerate(items):
            cname = names(f"{kind}_{label}", "t")
            io.append(
                {
                    "kind": kind,
                    "index": k,
                    "label": label,
                    "cname": cname,
                    "literal": c_string(label),
                    "comment": c_comment(label),
                    "macro": macros(f"{upper}_{cname.upper()}"),
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
    ins = [t for t in io if t["kind"] == "in"]
    outs = [t for t in io if t["kind"] == "out"]

    # weights: every constant, plus the initial values of state variables
    arrays = [(c, g._constants[c]) for c in program.constants]
    arrays += [(f"init:{v}", g._variables[v]) for v in program.variables]
    total = sum(_align(a.nbytes) for _, a in arrays)
    blob_mode = weights == "blob" or (weights == "auto" and total > BLOB_THRESHOLD)
    # microcontrollers: weights need only 8-byte alignment (64 would pad flash between tensors)
    const_align = 8 if target.kind == "mcu" else ALIGN
    consts, const_expr, blob, offset = [], {}, bytearray(), 0
    for key, array in arrays:
        dt = dtypes.as_dtype(array.dtype)
        ctype = STORAGE[dt]
        if blob_mode:
            const_expr[key] = f"((const {ctype} *)({name}_weights + {offset}))"
            data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
            blob += data + bytes(_align(len(data), const_align) - len(data))
            offset += _align(len(data), const_align)
        else:
            cname = names(f"{name}_w_{key}", "w")
            const_expr[key] = cname
            consts.append(
                {
                    "cname": cname,
                    "ctype": ctype,
                    "count": max(array.size, 1),
                    "lines": _value_lines(array),
                    "comment": c_comment(f"{key}: {dt}{list(array.shape)}"),
                }
            )

    def ptr(ref: ValueRef) -> str:
        loc = program.loc[ref]
        ctype = STORAGE[g.type_of(ref).dtype]
        if loc.kind == "input":
            return ins[loc.index]["cname"]
        if loc.kind == "output":  # an in-place step may keep another dtype of the same size there
            o = outs[loc.index]
            return o["cname"] if o["dtype"] == g.type_of(ref).dtype else f"(({ctype} *){o['cname']})"
        if loc.kind == "const":
            return const_expr[program.constants[loc.index]]
        if loc.kind == "state":
            return f"(({ctype} *)(st + {loc.offset}))"
        return f"(({ctype} *)(mem + {loc.offset}))"

    # steps
    steps, calls, headers, uses_pool = [], [], {"kernels/scalar.h"}, False
    # a kernel's definitions outside its step function (plans, epilogue, thread tasks)
    preludes = set(env.list_templates(filter_func=lambda t: t.endswith(".prelude.c.j2")))
    for index, node in enumerate(program.steps):
        in_t = [g.type_of(r) for r in node.inputs]
        if all(t.size == 0 for t in node.outputs):
            continue  # nothing to compute
        opdef = get_op(node.op)
        func = f"{name}_step_{index}"
        prelude, parallel = "", False  # parallel: the step hands parts to the thread pool
        x = [f"x{j}" for j in range(len(in_t))]
        y = [f"y{j}" for j in range(len(node.outputs))]
        if isinstance(opdef.c, CExpr):
            body = env.get_template("c/ops/elementwise.c.j2").render(
                x=x,
                y=y,
                k=elementwise_context(node, in_t, node.outputs[0], x),
                outs=[TensorCtx.of(t) for t in node.outputs],
            )
        elif isinstance(opdef.c, CKernel):
            headers.update(opdef.c.headers)
            k = opdef.c.context(in_t, node.outputs, node.attrs, c_literal)
            k["epi"] = epi = epilogue_context(node, in_t)
            # how the product's C call names its epilogue: function, per-input pointers (the
            # local array ep), and the step's inputs those pointers start from
            k["epi_extras"] = epi["extras"] if epi else []
            extras = [x[epi["first"] + q["i"]] for q in k["epi_extras"]]
            k["epi_fn"] = f"{func}_epi" if epi else "NULL"
            k["epi_ptrs"] = "ep" if extras else "NULL"
            k["epi_inputs"] = ", ".join(extras) or "NULL"
            parallel = k.get("parts", 1) > 1
            if parallel:
                headers.add("pool.h")
            args = dict(
                x=x,
                y=y,
                k=k,
                op=node.op,
                func=func,
                ins=[TensorCtx.of(t) for t in in_t],
                outs=[TensorCtx.of(t) for t in node.outputs],
            )
            body = env.get_template(f"c/ops/{opdef.c.template}.c.j2").render(**args)
            if f"c/ops/{opdef.c.template}.prelude.c.j2" in preludes:
                prelude = env.get_template(f"c/ops/{opdef.c.template}.prelude.c.j2").render(**args)
        else:
            raise AssertionError(f"op {node.op} has no C lowering")
        params = [f"const {STORAGE[t.dtype]} *{v}" for t, v in zip(in_t, x)]
        params += [f"{STORAGE[t.dtype]} *{v}" for t, v in zip(node.outputs, y)]
        if opdef.scratch is not None:
            params.append("void *scratch")
        if parallel:
            params.append("void *pool")
        steps.append(
            {
                "index": index,
                "func": func,
                "op": node.op,
                "comment": c_comment(repr(node.name)[1:-1]),
                "types": ", ".join(str(t) for t in node.outputs),
                "params": params,
                "body": body,
                "prelude": prelude,
            }
        )
        args = [ptr(r) for r in node.inputs] + [ptr(node.ref(i)) for i in range(len(node.outputs))]
        if opdef.scratch is not None:
            off = program.scratch.get(node.name)
            args.append("NULL" if off is None else f"(void *)(mem + {off})")
        if parallel:
            args.append("pool")
            uses_pool = True
        calls.append(f"{func}({', '.join(args)})")

    copies = []
    for k, ref in program.output_copies:
        copies.append(
            {
                "dst": outs[k]["cname"],
                "src": ptr(ref),
                "nbytes": outs[k]["nbytes"],
                "comment": f"output {k} is another value's copy",
            }
        )
    var_index = {v: i for i, v in enumerate(program.variables)}
    for var, ref in program.state_updates:
        copies.append(
            {
                "dst": f"(st + {program.state_offsets[var_index[var]]})",
                "src": ptr(ref),
                "nbytes": g.type_of(ref).nbytes,
                "comment": "store the assigned value",
            }
        )
    state_init = [
        {
            "offset": program.state_offsets[i],
            "src": const_expr[f"init:{v}"],
            "nbytes": g.node(v).outputs[0].nbytes,
            "comment": c_comment(v),
        }
        for i, v in enumerate(program.variables)
    ]

    has_state = bool(program.variables)
    run_params = [f"const {t['ctype']} *{t['cname']}" for t in ins]
    run_params += [f"{t['ctype']} *{t['cname']}" for t in outs]
    run_params.append("void *arena")
    if has_state:
        run_params.append("void *state")
    if target.threads > 1:
        run_params.append("void *pool")
    uses_arena = any("mem +" in c for c in calls) or any("mem +" in c["src"] for c in copies)
    read = {program.loc[r] for n in program.steps for r in n.inputs} | {
        program.loc[r] for _, r in program.output_copies
    }
    unused = [t["cname"] for k, t in enumerate(ins) if Loc("input", k) not in read]
    null_checks = [f"!{t['cname']}" for t in io] + (["!arena"] if uses_arena else [])
    null_checks += ["!state"] if has_state else []
    m = {
        "name": name,
        "NAME": upper,
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
        "run_params": run_params,
        "headers": sorted(headers),
        "consts": consts,
        "blob": f"{name}_weights.bin" if blob_mode else None,
        "steps": steps,
        "calls": calls,
        "copies": copies,
        "state_init": state_init,
        "uses_arena": uses_arena,
        "null_checks": null_checks or ["0"],
        "unused": unused,
        "cflags": " ".join(target.cflags()),
        "threads": target.threads,
        "uses_pool": uses_pool,
        # the Makefile's compiler: the host's unless set, a cross target's own
        "cc_line": f"CC = {target.compiler}" if target.compiler else "CC ?= cc",
        "ldflags": " ".join(target.ldflags()),
        "arch": target.arch,
        # microcontrollers: steps stay separate functions (a call each), so that the stack
        # bound and the footprint split (kernels / glue) see them
        "step_storage": "static FC_NOINLINE" if target.kind == "mcu" else "static",
        "const_align": const_align,
        "program": target.kind != "mcu",
        "cmake_hint": (
            f"cross build: cmake -DCMAKE_C_COMPILER={target.compiler} -DCMAKE_SYSTEM_NAME="
            + ("Generic -DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY" if target.kind == "mcu" else "Linux")
            if target.compiler
            else ""
        ),
    }
    src = Sources()
    src.files[f"{name}.h"] = env.get_template("c/header.h.j2").render(m=m)
    src.files[f"{name}.c"] = env.get_template("c/model.c.j2").render(m=m)
    if blob_mode:
        src.files[f"{name}_weights.c"] = env.get_template("c/weights_blob.c.j2").render(m=m)
        src.files[f"{name}_weights.bin"] = bytes(blob)
    c_sources = [f"{name}.c"] + ([f"{name}_weights.c"] if blob_mode else [])
    c_sources += ["runtime/pool.c"] if target.threads > 1 else []
    src.c_files = c_sources
    if target.kind == "mcu":  # a static library, and a firmware that runs it on a QEMU board
        mcu = {
            "board": target.spec.board,
            "ar": f"{target.spec.prefix}ar",
            "ldflags": " ".join(FIRMWARE_LDFLAGS),
        }
        src.files["firmware.c"] = env.get_template("build/firmware.c.j2").render(m=m)
        src.files["firmware_data.h"] = firmware_data(env, ins, None)
        makefile = env.get_template("build/Makefile.mcu.j2")
        src.files["Makefile"] = makefile.render(m=m, mcu=mcu, sources=c_sources)
    else:
        src.files["main.c"] = env.get_template("build/main.c.j2").render(m=m)
        src.files["Makefile"] = env.get_template("build/Makefile.j2").render(m=m, sources=c_sources)
    src.files["CMakeLists.txt"] = env.get_template("build/CMakeLists.txt.j2").render(m=m, sources=c_sources)
    src.metadata = _metadata(program, name, ins, outs, blob_mode)
    src.metadata["arch"] = target.arch
    src.metadata["threads"] = target.threads
    src.files["metadata.json"] = json.dumps(src.metadata, indent=1) + "\n"
    return src


# How the firmware is linked (the Makefile's `firmware.elf` rule and codegen.mcu run the same):
# flowc's start-up and linker script, newlib-nano for memcpy and libm, unused sections dropped.
FIRMWARE_LDFLAGS = ("-T", "runtime/mcu/mps2.ld", "-nostartfiles", "--specs=nano.specs", "-Wl,--gc-sections")


def firmware_data(env: jinja2.Environment, ins: list[dict], feeds: dict | None) -> str:
    """firmware_data.h: the inputs the firmware runs on, as const arrays (in flash), or zeroed
    arrays (in RAM) when ``feeds`` is None. ``ins``: the input contexts (cname, ctype, size)."""
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
    return env.get_template("build/firmware_data.h.j2").render(arrays=arrays, version=VERSION)


def _file_name(label: str, cname: str) -> str:
    ok = label and all(ch.isalnum() or ch in "_-." for ch in label) and not label.startswith(".")
    return label if ok else cname


def _metadata(program: Program, name: str, ins, outs, blob_mode: bool) -> dict:
    g = program.graph

    def io(items):
        return [
            {
                "name": t["label"],
                "c_name": t["cname"],
                "dtype": t["dtype"],
                "shape": t["shape"],
                "file": t["file"] + ".npy",
            }
            for t in items
        ]

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
        "state": [
            {
                "name": v,
                "dtype": g.node(v).outputs[0].dtype,
                "shape": list(g.node(v).outputs[0].shape),
                "offset": off,
            }
            for v, off in zip(program.variables, program.state_offsets)
        ],
        "schedule": [
            {"step": i, "node": n.name, "op": n.op, "flops": schedule.cost(g, n).flops}
            for i, n in enumerate(program.steps)
        ],
    }
