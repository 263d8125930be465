"""Building generated CUDA: nvcc for GPUs, or a host C++ compiler through the CPU simulator
(runtime_c/cuda/sim.h). The commands are the generated Makefile's (``make`` and ``make sim``).
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from graphdef.errors import ToolchainError

from ...render.sources import RUNTIME
from ..c import toolchain as ctool
from ..c.emit import SPMD_DRIVER_C

NVCC_FLAGS = ("-O3", "-std=c++17", "--Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror")
SIM_FLAGS = (
    "-std=c++17",
    "-O1",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-x",
    "c++",
    "-DFC_CUDA_SIM",
    "-include",
    "cuda/sim.h",
)
C_FLAGS = (*ctool.STRICT, "-O2", "-I.", "-Iruntime", "-Wa,-I.")


def find_nvcc(nvcc: str | None = None) -> str:
    """nvcc: ``nvcc`` if given, else $NVCC, nvcc on PATH or /usr/local/cuda/bin/nvcc."""
    candidates = [nvcc] if nvcc else [os.environ.get("NVCC") or "nvcc", "/usr/local/cuda/bin/nvcc"]
    for c in candidates:
        if c and shutil.which(shlex.split(c)[0]):
            return c
    raise ToolchainError(
        f"nvcc not found (looked for {', '.join(c for c in candidates if c)}): --target cuda builds with the "
        "CUDA toolkit's nvcc; install it or set NVCC, or build with --no-build and run `make` where it is"
    )


def is_nvcc(cc: str | None) -> bool:
    return cc is None or os.path.basename(shlex.split(cc)[0]).startswith("nvcc")


def gencode(sm) -> list[str]:
    """Machine code for every architecture in ``sm``, and PTX of the last for newer GPUs."""
    out = []
    for v in sm:
        out += ["-gencode", f"arch=compute_{v},code=sm_{v}"]
    return out + ["-gencode", f"arch=compute_{sm[-1]},code=compute_{sm[-1]}"]


def write_sources(sources, dest: Path) -> None:
    """The sources, runtime_c (as for C) and runtime_c/cuda into ``dest``."""
    ctool.write_sources(sources, dest)
    (dest / "runtime" / "cuda").mkdir(parents=True, exist_ok=True)
    for path in sorted((RUNTIME / "cuda").iterdir()):
        if path.suffix in (".h", ".cuh"):
            shutil.copyfile(path, dest / "runtime" / "cuda" / path.name)


def build(folder: Path, name: str, sources, cc: str | None, sm, shared: bool) -> Path:
    """The binary folder/name, or folder/lib<name>.so when ``shared``: nvcc when ``cc`` is None
    or an nvcc, else the simulator build with the C++ compiler ``cc``."""
    c_files = [*sources.c_files] + ([] if shared else ["main.c", *ctool.DRIVER_C])
    out = f"lib{name}.so" if shared else name
    return _compile_link(folder, out, c_files, sources.cu_files, cc, sm, shared)


def build_mpi(folder: Path, name: str, sources, cc: str | None, sm) -> Path:
    """The SPMD program folder/name over MPI ranks (the generated Makefile's commands): the rank
    parts' .cu files with nvcc, MPI's C++ wrapper its host compiler (or, ``cc`` naming a host
    C++ compiler, through the simulator with MPI's C++ wrapper), the rest with mpicc."""
    mpicc = ctool.find_mpicc()
    beside = Path(shlex.split(mpicc)[0]).with_name("mpicxx")
    mpicxx = str(beside) if shutil.which(str(beside)) else "mpicxx"
    c_files = ["main.c", *SPMD_DRIVER_C, *sources.c_files]
    return _compile_link(folder, name, c_files, sources.cu_files, cc, sm, False, (mpicc, mpicxx))


def _compile_link(folder: Path, out: str, c_files, cu_files, cc, sm, shared: bool, mpi=None) -> Path:
    """C files with the host C compiler (mpicc with ``mpi`` = (mpicc, mpicxx)), .cu files with
    nvcc (its host compiler mpicxx with MPI) or, ``cc`` not an nvcc, as C++ through the
    simulator (``cc``, or mpicxx with MPI); linked into folder/out."""
    nvcc = shlex.split(find_nvcc(cc)) if is_nvcc(cc) else None  # a missing nvcc stops before any build
    cxx = shlex.split(mpi[1] if mpi else cc) if not nvcc else []
    if cxx and not shutil.which(cxx[0]):
        raise ToolchainError(f"C++ compiler {cxx[0]} not found (the CUDA simulator build needs one)")
    c_cc = shlex.split(mpi[0] if mpi else ctool.find_cc())
    pic = ["-fPIC"] if shared else []
    extra = ["-Impi"] if mpi else []
    objects = []
    for f in c_files:
        objects.append(f"{f[:-2]}.o")
        ctool.run([*c_cc, *C_FLAGS, *extra, *pic, "-c", f, "-o", objects[-1]], cwd=folder)
    ccbin = ["-ccbin", mpi[1]] if mpi and nvcc else []
    for f in cu_files:
        objects.append(f"{f[:-3]}.o")
        if nvcc:
            flags = [*NVCC_FLAGS, *gencode(sm), "-I.", "-Iruntime", *extra] + (
                ["-Xcompiler", "-fPIC"] if shared else []
            )
            ctool.run([*nvcc, *ccbin, *flags, "-c", f, "-o", objects[-1]], cwd=folder)
        else:
            ctool.run(
                [*cxx, *SIM_FLAGS, *pic, "-I.", "-Iruntime", *extra, "-c", f, "-o", objects[-1]], cwd=folder
            )
    cu_objects, c_objects = objects[len(c_files) :], objects[: len(c_files)]
    shared_flag = ["-shared"] if shared else []
    if nvcc:
        link = [*nvcc, *ccbin, *gencode(sm), *shared_flag, "-o", out, *cu_objects, *c_objects]
        ctool.run([*link, "-cudart", "static", "-lm"], cwd=folder)
    else:
        ctool.run([*cxx, *shared_flag, "-o", out, *cu_objects, *c_objects, "-lm"], cwd=folder)
    return folder / out
