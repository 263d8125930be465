"""The default sample: a handwritten-digit classifier trained on real data.

The UCI 8x8 digits (samples/data/digits.npz, CC BY 4.0) are split into 1,500 training and
297 held-out images. A 64-32-10 MLP is trained with flowc's own symbolic gradients and assign
ops, run by the numpy interpreter; ``build()`` returns the trained inference graph.

    python samples/digits.py          # train, then report held-out accuracy and latency
"""

from __future__ import annotations

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
    """Cross-entropy loss and one SGD step ('train') over variables w1, b1, w2, b2."""
    g = gd.Graph("digits_train")
    with g:
        x = gd.placeholder("x", (batch, 64))
        labels = gd.placeholder("labels", (batch,), "int64")
        p = {k: gd.variable(k, v) for k, v in _params(seed).items()}
        logp = gd.log_softmax(_logits(x, p))
        onehot = gd.gather(gd.constant(np.eye(10, dtype=np.float32)), labels)
        loss = gd.neg(gd.reduce_mean(gd.reduce_sum(onehot * logp, axes=1)), name="loss")
        grads = gd.gradients(loss, list(p.values()))
        steps = [gd.assign_sub(v, dv * lr) for v, dv in zip(p.values(), grads)]
        with gd.control_dependencies(steps):
            gd.identity(loss, name="train")
    return g


def train(epochs: int = 30, batch: int = 50, seed: int = 0) -> dict[str, np.ndarray]:
    """Trained weights, deterministically for a given seed."""
    tx, ty, _, _ = load_data()
    g = training_graph(batch, seed=seed)
    sess = gd.Session(g)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(len(tx))
        for i in range(0, len(tx) - batch + 1, batch):
            idx = order[i : i + batch]
            sess.run({"x": tx[idx], "labels": ty[idx]}, ["train"])
    return {k: sess.variable(k) for k in ("w1", "b1", "w2", "b2")}


def build(batch: int = 1, weights: dict | None = None) -> gd.Graph:
    """The inference graph: x (batch, 64) float32 -> probs (batch, 10)."""
    weights = weights or train()
    g = gd.Graph("digits")
    with g:
        x = gd.placeholder("x", (batch, 64))
        p = {k: gd.constant(v, name=k) for k, v in weights.items()}
        gd.softmax(_logits(x, p), name="probs")
    return g


def main() -> int:
    t0 = time.perf_counter()
    weights = train()
    t_train = time.perf_counter() - t0
    _, _, test_x, test_y = load_data()
    g = build(batch=1, weights=weights)
    t0 = time.perf_counter()
    preds = [int(np.argmax(gd.run(g, {"x": test_x[i : i + 1]}, ["probs"])[0])) for i in range(len(test_x))]
    per_image = (time.perf_counter() - t0) / len(test_x)
    accuracy = float(np.mean(np.array(preds) == test_y))
    print(f"trained 64-{HIDDEN}-10 MLP on {N_TRAIN} images in {t_train:.1f} s (numpy interpreter)")
    print(f"held-out accuracy: {accuracy:.4f} ({int(accuracy * len(test_y))}/{len(test_y)})")
    print(f"interpreter latency: {per_image * 1e6:.0f} us per image")
    return 0 if accuracy > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
