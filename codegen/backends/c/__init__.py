"""The C backend: C99 sources for the host, Linux phones and boards, and microcontrollers.

- op_table.py and ops/: how each op becomes C (expressions, kernel calls, legalizations);
- gemm_ops.py, gemm_steps.py, sgemm.py, gemm_lowering.py: the backend's own products on the
  packed float32 GEMM (their records, their steps' C), their plans and packing, and the passes
  that put products on them;
- emit.py, steps.py: rendering a Program through templates/c and templates/build (on the
  render core, codegen/render/); spmd.py: a partition's Programs as one MPI program
  (templates/mpi); trainer.py: a training binary's two Programs as one program (templates/train);
- build.py, mcu.py: compilers, and the microcontroller firmware and footprint.
"""

from __future__ import annotations

from pathlib import Path

from graphdef.ir import Graph
from graphdef.registry import get_op

from ...render.sources import Built, Sources
from . import emit, gemm_ops, gemm_steps, op_table, ops, toolchain  # noqa: F401  (fill the op table)
from .gemm_lowering import lower_products
from .op_table import LEGALIZE, supports  # noqa: F401  (supports: the backend's op table)
from .ops.quant import int8_features
from .quant_lowering import channels_last

NAME = "c"
MULTI_RANK = True  # renders partitions: one SPMD program over MPI ranks (spmd.py)
BORROWS: dict[str, tuple[str, ...]] = {}  # no other backend's modules


def build_isa(options) -> str:
    """The float32 GEMM kernel the target's compiler selects with these options' flags."""
    return toolchain.isa(options.target, toolchain.find_cc(options.cc, options.target), options.flags)


MCU_GEMM_FLOPS = 1_000_000
"""On a microcontroller the packed GEMM's kernels take ~8 KB of flash: a model whose float
products are fewer FLOPs than this keeps the plain loops (the digits MLP: 1.2 KiB of code, not
9; the MLPerf Tiny autoencoder's 0.5 MFLOP ran as fast either way)."""


def lower(graph: Graph, options) -> Graph:
    """Float32 products onto the packed GEMM of the target's compiler (split over the
    target's threads where big enough), their elementwise consumers into them as epilogues;
    nothing on targets without ``packed_gemm``, nor on a microcontroller for a model whose
    products are small (``MCU_GEMM_FLOPS``). On a microcontroller with Helium, integer
    convolutions' weights laid out channels-last first (quant_lowering.py)."""
    mcu = options.target.kind == "mcu"
    if mcu and "mve" in build_int8(options).split("+"):
        graph = channels_last(graph)  # integer convolutions' weights for Helium's channels-last forms
    if not options.target.spec.packed_gemm:
        return graph
    if mcu and _product_flops(graph) < MCU_GEMM_FLOPS:
        return graph
    return lower_products(graph, build_isa(options), options.target.threads, mcu=mcu)


def _product_flops(graph: Graph) -> int:
    """FLOPs of the graph's float32 matmul, gemm and conv nodes."""
    total = 0
    for n in graph.nodes:
        if n.op in ("matmul", "gemm", "conv") and n.outputs[0].dtype == "float32":
            ins = [graph.type_of(r) for r in n.inputs]
            total += get_op(n.op).flops(ins, n.outputs, n.attrs)
    return total


def scratch_bytes(node, ins, options) -> int:
    """Bytes of step-local memory the C step of ``node`` needs on this build (a step split
    over the target's threads: every part's). An integer convolution's depends on the integer
    features the build's compiler enables (ops/quant.py ``int8_features``), the rest on the
    float GEMM's ISA."""
    isa = build_int8(options) if node.op == "qconv" else build_isa(options)
    return op_table.scratch_bytes(node, ins, isa, options.target.threads)


def build_int8(options) -> str:
    """The integer kernel's features of this build (ops/quant.py ``int8_features``)."""
    cc = toolchain.find_cc(options.cc, options.target)
    return int8_features(toolchain.macros(options.target, cc, options.flags))


def weights_mode(options) -> str:
    """How the weights reach the C code: ``options.weights``, where "auto" becomes C arrays
    for a compiler that says it is neither GCC nor clang (whose assemblers take .incbin)."""
    if options.weights != "auto":
        return options.weights
    macros = toolchain.macros(options.target, toolchain.find_cc(options.cc, options.target), options.flags)
    return "c" if macros and "__GNUC__" not in macros else "auto"  # ("": the compiler could not say)


def render(program, options) -> Sources:
    return emit.emit(
        program,
        options.name,
        weights_mode(options),
        options.target,
        build_isa(options),
        int8=build_int8(options),
    )


def render_ranks(programs, partition, output_names, options) -> Sources:
    from . import spmd

    return spmd.render_ranks(
        programs, partition, output_names, options, build_isa(options), build_int8(options)
    )


def render_trainer(programs, options, plan=None) -> Sources:
    """A training binary (trainer.py): the training step's and the inference model's Programs
    (the latter None when the graph has no other outputs), rendered by ``emit`` and driven by
    the training driver; data parallel over MPI ranks when ``options.allreduce`` is set.
    ``plan``: a pipeline-parallel one (codegen/pipeline_parallel.py): ``programs`` are its
    functions' and then the inference model's."""
    from . import trainer

    isa, target, mpi = build_isa(options), options.target, options.allreduce is not None
    int8 = build_int8(options)
    if plan is not None:
        *fns, infer = programs
        fn_src = [
            emit.emit(p, f"{options.name}_{f.label}", weights_mode(options), target, isa, int8=int8)
            for p, f in zip(fns, plan.functions)
        ]  # fmt: skip
        infer_src = (
            None
            if infer is None
            else emit.emit(infer, options.name, weights_mode(options), target, isa, int8=int8)
        )
        return trainer.render_pipeline(plan, fn_src, fns, infer_src, options.name, target)
    step, infer = programs
    step_src = emit.emit(
        step, f"{options.name}_train", weights_mode(options), target, isa, rank=0 if mpi else None, int8=int8
    )
    infer_src = (
        None
        if infer is None
        else emit.emit(infer, options.name, weights_mode(options), target, isa, int8=int8)
    )
    return trainer.render(step_src, step, infer_src, options.name, target, mpi)


def bundle(sources: list[Sources], folder: Path, options) -> Built:
    """Several models' sources as one shared library (compile_many): each model's own files
    included into one bundle.c (one compiler call), the runtime files they use once."""
    toolchain.copy_runtime(folder, options.target)
    included, runtime = [], []
    for src in sources:
        own = [f for f in src.c_files if not f.startswith("runtime/")]  # model.c, its step files
        for f in (f"{src.context['name']}.h", *own):
            (folder / f).write_text(src.files[f])
        included += [f'#include "{f}"\n' for f in own]
        runtime += [f for f in src.c_files if f.startswith("runtime/")]  # kernels, thread pool
    (folder / "bundle.c").write_text("".join(included))
    cc = toolchain.find_cc(options.cc, options.target)
    files = ["bundle.c", *dict.fromkeys(runtime)]
    return Built(folder, "shared", toolchain.build_bundle(folder, files, cc, options.flags, options.target))


def prefetch(options) -> None:
    """Before the Python stages of a build: start compiling the tile kernels it will link
    (emit.KERNEL_SOURCES) into the object cache on a core those stages leave idle. Only for
    one-process programs and shared libraries of targets with the packed GEMM (whose models
    use them); a model that turns out not to need them leaves them cached for the next."""
    target = options.target
    product = options.product or target.spec.product
    if product not in ("program", "shared") or options.ranks is not None or not target.spec.packed_gemm:
        return
    cmd = toolchain.compile_command(toolchain.find_cc(options.cc, target), target, options.flags)
    cmd += ["-fPIC"] if product == "shared" else []
    toolchain.prefetch(cmd, list(emit.KERNEL_SOURCES.values()), target)


def build(sources: Sources, folder: Path, options) -> Built:
    """Write ``sources`` (and the runtime) into ``folder`` and build ``options.product``:
    "shared" (lib<name>.so for cffi), "program" (the standalone binary; a training binary's
    sources always build as one), "library" (lib<name>.a, a test firmware and the footprint)
    or "none"."""
    from . import mcu

    target, name, product = options.target, options.name, options.product
    if "trainer" in sources.metadata or sources.metadata.get("ranks"):
        toolchain.write_sources(sources, folder, target)
    if "trainer" in sources.metadata:  # a training binary (render_trainer); data parallel: with mpicc
        from . import trainer

        mpi = sources.metadata["trainer"]["mpi"]
        if mpi:
            toolchain.copy_mpi(folder)
        if product == "none":
            return Built(folder, "none")
        cc = toolchain.find_mpicc(options.cc) if mpi else toolchain.find_cc(options.cc, target)
        flags = (*options.flags, *trainer.build_flags(mpi))
        return Built(folder, "program", toolchain.build_binary(folder, name, sources, cc, flags, target))
    if sources.metadata.get("ranks"):  # an SPMD program over MPI ranks: built with mpicc
        toolchain.copy_mpi(folder)
        if product not in ("program", "shared"):
            return Built(folder, "none")
        if target.kind != "host":
            raise toolchain.ToolchainError(
                f"a multi-rank build for {target.arch} needs that machine's MPI: build the written folder "
                "there (make MPICC=...), or compile with --no-build"
            )
        mpicc = toolchain.find_mpicc(options.cc)
        flags = (*options.flags, "-Impi")
        if product == "shared":
            return Built(folder, product, toolchain.build_shared(folder, name, sources, mpicc, flags, target))
        path = toolchain.build_binary(folder, name, sources, mpicc, flags, target, emit.SPMD_DRIVER_C)
        return Built(folder, product, path)
    cc = toolchain.find_cc(options.cc, target)
    # a program's or shared library's weights blob is written while the C compiler runs
    toolchain.write_sources(sources, folder, target, blobs=product not in ("shared", "program"))
    if product == "shared":
        return Built(
            folder, product, toolchain.build_shared(folder, name, sources, cc, options.flags, target)
        )
    if product == "program":
        return Built(
            folder, product, toolchain.build_binary(folder, name, sources, cc, options.flags, target)
        )
    if product == "library":
        lib = toolchain.build_library(folder, name, sources, cc, options.flags, target)
        mcu.check_imports(mcu.imports(folder, name, target), lib.name)
        mcu.link_firmware(folder, name, target, cc, options.flags)
        return Built(folder, product, lib, mcu.footprint(folder, name, target, sources.metadata))
    return Built(folder, "none")
