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

from graphdef import checkpoint
from graphdef.errors import FlowcError
from graphdef.ir import Graph

from ...render.sources import VERSION, Sources, environment
from ...render.spelling import c_string
from ...storage import ALIGN
from .emit import DRIVER_C

MPI_C = "mpi/fc_mpi.c"
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
    c_files += ["train.c", TRAINER_C] + ([MPI_C] if mpi else [])
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
