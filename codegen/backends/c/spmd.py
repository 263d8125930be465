"""One SPMD program over MPI ranks from a partition's per-rank Programs.

Each rank's Program is rendered like any model (emit.py), named ``<name>_r<rank>``, with the
run taking the rank's MPI context; templates/mpi/ then wraps them:

- ``<name>.h`` / ``<name>.c``: the model over all ranks: ``<name>_run`` takes every input and
  output and calls the calling rank's part, which reads the inputs and writes the outputs
  that rank owns (the others may be NULL); ``<name>_mpi_start`` makes a rank's context from
  a communicator (refusing one of another size), ``<name>_arena_bytes(rank)``;
- ``main.c``: the program ``mpiexec -n R`` runs: the model's tensors, with the rank that owns
  each, and its entry points described for mpi/fc_spmd_main.c, with which each rank reads its
  inputs, runs its part (``--microbatches K`` times on slices of the batch axis, so the stages
  overlap), writes its outputs, and ``--bench`` reports the step time (the slowest rank) and
  each rank's compute and wait time;
- ``Makefile`` / ``CMakeLists.txt``: the build with mpicc, without flowc;
- mpi/fc_mpi.c (the communication layer) and mpi/fc_spmd_main.c are copied beside them by the
  build.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from graphdef.errors import FlowcError

from ... import partition as partition_mod
from ...render.api import entry_points
from ...render.frame import MAIN_ARGS, io_metadata, io_tensors, main_descriptor
from ...render.sources import VERSION, Sources, environment
from ...render.spelling import Names, c_comment
from ...storage import ALIGN
from .emit import SPMD_DRIVER_C, emit

MPI_C = "mpi/fc_mpi.c"


def rank_name(name: str, rank: int) -> str:
    return f"{name}_r{rank}"


def render_ranks(
    programs,
    part: partition_mod.Partition,
    output_names: list[str],
    options,
    isa: str,
    int8: str | None = None,
    emit_rank=None,
) -> Sources:
    """The SPMD program's files (see the module docstring). ``emit_rank(program, name, rank)``
    renders one rank's part (default: C, emit.py); its Sources' ``context["host_arena_bytes"]`` (if
    any) is the host arena that part takes."""
    name, target = options.name, options.target
    for r, p in enumerate(programs):
        if p.variables:
            raise FlowcError(
                f"rank {r} holds variables ({', '.join(p.variables[:3])}): state over several ranks is not "
                "supported yet; compile stateful graphs without --ranks"
            )
    env = environment()
    src = Sources()
    parts = []
    for r, p in enumerate(programs):
        if emit_rank is None:
            rsrc = emit(p, rank_name(name, r), options.weights, target, isa, rank=r, int8=int8)
        else:
            rsrc = emit_rank(p, rank_name(name, r), r)
        src.files.update(rsrc.files)
        src.c_files += rsrc.c_files
        src.cu_files += rsrc.cu_files
        arena = rsrc.context.get("host_arena_bytes", p.arena_bytes)
        parts.append(SimpleNamespace(program=p, sources=rsrc, api=rsrc.api, arena_bytes=arena))

    whole = part.graph
    io = SimpleNamespace(
        inputs=[(n, None, whole.node(n).outputs[0]) for n in whole.inputs],
        outputs=[
            (label, None, whole.type_of(ref)) for label, ref in zip(output_names, whole.declared_outputs)
        ],
    )
    names = Names(reserved={"mpi", "arena", "pool", "status", "rank", "comm", name})
    ins, outs = io_tensors(io, name, names)
    for t in ins:
        t["owner"] = part.inputs[t["label"]]
    for k, t in enumerate(outs):
        t["owner"] = part.outputs[k]
    api = entry_points(
        name,
        [(t["cname"], t["ctype"]) for t in ins],
        [(t["cname"], t["ctype"]) for t in outs],
        stateful=False,
        threads=target.threads,
        spmd=True,
    )
    ranks = []
    by_label = {t["label"]: t["cname"] for t in ins}
    for r, pr in enumerate(parts):
        local_in = [label for label, _, _ in pr.program.inputs]
        local_out = part.output_indices(r)
        call = pr.api.run.call(
            {
                "input": lambda p, local_in=local_in: by_label[local_in[p.index]],
                "output": lambda p, local_out=local_out: outs[local_out[p.index]]["cname"],
                "arena": "arena",
                "pool": "pool",
                "mpi": "mpi",
            }
        )
        used = {by_label[label] for label in local_in} | {outs[k]["cname"] for k in local_out}
        ranks.append(
            {
                "rank": r,
                "name": pr.api.name,
                "call": call,
                "arena_bytes": pr.arena_bytes,
                "unused": [t["cname"] for t in ins + outs if t["cname"] not in used],
            }
        )
    m = {
        "name": name,
        "NAME": name.upper(),
        "version": VERSION,
        "source_comment": c_comment(repr(whole.name)),
        "ranks": ranks,
        "nranks": len(ranks),
        "inputs": ins,
        "outputs": outs,
        "arena_bytes": max(r["arena_bytes"] for r in ranks),
        "align": ALIGN,
        "threads": target.threads,
        "decl": {
            "run": api.run.declaration(),
            "contexts": [{"text": f.declaration(), "doc": c_comment(f.doc, limit=200)} for f in api.mpi],
            "arena_bytes": api.arena_bytes.declaration(),
            "pool": [f.declaration() for f in api.pool],
            "status": api.status_string.declaration(),
        },
        # main.c's call: this microbatch's slice of every tensor the rank owns (NULL otherwise)
        "main_call": api.run.call(
            {"input": lambda p: f"a->in[{p.index}]", "output": lambda p: f"a->out[{p.index}]", **MAIN_ARGS}
        ),
        "main": main_descriptor(name, ins, outs, pool=target.threads > 1),
        "cflags": " ".join(target.cflags()),
        "optflags": " ".join(target.opt_flags()),
        "isaflags": " ".join(target.isa_flags()),
        "ldflags": " ".join(target.ldflags()),
        "arch": target.arch,
        "partition": {
            "algorithm": part.algorithm,
            "compress": part.compress or "none",
            "edges": len(part.edges),
            "bytes": part.bytes_sent(),
        },
    }
    src.files[f"{name}.h"] = env.get_template("mpi/header.h.j2").render(m=m)
    src.files[f"{name}.c"] = env.get_template("mpi/model.c.j2").render(m=m)
    src.c_files = list(dict.fromkeys([f"{name}.c", *src.c_files, MPI_C]))  # kernel files once
    if target.threads > 1:
        src.c_files.append("runtime/threadpool.c")
    src.files["main.c"] = env.get_template("mpi/main.c.j2").render(m=m)
    for file, template in (("Makefile", "mpi/Makefile.j2"), ("CMakeLists.txt", "mpi/CMakeLists.txt.j2")):
        src.files[file] = env.get_template(template).render(m=m, sources=src.c_files, driver=SPMD_DRIVER_C)
    src.api = api
    src.context = m
    src.metadata = _metadata(name, whole, part, parts, ins, outs, api, target)
    src.files["metadata.json"] = json.dumps(src.metadata, indent=1) + "\n"
    return src


def _metadata(name, whole, part, parts, ins, outs, api, target) -> dict:
    io = io_metadata
    arenas = [p.program.arena_bytes for p in parts]
    return {
        "flowc": VERSION,
        "name": name,
        "graph": whole.name,
        "ranks": len(parts),
        "inputs": io(ins),
        "outputs": io(outs),
        "arena_bytes": max(arenas),
        "arena_lower_bound": max(p.program.lower_bound for p in parts),
        "weight_bytes": sum(p.program.weight_bytes for p in parts),
        "state_bytes": 0,
        "state": [],
        "arch": target.arch,
        "threads": target.threads,
        "per_rank": [
            {
                "rank": r,
                "arena_bytes": p.program.arena_bytes,
                "weight_bytes": p.program.weight_bytes,
                "steps": len(p.program.steps),
                "sends": sum(1 for n in p.program.steps if n.op == "send"),
                "receives": sum(1 for n in p.program.steps if n.op == "recv"),
            }
            for r, p in enumerate(parts)
        ],
        "partition": {
            "placement": part.algorithm,
            "idle_ranks": part.idle,
            "idle_note": part.idle_note(),
            "compress": part.compress,
            "bytes_sent": part.bytes_sent(),
            "bytes_saved": part.bytes_saved(),
            "edges": [
                {
                    "tensor": str(e.value),
                    "from": e.src,
                    "to": e.dst,
                    "tag": e.tag,
                    "dtype": e.type.dtype,
                    "wire_dtype": e.wire.dtype,
                    "bytes": e.wire.nbytes,
                }
                for e in part.edges
            ],  # fmt: skip
        },
        "api": api.to_json(),
    }
