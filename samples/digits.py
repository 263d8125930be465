"""The default sample: a handwritten-digit classifier trained on real data.

The UCI 8x8 digits (samples/data/digits.npz, CC BY 4.0) are split into 1,500 training and
297 held-out images. A 64-32-10 MLP is trained with flowc's own symbolic gradients and gd.train's
SGD, each step compiled to C (``codegen.compile(..., train=...)``; the demo also times the numpy
interpreter on the same steps); ``build()`` returns the trained inference graph, which the demo
compiles to a standalone binary (build/digits/digits) and runs on every held-out image.

    python samples/digits.py          # train, compile, report accuracy, latency, binary size
    flowc compile samples/digits.py:build -o out --name net

When the cross tools are installed (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross
qemu-user, gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm) the demo also builds the
classifier for an ARM64 phone (a static binary, run under qemu-aarch64) and for a Cortex-M4
microcontroller (a static library and its flash/RAM footprint, run on QEMU's MPS2-AN386
board); without them it says what it skipped.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import graphdef as gd  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "digits.npz"
HIDDEN = 32
N_TRAIN = 1500


def load_data():
    """(train_x, train_y, test_x, test_y): pixels scaled to [0, 1], labels int64."""
    with np.load(DATA) as d:
        x = d["images"].reshape(-1, 64).astype(np.float32) / 16.0
        y = d["labels"].astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((64, HIDDEN)) * np.sqrt(2 / 64)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal((HIDDEN, 10)) * np.sqrt(1 / HIDDEN)).astype(np.float32),
        "b2": np.zeros(10, np.float32),
    }


def _logits(x, p):
    h = gd.relu(gd.matmul(x, p["w1"]) + p["b1"], name="hidden")
    return gd.add(gd.matmul(h, p["w2"]), p["b2"], name="logits")


def training_graph(batch: int, lr: float = 0.2, seed: int = 0) -> gd.Graph:
    """Cross-entropy loss and one SGD step ('train', gd.train) over variables w1, b1, w2, b2."""
    g = gd.Graph("digits_train")
    with g:
        x = gd.placeholder("x", (batch, 64))
        labels = gd.placeholder("labels", (batch,), "int64")
        p = {k: gd.variable(k, v) for k, v in _params(seed).items()}
        loss = gd.train.softmax_cross_entropy(_logits(x, p), labels, name="loss")
        gd.train.SGD(lr).minimize(loss, name="train")
    return g


def last_layer_training_graph(weights: dict, batch: int = 10, lr: float = 0.1) -> gd.Graph:
    """On-device fine-tuning: the hidden layer frozen (constants w1, b1), the output layer's w2
    and b2 variables trained by an SGD step ('train') on a batch of images and labels."""
    g = gd.Graph("digits_last_layer")
    with g:
        x = gd.placeholder("x", (batch, 64))
        labels = gd.placeholder("labels", (batch,), "int64")
        p = {
            k: gd.constant(v, name=k) if k in ("w1", "b1") else gd.variable(k, v) for k, v in weights.items()
        }
        loss = gd.train.softmax_cross_entropy(_logits(x, p), labels, name="loss")
        gd.train.SGD(lr).minimize(loss, name="train")
    return g


def train(epochs: int = 30, batch: int = 50, seed: int = 0, compiled: bool = True) -> dict[str, np.ndarray]:
    """Trained weights, deterministically for a given seed: each step compiled to C (forward,
    backward and update in one call of the generated code), or run by the numpy interpreter."""
    tx, ty, _, _ = load_data()
    g = training_graph(batch, seed=seed)
    if compiled:
        import codegen

        model = codegen.compile(g, outputs=["loss"], train="train", name="digits_train")
        step, read = (lambda feeds: model.run(feeds)), model.variable
    else:
        sess = gd.Session(g)
        step, read = (lambda feeds: sess.run(feeds, ["train"])), sess.variable
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(len(tx))
        for i in range(0, len(tx) - batch + 1, batch):
            idx = order[i : i + batch]
            step({"x": tx[idx], "labels": ty[idx]})
    return {k: read(k) for k in ("w1", "b1", "w2", "b2")}


def build(batch: int = 1, weights: dict | None = None) -> gd.Graph:
    """The inference graph: x (batch, 64) float32 -> probs (batch, 10)."""
    weights = weights or train()
    g = gd.Graph("digits")
    with g:
        x = gd.placeholder("x", (batch, 64))
        p = {k: gd.constant(v, name=k) for k, v in weights.items()}
        gd.softmax(_logits(x, p), name="probs")
    return g


def to_onnx(weights: dict, path: Path, batch: int | str = 1) -> Path:
    """The same classifier as an ONNX file (MatMul, Add, Relu, Softmax), written with onnx.helper."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["hidden"]),
        helper.make_node("MatMul", ["hidden", "w2"], ["l0"]),
        helper.make_node("Add", ["l0", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"]),
    ]
    graph = helper.make_graph(
        nodes,
        "digits",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def binary_predictions(binary: Path, images: np.ndarray) -> np.ndarray:
    """Run the standalone binary on each image (one process per image, as a user would)."""
    import subprocess
    import tempfile

    preds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(len(images)):
            np.save(f"{tmp}/x.npy", images[i : i + 1])
            subprocess.run([binary, "--in", f"x={tmp}/x.npy", "--out-dir", tmp], check=True)
            preds.append(int(np.argmax(np.load(f"{tmp}/probs.npy"))))
    return np.array(preds)


def benchmark(binary: Path, image: np.ndarray, runs: int = 10000) -> float:
    """Median microseconds per run of the binary's own --bench loop."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/x.npy", image)
        out = subprocess.run(
            [binary, "--in", f"x={tmp}/x.npy", "--out-dir", tmp, "--bench", str(runs)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return float(out.split("=")[1])


def main() -> int:
    """Train, compile to a standalone binary (from the graph and from ONNX), compare with the interpreter."""
    import codegen

    t0 = time.perf_counter()
    codegen.compile(training_graph(50), outputs=["loss"], train="train", name="digits_train")
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    weights = train()  # the build above, from the cache
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    interp_weights = train(compiled=False)
    t_interp = time.perf_counter() - t0
    _, _, test_x, test_y = load_data()
    g = build(batch=1, weights=weights)
    interp = np.array(
        [int(np.argmax(gd.run(g, {"x": test_x[i : i + 1]}, ["probs"])[0])) for i in range(len(test_x))]
    )
    drift = max(float(np.max(np.abs(weights[k] - interp_weights[k]))) for k in weights)
    print(
        f"trained a 64-{HIDDEN}-10 MLP on {N_TRAIN} images (30 epochs of SGD, gd.train): {t_train:.2f} s "
        f"with the training step compiled to C (built in {t_build:.1f} s), {t_interp:.2f} s in the numpy "
        f"interpreter ({t_interp / t_train:.0f}x); largest weight difference {drift:.1e}"
    )

    out = Path(__file__).resolve().parents[1] / "build" / "digits"
    t0 = time.perf_counter()
    codegen.export(g, out, name="digits")
    t_export = time.perf_counter() - t0
    binary = out / "digits"
    preds = binary_predictions(binary, test_x)
    acc_bin, acc_int = float(np.mean(preds == test_y)), float(np.mean(interp == test_y))
    meta = json.loads((out / "metadata.json").read_text())
    print(
        f"compiled to {binary} in {t_export:.1f} s: binary {binary.stat().st_size} bytes, "
        f"weights {meta['weight_bytes']} B, arena {meta['arena_bytes']} B "
        f"(lower bound {meta['arena_lower_bound']} B)"
    )
    print(
        f"held-out accuracy: binary {acc_bin:.4f}, interpreter {acc_int:.4f} "
        f"({int(np.sum(preds == test_y))}/{len(test_y)}); "
        f"predictions identical: {bool(np.all(preds == interp))}"
    )
    print(f"latency per image (batch 1, median of 10000 runs): {benchmark(binary, test_x[:1]):.2f} us")

    same_onnx = True
    try:
        onnx_file = to_onnx(weights, out.parent / "digits.onnx")
    except ImportError:
        print("onnx is not installed: skipping the ONNX route")
    else:
        codegen.export(gd.load_onnx(onnx_file), out.parent / "digits_onnx", name="digits")
        onnx_preds = binary_predictions(out.parent / "digits_onnx" / "digits", test_x)
        same_onnx = bool(np.all(onnx_preds == preds))
        print(
            f"from ONNX ({onnx_file} -> flowc): accuracy {np.mean(onnx_preds == test_y):.4f}, "
            f"predictions identical to the graph's: {same_onnx}"
        )
    same_arm = arm(weights, test_x, preds, out.parent)
    return 0 if acc_bin == acc_int and acc_bin > 0.9 and same_onnx and same_arm else 1


def arm(weights: dict, images: np.ndarray, host_preds: np.ndarray, build_dir: Path) -> bool:
    """The classifier on ARM: an aarch64-linux binary under qemu-aarch64 and a Cortex-M4
    library run on an emulated board; True unless a prediction differs from the host's."""
    import shutil
    import subprocess

    import codegen
    from codegen.backends.c import mcu

    same = True
    g = build(batch=len(images), weights=weights)  # one run over every held-out image
    if shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64"):
        out = codegen.export(g, build_dir / "digits_aarch64", name="digits", arch="aarch64-linux")
        run_dir = build_dir / "digits_aarch64_run"  # beside the project folder, which is flowc's
        run_dir.mkdir(exist_ok=True)
        np.save(run_dir / "x.npy", images)
        cmd = ["qemu-aarch64", out / "digits", "--in", f"x={run_dir / 'x.npy'}", "--out-dir", run_dir / "res"]
        subprocess.run(cmd, check=True)
        preds = np.argmax(np.load(run_dir / "res" / "probs.npy"), axis=1)
        same &= bool(np.all(preds == host_preds))
        print(
            f"aarch64-linux: static binary {out / 'digits'} ({(out / 'digits').stat().st_size} bytes) under "
            f"qemu-aarch64: predictions identical to the host's: {bool(np.all(preds == host_preds))}"
        )
    else:
        print("skipped aarch64-linux (needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user)")
    if not shutil.which("arm-none-eabi-gcc"):
        print("skipped cortex-m4 (needs gcc-arm-none-eabi and libnewlib-arm-none-eabi)")
        return same
    out = codegen.export(build(weights=weights), build_dir / "digits_m4", name="digits", arch="cortex-m4")
    fp = mcu.Footprint.from_json(json.loads((out / "metadata.json").read_text())["footprint"])
    print(f"cortex-m4: {out / 'libdigits.a'}, batch 1: {fp.line()}")
    print(f"  {fp.detail()}")
    if not shutil.which("qemu-system-arm"):
        print("skipped the Cortex-M4 run (needs qemu-system-arm)")
        return same
    out = codegen.export(g, build_dir / "digits_m4_all", name="digits", arch="cortex-m4")
    res = mcu.run_firmware(out, {"x": images})
    preds = np.argmax(res["outputs"]["probs"], axis=1)
    same &= bool(np.all(preds == host_preds))
    print(
        f"cortex-m4 on qemu-system-arm (MPS2-AN386), {len(images)} images in one run: predictions identical "
        f"to the host's: {bool(np.all(preds == host_preds))}, stack used {res['stack']} B"
    )
    return same and on_device_training(weights, build_dir)


def on_device_training(weights: dict, build_dir: Path, steps: int = 20, batch: int = 10) -> bool:
    """The output layer fine-tuned on the Cortex-M4 (last_layer_training_graph): ``steps`` SGD
    steps of the generated C on the emulated board; True when its last loss is the
    interpreter's."""
    import codegen
    from codegen.backends.c import mcu

    tx, ty, _, _ = load_data()
    feeds = {"x": invert_some(tx[:batch]), "labels": ty[:batch]}
    g = last_layer_training_graph(weights, batch)
    out = codegen.export(g, build_dir / "digits_m4_train", name="digits", arch="cortex-m4", outputs=["loss"],
                         train="train")  # fmt: skip
    fp = mcu.Footprint.from_json(json.loads((out / "metadata.json").read_text())["footprint"])
    res = mcu.run_firmware(out, feeds, runs=steps)
    sess = gd.Session(g)
    want = [float(sess.run(feeds, ["train"])[0]) for _ in range(steps)]
    got = float(res["outputs"]["loss"])
    same = abs(got - want[-1]) <= 1e-5 * max(1.0, abs(want[-1]))
    print(
        f"cortex-m4 on-device training of the output layer (SGD, batch {batch}): {fp.line()}; "
        f"after {steps} steps on the board the loss is {got:.6f} (interpreter {want[-1]:.6f}, first step "
        f"{want[0]:.6f}), stack used {res['stack']} B"
    )
    return same


def invert_some(x: np.ndarray) -> np.ndarray:
    """Every other image with its pixels inverted: data the trained classifier has not seen."""
    x = x.copy()
    x[::2] = 1.0 - x[::2]
    return x


if __name__ == "__main__":
    sys.exit(main())
