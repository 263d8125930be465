"""Helpers the hostile-input tests share: small ONNX files written from node lists, one-line
error checks, and a Python child process with a bounded address space for loads that could
allocate what a hostile file asks for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def save(tmp_path, nodes, inputs=(), outputs=None, inits=(), name="m.onnx", opset=17):
    """An ONNX model of ``nodes`` written to tmp_path/name (the last node's first output is
    the graph output unless ``outputs`` says otherwise)."""
    from onnx import TensorProto, helper

    outputs = outputs or [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "g", list(inputs), outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def vi(name, shape, t=None):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT if t is None else t, shape)


def i64(name, value):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(value, np.int64), name)


def f32(name, value):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(value, np.float32), name)


def one_line_error(error, fn, *args, **kw) -> str:
    """The message of the FlowcError ``error`` (a class) that fn(*args) raises: one printable line."""
    with pytest.raises(error) as info:
        fn(*args, **kw)
    message = str(info.value)
    assert message and message.isprintable(), message
    return message


def run_bounded(script: str, *argv: str) -> dict:
    """Run ``script`` in a fresh Python (this checkout first on its path, one BLAS thread) and
    return the JSON object its last line prints. The script sets its own address-space limit;
    it reports anything other than a FlowcError as {"crash": ...}, which fails the test."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert "crash" not in out, out
    return out
