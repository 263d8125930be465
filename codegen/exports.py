"""A model as a project folder with its build: ``export`` (the C backend's program, firmware or
SPMD program over MPI ranks, through the pipeline's build stage, answered from the build cache
when it can) and ``export_trainer`` (the training binary), each written beside its place and
moved in whole (codegen/outdir.py)."""

from __future__ import annotations

import json
from pathlib import Path

from graphdef.errors import FlowcError
from graphdef.ir import Graph

from . import outdir, pipeline
from .backends.c import toolchain
from .cache import graph_key, key_options, restore_export, store_export
from .loaded import check_name, with_train
from .target import Target, parse_bytes


def export(
    graph: Graph,
    out_dir,
    name: str = "model",
    arch: str = "host",
    outputs=None,
    build_binary: bool = True,
    cc: str | None = None,
    flags=(),
    planner: str = "best",
    portable: bool = False,
    threads: int = 1,
    max_ram=None,
    max_flash=None,
    ranks: int | None = None,
    placement: str = "auto",
    compress: str | None = None,
    train=None,
    cache: bool = True,
) -> Path:
    """Write a project folder (header, sources, Makefile, CMakeLists.txt, metadata.json) and,
    unless ``build_binary`` is False, build it:

    - host and Linux arches (``aarch64-linux``, ``armv7-linux``, ``riscv64-linux``): main.c
      and the standalone program ``out_dir/name`` (statically linked when cross-compiled);
    - microcontrollers (``cortex-m0plus``, ``cortex-m4``, ``cortex-m7``): ``lib<name>.a``, a
      test firmware for QEMU (firmware.c, firmware.elf) and the footprint, which is printed by
      ``flowc compile`` and stored under "footprint" in metadata.json (see
      codegen/backends/c/mcu.py).

    ``max_ram`` / ``max_flash`` (bytes, or strings such as "64K"): a model that does not fit
    is refused with a FlowcError giving both numbers, and nothing is written. They bound the
    arena (+ state, + stack and C library data on an MCU) and the weights (+ code on an MCU).

    ``ranks``: one SPMD program over that many MPI ranks (``mpiexec -n ranks out_dir/name``),
    built with mpicc; ``placement`` and ``compress`` as for compile(); ``max_ram`` then bounds
    each rank's arena, and the pipeline placement keeps every rank under it.

    ``train``: a train op, run by every call as compile()'s (its value, the loss, is an output).

    The folder appears complete or not at all: it is written beside and renamed into place.
    A repeated export of the same graph with the same options (limits included) is answered
    from the build cache (cache.py) without running the compiler; ``cache=False``: build anew.
    """
    check_name(name)
    outputs = with_train(graph, outputs, train)
    target = Target(arch, portable, threads)
    limits = {
        "max_ram": None if max_ram is None else parse_bytes(max_ram, "max-ram"),
        "max_flash": None if max_flash is None else parse_bytes(max_flash, "max-flash"),
    }
    out_dir = outdir.check(out_dir)
    if ranks is None:
        cc = toolchain.find_cc(cc, target)
    elif build_binary:
        cc = toolchain.find_mpicc(cc)
    options = pipeline.Options(
        target=target, outputs=outputs, planner=planner, cc=cc, flags=tuple(flags), name=name,
        product=None if build_binary else "none", ranks=ranks, placement=placement, compress=compress,
        max_ram=None if ranks is None else limits["max_ram"],
    )  # fmt: skip
    key = graph_key(graph, outputs or graph.outputs, {**key_options(options), "export": limits})
    tmp = outdir.prepare(out_dir)
    try:
        if cache and restore_export(key, tmp):
            outdir.publish(tmp, out_dir, name)
            return out_dir
        ram = {}

        def check_plan(stage, value):  # a model over the limits is refused before any build
            if stage == "plan":
                for program in value if ranks is not None else [value]:
                    ram.update(arena=program.arena_bytes, state=program.state_bytes)
                    check_limits(name, target, limits, ram, {"weights": program.weight_bytes})

        c = pipeline.run(graph, options, until="build", folder=tmp, trace=check_plan)
        built = c.results["build"]
        if built.footprint is not None:
            fp = built.footprint
            check_limits(
                name,
                target,
                limits,
                {**ram, "stack": fp.stack, "data": fp.data},
                {"code": fp.code, "weights": fp.weights},
            )
            c.sources.metadata["footprint"] = fp.to_json()
            (tmp / "metadata.json").write_text(json.dumps(c.sources.metadata, indent=1) + "\n")
        if cache:
            store_export(key, tmp)
        outdir.publish(tmp, out_dir, name)
    finally:
        outdir.discard(tmp)
    return out_dir


def export_trainer(
    graph: Graph,
    out_dir,
    train="train",
    name: str = "model",
    mpi: bool | None = None,
    compress: str | None = None,
    threads: int = 1,
    portable: bool = False,
    build_binary: bool = True,
    cc: str | None = None,
    flags=(),
    planner: str = "best",
) -> Path:
    """Write and build the training binary of ``graph``'s train op ``train`` (a name or
    Tensor) in ``out_dir`` (codegen/backends/c/trainer.py): ``out_dir/name train --data ...``
    trains, ``out_dir/name --in ... --out-dir ...`` runs the graph's other outputs.

    ``mpi``: build with MPI's compiler (data parallel under ``mpiexec``); None: when one is
    found. ``compress``: "fp16" sends the gradients as float16 (default float32). The folder
    appears complete or not at all."""
    from .backends import c as c_backend
    from .backends.c import trainer
    from .backends.c.emit import emit

    check_name(name)
    out_dir = outdir.check(out_dir)
    target = Target("host", portable, threads)
    if mpi is None:
        try:
            toolchain.find_mpicc(cc)
            mpi = True
        except toolchain.ToolchainError:
            mpi = False
    if compress is not None and not mpi:
        raise FlowcError("--compress sends the gradients between MPI ranks: it needs a build with MPI")
    cc = toolchain.find_mpicc(cc) if mpi else toolchain.find_cc(cc, target)
    step_graph, infer_graph = trainer.split(graph, train)
    base = pipeline.Options(target=target, planner=planner, cc=cc, flags=tuple(flags), product="none")
    step_opts = base.with_(name=f"{name}_train", allreduce=(compress or "float32") if mpi else None)
    step = pipeline.run(step_graph, step_opts, until="plan").program
    isa = c_backend.build_isa(step_opts)
    step_src = emit(step, step_opts.name, step_opts.weights, target, isa, rank=0 if mpi else None)
    infer_src = None
    if infer_graph is not None:
        infer = pipeline.run(infer_graph, base.with_(name=name, freeze=False), until="plan").program
        infer_src = emit(infer, name, base.weights, target, isa)
    sources = trainer.render(step_src, step, infer_src, name, target, mpi)
    tmp = outdir.prepare(out_dir)
    try:
        toolchain.write_sources(sources, tmp, target)
        if mpi:
            toolchain.copy_mpi(tmp)
        if build_binary:
            toolchain.build_binary(tmp, name, sources, cc, (*flags, *trainer.build_flags(mpi)), target)
        outdir.publish(tmp, out_dir, name)
    finally:
        outdir.discard(tmp)
    return out_dir


def check_limits(name: str, target: Target, limits: dict, ram: dict, flash: dict) -> None:
    """Refuse a model whose RAM or flash parts (name -> bytes) exceed max_ram / max_flash."""
    for key, parts in (("max_ram", ram), ("max_flash", flash)):
        limit, need = limits[key], sum(parts.values())
        if limit is not None and need > limit:
            what = " + ".join(f"{k} {v} B" for k, v in parts.items() if v)
            raise FlowcError(
                f"model '{name}' does not fit {key.replace('_', '-')} {limit} B on {target.arch}: "
                f"it needs {need} B ({what or 'nothing'})"
            )
