"""Fine-tuning an ONNX export, the training step compiled to C.

The digit classifier of samples/digits.py is exported to ONNX with a symbolic batch axis (as
``torch.onnx.export(..., dynamic_axes=...)`` writes one), imported with its initializers as
trainable variables (``gd.load_onnx(..., trainable=True)``), and fine-tuned with Adam to a new
input domain: the same digits with their pixels inverted (ink light on dark), on which the
original weights fail. Each step (forward, backward, update) is one call of the generated C;
the weights and Adam's moments are checkpointed, and the interpreter, restored from that
checkpoint, measures the held-out accuracy before and after.

    python samples/finetune.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "samples"))
import digits  # noqa: E402

import graphdef as gd  # noqa: E402
from graphdef.builder import Tensor  # noqa: E402

BATCH = 50
EPOCHS = 40


def invert(x: np.ndarray) -> np.ndarray:
    return (1.0 - x).astype(np.float32)


def fine_tuning_graph(onnx_path: Path, lr: float = 1e-2):
    """The imported classifier with a cross-entropy loss on its logits and an Adam step."""
    g = gd.load_onnx(onnx_path, shapes={"x": (BATCH, 64)}, trainable=True)
    softmax = g.node(g.node("probs").inputs[0].node)  # the output "probs" is an identity of it
    logits = Tensor(g, softmax.inputs[0])
    with g:
        labels = gd.placeholder("labels", (BATCH,), "int64")
        loss = gd.train.softmax_cross_entropy(logits, labels, name="loss")
        train = gd.train.Adam(lr).minimize(loss)
    return g, train


def accuracy(sess: gd.Session, x: np.ndarray, y: np.ndarray) -> float:
    """Held-out accuracy in batches of BATCH (the last one padded)."""
    preds = []
    for i in range(0, len(x), BATCH):
        chunk = x[i : i + BATCH]
        padded = np.concatenate([chunk, np.zeros((BATCH - len(chunk), 64), np.float32)])
        preds.append(np.argmax(sess.run({"x": padded}, ["probs"])[0], axis=1)[: len(chunk)])
    return float(np.mean(np.concatenate(preds) == y))


def main() -> int:
    import codegen

    out = ROOT / "build" / "finetune"
    out.mkdir(parents=True, exist_ok=True)
    onnx_path = digits.to_onnx(digits.train(), out / "digits.onnx", batch="N")
    tx, ty, test_x, test_y = digits.load_data()
    g, train = fine_tuning_graph(onnx_path)
    variables = [n.name for n in g.nodes if n.op == "variable" and n.attrs["trainable"]]
    before = gd.Session(g)
    acc0, acc0_plain = accuracy(before, invert(test_x), test_y), accuracy(before, test_x, test_y)
    print(
        f"imported {onnx_path.name} with trainable initializers {', '.join(variables)}; held-out accuracy "
        f"{acc0_plain:.4f} on the digits it was trained on, {acc0:.4f} on inverted digits"
    )

    t0 = time.perf_counter()
    model = codegen.compile(g, outputs=["loss"], train=train, name="finetune")
    t_build = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    steps, losses = 0, []
    t0 = time.perf_counter()
    for _ in range(EPOCHS):
        order = rng.permutation(len(tx))
        for i in range(0, len(tx) - BATCH + 1, BATCH):
            idx = order[i : i + BATCH]
            losses.append(float(model(x=invert(tx[idx]), labels=ty[idx])["loss"]))
            steps += 1
    t_train = time.perf_counter() - t0
    ckpt = model.save_checkpoint(out / "finetuned.npz")
    print(
        f"fine-tuned on {len(tx)} inverted images: {steps} Adam steps of batch {BATCH} in {t_train:.3f} s "
        f"({steps / t_train:.0f} steps/s, the step compiled to C in {t_build:.1f} s); loss "
        f"{np.mean(losses[:5]):.3f} -> {np.mean(losses[-5:]):.3f}; checkpoint {ckpt}"
    )

    after = gd.Session(g)
    header = after.restore(ckpt)
    acc1, acc1_plain = accuracy(after, invert(test_x), test_y), accuracy(after, test_x, test_y)
    print(
        f"after fine-tuning (interpreter restored from the checkpoint, step {header['step']}): held-out "
        f"accuracy {acc1:.4f} on inverted digits (was {acc0:.4f}), {acc1_plain:.4f} on the original ones"
    )
    return 0 if acc1 > 0.9 and acc1 > acc0 + 0.2 else 1


if __name__ == "__main__":
    sys.exit(main())
