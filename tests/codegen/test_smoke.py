"""One small compiled model per backend: the compiled part of ``make test-fast``.

The digits sample (dense layers, softmax) built by the C backend into a shared library, and a
small convolutional graph through the CUDA backend's sources run on the CPU simulator
(runtime_c/cuda/sim.h, ``cc="g++"``): each against the numpy interpreter. ``make test`` covers
every op and model; these say in seconds that the whole way from graph to running code works.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import codegen
import graphdef as gd

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.c


def digits():
    import importlib.util

    spec = importlib.util.spec_from_file_location("digits_sample", ROOT / "samples" / "digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build(batch=4, weights=module._params(1))


def small_cnn():
    rng = np.random.default_rng(5)
    g = gd.Graph("small_cnn")
    with g:
        x = gd.placeholder("x", (1, 3, 8, 8))
        w = gd.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
        h = gd.relu(gd.conv(x, w, pads=(1, 1, 1, 1)))
        h = gd.max_pool(h, (2, 2), strides=(2, 2))
        gd.softmax(gd.reshape(h, (1, -1)), name="y")
    return g


def check(graph, model, feeds):
    want = gd.Session(graph).run(feeds, list(graph.outputs))
    got = model(**feeds)
    assert len(got) == len(want) > 0
    for value, expected in zip(got.values(), want):
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)


def test_the_c_backend_runs_the_digits_sample():
    g = digits()
    feeds = {"x": np.random.default_rng(1).random((4, 64), np.float32)}
    check(g, codegen.compile(g), feeds)


@pytest.mark.skipif(shutil.which("g++") is None, reason="the CUDA simulator needs g++")
def test_the_cuda_backend_runs_a_small_cnn_on_the_simulator():
    g = small_cnn()
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    check(g, codegen.compile(g, target="cuda", cc="g++"), feeds)
