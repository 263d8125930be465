"""int8 models against their float originals and onnxruntime, side by side in one run.

    python bench/int8.py [--runs 200] [--rounds 5] [--markdown FILE]

The four MLPerf Tiny architectures (samples/tiny.py), float and quantized by onnxruntime's
quantizer (QDQ, per-channel int8 weights, int8 activations, calibrated on random inputs). Each
file is timed, one thread, by flowc's shared library called through cffi and by onnxruntime's
session on the same input, in interleaved rounds (this machine is shared and noisy); each
cell is the median over rounds of a round's mean microseconds. The ratio column is flowc int8 /
onnxruntime int8, the median of the rounds' ratios. The bytes are flowc's: its weights (the blob
the build links) and its arena, float and int8.
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


def measure(runs: int, rounds: int) -> list[dict]:
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in tiny.write_all(tmp).items():
            shape = tiny.INPUTS[name]
            calib = np.random.default_rng(11).standard_normal((8, *shape)).astype(np.float32)

            class Reader(CalibrationDataReader):
                def __init__(self, calib=calib):
                    self.it = iter([{"input": x} for x in calib])

                def get_next(self):
                    return next(self.it, None)

            qdq = Path(tmp) / f"{name}_qdq.onnx"
            quantize_static(path, qdq, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
            x = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            peers = {}
            for kind, file in (("float", path), ("int8", qdq)):
                model = codegen.compile(gd.load_onnx(file), name=f"{name}_{kind}", cache=False)
                session = ort.InferenceSession(str(file), so, providers=["CPUExecutionProvider"])
                peers[f"flowc {kind}"] = lambda model=model, x=x: model(input=x)
                peers[f"ort {kind}"] = lambda session=session, x=x: session.run(None, {"input": x})
                meta = model.metadata
                peers[f"bytes {kind}"] = (meta["weight_bytes"], meta["arena_bytes"])
            timed = {k: [] for k, v in peers.items() if callable(v)}
            for r in range(rounds):
                order = list(timed) if r % 2 == 0 else list(reversed(timed))
                for key in order:
                    peers[key]()  # warm
                    timed[key].append(_mean_us(peers[key], runs))
            ratios = [a / b for a, b in zip(timed["flowc int8"], timed["ort int8"])]
            rows.append({"model": name, **{k: statistics.median(v) for k, v in timed.items()},
                         "ratio": statistics.median(ratios), "bytes float": peers["bytes float"],
                         "bytes int8": peers["bytes int8"]})  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    head = ("| model | flowc float us | flowc int8 us | onnxruntime int8 us | onnxruntime float us | "
            "flowc int8 / onnxruntime int8 | weights float / int8 B | arena float / int8 B |")  # fmt: skip
    lines = [head, "|---|" + "---:|" * 7]
    for r in rows:
        wf, af = r["bytes float"]
        wq, aq = r["bytes int8"]
        lines.append(
            f"| {r['model']} | {r['flowc float']:.1f} | {r['flowc int8']:.1f} | {r['ort int8']:.1f} | "
            f"{r['ort float']:.1f} | {r['ratio']:.2f} | {wf} / {wq} | {af} / {aq} |"
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
