"""Building generated CUDA: nvcc for GPUs, or a host C++ compiler through the CPU simulator
(runtime_c/cuda/sim.h). The commands are the generated Makefile's (``make`` and ``make sim``).
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from graphdef.errors import ToolchainError

from ..c import toolchain as ctool
from ..c.emit import RUNTIME

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
    pic = ["-fPIC"] if shared else []
    nvcc = shlex.split(find_nvcc(cc)) if is_nvcc(cc) else None  # a missing nvcc stops before any build
    host_cc = ctool.find_cc()
    c_files = [*sources.c_files] + ([] if shared else ["main.c", *ctool.DRIVER_C])
    objects = [f"{f[:-2]}.o" for f in c_files]
    for f, o in zip(c_files, objects):
        ctool.run([*shlex.split(host_cc), *C_FLAGS, *pic, "-c", f, "-o", o], cwd=folder)
    out = f"lib{name}.so" if shared else name
    if nvcc:
        arch = gencode(sm)
        flags = [*NVCC_FLAGS, *arch, "-I.", "-Iruntime"] + (["-Xcompiler", "-fPIC"] if shared else [])
        ctool.run([*nvcc, *flags, "-c", f"{name}.cu", "-o", f"{name}.o"], cwd=folder)
        link = [*nvcc, *arch, *(["-shared"] if shared else []), "-o", out, f"{name}.o", *objects]
        ctool.run([*link, "-cudart", "static", "-lm"], cwd=folder)
    else:
        cxx = shlex.split(cc)
        if not shutil.which(cxx[0]):
            raise ToolchainError(f"C++ compiler {cxx[0]} not found (the CUDA simulator build needs one)")
        ctool.run(
            [*cxx, *SIM_FLAGS, *pic, "-I.", "-Iruntime", "-c", f"{name}.cu", "-o", f"{name}.o"], cwd=folder
        )
        ctool.run(
            [*cxx, *(["-shared"] if shared else []), "-o", out, f"{name}.o", *objects, "-lm"], cwd=folder
        )
    return folder / out


def build_mpi(folder: Path, name: str, sources, cc: str | None, sm) -> Path:
    """The SPMD program folder/name over MPI ranks (the generated Makefile's commands): the rank
    parts' .cu files with nvcc, MPI's C++ wrapper its host compiler (or, ``cc`` naming a host
    C++ compiler, through the simulator with MPI's C++ wrapper), the rest with mpicc."""
    mpicc = shlex.split(ctool.find_mpicc())
    mpicxx = (
        [str(Path(mpicc[0]).with_name("mpicxx"))]
        if shutil.which(str(Path(mpicc[0]).with_name("mpicxx")))
        else ["mpicxx"]
    )
    nvcc = shlex.split(find_nvcc(cc)) if is_nvcc(cc) else None
    objects = []
    for f in ["main.c", "runtime/npy.c", *sources.c_files]:
        objects.append(f"{f[:-2]}.o")
        ctool.run([*mpicc, *C_FLAGS, "-Impi", "-c", f, "-o", objects[-1]], cwd=folder)
    for f in sources.cu_files:
        objects.append(f"{f[:-3]}.o")
        if nvcc:
            flags = [*NVCC_FLAGS, *gencode(sm), "-I.", "-Iruntime", "-Impi"]
            ctool.run([*nvcc, "-ccbin", mpicxx[0], *flags, "-c", f, "-o", objects[-1]], cwd=folder)
        else:
            ctool.run(
                [*mpicxx, *SIM_FLAGS, "-I.", "-Iruntime", "-Impi", "-c", f, "-o", objects[-1]], cwd=folder
            )
    if nvcc:
        ctool.run(
            [*nvcc, "-ccbin", mpicxx[0], *gencode(sm), "-o", name, *objects, "-cudart", "static", "-lm"],
            cwd=folder,
        )
    else:
        ctool.run([*mpicxx, "-o", name, *objects, "-lm"], cwd=folder)
    return folder / name
