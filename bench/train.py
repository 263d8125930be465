"""Training step time: flowc's compiled step (``codegen.compile(g, outputs=["loss"],
train=op)``, forward + backward + optimizer update in one call of the generated C) against
PyTorch eager on the CPU: the same model, initial weights, batch (32), optimizer and thread
count, in one run: blocks of 10 steps of each side alternated (a pause before each, so that the
other side's threads stop spinning), compared pair by pair (this machine is shared).

    python bench/train.py [--threads 1 2] [--runs 30] [--only NAME] [--ranks-runs 5]

Data parallel (``--ranks-runs`` > 0, when MPI is installed): the training binary
(``codegen.exports.export_trainer``, built with mpicc) of each model trains on a random
dataset with a global batch of 32: one rank with the step compiled for 32 samples, against two
ranks (``mpiexec -n 2``) each with a step of 16, the gradients averaged by the step's allreduce;
runs of a few epochs alternated, samples/s (the binary's own figure) compared pair by pair.

Pipeline parallel (with ``--ranks-runs``): the transformer's training binary as one process
with a step of 128 samples against a pipeline over 2 ranks (``export_trainer(..., ranks=2)``:
2 stages, 8 microbatches of 16, 1F1B and GPipe), samples/s pair by pair.

Models: the digits MLP (64-32-10, SGD), LeNet-5 on 28x28 (SGD with momentum), and a small
transformer encoder (2 pre-norm blocks of width 64, 2 heads, 16 tokens, GELU MLP, mean-pooled
classifier; AdamW). Both sides start from the same weights and see the same batch; the
"loss diff" column is the largest relative difference of their first 10 losses (float32
rounding only, when both compute the same step).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402

BATCH = 32
BLOCK = 10  # steps a side runs in a row
PAUSE = 0.02  # seconds before each block


def _init(rng, *shape):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return (rng.standard_normal(shape) * (2.0 / fan_in) ** 0.5).astype(np.float32)


# ----------------------------------------------------------------------------- models
# Each returns (graph, train op, feeds, torch module, torch optimizer); weights are created in
# PyTorch's layout and handed to both.
def mlp(rng, batch=BATCH):
    import torch

    p = {"w1": _init(rng, 32, 64), "b1": np.zeros(32, np.float32), "w2": _init(rng, 10, 32),
         "b2": np.zeros(10, np.float32)}  # fmt: skip
    with gd.Graph("mlp_train") as g:
        x = gd.placeholder("x", (batch, 64))
        y = gd.placeholder("y", (batch,), "int64")
        v = {k: gd.variable(k, a) for k, a in p.items()}
        h = gd.relu(gd.matmul(x, gd.transpose(v["w1"])) + v["b1"])
        loss = gd.train.softmax_cross_entropy(gd.matmul(h, gd.transpose(v["w2"])) + v["b2"], y, name="loss")
        train = gd.train.SGD(0.2).minimize(loss)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    _load(net, [p["w1"], p["b1"], p["w2"], p["b2"]])
    feeds = {"x": rng.random((BATCH, 64), np.float32), "y": rng.integers(0, 10, BATCH)}
    return g, train, feeds, net, torch.optim.SGD(net.parameters(), lr=0.2)


def lenet(rng, batch=BATCH):
    import torch

    shapes = {"c1": (6, 1, 5, 5), "c2": (16, 6, 5, 5), "f1": (120, 400), "f2": (84, 120), "f3": (10, 84)}
    p = {}
    for k, s in shapes.items():
        p[k], p[k + "b"] = _init(rng, *s), np.zeros(s[0], np.float32)
    with gd.Graph("lenet_train") as g:
        x = gd.placeholder("x", (batch, 1, 28, 28))
        y = gd.placeholder("y", (batch,), "int64")
        v = {k: gd.variable(k, a) for k, a in p.items()}
        h = gd.max_pool2d(gd.relu(gd.conv(x, v["c1"], v["c1b"], pads=(2, 2, 2, 2))), 2)
        h = gd.max_pool2d(gd.relu(gd.conv(h, v["c2"], v["c2b"])), 2)
        h = gd.reshape(h, (batch, 400))
        for k in ("f1", "f2"):
            h = gd.relu(gd.matmul(h, gd.transpose(v[k])) + v[k + "b"])
        logits = gd.matmul(h, gd.transpose(v["f3"])) + v["f3b"]
        loss = gd.train.softmax_cross_entropy(logits, y, name="loss")
        train = gd.train.SGD(0.01, momentum=0.9).minimize(loss)
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10),
    )  # fmt: skip
    _load(net, [p[k] for k in ("c1", "c1b", "c2", "c2b", "f1", "f1b", "f2", "f2b", "f3", "f3b")])
    feeds = {"x": rng.random((BATCH, 1, 28, 28), np.float32), "y": rng.integers(0, 10, BATCH)}
    return g, train, feeds, net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)


SEQ, DIM, HEADS, LAYERS = 16, 64, 2, 2


def transformer(rng, batch=BATCH):
    import torch

    nn, dh = torch.nn, DIM // HEADS
    p = {}
    for i in range(LAYERS):
        p |= {f"ln1_{i}": np.ones(DIM, np.float32), f"ln1b_{i}": np.zeros(DIM, np.float32),
              f"qkv_{i}": _init(rng, 3 * DIM, DIM), f"qkvb_{i}": np.zeros(3 * DIM, np.float32),
              f"o_{i}": _init(rng, DIM, DIM), f"ob_{i}": np.zeros(DIM, np.float32),
              f"ln2_{i}": np.ones(DIM, np.float32), f"ln2b_{i}": np.zeros(DIM, np.float32),
              f"m1_{i}": _init(rng, 4 * DIM, DIM), f"m1b_{i}": np.zeros(4 * DIM, np.float32),
              f"m2_{i}": _init(rng, DIM, 4 * DIM), f"m2b_{i}": np.zeros(DIM, np.float32)}  # fmt: skip
    p |= {"head": _init(rng, 10, DIM), "headb": np.zeros(10, np.float32)}
    with gd.Graph("transformer_train") as g:
        x = gd.placeholder("x", (batch, SEQ, DIM))
        y = gd.placeholder("y", (batch,), "int64")
        v = {k: gd.variable(k, a) for k, a in p.items()}

        def dense(h, k, i):
            return gd.matmul(h, gd.transpose(v[f"{k}_{i}"])) + v[f"{k}b_{i}"]

        def heads(t):  # (B, S, DIM) -> (B, HEADS, S, dh)
            return gd.transpose(gd.reshape(t, (batch, SEQ, HEADS, dh)), (0, 2, 1, 3))

        h = x
        for i in range(LAYERS):
            a = gd.layer_norm(h, v[f"ln1_{i}"], v[f"ln1b_{i}"])
            qkv = dense(a, "qkv", i)
            q, k, val = (heads(gd.slice(qkv, [j * DIM], [(j + 1) * DIM], [2])) for j in range(3))
            att = gd.softmax(gd.matmul(q, gd.transpose(k, (0, 1, 3, 2))) * (1.0 / dh**0.5))
            o = gd.reshape(gd.transpose(gd.matmul(att, val), (0, 2, 1, 3)), (batch, SEQ, DIM))
            h = h + dense(o, "o", i)
            m = gd.gelu(dense(gd.layer_norm(h, v[f"ln2_{i}"], v[f"ln2b_{i}"]), "m1", i))
            h = h + dense(m, "m2", i)
        logits = gd.matmul(gd.reduce_mean(h, axes=1), gd.transpose(v["head"])) + v["headb"]
        loss = gd.train.softmax_cross_entropy(logits, y, name="loss")
        train = gd.train.AdamW(1e-3, weight_decay=0.01).minimize(loss)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.qkv, self.o = nn.LayerNorm(DIM), nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
            self.ln2, self.m1, self.m2 = nn.LayerNorm(DIM), nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

        def forward(self, h):
            parts = self.qkv(self.ln1(h)).split(DIM, 2)
            q, k, val = (t.view(BATCH, SEQ, HEADS, dh).transpose(1, 2) for t in parts)
            att = torch.softmax(q @ k.transpose(2, 3) * (1.0 / dh**0.5), -1)
            h = h + self.o((att @ val).transpose(1, 2).reshape(BATCH, SEQ, DIM))
            return h + self.m2(torch.nn.functional.gelu(self.m1(self.ln2(h))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*(Block() for _ in range(LAYERS)))
            self.head = nn.Linear(DIM, 10)

        def forward(self, x):
            return self.head(self.blocks(x).mean(1))

    net = Net()
    order = []
    for i in range(LAYERS):
        names = ("ln1", "ln1b", "qkv", "qkvb", "o", "ob", "ln2", "ln2b", "m1", "m1b", "m2", "m2b")
        order += [p[f"{k}_{i}"] for k in names]
    _load(net, order + [p["head"], p["headb"]])
    feeds = {"x": rng.standard_normal((BATCH, SEQ, DIM)).astype(np.float32), "y": rng.integers(0, 10, BATCH)}
    return g, train, feeds, net, torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)


def _load(net, arrays):
    import torch

    params = list(net.parameters())
    assert len(params) == len(arrays), (len(params), len(arrays))
    with torch.no_grad():
        for t, a in zip(params, arrays):
            assert tuple(t.shape) == a.shape, (tuple(t.shape), a.shape)
            t.copy_(torch.from_numpy(a))


MODELS = {"digits MLP": mlp, "LeNet-5": lenet, "transformer": transformer}


# ----------------------------------------------------------------------------- timing
def bench(name: str, threads: int, runs: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    g, train, feeds, net, opt = MODELS[name](np.random.default_rng(0))
    model = codegen.compile(g, outputs=["loss"], train=train, threads=threads, name="step")
    tx, ty = torch.from_numpy(feeds["x"]), torch.from_numpy(feeds["y"])
    loss_fn = torch.nn.functional.cross_entropy

    def torch_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(tx), ty)
        loss.backward()
        opt.step()
        return loss.item()

    def flowc_step():
        return float(model.run(feeds)["loss"])

    first = [(flowc_step(), torch_step()) for _ in range(10)]
    diff = max(abs(a - b) / max(abs(b), 1e-6) for a, b in first)
    for _ in range(10):
        flowc_step(), torch_step()
    # blocks of BLOCK steps of one side, alternated, each after a pause: the other side's
    # threads (PyTorch's OpenMP team, flowc's pool) stop spinning before a block starts
    tf, tt, ratios = [], [], []
    for i in range(runs):
        t = {}
        for fn in (flowc_step, torch_step) if i % 2 == 0 else (torch_step, flowc_step):
            time.sleep(PAUSE)
            t0 = time.perf_counter()
            for _ in range(BLOCK):
                fn()
            t[fn] = (time.perf_counter() - t0) / BLOCK
        tf.append(t[flowc_step])
        tt.append(t[torch_step])
        ratios.append(t[flowc_step] / t[torch_step])
    return {
        "flowc_us": statistics.median(tf) * 1e6,
        "torch_us": statistics.median(tt) * 1e6,
        "ratio": statistics.median(ratios),
        "diff": diff,
        "arena": model.arena_bytes,
        "lower": model.lower_bound_bytes,
        "state": model.state_bytes,
    }


# ----------------------------------------------------------------------------- data parallel
DP_SAMPLES = 3200  # 100 global batches an epoch


def _samples_per_s(cmd: list[str]) -> float:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()}")
    # "trained S step(s) of B samples in T s: X samples/s ..." (over ranks, a line of times follows)
    last = [ln for ln in res.stdout.splitlines() if ln.startswith("trained ")][-1]
    return float(last.split(": ")[1].split(" samples/s")[0])


def data_parallel(name: str, runs: int, folder: Path) -> dict:
    from codegen.backends.c.toolchain import find_mpiexec, mpiexec_command
    from codegen.exports import export_trainer

    mpiexec = find_mpiexec()
    rng = np.random.default_rng(0)
    exe = {}
    for ranks in (1, 2):
        g, train, feeds, _, _ = MODELS[name](np.random.default_rng(0), batch=BATCH // ranks)
        exe[ranks] = export_trainer(g, folder / f"{ranks}", train=train, name="net", mpi=True) / "net"
    data = {}
    for k, a in feeds.items():
        shape = (DP_SAMPLES, *a.shape[1:])
        data[k] = rng.integers(0, 10, shape) if a.dtype.kind == "i" else rng.random(shape, np.float32)
    np.savez(folder / "data.npz", **data)
    epochs = max(1, int(2e5 // (DP_SAMPLES * (10 if name == "digits MLP" else 1))))
    args = ["train", "--data", str(folder / "data.npz"), "--epochs", str(epochs)]
    one, two, ratios = [], [], []
    for i in range(runs):
        got = {}
        for r in (1, 2) if i % 2 == 0 else (2, 1):
            got[r] = _samples_per_s([*mpiexec_command(mpiexec, r), str(exe[r]), *args])
        one.append(got[1])
        two.append(got[2])
        ratios.append(got[2] / got[1])
    return {"one": statistics.median(one), "two": statistics.median(two), "ratio": statistics.median(ratios)}


PIPE_BATCH, PIPE_MICRO = 128, 8  # pipeline training: a global batch of 8 microbatches of 16


def pipeline_parallel(runs: int, folder: Path) -> dict:
    """The transformer's training binary as one process (a step of PIPE_BATCH samples) against a
    pipeline over 2 ranks (``export_trainer(..., ranks=2)``: 2 stages, PIPE_MICRO microbatches of
    PIPE_BATCH / PIPE_MICRO, 1F1B and GPipe), runs alternated, samples/s compared pair by pair;
    and the largest difference of their final variables (float32 rounding)."""
    from codegen.backends.c.toolchain import find_mpiexec, mpiexec_command
    from codegen.exports import export_trainer
    from graphdef import checkpoint

    mpiexec = find_mpiexec()
    micro = PIPE_BATCH // PIPE_MICRO
    g1, t1, feeds, _, _ = transformer(np.random.default_rng(0), batch=PIPE_BATCH)
    one = export_trainer(g1, folder / "one", train=t1, name="net", mpi=False) / "net"
    g2, t2, _, _, _ = transformer(np.random.default_rng(0), batch=micro)
    two = export_trainer(g2, folder / "two", train=t2, name="net", ranks=2) / "net"
    rng = np.random.default_rng(0)
    data = {k: rng.integers(0, 10, (DP_SAMPLES, *a.shape[1:])) if a.dtype.kind == "i"
            else rng.random((DP_SAMPLES, *a.shape[1:]), np.float32) for k, a in feeds.items()}  # fmt: skip
    np.savez(folder / "data.npz", **data)
    args = ["train", "--data", str(folder / "data.npz"), "--epochs", "4"]
    pipe = [*mpiexec_command(mpiexec, 2), str(two), *args, "--microbatches", str(PIPE_MICRO)]
    got: dict[str, list[float]] = {"one": [], "1f1b": [], "gpipe": [], "r1f1b": [], "rgpipe": []}
    for i in range(runs):
        a = _samples_per_s([str(one), *args])
        for s in ("1f1b", "gpipe") if i % 2 == 0 else ("gpipe", "1f1b"):
            got[s].append(_samples_per_s([*pipe, "--schedule", s]))
            got[f"r{s}"].append(got[s][-1] / a)
        got["one"].append(a)
    # one epoch of each: the epoch's mean loss and the variables. The key projections' biases are
    # left out: their gradient is zero but for rounding (softmax ignores a shift of all scores),
    # which AdamW scales up to whole steps of either sign.
    outs = []
    for cmd, ck in (([str(one)], "one.npz"), (pipe[: pipe.index("train")], "two.npz")):
        cmd = [*cmd, *args[:3], "--epochs", "1", "--checkpoint", str(folder / ck)]
        cmd += ["--microbatches", str(PIPE_MICRO)] if ck == "two.npz" else []
        res = subprocess.run(cmd, check=True, capture_output=True, text=True)
        outs.append(float(res.stdout.split("mean loss ")[1].split(",")[0]))
    a, _ = checkpoint.load(folder / "one.npz")
    b, _ = checkpoint.load(folder / "two.npz")
    rel = {
        k: float(np.abs(a[k] - b[k]).max() / (np.abs(a[k]).max() + 1e-12))
        for k in a
        if a[k].dtype.kind == "f"
    }
    diff = max(v for k, v in rel.items() if not k.startswith("qkvb"))
    from codegen import pipeline_parallel, training

    plan = pipeline_parallel.split(training.split(g2, t2)[0], str(t2.ref), 2)
    predicted = pipeline_parallel.predict(plan, PIPE_MICRO).speedup
    return {k: statistics.median(v) for k, v in got.items()} | {
        "diff": diff, "loss": abs(outs[0] - outs[1]), "predicted": predicted
    }  # fmt: skip


WIDE = (1024, 2048, 2048, 1024, 10)  # 10.5M parameters: about ResNet-18's 11.2M


def wide_mlp(batch: int):
    """An MLP whose gradients weigh what ResNet-18's do (42 MB in float32) for a tenth of its
    compute: where a data-parallel step's allreduce shows."""
    rng = np.random.default_rng(0)
    with gd.Graph("wide_train") as g:
        h = x = gd.placeholder("x", (batch, WIDE[0]))
        y = gd.placeholder("y", (batch,), "int64")
        for k, (n_in, n_out) in enumerate(zip(WIDE, WIDE[1:])):
            h = gd.matmul(h, gd.variable(f"w{k}", _init(rng, n_in, n_out))) + gd.variable(
                f"b{k}", np.zeros(n_out, np.float32)
            )
            h = gd.relu(h) if k < len(WIDE) - 2 else h
        loss = gd.train.softmax_cross_entropy(h, y, name="loss")
        train = gd.train.SGD(0.01).minimize(loss)
    return g, train, {"x": x, "y": y}


def compression(runs: int, folder: Path) -> dict:
    """2 ranks of the wide MLP (batch 16 each): gradients as float32 against --compress fp16, runs
    alternated, samples/s compared pair by pair."""
    from codegen.backends.c.toolchain import find_mpiexec, mpiexec_command
    from codegen.exports import export_trainer

    mpiexec = find_mpiexec()
    g, train, _ = wide_mlp(BATCH // 2)
    exe = {c: export_trainer(g, folder / str(c), train=train, name="net", mpi=True, compress=c) / "net"
           for c in (None, "fp16")}  # fmt: skip
    rng = np.random.default_rng(1)
    n = 40 * BATCH
    np.savez(folder / "data.npz", x=rng.random((n, WIDE[0]), np.float32), y=rng.integers(0, 10, n))
    args = ["train", "--data", str(folder / "data.npz"), "--epochs", "2"]
    got: dict = {None: [], "fp16": []}
    ratios = []
    for i in range(runs):
        pair = {}
        for c in (None, "fp16") if i % 2 == 0 else ("fp16", None):
            pair[c] = _samples_per_s([*mpiexec_command(mpiexec, 2), str(exe[c]), *args])
            got[c].append(pair[c])
        ratios.append(pair["fp16"] / pair[None])
    return {"fp32": statistics.median(got[None]), "fp16": statistics.median(got["fp16"]),
            "ratio": statistics.median(ratios)}  # fmt: skip


def prediction(runs: int, folder: Path) -> dict:
    """The data-parallel step predictor (``flowc inspect --train --ranks``) against the measured
    step of the wide MLP (batch 16 a rank) on 1 and 2 ranks, and its figure for 128 ranks over an
    InfiniBand-like network (alpha 1.5 us, 24 GB/s), with and without a progress thread."""
    from codegen import data_parallel, partition, pipeline
    from codegen.backends.c.toolchain import find_mpiexec, mpiexec_command
    from codegen.exports import export_trainer

    g, train, _ = wide_mlp(BATCH // 2)
    c = pipeline.run(g, pipeline.Options(trainer=train.node.name, allreduce="float32"), until="plan")
    program = c.program[0]

    def predicted(ranks, alpha=partition.ALPHA, beta=partition.BETA, overlap=False):
        args = (program.graph, program.steps, ranks, alpha, beta, partition.step_seconds)
        return data_parallel.predict_step(*args, overlap=overlap)

    exe = export_trainer(g, folder / "p", train=train, name="net", mpi=True) / "net"
    rng = np.random.default_rng(1)
    n = 40 * BATCH
    np.savez(folder / "data.npz", x=rng.random((n, WIDE[0]), np.float32), y=rng.integers(0, 10, n))
    args = ["train", "--data", str(folder / "data.npz"), "--epochs", "2"]
    mpiexec = find_mpiexec()
    steps = {1: [], 2: []}
    for i in range(runs):
        for r in (1, 2) if i % 2 == 0 else (2, 1):
            steps[r].append(BATCH // 2 * r / _samples_per_s([*mpiexec_command(mpiexec, r), str(exe), *args]))
    measured = {r: statistics.median(v) for r, v in steps.items()}
    # calibrated: the steps' compute scaled so that one rank's step is the measured one (the
    # buckets' packing kept at the model's memory rate)
    args = (program.graph, program.steps, 1, partition.ALPHA, partition.BETA)
    packing = data_parallel.predict_step(*args, lambda g, n: 0.0).seconds
    scale = (measured[1] - packing) / (predicted(1).seconds - packing)
    args = (program.graph, program.steps, 2, partition.ALPHA, partition.BETA)
    calibrated = data_parallel.predict_step(*args, lambda g, n: scale * partition.step_seconds(g, n)).seconds
    return {
        "measured": measured,
        "calibrated": calibrated,
        "predicted": {r: predicted(r).seconds for r in (1, 2)},
        "128": predicted(128, 1.5e-6, 24e9),
        "128 overlap": predicted(128, 1.5e-6, 24e9, overlap=True),
    }


def resnet50_prediction(batch: int = 32) -> dict | None:
    """The data-parallel predictor on torchvision's ResNet-50 (imported from ONNX, its weights
    trainable, cross-entropy and SGD with momentum; batch 32 a rank) at 128 ranks over an
    InfiniBand-like network (alpha 1.5 us, 24 GB/s; a ring allreduce a bucket): the step's
    efficiency with this machine's one-core rates, and with the rates of a GPU-class rank
    (15 TFLOP/s, 900 GB/s), for DDP's 25 MB buckets and 4 MB ones, the sums in MPI calls only
    or on a progress thread. None without torchvision."""
    import zoo

    from codegen import data_parallel, partition, pipeline, schedule

    got = zoo.torchvision("resnet50")
    if got is None:
        return None
    module, example, _ = got
    with tempfile.TemporaryDirectory() as tmp:
        g = gd.load_onnx(
            zoo.export(module, example.repeat(batch, 1, 1, 1), Path(tmp) / "r50.onnx"), trainable=True
        )
    out = {"params": sum(a.size for a in g.variables.values() if a.dtype == np.float32)}
    with g:
        labels = gd.placeholder("labels", (batch,), "int64")
        loss = gd.train.softmax_cross_entropy(gd.builder.Tensor(g, g.outputs[0]), labels, name="loss")
        gd.train.SGD(0.1, momentum=0.9).minimize(loss, name="train")
    for bucket in (25 << 20, 4 << 20):
        options = pipeline.Options(trainer="train", allreduce="float32", bucket_bytes=bucket)
        program = pipeline.run(g, options, until="plan").program[0]
        for rates, label in (((None, None), "core"), ((15e12, 900e9), "gpu")):
            with schedule.run_rates(*rates):
                for overlap in (False, True):
                    args = (program.graph, program.steps, 128, 1.5e-6, 24e9, partition.step_seconds)
                    out[(bucket, label, overlap)] = data_parallel.predict_step(*args, overlap=overlap)
    return out


def print_resnet50(r: dict) -> None:
    """resnet50_prediction's figures for batches 32 and 64 a rank, as a table."""
    if r[32] is None:
        print("\nResNet-50 at 128 ranks: skipped (no torchvision)")
        return
    print(f"\npredicted data-parallel training of torchvision ResNet-50 ({r[32]['params'] / 1e6:.1f}M "
          "parameters, SGD with momentum) on 128 ranks over alpha 1.5 us, 24 GB/s (a ring allreduce a "
          "bucket; the step's compute by the cost model at the rank's rates):")  # fmt: skip
    print("| rank's rates | batch a rank | bucket | step (ms) | allreduce waits (ms) | efficiency "
          "| with a progress thread |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for label, rates in (("core", "this machine's core"), ("gpu", "GPU-class: 15 TFLOP/s, 900 GB/s")):
        for batch in (32, 64):
            for bucket in (25 << 20, 4 << 20):
                a, b = r[batch][(bucket, label, False)], r[batch][(bucket, label, True)]
                ms = f"{a.seconds * 1e3:.1f}"
                cells = [rates, batch, f"{bucket >> 20} MB", ms, f"{a.exposed * 1e3:.1f}",
                         f"{100 * a.efficiency:.0f}%", f"{100 * b.efficiency:.0f}%"]  # fmt: skip
                print("| " + " | ".join(map(str, cells)) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=30, help="pairs of blocks of BLOCK steps")
    ap.add_argument("--only", default="")
    ap.add_argument("--ranks-runs", type=int, default=5, help="pairs of data-parallel runs (0: none)")
    ap.add_argument(
        "--compress-runs", type=int, default=5, help="pairs of float32/float16-gradient runs (0: none)"
    )
    args = ap.parse_args()
    import torch

    print(f"training step, batch {BATCH}: flowc (compiled, called from Python), PyTorch {torch.__version__}")
    print(
        "| model | threads | flowc step (us) | PyTorch step (us) | flowc/PyTorch (paired) | loss diff "
        "| arena (lower bound) | state |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in MODELS:
        if args.only and args.only not in name:
            continue
        for threads in args.threads:
            r = bench(name, threads, args.runs)
            print(
                f"| {name} | {threads} | {r['flowc_us']:.1f} | {r['torch_us']:.1f} | {r['ratio']:.2f} | "
                f"{r['diff']:.1e} | {r['arena']} B ({r['lower']} B) | {r['state']} B |",
                flush=True,
            )
    if args.ranks_runs > 0:
        try:
            from codegen.backends.c.toolchain import find_mpicc, find_mpiexec

            find_mpicc(), find_mpiexec()
        except Exception as e:  # noqa: BLE001 - no MPI here: say so and stop
            print(f"data parallel: skipped ({e})")
            return 0
        print(f"\ndata parallel training binary, global batch {BATCH}, 1 rank (batch {BATCH}) vs 2 ranks "
              f"(batch {BATCH // 2} each), one thread each:")  # fmt: skip
        print("| model | 1 rank (samples/s) | 2 ranks (samples/s) | 2 ranks / 1 rank (paired) |")
        print("|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            for name in MODELS:
                if args.only and args.only not in name:
                    continue
                r = data_parallel(name, args.ranks_runs, Path(tmp) / name.replace(" ", "_"))
                print(f"| {name} | {r['one']:.0f} | {r['two']:.0f} | {r['ratio']:.2f} |", flush=True)
        if not args.only or args.only in "transformer":
            with tempfile.TemporaryDirectory() as tmp:
                r = pipeline_parallel(args.ranks_runs, Path(tmp))
            print(
                f"\npipeline-parallel training, transformer, global batch {PIPE_BATCH}: one process (a step "
                f"of {PIPE_BATCH}) {r['one']:.0f} samples/s; 2 ranks (2 stages, {PIPE_MICRO} microbatches of "
                f"{PIPE_BATCH // PIPE_MICRO}): 1F1B {r['1f1b']:.0f} samples/s ({r['r1f1b']:.2f}x, paired), "
                f"GPipe {r['gpipe']:.0f} samples/s ({r['rgpipe']:.2f}x; the cost model predicts "
                f"{r['predicted']:.2f}x for 1F1B); after an epoch (25 steps) the mean "
                f"loss differs by {r['loss']:.1e} and the variables by {r['diff']:.1e} (relative; the key "
                "biases, whose gradient is rounding only, left out)"
            )
    if args.compress_runs > 0:
        with tempfile.TemporaryDirectory() as tmp:
            r = prediction(args.compress_runs, Path(tmp))
        m, p = r["measured"], r["predicted"]
        print(f"\ndata-parallel step predictor, wide MLP, batch {BATCH // 2} a rank: 1 rank predicted "
              f"{p[1] * 1e3:.1f} ms, measured {m[1] * 1e3:.1f} ms ({p[1] / m[1]:.2f}x); 2 ranks predicted "
              f"{p[2] * 1e3:.1f} ms, measured {m[2] * 1e3:.1f} ms ({p[2] / m[2]:.2f}x), calibrated on the "
              f"one-rank step {r['calibrated'] * 1e3:.1f} ms ({r['calibrated'] / m[2]:.2f}x); 128 ranks over "
              f"alpha 1.5 us, 24 GB/s: efficiency {100 * r['128'].efficiency:.0f}% (allreduce in MPI calls "
              f"only), {100 * r['128 overlap'].efficiency:.0f}% (with a progress thread)")  # fmt: skip
        print_resnet50({b: resnet50_prediction(b) for b in (32, 64)})
        with tempfile.TemporaryDirectory() as tmp:
            r = compression(args.compress_runs, Path(tmp))
        print(f"\ngradient compression, wide MLP ({'-'.join(map(str, WIDE))}, 10.5M parameters), 2 ranks of "
              f"batch {BATCH // 2}: float32 {r['fp32']:.0f} samples/s, --compress fp16 {r['fp16']:.0f} "
              "samples/s, "
              f"fp16 / float32 {r['ratio']:.2f} (paired)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
