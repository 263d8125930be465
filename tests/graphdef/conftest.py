"""Shared fixtures for the graphdef tests."""

from __future__ import annotations

import numpy as np
import pytest

import graphdef as gd


def _run_op(fn, *arrays, **attrs):
    """Build ``fn(*placeholders, **attrs)`` in a fresh graph, verify it, run it on arrays."""
    g = gd.Graph("t")
    with g:
        xs = [gd.placeholder(f"in{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
        out = fn(*xs, **attrs)
    gd.verify(g)
    outs = out if isinstance(out, tuple) else (out,)
    values = gd.run(g, {f"in{i}": a for i, a in enumerate(arrays)}, list(outs))
    return tuple(values) if isinstance(out, tuple) else values[0]


@pytest.fixture
def run_op():
    return _run_op


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def tolerance(dtype) -> dict:
    """assert_allclose tolerances for results computed in ``dtype``."""
    return {
        "float16": {"rtol": 2e-3, "atol": 2e-3},
        "float32": {"rtol": 1e-5, "atol": 1e-6},
        "float64": {"rtol": 1e-12, "atol": 1e-12},
    }.get(np.dtype(dtype).name, {"rtol": 0, "atol": 0})


@pytest.fixture
def tol():
    return tolerance
