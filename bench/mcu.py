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


def _models(tmp: Path, names):
    """Per model: (name, its float file, {"qdq": the int8 file, "float": ...}, an input), in tmp."""
    from int8 import quantized

    paths = tiny.write_all(tmp)
    for name in names:
        shape = tiny.INPUTS[name]
        files = quantized(paths[name], shape, tmp, kinds=("qdq",))
        yield name, paths[name], files, np.random.default_rng(12).standard_normal(shape).astype(np.float32)


def measure(cores, names) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, path, files, x in _models(tmp, names):
            host = codegen.compile(gd.load_onnx(files["qdq"]), name=f"host_{name}", cache=False)(input=x)
            count = macs(path)
            for core in cores:
                r = {
                    kind: run(files[kind], core, tmp / f"{name}_{kind}_{core}", x)
                    for kind in ("qdq", "float")
                }
                same = all(np.array_equal(a, b) for a, b in zip(r["qdq"]["outputs"].values(), host.values()))
                rows.append({"model": name, "core": core, "macs": count, "same": same, **r})
    return rows


def profile_steps(cores, names) -> list[tuple]:
    """(core, model, class, features, instructions) of every step of the models' int8 QDQ and
    float builds, profiled on each core's board (run_firmware(profile=True))."""
    from codegen import pipeline
    from codegen.backends.c import mcu_time, toolchain

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, _, files, x in _models(tmp, names):
            for core in cores:
                target = Target(core)
                macros = toolchain.macros(target, toolchain.find_cc(None, target))
                for kind in ("qdq", "float"):
                    g = gd.load_onnx(files[kind])
                    program = pipeline.run(g, pipeline.Options(target=target), until="plan").program
                    folder = Path(codegen.export(g, tmp / f"p_{name}_{kind}_{core}", name="m", arch=core))
                    res = mcu.run_firmware(folder, {"input": x}, timeout=600, profile=True)
                    if len(res["steps"]) != len(program.steps):
                        raise RuntimeError(f"{name} {kind} {core}: {len(res['steps'])} steps profiled, "
                                           f"{len(program.steps)} planned")  # fmt: skip
                    for node, n in zip(program.steps, res["steps"]):
                        cls = mcu_time.step_class(node, macros, program.graph)
                        out.append((core, f"{name} {kind}", cls, mcu_time.features(node, program.graph), n))
    return out


def fit_costs(cores, names) -> str:
    """Fit mcu_time's costs to the profiled steps, write codegen/backends/c/mcu_costs.py, and
    report the fit's error: on the fitted models, and for each model left out of a fit on the
    others (its prediction from the other three)."""
    from codegen.backends.c import mcu_time

    steps = profile_steps(cores, names)
    costs = mcu_time.fit([(c, cls, f, n) for c, _, cls, f, n in steps])
    lines = ["| model | core | measured instructions | predicted | error | left out of the fit: predicted "
             "| error |", "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    worst = [0.0, 0.0]
    for model in dict.fromkeys(m for _, m, *_ in steps):
        others = mcu_time.fit(
            [(c, cls, f, n) for c, m, cls, f, n in steps if m.split()[0] != model.split()[0]]
        )
        for core in cores:
            mine = [(cls, f, n) for c, m, cls, f, n in steps if c == core and m == model]
            measured = sum(n for *_, n in mine)
            pred = sum(_predict(costs[core], cls, f) for cls, f, _ in mine)
            out = sum(_predict(others.get(core, {}), cls, f) for cls, f, _ in mine)
            e, e_out = pred / measured - 1, out / measured - 1
            worst = [max(worst[0], abs(e)), max(worst[1], abs(e_out))]
            lines.append(
                f"| {model} | {core} | {measured:,} | {pred:,} | {e:+.1%} | {out:,} | {e_out:+.1%} |"
            )

    def entries(table):
        rows = (f"        {json.dumps(c)}: ({', '.join(f'{v:.6g}' for v in k)}),\n" for c, k in table.items())
        return "".join(rows)

    body = "\n".join(f"    {json.dumps(core)}: {{\n{entries(table)}    }}," for core, table in costs.items())
    text = (
        '"""Fitted instruction costs of mcu_time.py (written by ``python bench/mcu.py --fit``): per core\n'
        "and step class, (per MAC, per output element, per window element, per step). The fit's error\n"
        f"on the models' totals: at most {worst[0]:.1%}; a model left out of the fit, predicted from the\n"
        f'others: at most {worst[1]:.1%} (most where that model alone has a kind of step)."""\n\n'
        f"COSTS: dict = {{\n{body}\n}}\n"
    )
    (ROOT / "codegen" / "backends" / "c" / "mcu_costs.py").write_text(text)
    return "\n".join(lines)


def _predict(table: dict, cls: str, f) -> int:
    if not table:
        return 0
    from codegen.backends.c import mcu_time

    a, b, c, d = table.get(cls, table["product" if mcu_time.is_product_class(cls) else "other"])
    return max(0, round(a * f[0] + b * f[1] + c * f[2] + d))


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
    ap.add_argument(
        "--fit",
        action="store_true",
        help="profile every step and refit the time model (codegen/backends/c/mcu_costs.py)",
    )
    args = ap.parse_args(argv)
    missing = [t for t in ("arm-none-eabi-gcc", "qemu-system-arm") if not shutil.which(t)]
    if missing:
        target = Target(args.cores[0])
        print(f"skipped: {', '.join(missing)} missing (apt-get install {' '.join(target.spec.packages)} "
              f"{target.spec.qemu_package})")  # fmt: skip
        return 0
    text = fit_costs(args.cores, args.models) if args.fit else table(measure(args.cores, args.models))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
