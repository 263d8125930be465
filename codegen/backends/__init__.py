"""Backends: how a Program becomes sources and built code for one kind of target.

A backend is a module with:

- ``NAME``;
- ``LEGALIZE``: op -> rewrite into the forms its kernels take (applied by the shared
  ``decompose`` pass);
- ``lower(graph, options) -> Graph``: its own graph passes (the pipeline's "lower" stage);
- ``supports(op) -> bool``: whether it has code for a step of ``op`` (what ``flowc inspect``
  lists as unsupported);
- ``scratch_bytes(node, in_types, options) -> int``: step-local memory its kernel for a node
  needs (the storage stage plans it into the arena);
- ``render(program, options) -> Sources`` and ``build(sources, folder, options) -> Built``;
- ``MULTI_RANK``: whether it renders partitions, with ``render_ranks(programs, partition,
  output_names, options) -> Sources`` (one SPMD program over MPI ranks).

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
