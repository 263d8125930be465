"""The training binary (``flowc compile --train``): one program that trains a graph's train op
on a dataset and runs its other outputs from the trained variables.

Two models share the folder: ``<name>`` (the graph's outputs other than the train op, the
inference model: ``<name> --in ... --out-dir ... --checkpoint ck.npz``, templates/build/main.c.j2)
and ``<name>_train`` (one training step: the train op, reading only the inputs it needs).
The training driver (``<name> train --data ...``) is C of its own, runtime_c/fc_train.c: the
dataset memory-mapped (runtime_c/npz.c), a seeded shuffle each epoch (``order`` below is its
Python twin), checkpoints (runtime_c/checkpoint.c), and, built with MPI (``-DFC_MPI``), data
parallelism: every rank the same shuffle and its slice of each global batch, the gradients
averaged by the step's allreduce buckets (codegen/data_parallel.py). The folder's train.c
(templates/train/train.c.j2) only describes the step to it: a ``fc_train_model`` of its inputs,
state variables and entry points.
"""

from __future__ import annotations

import json

import numpy as np

from graphdef import checkpoint
from graphdef.errors import FlowcError
from graphdef.ir import Graph

from ...render.sources import VERSION, Sources, environment
from ...render.spelling import c_string
from ...storage import ALIGN
from .emit import DRIVER_C

MPI_C = "mpi/fc_mpi.c"
PIPELINE_C = "mpi/fc_pipeline.c"  # the driver's pipeline-parallel steps (linked into every MPI build)
TRAINER_C = "runtime/fc_train.c"
MPI_FLAGS = ("-Impi", "-DFC_MPI")
_MASK = (1 << 64) - 1


def build_flags(mpi: bool) -> tuple[str, ...]:
    """What the build of a training binary adds to the compiler's flags: for a data-parallel one
    the MPI layer's headers and FC_MPI, which turns on runtime_c/fc_train.c's MPI parts."""
    return MPI_FLAGS if mpi else ()


def order(n: int, seed: int, epoch: int) -> list[int]:
    """The order in which the training binary visits ``n`` samples in ``epoch`` (from 0) with
    ``--seed seed``: Fisher-Yates driven by splitmix64, as runtime_c/fc_train.c's
    ``fc_train_order``."""
    s = (seed ^ (epoch * 0xD1B54A32D192ED03)) & _MASK
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        s = (s + 0x9E3779B97F4A7C15) & _MASK
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        j = (z ^ (z >> 31)) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def label_depths(graph: Graph) -> dict[str, int]:
    """The inputs read as class labels, each with its number of classes: those a ``check_index``
    reads (directly or through a cast; gd.train's softmax_cross_entropy puts one on its labels).
    The driver checks their values in the whole dataset before the first step, so a bad label is
    reported with its sample, not as a failed step."""
    sources = {n.name: n.inputs[0] for n in graph.nodes if n.op == "cast"}
    depth: dict[str, int] = {}
    for n in graph.nodes:
        if n.op == "check_index":
            src = sources.get(n.inputs[0].node, n.inputs[0]).node
            depth[src] = min(depth.get(src, n.attrs["depth"]), n.attrs["depth"])
    return depth


def check_step(program, name: str) -> None:
    """The step reads a batch from the dataset: every input has a leading batch axis of one
    common size, and its one output (the train op's value) is a float32 scalar."""
    if not program.inputs:
        raise FlowcError(
            f"--train: the training step of '{name}' reads no inputs: there is no dataset to train on"
        )
    batches = {t.shape[0] if t.shape else None for _, _, t in program.inputs}
    if None in batches or len(batches) != 1:
        shapes = ", ".join(f"{label} {list(t.shape)}" for label, _, t in program.inputs)
        raise FlowcError(
            "--train: every input of the training step takes a batch on its first axis, of one size; "
            f"got {shapes}"
        )
    (_, _, loss), *_ = program.outputs
    if loss.shape != () or loss.dtype != "float32":
        raise FlowcError(f"--train: the train op's value (the loss) must be a float32 scalar, got {loss}")


def render(
    step_src: Sources,
    step_program,
    infer_src: Sources | None,
    name: str,
    target,
    mpi: bool,
    device: dict | None = None,
) -> Sources:
    """The folder's files: both models', main.c, train.c (the step's description for
    runtime_c/fc_train.c), Makefile and metadata.json. ``device``: models that keep their
    memory in a context of their own (the CUDA backend's): ``call``, the step's run on the
    driver's ``batch``, ``loss`` and ``ctx``; ``train`` and ``main``, the templates of train.c
    and of the inference model's main.c that open it (the backend writes the build files)."""
    env = environment()
    check_step(step_program, name)
    out = Sources(api=infer_src.api if infer_src else step_src.api)
    for src in (step_src, infer_src):
        if src is None:
            continue
        for fname, content in src.files.items():
            if fname.startswith(src.context["name"]):
                out.files[fname] = content
    c_files = list(dict.fromkeys([*(infer_src.c_files if infer_src else []), *step_src.c_files]))
    c_files += ["train.c", TRAINER_C] + ([MPI_C, PIPELINE_C] if mpi else [])
    state = step_src.metadata["state"]
    specs = {v["name"]: (tuple(v["shape"]), v["dtype"]) for v in state}
    step = step_src.context
    g_step = next((v["offset"] for v in state if v["name"] == "global_step" and v["dtype"] == "int64"), -1)
    depths = label_depths(step_program.graph)
    pool = {"bytes": "NULL", "start": "NULL", "stop": "NULL"}
    if target.threads > 1:
        pool = {k: f"{step['name']}_pool_{k}" for k in pool}
    t = {
        "name": name,
        "step": step["name"],
        "STEP": step["NAME"],
        "version": VERSION,
        "threads": target.threads,
        "pool": pool,
        "align": ALIGN,
        "batch": step_program.inputs[0][2].shape[0],
        "inputs": [
            {
                "name": c_string(label),
                "dtype": t.dtype,
                "rank": t.rank,
                "shape": list(t.shape),
                "row_bytes": t.nbytes // t.shape[0],
                "depth": depths.get(ref.node, 0),
            }
            for label, ref, t in step_program.inputs
        ],  # fmt: skip
        "input_names": c_string(", ".join(label for label, _, _ in step_program.inputs)),
        "vars": step["state_vars"],
        "hash": checkpoint.spec_hash(specs),
        "global_step": g_step,
        # a context's step: the driver allocates no arena, and reads the initial state from it
        "arena_bytes": "0" if device else f"{step['NAME']}_ARENA_BYTES",
        "state_init": "NULL" if device else f"{step['name']}_state_init",
        "call": device["call"]
        if device
        else step_src.api.run.call(
            {
                "input": lambda p: f"(const void *)batch[{p.index}]",
                "output": lambda p: "loss",
                "arena": "arena",
                "state": "state",
                "pool": "pool",
                "mpi": "mpi",
            }
        ),
    }
    out.files["train.c"] = env.get_template(device["train"] if device else "train/train.c.j2").render(t=t)
    if infer_src is not None:
        m = {**infer_src.context, "trainer": True, "mpi": mpi}
        out.files["main.c"] = env.get_template(device["main"] if device else "build/main.c.j2").render(m=m)
    else:
        m = {**step, "name": name, "trainer": True, "mpi": mpi}
        out.files["main.c"] = env.get_template("train/main.c.j2").render(t=t)
    if not device:
        out.files["Makefile"] = env.get_template("build/Makefile.j2").render(
            m={**m, "mpi": mpi, "mpi_flags": " ".join(MPI_FLAGS)}, sources=c_files, driver=DRIVER_C
        )
    out.c_files = c_files
    base = infer_src.metadata if infer_src is not None else step_src.metadata
    out.metadata = {
        **base,
        "name": name,
        "trainer": {
            "mpi": mpi,
            "step_model": step["name"],
            "batch_per_rank": t["batch"],
            "inputs": [label for label, _, _ in step_program.inputs],
            "state": state,
            "state_bytes": step_src.metadata["state_bytes"],
            "arena_bytes": step_src.metadata["arena_bytes"],
            "arena_lower_bound": step_src.metadata["arena_lower_bound"],
            "hash": t["hash"],
        },
    }
    if infer_src is None:
        out.metadata.update(inputs=[], outputs=[])
    out.files["metadata.json"] = json.dumps(out.metadata, indent=1) + "\n"
    return out


_PORTS = {"batch": "FC_PIPE_BATCH", "var": "FC_PIPE_VAR", "value": "FC_PIPE_VALUE", "grad": "FC_PIPE_GRAD",
          "loss": "FC_PIPE_LOSS"}  # fmt: skip


def render_pipeline(
    plan, fn_src: list[Sources], fn_programs, infer_src: Sources | None, name: str, target
) -> Sources:
    """A pipeline-parallel training binary (codegen/pipeline_parallel.py): every stage's
    functions (``fn_src``, in ``plan.functions``' order) and the inference model, with a train.c
    that describes them to mpi/fc_pipeline.c and the training driver."""
    from ...pipeline_parallel import MAX_VALUES

    if target.threads > 1:
        raise FlowcError("--train --ranks: one thread a stage (each rank runs its stage on one core)")
    if len(plan.values) > MAX_VALUES:
        raise FlowcError(f"--train --ranks: {len(plan.values)} values cross the stages; at most {MAX_VALUES}")
    env = environment()
    out = Sources(api=infer_src.api if infer_src else fn_src[0].api)
    for src in [*fn_src, infer_src]:
        if src is None:
            continue
        for fname, content in src.files.items():
            if fname.startswith(src.context["name"]):
                out.files[fname] = content
    c_files = list(
        dict.fromkeys([*(infer_src.c_files if infer_src else []), *(f for s in fn_src for f in s.c_files)])
    )
    c_files += ["train.c", TRAINER_C, MPI_C, PIPELINE_C]
    step = plan.step
    inputs = [n for n in step.nodes if n.op == "placeholder"]
    batches = {n.outputs[0].shape[0] if n.outputs[0].shape else None for n in inputs}
    if not inputs or None in batches or len(batches) != 1:
        shapes = ", ".join(f"{n.name} {list(n.outputs[0].shape)}" for n in inputs) or "none"
        raise FlowcError(
            "--train: every input of the training step takes a batch on its first axis, of one size; "
            f"got {shapes}"
        )
    input_index = {n.name: k for k, n in enumerate(inputs)}
    # the state: each stage's (or shard's) update model's, one after the other
    updates = [i for i, f in enumerate(plan.functions) if f.kind == "update"]
    parts = len(updates)
    base, states, offset = [], [], 0
    for i in updates:
        src = fn_src[i]
        base.append(offset)
        states.append({v["name"]: v for v in src.metadata["state"]})
        offset += -(-src.metadata["state_bytes"] // ALIGN) * ALIGN
    base.append(offset)
    svars, specs, replicas = [], {}, []
    for s, i in enumerate(updates):
        for v in fn_src[i].context["state_vars"]:
            raw = next(k for k, m in states[s].items() if m["offset"] == v["offset"])
            if plan.owner.get(raw) == -1 and s > 0:
                continue
            svars.append({**v, "offset": base[s] + v["offset"]})
            m = states[s][raw]
            specs[raw] = (tuple(m["shape"]), m["dtype"])
            if plan.owner.get(raw) == -1:
                nbytes = int(np.prod(m["shape"], dtype=np.int64)) * np.dtype(m["dtype"]).itemsize
                replicas.append([nbytes, *(states[t][raw]["offset"] for t in range(parts))])
    g_step = next(
        (v["offset"] for v in svars if v["name"] == c_string("global_step") and v["dtype"] == "int64"), -1
    )
    fns = []
    for f, src, prog in zip(plan.functions, fn_src, fn_programs):
        ctx = src.context
        in_label = [label for label, _, _ in prog.inputs]
        out_label = [label for label, _, _ in prog.outputs]

        def port(p, stage=f.stage):
            if p.kind == "batch":
                return _PORTS[p.kind], input_index[p.key]
            if (
                p.kind == "var"
            ):  # its offset in the whole state: in its owner's part (a copy: the stage's own)
                part = stage if plan.owner[p.key] == -1 else plan.owner[p.key]
                return _PORTS[p.kind], base[part] + states[part][p.key]["offset"]
            return _PORTS[p.kind], 0 if p.key is None else p.key

        ins = [port(f.inputs[f.input_names.index(label)]) for label in in_label]
        outs = [port(f.outputs[f.output_names.index(label)]) for label in out_label]
        call = src.api.run.call(
            {"input": lambda p: f"in[{p.index}]", "output": lambda p: f"out[{p.index}]", "arena": "arena",
             "state": "state", "pool": "NULL", "mpi": "NULL"}
        )  # fmt: skip
        fns.append({"name": ctx["name"], "NAME": ctx["NAME"], "call": call, "ins": ins, "outs": outs,
                    "update": f.kind == "update"})  # fmt: skip
    depths = label_depths(step)
    t = {
        "name": name,
        "version": VERSION,
        "stages": plan.stages,
        "fns": fns,
        "align": ALIGN,
        "batch": inputs[0].outputs[0].shape[0],
        "inputs": [
            {
                "name": c_string(n.name),
                "dtype": n.outputs[0].dtype,
                "rank": n.outputs[0].rank,
                "shape": list(n.outputs[0].shape),
                "row_bytes": n.outputs[0].nbytes // n.outputs[0].shape[0],
                "depth": depths.get(n.name, 0),
            }
            for n in inputs
        ],  # fmt: skip
        "input_names": c_string(", ".join(n.name for n in inputs)),
        "vars": svars,
        "hash": checkpoint.spec_hash(specs),
        "global_step": g_step,
        "state_bytes": base[-1],
        "state_base": base,
        "replicas": replicas,
        "shards": plan.shards or 0,
        "inits": [f"{f['name']}_state_init" for f in fns if f["update"]],
        "weights": sorted(
            {
                (
                    base[plan.owner[p.key]] + states[plan.owner[p.key]][p.key]["offset"],
                    int(np.prod(states[plan.owner[p.key]][p.key]["shape"], dtype=np.int64))
                    * np.dtype(states[plan.owner[p.key]][p.key]["dtype"]).itemsize,
                    plan.owner[p.key],
                )
                for f in plan.functions
                if f.kind != "update" and plan.shards
                for p in f.inputs
                if p.kind == "var"
            }
        ),  # fmt: skip
        "values": [
            {
                "name": c_string(str(v.ref)),
                "bytes": v.type.nbytes,
                "stage": v.stage,
                "backward": int(v.kind == "backward"),
                "readers": sum(1 << s for s in v.readers),
                "backward_readers": sum(1 << s for s, kinds in v.readers.items() if "backward" in kinds),
            }
            for v in plan.values
        ],  # fmt: skip
        "grads": [{"bytes": g.type.nbytes, "stage": g.stage} for g in plan.grads],
        "loss_stage": plan.loss_stage,
    }
    if any(g.type.dtype != "float32" for g in plan.grads):
        raise FlowcError("--train --ranks: pipeline training sums float32 gradients")
    out.files["train.c"] = env.get_template("train/pipeline.c.j2").render(t=t)
    if infer_src is not None:
        m = {**infer_src.context, "trainer": True, "mpi": True}
        out.files["main.c"] = env.get_template("build/main.c.j2").render(m=m)
    else:
        m = {**fn_src[0].context, "name": name, "trainer": True, "mpi": True}
        out.files["main.c"] = env.get_template("train/main.c.j2").render(t=t)
    out.files["Makefile"] = env.get_template("build/Makefile.j2").render(
        m={**m, "mpi": True, "mpi_flags": " ".join(MPI_FLAGS)}, sources=c_files, driver=DRIVER_C
    )
    out.c_files = c_files
    state_meta = [
        {**states[s][k], "offset": base[s] + states[s][k]["offset"], "stage": s}
        for s in range(plan.stages)
        for k in states[s]
        if not (plan.owner.get(k) == -1 and s > 0)
    ]  # fmt: skip
    base_meta = infer_src.metadata if infer_src is not None else {"inputs": [], "outputs": []}
    out.metadata = {
        **base_meta,
        "name": name,
        "trainer": {
            "mpi": True,
            "pipeline": {
                "stages": plan.stages,
                "shards": plan.shards,
                "functions": [f["name"] for f in fns],
                "costs_s": [list(c) for c in plan.costs],
                "cut": [list(c) for c in plan.cut],
                "values": len(plan.values),
                "bytes_per_microbatch": sum(v.type.nbytes for v in plan.values),
            },
            "batch_per_microbatch": t["batch"],
            "inputs": [n.name for n in inputs],
            "state": state_meta,
            "state_bytes": base[-1],
            "arena_bytes": max(s.metadata["arena_bytes"] for s in fn_src),
            "hash": t["hash"],
        },
    }
    out.files["metadata.json"] = json.dumps(out.metadata, indent=1) + "\n"
    return out
