"""What every backend is and gives: the ``Backend`` protocol, the sources it renders
(``Sources``), what its build made (``Built``) and the template environment all backends share.

A backend is a module (``codegen.backends.get(name)``) with the members of ``Backend``; the
pipeline (codegen/pipeline.py) calls nothing else. ``BORROWS`` declares, per other backend,
the modules of it this one imports (the CUDA backend runs the C backend's bodies for the
steps it has no kernel for); tests/codegen/test_backends.py checks every backend against the
protocol and every cross-backend import against ``BORROWS``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import jinja2

VERSION = "0.1.0"
ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
RUNTIME = ROOT / "runtime_c"  # the C every backend's output includes (runtime_c/README.md)


@functools.cache
def environment() -> jinja2.Environment:
    """The Jinja environment of every backend's templates, built once per process: Jinja
    compiles each template on first use and keeps it (most of a render's time otherwise).
    Renders only read it (no globals or filters are set per render)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


@dataclass
class Sources:
    """Generated files (name -> text or bytes) and the metadata written as metadata.json."""

    files: dict[str, str | bytes] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    c_files: list[str] = field(default_factory=list)  # what the model's build compiles (not main.c)
    cu_files: list[str] = field(default_factory=list)  # CUDA sources of the build (nvcc)
    api: object | None = None  # the entry points (codegen/backends/c/api.py EntryPoints)
    context: dict = field(default_factory=dict)  # what the templates saw (main.c's ``m``)

    def describe(self) -> str:
        sizes = ", ".join(f"{n} ({len(c)} B)" for n, c in self.files.items())
        return f"sources: {sizes}"


@dataclass
class Built:
    """What the build stage made in its folder: ``product`` (shared, program, library or
    none), the file, and for a microcontroller library its footprint."""

    folder: Path
    product: str
    path: Path | None = None
    footprint: object | None = None
    extra: dict = field(default_factory=dict)

    def describe(self) -> str:
        what = f"{self.product} {self.path}" if self.path else "sources only"
        return f"build: {what}" + (f"\n  {self.footprint.line()}" if self.footprint else "")


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
