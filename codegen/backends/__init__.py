"""Backends: how a Program becomes sources and built code for one kind of target.

A backend is a module with the members of ``contract.Backend`` (NAME, LEGALIZE, lower,
supports, scratch_bytes, render, render_ranks, build, MULTI_RANK, and BORROWS: the modules of
another backend it imports); ``contract.py`` also holds what they share: ``Sources``,
``Built`` and the template environment.

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
        raise UnsupportedError(f"--target {name} is not available in this version (use {', '.join(KNOWN)})")
    return importlib.import_module(f"{__name__}.{name}")
