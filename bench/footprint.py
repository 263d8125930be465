"""Flash and RAM footprint of the sample models on Cortex-M, and a run on the emulated board.

    python bench/footprint.py [--arch cortex-m4 ...] [--no-run]      (make footprint)

For the trained digit classifier (samples/digits.py, 64-32-10 MLP) and LeNet-5
(samples/lenet.py, 61,706 parameters) on each microcontroller arch, flowc builds the static
library and the test firmware (codegen.export), and prints a markdown table from the
"footprint" of metadata.json (see codegen/mcu.py for how each number is measured). Unless
--no-run, or when qemu-system-arm is missing, the firmware also runs once on the arch's QEMU
board; the outputs are compared with the numpy interpreter and the stack used by the run is
measured (painted stack) next to the static bound.

The footprint goals: flowc's glue (code beyond the kernels and the weights) <= 2 KiB,
arena within 5% of its lower bound. The exit status is 1 when one is missed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import codegen  # noqa: E402
import graphdef as gd  # noqa: E402
from codegen.backends.c import mcu  # noqa: E402
from codegen.target import ARCHES  # noqa: E402


def _sample(name: str):
    spec = importlib.util.spec_from_file_location(f"sample_{name}", ROOT / "samples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def models() -> list[tuple[str, gd.Graph, dict]]:
    digits, lenet = _sample("digits"), _sample("lenet")
    _, _, test_x, _ = digits.load_data()
    rng = np.random.default_rng(0)
    return [
        ("digits MLP", digits.build(weights=digits.train()), {"x": test_x[:1]}),
        ("LeNet-5", lenet.build(), {"x": rng.standard_normal((1, 1, 28, 28)).astype(np.float32)}),
    ]


def main(argv=None) -> int:
    mcus = [a for a, s in ARCHES.items() if s.kind == "mcu"]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", choices=mcus, help="default: every Cortex-M arch")
    ap.add_argument("--no-run", action="store_true", help="do not run the firmware under QEMU")
    args = ap.parse_args(argv)
    run = not args.no_run and shutil.which("qemu-system-arm")
    if not args.no_run and not run:
        print("qemu-system-arm not found (apt-get install qemu-system-arm): footprints only")
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for label, g, feeds in models():
            for arch in args.arch or mcus:
                folder = codegen.export(g, Path(tmp) / f"{arch}-{len(rows)}", name="net", arch=arch)
                meta = json.loads((folder / "metadata.json").read_text())
                fp = mcu.Footprint.from_json(meta["footprint"])
                measured, error = "-", "-"
                if run:
                    res = mcu.run_firmware(folder, feeds)
                    want = gd.run(g, feeds, list(res["outputs"]))
                    diffs = [float(np.max(np.abs(a - w))) for a, w in zip(res["outputs"].values(), want)]
                    error = f"{max(diffs):.1e}"
                    measured = f"{res['stack']}"
                ratio = fp.arena / max(fp.arena_lower_bound, 1)
                ok &= fp.glue + fp.glue_unused <= 2048 and ratio <= 1.05
                rows.append(
                    f"| {label} | {arch} | {meta['weight_bytes']:,} | {fp.flash:,} | {fp.code:,} "
                    f"| {fp.kernels:,} | {fp.glue} (+{fp.glue_unused}) | {fp.library:,} | {fp.weights:,} "
                    f"| {fp.arena:,} "
                    f"| {fp.arena_lower_bound:,} | {fp.stack} | {measured} | {fp.data} | {error} |"
                )
    print(
        "| model | arch | weights (params) B | flash B | code B | kernels B | flowc glue B (+unused) "
        "| C library B | weights linked B | arena B | lower bound B | stack bound B | stack measured B "
        "| lib data B | max abs error |"
    )
    print("|---|---|" + "---:|" * 13)
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
