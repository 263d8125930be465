"""Text generation in one binary: a GPT-2 decoder and its greedy decoding loop compiled to C.

A GPT-2-style decoder is built with ``transformers`` (``GPT2LMHeadModel`` from a config, random
weights from a seed, nothing downloaded); its weights are written again as a flowc graph whose
whole greedy decoding is two ``gd.control.loop``s. The prefill reads the prompt 8 tokens an
iteration (the weights are read once a chunk rather than once a token) and gives the first new
token; the token loop then feeds each new token at the next position. Both run the same blocks:
token + position embeddings, per layer LayerNorm, a fused QKV product, attention over a
key/value cache held as loop state (written at run-time positions: a select with a one-hot
mask), the tanh-GELU MLP; then the final LayerNorm, the tied LM head and argmax. The token loop
ends after ``max_new`` new tokens or at the end token (GPT-2's is its vocabulary's last id).
Exported as a standalone program, it is one process that reads the prompt and writes the ids:

    python samples/generate.py [--size small] [--seed 0]    # build, export, run, check
    flowc compile samples/generate.py:build -o out --name net --shape 'prompt=<=32'
    out/net --in prompt=prompt.npy --max-new 64 --out-dir res

Inputs: ``prompt`` int64[prompt_max] and ``prompt_length`` (int64 scalar in [1, prompt_max]; the
prompt is its first ``prompt_length`` ids, the others are ignored), ``max_new`` (int64 scalar in
[0, new_max]). Exported with ``lengths=LENGTHS`` (``--shape 'prompt=<=32'``), the program takes
the prompt as long as it is and sets ``prompt_length`` itself; ``max_new`` is a file or the
option ``--max-new N``. Outputs: ``ids`` int64[new_max], the generated ids with the end token
included when it came (as ``model.generate`` gives it), then -1; ``count`` int64, how many were
generated. An empty prompt, a max_new or a token id out of range ends the run with an index
error; a prompt longer than prompt_max is refused by the program.

The sample checks the binary's ids against ``reference``, the same decoder written in plain
numpy from the same weights (a growing cache, no masks), token for token, and the first new
token's logits (``build(..., logits=True)`` adds them as an output) against the transformers
model's. The weights are the model's initialization with its biases and LayerNorm parameters
drawn too (zeros and ones would hide a swapped or misplaced one) and a wider initializer range
than GPT-2's 0.02, at which a random model only repeats one token. bench/generate.py times the
binary against onnxruntime and ``model.generate``; tests/codegen/test_generate.py tests it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import graphdef as gd  # noqa: E402
from graphdef.ops.control import loop  # noqa: E402

EPS = 1e-5  # GPT-2's layer_norm_epsilon
MASKED = -1e30  # the score of a position after the current one (exp gives exactly 0)


class Dims(NamedTuple):
    """A decoder's sizes and the compiled limits: prompts of at most ``prompt_max`` tokens,
    at most ``new_max`` new ones (the key/value caches hold ``positions`` rows). (Named tuples
    rather than dataclasses: ``flowc compile`` loads this file without registering it as a
    module, which dataclasses need.)"""

    layers: int
    width: int
    heads: int
    vocab: int
    prompt_max: int = 32
    new_max: int = 64
    chunk: int = 8  # prompt tokens a prefill iteration

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def positions(self) -> int:
        return self.prompt_max + self.new_max

    @property
    def eos(self) -> int:
        """GPT-2's end token: the vocabulary's last id (50256 of 50257)."""
        return self.vocab - 1


SIZES = {
    "tiny": Dims(layers=2, width=64, heads=4, vocab=256, prompt_max=16, new_max=24),
    "small": Dims(layers=2, width=128, heads=4, vocab=512),
    # GPT-2 small's width, heads and MLP; 4 of its 12 layers and an 8k vocabulary (bench/generate.py)
    "gpt2-768": Dims(layers=4, width=768, heads=12, vocab=8192),
}


# ----------------------------------------------------------------------------- the model
def _transformers():
    """transformers' GPT-2 classes. torchvision's meta registrations (imported by transformers'
    image utilities) need the torch build torchvision was compiled against; GPT-2 does not use
    them, so an empty module stands in (as in bench/zoo.py)."""
    stub = "torchvision._meta_registrations"
    sys.modules.setdefault(stub, types.ModuleType(stub))
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    return GPT2Config, GPT2LMHeadModel


def torch_model(dims: Dims, seed: int = 0, init_range: float = 0.2):
    """A ``GPT2LMHeadModel`` of ``dims`` (eval mode, CPU, float32): transformers' initialization
    with ``init_range`` from ``torch.manual_seed(seed)``, then normal noise (std 0.1) on every
    bias and LayerNorm parameter."""
    import torch

    config_cls, model_cls = _transformers()
    torch.manual_seed(seed)
    config = config_cls(
        vocab_size=dims.vocab, n_positions=dims.positions, n_embd=dims.width, n_layer=dims.layers,
        n_head=dims.heads, initializer_range=init_range, bos_token_id=dims.eos, eos_token_id=dims.eos,
        pad_token_id=dims.eos, activation_function="gelu_new", layer_norm_epsilon=EPS,
    )  # fmt: skip
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or ".ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def weights_of(model) -> dict[str, np.ndarray]:
    """The model's parameters as float32 arrays under their transformers names, without the
    ``transformer.`` prefix (``wte.weight``, ``h.0.attn.c_attn.weight`` ...; Conv1D weights are
    [in, out]). The LM head is ``wte.weight`` (tied)."""
    out = {}
    for name, t in model.state_dict().items():
        if name.startswith("transformer."):
            out[name.removeprefix("transformer.")] = t.detach().cpu().numpy().astype(np.float32)
    return out


# ----------------------------------------------------------------------------- the graph
def _block(x, w: dict, k: int, dims: Dims, kcache, vcache, at: Positions):
    """Block ``k`` on the rows of ``x`` [rows, width] at the positions ``at`` describes: their keys
    and values written into the caches (kcache [heads, head_dim, positions], keys stored
    transposed so that the scores are one batched product; vcache [heads, positions, head_dim]),
    each row attending to the positions up to its own. Returns (x, kcache, vcache)."""
    p, h, d, n = f"h.{k}.", dims.heads, dims.head_dim, dims.positions
    s = x.shape[0]
    with gd.name_scope(f"layer{k}"):
        a = gd.layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], epsilon=EPS)
        qkv = gd.matmul(a, w[p + "attn.c_attn.weight"]) + w[p + "attn.c_attn.bias"]  # [rows, 3 width]
        q, key, value = (gd.reshape(t, (s, h, d)) for t in gd.split(qkv, 3, axis=1))
        key, value = gd.transpose(key, (1, 2, 0)), gd.transpose(value, (1, 0, 2))  # [h, d, s], [h, s, d]
        if s > 1:  # rows to their columns of the caches: products with the one-hot [s, n]
            key, value = gd.matmul(key, at.onehot), gd.matmul(gd.transpose(at.onehot), value)
        kcache = gd.where(gd.reshape(at.written, (1, 1, n)), key, kcache)
        vcache = gd.where(gd.reshape(at.written, (1, n, 1)), value, vcache)
        scores = gd.matmul(gd.transpose(q, (1, 0, 2)), kcache) * np.float32(1.0 / np.sqrt(d))  # [h, s, n]
        scores = gd.where(gd.reshape(at.visible, (1, s, n)), scores, np.float32(MASKED))
        att = gd.matmul(gd.softmax(scores, axis=-1), vcache)  # [h, s, d]
        att = gd.reshape(gd.transpose(att, (1, 0, 2)), (s, h * d))  # heads in order
        x = x + (gd.matmul(att, w[p + "attn.c_proj.weight"]) + w[p + "attn.c_proj.bias"])
        m = gd.layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], epsilon=EPS)
        m = gd.gelu(gd.matmul(m, w[p + "mlp.c_fc.weight"]) + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + (gd.matmul(m, w[p + "mlp.c_proj.weight"]) + w[p + "mlp.c_proj.bias"])
    return x, kcache, vcache


class Positions(NamedTuple):
    """Where a step's rows go: ``written`` bool [positions] (the cache columns they fill),
    ``visible`` bool [rows, positions] (what each row attends to), ``onehot`` float32 [rows,
    positions] (row r's position; used with more than one row)."""

    written: gd.Tensor
    visible: gd.Tensor
    onehot: gd.Tensor | None


def _positions(where: gd.Tensor, columns: gd.Tensor) -> Positions:
    """The Positions of rows at the int64 positions ``where`` [rows]; ``columns``: arange(positions)."""
    at = gd.equal(gd.reshape(where, (-1, 1)), columns)  # [rows, n]
    onehot = gd.cast(at, "float32") if where.shape[0] > 1 else None
    written = gd.reduce_max(gd.cast(at, "int64"), axes=0) > 0 if where.shape[0] > 1 else gd.reshape(at, (-1,))
    return Positions(written, gd.less_equal(columns, gd.reshape(where, (-1, 1))), onehot)


def _decoder(x, w: dict, dims: Dims, caches: list, at: Positions):
    """Every block, then the final LayerNorm; (x, the new caches)."""
    out = []
    for k in range(dims.layers):
        x, kc, vc = _block(x, w, k, dims, caches[2 * k], caches[2 * k + 1], at)
        out += [kc, vc]
    return gd.layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], epsilon=EPS), out


def build_graph(weights: dict, dims: Dims, eos: int | None = None, logits: bool = False) -> gd.Graph:
    """Greedy decoding over ``weights`` (``weights_of``) as one graph; ``eos``: the end token
    (default ``dims.eos``; -1: none). ``logits``: also output ``logits`` float32[vocab], those
    that gave the first new token.

    Two loops: the prefill reads the prompt ``dims.chunk`` tokens an iteration (one pass over the
    weights a chunk rather than a token; the rows after the prompt's end write columns that the
    token loop overwrites before any row can see them) and gives the first new token; the token
    loop feeds each new token at the next position until max_new or the end token."""
    eos = dims.eos if eos is None else eos
    n, c, i64 = dims.positions, dims.chunk, "int64"
    if dims.prompt_max % c:
        raise ValueError(f"prompt_max {dims.prompt_max} is not a multiple of the chunk {c}")
    g = gd.Graph("generate")
    with g:
        w = {k: gd.constant(v, name=k) for k, v in weights.items()}
        head = gd.constant(np.ascontiguousarray(weights["wte.weight"].T), name="lm_head")  # tied
        prompt = gd.placeholder("prompt", (dims.prompt_max,), i64)
        length = gd.placeholder("prompt_length", (), i64)
        max_new = gd.placeholder("max_new", (), i64)
        # out-of-range sizes stop the run (FC_ERR_INDEX) instead of reading past the prompt
        last = gd.check_index(length - 1, dims.prompt_max, name="last_prompt_position")
        max_new = gd.check_index(max_new, dims.new_max + 1, name="checked_max_new")
        columns = gd.constant(np.arange(n, dtype=np.int64), name="columns")
        caches = []
        for _ in range(dims.layers):
            caches += [gd.zeros((dims.heads, dims.head_dim, n)), gd.zeros((dims.heads, n, dims.head_dim))]

        def prefill(j, hidden, *caches):
            where = j * c + gd.constant(np.arange(c, dtype=np.int64), name="chunk_rows")
            tokens = gd.gather(prompt, gd.minimum(where, np.int64(dims.prompt_max - 1)))
            tokens = gd.check_index(
                gd.where(where <= last, tokens, np.int64(0)), dims.vocab, name="prompt_tokens"
            )
            x = gd.gather(w["wte.weight"], tokens) + gd.gather(w["wpe.weight"], where)  # [chunk, width]
            x, caches = _decoder(x, w, dims, list(caches), _positions(where, columns))
            # the prompt's last row (its chunk is the last iteration)
            hidden = gd.gather(x, gd.reshape(gd.minimum(last - j * c, np.int64(c - 1)), (1,)))
            return [hidden, *caches], []

        chunks = gd.div(last, np.int64(c)) + 1
        (hidden, *caches), _, _ = loop(
            lambda j, *v: True, prefill, [gd.zeros((1, dims.width)), *caches], trip=chunks,
            max_iterations=dims.prompt_max // c, name="prefill",
        )  # fmt: skip
        scores = gd.reshape(gd.matmul(hidden, head), (dims.vocab,))
        first = gd.argmax(scores, axis=0)
        slots = gd.constant(np.arange(dims.new_max, dtype=np.int64), name="slots")

        def step(j, tok, ids, count, done, *caches):
            where = gd.reshape(length + j, (1,))  # the position of tok; it makes token j + 1
            x = gd.gather(w["wte.weight"], gd.reshape(tok, (1,))) + gd.gather(w["wpe.weight"], where)
            x, caches = _decoder(x, w, dims, list(caches), _positions(where, columns))
            nxt = gd.reshape(gd.argmax(gd.matmul(x, head), axis=-1), ())
            ids = gd.where(gd.equal(slots, j + 1), nxt, ids)
            return [nxt, ids, count + 1, gd.equal(nxt, np.int64(eos)), *caches], []

        ids = gd.where(gd.logical_and(gd.equal(slots, 0), max_new > 0), first, np.int64(-1))
        start = [first, ids, gd.minimum(max_new, np.int64(1)), gd.equal(first, np.int64(eos)), *caches]
        (_, ids, count, *_), _, _ = loop(
            lambda j, tok, ids, count, done, *caches: gd.logical_not(done), step, start,
            trip=gd.maximum(max_new - 1, np.int64(0)), max_iterations=max(dims.new_max - 1, 0), name="tokens",
        )  # fmt: skip
        made = [gd.identity(ids, name="ids"), gd.identity(count, name="count")]
        if logits:
            made.append(gd.identity(scores, name="logits"))
        g.set_outputs(*made)  # not the loops' other final values (tokens, flags, caches)
    return g


def build(size: str = "small", seed: int = 0, eos: int | None = None, logits: bool = False) -> gd.Graph:
    """The decoding graph of a ``SIZES`` decoder with the weights of ``torch_model(dims, seed)``
    (``flowc compile samples/generate.py:build``)."""
    dims = SIZES[size]
    return build_graph(weights_of(torch_model(dims, seed)), dims, eos, logits)


# ----------------------------------------------------------------------------- the reference
class Generated(NamedTuple):
    ids: list[int]  # the new tokens, the end token included when it came
    first_logits: np.ndarray | None  # the logits that gave the first new token
    margin: float  # the smallest gap between a step's two best logits (ties make argmax fragile)


def _layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * g + b


def _gelu_tanh(x):
    c = np.float32(np.sqrt(2.0 / np.pi))  # a float32 scalar: a float64 one would widen x
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3)))


def reference(weights: dict, dims: Dims, prompt, max_new: int, eos: int | None = None) -> Generated:
    """Greedy decoding in plain numpy (float32), one token at a time: each layer's keys and
    values are lists that grow by one row per token, and a token attends to all of them."""
    eos = dims.eos if eos is None else eos
    w, h, d = weights, dims.heads, dims.head_dim
    keys = [[] for _ in range(dims.layers)]
    values = [[] for _ in range(dims.layers)]
    tokens, new, first, margin = list(prompt), [], None, np.inf
    pos = 0
    while len(new) < max_new:
        x = w["wte.weight"][tokens[pos]] + w["wpe.weight"][pos]
        for k in range(dims.layers):
            p = f"h.{k}."
            a = _layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
            q, key, value = np.split(a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"], 3)
            keys[k].append(key.reshape(h, d))
            values[k].append(value.reshape(h, d))
            K, V = np.stack(keys[k], 1), np.stack(values[k], 1)  # [h, pos + 1, d]
            s = np.einsum("hd,htd->ht", q.reshape(h, d), K) / np.float32(np.sqrt(d))
            e = np.exp(s - s.max(-1, keepdims=True))
            att = np.einsum("ht,htd->hd", e / e.sum(-1, keepdims=True), V).reshape(-1)
            x = x + att @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            m = _layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
            m = _gelu_tanh(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
            x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        pos += 1
        if pos < len(prompt):
            continue  # still reading the prompt
        logits = _layer_norm(x, w["ln_f.weight"], w["ln_f.bias"]) @ w["wte.weight"].T
        top2 = np.sort(logits)[-2:]
        margin = min(margin, float(top2[1] - top2[0]))
        first = logits if first is None else first
        nxt = int(np.argmax(logits))
        new.append(nxt)
        tokens.append(nxt)
        if nxt == eos:
            break
    return Generated(new, first, margin)


# ----------------------------------------------------------------------------- the binary
LENGTHS = {"prompt": 0}  # export(..., lengths=LENGTHS): the program takes the prompt as long as it is


def feeds(dims: Dims, prompt, max_new: int) -> dict[str, np.ndarray]:
    """The graph's inputs for a prompt (a list of ids) and a number of new tokens: the prompt
    padded to ``prompt_max``, its length, max_new (``gd.run``, a model compiled without lengths)."""
    padded = np.zeros(dims.prompt_max, np.int64)
    padded[: len(prompt)] = prompt
    return {"prompt": padded, "prompt_length": np.int64(len(prompt)), "max_new": np.int64(max_new)}


def command(binary, prompt_file, max_new: int, out_dir) -> list[str]:
    """The program's command line: the prompt's ids as a .npy of the prompt's own length (the
    program, exported with ``lengths=LENGTHS``, pads it and sets ``prompt_length``), ``max_new``
    as an option."""
    return [
        str(binary),
        "--in",
        f"prompt={prompt_file}",
        "--max-new",
        str(max_new),
        "--out-dir",
        str(out_dir),
    ]


def run_binary(binary, prompt, max_new: int, extra=()) -> dict:
    """Run the exported program once on a prompt (a list of ids); its outputs by name, and its
    ``stdout`` and ``stderr``. A failed run raises ExecutionError with its message."""
    with tempfile.TemporaryDirectory() as tmp:
        np.save(f"{tmp}/prompt.npy", np.asarray(prompt, np.int64).reshape(-1))
        args = command(binary, f"{tmp}/prompt.npy", max_new, f"{tmp}/res")
        res = subprocess.run([*args, *extra], capture_output=True, text=True)
        if res.returncode != 0:
            raise gd.ExecutionError(f"{binary} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
        out = {p.stem: np.load(p) for p in Path(tmp, "res").glob("*.npy")}
        out["stdout"], out["stderr"] = res.stdout, res.stderr
        return out


def generated(out: dict) -> list[int]:
    """The new ids of a run's outputs (``ids`` up to ``count``)."""
    return [int(t) for t in out["ids"][: int(out["count"])]]


def torch_logits(model, prompt) -> np.ndarray:
    """The transformers model's logits at the prompt's last position."""
    import torch

    with torch.no_grad():
        return model(torch.tensor([list(prompt)])).logits[0, -1].numpy()


def main() -> int:
    import codegen

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new", type=int, default=None, help="new tokens (default: the compiled maximum)")
    args = ap.parse_args()
    dims = SIZES[args.size]
    max_new = dims.new_max if args.max_new is None else args.max_new
    model = torch_model(dims, args.seed)
    weights = weights_of(model)
    prompt = [int(t) for t in np.random.default_rng(args.seed).integers(0, dims.eos, 8)]
    g = build_graph(weights, dims, logits=True)
    out_dir = ROOT / "build" / "generate"
    t0 = time.perf_counter()
    codegen.export(g, out_dir, name="net", lengths=LENGTHS)
    t_export = time.perf_counter() - t0
    binary = out_dir / "net"
    print(
        f"GPT-2 decoder ({dims.layers} layers, width {dims.width}, {dims.heads} heads, vocabulary "
        f"{dims.vocab}; prompts up to {dims.prompt_max}, up to {dims.new_max} new tokens) exported to "
        f"{binary} in {t_export:.1f} s ({binary.stat().st_size} bytes)"
    )
    t0 = time.perf_counter()
    out = run_binary(binary, prompt, max_new)
    t_run = time.perf_counter() - t0
    got = generated(out)
    ref = reference(weights, dims, prompt, max_new)
    want = torch_logits(model, prompt)
    err_ref = float(np.max(np.abs(ref.first_logits - want)))
    err_bin = float(np.max(np.abs(out["logits"] - want)))
    print(f"prompt {prompt}")
    print(
        f"generated {len(got)} tokens in one run of the binary ({t_run * 1e3:.0f} ms with the process): {got}"
    )
    same = got == ref.ids
    print(
        f"identical to the numpy reference: {same} (smallest top-2 logit gap {ref.margin:.2e}); first "
        f"step's logits against transformers: binary {err_bin:.1e}, numpy {err_ref:.1e} (largest difference)"
    )
    return 0 if same and err_bin < 1e-3 and err_ref < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
