"""The CUDA backend: the same Programs as CUDA C++ for one GPU, built with nvcc alone.

- kernels.py: the backend's own kernels (runtime_c/cuda/gemm.cuh: products and convolutions
  as tiled, shared-memory GEMMs) and which steps run them;
- precision.py: ``--precision`` (fp32, tf32, bf16, fp16) and the float16 graph pass;
- emit.py: a Program through templates/cuda/ (the model, its header, Makefile, CMakeLists.txt)
  and templates/build/main.c.j2 (the same .npy driver as the C backend's binaries); every
  other step runs the C backend's body of it, compiled for the device;
- toolchain.py: nvcc builds, and builds for runtime_c/cuda/sim.h, the CPU simulator that
  runs the generated CUDA here without a GPU.

Passes, schedule and memory planning are the shared ones; the legalizations are the C
backend's, since the steps without a kernel here run its bodies.
"""

from __future__ import annotations

from pathlib import Path

from graphdef.ir import Graph

from ..c import Built
from ..c import table as ctable
from ..c.table import LEGALIZE  # noqa: F401  (the C bodies' forms)
from . import emit, precision, toolchain

NAME = "cuda"
MULTI_RANK = False


def lower(graph: Graph, options) -> Graph:
    """Products stay matmul, gemm and conv for kernels.py; ``--precision fp16`` turns the
    graph's float32 values into float16 (precision.py)."""
    precision.check(options.precision, options.sm)
    return precision.to_half(graph) if options.precision == "fp16" else graph


def scratch_bytes(node, ins, options) -> int:
    """Step-local memory of the C bodies that need it (they run on one thread)."""
    return ctable.scratch_bytes(node, ins, "scalar", 1)


def render(program, options):
    return emit.emit(program, options, options.sm, options.precision)


def render_ranks(programs, partition, output_names, options):
    raise NotImplementedError  # MULTI_RANK is False: the pipeline refuses --ranks first


def build(sources, folder: Path, options) -> Built:
    """Write the sources and runtime into ``folder`` and build ``options.product``: "program"
    (the binary) or "shared" (lib<name>.so for CudaModel), with nvcc, or with a host C++
    compiler through the CPU simulator when ``options.cc`` names one."""
    toolchain.write_sources(sources, folder)
    if options.product not in ("program", "shared"):
        return Built(folder, "none")
    path = toolchain.build(folder, options.name, sources, options.cc, options.sm, options.product == "shared")
    return Built(folder, options.product, path)
