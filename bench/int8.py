"""int8 models against their float originals and onnxruntime, side by side in one run.

    python bench/int8.py [--runs 200] [--rounds 5] [--markdown FILE]

The four MLPerf Tiny architectures (samples/tiny.py) and torchvision's MobileNetV2 and ResNet-18
at 224 x 224 (where torchvision is installed), float and quantized by onnxruntime's quantizer in
both its formats (QDQ and QOperator; per-channel int8 weights, int8 activations, calibrated on
random inputs). Each file is timed, one thread, by flowc's shared library called through cffi
and by onnxruntime's session on the same input, in interleaved rounds (this machine is shared
and noisy); each cell is the median over rounds of a round's mean microseconds. The ratio column
is flowc / onnxruntime on the same int8 file, the median of the rounds' ratios; "flowc float /
QDQ" how much faster flowc's int8 build is than its float one. The bytes are flowc's: its
weights (the blob the build links) and its arena.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402

_spec = importlib.util.spec_from_file_location("flowc_sample_tiny", ROOT / "samples" / "tiny.py")
tiny = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny)


def _mean_us(fn, runs: int) -> float:
    t0 = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - t0) / runs * 1e6


FORMATS = ("qdq", "qop")  # onnxruntime's two int8 formats: QDQ, and QOperator (QLinearConv, ...)


def torchvision_files(folder: Path) -> dict:
    """{name: (float ONNX file, input shape)} of torchvision MobileNetV2 and ResNet-18 at 224 x 224
    (weights from a seed, batch-norm statistics from a few random batches so that activations
    keep their scale), exported by the TorchScript exporter; {} without torchvision."""
    import io
    import warnings
    from contextlib import redirect_stderr, redirect_stdout

    sys.path.insert(0, str(ROOT / "bench"))
    import zoo

    tv = zoo.torchvision_or_none()
    if tv is None:
        print("torchvision is not installed: its models are left out", file=sys.stderr)
        return {}
    import torch

    out = {}
    for name in ("mobilenet_v2", "resnet18"):
        torch.manual_seed(0)
        model = getattr(tv.models, name)(weights=None).train()
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(8, 3, 224, 224))
        path = folder / f"{name}.onnx"
        with warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(model.eval(), (torch.randn(1, 3, 224, 224),), str(path), dynamo=False,
                              opset_version=17, input_names=["input"], output_names=["logits"])  # fmt: skip
        out[name] = (path, (1, 3, 224, 224))
    return out


def quantized(path: Path, shape, folder: Path, kinds=FORMATS, samples: int = 8) -> dict:
    """{"float": path, kind: file} for the float ONNX model at ``path`` (input "input" of
    ``shape``) quantized by onnxruntime's quantizer in each of ``kinds`` ("qdq", "qop"): int8
    weights per channel, int8 activations calibrated on ``samples`` random inputs."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    calib = np.random.default_rng(11).standard_normal((samples, *shape)).astype(np.float32)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x} for x in calib])

        def get_next(self):
            return next(self.it, None)

    files = {"float": Path(path)}
    for kind in kinds:
        fmt = {"qdq": QuantFormat.QDQ, "qop": QuantFormat.QOperator}[kind]
        files[kind] = Path(folder) / f"{Path(path).stem}_{kind}.onnx"
        quantize_static(path, files[kind], Reader(), quant_format=fmt, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
    return files


def measure(runs: int, rounds: int) -> list[dict]:
    import onnxruntime as ort

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: (path, tiny.INPUTS[name]) for name, path in tiny.write_all(tmp).items()}
        models.update(torchvision_files(Path(tmp)))
        for name, (path, shape) in models.items():
            count = runs if np.prod(shape) < 100_000 else max(5, runs // 40)  # about as long a round
            files = quantized(path, shape, Path(tmp), samples=8 if count == runs else 4)
            x = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.log_severity_level = 3  # (the exporter's unused initializers: a warning each)
            peers, sizes = {}, {}
            for kind, file in files.items():
                model = codegen.compile(gd.load_onnx(file), name=f"{name}_{kind}", cache=False)
                session = ort.InferenceSession(str(file), so, providers=["CPUExecutionProvider"])
                peers[f"flowc {kind}"] = lambda model=model, x=x: model(input=x)
                peers[f"ort {kind}"] = lambda session=session, x=x: session.run(None, {"input": x})
                sizes[kind] = (model.metadata["weight_bytes"], model.metadata["arena_bytes"])
            timed = {k: [] for k in peers}
            for r in range(rounds):
                order = list(timed) if r % 2 == 0 else list(reversed(timed))
                for key in order:
                    peers[key]()  # warm
                    timed[key].append(_mean_us(peers[key], count))
            row = {"model": name, **{k: statistics.median(v) for k, v in timed.items()}, "bytes": sizes}
            for kind in FORMATS:
                pairs = zip(timed[f"flowc {kind}"], timed[f"ort {kind}"])
                row[f"ratio {kind}"] = statistics.median(a / b for a, b in pairs)
            pairs = zip(timed["flowc float"], timed["flowc qdq"])
            row["speedup"] = statistics.median(a / b for a, b in pairs)
            rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    head = ("| model | flowc float us | flowc QDQ us | onnxruntime QDQ us | flowc QOperator us | "
            "onnxruntime QOperator us | flowc / onnxruntime QDQ, QOperator | flowc float / QDQ | "
            "weights float / QDQ / QOperator B | arena float / QDQ / QOperator B |")  # fmt: skip
    lines = [head, "|---|" + "---:|" * 9]
    for r in rows:
        b = r["bytes"]
        weights = " / ".join(str(b[k][0]) for k in ("float", *FORMATS))
        arenas = " / ".join(str(b[k][1]) for k in ("float", *FORMATS))
        lines.append(
            f"| {r['model']} | {r['flowc float']:.1f} | {r['flowc qdq']:.1f} | {r['ort qdq']:.1f} | "
            f"{r['flowc qop']:.1f} | {r['ort qop']:.1f} | {r['ratio qdq']:.2f}, {r['ratio qop']:.2f} | "
            f"{r['speedup']:.2f} | {weights} | {arenas} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    text = table(measure(args.runs, args.rounds))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
