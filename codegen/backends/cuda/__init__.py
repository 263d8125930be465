"""The CUDA backend: the same Programs as CUDA C++ for one GPU, built with nvcc alone.

- kernels.py: the backend's own kernels (runtime_c/cuda/gemm.cuh: products and convolutions
  as tiled, shared-memory GEMMs) and which steps run them;
- precision.py: ``--precision`` (fp32, tf32, bf16, fp16) and the float16 graph pass;
- emit.py: a Program through templates/cuda/ (the model, its header, Makefile, CMakeLists.txt,
  and main.c: the C backend's binary, runtime_c/main_driver.c, opening the model's context); every
  other step runs the C backend's body of it, compiled for the device;
- toolchain.py: nvcc builds, and builds for runtime_c/cuda/sim.h, the CPU simulator that
  runs the generated CUDA here without a GPU.

Passes, schedule and memory planning are the shared ones; the legalizations are the C
backend's, since the steps without a kernel here run its bodies.
"""

from __future__ import annotations

import json
from pathlib import Path

from graphdef.errors import UnsupportedError
from graphdef.ir import Graph

from ...render import sources as contract
from ...render.sources import Built
from ..c import op_table as ctable
from ..c import toolchain as ctool
from ..c.op_table import LEGALIZE  # noqa: F401  (the C bodies' forms)
from . import emit, precision, toolchain

NAME = "cuda"
MULTI_RANK = True  # one GPU per MPI rank: each rank's part in CUDA, the SPMD program of the C backend
# what this backend takes from the C backend: its op table, legalizations and step lowering
# (steps.lower_step: the steps without a CUDA kernel run the C body, compiled for the device),
# the C compiler for the host files, the SPMD program over MPI ranks and the training binary
# (trainer.py: its step described for the driver); the interface, weights,
# pointers, names, entry points and op plans are the render core's (codegen/render/)
BORROWS = {
    "c": ("control_steps", "emit", "op_table", "spmd", "steps", "toolchain", "trainer"),
}


def lower(graph: Graph, options) -> Graph:
    """Products stay matmul, gemm and conv for kernels.py; ``--precision fp16`` turns the
    graph's float32 values into float16 (precision.py)."""
    precision.check(options.precision, options.sm)
    return precision.to_half(graph) if options.precision == "fp16" else graph


def supports(op: str) -> bool:
    """Ops with a CUDA kernel (kernels.py) or a C body run as a one-thread kernel: every op
    the C backend has code for (its communication steps run on the host; loops and branches
    too, as host code between the launches: c/control_steps.py host_statement)."""
    return ctable.supports(op)


def scratch_bytes(node, ins, options) -> int:
    """Step-local memory of the C bodies that need it (they run on one thread)."""
    return ctable.scratch_bytes(node, ins, "scalar", 1)


def render(program, options):
    return emit.emit(program, options)


def render_ranks(programs, partition, output_names, options):
    """A partition as one SPMD program (codegen/backends/c/spmd.py: the model over the ranks,
    main.c under mpiexec) whose rank parts run on the GPU, rank modulo the visible devices
    (emit.emit_rank); transfers staged through pinned host memory."""
    from ..c import spmd

    def rank_part(program, name, rank):
        return emit.emit_rank(program, options, name, rank)

    src = spmd.render_ranks(programs, partition, output_names, options, "scalar", emit_rank=rank_part)
    env = contract.environment()
    m = {**src.context, "name": options.name, "nranks": len(programs), "version": contract.VERSION}
    src.files["Makefile"] = env.get_template("cuda/Makefile.mpi.j2").render(
        m=m, sm=list(options.sm), c_files=src.c_files, cu_files=src.cu_files, driver=emit.cemit.SPMD_DRIVER_C
    )
    src.files.pop("CMakeLists.txt", None)
    src.metadata.update(target="cuda", sm=list(options.sm), precision=options.precision)
    src.files["metadata.json"] = json.dumps(src.metadata, indent=1) + "\n"
    return src


def render_trainer(programs, options, plan=None):
    """A training binary on one GPU: the C backend's (backends/c/trainer.py), its step and
    inference model CUDA models (emit.py) whose contexts the drivers open (templates/cuda/
    train.c.j2, main.c.j2); the variables stay on the GPU, copied to the host for the
    checkpoints. Data and pipeline parallel training over MPI ranks are the C backend's alone in
    this version."""
    from ..c import trainer

    if plan is not None:
        raise UnsupportedError(
            "--train --ranks (pipeline-parallel training) is the C backend's: not --target cuda"
        )

    if options.allreduce is not None:
        raise UnsupportedError(
            "--train with --target cuda trains on one GPU: data parallel training over MPI ranks "
            "(mpiexec) is the C backend's; build without MPI (mpi=False) or with --target host"
        )
    precision.check(options.precision, options.sm, training=True)
    step, infer = programs
    step_src = emit.emit(step, options.with_(name=f"{options.name}_train"))
    infer_src = None if infer is None else emit.emit(infer, options)
    name = step_src.context["name"]
    call = f"{name}_run_host(({name}_ctx *)ctx, " + ", ".join(
        [f"(const {t['ctype']} *)batch[{t['index']}]" for t in step_src.context["inputs"]] + ["loss"]
    ) + ")"  # fmt: skip
    device = {"call": call, "train": "cuda/train.c.j2", "main": "cuda/main.c.j2"}
    src = trainer.render(step_src, step, infer_src, options.name, options.target, False, device)
    src.cu_files = [*(infer_src.cu_files if infer_src else []), *step_src.cu_files]
    m = {**src.context, **(infer_src or step_src).context, "name": options.name}
    make = contract.environment().get_template("cuda/Makefile.j2")
    src.files["Makefile"] = make.render(
        m=m, sm=list(options.sm), driver=emit.cemit.DRIVER_C, cu_files=src.cu_files, c_files=src.c_files
    )
    src.metadata.update(target="cuda", sm=list(options.sm), precision=options.precision)
    src.files["metadata.json"] = json.dumps(src.metadata, indent=1) + "\n"
    return src


def bundle(sources: list, folder: Path, options) -> Built:
    """Several models' sources as one shared library (compile_many): their .cu files included
    into one bundle.cu (one nvcc call), their C files beside it."""
    included, c_files = [], []
    for src in sources:
        name = src.context["name"]
        own = contract.Sources(
            files={f: v for f, v in src.files.items() if f.startswith(name)}, c_files=src.c_files
        )
        toolchain.write_sources(own, folder)
        included.append(f'#include "{name}.cu"\n')
        c_files += src.c_files
    (folder / "bundle.cu").write_text("".join(included))
    merged = contract.Sources(c_files=c_files, cu_files=["bundle.cu"])
    path = toolchain.build(folder, "bundle", merged, options.cc, options.sm, shared=True)
    return Built(folder, "shared", path)


def build(sources, folder: Path, options) -> Built:
    """Write the sources and runtime into ``folder`` and build ``options.product``: "program"
    (the binary) or "shared" (lib<name>.so for CudaModel), with nvcc, or with a host C++
    compiler through the CPU simulator when ``options.cc`` names one."""
    toolchain.write_sources(sources, folder)
    if "trainer" in sources.metadata:  # a training binary (render_trainer): always a program
        if options.product == "none":
            return Built(folder, "none")
        return Built(
            folder, "program", toolchain.build(folder, options.name, sources, options.cc, options.sm, False)
        )
    if sources.metadata.get("ranks"):  # an SPMD program over MPI ranks, a GPU each
        ctool.copy_mpi(folder)
        if options.product != "program":
            return Built(folder, "none")
        path = toolchain.build_mpi(folder, options.name, sources, options.cc, options.sm)
        return Built(folder, "program", path)
    if options.product not in ("program", "shared"):
        return Built(folder, "none")
    path = toolchain.build(folder, options.name, sources, options.cc, options.sm, options.product == "shared")
    return Built(folder, options.product, path)
