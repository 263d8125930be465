"""The flowc command line: compile a model to a project folder and binary, or inspect it.

    flowc compile MODEL -o OUT --name NAME [--arch ARCH] [--target c|cuda [--sm 80,90]
                  [--precision fp32|tf32|bf16|fp16]] [--threads N] [--no-build]
                  [--max-ram BYTES] [--max-flash BYTES]
                  [--ranks N [--placement auto|annotated|pipeline|greedy|tensor] [--compress fp16|bf16]]
                  [--train [OP] [--no-mpi] [--compress fp16] [--bucket BYTES] [--accumulate]
                   [--ranks N | --shard R]]
    flowc quantize MODEL.onnx --calibrate DATA.npz -o OUT.onnx [--percentile P]
    flowc inspect MODEL [--arch ARCH] [--target c] [--threads N] [--stage STAGE] [--svg FILE]
                  [--ranks N [--placement P] [--compress C] [--max-ram BYTES] [--microbatches K]
                   [--alpha-us US] [--beta-gbps GB/S]] [--gflops G] [--mem-gbps M]
                  [--train [OP] [--ranks R (data parallel) | --stages N (pipeline parallel)]]
    (both take --shape NAME=D0xD1x.. and --value NAME=V0,V1,..|FILE.npy for ONNX inputs, and
    --loop-bound N: the most iterations of an ONNX Loop whose length is only known at run time)

--ranks N splits the graph over N MPI ranks (codegen/partition.py) into one program that
``mpiexec -n N OUT/NAME`` runs; inspect then prints the placement, the bytes sent on each cut
edge, each rank's arena and the step time the cost model and the alpha-beta transfer model
predict.

inspect runs the same pipeline as compile (codegen/pipeline.py) with the same options and
prints what it builds: stages, schedule and memory plan; --stage NAME prints one stage's
output in full (a graph, the schedule, the storage, the plan or the sources).

MODEL is an .onnx file (``--shape NAME=1x3x224x224`` fixes symbolic input dimensions), a
saved graph (.flowc), or a Python file and function returning a Graph
(``samples/digits.py:build``). Errors print one line and exit 1.

ARCH is host (default), a Linux phone or board (aarch64-linux, cortex-a76-linux: AArch64 with
the dot-product extension, armv7-linux, riscv64-linux: a static binary from Debian's cross
compiler) or a microcontroller (cortex-m0plus, cortex-m4,
cortex-m7: lib<NAME>.a + <NAME>.h, and a flash/RAM footprint report). --max-ram / --max-flash
(e.g. 64K) refuse a model that does not fit.

--train [OP] (default OP: "train", what gd.train's minimize names its train op) builds the
training binary (codegen/backends/c/trainer.py): ``OUT/NAME train --data train.npz --epochs E
--checkpoint ck.npz`` trains, ``mpiexec -n R OUT/NAME train ...`` data-parallel (built with
MPI's compiler when one is found; --no-mpi: without), and ``OUT/NAME --checkpoint ck.npz --in
... --out-dir ...`` runs the graph's other outputs with the trained variables. --compress fp16
sends the gradients between ranks as float16. --train --ranks N builds a pipeline-parallel
training binary instead (codegen/pipeline_parallel.py): the step cut into N stages, one a rank,
``mpiexec -n N OUT/NAME train --microbatches K [--schedule 1f1b|gpipe] ...``; ``flowc inspect
--train --stages N`` shows the cut. With --target cuda both models run on one GPU
(one process), the variables kept there and copied to the host for each checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from graphdef.errors import FlowcError, UnsupportedError, printable
from graphdef.ir import Graph
from graphdef.registry import SOURCE, get_op

from . import backends, control, exports, memory, outdir, partition, pipeline, schedule
from .compiled_cuda import parse_sm
from .model_files import check_shapes, load_model, parse_lengths, parse_shapes, parse_values
from .target import ARCHES, Target, parse_bytes


class Progress:
    """One line on a terminal while a compile runs past ``after`` seconds: the stage under way
    and the time so far, redrawn in place every ``every`` seconds and erased at the end; nothing
    where ``stream`` is not a terminal (logs and pipes get the summary line only)."""

    def __init__(self, what: str, stream=None, after: float = 2.0, every: float = 0.5):
        self.what, self.stream, self.after, self.every = what, stream or sys.stderr, after, every
        self.stage = "starting"
        self.shown = False
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.stream.isatty():
            self._t0 = time.perf_counter()
            self._thread = threading.Thread(target=self._draw, daemon=True)
            self._thread.start()
        self._observing = pipeline.observe(self._saw)
        self._observing.__enter__()
        return self

    def _saw(self, stage: str) -> None:
        self.stage = stage

    def _draw(self) -> None:
        if self._stop.wait(self.after):
            return
        while True:
            line = f"flowc: {self.what}: {self.stage} ({time.perf_counter() - self._t0:.0f} s)"
            self.stream.write("\r" + line + "\x1b[K")
            self.stream.flush()
            self.shown = True
            if self._stop.wait(self.every):
                return

    def __exit__(self, *exc) -> None:
        self._observing.__exit__(*exc)
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()


def cmd_compile(args) -> int:
    check_ranks(args)
    options = exports.project_options(  # every choice checked before the model loads
        name=args.name, target=args.target, arch=args.arch, portable=args.portable, threads=args.threads,
        build_binary=not args.no_build, ranks=args.ranks, placement=args.placement, compress=args.compress,
        max_ram=args.max_ram, max_flash=args.max_flash, trainer=args.train, precision=args.precision,
        mpi=False if args.no_mpi else None, sm=parse_sm(args.sm) if args.target == "cuda" else (80, 90),
        weights=args.weights, bucket=args.bucket, accumulate=args.accumulate, shard=args.shard,
        lengths=parse_lengths(args.shape),
    )  # fmt: skip
    outdir.check(args.output)  # and an output folder flowc may not replace
    graph = load_shaped(args)
    t0 = time.perf_counter()
    said = io.StringIO()  # printed once the progress line is gone
    with Progress(f"compiling {args.name}"), contextlib.redirect_stdout(said):
        out = exports.write(graph, args.output, options, cache=not args.no_cache)
    sys.stdout.write(said.getvalue())
    print(summary(out, options, time.perf_counter() - t0))
    return 0


def load_shaped(args):
    """The model of ``args`` with its ``--shape``s: an ONNX model's symbolic dimensions fixed, a
    graph's checked (there a ``--shape`` only says which axes have run-time lengths)."""
    shapes = parse_shapes(args.shape)
    if args.model.endswith(".onnx") or not parse_lengths(args.shape):
        return load_model(args.model, shapes, parse_values(args.value), args.loop_bound)
    graph = load_model(args.model, None, parse_values(args.value), args.loop_bound)
    check_shapes(graph, shapes)
    return graph


def buffer_labels(program) -> list[str]:
    """What each arena buffer of ``program`` holds, for the memory plan's picture: the values
    placed in it (their nodes' names, two at most and a count of the rest), or a step's
    scratch memory."""
    held: dict[int, list[str]] = {}
    for ref, loc in program.loc.items():
        if loc.kind == "arena":
            held.setdefault(loc.index, []).append(printable(ref.node, 40))
    for step, index in program.scratch_buffer.items():
        held.setdefault(index, []).append(f"scratch of {printable(step, 40)}")
    out = []
    for i in range(len(program.buffers)):
        names = sorted(dict.fromkeys(held.get(i, [])))
        out.append(", ".join(names[:2]) + (f" +{len(names) - 2}" if len(names) > 2 else "") or f"buffer {i}")
    return out


def source_nodes(graph: Graph, steps) -> dict[str, list[str]]:
    """For each step (a node of the lowered graph), the source nodes whose computation it does:
    the model file's node names (an ONNX node's, a TFLite operator's output tensor's), which the
    importers give as the scope of the graph nodes they make ("<source>/<op>").

    A step's anchor is the node of ``graph`` (as loaded) its name starts with (passes name what
    they make after the node they replace); it also covers the anchor's producers that no other
    step is anchored at (a product fused with the add after it, a view before it), up to the
    model's inputs and its constants (what was folded at compile time), not into a source node
    another step computes part of."""
    nodes = {n.name: n for n in graph.nodes}
    folded: set[str] = set()
    for n in graph.nodes:  # topological: constants and what only they feed
        kind = get_op(n.op).kind
        if n.op == "constant" or (kind != SOURCE and n.inputs and all(r.node in folded for r in n.inputs)):
            folded.add(n.name)

    def anchor(name: str) -> str | None:
        while name not in nodes and "/" in name:
            name = name.rpartition("/")[0]
        return name if name in nodes else None

    def label(name: str) -> str:
        return name.rpartition("/")[0] or name

    anchors = {s.name: anchor(s.name) for s in steps}
    claimed = {label(a) for a in anchors.values() if a is not None}
    out = {}
    for step, a in anchors.items():
        seen, todo = [], [a] if a is not None else []
        while todo:
            n = nodes[todo.pop()]
            if n.name in seen or n.name in folded or get_op(n.op).kind == SOURCE:
                continue
            seen.append(n.name)
            # a producer of another step's source node is that step's (its requantization,
            # say), not this one's
            todo += [r.node for r in n.inputs if label(r.node) == label(a) or label(r.node) not in claimed]
        out[step] = list(dict.fromkeys(label(name) for name in reversed(seen)))
    return out


def cmd_run(args) -> int:
    """``flowc run``: compile the model for --arch into a temporary folder and run it once on the
    given .npy inputs, here, under qemu-user (a cross Linux arch) or on a microcontroller's
    emulated board (qemu-system-arm, codegen/backends/c/mcu.py run_firmware), writing each output
    to --out-dir as the standalone binary does (DIR/<output>.npy)."""
    import tempfile

    import numpy as np

    from .backends.c import mcu

    options = exports.project_options(
        name=args.name, arch=args.arch, portable=args.portable, threads=args.threads
    )
    graph = load_model(args.model, parse_shapes(args.shape), parse_values(args.value), args.loop_bound)
    paths = {}
    for spec in args.inputs or []:
        name, eq, path = spec.partition("=")
        if not eq or not name or not path:
            raise FlowcError(f"--in expects NAME=FILE.npy, got {spec!r}")
        paths[name] = Path(path)
    with tempfile.TemporaryDirectory(prefix="flowc-run-") as tmp:
        folder = exports.write(graph, Path(tmp) / args.name, options)
        meta = json.loads((folder / "metadata.json").read_text())
        known = [t["name"] for t in meta["inputs"]]
        for name in paths:
            if name not in known:
                raise FlowcError(f"unknown input {name!r}; the model's inputs: {', '.join(known)}")
        feeds = {}
        for t in meta["inputs"]:
            if t["name"] not in paths:
                raise FlowcError(f"missing --in {t['name']}=FILE.npy ({t['dtype']}{t['shape']})")
            try:
                value = np.load(paths[t["name"]], allow_pickle=False)
            except (OSError, ValueError) as e:
                raise FlowcError(f"--in {t['name']}: cannot read {paths[t['name']]} as .npy ({e})") from None
            if value.dtype.name != t["dtype"] or list(value.shape) != t["shape"]:
                raise FlowcError(
                    f"--in {t['name']}: {paths[t['name']]} holds {value.dtype.name}{list(value.shape)}, "
                    f"the model takes {t['dtype']}{t['shape']}"
                )
            feeds[t["name"]] = value
        if options.target.kind == "mcu":
            res = mcu.run_firmware(folder, feeds)
            outputs = res["outputs"]
            print(f"{args.name} on {options.target.arch} ({options.target.spec.board} under QEMU): "
                  f"{res['instructions']:,} instructions, {res['stack']} B of stack")  # fmt: skip
        else:
            work = Path(tmp) / "run"
            cmd = [*options.target.runner(), str(folder / args.name), "--out-dir", str(work)]
            for t in meta["inputs"]:
                cmd += ["--in", f"{t['name']}={paths[t['name']].resolve()}"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise FlowcError((done.stderr.strip().splitlines() or ["the model's run failed"])[-1])
            outputs = {t["name"]: np.load(work / t["file"]) for t in meta["outputs"]}
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for t in meta["outputs"]:
            np.save(out / t["file"], np.asarray(outputs[t["name"]]))
            print(f"  {t['name']}: {t['dtype']}{t['shape']} -> {out / t['file']}")
    return 0


def cmd_quantize(args) -> int:
    """``flowc quantize``: codegen/quantize.py, then its report."""
    from .quantize import quantize_onnx

    if not Path(args.model).is_file():
        raise FlowcError(f"{args.model}: no such file")
    report = quantize_onnx(args.model, args.calibrate, args.output, args.percentile)
    print(f"flowc: wrote {args.output}")
    for line in report.lines():
        print(f"  {line}")
    return 0


def summary(out: Path, options: pipeline.Options, seconds: float) -> str:
    """What ``flowc compile`` made: the folder and its binary or library, the memory it needs,
    and how to run it."""
    m = json.loads((out / "metadata.json").read_text())
    name, built = options.name, options.product != "none"
    if options.trainer is not None and "pipeline" in m["trainer"] and m["trainer"]["pipeline"]["shards"]:
        t = m["trainer"]
        r = t["pipeline"]["shards"]
        return "\n".join(
            [
                f"flowc: wrote {out}{f', binary {out / name}' if built else ''} in {seconds:.1f} s; "
                f"data-parallel training over {r} ranks, the optimizer state sharded, batch "
                f"{t['batch_per_microbatch']} a rank",
                f"  train: mpiexec -n {r} {out / name} train --data FILE.npz (arrays "
                f"{' '.join(f'{n}=...' for n in t['inputs'])}) --epochs E --checkpoint ck.npz",
            ]
        )
    if options.trainer is not None and "pipeline" in m["trainer"]:
        t = m["trainer"]
        p = t["pipeline"]
        return "\n".join(
            [
                f"flowc: wrote {out}{f', binary {out / name}' if built else ''} in {seconds:.1f} s; "
                f"pipeline-parallel training over {p['stages']} ranks, microbatches of "
                f"{t['batch_per_microbatch']}, state {t['state_bytes']} B",
                f"  train: mpiexec -n {p['stages']} {out / name} train --data FILE.npz (arrays "
                f"{' '.join(f'{n}=...' for n in t['inputs'])}) --microbatches K --epochs E "
                "--checkpoint ck.npz",
            ]
        )
    if options.trainer is not None:
        t = m["trainer"]
        run = f"mpiexec -n R {out / name}" if t["mpi"] else str(out / name)
        return "\n".join(
            [
                f"flowc: wrote {out}{f', binary {out / name}' if built else ''} in {seconds:.1f} s; training "
                f"step: arena {t['arena_bytes']} B (lower bound {t['arena_lower_bound']} B), state "
                f"{t['state_bytes']} B, batch {t['batch_per_rank']} per "
                + ("GPU" if options.backend == "cuda" else "rank"),
                f"  train: {run} train --data FILE.npz (arrays {' '.join(f'{n}=...' for n in t['inputs'])}) "
                "--epochs E --checkpoint ck.npz",
            ]
        )
    if options.backend == "cuda":
        sm = ", ".join(f"sm_{v}" for v in m["sm"])
        lines = [
            f"flowc: wrote {out}{f', binary {out / name}' if built else ''} in {seconds:.1f} s for CUDA {sm} "
            f"({m['precision']}); device arena {m['arena_bytes']} B (lower bound "
            f"{m['arena_lower_bound']} B), weights {m['weight_bytes']} B"
        ]
        if m.get("ranks"):
            lines.append(
                f"  run: mpiexec -n {m['ranks']} {out / name} --in NAME=FILE.npy --out-dir DIR (GPU each)"
            )
        if m.get("serial_steps"):
            ops = sorted(Counter(s["op"] for s in m["serial_steps"]).items())
            lines.append(
                "  steps on one GPU thread (no parallel kernel yet): "
                + ", ".join(f"{o} x{n}" for o, n in ops)
            )
        return "\n".join(lines)
    made = (
        ""
        if not built
        else f", library {out / 'build' / f'lib{name}.a'}"
        if "footprint" in m
        else f", binary {out / name}"
    )
    lines = [
        f"flowc: wrote {out}{made} in {seconds:.1f} s; arena {m['arena_bytes']} B "
        f"(lower bound {m['arena_lower_bound']} B), weights {m['weight_bytes']} B"
    ]
    if m.get("ranks"):
        lines += [
            f"  rank {r}: arena {p['arena_bytes']} B, weights {p['weight_bytes']} B"
            for r, p in enumerate(m["per_rank"])
        ]
        lines.append(f"  run: mpiexec -n {m['ranks']} {out / name} --in NAME=FILE.npy --out-dir DIR")
        if m.get("partition", {}).get("idle_note"):
            lines.append(f"  {m['partition']['idle_note']}")
    if "footprint" in m:
        from .backends.c.mcu import Footprint

        fp = Footprint.from_json(m["footprint"])
        lines += [f"  {fp.line()}", f"  {fp.detail()}"]
    return "\n".join(lines)


def check_ranks(args) -> None:
    """--ranks and its options, before the model loads."""
    if args.ranks is not None and args.ranks < 1:
        raise FlowcError(f"--ranks must be at least 1, got {args.ranks}")
    if getattr(args, "train", None) is not None:
        if args.arch != "host":
            raise FlowcError("--train builds a training binary for this machine: no --arch")
        if args.placement != "auto":
            raise FlowcError(
                "--train --ranks N cuts the training step into N stages by the cost model: no --placement"
            )
        if args.compress not in (None, "fp16"):
            raise FlowcError(
                f"--train --compress: the gradients go as fp16 or as they are, not {args.compress}"
            )
        return
    if args.ranks is None and (args.placement != "auto" or args.compress):
        raise FlowcError("--placement and --compress split a model over MPI ranks: give --ranks N")
    if args.placement not in pipeline.PLACEMENTS:
        raise FlowcError(f"unknown --placement '{args.placement}'; known: {', '.join(pipeline.PLACEMENTS)}")


def cmd_inspect(args) -> int:
    """What ``flowc compile`` with the same options builds, stage by stage (codegen.pipeline)."""
    # --train --ranks R: the training binary as mpiexec -n R runs it (data parallel), predicted
    dp_ranks, args.ranks = (args.ranks, None) if args.train is not None else (None, args.ranks)
    if args.stages is not None and (args.train is None or dp_ranks is not None or args.stages < 1):
        raise FlowcError("--stages N shows a pipeline-parallel training binary: give --train, not --ranks")
    if dp_ranks is not None and dp_ranks < 1:
        raise FlowcError(f"--ranks must be at least 1, got {dp_ranks}")
    check_ranks(args)
    if args.ranks is not None:
        partition.check_rank_count(args.ranks)
    target = Target(args.arch, args.portable, args.threads)
    for flag, value in (("--gflops", args.gflops), ("--mem-gbps", args.mem_gbps)):
        if value is not None and not value > 0:
            raise FlowcError(f"{flag} expects a positive rate, got {value}")
    options = pipeline.Options(
        target=target, backend=args.target, run_flops=args.gflops and args.gflops * 1e9,
        run_bandwidth=args.mem_gbps and args.mem_gbps * 1e9,
    )  # fmt: skip
    if args.ranks is not None:
        options = options.with_(
            ranks=args.ranks, placement=args.placement, compress=args.compress,
            max_ram=None if args.max_ram is None else parse_bytes(args.max_ram, "max-ram"),
            alpha=args.alpha_us * 1e-6, beta=args.beta_gbps * 1e9,
        )  # fmt: skip
    if args.train is not None:
        options = options.with_(trainer=args.train, ranks=args.stages)
        if dp_ranks is not None:
            options = options.with_(
                allreduce=args.compress or "float32", alpha=args.alpha_us * 1e-6, beta=args.beta_gbps * 1e9
            )
    shown = [s.name for s in pipeline.stages(options)][:-1]  # inspect builds nothing
    if args.stage is not None and args.stage not in shown:
        raise FlowcError(f"--stage {args.stage!r} is not a stage; stages: {', '.join(shown)}")
    graph = load_model(args.model, parse_shapes(args.shape), parse_values(args.value), args.loop_bound)
    try:
        c = pipeline.run(graph, options, until="render" if args.stage == "render" else "plan")
    except UnsupportedError:
        # list every op without code in the backend, not only the first the stages met
        lowered = pipeline.run(graph, options, until="lower").results["lower"]
        missing = unsupported_ops(lowered, options.backend)
        if not missing:
            raise
        print(f"model {args.model}: graph '{graph.name}', {len(graph.nodes)} nodes; target {args.target}")
        print("unsupported ops: " + ", ".join(missing))
        raise without_code(missing, args.target) from None
    if args.stage:
        print(c.describe(args.stage))
        return 0
    if c.partition is not None:
        with schedule.run_rates(options.run_flops, options.run_bandwidth):
            return inspect_ranks(args, graph, c)
    if options.trainer is not None:
        with schedule.run_rates(options.run_flops, options.run_bandwidth):
            return inspect_trainer(args, graph, c, dp_ranks)
    where = f"target {args.target} on {options.target.arch if options.backend == 'c' else args.arch}"
    print(f"model {args.model}: graph '{graph.name}', {len(graph.nodes)} nodes; {where}")
    ops = Counter(n.op for n in graph.nodes)
    print("ops: " + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())))
    missing = unsupported_ops(c.lowered, options.backend)
    print("unsupported ops: " + (", ".join(missing) if missing else "none"))
    for note in getattr(graph, "notes", ()):  # what the importer says (QDQ left in float, RNN loops)
        print(note)
    print("stages: " + " -> ".join(f"{name} ({len(g.nodes)})" for name, g in c.graphs()))
    lowered = c.lowered
    lv = schedule.levels(lowered)
    topo = schedule.schedule(lowered, "topological")
    if options.target.kind == "mcu":  # (its time: the predicted instructions below)
        print(f"critical path: {len(lv.critical)} nodes")
    else:
        print(f"critical path: {len(lv.critical)} nodes, {lv.makespan * 1e6:.1f} us estimated")
    print(
        f"peak live bytes: topological order {schedule.peak_bytes(lowered, topo)}, "
        f"chosen order {schedule.peak_bytes(lowered, list(c.results['schedule'].order))}"
    )
    from .backends.c import toolchain
    from .backends.c.ops.quant import qconv_form
    from .backends.c.winograd import describe as conv_algorithm

    try:  # the build's predefined macros: which form each integer convolution takes
        cc = toolchain.find_cc(options.cc, options.target) if args.target == "c" else None
    except FlowcError:  # no compiler for the arch here: the forms are not printed
        cc = None
    macros = toolchain.macros(options.target, cc, options.flags) if cc else ""
    program = c.program
    mcu = options.target.kind == "mcu"
    if mcu:  # a microcontroller: its instructions, not the host's time
        from .backends.c import mcu_time

        core = options.target.arch
        counts = [mcu_time.predict(n, program.graph, core, macros) for n in program.steps]
        if None in counts:
            print(f"no instruction model for {core}: the host's time model below")
            mcu = False
        else:
            print(f"predicted instructions on {core}: {sum(counts):,} (mcu_time.py: fitted to the MLPerf "
                  "Tiny models' steps on QEMU; its error in mcu_costs.py)")  # fmt: skip
    head = "predicted instructions" if mcu else "ASAP us, ALAP us, slack us"
    print(f"schedule (step, op, node, {head}, flops; <- the model file's nodes it computes):")
    sources = source_nodes(graph, program.steps)
    nesting = control.depth(program.steps)  # a loop's or branch's steps indented under it
    for i, n in enumerate(program.steps):
        cost = schedule.cost(lowered, n)
        times = " ".join(f"{v * 1e6:9.2f}" for v in (lv.asap[n.name], lv.alap[n.name], lv.slack(n.name)))
        if mcu:
            times = f"{counts[i]:12,}"
        name = printable(n.name, 48)  # a long name (an ONNX node's scope) keeps its start and end
        op = "  " * nesting[i] + n.op
        line = f"  {i:4d} {op:16s} {name:48s} {times} {cost.flops}"
        if n.op == "loop_begin":  # the steps down to its end run once per iteration
            most = n.attrs["max_iterations"]
            line += f" (a loop: {'at most ' + str(most) if most >= 0 else 'any number of'} iterations)"
        # a convolution's algorithm, with the cost model's estimates; an integer one's form
        algorithm = conv_algorithm(n) or qconv_form(n, macros, program.graph)
        line = f"{line} {algorithm}" if algorithm else line
        names = [printable(s, 48) for s in sources.get(n.name, ())]
        more = f" +{len(names) - 4}" if len(names) > 4 else ""
        print(f"{line}  <- {' + '.join(names[:4])}{more}" if names else line)
    print(program.describe())
    if args.svg or args.png:
        from graphdef.files import write_bytes, write_text  # atomic, never through a link there

        labels = buffer_labels(program)
        if args.svg:
            write_text(args.svg, memory.draw_svg(program.buffers, program.plan, labels=labels))
            print(f"wrote {args.svg}")
        if args.png:
            write_bytes(args.png, memory.draw_png(program.buffers, program.plan, labels=labels))
            print(f"wrote {args.png}")
    if missing:  # the report is shown; compile would stop at these ops
        raise without_code(missing, args.target)
    return 0


def unsupported_ops(graph: Graph, backend: str) -> list[str]:
    """The steps of ``graph`` (after the backend's lowering) its backend has no code for, as
    "op (first node)", from the backend's own op table."""
    supports = backends.get(backend).supports
    first: dict[str, str] = {}
    for n in graph.nodes:
        if schedule.is_step(n) and not supports(n.op):
            first.setdefault(n.op, n.name)
    return [f"{op} (node '{printable(name, 80)}')" for op, name in sorted(first.items())]


def without_code(missing: list[str], target: str) -> UnsupportedError:
    ops = f"{len(missing)} op{'s' if len(missing) > 1 else ''}"
    return UnsupportedError(f"{ops} without {target} code: {', '.join(missing)}")


def inspect_trainer(args, graph: Graph, c: pipeline.Compilation, dp_ranks: int | None = None) -> int:
    """A training binary's two models (codegen/training.py): each one's stages and memory plan;
    with ``dp_ranks``, the data-parallel step over that many ranks, predicted."""
    from . import data_parallel

    print(f"model {args.model}: graph '{graph.name}', {len(graph.nodes)} nodes; trains {args.train!r}")
    if c.plan is not None:
        print(c.plan.describe())
        if c.plan.shards is None:  # the step by the cost model and the alpha-beta transfers
            from . import pipeline_parallel

            k = args.microbatches if args.microbatches > 1 else 4 * c.plan.stages
            for kind in pipeline_parallel.SCHEDULES:
                pr = pipeline_parallel.predict(c.plan, k, kind, args.alpha_us * 1e-6, args.beta_gbps * 1e9)
                print(f"  predicted: {pr.describe()}")
    for label, part, program in zip(c.results["split"].labels(), c.parts, c.program):
        if part is None:
            print(f"{label}: none (the graph has no other outputs)")
            continue
        stages = " -> ".join(f"{name} ({len(g.nodes)})" for name, g in part.graphs())
        print(f"{label} '{part.options.name}': stages: {stages}")
        print(f"  state {program.state_bytes} B, {len(program.steps)} steps; {program.describe()}")
    if dp_ranks is not None:
        program, o = c.program[0], c.options
        buckets = sum(1 for n in program.steps if n.op == "allreduce_start")
        flops, bandwidth = schedule.current_rates()
        rates = f"{flops / 1e9:.0f} GFLOP/s, {bandwidth / 1e9:.0f} GB/s"
        print(f"data parallel (mpiexec -n {dp_ranks}): {buckets} allreduce bucket(s) of at most "
              f"{o.bucket_bytes} B; ring allreduce over alpha {o.alpha * 1e6:.3g} us, beta "
              f"{o.beta / 1e9:.3g} GB/s; compute at {rates} a rank (--gflops, --mem-gbps)")  # fmt: skip
        for r in sorted({1, dp_ranks}):
            pr = data_parallel.predict_step(
                program.graph, program.steps, r, o.alpha, o.beta, partition.step_seconds
            )
            print(f"  {pr.describe()}")
    return 0


def inspect_ranks(args, graph: Graph, c: pipeline.Compilation) -> int:
    """The partition over ranks: placement, cut edges, per-rank arena, predicted step time."""
    part, o = c.partition, c.options
    print(f"model {args.model}: graph '{graph.name}', {len(graph.nodes)} nodes; {part.ranks} ranks")
    print(part.describe())
    if part.idle_note():
        print(part.idle_note())
    for r, p in enumerate(c.program):
        print(f"rank {r}: arena {p.arena_bytes} B (lower bound {p.lower_bound} B), "
              f"weights {p.weight_bytes} B, {len(p.steps)} steps")  # fmt: skip
    print(f"transfers: alpha {o.alpha * 1e6:.3g} us, beta {o.beta / 1e9:.3g} GB/s")
    one = sum(partition.step_seconds(c.lowered, n) for n in c.lowered.nodes)
    for k in sorted({1, args.microbatches}):
        pr = partition.predict(part, k, o.alpha, o.beta)
        print(f"{pr.describe()}; one rank: {one * k * 1e6:.1f} us, speed-up {one * k / pr.seconds:.2f}x")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="flowc", description="ahead-of-time compiler from dataflow graphs to C")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="write a C project folder and build its binary")
    c.add_argument("model")
    c.add_argument("-o", "--output", required=True, type=Path)
    c.add_argument("--name", default="model")
    c.add_argument("--arch", default="host", help=", ".join(ARCHES))
    c.add_argument("--target", default="c", help="c, or cuda (CUDA C++ built with nvcc)")
    c.add_argument("--sm", default="80,90", help="--target cuda: GPU architectures (compute capability x 10)")
    c.add_argument("--precision", default="fp32", help="--target cuda: fp32, tf32, bf16 or fp16")
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--no-build", action="store_true")
    c.add_argument("--no-cache", action="store_true", help="build anew (no cached copy)")
    c.add_argument("--portable", action="store_true", help="no -march=native: runs on any CPU of the arch")
    c.add_argument(
        "--weights",
        default="auto",
        choices=("auto", "c-array", "blob"),
        help="c-array: weights as C arrays (IAR, Keil, MSVC); blob: one file pulled in by the assembler "
        "(.incbin: GCC, clang); auto: a blob above 64 KiB where the compiler is GCC or clang",
    )
    c.add_argument("--max-ram", metavar="BYTES", help="refuse a model needing more RAM (e.g. 64K)")
    c.add_argument("--max-flash", metavar="BYTES", help="refuse a model needing more flash (e.g. 256K)")
    c.add_argument(
        "--train", nargs="?", const="train", metavar="OP", help="build the training binary of train op OP"
    )
    c.add_argument("--no-mpi", action="store_true", help="with --train: build without MPI (one process)")
    c.add_argument(
        "--bucket", metavar="BYTES", help="with --train: the gradient allreduce bucket (default 256K)"
    )
    c.add_argument(
        "--accumulate", action="store_true", help="with --train: accumulating steps (train --accumulate K)"
    )
    c.add_argument(
        "--shard",
        type=int,
        metavar="R",
        help="with --train: data parallel over R ranks, optimizer state sharded",
    )
    c.set_defaults(func=cmd_compile)
    r = sub.add_parser("run", help="compile for --arch and run once on .npy inputs (QEMU for other arches)")
    r.add_argument("model")
    r.add_argument("--arch", default="host", help=", ".join(ARCHES))
    r.add_argument("--name", default="model")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--portable", action="store_true")
    r.add_argument(
        "--in", dest="inputs", action="append", metavar="NAME=FILE.npy", help="an input (each once)"
    )
    r.add_argument("--out-dir", required=True, help="the outputs, DIR/<output>.npy (created if missing)")
    r.add_argument("--shape", action="append", metavar="NAME=D0xD1x..", help="as for compile")
    r.add_argument("--value", action="append", metavar="NAME=V0,V1,..|FILE.npy", help="as for compile")
    r.add_argument("--loop-bound", type=int, metavar="N", help="as for compile")
    r.set_defaults(func=cmd_run)
    q = sub.add_parser("quantize", help="int8 post-training quantization of an ONNX model (QDQ)")
    q.add_argument("model", help="a float ONNX model")
    q.add_argument(
        "--calibrate",
        required=True,
        metavar="DATA.npz",
        help="calibration inputs: one array per model input, samples along the first axis",
    )
    q.add_argument("-o", "--output", required=True, help="the int8 ONNX model to write")
    q.add_argument(
        "--percentile",
        type=float,
        default=None,
        help="activation ranges from this percentile of the values (e.g. 99.99), not min/max",
    )
    q.set_defaults(func=cmd_quantize)
    i = sub.add_parser("inspect", help="what compile builds: ops, stages, schedule and memory plan")
    i.add_argument("model")
    i.add_argument("--arch", default="host", help=", ".join(ARCHES))
    i.add_argument("--target", default="c")
    i.add_argument("--threads", type=int, default=1)
    i.add_argument("--portable", action="store_true")
    i.add_argument("--stage", help="print one stage's output in full (a stage of codegen.pipeline)")
    i.add_argument("--svg", help="also draw the memory plan to this SVG file")
    i.add_argument("--png", help="also draw the memory plan to this PNG file (Pillow)")
    i.add_argument(
        "--train", nargs="?", const="train", metavar="OP", help="the training binary of train op OP"
    )
    i.add_argument("--max-ram", metavar="BYTES", help="with --ranks: each rank's arena at most this")
    i.add_argument(
        "--microbatches", type=int, default=1, help="with --ranks or --stages: also predict K microbatches"
    )
    i.add_argument("--stages", type=int, help="with --train: the pipeline-parallel binary of N stages")
    i.add_argument("--alpha-us", type=float, default=partition.ALPHA * 1e6, help="transfer latency (us)")
    i.add_argument("--beta-gbps", type=float, default=partition.BETA / 1e9, help="transfer bandwidth (GB/s)")
    i.add_argument("--gflops", type=float, help="the cost model's compute rate, one core (GFLOP/s)")
    i.add_argument("--mem-gbps", type=float, help="the cost model's memory rate, one core (GB/s)")
    i.set_defaults(func=cmd_inspect)
    for p in (c, i):
        p.add_argument("--ranks", type=int, help="split the graph over N MPI ranks (mpiexec -n N)")
        p.add_argument("--placement", default="auto", help="with --ranks: " + ", ".join(pipeline.PLACEMENTS))
        p.add_argument(
            "--compress", choices=("fp16", "bf16"), help="with --ranks: narrow transfers on the wire"
        )
        p.add_argument(
            "--shape",
            action="append",
            metavar="NAME=D0xD1x..",
            help="fix the symbolic dimensions of an ONNX input; a dimension <=N (compile: 1x<=1024) is a "
            "run-time length up to N: the program and the Python call take the input shorter on that axis, "
            "padded with zeros, its length in the int64 input <NAME>_length if the model has one",
        )
        p.add_argument(
            "--value",
            action="append",
            metavar="NAME=V0,V1,..|FILE.npy",
            help="fix an ONNX input to a constant (e.g. reduction axes given as an input)",
        )
        p.add_argument(
            "--loop-bound",
            type=int,
            metavar="N",
            help="the most iterations of an ONNX Loop of run-time length (the rows of its scan outputs)",
        )
    return ap


def main(argv=None) -> int:
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `flowc inspect | head` ends quietly
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except FlowcError as e:
        print(f"flowc: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
