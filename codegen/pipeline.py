"""The whole compilation as one list of named stages.

    outputs -> limits     every tensor fits the target's address space (codegen/limits.py)
            -> prune ... prune_inlined (codegen/passes.py, target-neutral)
            -> lower      the backend's own graph passes (C: products onto the packed GEMM)
            -> partition  one graph per rank (the slot of codegen.partition: one rank today)
            -> schedule   the order of the nodes (codegen/schedule.py)
            -> storage    where every value lives, arena buffer requests (codegen/storage.py)
            -> plan       the arena plan: the Program (codegen/program.py, codegen/memory.py)
            -> render     the backend's sources (C: codegen/backends/c/emit.py)
            -> build      the backend's build into a folder (shared library, program, library)

``run(graph, options, until=...)`` runs the stages in order and returns a ``Compilation``
holding every stage's output by name; each output prints with ``describe(stage)``, and
``trace`` (a callable) sees each one as it is made. ``codegen.compile``, ``export``,
``compile_many`` and ``flowc inspect`` all run this list, so what inspect shows is what
compile builds.

>>> import graphdef as gd
>>> with gd.Graph("g") as g:
...     y = gd.relu(gd.placeholder("x", (4,)) * 2.0, name="y")
>>> c = run(g, Options(), until="plan")
>>> [s for s in c.results][-4:], c.program.arena_bytes
(['partition', 'schedule', 'storage', 'plan'], 0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import graphdef as gd
from graphdef.errors import FlowcError
from graphdef.ir import Graph

from . import backends, limits, passes, program, schedule, storage
from .target import Target


@dataclass(frozen=True)
class Options:
    """Everything a compilation depends on besides the graph.

    ``outputs``: names, Tensors or refs to compile (default: the graph's outputs);
    ``planner`` / ``time_limit``: the memory-plan algorithm (codegen.memory.plan) and its time;
    ``schedule``: the order algorithm (codegen.schedule.ALGORITHMS); ``cc`` / ``flags``: the C
    compiler and extra flags; ``name``: the model's C name; ``weights``: "auto", "c" or "blob";
    ``product``: what the build stage makes ("shared", "program", "library", "none";
    default: the target's own product); ``fold_limit``: the largest constant (bytes) that
    constant folding makes (larger results stay run-time steps).
    """

    target: Target = field(default_factory=Target)
    backend: str = "c"
    outputs: tuple | None = None
    planner: str = "best"
    time_limit: float = 5.0
    schedule: str = "memory"
    cc: str | None = None
    flags: tuple[str, ...] = ()
    name: str = "model"
    weights: str = "auto"
    product: str | None = None
    fold_limit: int = passes.FOLD_LIMIT

    def with_(self, **changes) -> Options:
        return replace(self, **changes)


@dataclass(frozen=True)
class Stage:
    """One named step: ``run(value, state) -> value``; ``state`` is the Compilation so far."""

    name: str
    run: Callable


def _graph_stage(fn):
    return lambda g, c: fn(g)


def _partition(graph: Graph, c: Compilation) -> Graph:
    """One rank: the graph as it is. Several ranks (placement, Send/Recv) come here."""
    return graph


def _schedule(graph: Graph, c: Compilation) -> schedule.Schedule:
    return schedule.make(graph, c.options.schedule)


def _storage(sched: schedule.Schedule, c: Compilation) -> storage.Storage:
    return storage.assign(
        sched, c.output_names, lambda node, ins: c.backend.scratch_bytes(node, ins, c.options)
    )


def _plan(st: storage.Storage, c: Compilation) -> program.Program:
    return limits.check_program(program.place(st, c.options.planner, c.options.time_limit), c.options.target)


def _render(prog: program.Program, c: Compilation):
    return c.backend.render(prog, c.options)


def _build(sources, c: Compilation):
    if c.folder is None:
        raise FlowcError("the build stage needs a folder (pipeline.run(..., folder=...))")
    product = c.options.product or c.options.target.spec.product
    return c.backend.build(sources, Path(c.folder), c.options.with_(product=product))


def stages(options: Options) -> list[Stage]:
    """The stages, in order, for these options (the target-neutral passes get the backend's
    legalizations)."""
    backend = backends.get(options.backend)
    out = [
        Stage("outputs", lambda g, c: passes.select_outputs(g, c.options.outputs)),
        Stage("limits", lambda g, c: limits.check_graph(g, c.options.target)),
    ]
    out += [
        Stage(name, _graph_stage(fn)) for name, fn in passes.pipeline(backend.LEGALIZE, options.fold_limit)
    ]
    out += [
        Stage("lower", lambda g, c: c.backend.lower(g, c.options)),
        Stage("partition", _partition),
        Stage("schedule", _schedule),
        Stage("storage", _storage),
        Stage("plan", _plan),
        Stage("render", _render),
        Stage("build", _build),
    ]
    return out


@dataclass
class Compilation:
    """The outputs of the stages run so far, by name, in order."""

    graph: Graph  # the input
    options: Options
    results: dict[str, object] = field(default_factory=dict)
    folder: Path | None = None

    @property
    def backend(self):
        return backends.get(self.options.backend)

    @property
    def output_names(self) -> list[str]:
        return [str(r) for r in self.results["outputs"].declared_outputs]

    @property
    def lowered(self) -> Graph:
        """The graph the schedule orders (after partition)."""
        return self.results["partition"]

    @property
    def program(self) -> program.Program:
        return self.results["plan"]

    @property
    def sources(self):
        return self.results["render"]

    def graphs(self) -> list[tuple[str, Graph]]:
        """(stage, graph) for every stage that made a graph."""
        return [(k, v) for k, v in self.results.items() if isinstance(v, Graph)]

    def describe(self, stage: str) -> str:
        """A stage's output as text: a graph's summary, the schedule, storage, plan, sources."""
        if stage not in self.results:
            raise FlowcError(f"stage '{stage}' has not run; ran: {', '.join(self.results)}")
        value = self.results[stage]
        if isinstance(value, Graph):
            return value.summary()
        return value.describe()


def run(
    graph: Graph,
    options: Options | None = None,
    until: str = "render",
    trace: Callable[[str, object], None] | None = None,
    check: bool = False,
    folder=None,
) -> Compilation:
    """Run the stages up to and including ``until``; ``check``: verify every graph stage's
    output; ``trace(name, value)`` sees each output; ``folder``: where "build" builds."""
    options = options or Options()
    c = Compilation(graph, options, folder=None if folder is None else Path(folder))
    names = [s.name for s in stages(options)]
    if until not in names:
        raise FlowcError(f"unknown stage '{until}'; stages: {', '.join(names)}")
    if check:
        gd.verify(graph)
    value = graph
    for stage in stages(options):
        value = stage.run(value, c)
        if check and isinstance(value, Graph):
            gd.verify(value)
        c.results[stage.name] = value
        if trace is not None:
            trace(stage.name, value)
        if stage.name == until:
            break
    return c
