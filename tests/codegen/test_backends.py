"""The backend contract (codegen/backends/contract.py) and the import structure of codegen:
every backend implements the protocol, imports from another backend only what its BORROWS
declares, and no two modules of codegen import each other, directly or around a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from codegen import backends
from codegen.backends import contract

ROOT = Path(__file__).resolve().parents[2]
CODEGEN = ROOT / "codegen"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_level_only: bool) -> set[str]:
    """The modules of codegen that ``path`` imports (``from . import x`` counts x when x is a
    module), at module level only or anywhere."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                out.add(sub if MODULES.get(sub) else mod)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m in MODULES and m != here}


MODULES = {module_name(p): p for p in CODEGEN.rglob("*.py")}


@pytest.mark.parametrize("name", backends.KNOWN)
def test_every_backend_implements_the_protocol(name):
    module = backends.get(name)
    assert contract.mismatches(module) == []
    assert isinstance(module, contract.Backend)


def test_the_protocol_check_names_what_is_missing_or_misspelled():
    import types

    fake = types.ModuleType("fake")
    fake.NAME, fake.MULTI_RANK, fake.LEGALIZE, fake.BORROWS = "fake", False, {}, {}
    for fn in ("lower", "supports", "scratch_bytes", "render_ranks", "render_trainer", "build", "bundle"):
        setattr(fake, fn, getattr(backends.get("c"), fn))
    fake.render = lambda program: None
    assert contract.mismatches(fake) == ["fake.render(program): expected (program, options)"]
    del fake.build
    assert "fake has no build" in contract.mismatches(fake)


@pytest.mark.parametrize("name", backends.KNOWN)
def test_a_backend_imports_from_another_only_what_it_declares(name):
    borrows = backends.get(name).BORROWS
    declared = {f"codegen.backends.{other}.{m}" for other, mods in borrows.items() for m in mods}
    package = f"codegen.backends.{name}"
    taken = set()
    for path in (CODEGEN / "backends" / name).rglob("*.py"):
        for mod in imports(path, top_level_only=False):
            other = mod.split(".")[2] if mod.startswith("codegen.backends.") and mod.count(".") >= 2 else None
            if other in backends.KNOWN and not mod.startswith(package):
                taken.add(mod if mod in declared or mod.count(".") > 2 else f"{mod} (the package)")
    assert sorted(taken - declared) == []
    assert sorted(declared - taken) == [], "declared but not imported"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_in_codegen():
    """Module-level imports (a package's __init__ re-exporting its modules is not a circle:
    the edge from a module to its own package is left out)."""
    edges = {}
    for name, path in MODULES.items():
        edges[name] = {m for m in imports(path, top_level_only=True) if not name.startswith(m + ".")}
    assert cycles(edges) == []


def test_the_circle_check_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
