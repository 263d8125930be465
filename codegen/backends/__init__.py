"""Backends: how a Program becomes sources and built code for one kind of target.

A backend is a module with the members of ``contract.Backend`` (NAME, LEGALIZE, lower,
supports, scratch_bytes, render, render_ranks, build, MULTI_RANK, and BORROWS: the modules of
another backend it imports). What every backend's rendering shares (tensor tables, weights,
pointers, entry points, C spellings, op plans, work splits, ``Sources``, ``Built``, the
template environment) is the render core, codegen/render/.

Passes, partition, schedule and memory planning are shared (codegen/*.py); each backend
keeps its op table, templates (templates/<name>/) and runtime. Today: ``c`` and ``cuda``.
"""

from __future__ import annotations

import importlib

from graphdef.errors import UnsupportedError

KNOWN = ("c", "cuda")


def get(name: str):
    """The backend module called ``name``."""
    if name not in KNOWN:
        from ..target import ARCHES, arch_name

        arch = arch_name(name)
        hint = f"; for that CPU use --arch {arch} (--target picks the backend)" if arch in ARCHES else ""
        known = ", ".join(KNOWN)
        raise UnsupportedError(f"--target {name} is not available in this version (use {known}){hint}")
    return importlib.import_module(f"{__name__}.{name}")
