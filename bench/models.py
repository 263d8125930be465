"""flowc against onnxruntime and numpy on a set of models, side by side in one run.

    python bench/models.py [--threads 1 2] [--runs 200] [--only NAME] [--set small zoo] [--json FILE]

Two sets: ``small``, models defined here (an MLP, LeNet, a small ResNet, a MobileNetV3-like
network, a small encoder, a ResNet-18, 2-layer GRU and LSTM over 32 steps), exported by the
TorchScript exporter; ``zoo``, model definitions written by others (bench/zoo.py: torchvision
ResNet-50, MobileNetV3-Large and EfficientNet-B0, a transformers BERT encoder and GPT-2
decoder), each exported by both torch.onnx exporters (rows ``name/ts`` and ``name/dynamo``).
Each model (CPU, random weights from a seed, eval mode) is exported to ONNX once, then timed on the same input
by: the flowc standalone binary (its own --bench loop), the flowc shared library called from
Python through cffi, onnxruntime (intra-op threads 1 and 2), and the numpy interpreter. Medians
of many runs; peers are interleaved in rounds (every other round in reverse order) because this
machine is shared and noisy. flowc builds one binary per thread count (--threads N of `flowc
compile`). Prints one table: medians in microseconds and the ratio flowc binary / onnxruntime
at the same thread count (below 1.0: flowc is faster), the median of the rounds' ratios: a
round times both within seconds, while the machine's load drifts by tens of percent over a
model's minute (the same binary measured 11.6 and 17.3 ms on EfficientNet-B0 rounds apart).
One more column pairs flowc's cffi call with onnxruntime's run by run at the first thread
count (see paired_ratio).
"""

from __future__ import annotations

import argparse
import json
import os
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

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402


def models():
    """name -> (torch module, example input), all built lazily (torch imports are slow)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.manual_seed(0)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(784, 512), nn.Linear(512, 256), nn.Linear(256, 10)

        def forward(self, x):
            return self.c(F.relu(self.b(F.relu(self.a(x)))))

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
            self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.c1(x)), 2)
            x = F.max_pool2d(F.relu(self.c2(x)), 2)
            x = torch.flatten(x, 1)
            return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self, widths, blocks, classes=1000, stem=7):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, widths[0], stem, 2 if stem == 7 else 1, stem // 2, bias=False),
                nn.BatchNorm2d(widths[0]),
                nn.ReLU(),
            )
            self.pool = stem == 7
            layers, cin = [], widths[0]
            for i, (w, n) in enumerate(zip(widths, blocks)):
                for j in range(n):
                    layers.append(Block(cin, w, 2 if j == 0 and i > 0 else 1))
                    cin = w
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.stem(x)
            if self.pool:
                x = F.max_pool2d(x, 3, 2, 1)
            x = self.layers(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a, self.b = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            s = F.adaptive_avg_pool2d(x, 1)
            return x * F.hardsigmoid(self.b(F.relu(self.a(s))))

    class InvRes(nn.Module):
        def __init__(self, cin, cexp, cout, k, stride, se):
            super().__init__()
            self.use_res = stride == 1 and cin == cout
            self.expand = nn.Sequential(
                nn.Conv2d(cin, cexp, 1, bias=False), nn.BatchNorm2d(cexp), nn.Hardswish()
            )
            self.dw = nn.Sequential(
                nn.Conv2d(cexp, cexp, k, stride, k // 2, groups=cexp, bias=False),
                nn.BatchNorm2d(cexp),
                nn.Hardswish(),
            )
            self.se = SE(cexp) if se else nn.Identity()
            self.project = nn.Sequential(nn.Conv2d(cexp, cout, 1, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.project(self.se(self.dw(self.expand(x))))
            return x + y if self.use_res else y

    class MobileNetV3(nn.Module):
        def __init__(self):
            super().__init__()
            cfg = [
                (16, 16, 16, 3, 2, True),
                (16, 72, 24, 3, 2, False),
                (24, 88, 24, 3, 1, False),
                (24, 96, 40, 5, 2, True),
                (40, 240, 40, 5, 1, True),
                (40, 120, 48, 5, 1, True),
                (48, 288, 96, 5, 2, True),
                (96, 576, 96, 5, 1, True),
            ]
            self.stem = nn.Sequential(
                nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()
            )
            self.blocks = nn.Sequential(*[InvRes(*c) for c in cfg])
            self.head = nn.Sequential(nn.Conv2d(96, 576, 1, bias=False), nn.BatchNorm2d(576), nn.Hardswish())
            self.fc = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, 1000))

        def forward(self, x):
            x = self.head(self.blocks(self.stem(x)))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class Encoder(nn.Module):
        def __init__(self, vocab=1000, d=256, heads=4, layers=4, seq=64):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
            layer = nn.TransformerEncoderLayer(
                d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True
            )
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.out = nn.Linear(d, vocab)

        def forward(self, ids):
            return self.out(self.enc(self.emb(ids) + self.pos))

    class Recurrent(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.rnn = kind(64, 128, num_layers=2, batch_first=True)
            self.head = nn.Linear(128, 10)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.head(y[:, -1])

    gen = torch.Generator().manual_seed(1)
    img = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return {
        "mlp-b1": (MLP(), img(1, 784)),
        "mlp-b32": (MLP(), img(32, 784)),
        "lenet": (LeNet(), img(1, 1, 28, 28)),
        "resnet-small": (ResNet((16, 32, 64), (2, 2, 2), classes=10, stem=3), img(1, 3, 32, 32)),
        "mobilenetv3": (MobileNetV3(), img(1, 3, 224, 224)),
        "transformer": (Encoder(), torch.randint(0, 1000, (1, 64), generator=gen)),
        "resnet18": (ResNet((64, 128, 256, 512), (2, 2, 2, 2)), img(1, 3, 224, 224)),
        "gru": (Recurrent(nn.GRU), img(1, 32, 64)),
        "lstm": (Recurrent(nn.LSTM), img(1, 32, 64)),
    }


ZOO = {  # name -> builder of (module, example, description); bench/zoo.py
    "resnet50": lambda: zoo.torchvision("resnet50"),
    "mobilenet_v3_large": lambda: zoo.torchvision("mobilenet_v3_large"),
    "efficientnet_b0": lambda: zoo.torchvision("efficientnet_b0"),
    "bert": lambda: zoo.bert(layers=4, seq=128, hidden=256),
    "gpt2": lambda: zoo.gpt2(layers=4, seq=128, hidden=256),
}
SHORT = {"torchscript": "ts", "dynamo": "dynamo"}


def entries(sets: list[str]):
    """(row name, exporter, builder of (module, example)) of the chosen sets, in table order."""
    if "small" in sets:
        small = {}

        def build(name):
            if not small:
                small.update(models())
            return small[name]

        for name in ("mlp-b1", "mlp-b32", "lenet", "resnet-small", "mobilenetv3", "transformer", "resnet18",
                     "gru", "lstm"):  # fmt: skip
            yield name, "torchscript", lambda name=name: build(name)
    if "zoo" in sets:
        for name, make in ZOO.items():
            for exporter in zoo.EXPORTERS:
                yield f"{name}/{SHORT[exporter]}", exporter, lambda make=make: (make() or (None, None))[:2]


def export(name, module, example, folder: Path, exporter: str = "torchscript") -> Path:
    return zoo.export(module, example, folder / f"{name.replace('/', '-')}.onnx", exporter)


def median_us(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


SETTLE_S = 0.2
MIN_ROUND_S = 0.05
ROUNDS = 9


def binary_us(binary: Path, feeds: dict, runs: int, folder: Path) -> float:
    args = [str(binary)]
    for k, v in feeds.items():
        np.save(folder / f"{k}.npy", v)
        args += ["--in", f"{k}={folder / f'{k}.npy'}"]
    time.sleep(SETTLE_S)  # onnxruntime's pool threads spin a while after a run: let them stop
    out = subprocess.run(
        args + ["--out-dir", str(folder / "res"), "--bench", str(runs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.strip().split("=")[1])


def paired_ratio(flowc, ort, runs: int) -> float:
    """flowc's cffi call over onnxruntime's, run by run in one process (each pair within
    milliseconds, the first of the pair alternating): the median of the pairs' ratios. Only at
    the first thread count, where onnxruntime (one intra-op thread) leaves no pool thread
    spinning into flowc's run; both include their Python call, which for the smallest models
    is most of the time (the binary's column has none)."""
    ratios = []
    for i in range(runs):
        took = {}
        for fn in (flowc, ort) if i % 2 == 0 else (ort, flowc):
            t0 = time.perf_counter()
            fn()
            took[fn] = time.perf_counter() - t0
        ratios.append(took[flowc] / took[ort])
    return statistics.median(ratios)


def bench_model(name, module, example, folder: Path, threads: list[int], runs: int, exporter: str) -> dict:
    import onnxruntime as ort

    path = export(name, module, example, folder, exporter)
    x = example.numpy()
    feeds = {"input": x}
    graph = gd.load_onnx(path)
    t0 = time.perf_counter()
    outs = {
        threads[0]: codegen.export(graph, folder / f"{name}-c{threads[0]}", name="model", threads=threads[0])
    }
    build_s = time.perf_counter() - t0
    for t in threads[1:]:
        outs[t] = codegen.export(graph, folder / f"{name}-c{t}", name="model", threads=t)
    lib = codegen.compile(graph)
    sessions = {}
    for t in threads:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = t, 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sessions[t] = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    want = sessions[threads[0]].run(None, feeds)[0]
    got = lib(input=x)["output"]
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    rows = {"model": name, "rel_err": err, "build_s": build_s}
    # every peer's measurement lasts at least MIN_ROUND_S (a few microseconds of work repeated
    # 12 times is over before the core leaves its idle clock)
    one_us = median_us(lambda: sessions[threads[0]].run(None, feeds), 5)
    each = max(runs // ROUNDS, 5, int(MIN_ROUND_S / (one_us * 1e-6)))
    peers = []
    for t, out in outs.items():
        peers.append((f"flowc_{t}t", lambda b=out / "model": binary_us(b, feeds, each, folder)))
    peers.append(("flowc_cffi", lambda: median_us(lambda: lib(input=x), each)))
    for t, s in sessions.items():
        peers.append((f"ort_{t}t", lambda s=s: median_us(lambda: s.run(None, feeds), each)))
    acc: dict[str, list[float]] = {}
    for r in range(ROUNDS):  # interleave the peers, every other round in reverse order
        for key, measure in peers if r % 2 == 0 else peers[::-1]:
            acc.setdefault(key, []).append(measure())
    for k, v in acc.items():
        rows[k] = statistics.median(v)
    for t in threads:  # each round's flowc and onnxruntime ran within seconds of each other
        rows[f"ratio_{t}t"] = statistics.median(f / o for f, o in zip(acc[f"flowc_{t}t"], acc[f"ort_{t}t"]))
    rows["paired"] = paired_ratio(lambda: lib(input=x), lambda: sessions[threads[0]].run(None, feeds), runs)
    rows["numpy"] = median_us(lambda: gd.run(graph, {"input": x}, ["output"]), 3)
    return rows


def table(rows: list[dict], threads: list[int]) -> str:
    head = (
        ["model"]
        + [f"flowc {t}T (us)" for t in threads]
        + [f"flowc cffi {threads[0]}T (us)"]
        + [f"ORT {t}T (us)" for t in threads]
        + ["numpy (us)"]
        + [f"flowc/ORT {t}T" for t in threads]
        + [f"cffi/ORT {threads[0]}T paired"]
        + ["rel err"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = (
            [r["model"]]
            + [f"{r[f'flowc_{t}t']:.1f}" for t in threads]
            + [f"{r['flowc_cffi']:.1f}"]
            + [f"{r[f'ort_{t}t']:.1f}" for t in threads]
            + [f"{r['numpy']:.0f}"]
            + [f"{r[f'ratio_{t}t']:.2f}" for t in threads]
            + [f"{r['paired']:.2f}"]
            + [f"{r['rel_err']:.1e}"]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--only", default="")
    ap.add_argument("--set", nargs="+", choices=["small", "zoo"], default=["small", "zoo"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, exporter, build in entries(args.set):
            if args.only and args.only not in name:
                continue
            module, example = build()
            if module is None:
                print(f"{name}: skipped (torchvision or transformers missing: pip install -e '.[bench]')")
                continue
            folder = Path(tmp) / name.replace("/", "-")
            folder.mkdir()
            rows.append(bench_model(name, module, example, folder, args.threads, args.runs, exporter))
            print(f"{name}: done", file=sys.stderr)
    print(table(rows, args.threads))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
