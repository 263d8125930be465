"""Pipeline parallelism over MPI ranks: flowc's SPMD binaries measured against its own prediction.

    python bench/pipeline.py [--models resnet18 bert4] [--microbatches 8] [--bench 20] [--rounds 5]
                             [--ranks 1 2 3 4] [--size 224] [--project resnet50 resnet152 bert24 gpt2_256]
                             [--only-project] [--alpha-us A --beta-gbps B] [--quick] [--json FILE]

Models defined by others, random weights, eval mode, batch 1, exported to ONNX in a temporary
folder: torchvision's ResNet-18 (input 1x3xSxS, S = --size) and a transformers BertModel built
from a config (``bertN``: N layers, hidden 256, 4 heads, 64 token ids; nothing downloaded;
skipped without transformers). flowc builds one SPMD binary per rank count (``--ranks N
--placement pipeline``; ``--ranks 1`` is the fair baseline: the same MPI program on one rank).
Every binary runs under ``mpiexec -n N`` on the same input, K = --microbatches random batches
stacked along axis 0 (``--microbatches K``: the ranks pipeline them, GPipe forward), with
``--bench R``: the median time of one whole step (all K microbatches, the slowest rank). The
binaries are interleaved in --rounds rounds, because this machine is shared and noisy; the table
gives the median over rounds, and the speed-up between the best rounds (the least disturbed).
Outputs of every rank count must equal the 1-rank output bitwise.

Then prediction against measurement: ``codegen.partition.predict`` simulates each rank's run order
with the cost model of the partition (``codegen.partition.step_seconds``: FLOPs and bytes at this
machine's measured rates) and the alpha-beta model of a message, alpha and beta fitted by
bench/pingpong.py on this machine (or given). The table gives the predicted times, the speed-up
ratios, and a "calibrated" prediction: every step's time scaled by measured / predicted at 1
rank. More ranks than cores (3 and 4 on a 2-core machine) oversubscribe them: measured, but not comparable.

Last, a projection to 8 .. 1024 ranks over InfiniBand for larger models (--project) with
K = 4 x ranks microbatches: the compute stays this machine's cost model; the transfers are
assumed HDR InfiniBand figures (alpha 1.0 us, beta 25 GB/s). The pipeline placement cuts the
schedule into contiguous stages, no stage cheaper than its costliest node, so past some rank
count ranks stay empty: the projection stops at the first rank count that leaves one empty. The
ResNets and BERT run out of nodes before 1024 ranks; ``gpt2_N`` (a transformers GPT2Model, N
decoder layers, hidden 128; default N = 256) is deep enough to fill all of them. Past K = 256 the
microbatches are not all simulated: T(K) is extended linearly from K/8 and K/4 (see
projected_seconds). ``--only-project`` skips the ping-pong and the measurement.

torchvision and transformers come with the ``bench`` extra (``make bench`` installs it); without
torchvision the ResNets come from bench/models.py's ResNet class (ResNet-18 as defined there;
ResNet-34 for any deeper one); without transformers the BERT models are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import zoo  # noqa: E402

import graphdef as gd  # noqa: E402
from codegen import export as flowc_export  # noqa: E402
from codegen import partition, pipeline  # noqa: E402
from codegen.backends.c.toolchain import find_mpiexec, mpiexec_command  # noqa: E402
from graphdef.errors import FlowcError  # noqa: E402
from graphdef.registry import COMMUNICATION, SOURCE, get_op  # noqa: E402

FALLBACK_ALPHA_US, FALLBACK_BETA_GBPS = 1.7, 5.1  # bench/pingpong.py on this machine, MPICH
IB_ALPHA_US, IB_BETA_GBPS = 1.0, 25.0  # assumed HDR InfiniBand (200 Gb/s): latency, bandwidth
PROJECTION_RANKS = [1] + [2**k for k in range(3, 11)]  # 1 (the baseline), 8 .. 1024
PROJECTED = ["resnet50", "resnet152", "bert24", "gpt2_256"]  # gpt2_256: deep enough for 1024 ranks


# ----------------------------------------------------------------------------- models
def resnet(name: str, size: int):
    """(module, example input, description): torchvision's ``name`` with random weights, or the
    nearest basic-block ResNet of bench/models.py without torchvision."""
    import torch

    torch.manual_seed(0)
    example = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    tv = zoo.torchvision_or_none()
    if tv is not None:
        module = getattr(tv.models, name)(weights=None)
        return module.eval(), example, f"torchvision {name}, input 1x3x{size}x{size}"
    import models

    module = models.models()["resnet18"][0]  # ResNet((64, 128, 256, 512), (2, 2, 2, 2))
    if name != "resnet18":  # no bottleneck blocks there: the deepest basic-block ResNet instead
        module = type(module)((64, 128, 256, 512), (3, 4, 6, 3))
        name = "resnet34"
    return module.eval(), example, f"bench/models.py {name} (torchvision missing), input 1x3x{size}x{size}"


def build_model(name: str, size: int, seq: int):
    """``resnetNN`` (torchvision; input 1x3xSIZExSIZE), ``bertN`` (N encoder layers; ``seq``
    token ids) or ``gpt2_N`` (N decoder layers; ``seq`` token ids); None when its package is missing."""
    if name.startswith("gpt2"):
        return zoo.gpt2(int(name[5:] or 256), seq)
    if name.startswith("bert"):
        return zoo.bert(int(name[4:] or 4), seq)
    return resnet(name, size)


def export_onnx(module, example, path: Path) -> Path:
    """ONNX opset 17 through the TorchScript exporter, IR version 10 for onnxruntime (bench/zoo.py)."""
    return zoo.export(module, example, path, "torchscript")


# ----------------------------------------------------------------------------- transfers
def measure_alpha_beta(quick: bool) -> tuple[float, float, str]:
    """(alpha in us, beta in GB/s, where they come from): bench/pingpong.py's fit, or the
    figures measured before on this machine when it fails."""
    with tempfile.TemporaryDirectory(prefix="flowc-pipeline-pp-") as tmp:
        fit = Path(tmp) / "fit.json"
        cmd = [sys.executable, str(ROOT / "bench" / "pingpong.py"), "--json", str(fit)]
        cmd += ["--seconds", "0.05", "--max-bytes", str(16 << 20)] if quick else []  # else its defaults
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if res.returncode == 0:
                d = json.loads(fit.read_text())
                return d["alpha_us"], d["beta_GBps"], "bench/pingpong.py, measured now"
            why = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
        except (OSError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
            why = str(e)
    return FALLBACK_ALPHA_US, FALLBACK_BETA_GBPS, f"fallback figures (pingpong failed: {why})"


# ----------------------------------------------------------------------------- prediction
def computing(g) -> int:
    return sum(1 for n in g.nodes if get_op(n.op).kind not in (SOURCE, COMMUNICATION))


def split(graph, ranks: int, alpha_s: float, beta_bps: float) -> partition.Partition:
    options = pipeline.Options(ranks=ranks, placement="pipeline", alpha=alpha_s, beta=beta_bps)
    return pipeline.run(graph, options, until="partition").partition


def predict(part, microbatches: int, alpha_s: float, beta_bps: float, scale: float = 1.0):
    """partition.predict, every step's estimated seconds times ``scale``."""

    step = None if scale == 1.0 else (lambda g, n: scale * partition.step_seconds(g, n))
    return partition.predict(part, microbatches, alpha_s, beta_bps, time_of=step)


# ----------------------------------------------------------------------------- measurement
_RANK_LINE = re.compile(r"rank (\d+): compute_us=([\d.]+) wait_us=([\d.]+) comm_us=([\d.]+)")


def run_binary(exe: Path, ranks: int, x_path: Path, out: Path, k: int, reps: int) -> dict:
    """One ``mpiexec -n ranks exe --bench reps`` run: its median step time and rank lines."""
    cmd = [*mpiexec_command(find_mpiexec(), ranks), str(exe), "--in", f"input={x_path}"]
    cmd += ["--out-dir", str(out), "--microbatches", str(k), "--bench", str(reps)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {res.returncode}):\n{res.stdout}\n{res.stderr}")
    m = re.search(r"median_us=([\d.]+)", res.stdout)
    if not m:
        raise RuntimeError(f"{' '.join(cmd)}: no median_us in its output:\n{res.stdout}")
    per_rank = {int(r): (float(c), float(w), float(x)) for r, c, w, x in _RANK_LINE.findall(res.stdout)}
    return {"median_us": float(m.group(1)), "ranks": per_rank}


def measure(graph, rank_counts: list[int], k: int, reps: int, rounds: int, folder: Path, onnx_path: Path):
    """Build one binary per rank count, run them interleaved for ``rounds`` rounds; per rank
    count: median step time over rounds, per-rank medians, build seconds, output equality."""
    rng = np.random.default_rng(2)
    t = graph.type_of(next(n for n in graph.nodes if n.op == "placeholder").ref(0))
    shape = (k * t.shape[0], *t.shape[1:])
    if np.dtype(t.dtype).kind == "f":
        x = rng.standard_normal(shape).astype(t.dtype)
    else:  # token ids
        x = rng.integers(0, zoo.VOCAB, shape).astype(t.dtype)
    x_path = folder / "x.npy"
    np.save(x_path, x)
    exes, build_s = {}, {}
    for n in rank_counts:
        t0 = time.perf_counter()
        exes[n] = flowc_export(graph, folder / f"r{n}", name="model", ranks=n, placement="pipeline") / "model"
        build_s[n] = time.perf_counter() - t0
        print(f"built {n} rank{'s' if n > 1 else ''} in {build_s[n]:.1f} s", file=sys.stderr)
    runs: dict[int, list[dict]] = {n: [] for n in rank_counts}
    for i in range(rounds):
        for n in rank_counts:
            runs[n].append(run_binary(exes[n], n, x_path, folder / f"out{n}", k, reps))
        line = ", ".join(f"{n}: {runs[n][-1]['median_us'] / 1e3:.1f} ms" for n in rank_counts)
        print(f"round {i + 1}/{rounds}: {line}", file=sys.stderr)
    base = np.load(folder / f"out{rank_counts[0]}" / "output.npy")
    results = {}
    for n in rank_counts:
        got = np.load(folder / f"out{n}" / "output.npy")
        per_rank = {
            r: [statistics.median(run["ranks"][r][j] for run in runs[n]) for j in range(3)] for r in range(n)
        }
        results[n] = {
            "median_us": statistics.median(run["median_us"] for run in runs[n]),
            "best_us": min(run["median_us"] for run in runs[n]),
            "rounds_us": [run["median_us"] for run in runs[n]],
            "per_rank_us": {r: dict(zip(("compute", "wait", "comm"), v)) for r, v in per_rank.items()},
            "build_s": build_s[n],
            "bitwise_equal_to_1_rank": bool(np.array_equal(got, base)),
        }
    results["rel_err_vs_onnxruntime"] = onnxruntime_error(onnx_path, x, base, t.shape[0])
    return results


def onnxruntime_error(onnx_path: Path, x: np.ndarray, got: np.ndarray, batch: int) -> float | None:
    """Largest error of flowc's output against onnxruntime's, relative to its largest value."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    want = np.concatenate([s.run(None, {"input": x[i : i + batch]})[0] for i in range(0, len(x), batch)])
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


# ----------------------------------------------------------------------------- tables
def markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def measured_table(meas: dict, rank_counts: list[int], k: int) -> str:
    one, best, rows = meas[1]["median_us"], meas[1]["best_us"], []
    for n in rank_counts:
        m = meas[n]
        per_rank = "; ".join(
            f"r{r} {v['compute'] / 1e3:.0f}+{v['wait'] / 1e3:.0f}w" for r, v in m["per_rank_us"].items()
        )
        rows.append([
            str(n), f"{m['median_us'] / 1e3:.1f}", f"{m['median_us'] / k / 1e3:.2f}",
            f"{one / m['median_us']:.2f}", f"{best / m['best_us']:.2f}",
            "yes" if m["bitwise_equal_to_1_rank"] else "NO", per_rank,
            " ".join(f"{t / 1e3:.0f}" for t in m["rounds_us"]),
        ])  # fmt: skip
    head = ["ranks", "step (ms)", "per microbatch (ms)", "speed-up", "speed-up, best rounds",
            "bitwise = 1 rank", "per rank compute+wait (ms)", "rounds (ms)"]  # fmt: skip
    return markdown(head, rows)


def prediction_rows(graph, meas: dict, rank_counts: list[int], k: int, alpha: float, beta: float):
    """Per rank count: prediction, calibrated prediction, measurement. The partitions
    are the binaries' own (built with the default alpha and beta); ``alpha``/``beta`` time the
    transfers."""
    parts = {n: split(graph, n, partition.ALPHA, partition.BETA) for n in rank_counts}
    one = meas[1]["median_us"]
    pred1 = predict(parts[1], k, alpha, beta).seconds * 1e6
    scale = one / pred1
    rows = []
    for n in rank_counts:
        p = parts[n]
        pr = predict(p, k, alpha, beta).seconds * 1e6
        rows.append({
            "ranks": n, "predicted_us": pr, "calibrated_us": predict(p, k, alpha, beta, scale).seconds * 1e6,
            "measured_us": meas[n]["median_us"], "predicted_speedup": pred1 / pr,
            "measured_speedup": one / meas[n]["median_us"], "bytes_sent_per_microbatch": p.bytes_sent(),
            "nodes_per_rank": [computing(g) for g in p.graphs], "oversubscribed": n > (os.cpu_count() or 1),
        })  # fmt: skip
    return rows, scale


def prediction_table(rows: list[dict]) -> str:
    cells = [[
        f"{r['ranks']}{' (oversubscribed)' if r['oversubscribed'] else ''}", f"{r['predicted_us'] / 1e3:.1f}",
        f"{r['calibrated_us'] / 1e3:.1f}", f"{r['measured_us'] / 1e3:.1f}", f"{r['predicted_speedup']:.2f}",
        f"{r['measured_speedup']:.2f}", "/".join(map(str, r["nodes_per_rank"])),
        str(r["bytes_sent_per_microbatch"]),
    ] for r in rows]  # fmt: skip
    head = ["ranks", "predicted (ms)", "calibrated (ms)", "measured (ms)", "predicted speed-up",
            "measured speed-up", "nodes per rank", "bytes sent / microbatch"]  # fmt: skip
    return markdown(head, cells)


EXACT_MICROBATCHES = 256  # K simulated in full up to here; beyond, extrapolated from K/8 and K/4


def projected_seconds(part, k: int, alpha: float, beta: float) -> tuple[float, float, int | None]:
    """(step seconds for K microbatches, busiest rank's compute seconds, k0 or None when simulated
    in full). Past EXACT_MICROBATCHES, partition.predict (every microbatch, in Python) is too slow:
    simulate k0 = K/8 and 2 k0 and extend linearly. In the steady state every further microbatch
    adds one period of the bottleneck stage, so T(K) = T(2 k0) + (K - 2 k0) (T(2 k0) - T(k0)) / k0;
    the compute is the same every microbatch, so it scales by K / 2 k0. (At 1024 ranks of gpt2_256
    this is within 0.01% of the full simulation of 4096 microbatches.)"""
    if k <= EXACT_MICROBATCHES:
        pr = predict(part, k, alpha, beta)
        return pr.seconds, max(pr.compute), None
    k0 = k // 8
    t0, pr = predict(part, k0, alpha, beta).seconds, predict(part, 2 * k0, alpha, beta)
    return pr.seconds + (k - 2 * k0) * (pr.seconds - t0) / k0, max(pr.compute) * k / (2 * k0), k0


def projection(graph, alpha: float, beta: float) -> tuple[list[dict], int | None]:
    """Predicted time per microbatch for 1, 8 .. 1024 ranks, K = 4 x ranks (extrapolated past
    EXACT_MICROBATCHES, see projected_seconds); stops at the first rank count that leaves a rank
    empty (returned as the second value)."""
    rows, base = [], None
    for n in PROJECTION_RANKS:
        try:
            p = split(graph, n, alpha, beta)
        except FlowcError:  # more ranks than the graph has steps: refused before any placement
            return rows, n
        k = 4 * n
        seconds, busiest, k0 = projected_seconds(p, k, alpha, beta)
        per = seconds / k
        base = base or per
        empty = sum(1 for g in p.graphs if computing(g) == 0)
        rows.append({
            "ranks": n, "microbatches": k, "predicted_us_per_microbatch": per * 1e6, "speedup": base / per,
            "busiest_rank_us_per_microbatch": busiest / k * 1e6,
            "bytes_sent_per_microbatch": p.bytes_sent(), "empty_ranks": empty,
            "simulated_microbatches": [k] if k0 is None else [k0, 2 * k0],
        })  # fmt: skip
        if empty:
            return rows, n
    return rows, None


def projection_table(rows: list[dict]) -> str:
    cells = [[
        str(r["ranks"]), str(r["microbatches"]), f"{r['predicted_us_per_microbatch']:.0f}",
        f"{r['speedup']:.1f}", f"{r['busiest_rank_us_per_microbatch']:.0f}",
        str(r["bytes_sent_per_microbatch"]), str(r["empty_ranks"]),
        " + ".join(map(str, r["simulated_microbatches"])),
    ] for r in rows]  # fmt: skip
    head = ["ranks", "microbatches", "predicted us / microbatch", "speed-up vs 1 rank",
            "busiest rank us / microbatch", "bytes sent / microbatch", "empty ranks",
            "simulated microbatches"]  # fmt: skip
    return markdown(head, cells)


def bench_model(name: str, args, folder: Path, alpha: float, beta: float, source: str) -> dict | None:
    """Measure one model over the rank counts, print its two tables, return its results."""
    built = build_model(name, args.size, 64)
    if built is None:
        print(f"\n## {name}: skipped (transformers is not installed)")
        return None
    module, example, what = built
    folder.mkdir()
    onnx_path = export_onnx(module, example, folder / f"{name}.onnx")
    graph = gd.load_onnx(onnx_path)
    k, rank_counts = args.microbatches, args.rank_counts
    meas = measure(graph, rank_counts, k, args.bench, args.rounds, folder, onnx_path)
    rel = meas.pop("rel_err_vs_onnxruntime")
    print(f"\n## measured: {what}; {k} microbatches a step, {os.cpu_count()} CPUs, MPICH, "
          f"{args.rounds} rounds of --bench {args.bench}")  # fmt: skip
    if rel is not None:
        print(f"1-rank output against onnxruntime: max relative error {rel:.1e}")
    print(measured_table(meas, rank_counts, k))
    if 2 in meas:
        two, two_best = (meas[1][q] / meas[2][q] for q in ("median_us", "best_us"))
        print(f"measured 2-rank speed-up: {two:.2f}x over the rounds' medians, {two_best:.2f}x between the "
              f"best rounds (goal 1.6x); 2-rank outputs bitwise equal to 1-rank: "
              f"{meas[2]['bitwise_equal_to_1_rank']}")  # fmt: skip
    pred, scale = prediction_rows(graph, meas, rank_counts, k, alpha, beta)
    print(f"\n## prediction (cost model + alpha-beta) against measurement: {what}, {k} microbatches a step")
    print(f"transfers: alpha {alpha * 1e6:.2f} us, beta {beta / 1e9:.2f} GB/s ({source}); calibrated: "
          f"every step's estimate x {scale:.3f} (measured / predicted at 1 rank)")  # fmt: skip
    print(prediction_table(pred))
    return {"model": what, "measured": {str(n): meas[n] for n in rank_counts}, "rel_err_vs_onnxruntime": rel,
            "prediction": pred, "calibration_scale": scale}  # fmt: skip


def project_model(name: str, folder: Path) -> dict | None:
    """Project one model to 8 .. 1024 ranks over InfiniBand; print its table, return its rows."""
    t0 = time.perf_counter()
    built = build_model(name, 224, 128)
    if built is None:
        print(f"\n## projection: {name}: skipped (transformers is not installed)")
        return None
    module, example, what = built
    folder.mkdir()
    graph = gd.load_onnx(export_onnx(module, example, folder / f"{name}.onnx"))
    ia, ib = IB_ALPHA_US * 1e-6, IB_BETA_GBPS * 1e9
    rows, stop = projection(graph, ia, ib)
    nodes = computing(split(graph, 1, ia, ib).graphs[0])
    print(f"\n## projection: {what}, {nodes} computing nodes, K = 4 x ranks (simulated in full up to "
          f"K = {EXACT_MICROBATCHES}; beyond, simulated for K/8 and K/4 microbatches and extended linearly "
          f"by the steady-state period T(K/4) - T(K/8) per K/8 microbatches)")  # fmt: skip
    print(f"compute: this machine's cost model (partition.step_seconds); transfers: assumed HDR "
          f"InfiniBand figures, "
          f"alpha {IB_ALPHA_US} us, beta {IB_BETA_GBPS} GB/s (200 Gb/s link)")  # fmt: skip
    print(projection_table(rows))
    print(f"({time.perf_counter() - t0:.0f} s for this model: export, import, partitions, simulations)")
    if stop and stop > nodes:
        print(f"stopped at {stop} ranks: more than the graph's {nodes} computing nodes (each rank holds one)")
    elif stop:
        used = stop - rows[-1]["empty_ranks"]
        print(
            f"stopped at {stop} ranks: the pipeline placement used {used}, left the others empty "
            f"(contiguous stages of {nodes} nodes; no stage is cheaper than its costliest node)"
        )
    return {"model": what, "computing_nodes": nodes, "alpha_us": IB_ALPHA_US, "beta_GBps": IB_BETA_GBPS,
            "rows": rows, "stopped_at": stop}  # fmt: skip


# ----------------------------------------------------------------------------- tensor parallel
TENSOR_WIDTH, TENSOR_BATCH = 2048, 64


def tensor_parallel(rounds: int, reps: int, folder: Path) -> dict:
    """``--placement tensor`` on 2 ranks against the same MPI program on one rank: an MLP of
    three TENSOR_WIDTH-wide layers (bias, ReLU) at a batch of TENSOR_BATCH, each product split
    by columns (each rank holds half of the weights); interleaved rounds of ``--bench reps``,
    the median step; the outputs equal to 1e-5."""
    import graphdef as gd

    rng = np.random.default_rng(0)
    w = TENSOR_WIDTH
    with gd.Graph("wide") as g:
        h = gd.placeholder("input", (TENSOR_BATCH, w))
        for _ in range(3):
            weights = (rng.standard_normal((w, w)) / np.sqrt(w)).astype(np.float32)
            h = gd.relu(
                gd.matmul(h, gd.constant(weights)) + gd.constant(rng.standard_normal(w).astype(np.float32))
            )
        g.set_outputs(gd.identity(h, name="output"))
    x_path = folder / "x.npy"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(x_path, rng.standard_normal((TENSOR_BATCH, w)).astype(np.float32))
    exes = {
        1: flowc_export(g, folder / "one", name="model", ranks=1) / "model",
        2: flowc_export(g, folder / "two", name="model", ranks=2, placement="tensor") / "model",
    }  # fmt: skip
    runs: dict[int, list[float]] = {1: [], 2: []}
    for i in range(rounds):
        for n in (1, 2) if i % 2 == 0 else (2, 1):
            runs[n].append(run_binary(exes[n], n, x_path, folder / f"out{n}", 1, reps)["median_us"])
    a, b = np.load(folder / "out1" / "output.npy"), np.load(folder / "out2" / "output.npy")
    meta = json.loads((folder / "two" / "metadata.json").read_text())
    return {
        "one_us": statistics.median(runs[1]),
        "two_us": statistics.median(runs[2]),
        "speedup": statistics.median(x / y for x, y in zip(runs[1], runs[2])),
        "max_abs_diff": float(np.abs(a - b).max()),
        "weights_per_rank": [r["weight_bytes"] for r in meta["per_rank"]],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models",
        nargs="+",
        default=["resnet18", "bert4"],
        help="measured models: resnetNN (torchvision), bertN (N layers; default resnet18 bert4)",
    )
    ap.add_argument("--microbatches", type=int, default=8, help="K microbatches a step (default 8)")
    ap.add_argument("--bench", type=int, default=20, help="steps a binary run times (default 20)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of all binaries (default 5)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 3, 4], help="rank counts to build and run")
    ap.add_argument("--size", type=int, default=224, help="ResNet input height and width (default 224)")
    ap.add_argument("--project", nargs="+", default=PROJECTED,
                    help=f"models of the projection (default {' '.join(PROJECTED)})")  # fmt: skip
    ap.add_argument("--only-project", action="store_true", help="projection only (no measurement)")
    ap.add_argument("--alpha-us", type=float, help="message latency (default: measured by bench/pingpong.py)")
    ap.add_argument("--beta-gbps", type=float, help="message bandwidth (default: measured likewise)")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 5 steps, a shorter ping-pong")
    ap.add_argument("--json", type=Path, help="write every result here")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.bench = min(args.rounds, 2), min(args.bench, 5)
    args.rank_counts = sorted({1, *args.ranks})
    report: dict = {"cpus": os.cpu_count(), "microbatches": args.microbatches, "bench_steps": args.bench,
                    "rounds": args.rounds, "models": [], "projection": []}  # fmt: skip

    if args.only_project:
        args.models = []
        alpha_us, beta_gbps, source = FALLBACK_ALPHA_US, FALLBACK_BETA_GBPS, "not used (--only-project)"
    elif args.alpha_us is not None and args.beta_gbps is not None:
        alpha_us, beta_gbps, source = args.alpha_us, args.beta_gbps, "given on the command line"
    else:
        alpha_us, beta_gbps, source = measure_alpha_beta(args.quick)
    report["transfers"] = {"alpha_us": alpha_us, "beta_GBps": beta_gbps, "source": source}
    with tempfile.TemporaryDirectory(prefix="flowc-pipeline-") as tmp:
        for name in args.models:
            r = bench_model(name, args, Path(tmp) / name, alpha_us * 1e-6, beta_gbps * 1e9, source)
            report["models"] += [r] if r else []
        if not args.only_project:
            r = tensor_parallel(args.rounds, args.bench, Path(tmp) / "tensor")
            report["tensor"] = r
            print(f"\ntensor parallelism (--placement tensor), an MLP of three {TENSOR_WIDTH}-wide layers at "
                  f"batch {TENSOR_BATCH}, each product split by columns: 1 rank {r['one_us'] / 1e3:.2f} ms, "
                  f"2 ranks {r['two_us'] / 1e3:.2f} ms, {r['speedup']:.2f}x (paired rounds); outputs within "
                  f"{r['max_abs_diff']:.1e}; weights a rank {r['weights_per_rank']}")  # fmt: skip
        for name in args.project:
            r = project_model(name, Path(tmp) / f"projection-{name}")
            report["projection"] += [r] if r else []
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
