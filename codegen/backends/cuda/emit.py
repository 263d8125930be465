"""Render CUDA sources from a Program: the same steps, buffers and offsets as the C backend,
run on one GPU (templates/cuda/).

Every step becomes one kernel launch on the run's stream, in the schedule's order:
- a kernel of the CUDA backend's own (kernels.py, runtime_c/cuda/): products and convolutions;
- else the step's C body (the C backend's lowering, compiled for the device): one CUDA thread
  per unit of its split (an element of an elementwise program, a row of a softmax, a plane of
  a pooling), so the C backend's split, which threads already share, is the parallel grid;
- else (a step with no split, or one whose units would share its scratch) the C body on one
  thread: correct, and slow; ``flowc inspect`` and metadata.json list these steps.

The arena, the state and the weights live in device memory that ``<name>_init`` allocates
once; a run is captured into a CUDA Graph and replayed (emit decides names and launches, the
templates only print them).
"""

from __future__ import annotations

import json
import re

from graphdef.errors import UnsupportedError
from graphdef.registry import ELEMENTWISE, get_op

from ... import control
from ...render import sources as contract
from ...render.frame import frame, main_descriptor
from ...render.spelling import TensorCtx, c_string
from ...storage import ALIGN
from ..c import control_steps
from ..c import emit as cemit
from ..c.op_table import kernel_of, split_of
from ..c.steps import lower_step
from . import kernels


def steps(env, f, precision: str = "fp32") -> dict:
    """The device functions, kernels and launches of every step (the frame ``f``'s calls)."""
    program, name, ptr = f.program, f.name, f.ptr
    g = program.graph
    out = {"steps": [], "launches": [], "headers": {"kernels/scalar.h"}, "cuda_headers": set(), "serial": []}
    out["stages"], request = [], {}  # host staging buffers and MPI requests of the transfers
    nesting = control.depth(program.steps)
    for index, (node, frame_call) in enumerate(zip(program.steps, f.calls)):
        if frame_call is None:
            continue
        in_t, args, comment = frame_call["in_types"], list(frame_call["args"]), frame_call["comment"]
        xs, ys = args[: len(in_t)], args[len(in_t) :]
        if node.op in control_steps.OPS:  # a loop or branch: host code between the launches
            level = nesting[index] - (node.op == "loop_check")  # its loop's (the check sits inside)
            if node.op.startswith("loop"):
                out["loops"] = max(out.get("loops", 0), level + 1)
            text = control_steps.host_statement(node, args, in_t, name, level)
            out["launches"].append({"index": index, "op": node.op, "comment": comment, "native": text})
            continue
        if node.op in COMM:
            out["launches"].append(
                {"index": index, "op": node.op, "comment": comment,
                 "native": _transfer(env, node, g, xs, ys, out["stages"], request, name)}
            )  # fmt: skip
            continue
        launch = kernels.launch_of(node, [TensorCtx.of(t) for t in in_t], precision)
        elementwise = get_op(node.op).kind == ELEMENTWISE
        takes_scratch = not elementwise and kernel_of(node.op).scratch is not None
        split = split_of(node, in_t)
        units = split.units if split is not None and split.units > 1 and not takes_scratch else 0
        if launch is None:  # the C body, unless it is one of the C backend's strided copies
            lowered = lower_step(node, in_t, f"{name}_step_{index}", parts=2 if units else 1)
            step, call = lowered.step, lowered.call
            launch = kernels.copies_of(call, xs, ys)
        if launch is not None:
            out["cuda_headers"].update(launch.headers)
            text = env.get_template(f"cuda/ops/{launch.template}.cu.j2").render(k=launch.k, x=xs, y=ys)
            out["launches"].append({"index": index, "op": node.op, "comment": comment, "native": text})
            continue
        if call.comm or call.parallel or call.prelude:
            raise UnsupportedError(f"op {node.op} (node {node.name!r}) has no CUDA kernel")
        out["headers"].update(call.headers)
        body = env.get_template(f"c/ops/{call.template}.c.j2").render(
            x=step.x, y=step.y, k=call.k, func=step.func, ins=step.ins, outs=step.outs
        )
        params = [f"const {t.ctype} *{v}" for t, v in zip(step.ins, step.x)]
        params += [f"{t.ctype} *{v}" for t, v in zip(step.outs, step.y)]
        if takes_scratch:
            params.append("void *scratch")
            args.append(ptr.scratch(node, null="(void *)0"))
        names = [p.rsplit("*", 1)[1] for p in params]
        if not units:
            out["serial"].append({"step": index, "op": node.op, "node": node.name})
        out["steps"].append(
            {
                "index": index,
                "func": step.func,
                "op": node.op,
                "comment": comment,
                "types": ", ".join(str(t) for t in node.outputs),
                "params": params,
                "args": names,
                "unused": call.k.get("unused", []),
                "body": body,
                "units": units,
            }
        )
        out["launches"].append(
            {"index": index, "op": node.op, "comment": comment, "native": None, "func": step.func,
             "args": args, "units": units}
        )  # fmt: skip
    return out


COMM = ("send", "recv", "recv_wait")


def _transfer(env, node, g, xs, ys, stages: list, request: dict, name: str) -> str:
    """The host lines of a transfer between ranks (templates/cuda/ops/<op>.cu.j2): through
    a pinned host buffer of its own (``stages``), with an MPI request (``request``, by the
    send's or receive's node; a wait uses its receive's)."""
    a = node.attrs
    k = {"op": node.op, "peer": a["peer"], "tag": a["tag"], "tensor": c_string(a["tensor"])}
    if node.op == "recv_wait":
        k.update(request[node.inputs[0].node], y=ys[0])
    else:
        t = g.type_of(node.inputs[0]) if node.op == "send" else node.outputs[0]
        k.update(stage=len(stages), req=len(request), nbytes=t.nbytes, x=xs[0] if xs else None)
        request[node.name] = {"stage": k["stage"], "req": k["req"], "nbytes": t.nbytes}
        stages.append(t.nbytes)
    return env.get_template(f"cuda/ops/{node.op}.cu.j2").render(k=k, m_name=name, m_NAME=name.upper())


def emit_rank(program, options, name: str, rank: int) -> contract.Sources:
    """One rank's part of an SPMD program over MPI ranks (codegen/backends/c/spmd.py renders
    the whole): the model on this rank's GPU (rank modulo the visible devices) behind the C
    backend's rank interface, ``<name>_run(inputs..., outputs..., arena, mpi)`` on host memory;
    its context is made on the first run and kept in the caller's arena (HOST_ARENA bytes)."""
    return emit(program, options.with_(name=name), rank=rank)


RESERVED = frozenset({"mem", "st", "status", "ctx", "s", "dev", "dev_weights", "i"})
"""The C names the model's run function and launches use: never given to a tensor."""

HOST_ARENA = 64  # bytes of a rank part's host arena: its context pointer


def emit(program, options, rank: int | None = None) -> contract.Sources:
    """All generated files of the model ``options.name`` for CUDA (``options.sm`` and
    ``options.precision``); ``rank``: the part of that rank of an SPMD program (emit_rank)."""
    name, sm, precision = options.name, options.sm, options.precision
    env = contract.environment()
    f = frame(program, name, RESERVED, weights_name="dev", weights_mode="blob")
    ins, outs, w = f.ins, f.outs, f.weights
    st = steps(env, f, precision)
    bases = f.ptr.bases
    status = bool(st["steps"]) or any(re.search(r"\bstatus\b", x["native"] or "") for x in st["launches"])
    m = {
        "name": name,
        # the run's base pointers its launches read (arena, state, weights), and whether it
        # checks a status (its step launches do, and a transfer's host lines)
        "uses": {"mem": "mem" in bases, "st": "st" in bases, "dev_weights": "weights" in bases}
        | {"status": status},
        "NAME": name.upper(),
        "version": contract.VERSION,
        "source_comment": f.source_comment,
        "arena_bytes": program.arena_bytes,
        "lower_bound": program.lower_bound,
        "align": ALIGN,
        "weight_bytes": len(w.blob or b""),
        "state_bytes": program.state_bytes,
        "has_state": bool(program.variables),
        "inputs": ins,
        "outputs": outs,
        "io": ins + outs,
        "headers": sorted(st["headers"]),
        "cuda_headers": sorted(st["cuda_headers"]),
        "blob": f"{name}_weights.bin",
        "steps": st["steps"],
        "launches": st["launches"],
        # loops and branches: host code reading device values back (never a CUDA Graph)
        "loops": st.get("loops", 0),
        "control": any(x["op"] in control_steps.OPS for x in st["launches"]),
        "trips": any(n.op == "loop_check" and n.attrs["trip"] for n in program.steps),
        # a rank's part of an SPMD program: its rank, host staging buffers and MPI requests
        "spmd": None
        if rank is None
        else {"rank": rank, "stages": st["stages"], "requests": max(len(st["stages"]), 1)},
        "copies": f.copies,
        "state_init": f.state_init,
        "sm": ", ".join(f"sm_{v}" for v in sm),
        "const_align": ALIGN,
        # main.c (templates/cuda/main.c.j2) drives a CUDA model through its context, on the
        # buffers of runtime_c/main_driver.c (fc_main_args *a); it keeps its state on the device
        "threads": 1,
        "trainer": False,
        "state_vars": f.state_vars,
        "main": main_descriptor(name, ins, outs, f.state_vars, arena=False),
        "main_call": f"{name}_run_host(({name}_ctx *)a->ctx, "
        + ", ".join(
            [f"(const {t['ctype']} *)a->in[{t['index']}]" for t in ins]
            + [f"({t['ctype']} *)a->out[{t['index']}]" for t in outs]
        )
        + ")",  # fmt: skip
        "bench_call": f"{name}_run_staged(({name}_ctx *)a->ctx)",
    }
    src = contract.Sources(context=m)
    src.files[f"{name}.h"] = env.get_template("cuda/header.h.j2").render(m=m)
    src.files[f"{name}.cu"] = env.get_template("cuda/model.cu.j2").render(m=m)
    src.files[f"{name}_weights.c"] = env.get_template("c/weights_blob.c.j2").render(m=m)
    src.files[f"{name}_weights.bin"] = w.blob or b""
    src.c_files = [f"{name}_weights.c"]
    src.cu_files = [f"{name}.cu"]
    if rank is not None:  # the SPMD program's drivers and build files come from spmd.py
        src.api = f.entry_points(threads=1, mpi=True, stateful=False)
        src.context["host_arena_bytes"] = HOST_ARENA
        return src
    # the CUDA model keeps its state on the device: --checkpoint's values are written there
    src.files["main.c"] = env.get_template("cuda/main.c.j2").render(m=m)
    for file, template in (("Makefile", "cuda/Makefile.j2"), ("CMakeLists.txt", "cuda/CMakeLists.txt.j2")):
        src.files[file] = env.get_template(template).render(
            m=m, sm=list(sm), driver=cemit.DRIVER_C, cu_files=src.cu_files, c_files=src.c_files
        )
    src.metadata = f.metadata(target="cuda", sm=list(sm), precision=precision, serial_steps=st["serial"])
    src.files["metadata.json"] = json.dumps(src.metadata, indent=1) + "\n"
    return src
