"""Compile C snippets against runtime_c and load them with cffi (ABI mode).

``c_lib(cdef, source)`` builds ``source`` into a shared library with the strict flags the
generated code must pass (-std=c99 -Wall -Wextra -Werror), caches it by content hash for
the session, and returns the cffi ``(ffi, lib)`` pair.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
FLAGS = ["-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"]


def pytest_collection_modifyitems(items):
    for item in items:
        if "runtime_c" in str(item.fspath):
            item.add_marker(pytest.mark.c)
            if CC is None:
                item.add_marker(pytest.mark.skip(reason="no C compiler (set CC or install gcc)"))


@pytest.fixture(scope="session")
def c_lib(tmp_path_factory):
    import cffi

    root = tmp_path_factory.mktemp("clib")
    cache: dict[str, tuple] = {}

    def build(cdef: str, source: str, extra_flags=()):
        key = hashlib.sha256((cdef + source + repr(extra_flags)).encode()).hexdigest()[:16]
        if key not in cache:
            src = root / f"k{key}.c"
            lib = root / f"k{key}.so"
            src.write_text(source)
            cmd = [CC, *FLAGS, *extra_flags, f"-I{RUNTIME}", str(src), "-o", str(lib), "-lm"]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode:
                raise AssertionError(f"C build failed: {' '.join(cmd)}\n{res.stderr[:4000]}")
            ffi = cffi.FFI()
            ffi.cdef(cdef)
            cache[key] = (ffi, ffi.dlopen(str(lib)))
        return cache[key]

    return build
