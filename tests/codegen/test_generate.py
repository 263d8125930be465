"""Text generation in one binary (samples/generate.py): a tiny GPT-2 decoder's greedy decoding
loop exported as a standalone program, its ids checked token for token against the sample's
numpy reference (stopping at the end token, at max_new, for max_new 0 and 1, for prompts that
end inside, at and after a prefill chunk), its first logits against the transformers model's,
bad sizes ending the run in one line, and one run under AddressSanitizer and UBSan."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd

pytestmark = pytest.mark.c
ROOT = Path(__file__).resolve().parents[2]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g1", "-O1"]


def _sample():
    spec = importlib.util.spec_from_file_location("generate_sample", ROOT / "samples" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Decoder:
    """The tiny decoder, its weights, two prompts and the end token chosen so that the first
    prompt's greedy run stops at it and the second's does not."""

    def __init__(self):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
        self.gen = gen = _sample()
        self.dims = dims = gen.SIZES["tiny"]
        self.model = gen.torch_model(dims, seed=0)
        self.weights = gen.weights_of(self.model)
        rng = np.random.default_rng(3)
        prompts = [[int(t) for t in rng.integers(0, dims.vocab, n)] for n in (5, 9, 3, 12, 7, 4)]
        # the end token: the first prompt's 6th new token where it is new there
        first = gen.reference(self.weights, dims, prompts[0], dims.new_max, eos=-1).ids
        k = next(j for j in range(5, dims.new_max) if first[j] not in first[:j])
        self.eos, self.stop_prompt, self.stop_at = first[k], prompts[0], k + 1
        self.long_prompt = next(p for p in prompts[1:] if self.eos not in self.ref(p, dims.new_max).ids)

    def ref(self, prompt, max_new):
        r = self.gen.reference(self.weights, self.dims, prompt, max_new, eos=self.eos)
        # a near tie between the two best logits would make the comparison a coin toss
        assert r.margin > 1e-4, f"seed gives a near tie ({r.margin:.1e}): choose another"
        return r


@pytest.fixture(scope="module")
def decoder():
    return Decoder()


@pytest.fixture(scope="module")
def binary(decoder, tmp_path_factory):
    g = decoder.gen.build_graph(decoder.weights, decoder.dims, eos=decoder.eos, logits=True)
    out = codegen.export(g, tmp_path_factory.mktemp("generate"), name="net", lengths=decoder.gen.LENGTHS)
    return out / "net"


def run(decoder, binary, prompt, max_new):
    return decoder.gen.run_binary(binary, prompt, max_new)


def check(decoder, out, prompt, max_new) -> list[int]:
    """The run's ids against the reference: the generated ones equal, then -1 to the end."""
    want = decoder.ref(prompt, max_new).ids
    got = decoder.gen.generated(out)
    assert got == want
    assert out["ids"].dtype == np.int64 and out["ids"].shape == (decoder.dims.new_max,)
    assert np.all(out["ids"][len(got) :] == -1)
    return got


def test_stops_at_the_end_token(decoder, binary):
    got = check(decoder, run(decoder, binary, decoder.stop_prompt, decoder.dims.new_max), decoder.stop_prompt,
                decoder.dims.new_max)  # fmt: skip
    assert len(got) == decoder.stop_at < decoder.dims.new_max and got[-1] == decoder.eos


@pytest.mark.parametrize("max_new", ["all", "some", 1, 0])
def test_stops_after_max_new_tokens(decoder, binary, max_new):
    n = {"all": decoder.dims.new_max, "some": decoder.dims.new_max - 5}.get(max_new, max_new)
    got = check(decoder, run(decoder, binary, decoder.long_prompt, n), decoder.long_prompt, n)
    assert len(got) == n


@pytest.mark.parametrize("length", ["one", "chunk", "chunk+1", "full"])
def test_prompt_lengths_across_prefill_chunks(decoder, binary, length):
    """The prefill reads the prompt a chunk of tokens at a time: one token, exactly one chunk,
    one more, every position."""
    dims = decoder.dims
    n = {"one": 1, "chunk": dims.chunk, "chunk+1": dims.chunk + 1, "full": dims.prompt_max}[length]
    prompt = [int(t) for t in np.random.default_rng(n).integers(0, dims.vocab, n)]
    check(decoder, run(decoder, binary, prompt, dims.new_max), prompt, dims.new_max)


def test_first_logits_match_transformers(decoder, binary):
    prompt = decoder.long_prompt
    want = decoder.gen.torch_logits(decoder.model, prompt)
    got = run(decoder, binary, prompt, 3)["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(decoder.ref(prompt, 1).first_logits, want, rtol=1e-4, atol=2e-5)


def test_interpreter_agrees(decoder):
    """The graph itself (the numpy interpreter runs the loop op) gives the reference's ids."""
    g = decoder.gen.build_graph(decoder.weights, decoder.dims, eos=decoder.eos)
    feeds = decoder.gen.feeds(decoder.dims, decoder.stop_prompt, decoder.dims.new_max)
    ids, count = gd.run(g, feeds, ["ids", "count"])
    assert [int(t) for t in ids[: int(count)]] == decoder.ref(decoder.stop_prompt, decoder.dims.new_max).ids


@pytest.mark.parametrize(
    "case", ["empty prompt", "prompt too long", "max_new too large", "max_new -1", "token"]
)
def test_bad_sizes_end_the_run_in_one_line(decoder, binary, tmp_path, case):
    dims = decoder.dims
    prompt, max_new = list(decoder.long_prompt), 4
    if case == "empty prompt":
        prompt = []
    elif case == "prompt too long":
        prompt = [1] * (dims.prompt_max + 1)
    elif case == "token":
        prompt[1] = dims.vocab
    else:
        max_new = dims.new_max + 1 if case == "max_new too large" else -1
    np.save(tmp_path / "prompt.npy", np.array(prompt, np.int64))
    args = decoder.gen.command(binary, tmp_path / "prompt.npy", max_new, tmp_path / "res")
    res = subprocess.run(args, capture_output=True, text=True)
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0, res.stderr
    assert not (tmp_path / "res").exists()


def test_runs_clean_under_address_and_undefined_sanitizers(decoder, tmp_path):
    g = decoder.gen.build_graph(decoder.weights, decoder.dims, eos=decoder.eos)
    out = codegen.export(g, tmp_path / "san", name="san", flags=SANITIZE, lengths=decoder.gen.LENGTHS)
    prompt = decoder.stop_prompt
    res = decoder.gen.run_binary(out / "san", prompt, decoder.dims.new_max)  # raises on failure
    assert "runtime error" not in res["stderr"] and "Sanitizer" not in res["stderr"], res["stderr"]
    assert decoder.gen.generated(res) == decoder.ref(prompt, decoder.dims.new_max).ids
