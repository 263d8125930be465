"""flowc's CUDA output against PyTorch on the same GPU (`make bench-cuda`, on a GPU machine).

Rows: torchvision ResNet-50 and a BERT-base-style encoder (transformers BertModel, 12 layers,
hidden 768, 128 tokens), each at batch 1 and 32, float32: flowc (compiled with --target cuda,
run on device tensors, CUDA Graph replay) against PyTorch eager (cuDNN/cuBLAS) and
torch.compile, timed alternately in one run; ratios flowc / peer (below 1: flowc faster). Then
a 4096^3 float16 product: flowc's GEMM kernel against torch.matmul (cuBLAS).

Without a GPU (or without a CUDA build of torch) it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _time(fn, runs: int) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def _batched(example, batch: int):
    return example.repeat(batch, *([1] * (example.dim() - 1)))


def bench_model(name, module, example, batch: int, runs: int) -> dict:
    import torch
    import zoo

    import codegen
    import graphdef as gd

    x = _batched(example, batch)
    with tempfile.TemporaryDirectory() as tmp:
        path = zoo.export(module, x, Path(tmp) / f"{name}.onnx")
        g = gd.load_onnx(str(path))
    m = codegen.compile(g, target="cuda", name=name)
    dev = torch.device("cuda")
    module = module.to(dev)
    xd = x.to(dev)
    compiled = torch.compile(module)
    with torch.no_grad():
        want = module(xd).float().cpu().numpy()
        out = m(input=xd)  # then the same output tensors every run: the run replays its CUDA Graph
        got = next(iter(out.values())).float().cpu().numpy()
        err = float(np.abs(got - want).max() / (np.abs(want).max() + 1e-30))
        t = {"flowc": [], "eager": [], "compile": []}
        for _ in range(3):  # alternated blocks: the GPU's clocks drift alike for all three
            t["flowc"].append(_time(lambda: m.run({"input": xd}, out), runs))
            t["eager"].append(_time(lambda: module(xd), runs))
            t["compile"].append(_time(lambda: compiled(xd), runs))
    us = {k: statistics.median(v) for k, v in t.items()}
    return {"model": name, "batch": batch, **us, "rel_err": err}


def bench_overhead(runs: int) -> dict:
    """The per-run overhead: a model of 80 tiny steps (40 products, 40 tanh), launched one by
    one or replayed from its CUDA Graph."""
    import torch

    import codegen
    import graphdef as gd

    g = gd.Graph("tiny")
    with g:
        h = gd.placeholder("x", (1, 64))
        for _ in range(40):
            h = gd.tanh(gd.matmul(h, gd.constant(np.eye(64, dtype=np.float32))))
        gd.identity(h, name="y")
    m = codegen.compile(g, target="cuda", name="tiny")
    x = torch.zeros(1, 64, device="cuda")
    out = m(x=x)
    graph = _time(lambda: m.run({"x": x}, out), runs)
    m.use_graph(False)
    launches = _time(lambda: m.run({"x": x}, out), runs)
    return {"graph_us": graph, "launches_us": launches}


def bench_gemm(n: int = 4096) -> dict:
    import torch

    import codegen
    import graphdef as gd

    g = gd.Graph("gemm")
    with g:
        gd.matmul(gd.placeholder("a", (n, n), "float16"), gd.placeholder("b", (n, n), "float16"), name="y")
    m = codegen.compile(g, target="cuda", name="gemm", precision="fp16")
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    out = m(a=a, b=b)
    ours = _time(lambda: m.run({"a": a, "b": b}, out), 10)
    cublas = _time(lambda: torch.matmul(a, b), 10)
    return {"n": n, "flowc_tflops": 2 * n**3 / ours / 1e6, "cublas_tflops": 2 * n**3 / cublas / 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        print("bench-cuda: no GPU here (torch.cuda.is_available() is False): nothing measured")
        return 0
    import zoo

    print(f"GPU: {torch.cuda.get_device_name()}")
    print("| model | batch | flowc us | eager us | torch.compile us | flowc/eager | flowc/compile | error |")
    print("|---|---|---|---|---|---|---|---|")
    for name, build in (
        ("resnet50", lambda: zoo.torchvision("resnet50")),
        ("bert", lambda: zoo.bert(12, 128, 768)),
    ):
        made = build()
        if made is None:
            print(f"| {name} | - | missing package | | | | | |")
            continue
        module, example, _ = made
        for batch in (1, 32):
            r = bench_model(name, module, example, batch, args.runs)
            print(
                f"| {name} | {batch} | {r['flowc']:.0f} | {r['eager']:.0f} | {r['compile']:.0f} | "
                f"{r['flowc'] / r['eager']:.2f} | {r['flowc'] / r['compile']:.2f} | {r['rel_err']:.1e} |"
            )
    r = bench_overhead(args.runs * 10)
    print(f"80 tiny steps a run: {r['graph_us']:.1f} us replayed, {r['launches_us']:.1f} us launched singly")
    r = bench_gemm()
    print(
        f"float16 GEMM {r['n']}^3: flowc {r['flowc_tflops']:.1f} TFLOP/s, cuBLAS {r['cublas_tflops']:.1f} "
        f"TFLOP/s ({r['flowc_tflops'] / r['cublas_tflops']:.0%})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
