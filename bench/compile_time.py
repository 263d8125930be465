"""Compile time against graph size: generated graphs of 1k, 10k and 100k nodes through the
pipeline to C sources, seconds per stage.

    python bench/compile_time.py [--sizes 1000 10000 100000] [--kinds chain fan transformer]
                                 [--until render] [--cc [CC]] [--markdown FILE]

Four shapes of graph, each about N nodes:
- chain: one long chain of elementwise ops (the worst case for fusing chains);
- distinct: the same chain with a constant of its own in every op (nothing to deduplicate);
- fan: one value read by N/6 small branches (scale, relu, softmax), combined back pairwise by
  concat and reduce_sum (a wide graph: many ready nodes at every scheduling step);
- transformer: a stack of pre-norm transformer layers (layer norm, attention with softmax,
  a GELU MLP, residual adds), d_model 16, enough layers for N nodes.
Prints, per graph, the seconds of building it and of every pipeline stage (codegen/pipeline.py)
up to ``--until``; stages whose time rounds to zero are grouped as "other". ``--cc``: then
also the C compiler (default gcc) on the model's sources with the build's flags (-O3
-march=native ...), as the CPU seconds it used ("cc", and the seconds per 1000 nodes, which
stay flat when the C compiler's time is linear in the graph: no C function grows with it).
Peers are not involved: this measures flowc alone.

Then a user's compile of a real model: torchvision ResNet-50 (exported to ONNX) to a standalone
binary with ``flowc compile``, whole-process seconds, three ways: on an empty cache (the tile
kernels compiled too), with the kernel objects cached (another model's compile: the model's
own files compiled again), and repeated (the export answered from the cache). ``--no-zoo``
leaves it out; it is skipped, saying so, without torchvision.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import codegen  # noqa: E402,F401
import graphdef as gd  # noqa: E402
from codegen import pipeline  # noqa: E402
from codegen.backends.c import toolchain  # noqa: E402


def chain(n: int) -> gd.Graph:
    g = gd.Graph("chain")
    with g:
        h = gd.placeholder("x", (1, 64))
        ops = (lambda t: t * 1.0001, lambda t: t + 0.5, gd.tanh, lambda t: t - 0.25, gd.relu)
        for i in range(n * 5 // 8):  # 5 ops and their 3 scalar constants: 8 nodes
            h = ops[i % len(ops)](h)
        g.set_outputs(h)
    return g


def distinct(n: int) -> gd.Graph:
    """The chain with other constants in every op: no two of its fused groups alike, so the
    C compiler cannot fold identical step functions into one (as it does for ``chain``'s)."""
    g = gd.Graph("distinct")
    with g:
        h = gd.placeholder("x", (1, 64))
        ops = (
            lambda t, i: t * (1.0 + 1e-7 * i),
            lambda t, i: t + (0.5 + 1e-7 * i),
            lambda t, i: gd.tanh(t),
            lambda t, i: t - (0.25 + 1e-7 * i),
            lambda t, i: gd.relu(t),
        )
        for i in range(n * 5 // 8):  # 5 ops and their 3 scalar constants: 8 nodes
            h = ops[i % len(ops)](h, i)
        g.set_outputs(h)
    return g


def fan(n: int) -> gd.Graph:
    g = gd.Graph("fan")
    with g:
        x = gd.placeholder("x", (1, 64))
        level = [gd.softmax(gd.relu(x * (1.0 + i * 1e-3))) for i in range(max(1, n // 6))]
        while len(level) > 1:  # combined pairwise by kernels (no fusion across them)
            pairs = zip(level[::2], level[1::2])
            rest = level[len(level) - len(level) % 2 :]
            level = [
                gd.reduce_sum(gd.concat([a, b], axis=0), axes=(0,), keepdims=True) for a, b in pairs
            ] + rest
        g.set_outputs(level[0])
    return g


def transformer(n: int, d: int = 16, seq: int = 8, heads: int = 2) -> gd.Graph:
    rng = np.random.default_rng(0)

    def w(*shape):
        return gd.constant((rng.standard_normal(shape) * 0.1).astype(np.float32))

    g = gd.Graph("transformer")
    with g:
        h = gd.placeholder("x", (seq, d))
        per_layer = 40  # nodes of one layer, about (constants included)
        for _ in range(max(1, n // per_layer)):
            a = gd.layer_norm(h, w(d), w(d))
            q, k, v = (gd.matmul(a, w(d, d)) for _ in range(3))
            split = lambda t: gd.transpose(gd.reshape(t, (seq, heads, d // heads)), (1, 0, 2))  # noqa: E731
            s = gd.matmul(split(q), gd.transpose(split(k), (0, 2, 1))) * (1.0 / np.sqrt(d // heads))
            o = gd.reshape(gd.transpose(gd.matmul(gd.softmax(s), split(v)), (1, 0, 2)), (seq, d))
            h = h + gd.matmul(o, w(d, d))
            m = gd.gelu(gd.matmul(gd.layer_norm(h, w(d), w(d)), w(d, 4 * d)) + w(4 * d))
            h = h + gd.matmul(m, w(4 * d, d)) + w(d)
        g.set_outputs(h)
    return g


KINDS = {"chain": chain, "distinct": distinct, "fan": fan, "transformer": transformer}


def cc_seconds(sources, cc: str, options: pipeline.Options) -> float:
    """CPU seconds (user + system) of ``cc -c`` on each of the model's C files, with the
    flags of its build (codegen/backends/c/toolchain.py), in a scratch folder."""
    with tempfile.TemporaryDirectory() as tmp:
        toolchain.write_sources(sources, Path(tmp), options.target)
        cmd = toolchain.compile_command(cc, options.target, options.flags)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for f in sources.c_files:
            subprocess.run([*cmd, "-c", f, "-o", "/dev/null"], cwd=tmp, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(kind: str, n: int, until: str, cc: str | None = None) -> dict:
    t0 = time.perf_counter()
    g = KINDS[kind](n)
    times = {"build graph": time.perf_counter() - t0}
    last = [time.perf_counter()]

    def trace(name, value):
        now = time.perf_counter()
        times[name] = now - last[0]
        last[0] = now
        print(f"    {kind} {len(g.nodes)}: {name} {times[name]:.2f} s", file=sys.stderr, flush=True)

    options = pipeline.Options()
    c = pipeline.run(g, options, until="render" if cc else until, trace=trace)
    if cc:
        times["cc"] = cc_seconds(c.sources, cc, options)
        print(f"    {kind} {len(g.nodes)}: cc {times['cc']:.2f} s", file=sys.stderr, flush=True)
    return {"nodes": len(g.nodes), "times": times}


def user_compile(runs: int = 3) -> str | None:
    """The ResNet-50 rows (seconds, the median of ``runs``), or None without torchvision."""
    sys.path.insert(0, str(ROOT / "bench"))
    import zoo

    made = zoo.torchvision("resnet50")
    if made is None:
        print("ResNet-50 compile: skipped (no torchvision: pip install '.[bench]')", file=sys.stderr)
        return None
    module, example, desc = made
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = zoo.export(module, example, tmp / "resnet50.onnx")
        flowc = [sys.executable, "-m", "codegen.cli", "compile", str(model), "-o", str(tmp / "out")]

        def timed(extra, cache):
            env = {**os.environ, "FLOWC_CACHE": str(cache)}
            shutil.rmtree(tmp / "out", ignore_errors=True)
            t0 = time.perf_counter()
            subprocess.run([*flowc, *extra], check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
            return time.perf_counter() - t0

        cold, warm, again = [], [], []
        for r in range(runs):
            cache = tmp / f"cache{r}"
            cold.append(timed(["--no-cache"], cache))  # nothing cached: kernels, drivers, model
            warm.append(timed(["--no-cache"], cache))  # kernel and driver objects cached
            timed([], cache)
            again.append(timed([], cache))  # the same compile repeated: the export cache
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    rows = [
        f"| {desc} to a binary, empty cache | {med(cold):.2f} |",
        f"| the same, kernel objects cached (a new model's compile) | {med(warm):.2f} |",
        f"| the same compile repeated (export cache) | {med(again):.2f} |",
    ]
    return "| flowc compile | seconds |\n|---|---:|\n" + "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--until", default="render")
    ap.add_argument("--cc", nargs="?", const="gcc", help="also time this C compiler on the sources (gcc)")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--no-zoo", action="store_true", help="leave out the ResNet-50 compile")
    args = ap.parse_args(argv)
    rows = []
    for kind in args.kinds:
        for n in args.sizes:
            r = measure(kind, n, args.until, args.cc)
            cc = r["times"].pop("cc", None)
            total = sum(r["times"].values())
            big = {k: v for k, v in r["times"].items() if v >= 0.05}
            other = total - sum(big.values())
            detail = ", ".join(f"{k} {v:.2f}" for k, v in big.items()) + (
                f", other {other:.2f}" if other else ""
            )
            cc_cells = f" {cc:.2f} | {1000 * cc / r['nodes']:.3f} |" if args.cc else ""
            rows.append(f"| {kind} | {r['nodes']} | {total:.2f} | {detail} |{cc_cells}")
            print(rows[-1], file=sys.stderr, flush=True)
    head = "| graph | nodes | seconds to C sources | seconds per stage |"
    rule = "|---|---:|---:|---|"
    if args.cc:
        head += f" {args.cc} CPU seconds | per 1000 nodes |"
        rule += "---:|---:|"
    table = f"{head}\n{rule}\n" + "\n".join(rows)
    if not args.no_zoo:
        user = user_compile()
        table += f"\n\n{user}" if user else ""
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
