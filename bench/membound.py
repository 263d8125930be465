"""Memory-bound steps against this machine's memory bandwidth.

    python bench/membound.py [--models efficientnet_b0 mobilenet_v3_large] [--top 12] [--threads 1]

First a STREAM-style triad (a[i] = b[i] + s * c[i], float32, one thread, best of 20 passes)
over arrays that live in DRAM (3 x 64 MiB) and over arrays that fit the last-level cache
(3 x 1 MiB, the size of a batch-1 CNN's activations), counting 12 bytes per element. Then each
model (bench/zoo.py; torchvision CNNs by default) is built with -DFC_PROFILE, and its steps of
low arithmetic intensity (below --intensity FLOPs per byte: 1x1 convolutions with few input
channels, depthwise convolutions, pooling, elementwise) are listed by time with the bytes they
must move at least (inputs, weights and outputs once; schedule.cost), the GB/s that makes and
the fraction of each triad figure.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import zoo  # noqa: E402

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402
from codegen import pipeline, schedule  # noqa: E402
from codegen.target import Target  # noqa: E402

TRIAD = r"""
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void triad(float *restrict a, const float *restrict b, const float *restrict c, float s, long n) {
    long i;
    for (i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

int main(int argc, char **argv) {
    long n = atol(argv[1]), i;
    int passes = atoi(argv[2]), p;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    double best = 1e30, t;
    if (!a || !b || !c)
        return 1;
    for (i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = (float)(i % 7);
        c[i] = (float)(i % 5);
    }
    for (p = 0; p < passes; p++) {
        t = now();
        triad(a, b, c, 0.5f + p, n);
        t = now() - t;
        best = t < best ? t : best;
    }
    printf("%.3f %g\n", 12.0 * n / best / 1e9, a[n / 2]);
    return 0;
}
"""


def triad_gbps(folder: Path) -> dict[str, float]:
    """GB/s of the triad over DRAM-sized and cache-sized arrays (one thread)."""
    src, exe = folder / "triad.c", folder / "triad"
    src.write_text(TRIAD)
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c99", "-O3", "-march=native", str(src), "-o", str(exe)], check=True)
    out = {}
    for label, n, passes in (("dram", 16 << 20, 20), ("cache", 1 << 18, 200)):
        res = subprocess.run([str(exe), str(n), str(passes)], check=True, capture_output=True, text=True)
        out[label] = float(res.stdout.split()[0])
    return out


STEP = re.compile(r"step (\d+) (\S+)\s+([\d.]+) us")


def profile(name: str, folder: Path, threads: int, runs: int) -> list[dict]:
    """Per step of the model's -DFC_PROFILE build: op, output type, us, bytes, FLOPs."""
    module, example, _ = zoo.torchvision(name)
    path = zoo.export(module, example, folder / f"{name}.onnx")
    graph = gd.load_onnx(path)
    out = codegen.export(graph, folder / name, name="model", threads=threads, flags=("-DFC_PROFILE",))
    np.save(folder / "x.npy", example.numpy())
    res = subprocess.run(
        [str(out / "model"), "--in", f"input={folder / 'x.npy'}", "--out-dir", str(folder / "res"),
         "--bench", str(runs)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    prog = pipeline.run(graph, pipeline.Options(target=Target(threads=threads)), until="plan").program
    g = prog.graph
    rows = []
    for m in STEP.finditer(res.stdout):
        node = prog.steps[int(m.group(1))]
        cost = schedule.cost(g, node)
        rows.append(
            {"model": name, "step": int(m.group(1)), "op": m.group(2), "us": float(m.group(3)),
             "bytes": cost.bytes, "flops": cost.flops, "type": str(node.outputs[0])}
        )  # fmt: skip
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["efficientnet_b0", "mobilenet_v3_large"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--intensity", type=float, default=8.0, help="FLOPs per byte below which a step counts")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="flowc-membound-") as tmp:
        bw = triad_gbps(Path(tmp))
        print(f"triad, one thread: DRAM {bw['dram']:.1f} GB/s, in cache (3 x 1 MiB) {bw['cache']:.1f} GB/s")
        if zoo.torchvision_or_none() is None:
            print("models skipped: torchvision missing (pip install -e '.[bench]')")
            return 0
        for name in args.models:
            rows = profile(name, Path(tmp), args.threads, args.runs)
            total = sum(r["us"] for r in rows)
            low = [r for r in rows if r["flops"] < args.intensity * r["bytes"]]
            share = sum(r["us"] for r in low)
            print(f"\n{name}: {total / 1e3:.2f} ms in steps; memory-bound steps {share / 1e3:.2f} ms "
                  f"({100 * share / total:.0f}%), the {args.top} longest:")  # fmt: skip
            print("| step | op | output | us | MB moved | GB/s | of cache triad | of DRAM triad |")
            print("|---|---|---|---|---|---|---|---|")
            for r in sorted(low, key=lambda r: -r["us"])[: args.top]:
                gbps = r["bytes"] / (r["us"] * 1e-6) / 1e9
                print(f"| {r['step']} | {r['op']} | {r['type']} | {r['us']:.1f} | {r['bytes'] / 1e6:.2f} | "
                      f"{gbps:.1f} | {gbps / bw['cache']:.0%} | {gbps / bw['dram']:.0%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
