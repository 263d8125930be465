"""The steps of a C model: each step of the Program lowered (steps.py, the op table) and
rendered into its step function through its op's templates (templates/c/ops/), a step split in
parts run on the thread pool (``split_step``), steps alike sharing one function, and the run
function's calls of them. The pointers each call passes come from the frame (render/frame.py
``step_calls``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import jinja2

from ...render.frame import Frame
from . import control_steps
from .steps import Lowered, lower_step


@dataclass
class Steps:
    steps: list[dict]  # step functions: name, parameters, body, prelude
    calls: list[str]  # their calls in the run function, in order
    headers: set[str]
    uses_pool: bool
    requests: int = 0  # MPI requests of the communication steps (sends and receives)
    scratch_in_arena: bool = False  # a step's call passes it scratch memory in the arena
    names: list[str] = field(default_factory=list)  # each call's step index and op (the profile's names)


def split_step(
    env: jinja2.Environment, lowered: Lowered, params: list[str], unused, body: str
) -> tuple[str, str]:
    """(prelude, body) of a step split in ``step.parts`` (templates/c/ops/parts*.c.j2): the
    op's ``body``, rendered for units [lo, hi), becomes a function of its own; each part calls
    it on its bounds (whole grains of the step's Split) and its slice of the scratch, and the
    step function runs the parts on the pool and returns the last failure, as one thread would."""
    step = lowered.step
    fields = params[: len(step.x) + len(step.y)]
    init = step.x + step.y
    call = [f"A->{v}" for v in init]
    if lowered.scratch:
        fields.append("unsigned char *scratch")
        init.append("(unsigned char *)scratch")
        per_part = lowered.part_scratch
        call.append(f"A->scratch ? A->scratch + (long)part * {per_part} : NULL" if per_part else "A->scratch")
    split = {
        "parts": step.parts,
        "bounds": lowered.bounds,
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


def steps(env: jinja2.Environment, f: Frame, threads: int, isa: str, int8: str | None = None) -> Steps:
    """The frame's steps for a build with the GEMM kernel ``isa`` and the integer features
    ``int8`` (what sizes an integer convolution's scratch, each part's as the arena's)."""
    out = Steps([], [], {"kernels/scalar.h"}, False)
    request: dict[str, int] = {}  # a send's or receive's request; a wait uses its receive's
    same: dict[tuple, str] = {}  # a step function's C (its own name left out) -> its name
    for index, (node, frame_call) in enumerate(zip(f.program.steps, f.calls)):
        if frame_call is None:
            continue  # nothing to compute (or to send: an empty tensor's receive is left out too)
        if node.op in control_steps.OPS:  # a loop's or branch's C in the run function itself
            out.calls.append(control_steps.statement(node, frame_call["args"], frame_call["in_types"]))
            out.names.append(f"{index} {node.op}")
            continue
        step_isa = int8 if node.op == "qconv" and int8 is not None else isa
        lowered = lower_step(node, frame_call["in_types"], f"{f.name}_step_{index}", step_isa, threads)
        step, call, parts, takes_scratch = lowered.step, lowered.call, lowered.step.parts, lowered.scratch
        parallel = call.parallel or parts > 1
        out.headers.update(call.headers)
        args = {
            "x": step.x,
            "y": step.y,
            "k": call.k,
            "func": step.func,
            "ins": step.ins,
            "outs": step.outs,
            "apart": "_apart" if lowered.apart else "",
        }
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
            prelude_parts, body = split_step(env, lowered, params, unused, body)
            prelude += prelude_parts
            unused = []
        params += ["void *pool"] if parallel else []
        params += ["fc_mpi *mpi", "MPI_Request *req"] if call.comm else []
        # a step whose C is another's but for its name calls that one (the blocks of a network
        # repeat: ResNet-50's 56 step functions are 31): less C to compile, less code to store
        own = re.compile(rf"\b{step.func}(?![0-9A-Za-z])")
        key = (tuple(params), tuple(unused), own.sub("@", prelude), own.sub("@", body))
        func = same.setdefault(key, step.func)
        if func == step.func:
            out.steps.append(
                {
                    "index": index,
                    "func": step.func,
                    "op": node.op,
                    "comment": frame_call["comment"],
                    "types": frame_call["types"],
                    "params": params,
                    "unused": unused,
                    "body": body,
                    "prelude": prelude,
                }
            )
        call_args = frame_call["args"] + ([frame_call["scratch"] or "NULL"] if takes_scratch else [])
        out.scratch_in_arena |= takes_scratch and frame_call["scratch"] is not None
        if parallel:
            call_args.append("pool")
            out.uses_pool = True
        if call.comm:
            if node.op in ("recv_wait", "allreduce_wait"):
                slot = request[node.inputs[0].node]
            else:
                slot = request[node.name] = len(request)
            call_args += ["fc_m", f"&req[{slot}]"]
        out.calls.append(f"{func}({', '.join(call_args)})")
        out.names.append(f"{index} {node.op}")
    if threads > 1:
        out.headers.add("threadpool.h")
    out.requests = len(request)
    return out
