"""What every backend is: the ``Backend`` protocol (the sources it renders and what its build
made, ``Sources`` and ``Built``, are the render core's: codegen/render/).

A backend is a module (``codegen.backends.get(name)``) with the members of ``Backend``; the
pipeline (codegen/pipeline.py) calls nothing else. ``BORROWS`` declares, per other backend,
the modules of it this one imports (the CUDA backend runs the C backend's bodies for the
steps it has no kernel for); tests/codegen/test_backends.py checks every backend against the
protocol and every cross-backend import against ``BORROWS``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..render.sources import Built, Sources


@runtime_checkable
class Backend(Protocol):
    """The members of a backend module, as the pipeline's stages call them."""

    NAME: str
    MULTI_RANK: bool  # renders partitions (render_ranks): one SPMD program over MPI ranks
    LEGALIZE: Mapping  # op -> rewrite into the forms its kernels take (the decompose pass)
    BORROWS: Mapping[str, tuple[str, ...]]  # other backend -> the modules of it imported here

    def lower(self, graph, options):
        """Its own graph passes (the "lower" stage) -> Graph."""

    def supports(self, op: str) -> bool:
        """Whether it has code for a step of ``op`` (flowc inspect lists the others)."""

    def scratch_bytes(self, node, ins, options) -> int:
        """Step-local memory its step for ``node`` needs (planned into the arena)."""

    def render(self, program, options) -> Sources:
        """A Program as sources (the "render" stage)."""

    def render_ranks(self, programs, partition, output_names, options) -> Sources:
        """A partition's Programs as one SPMD program over MPI ranks."""

    def render_trainer(self, programs, options, plan=None) -> Sources:
        """A training binary's Programs (the step's, the inference model's or None) as one
        program that trains (codegen/training.py), or an UnsupportedError naming why not;
        ``plan``: a pipeline-parallel one's stages (codegen/pipeline_parallel.py), ``programs``
        then its functions' and the inference model's."""

    def build(self, sources: Sources, folder: Path, options) -> Built:
        """The sources written into ``folder`` and built as ``options.product``."""

    def bundle(self, sources: list[Sources], folder: Path, options) -> Built:
        """Several models' sources built into one shared library, folder/libbundle.so
        (compile_many: bulk tests in one compiler call)."""


def mismatches(module) -> list[str]:
    """How ``module`` differs from ``Backend``: missing members, and functions whose
    parameters are not the protocol's (by name, in order); empty when it implements it."""
    out = []
    for name in sorted({*Backend.__annotations__, *_methods()}):
        if not hasattr(module, name):
            out.append(f"{module.__name__} has no {name}")
    for name, want in _methods().items():
        got = getattr(module, name, None)
        if callable(got):
            params = list(inspect.signature(got).parameters)
            if params != want:
                out.append(f"{module.__name__}.{name}({', '.join(params)}): expected ({', '.join(want)})")
    return out


def _methods() -> dict[str, list[str]]:
    return {
        name: list(inspect.signature(fn).parameters)[1:]
        for name, fn in vars(Backend).items()
        if callable(fn) and not name.startswith("_")
    }
