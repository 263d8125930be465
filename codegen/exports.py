"""A model as a project folder with its build: ``export`` (the C backend's program, firmware or
SPMD program over MPI ranks, through the pipeline's build stage, answered from the build cache
when it can) and ``export_trainer`` (the training binary), each written beside its place and
moved in whole (codegen/outdir.py)."""

from __future__ import annotations

import json
from pathlib import Path

from graphdef.errors import FlowcError
from graphdef.ir import Graph

from . import backends, data_parallel, outdir, partition, pipeline
from .backends.c import toolchain
from .cache import build_key, restore_export, store_export
from .loaded import check_name, with_train
from .target import Target, parse_bytes

WEIGHTS = {"auto": "auto", "c-array": "c", "blob": "blob"}  # --weights -> pipeline.Options.weights


def project_options(
    name: str = "model",
    target: str = "c",
    arch: str = "host",
    portable: bool = False,
    threads: int = 1,
    build_binary: bool = True,
    cc: str | None = None,
    flags=(),
    planner: str = "best",
    outputs=None,
    ranks: int | None = None,
    placement: str = "auto",
    compress: str | None = None,
    max_ram=None,
    max_flash=None,
    trainer=None,
    mpi: bool | None = None,
    sm=(80, 90),
    precision: str = "fp32",
    weights: str = "auto",
    bucket=None,
    accumulate: bool = False,
    shard: int | None = None,
    lengths=None,
) -> pipeline.Options:
    """The pipeline options of a project folder (``write``), every choice checked in one line
    before any work: the backend (``target``: "c" or "cuda"), the name, the arch, the limits
    (bytes, or strings such as "64K"), the rank count, a CUDA build's architectures and
    precision, and the compiler: the target's C compiler; MPI's for a program over ranks or a
    data-parallel training binary (``trainer``: its train op; ``mpi`` None: with MPI when
    mpicc is found; ``compress`` "fp16": gradients sent as float16); for CUDA, ``cc`` is the
    host C++ compiler of the CPU simulator (nvcc otherwise). ``weights`` (the C backend):
    "c-array" (C arrays: any C compiler), "blob" (one file pulled in by the assembler's
    .incbin: GCC and clang) or "auto" (a blob above 64 KiB where the compiler is GCC or clang,
    else arrays). ``bucket``: a data-parallel step's allreduce bucket (bytes of float32
    gradients, or a string such as "25M"; default data_parallel.BUCKET_BYTES)."""
    backends.get(target)  # an unknown backend, in one line
    if weights not in WEIGHTS:
        raise FlowcError(f"--weights {weights}: one of {', '.join(WEIGHTS)}")
    check_name(name)
    tgt = Target(arch, portable, threads)
    if ranks is not None:
        partition.check_rank_count(ranks)
    product = "program" if build_binary else "none"
    limits = {
        "max_ram": None if max_ram is None else parse_bytes(max_ram, "max-ram"),
        "max_flash": None if max_flash is None else parse_bytes(max_flash, "max-flash"),
    }
    if target == "cuda":
        from .backends.cuda.precision import check

        check(precision, tuple(sm), training=trainer is not None)
        if arch != "host" or threads != 1:
            raise FlowcError("--target cuda builds for GPUs: --arch and --threads are for C")
        if trainer is not None and (mpi or compress is not None or ranks is not None):
            raise FlowcError(
                "--train with --target cuda trains on one GPU: data parallel training over MPI ranks "
                "(--compress, mpiexec) is the C backend's; build with --no-mpi"
            )
        return pipeline.Options(
            backend="cuda", outputs=outputs, name=name, cc=cc, sm=tuple(sm), planner=planner,
            precision=precision, product=product, ranks=ranks, placement=placement, compress=compress,
            trainer=_train_op(trainer),
        )  # fmt: skip
    trainer = _train_op(trainer)
    if shard is not None and (trainer is None or ranks is not None or isinstance(shard, bool) or shard < 1):
        raise FlowcError(
            "--shard R builds a data-parallel training binary (--train, not --ranks) for R >= 1 ranks"
        )
    if trainer is not None and (ranks is not None or shard is not None):  # MPI, one thread a rank
        if mpi is False or compress is not None or accumulate or bucket is not None or threads != 1:
            raise FlowcError(
                "--train --ranks N builds a pipeline-parallel training binary: with MPI, one thread a rank, "
                "no --compress, --bucket or --accumulate (its microbatches accumulate: "
                "train --microbatches K)"
            )
        mpi = True
    cc, mpi = toolchain.choose_cc(cc, tgt, mpi, trainer is not None, ranks, build_binary)
    allreduce = None
    if trainer is not None:
        if compress is not None and not mpi:
            raise FlowcError("--compress sends the gradients between MPI ranks: it needs a build with MPI")
        allreduce, compress = (
            ((compress or "float32") if mpi and ranks is None and shard is None else None),
            None,
        )
    bucket_bytes = data_parallel.BUCKET_BYTES if bucket is None else parse_bytes(bucket, "bucket")
    if accumulate and (trainer is None or target != "c"):
        raise FlowcError("--accumulate builds a C training binary that accumulates gradients: give --train")
    if bucket is not None and (trainer is None or bucket_bytes < 4):
        raise FlowcError(
            "--bucket sizes the gradient allreduces of a data-parallel training binary (--train): "
            "at least 4 bytes"
        )
    return pipeline.Options(
        target=tgt, outputs=outputs, planner=planner, cc=cc, flags=tuple(flags), name=name,
        product=None if build_binary and trainer is None else product, ranks=ranks, placement=placement,
        compress=compress, max_ram=limits["max_ram"], max_flash=limits["max_flash"], allreduce=allreduce,
        trainer=trainer, weights=WEIGHTS[weights], bucket_bytes=bucket_bytes, accumulate=accumulate,
        shards=shard, lengths=tuple(sorted((lengths or {}).items())),
    )  # fmt: skip


def _train_op(trainer) -> str | None:
    """The train op's name, given as a name or as its Tensor."""
    from graphdef.builder import Tensor

    return str(trainer.ref) if isinstance(trainer, Tensor) else trainer


def write(graph: Graph, out_dir, options: pipeline.Options, cache: bool = True) -> Path:
    """The one entry of every project folder, whatever the backend and product (a program, a
    microcontroller library, an SPMD program over ranks, a training binary, a CUDA build): the
    pipeline to its build stage in a folder beside ``out_dir``, renamed into place only when
    complete (codegen/outdir.py). A model over ``options.max_ram`` / ``max_flash`` is refused
    before any build (a microcontroller's code, stack and data checked once built). A repeated
    write of the same graph with the same options is answered from the build cache (cache.py)
    without running a compiler; ``cache=False``: build anew."""
    tmp = outdir.prepare(out_dir)  # refuses a folder flowc may not replace first
    key = build_key(graph, options) if cache else None  # hashes the weights: only for the cache
    try:
        if not (cache and restore_export(key, tmp)):
            _build(graph, options, tmp)
            if cache:
                store_export(key, tmp)
        outdir.publish(tmp, out_dir, options.name)
    finally:
        outdir.discard(tmp)
    return out_dir


def _build(graph: Graph, options: pipeline.Options, folder: Path) -> None:
    """The pipeline to its build in ``folder``, the limits checked as soon as they can be: the
    RAM and weights at the plan (before any build), a microcontroller's code, stack and data
    once built (its footprint then goes into metadata.json)."""
    name, target = options.name, options.target
    limits = {"max_ram": options.max_ram, "max_flash": options.max_flash}
    ram = {}

    def check(stage, value):
        if stage == "plan" and options.trainer is None:
            for program in value if options.ranks is not None else [value]:
                ram.update(arena=program.arena_bytes, state=program.state_bytes)
                check_limits(name, target, limits, ram, {"weights": program.weight_bytes})
        elif stage == "build" and value.footprint is not None:
            fp = value.footprint
            ram.update(stack=fp.stack, data=fp.data)
            check_limits(name, target, limits, ram, {"code": fp.code, "weights": fp.weights})

    c = pipeline.run(graph, options, until="build", folder=folder, trace=check)
    if c.results["build"].footprint is not None:
        c.sources.metadata["footprint"] = c.results["build"].footprint.to_json()
        (folder / "metadata.json").write_text(json.dumps(c.sources.metadata, indent=1) + "\n")


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
    weights: str = "auto",
    lengths=None,
) -> Path:
    """Write a project folder (header, sources, Makefile, CMakeLists.txt, metadata.json) and,
    unless ``build_binary`` is False, build it:

    - host and Linux arches (``aarch64-linux``, ``armv7-linux``, ``riscv64-linux``): main.c
      and the standalone program ``out_dir/name`` (statically linked when cross-compiled);
    - microcontrollers (``cortex-m0plus``, ``cortex-m4``, ``cortex-m7``): ``build/lib<name>.a``, a
      test firmware for QEMU (firmware.c, build/firmware.elf) and the footprint, which is printed by
      ``flowc compile`` and stored under "footprint" in metadata.json (see
      codegen/backends/c/mcu.py).

    ``max_ram`` / ``max_flash`` (bytes, or strings such as "64K"): a model that does not fit
    is refused with a FlowcError giving both numbers, and nothing is written. They bound the
    arena (+ state, + stack and C library data on an MCU) and the weights (+ code on an MCU).

    ``ranks``: one SPMD program over that many MPI ranks (``mpiexec -n ranks out_dir/name``),
    built with mpicc; ``placement`` and ``compress`` as for compile(); ``max_ram`` then bounds
    each rank's arena, and the pipeline placement keeps every rank under it.

    ``train``: a train op, run by every call as compile()'s (its value, the loss, is an output).
    ``weights``: "auto", "c-array" or "blob" (``project_options``). ``lengths``: {input: axis},
    inputs of run-time length as for compile(); the program's ``--in`` then takes them shorter.

    The folder appears complete or not at all: it is written beside and renamed into place.
    A repeated export of the same graph with the same options (limits included) is answered
    from the build cache (cache.py) without running the compiler; ``cache=False``: build anew.
    (``write`` with ``project_options`` is the same for every backend and product.)
    """
    check_name(name)
    options = project_options(
        name=name, arch=arch, portable=portable, threads=threads, build_binary=build_binary, cc=cc,
        flags=flags, planner=planner, outputs=with_train(graph, outputs, train), ranks=ranks,
        placement=placement, compress=compress, max_ram=max_ram, max_flash=max_flash, weights=weights,
        lengths=lengths,
    )  # fmt: skip
    return write(graph, out_dir, options, cache)


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
    target: str = "c",
    sm=(80, 90),
    bucket=None,
    accumulate: bool = False,
    ranks: int | None = None,
    shard: int | None = None,
) -> Path:
    """Write and build the training binary of ``graph``'s train op ``train`` (a name or
    Tensor) in ``out_dir`` (codegen/backends/c/trainer.py): ``out_dir/name train --data ...``
    trains, ``out_dir/name --in ... --out-dir ...`` runs the graph's other outputs.
    ``target`` "cuda": both models on one GPU (architectures ``sm``; ``cc`` a host C++
    compiler builds them for the CPU simulator instead of nvcc), one process.

    ``mpi``: build with MPI's compiler (data parallel under ``mpiexec``); None: when one is
    found. ``compress``: "fp16" sends the gradients as float16 (default float32). Both models
    go through the pipeline's stages (``Options.trainer``: ``flowc inspect --train`` shows
    them). ``bucket``: the allreduce bucket's bytes (project_options); ``accumulate``: a step
    that accumulates gradients (the binary's ``train --accumulate K``). ``ranks``: a
    pipeline-parallel binary over that many ranks (codegen/pipeline_parallel.py; ``mpiexec -n
    ranks NAME train --microbatches K ...``); ``shard``: data parallel over exactly that many
    ranks, the optimizer's state sharded (ZeRO stage 1). The folder appears complete or not at
    all."""
    options = project_options(
        name=name, trainer=train, mpi=mpi, compress=compress, threads=threads, portable=portable,
        build_binary=build_binary, cc=cc, flags=flags, planner=planner, target=target, sm=sm, bucket=bucket,
        accumulate=accumulate, ranks=ranks, shard=shard,
    )  # fmt: skip
    return write(graph, out_dir, options, cache=False)


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
