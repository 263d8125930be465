"""The digit classifier split over two MPI ranks: a pipeline-parallel binary run with mpiexec.

The hidden layer runs on rank 0 and the output layer on rank 1 (``gd.device("rank:N")``);
flowc puts a Send of the hidden activations after the first matmul on rank 0 and a Recv
before the second on rank 1, and builds one SPMD program with mpicc. The held-out images go
through it as microbatches (``--microbatches``): while rank 1 classifies one slice, rank 0
already computes the next. The predictions must equal the one-process binary's.

    python samples/pipeline.py       # train (samples/digits.py), compile, run on 2 ranks
    flowc compile samples/pipeline.py:build -o out --name net --ranks 2
    mpiexec -n 2 out/net --in x=x.npy --out-dir res --microbatches 9

Needs MPI (``pip install 'flowc[mpi]'``: mpi4py and MPICH, as ``make`` installs); without
mpicc or mpiexec it says what it skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "samples"))
import digits  # noqa: E402

import graphdef as gd  # noqa: E402

MICROBATCHES = 9  # the 297 held-out images: 9 slices of 33


def build(batch: int = 33, weights: dict | None = None) -> gd.Graph:
    """The classifier of samples/digits.py with each layer placed on its rank."""
    weights = weights or digits.train()
    with gd.Graph("digits_pipeline") as g:
        x = gd.placeholder("x", (batch, 64))
        with gd.device("rank:0"):
            h = gd.relu(gd.matmul(x, weights["w1"]) + weights["b1"], name="hidden")
        with gd.device("rank:1"):
            logits = gd.add(gd.matmul(h, weights["w2"]), weights["b2"], name="logits")
            gd.softmax(logits, name="probs")
    return g


def main() -> int:
    import codegen
    from codegen.backends.c import toolchain

    try:
        mpiexec = toolchain.find_mpiexec()
        toolchain.find_mpicc()
    except gd.FlowcError as e:
        print(f"skipped the 2-rank pipeline run: {e}")
        return 0
    weights = digits.train()
    _, _, test_x, test_y = digits.load_data()
    batch = len(test_x) // MICROBATCHES
    g = build(batch, weights)
    out = ROOT / "build" / "pipeline"
    codegen.export(g, out / "net", name="net", ranks=2)
    codegen.export(g, out / "single", name="net")  # the same graph for one process
    np.save(out / "x.npy", test_x)
    meta = json.loads((out / "net" / "metadata.json").read_text())
    cut = meta["partition"]
    arenas = ", ".join(f"rank {p['rank']} {p['arena_bytes']} B" for p in meta["per_rank"])
    print(
        f"split over 2 ranks ({cut['placement']}): {len(cut['edges'])} tensor(s) cross, "
        f"{cut['bytes_sent']} B a microbatch; arenas {arenas}"
    )
    cmd = [*toolchain.mpiexec_command(mpiexec, 2), str(out / "net" / "net"), "--in", f"x={out / 'x.npy'}",
           "--out-dir", str(out / "res"), "--microbatches", str(MICROBATCHES), "--bench", "200"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    preds = np.argmax(np.load(out / "res" / "probs.npy"), axis=1)
    single = []
    for j in range(MICROBATCHES):
        part = out / f"x{j}.npy"
        np.save(part, test_x[j * batch : (j + 1) * batch])
        run = [str(out / "single" / "net"), "--in", f"x={part}", "--out-dir", str(out / f"single_res{j}")]
        subprocess.run(run, check=True, capture_output=True)
        single.append(np.load(out / f"single_res{j}" / "probs.npy"))
    same = bool(np.array_equal(np.load(out / "res" / "probs.npy"), np.concatenate(single)))
    print(
        f"mpiexec -n 2 {out / 'net' / 'net'} --microbatches {MICROBATCHES}: {len(test_x)} images, accuracy "
        f"{np.mean(preds == test_y[: len(preds)]):.4f}; outputs identical to the one-process binary: {same}"
    )
    for line in res.stdout.splitlines():
        print(f"  {line}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
