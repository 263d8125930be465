"""ONNX LSTM and GRU compiled to C as one cell step per time step and direction.

The importer unrolls a layer of at most ``UNROLL_STEPS`` time steps (longer ones are loops:
test_rnn_loops.py): an LSTM or GRU with the default activations becomes one gemm for the input
projection of every step, then one ``lstm_cell`` / ``gru_cell`` per step and direction
(graphdef/ops/rnn.py), lowered to one call of runtime_c/kernels/rnn.h each. Models built with
``onnx.helper`` (directions, batch 1 and 3, sequence lengths 1 and 7, with and without initial
states and bias, linear_before_reset 0 and 1, two layers as two nodes) and PyTorch's
nn.LSTM / nn.GRU exported by ``torch.onnx.export(dynamo=False)`` are compiled into one shared
library and compared with onnxruntime and the numpy interpreter; the compiled program is
checked to hold one cell step per time step and no chain of gate ops. Hidden sizes 40 and 48
put 160 and 144 gate columns in a step: the register-blocked columns of the float32 kernel
and the rest after them both run.
"""

from __future__ import annotations

import io
import warnings
import zlib
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402

pytestmark = pytest.mark.c

GATES = {"LSTM": 4, "GRU": 3}
CELL = {"LSTM": "lstm_cell", "GRU": "gru_cell"}
ORT_TOL = 1e-4  # of max |onnxruntime output|: onnxruntime's GRU/LSTM use their own sigmoid/tanh
INTERP_TOL = 2e-5  # of max |output|: C against the numpy interpreter
ORT_MAX_IR = 13  # the newest IR version onnxruntime 1.31 reads; onnx 1.23 writes 14


@dataclass(frozen=True)
class Spec:
    key: str
    op: str
    direction: str = "forward"
    seq: int = 7
    batch: int = 1
    inp: int = 12
    hidden: int = 40
    layers: int = 1
    linear_before_reset: int = 0
    optional: tuple = ("B",)  # of B, initial_h, initial_c (per layer)
    outputs: tuple = ("Y", "Y_h", "Y_c")

    @property
    def dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def model(self):
        """The ONNX model (layers chained through Y, reshaped to [seq, batch, dirs * hidden])
        and its feed."""
        rng = np.random.default_rng(zlib.crc32(self.key.encode()))
        f32 = lambda *s: (rng.standard_normal(s) * 0.4).astype(np.float32)  # noqa: E731
        d, g, h, b = self.dirs, GATES[self.op], self.hidden, self.batch
        nodes, inits, outs = [], [], []
        x, width = "X", self.inp
        for layer in range(self.layers):
            p = f"l{layer}_"
            values = {"W": f32(d, g * h, width), "R": f32(d, g * h, h), "B": f32(d, 2 * g * h),
                      "initial_h": f32(d, b, h), "initial_c": f32(d, b, h)}  # fmt: skip
            names = [x, p + "W", p + "R"]
            inits += [numpy_helper.from_array(values[k], p + k) for k in ("W", "R")]
            for k in ("B", "", "initial_h", "initial_c")[: 4 if self.op == "LSTM" else 3]:
                present = k in self.optional
                names.append(p + k if present else "")
                if present:
                    inits.append(numpy_helper.from_array(values[k], p + k))
            while names[-1] == "":
                names.pop()
            last = layer == self.layers - 1
            wanted = self.outputs[: 3 if self.op == "LSTM" else 2]
            node_outs = [p + o if (o in wanted and last) or o == "Y" else "" for o in ("Y", "Y_h", "Y_c")]
            node_outs = node_outs[: 3 if self.op == "LSTM" else 2]
            attrs = {"hidden_size": h, "direction": self.direction}
            if self.op == "GRU":
                attrs["linear_before_reset"] = self.linear_before_reset
            nodes.append(helper.make_node(self.op, names, node_outs, name=p + self.op, **attrs))
            if last:
                outs += [n for n in node_outs if n]
            else:  # Y [seq, dirs, batch, hidden] -> [seq, batch, dirs * hidden]
                nodes.append(helper.make_node("Transpose", [p + "Y"], [p + "Yt"], perm=[0, 2, 1, 3]))
                shape = numpy_helper.from_array(np.array([self.seq, b, d * h], np.int64), p + "shape")
                inits.append(shape)
                nodes.append(helper.make_node("Reshape", [p + "Yt", p + "shape"], [p + "X"]))
                x, width = p + "X", d * h
        graph = helper.make_graph(
            nodes, self.key,
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, (self.seq, b, self.inp))],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
            inits,
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
        model.ir_version = 10
        return model, {"X": (rng.standard_normal((self.seq, b, self.inp)) * 1.5).astype(np.float32)}


SPECS = [
    Spec("lstm_fwd", "LSTM"),
    Spec("lstm_bidir_states", "LSTM", "bidirectional", batch=3, optional=("B", "initial_h", "initial_c")),
    Spec("lstm_rev_seq1", "LSTM", "reverse", seq=1, batch=3, optional=("B", "initial_h")),
    Spec("lstm_c_only", "LSTM", hidden=33, optional=("initial_c",)),  # h0 zero, c0 given
    Spec("lstm_two_layers", "LSTM", "bidirectional", batch=3, layers=2, outputs=("Y", "Y_h")),
    Spec("gru_fwd", "GRU", hidden=48),
    Spec("gru_lbr_states", "GRU", hidden=48, batch=3, linear_before_reset=1, optional=("B", "initial_h")),
    Spec("gru_bidir_lbr_seq1", "GRU", "bidirectional", seq=1, hidden=48, linear_before_reset=1, optional=()),
    Spec("gru_bidir_states", "GRU", "bidirectional", batch=3, hidden=48, optional=("B", "initial_h")),
    Spec("gru_two_layers_lbr", "GRU", "bidirectional", hidden=48, layers=2, linear_before_reset=1),
    Spec("gru_rev_no_bias", "GRU", "reverse", hidden=5, batch=3, optional=("initial_h",)),
]


class Case:
    def __init__(self, key: str, proto, feeds: dict, folder, cells: int, layers: int, cell: str):
        self.key, self.feeds, self.cells, self.layers, self.cell = key, feeds, cells, layers, cell
        if proto.ir_version > ORT_MAX_IR:
            proto.ir_version = ORT_MAX_IR
        path = folder / f"{key}.onnx"
        path.write_bytes(proto.SerializeToString())
        self.graph = gd.load_onnx(path)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        self.expected = dict(zip(names, session.run(None, feeds)))


# ----------------------------------------------------------------------------- PyTorch models


def _torch_cases(folder) -> list[Case]:
    try:
        import torch
    except ImportError:
        return []
    nn = torch.nn

    class Tagger(nn.Module):
        def __init__(self, cell):
            super().__init__()
            kind = nn.GRU if cell == "gru" else nn.LSTM
            self.rnn = kind(16, 40, num_layers=2, batch_first=True, bidirectional=True)
            self.head = nn.Linear(80, 5)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.head(y)

    cases = []
    torch.manual_seed(0)
    for cell in ("gru", "lstm"):
        module = Tagger(cell).eval()
        x = torch.randn(3, 6, 16)
        path = folder / f"torch_{cell}.onnx"
        with warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (x,), str(path), input_names=["input"], output_names=["output"],
                              opset_version=17, dynamo=False)  # fmt: skip
        proto = onnx.load(str(path))
        with torch.no_grad():
            want = module(x).numpy()
        case = Case(f"torch_{cell}", proto, {"input": x.numpy()}, folder, 2 * 2 * 6, 2, f"{cell}_cell")
        np.testing.assert_allclose(case.expected["output"], want, atol=1e-4 * np.abs(want).max())
        cases.append(case)
    return cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, Case]:
    folder = tmp_path_factory.mktemp("rnn")
    out = {}
    for s in SPECS:
        proto, feeds = s.model()
        out[s.key] = Case(s.key, proto, feeds, folder, s.seq * s.dirs * s.layers, s.layers, CELL[s.op])
    out.update({c.key: c for c in _torch_cases(folder)})
    return out


@pytest.fixture(scope="module")
def compiled(cases):
    try:
        codegen.backends.c.toolchain.find_cc()
    except gd.FlowcError as e:
        pytest.skip(str(e))
    return dict(zip(cases, codegen.compile_many([(k, c.graph) for k, c in cases.items()])))


KEYS = [s.key for s in SPECS] + ["torch_gru", "torch_lstm"]


def _case(cases, key) -> Case:
    if key not in cases:
        pytest.skip("torch is not installed")
    return cases[key]


def _close(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, what
    scale = max(float(np.abs(want).max()), 1e-6)
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("key", KEYS)
def test_compiled_matches_onnxruntime_and_interpreter(key, cases, compiled):
    case = _case(cases, key)
    gd.verify(case.graph)
    outs = [str(o) for o in case.graph.outputs]
    interp = dict(zip(outs, gd.run(case.graph, case.feeds, outs)))
    got = compiled[key](**case.feeds)
    assert sorted(got) == sorted(case.expected)
    for name, want in case.expected.items():
        _close(interp[name], want, ORT_TOL, f"{key} interpreter '{name}'")
        _close(got[name], want, ORT_TOL, f"{key} compiled '{name}'")
        _close(got[name], interp[name], INTERP_TOL, f"{key} compiled vs interpreter '{name}'")


@pytest.mark.parametrize("key", KEYS)
def test_one_cell_step_per_time_step(key, cases):
    """The program holds one cell step per time step, direction and layer, one product per
    layer (the input projection of all its steps), and no gate activations of its own."""
    case = _case(cases, key)
    ops = [n.op for n in codegen.program_for(case.graph).steps]
    assert ops.count(case.cell) == case.cells, ops
    products = [op for op in ops if op in ("gemm", "matmul", "sgemm")]
    assert len(products) == case.layers + key.startswith("torch"), ops  # the torch models' Linear head
    assert not {"sigmoid", "tanh", "fused"} & set(ops), ops
