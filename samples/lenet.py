"""LeNet-5 for 28x28 grey images, built with the graphdef API (seeded random weights).

The same network as ``LeNet5`` in tests/onnx/test_models.py (conv 5x5 -> tanh -> max pool,
conv 5x5 -> relu -> avg pool, three dense layers): 61,706 float32 parameters. Used as the
convolutional model of the footprint report (bench/footprint.py) and the cross-compilation
tests.

    flowc compile samples/lenet.py:build -o out --name lenet --arch cortex-m4
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import graphdef as gd  # noqa: E402


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights, as PyTorch initializes them."""
    rng = np.random.default_rng(seed)
    shapes = {
        "c1.w": (6, 1, 5, 5), "c1.b": (6,), "c2.w": (16, 6, 5, 5), "c2.b": (16,),
        "f1.w": (400, 120), "f1.b": (120,), "f2.w": (120, 84), "f2.b": (84,),
        "f3.w": (84, 10), "f3.b": (10,),
    }  # fmt: skip
    fan_in = {"c1": 25, "c2": 150, "f1": 400, "f2": 120, "f3": 84}
    return {
        k: rng.uniform(-1, 1, s).astype(np.float32) / np.float32(np.sqrt(fan_in[k.split(".")[0]]))
        for k, s in shapes.items()
    }


def build(batch: int = 1, seed: int = 0) -> gd.Graph:
    """x (batch, 1, 28, 28) float32 -> logits (batch, 10)."""
    p = weights(seed)
    g = gd.Graph("lenet5")
    with g:
        x = gd.placeholder("x", (batch, 1, 28, 28))
        c = {k: gd.constant(v, name=k.replace(".", "_")) for k, v in p.items()}
        h = gd.max_pool2d(gd.tanh(gd.conv2d(x, c["c1.w"], c["c1.b"], padding=2)), 2)
        h = gd.avg_pool2d(gd.relu(gd.conv2d(h, c["c2.w"], c["c2.b"])), 2)
        h = gd.relu(gd.gemm(gd.flatten(h), c["f1.w"], c["f1.b"]))
        h = gd.relu(gd.gemm(h, c["f2.w"], c["f2.b"]))
        gd.gemm(h, c["f3.w"], c["f3.b"], name="logits")
    return g


if __name__ == "__main__":
    xv = np.random.default_rng(1).standard_normal((1, 1, 28, 28)).astype(np.float32)
    print(gd.run(build(), {"x": xv}, ["logits"])[0])
