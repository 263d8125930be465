"""Model definitions written by others through the CUDA backend: torchvision's ResNet-18 and
MobileNetV3-small and a transformers BERT (random weights from a seed, bench/zoo.py),
exported to ONNX, compiled with --target cuda and run through the CPU simulator
(runtime_c/cuda/sim.h), against PyTorch."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import zoo  # noqa: E402

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402

MODELS = {
    "resnet18": lambda: zoo.torchvision("resnet18", 32),
    "mobilenet_v3_small": lambda: zoo.torchvision("mobilenet_v3_small", 32),
    "bert": lambda: zoo.bert(2, 16, 128),
}


@pytest.mark.c
@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_models_through_the_cuda_simulator(name, tmp_path):
    made = MODELS[name]()
    if made is None:
        pytest.skip("torchvision or transformers is not installed")
    module, example, _ = made
    g = gd.load_onnx(str(zoo.export(module, example, tmp_path / f"{name}.onnx")))
    m = codegen.compile(g, target="cuda", cc="g++", name=name)
    got = m(input=example.numpy())["output"]
    with torch.no_grad():
        want = module(example).numpy()
    scale = float(np.abs(want).max())
    assert got.shape == want.shape and float(np.abs(got - want).max()) <= 1e-5 * max(scale, 1e-30) + 1e-30
    assert not m.metadata["serial_steps"], m.metadata["serial_steps"]
