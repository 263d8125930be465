"""Real model definitions written by others, with random weights from a seed (nothing downloaded),
and their ONNX exports through both torch.onnx exporters. Used by bench/models.py (the speed
table against onnxruntime) and bench/pipeline.py (the models split over MPI ranks).

    torchvision(name, size)     torchvision.models.<name>(weights=None), input 1x3xSIZExSIZE
    bert(layers, seq, hidden)   transformers BertModel's last hidden state for 1xSEQ token ids
    gpt2(layers, seq, hidden)   transformers GPT2Model's last hidden state (no cache)
    export(module, example, path, exporter)   "torchscript" (dynamo=False) or "dynamo"

Each builder returns (module in eval mode, example input, description), or None when its package
is missing (the `bench` extra installs torchvision and transformers).
"""

from __future__ import annotations

import io
import sys
import types
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

VOCAB = 1000
EXPORTERS = ("torchscript", "dynamo")


def torchvision_or_none():
    """torchvision, or None when it is not installed. Its meta registrations need a torch build
    it was not compiled against; the model definitions do not use them, so an empty module
    stands in."""
    stub = "torchvision._meta_registrations"
    sys.modules.setdefault(stub, types.ModuleType(stub))
    try:
        import torchvision
    except ImportError:
        return None
    return torchvision


def _example_image(size: int):
    import torch

    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))


def _example_ids(seq: int):
    import torch

    return torch.randint(0, VOCAB, (1, seq), generator=torch.Generator().manual_seed(1))


def torchvision(name: str, size: int = 224):
    tv = torchvision_or_none()
    if tv is None:
        return None
    import torch

    torch.manual_seed(0)
    module = getattr(tv.models, name)(weights=None)
    return module.eval(), _example_image(size), f"torchvision {name}, input 1x3x{size}x{size}"


def bert(layers: int, seq: int, hidden: int = 256):
    """transformers BertModel from a config (hidden/64 heads, FFN 4 x hidden) returning the last
    hidden state."""
    torchvision_or_none()  # transformers imports torchvision when it is there: the stub first
    try:
        import torch
        from transformers import BertConfig, BertModel
    except ImportError:
        return None
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64,
        intermediate_size=4 * hidden, max_position_embeddings=max(seq, 128),
    )  # fmt: skip

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(cfg, add_pooling_layer=False)

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state

    desc = f"transformers BertModel, {layers} layers, hidden {hidden}, ids 1x{seq}"
    return LastHidden().eval(), _example_ids(seq), desc


def gpt2(layers: int, seq: int, hidden: int = 128):
    """transformers GPT2Model from a config (hidden/32 heads, FFN 4 x hidden; no cache)
    returning the last hidden state."""
    torchvision_or_none()
    try:
        import torch
        from transformers import GPT2Config, GPT2Model
    except ImportError:
        return None
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_layer=layers, n_embd=hidden, n_head=hidden // 32, n_positions=seq,
                     bos_token_id=0, eos_token_id=0, use_cache=False)  # fmt: skip

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt = GPT2Model(cfg)

        def forward(self, ids):  # an explicit all-ones mask: without one, the export meets aten::diff
            mask = torch.ones_like(ids)
            return self.gpt(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state

    desc = f"transformers GPT2Model, {layers} layers, hidden {hidden}, ids 1x{seq}"
    return LastHidden().eval(), _example_ids(seq), desc


def export(module, example, path: Path, exporter: str = "torchscript") -> Path:
    """``module`` on ``example`` as ONNX at ``path`` (input "input", output "output"), through
    the TorchScript exporter (opset 17) or the dynamo one (opset 18); IR version lowered to 10
    for onnxruntime."""
    import onnx
    import torch

    torch.backends.mha.set_fastpath_enabled(False)
    module.eval()
    kw = {"dynamo": False, "opset_version": 17} if exporter == "torchscript" else {"dynamo": True}
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}: {', '.join(EXPORTERS)}")
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), str(path), input_names=["input"], output_names=["output"], **kw)
    m = onnx.load(str(path))  # the dynamo exporter may keep weights in a side file: load it all
    if m.ir_version > 10:
        m.ir_version = 10
    for f in path.parent.glob(path.name + ".data"):
        f.unlink()
    onnx.save(m, str(path))
    return path
