"""Greedy text generation: tokens per second of flowc's one-binary decoding loop against
onnxruntime running the same decoder step from Python and against ``model.generate``.

    python bench/generate.py [--size gpt2-768 small] [--rounds 7] [--prompt 8] [--new 64] [--json FILE]

The decoder is samples/generate.py's (a transformers ``GPT2LMHeadModel``, random weights from a
seed; ``gpt2-768``: GPT-2 small's width 768, 12 heads and 3072-wide MLP with 4 of its 12 layers
and an 8,192-token vocabulary, 138 MB of float32 weights read per token; ``small``: width 128,
2 layers, vocabulary 512, 2 MB). Every peer runs on one thread, from the same prompt (``--prompt``
random ids) to ``--new`` new tokens, the end token switched off so that each makes all of them:

- flowc: samples/generate.py's graph exported as a standalone program; the whole generation is
  one run (prompt fed token by token, then the greedy loop), timed by the program's ``--bench``
  (the median of a few in-process runs: no process start, no file I/O);
- onnxruntime: the transformers model's step with its past keys and values (eager attention)
  exported by torch.onnx (TorchScript exporter, dynamic sequence and past lengths), one intra-op
  thread, driven from Python with IO binding: one call for the whole prompt, then one per token,
  each call's present keys and values bound as the next call's past without copies;
- PyTorch: ``model.generate`` (greedy, ``min_new_tokens`` = ``max_new_tokens``, sdpa
  attention, ``torch.set_num_threads(1)``).

The three must produce the same ids (checked). Rounds alternate the order of the peers (this
machine is shared and noisy); the table gives each peer's median time for the whole generation,
its tokens per second (new tokens / that time) and the ratio flowc / onnxruntime of tokens per
second (above 1: flowc is faster), also as the median of the rounds' own ratios, and the rate
at which flowc reads the weights (a new token reads every weight once but the position table;
at gpt2-768 the decoder is bound by that stream: one core reads memory at about 24 GB/s here).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import codegen  # noqa: E402


def _sample():
    """samples/generate.py (this file has its name)."""
    spec = importlib.util.spec_from_file_location("generate_sample", ROOT / "samples" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


generate = _sample()

NO_END = -1  # no end token: every peer makes all the new tokens


# ----------------------------------------------------------------------------- flowc
class Flowc:
    name = "flowc"

    def __init__(self, weights, dims, prompt, new, build: Path, runs: int = 3):
        g = generate.build_graph(weights, dims, eos=NO_END)
        self.binary = codegen.export(g, build / "flowc", name="net", lengths=generate.LENGTHS) / "net"
        self.prompt, self.new, self.runs = prompt, new, runs

    def ids(self) -> list[int]:
        return generate.generated(generate.run_binary(self.binary, self.prompt, self.new))

    def seconds(self) -> float:
        out = generate.run_binary(self.binary, self.prompt, self.new, extra=["--bench", str(self.runs)])
        return float(out["stdout"].split("median_us=")[1].split()[0]) * 1e-6


# ----------------------------------------------------------------------------- onnxruntime
class _Step:
    """The model's step as a module of plain tensors: (ids [1, s], positions [1, s], past keys
    and values [1, heads, past, head_dim] per layer) -> (logits at the last position, present
    keys and values)."""

    def __new__(cls, model, layers):
        import torch
        from transformers import DynamicCache

        class Step(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, ids, positions, *past):
                cache = DynamicCache()
                for k in range(layers):
                    cache.update(past[2 * k], past[2 * k + 1], k)
                out = self.model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True)
                present = []
                for layer in out.past_key_values.layers[:layers]:
                    present += [layer.keys, layer.values]
                return (out.logits[:, -1], *present)

        return Step().eval()


class OnnxRuntime:
    name = "onnxruntime"

    def __init__(self, model, dims, prompt, new, build: Path):
        import onnxruntime as ort
        import torch

        self.ort, self.dims, self.prompt, self.new = ort, dims, prompt, new
        self.past = [f"past_{k}_{kv}" for k in range(dims.layers) for kv in "kv"]
        self.present = [f"present_{k}_{kv}" for k in range(dims.layers) for kv in "kv"]
        path = build / "step.onnx"
        model.config._attn_implementation = "eager"  # plain ops for the exporter
        try:
            step = _Step(model, dims.layers)
            example = [torch.zeros(1, dims.heads, 3, dims.head_dim) for _ in self.past]
            axes = {"ids": {1: "new"}, "positions": {1: "new"}}
            axes.update({n: {2: "past"} for n in self.past})
            axes.update({n: {2: "total"} for n in self.present})
            with (
                torch.no_grad(),
                warnings.catch_warnings(),
                redirect_stdout(io.StringIO()),
                redirect_stderr(io.StringIO()),
            ):
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    step, (torch.tensor([[1, 2]]), torch.tensor([[3, 4]]), *example), str(path),
                    input_names=["ids", "positions", *self.past], output_names=["logits", *self.present],
                    dynamic_axes=axes, dynamo=False, opset_version=17,
                )  # fmt: skip
        finally:
            model.config._attn_implementation = "sdpa"
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def ids(self) -> list[int]:
        d = self.dims
        binding = self.session.io_binding()
        empty = np.zeros((1, d.heads, 0, d.head_dim), np.float32)
        past = [self.ort.OrtValue.ortvalue_from_numpy(empty) for _ in self.past]
        ids = np.array([self.prompt], np.int64)
        positions = np.arange(len(self.prompt), dtype=np.int64)[None]
        out = []
        while len(out) < self.new:
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()
            binding.bind_cpu_input("ids", ids)
            binding.bind_cpu_input("positions", positions)
            for name, value in zip(self.past, past):
                binding.bind_ortvalue_input(name, value)
            for name in ["logits", *self.present]:
                binding.bind_output(name, "cpu")
            self.session.run_with_iobinding(binding)
            values = binding.get_outputs()
            out.append(int(np.argmax(values[0].numpy())))
            past = values[1:]
            ids = np.array([[out[-1]]], np.int64)
            positions = np.array([[len(self.prompt) + len(out) - 1]], np.int64)
        return out

    def seconds(self) -> float:
        t0 = time.perf_counter()
        self.ids()
        return time.perf_counter() - t0


# ----------------------------------------------------------------------------- PyTorch
class Torch:
    name = "pytorch"

    def __init__(self, model, prompt, new):
        import torch

        torch.set_num_threads(1)
        self.torch, self.model, self.new = torch, model, new
        self.prompt = torch.tensor([prompt])

    def _generate(self):
        with self.torch.no_grad():
            return self.model.generate(
                self.prompt, max_new_tokens=self.new, min_new_tokens=self.new, do_sample=False,
                eos_token_id=None, pad_token_id=0,
            )  # fmt: skip

    def ids(self) -> list[int]:
        return self._generate()[0, self.prompt.shape[1] :].tolist()

    def seconds(self) -> float:
        t0 = time.perf_counter()
        self._generate()
        return time.perf_counter() - t0


# ----------------------------------------------------------------------------- the run
def measure(size: str, rounds: int, prompt_len: int, new: int, seed: int = 0) -> dict:
    dims = generate.SIZES[size]
    if new > dims.new_max or prompt_len > dims.prompt_max:
        raise SystemExit(f"{size} is compiled for prompts of {dims.prompt_max} and {dims.new_max} new tokens")
    model = generate.torch_model(dims, seed)
    weights = generate.weights_of(model)
    prompt = [int(t) for t in np.random.default_rng(seed).integers(0, dims.vocab, prompt_len)]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        peers = [Flowc(weights, dims, prompt, new, ROOT / "build" / "bench_generate" / size)]
        t_export = time.perf_counter() - t0
        peers += [OnnxRuntime(model, dims, prompt, new, Path(tmp)), Torch(model, prompt, new)]
        ids = {p.name: p.ids() for p in peers}
        if any(v != ids["flowc"] for v in ids.values()):
            raise SystemExit(f"{size}: the peers disagree: {ids}")
        times = {p.name: [] for p in peers}
        for r in range(rounds):
            for p in peers if r % 2 == 0 else peers[::-1]:
                times[p.name].append(p.seconds())
    med = {k: statistics.median(v) for k, v in times.items()}
    per_token = sum(v.nbytes for k, v in weights.items() if k != "wpe.weight")  # wte once: the LM head
    ratios = [o / f for f, o in zip(times["flowc"], times["onnxruntime"])]
    return {
        "size": size, "dims": dims._asdict(), "prompt": prompt_len, "new": new, "rounds": rounds,
        "weight_bytes": int(sum(w.nbytes for w in weights.values())), "export_s": t_export,
        "flowc_weight_GBps": per_token * new / med["flowc"] / 1e9,
        "seconds": med, "tokens_per_s": {k: new / v for k, v in med.items()}, "times": times,
        "flowc_over_onnxruntime": med["onnxruntime"] / med["flowc"],
        "flowc_over_onnxruntime_rounds": statistics.median(ratios),
    }  # fmt: skip


def table(results: list[dict]) -> str:
    head = (
        "| decoder | flowc tok/s | onnxruntime tok/s | pytorch tok/s | flowc / onnxruntime "
        "(rounds) | flowc / pytorch | flowc reads weights at |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in results:
        d, t = r["dims"], r["tokens_per_s"]
        desc = (
            f"{r['size']}: {d['layers']} layers, width {d['width']}, vocab {d['vocab']}, "
            f"{r['prompt']} + {r['new']} tokens"
        )
        lines.append(
            f"| {desc} | {t['flowc']:.0f} | {t['onnxruntime']:.0f} | {t['pytorch']:.0f} | "
            f"{r['flowc_over_onnxruntime']:.2f} ({r['flowc_over_onnxruntime_rounds']:.2f}) | "
            f"{t['flowc'] / t['pytorch']:.2f} | {r['flowc_weight_GBps']:.1f} GB/s |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", nargs="+", default=["small", "gpt2-768"], choices=sorted(generate.SIZES))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    ap.add_argument("--new", type=int, default=64, help="new tokens")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    results = [measure(s, args.rounds, args.prompt, args.new) for s in args.size]
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
