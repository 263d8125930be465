"""The four MLPerf Tiny architectures on emulated microcontrollers: instructions per inference.

    python bench/mcu.py [--cores cortex-m4 cortex-m7 cortex-m55] [--models ds_cnn ...] [--markdown FILE]

Each model (samples/tiny.py: DS-CNN, MobileNetV1 0.25 at 96 x 96, ResNet-8, the FC autoencoder)
runs as its float ONNX file and as the int8 QDQ file onnxruntime's quantizer makes of it
(bench/int8.py ``quantized``), exported for each core and run once on its QEMU board
(mps2-an386 Cortex-M4, mps2-an500 Cortex-M7, mps3-an547 Cortex-M55 with Helium) under
``qemu-system-arm -icount shift=0``: the firmware counts the instructions of the model's call
alone with SysTick (codegen/backends/c/mcu.py ``run_firmware``). An instruction count is not a
cycle count: QEMU models no pipeline, no memory wait states and no multi-cycle instructions
(a Cortex-M4's smlad and a load each count one; an M55's vector instruction counts one however
many beats it takes). It compares code on one core, not cores with each other.

Printed per model and core: instructions of the int8 and the float build, their ratio, the int8
build's instructions per multiply-accumulate, and each build's flash (code + weights) and RAM
(arena + data + stack), from the footprint flowc measures on the linked firmware. The int8
outputs are checked equal to flowc's host build of the same file (the integer kernels compute
the same integers on every target).
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
sys.path.insert(0, str(ROOT / "bench"))

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402
from codegen.backends.c import mcu  # noqa: E402
from codegen.target import Target  # noqa: E402

_spec = importlib.util.spec_from_file_location("flowc_sample_tiny", ROOT / "samples" / "tiny.py")
tiny = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny)

CORES = ("cortex-m4", "cortex-m7", "cortex-m55")


def macs(path: Path) -> int:
    """Multiply-accumulates of the float ONNX model's convolutions and dense layers."""
    import onnx
    from onnx import numpy_helper, shape_inference

    model = shape_inference.infer_shapes(onnx.load(str(path)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info}
    shapes.update({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.output})
    inits = {t.name: numpy_helper.to_array(t).shape for t in model.graph.initializer}
    total = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            w = inits[n.input[1]]
            total += int(np.prod(shapes[n.output[0]])) * int(np.prod(w[1:]))
        elif n.op_type == "Gemm":
            w = inits[n.input[1]]
            total += int(np.prod(w))
    return total


def run(path: Path, core: str, folder: Path, x: np.ndarray) -> dict:
    g = gd.load_onnx(path)
    out = Path(codegen.export(g, folder, name="m", arch=core))
    meta = json.loads((out / "metadata.json").read_text())
    res = mcu.run_firmware(out, {meta["inputs"][0]["name"]: x}, timeout=600)
    fp = meta["footprint"]
    return {
        "instructions": res["instructions"],
        "flash": fp["flash"],
        "ram": fp["ram"],
        "outputs": res["outputs"],
    }


def measure(cores, names) -> list[dict]:
    from int8 import quantized

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = tiny.write_all(tmp)
        for name in names:
            shape = tiny.INPUTS[name]
            files = quantized(paths[name], shape, tmp, kinds=("qdq",))
            x = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
            host = codegen.compile(gd.load_onnx(files["qdq"]), name=f"host_{name}", cache=False)(input=x)
            count = macs(paths[name])
            for core in cores:
                r = {
                    kind: run(files[kind], core, tmp / f"{name}_{kind}_{core}", x)
                    for kind in ("qdq", "float")
                }
                same = all(np.array_equal(a, b) for a, b in zip(r["qdq"]["outputs"].values(), host.values()))
                rows.append({"model": name, "core": core, "macs": count, "same": same, **r})
    return rows


def table(rows: list[dict]) -> str:
    head = ("| model | core | MACs | int8 instructions | float instructions | float / int8 | "
            "int8 instructions / MAC | flash int8 / float B | RAM int8 / float B | "
            "int8 = host |")  # fmt: skip
    lines = [head, "|---|---|" + "---:|" * 7 + "---|"]
    for r in rows:
        q, f = r["qdq"], r["float"]
        lines.append(
            f"| {r['model']} | {r['core']} | {r['macs']:,} | {q['instructions']:,} | {f['instructions']:,} | "
            f"{f['instructions'] / q['instructions']:.1f} | {q['instructions'] / r['macs']:.2f} | "
            f"{q['flash']:,} / {f['flash']:,} | {q['ram']:,} / {f['ram']:,} | "
            f"{'yes' if r['same'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", nargs="+", default=list(CORES), choices=CORES)
    ap.add_argument("--models", nargs="+", default=list(tiny.INPUTS), choices=list(tiny.INPUTS))
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    missing = [t for t in ("arm-none-eabi-gcc", "qemu-system-arm") if not shutil.which(t)]
    if missing:
        target = Target(args.cores[0])
        print(f"skipped: {', '.join(missing)} missing (apt-get install {' '.join(target.spec.packages)} "
              f"{target.spec.qemu_package})")  # fmt: skip
        return 0
    text = table(measure(args.cores, args.models))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
