"""The whole compilation as one list of named stages.

   (split)               a training binary's two models (``train``; codegen/training.py):
                          each later stage up to plan gives one result per model (``Parts``)
    outputs -> limits     every tensor fits the target's address space (codegen/limits.py)
            -> prune ... prune_inlined (codegen/passes.py, target-neutral)
            -> lower      the backend's own graph passes (C: products onto the packed GEMM)
            -> partition  one graph per MPI rank with Send/Recv steps (codegen/partition.py;
                          the graph as it is without ``ranks``); each later stage then
                          gives one result per rank (``PerRank``)
            -> schedule   the order of the nodes (codegen/schedule.py; a rank's graph is in
                          its run order already)
            -> storage    where every value lives, arena buffer requests (codegen/storage.py)
            -> plan       the arena plan: the Program (codegen/program.py, codegen/memory/)
            -> render     the backend's sources (C: codegen/backends/c/emit.py; a partition:
                          one SPMD program, render_ranks; a training binary: render_trainer)
            -> build      the backend's build into a folder (shared library, program, library)

``run(graph, options, until=...)`` runs the stages in order and returns a ``Compilation``
holding every stage's output by name; each output prints with ``describe(stage)``, and
``trace`` (a callable) sees each one as it is made. ``codegen.compile``, ``export``,
``export_trainer``, ``compile_many`` and ``flowc inspect`` all run this list, so what inspect
shows is what compile builds.

>>> import graphdef as gd
>>> with gd.Graph("g") as g:
...     y = gd.relu(gd.placeholder("x", (4,)) * 2.0, name="y")
>>> c = run(g, Options(), until="plan")
>>> [s for s in c.results][-4:], c.program.arena_bytes
(['partition', 'schedule', 'storage', 'plan'], 0)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import graphdef as gd
from graphdef.errors import FlowcError
from graphdef.ir import Graph

from . import (
    backends,
    data_parallel,
    limits,
    partition,
    passes,
    pipeline_parallel,
    program,
    schedule,
    storage,
    training,
)
from .target import Target

PLACEMENTS = ("auto", *partition.ALGORITHMS)


@dataclass(frozen=True)
class Options:
    """Everything a compilation depends on besides the graph.

    ``outputs``: names, Tensors or refs to compile (default: the graph's outputs);
    ``planner`` / ``time_limit``: the memory-plan algorithm (codegen.memory.plan) and its time;
    ``schedule``: the order algorithm (codegen.schedule.ALGORITHMS); ``cc`` / ``flags``: the C
    compiler and extra flags; ``name``: the model's C name; ``weights``: "auto", "c" or "blob";
    ``product``: what the build stage makes ("shared", "program", "library", "none";
    default: the target's own product); ``fold_limit``: the largest constant (bytes) that
    constant folding makes (larger results stay run-time steps); ``allreduce``: a training
    step of a data-parallel binary, its gradients averaged over MPI ranks with this wire dtype
    ("float32" or "float16"; codegen/data_parallel.py), None: one process; ``freeze``: variables
    that nothing assigns become constants (False: they stay in the state, which a checkpoint
    can fill: the inference model of a training binary); ``sm``: the GPU architectures a CUDA
    build compiles for (compute capability x 10), ``precision`` its arithmetic (fp32, tf32, bf16,
    fp16: codegen/backends/cuda/precision.py); ``max_ram`` / ``max_flash``: the bytes a project
    folder's model may need (exports.write refuses a model over them; over ranks ``max_ram``
    bounds each rank's arena); ``trainer``: the train op (a name) of a training
    binary (codegen/training.py): the step and the inference model, each through the stages,
    rendered together (``allreduce`` then says whether it trains data parallel over MPI).
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
    ranks: int | None = None
    placement: str = "auto"
    compress: str | None = None
    max_ram: int | None = None
    max_flash: int | None = None
    alpha: float = partition.ALPHA
    beta: float = partition.BETA
    allreduce: str | None = None
    bucket_bytes: int = data_parallel.BUCKET_BYTES
    accumulate: bool = False  # the training step accumulates gradients (the driver's --accumulate K)
    run_flops: float | None = None  # the cost model's one-core rates (None: schedule.RUN_FLOPS, ...)
    run_bandwidth: float | None = None
    freeze: bool = True
    sm: tuple[int, ...] = (80, 90)
    precision: str = "fp32"
    trainer: str | None = None
    shards: int | None = (
        None  # a data-parallel training binary over this many ranks, its optimizer state sharded
    )
    lengths: tuple = ()  # (input, axis): inputs of run-time length up to their compiled one

    def with_(self, **changes) -> Options:
        return replace(self, **changes)


@dataclass(frozen=True)
class Stage:
    """One named step: ``run(value, state) -> value``; ``state`` is the Compilation so far."""

    name: str
    run: Callable


def _graph_stage(fn):
    return lambda g, c: fn(g)


class PerRank(tuple):
    """A stage's output for each rank of a partition, in rank order."""

    def describe(self) -> str:
        return "\n".join(f"rank {r}: {v.describe()}" for r, v in enumerate(self))


class Parts(tuple):
    """A stage's output for each model of a training binary: (the training step's, the
    inference model's or None when the graph has no other outputs)."""

    LABELS = ("training step", "inference model")

    def labels(self) -> tuple[str, ...]:
        return self.LABELS

    def describe(self) -> str:
        return "\n".join(
            f"{label}: {v.summary() if isinstance(v, Graph) else v.describe()}"
            for label, v in zip(self.labels(), self)
            if v is not None
        )

    @property
    def graphs(self) -> list[Graph]:
        return [v for v in self if isinstance(v, Graph)]


class StageParts(Parts):
    """A pipeline-parallel training binary's models (codegen/pipeline_parallel.py): the forward,
    backward and update of each stage, then the inference model (or None)."""

    def labels(self) -> tuple[str, ...]:
        kinds = pipeline_parallel.KINDS
        return (*(f"{kinds[i % 3]} of stage {i // 3}" for i in range(len(self) - 1)), "inference model")


def part_options(options: Options) -> tuple[Options, Options]:
    """The options of a training binary's two models: the step ``<name>_train`` (with the
    allreduce of a data-parallel build), the inference model ``<name>`` (its variables stay
    state, which a checkpoint fills)."""
    one = options.with_(trainer=None, product="none")
    return one.with_(name=f"{options.name}_train"), one.with_(allreduce=None, freeze=False)


def _split(graph: Graph, c: Compilation) -> Parts:
    step, infer = training.split(graph, c.options.trainer)
    if c.options.ranks is not None or c.options.shards is not None:  # each stage's (shard's) functions
        o = c.options
        c.plan = plan = pipeline_parallel.split(step, o.trainer, o.ranks or 1, shards=o.shards)
        one, infer_options = part_options(c.options.with_(ranks=None, shards=None))
        opts = [one.with_(name=f"{c.options.name}_{f.label}") for f in plan.functions] + [infer_options]
        graphs = [f.graph for f in plan.functions] + [infer]
        c.parts = [Compilation(g, o) if g is not None else None for g, o in zip(graphs, opts)]
        return StageParts(graphs)
    if c.options.accumulate:
        step = data_parallel.accumulate(step, c.options.trainer)
    c.parts = [
        Compilation(g, o) if g is not None else None for g, o in zip((step, infer), part_options(c.options))
    ]
    return Parts((step, infer))


def placement(graph: Graph, options: Options) -> str:
    """The placement algorithm ``options`` ask for ("auto": annotated when some node carries a
    rank, else pipeline)."""
    if options.placement not in PLACEMENTS:
        raise FlowcError(f"unknown placement '{options.placement}'; known: {', '.join(PLACEMENTS)}")
    if options.placement != "auto":
        return options.placement
    return "annotated" if any(partition.annotated_rank(n) is not None for n in graph.nodes) else "pipeline"


def _partition(graph: Graph, c: Compilation):
    """Without ``ranks``: the graph as it is. With: a codegen.partition.Partition, its ranks'
    graphs in the order of the whole graph's schedule."""
    o = c.options
    if o.ranks is None:
        return graph
    if not c.backend.MULTI_RANK or o.target.spec.product != "program":
        raise FlowcError(
            f"--ranks builds MPI programs for Linux machines (host, aarch64-linux, ...); not for "
            f"{o.target.arch} with backend {o.backend}"
        )
    algorithm = placement(graph, o)
    partition.check_ranks(graph, o.ranks, algorithm)  # before the schedule: refused in one line
    order = schedule.schedule(graph, o.schedule)
    return partition.split(graph, o.ranks, algorithm, order, o.compress, o.max_ram, o.alpha, o.beta)


def _tensor(graph: Graph, c: Compilation) -> Graph:
    """``--placement tensor``: the large products split by columns over the ranks
    (partition.tensor_split), before the backend lowers them."""
    o = c.options
    if o.ranks is None or placement(graph, o) != "tensor":
        return graph
    partition.check_rank_count(o.ranks)
    return partition.tensor_split(graph, o.ranks, o.alpha, o.beta)


def _ranks_mean(graph: Graph, c: Compilation) -> Graph:
    """One process: the gradients' cross-rank means are the gradients themselves."""
    return graph if c.options.allreduce is not None else data_parallel.single_process(graph)


def _allreduce(graph: Graph, c: Compilation) -> Graph:
    """A data-parallel training step: its gradient means fused into allreduce buckets (after the
    backend's lowering, which sees them as the identity they are on one rank)."""
    if c.options.allreduce is None:
        return graph
    return data_parallel.fuse(graph, c.options.allreduce, c.options.bucket_bytes)


def _schedule(value, c: Compilation):
    if isinstance(value, partition.Partition):
        return PerRank(
            schedule.Schedule(g, g.nodes, f"{value.algorithm} partition, run order") for g in value.graphs
        )
    made = schedule.make(value, c.options.schedule)
    if c.options.allreduce is None:
        return made
    return schedule.Schedule(value, tuple(data_parallel.overlap(made.order, value)), made.algorithm)


def _storage(value, c: Compilation):
    def assign(sched, names):
        return storage.assign(sched, names, lambda node, ins: c.backend.scratch_bytes(node, ins, c.options))

    if isinstance(value, PerRank):
        if c.options.lengths:
            raise FlowcError("inputs of run-time length are not supported over MPI ranks yet")
        part = c.results["partition"]
        names = c.output_names
        return PerRank(assign(s, [names[k] for k in part.output_indices(r)]) for r, s in enumerate(value))
    st = assign(value, c.output_names)
    st.lengths = check_lengths(st.graph, c.options.lengths)
    return st


def check_lengths(graph: Graph, lengths) -> dict[str, int]:
    """``lengths`` ((input, axis) pairs) checked against the graph's inputs: input -> axis. The
    axes before a run-time length must be 1 (the real values then come first, the padding after);
    its length input, ``<input>_length`` if the graph has one, an int64 scalar."""
    out = {}
    for name, axis in lengths:
        if name not in graph.inputs:
            raise FlowcError(f"run-time length of '{name}': the model has no input of that name")
        t = graph.node(name).outputs[0]
        if not 0 <= axis < t.rank or any(d != 1 for d in t.shape[:axis]):
            raise FlowcError(
                f"run-time length of input '{name}' ({t}) on axis {axis}: the axis must exist and the axes "
                "before it be 1"
            )
        other = f"{name}_length"
        if other in graph.inputs and graph.node(other).outputs[0] != gd.TensorType((), "int64"):
            got = graph.node(other).outputs[0]
            raise FlowcError(f"input '{other}' gets the length of '{name}': it must be int64[], not {got}")
        out[name] = axis
    return out


def _plan(value, c: Compilation):
    o = c.options

    def plan(st):
        return limits.check_program(program.place(st, o.planner, o.time_limit), o.target)

    if not isinstance(value, PerRank):
        return plan(value)
    programs = PerRank(plan(st) for st in value)
    if o.max_ram is not None:
        for r, p in enumerate(programs):
            limits.check_rank_ram(p, r, o.max_ram)
    return programs


def _render(value, c: Compilation):
    if isinstance(value, Parts):
        if c.plan is not None:
            return c.backend.render_trainer(list(value), c.options, plan=c.plan)
        return c.backend.render_trainer(list(value), c.options)
    if isinstance(value, PerRank):
        return c.backend.render_ranks(list(value), c.results["partition"], c.output_names, c.options)
    return c.backend.render(value, c.options)


def _build(sources, c: Compilation):
    if c.folder is None:
        raise FlowcError("the build stage needs a folder (pipeline.run(..., folder=...))")
    product = c.options.product or c.options.target.spec.product
    return c.backend.build(sources, Path(c.folder), c.options.with_(product=product))


def stages(options: Options) -> list[Stage]:
    """The stages, in order, for these options (the target-neutral passes get the backend's
    legalizations)."""
    backend = backends.get(options.backend)
    out = [Stage("split", _split)] if options.trainer is not None else []
    out += [
        Stage("outputs", lambda g, c: passes.select_outputs(g, c.options.outputs)),
        Stage("limits", lambda g, c: limits.check_graph(g, c.options.target)),
        Stage("ranks_mean", _ranks_mean),
    ]
    out += [
        Stage(name, _graph_stage(fn))
        for name, fn in passes.pipeline(backend.LEGALIZE, options.fold_limit, options.freeze)
    ]
    out += [
        Stage(
            "lower",
            lambda g, c: _allreduce(passes.merge_constants(c.backend.lower(_tensor(g, c), c.options)), c),
        ),
        Stage("partition", _partition),
        Stage("schedule", _schedule),
        Stage("storage", _storage),
        Stage("plan", _plan),
        Stage("render", _render),
        Stage("build", _build),
    ]
    return out


_observers: list[Callable[[str], None]] = []


@contextlib.contextmanager
def observe(fn: Callable[[str], None]):
    """Inside, ``fn(stage name)`` is called as each stage of any ``run`` starts (the CLI's
    progress line)."""
    _observers.append(fn)
    try:
        yield
    finally:
        _observers.remove(fn)


def prefetch(options: Options) -> None:
    """Start the work a build with these options can do before its graph is known (the C
    backend: compiling the tile kernels into the object cache), on a core the Python stages
    leave idle; a backend without such work (no ``prefetch``) does nothing. ``run`` calls it
    for a build; a caller that has the options before the graph (the CLI, before it reads the
    model file) can call it sooner."""
    early = getattr(backends.get(options.backend), "prefetch", None)
    if early is not None and options.product != "none":
        early(options)


NEUTRAL = "prune_inlined"  # the last target-neutral pass: what every backend's lowering starts from


def optimize(graph: Graph, outputs=None, options: Options | None = None, check: bool = True) -> Graph:
    """The graph after the target-neutral passes of ``run`` (outputs selected, folded,
    decomposed with the backend's legalizations, fused), each result verified when ``check``:
    the one pass runner, for callers that stop before the backend's lowering."""
    if outputs is not None:
        outputs = (outputs,) if isinstance(outputs, str) else tuple(outputs)
        options = (options or Options()).with_(outputs=outputs)
    return run(graph, options or Options(), until=NEUTRAL, check=check).results[NEUTRAL]


@dataclass
class Compilation:
    """The outputs of the stages run so far, by name, in order."""

    graph: Graph  # the input
    options: Options
    results: dict[str, object] = field(default_factory=dict)
    folder: Path | None = None
    parts: list | None = None  # a training binary's: each model's own Compilation (None: none)
    plan: object = None  # a pipeline-parallel training binary's stages (pipeline_parallel.Plan)

    @property
    def backend(self):
        return backends.get(self.options.backend)

    @property
    def output_names(self) -> list[str]:
        return [str(r) for r in self.results["outputs"].declared_outputs]

    @property
    def lowered(self) -> Graph:
        """The graph the schedule orders, before partition (the whole graph when partitioned)."""
        value = self.results["partition"]
        return value.graph if isinstance(value, partition.Partition) else value

    @property
    def partition(self) -> partition.Partition | None:
        """The partition over ranks, None for one process."""
        value = self.results.get("partition")
        return value if isinstance(value, partition.Partition) else None

    @property
    def program(self) -> program.Program:
        return self.results["plan"]

    @property
    def sources(self):
        return self.results["render"]

    def graphs(self) -> list[tuple[str, Graph]]:
        """(stage, graph) for every stage that made a graph (a partition: one per rank)."""
        out = []
        for k, v in self.results.items():
            if isinstance(v, Graph):
                out.append((k, v))
            elif isinstance(v, partition.Partition):
                out += [(f"{k} rank {r}", g) for r, g in enumerate(v.graphs)]
        return out

    def step(self, stage: Stage, value):
        """The stage of ``stage``'s name, as this compilation's options make it (a training
        binary's models have options of their own: ``part_options``), run on ``value``; its
        result kept."""
        mine = next(s for s in stages(self.options) if s.name == stage.name)
        self.results[stage.name] = out = mine.run(value, self)
        return out

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
    if options.ranks is not None:  # a count no graph could use is refused before any stage runs
        partition.check_rank_count(options.ranks)
    c = Compilation(graph, options, folder=None if folder is None else Path(folder))
    names = [s.name for s in stages(options)]
    if until not in names:
        raise FlowcError(f"unknown stage '{until}'; stages: {', '.join(names)}")
    if check:
        gd.verify(graph)
    if until == "build":
        prefetch(options)
    with schedule.run_rates(options.run_flops, options.run_bandwidth):
        return _run_stages(c, graph, options, until, trace, check)


def _run_stages(c: Compilation, graph: Graph, options: Options, until: str, trace, check) -> Compilation:
    value = graph
    for stage in stages(options):
        for observer in list(_observers):
            observer(stage.name)
        if isinstance(value, Parts) and stage.name != "render":  # each model of a training binary
            value = Parts(None if v is None else p.step(stage, v) for v, p in zip(value, c.parts))
        else:
            value = stage.run(value, c)
        if check:
            for g in [value] if isinstance(value, Graph) else getattr(value, "graphs", []):
                gd.verify(g)
        c.results[stage.name] = value
        if trace is not None:
            trace(stage.name, value)
        if stage.name == until:
            break
    return c
