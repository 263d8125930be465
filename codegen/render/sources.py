"""What every backend's rendering shares: the version, where templates and the C runtime
live, the one template environment, the sources a render makes (``Sources``) and what a
build made of them (``Built``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

VERSION = "0.1.0"
ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
RUNTIME = ROOT / "runtime_c"  # the C every backend's output includes (runtime_c/README.md)


class _Compiled(jinja2.FileSystemBytecodeCache):
    """The templates compiled by an earlier process (a third of a `flowc compile`'s Python time
    before the first compiler starts, otherwise), in flowc's cache folder; each one is checked
    against its template's text, written atomically, and a folder that cannot be written is
    passed over (the template is compiled in this process)."""

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _compiled_templates() -> jinja2.BytecodeCache | None:
    from ..cachedir import cache_root

    folder = cache_root() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _Compiled(str(folder))


@functools.cache
def environment() -> jinja2.Environment:
    """The Jinja environment of every backend's templates, built once per process: Jinja
    compiles each template on first use and keeps it (most of a render's time otherwise), and
    keeps the compiled code in the cache folder for the next process (``_Compiled``).
    Renders only read it (no globals or filters are set per render)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        bytecode_cache=_compiled_templates(),
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
