"""Single-layer timings: flowc (one or more source trees) against onnxruntime, one thread.

    python bench/kernels.py [--trees A B ...] [--runs 400] [--only NAME] [--json FILE]

Each layer is a one-node ONNX model (opset 17) with random weights. Every tree in --trees
(default: this one) compiles each layer to a standalone binary in its own Python process, so
an older checkout (e.g. `git archive` of a base commit) can be timed beside the working one.
The binaries time themselves (--bench); onnxruntime runs with one intra-op thread. The peers
are interleaved in rounds because this machine is shared and noisy; the table holds medians
in microseconds.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _dw(c, hw, k, s, bias=True):
    return (
        "Conv",
        (1, c, hw, hw),
        dict(kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=c),
        [(c, 1, k, k)] + ([(c,)] if bias else []),
    )


# name -> (op type, input shape, attributes, weight shapes)
LAYERS = {
    "dw3-s1-16x112": _dw(16, 112, 3, 1),
    "dw3-s2-16x112": _dw(16, 112, 3, 2),
    "dw3-s1-88x28": _dw(88, 28, 3, 1, bias=False),
    "dw5-s2-72x56": _dw(72, 56, 5, 2),
    "dw3-s1-240x14": _dw(240, 14, 3, 1),
    "dw5-s1-576x7": _dw(576, 7, 5, 1),
    "softmax-12x128x128": ("Softmax", (1, 12, 128, 128), dict(axis=-1), []),
    "softmax-ax1-12x128x128": ("Softmax", (1, 12, 128, 128), dict(axis=1), []),
    "logsoftmax-1000x1000": ("LogSoftmax", (1000, 1000), dict(axis=-1), []),
    "layernorm-128x768": ("LayerNormalization", (128, 768), dict(axis=-1), [(768,), (768,)]),
    "maxpool3-s2-64x112": (
        "MaxPool",
        (1, 64, 112, 112),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        [],
    ),
    "avgpool3-s1-64x56": (
        "AveragePool",
        (1, 64, 56, 56),
        dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        [],
    ),
    "gap-512x7": ("GlobalAveragePool", (1, 512, 7, 7), {}, []),
    "call-overhead-relu16": ("Relu", (16,), {}, []),  # onnxruntime's per-call cost from Python
}


def onnx_model(name: str, path: Path) -> dict:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    op, shape, attrs, wshapes = LAYERS[name]
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), f"w{i}")
        for i, s in enumerate(wshapes)
    ]
    node = helper.make_node(op, ["x"] + [t.name for t in inits], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        name.replace("-", "_"),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, path)
    return {"x": rng.standard_normal(shape).astype(np.float32)}


_EXPORT = """
import sys, codegen, graphdef as gd
from pathlib import Path
for onnx_path in sys.argv[1:]:
    p = Path(onnx_path)
    codegen.export(gd.load_onnx(p), p.parent / (p.stem + "-" + sys.argv[0]), name="model")
"""


def build(tree: Path, tag: str, paths: list[Path]) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(
        [sys.executable, "-c", _EXPORT.replace("sys.argv[0]", repr(tag)), *map(str, paths)],
        cwd=tree,
        env=env,
        check=True,
    )


def binary_us(binary: Path, x_path: Path, runs: int, out: Path) -> float:
    res = subprocess.run(
        [str(binary), "--in", f"x={x_path}", "--out-dir", str(out), "--bench", str(runs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(res.strip().split("=")[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=Path, nargs="+", default=[ROOT])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import onnxruntime as ort

    names = [n for n in LAYERS if args.only in n]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        feeds = {n: onnx_model(n, tmp / f"{n}.onnx") for n in names}
        for n in names:
            np.save(tmp / f"{n}-x.npy", feeds[n]["x"])
        tags = [f"t{i}" for i in range(len(args.trees))]
        for tree, tag in zip(args.trees, tags):
            build(tree.resolve(), tag, [tmp / f"{n}.onnx" for n in names])
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
        for n in names:
            sess = ort.InferenceSession(str(tmp / f"{n}.onnx"), so, providers=["CPUExecutionProvider"])
            want = sess.run(None, feeds[n])[0]
            row = {"layer": n}
            acc: dict[str, list[float]] = {}
            for tag in tags:  # correctness against onnxruntime
                binary_us(tmp / f"{n}-{tag}" / "model", tmp / f"{n}-x.npy", 1, tmp / f"res-{tag}")
                got = np.load(tmp / f"res-{tag}" / "y.npy")
                row[f"err_{tag}"] = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
            per = max(args.runs // args.rounds, 5)
            for _ in range(args.rounds):
                for tag in tags:
                    acc.setdefault(tag, []).append(
                        binary_us(tmp / f"{n}-{tag}" / "model", tmp / f"{n}-x.npy", per, tmp / "res")
                    )
                ts = []
                for _ in range(per):
                    t0 = time.perf_counter()
                    sess.run(None, feeds[n])
                    ts.append((time.perf_counter() - t0) * 1e6)
                acc.setdefault("ort", []).append(statistics.median(ts))
            row.update({k: statistics.median(v) for k, v in acc.items()})
            rows.append(row)
            print(
                n,
                {k: (round(v, 1) if isinstance(v, float) and v > 1e-3 else v) for k, v in row.items()},
                file=sys.stderr,
            )
    head = ["layer"] + [f"flowc {t} (us)" for t in args.trees] + ["ORT 1T (us)"] + [f"err {t}" for t in tags]
    print("| " + " | ".join(map(str, head)) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = (
            [r["layer"]]
            + [f"{r[t]:.1f}" for t in tags]
            + [f"{r['ort']:.1f}"]
            + [f"{r[f'err_{t}']:.1e}" for t in tags]
        )
        print("| " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
