"""ONNX LSTM, GRU and RNN: imported by flowc (unrolled or as loops), compared with onnxruntime.

Each case is a one-node ONNX model built with ``onnx.helper`` (directions, layouts, default
and custom activations, clip, initial states, peepholes, input_forget, linear_before_reset,
missing optional inputs, weights as initializers or as graph inputs). Short sequences are
unrolled; the ``*_loop`` cases repeat the variants over sequences longer than
``UNROLL_STEPS``, which become loops (graphdef/onnx/ops_rnn.py), some a multiple of
``CHUNK_STEPS`` and some not (a padded last chunk). The imported graph is run by the
interpreter and, compiled to C (all cases in one library), by cffi; both are compared with
onnxruntime. onnxruntime has no batch-major (``layout=1``) kernels, so those cases are checked
against the same model in ``layout=0`` on transposed inputs and outputs.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphdef as gd  # noqa: E402
from graphdef.errors import FlowcError  # noqa: E402
from graphdef.onnx.ops_rnn import CHUNK_STEPS, UNROLL_STEPS  # noqa: E402

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h"), "RNN": ("Y", "Y_h")}
ORDER = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
TOL = 1e-4  # of max |onnxruntime output|; onnxruntime's GRU uses polynomial sigmoid/tanh


@dataclass(frozen=True)
class Spec:
    key: str
    op: str
    direction: str = "forward"
    layout: int = 0
    seq: int = 3
    batch: int = 2
    inp: int = 4
    hidden: int = 5
    attrs: dict = field(default_factory=dict)
    optional: tuple = ()  # of B, sequence_lens, initial_h, initial_c, P
    fed: tuple = ("X",)  # inputs fed at run time; the others are initializers
    outputs: tuple | None = None  # output names, "" for not requested; None: all

    @property
    def dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def values(self) -> dict:
        rng = np.random.default_rng(zlib.crc32(self.key.encode()))
        d, g, h, b = self.dirs, GATES[self.op], self.hidden, self.batch
        f32 = lambda *s: (rng.standard_normal(s) * 0.6).astype(np.float32)  # noqa: E731
        v = {"X": f32(self.seq, b, self.inp) * 2, "W": f32(d, g * h, self.inp), "R": f32(d, g * h, h),
             "B": f32(d, 2 * g * h), "sequence_lens": np.full(b, self.seq, np.int32),
             "initial_h": f32(d, b, h), "initial_c": f32(d, b, h), "P": f32(d, 3 * h)}
        if self.layout == 1:  # batch-major X and states
            v["X"] = v["X"].transpose(1, 0, 2).copy()
            for k in ("initial_h", "initial_c"):
                v[k] = v[k].transpose(1, 0, 2).copy()
        return {k: a for k, a in v.items() if k in ("X", "W", "R") or k in self.optional}

    def model(self, layout: int | None = None, values: dict | None = None):
        """The ONNX model (optionally with another layout, for onnxruntime) and its feeds."""
        layout = self.layout if layout is None else layout
        values = values or self.values()
        present = [k for k in ORDER if k in values]
        names = [k if k in values else "" for k in ORDER[: ORDER.index(present[-1]) + 1]]
        outs = self.outputs if self.outputs is not None else OUTPUTS[self.op]
        attrs = dict(self.attrs, hidden_size=self.hidden, direction=self.direction)
        if layout:
            attrs["layout"] = layout
        node = helper.make_node(self.op, names, list(outs), name=f"{self.key}_node", **attrs)
        elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
        fed = [k for k in present if k in self.fed]
        graph = helper.make_graph(
            [node], self.key,
            [helper.make_tensor_value_info(k, elem[values[k].dtype], values[k].shape) for k in fed],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o],
            [numpy_helper.from_array(values[k], k) for k in present if k not in self.fed],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
        model.ir_version = 10  # onnxruntime 1.31 reads IR <= 13
        return model, {k: values[k] for k in present if k in self.fed}


SPECS = [
    Spec("lstm_fwd", "LSTM"),
    Spec("lstm_rev_states", "LSTM", "reverse", optional=("B", "initial_h", "initial_c")),
    Spec("lstm_bidir_all", "LSTM", "bidirectional", attrs={"clip": 0.9},
         optional=("B", "sequence_lens", "initial_h", "initial_c", "P")),
    Spec("lstm_batchwise", "LSTM", "bidirectional", layout=1, optional=("B", "initial_h", "initial_c")),
    Spec("lstm_acts", "LSTM", attrs={"activations": ["HardSigmoid", "LeakyRelu", "Softsign"],
                                     "activation_alpha": [0.3, 0.05], "activation_beta": [0.4]},
         optional=("B",)),
    Spec("lstm_acts_bidir", "LSTM", "bidirectional",
         attrs={"activations": ["Sigmoid", "Elu", "Softplus", "HardSigmoid", "ScaledTanh", "Relu"],
                "activation_alpha": [1.5, 0.25, 0.8], "activation_beta": [0.45, 1.2]}),
    Spec("lstm_coupled_peep", "LSTM", attrs={"input_forget": 1}, optional=("B", "initial_c", "P")),
    Spec("lstm_fed_weights", "LSTM", "bidirectional", seq=2, optional=("B", "initial_h", "initial_c", "P"),
         fed=("X", "W", "R", "B", "initial_h", "initial_c", "P"), outputs=("", "Y_h", "Y_c")),
    Spec("lstm_no_bias", "LSTM", "reverse", seq=4, optional=("initial_h",), outputs=("Y", "Y_h")),
    Spec("gru_fwd", "GRU"),
    Spec("gru_lbr_bidir", "GRU", "bidirectional", attrs={"linear_before_reset": 1},
         optional=("B", "initial_h")),
    Spec("gru_lbr_no_bias", "GRU", "reverse", attrs={"linear_before_reset": 1}, optional=("initial_h",)),
    Spec("gru_batchwise", "GRU", "reverse", layout=1, optional=("B", "initial_h")),
    Spec("gru_acts_clip", "GRU", attrs={"activations": ["HardSigmoid", "Affine"], "clip": 1.1,
                                        "activation_alpha": [0.3, 0.9], "activation_beta": [0.45, 0.1]},
         optional=("B", "initial_h")),
    Spec("gru_fed_lbr", "GRU", "bidirectional", attrs={"linear_before_reset": 1},
         optional=("B", "initial_h"), fed=("X", "W", "R", "B", "initial_h"), outputs=("", "Y_h")),
    Spec("gru_fed", "GRU", optional=("B",), fed=("X", "W", "R", "B")),
    Spec("rnn_fwd", "RNN", seq=1),
    Spec("rnn_bidir_relu", "RNN", "bidirectional", attrs={"activations": ["Relu", "Tanh"]},
         optional=("B", "initial_h")),
    Spec("rnn_affine_clip", "RNN", "reverse", attrs={"activations": ["Affine"], "activation_alpha": [0.7],
                                                     "activation_beta": [0.1], "clip": 0.5}, optional=("B",)),
    Spec("rnn_thresholded", "RNN", attrs={"activations": ["ThresholdedRelu"], "activation_alpha": [0.2]}),
    Spec("rnn_softsign_bidir", "RNN", "bidirectional", attrs={"activations": ["Softsign", "Softplus"]},
         optional=("initial_h",)),
    Spec("rnn_batchwise_fed", "RNN", "bidirectional", layout=1, optional=("B", "initial_h"),
         fed=("X", "W", "R", "B", "initial_h")),
]
# the same variants over sequences long enough to be loops: 16 steps fill two chunks, 9, 11
# and 13 pad their last one
LOOPS = [
    Spec("lstm_fwd_loop", "LSTM", seq=16),
    Spec("lstm_rev_states_loop", "LSTM", "reverse", seq=13, optional=("B", "initial_h", "initial_c")),
    Spec("lstm_bidir_all_loop", "LSTM", "bidirectional", seq=13, attrs={"clip": 0.9},
         optional=("B", "sequence_lens", "initial_h", "initial_c", "P")),
    Spec("lstm_batchwise_loop", "LSTM", "bidirectional", layout=1, seq=16,
         optional=("B", "initial_h", "initial_c")),
    Spec("lstm_acts_loop", "LSTM", seq=11, attrs={"activations": ["HardSigmoid", "LeakyRelu", "Softsign"],
                                                  "activation_alpha": [0.3, 0.05], "activation_beta": [0.4]},
         optional=("B",)),
    Spec("lstm_coupled_peep_loop", "LSTM", "reverse", seq=9, attrs={"input_forget": 1},
         optional=("B", "initial_c", "P")),
    Spec("lstm_fed_weights_loop", "LSTM", "bidirectional", seq=16,
         optional=("B", "initial_h", "initial_c", "P"),
         fed=("X", "W", "R", "B", "initial_h", "initial_c", "P"), outputs=("", "Y_h", "Y_c")),
    Spec("lstm_c_only_loop", "LSTM", seq=9, optional=("initial_c",), outputs=("Y", "", "Y_c")),
    Spec("gru_fwd_loop", "GRU", seq=16),
    Spec("gru_lbr_bidir_loop", "GRU", "bidirectional", seq=13, attrs={"linear_before_reset": 1},
         optional=("B", "initial_h")),
    Spec("gru_batchwise_loop", "GRU", "reverse", layout=1, seq=11, optional=("B", "initial_h")),
    Spec("gru_acts_clip_loop", "GRU", "bidirectional", seq=9,
         attrs={"activations": ["HardSigmoid", "Affine", "Sigmoid", "Tanh"], "clip": 1.1,
                "activation_alpha": [0.3, 0.9], "activation_beta": [0.45, 0.1]},
         optional=("B", "initial_h")),
    Spec("gru_fed_lbr_loop", "GRU", "bidirectional", seq=16, attrs={"linear_before_reset": 1},
         optional=("B", "initial_h"), fed=("X", "W", "R", "B", "initial_h"), outputs=("", "Y_h")),
    Spec("rnn_fwd_loop", "RNN", seq=16),
    Spec("rnn_bidir_loop", "RNN", "bidirectional", seq=13, attrs={"activations": ["Tanh", "Softsign"]},
         optional=("B", "initial_h")),
    Spec("rnn_affine_clip_loop", "RNN", "reverse", seq=11, attrs={"activations": ["Affine"],
                                                                   "activation_alpha": [0.7],
                                                                   "activation_beta": [0.1], "clip": 0.5},
         optional=("B",)),
    Spec("rnn_batchwise_fed_loop", "RNN", "bidirectional", layout=1, seq=9, optional=("B", "initial_h"),
         fed=("X", "W", "R", "B", "initial_h")),
]
SPECS += LOOPS


class Case:
    """One spec: its ONNX model, feeds, the imported graph and onnxruntime's outputs."""

    def __init__(self, spec: Spec, folder):
        self.spec = spec
        values = spec.values()
        model, self.feeds = spec.model(values=values)
        path = folder / f"{spec.key}.onnx"
        path.write_bytes(model.SerializeToString())
        self.graph = gd.load_onnx(path)
        self.expected = self._reference(values)

    def _reference(self, values: dict) -> dict:
        """onnxruntime's outputs; batch-major cases run the seq-major model on transposed data."""
        spec = self.spec
        if spec.layout == 1:
            values = {k: (v.transpose(1, 0, 2).copy() if k in ("X", "initial_h", "initial_c") else v)
                      for k, v in values.items()}
        model, feeds = spec.model(layout=0, values=values)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, session.run(None, feeds)))
        if spec.layout == 1:
            got = {k: v.transpose(2, 0, 1, 3) if k == "Y" else v.transpose(1, 0, 2) for k, v in got.items()}
        return got


def assert_close(got: dict, expected: dict, what: str) -> None:
    assert sorted(got) == sorted(expected), f"{what}: outputs {sorted(got)} != {sorted(expected)}"
    for name, want in expected.items():
        have = got[name]
        assert have.shape == want.shape and have.dtype == want.dtype, \
            f"{what} output '{name}': {have.dtype}{have.shape} != {want.dtype}{want.shape}"
        scale = max(float(np.abs(want).max()), 1e-6)
        err = float(np.abs(have.astype(np.float64) - want).max())
        assert err <= TOL * scale, f"{what} output '{name}': max abs error {err:.3g} (scale {scale:.3g})"


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rnn")
    return {s.key: Case(s, folder) for s in SPECS}


@pytest.fixture(scope="module")
def compiled(cases, compile_graphs):
    return compile_graphs({key: c.graph for key, c in cases.items()})


# ----------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_interpreter_matches_onnxruntime(key, cases):
    case = cases[key]
    gd.verify(case.graph)
    outs = [str(o) for o in case.graph.outputs]
    assert_close(dict(zip(outs, gd.run(case.graph, case.feeds, outs))), case.expected, f"{key} interpreter")


@pytest.mark.c
@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_compiled_matches_onnxruntime(key, cases, compiled):
    assert_close(compiled[key](**cases[key].feeds), cases[key].expected, f"{key} compiled")


def test_input_projection_is_one_gemm(cases):
    """X @ W^T for every time step and direction is one gemm; the steps add only H @ R^T."""
    spec = cases["lstm_bidir_all"].spec
    g = cases["lstm_bidir_all"].graph
    gemms = [n for n in g.nodes if n.op == "gemm"]
    rows = spec.seq * spec.batch
    assert [n.outputs[0].shape for n in gemms if n.outputs[0].shape[0] == rows] == \
        [(rows, spec.dirs * 4 * spec.hidden)]
    # one recurrent gemm per step and direction (initial_h given, so step 0 has one too)
    assert sum(n.outputs[0].shape == (spec.batch, 4 * spec.hidden) for n in gemms) == spec.seq * spec.dirs


@pytest.mark.parametrize("key", [s.key for s in LOOPS])
def test_long_sequences_are_loops(key, cases):
    """A layer longer than UNROLL_STEPS is one loop per direction (a loop over chunks of
    steps holding the loop of one cell step) that scans its steps' h only when Y is read."""
    spec, g = cases[key].spec, cases[key].graph
    assert spec.seq > UNROLL_STEPS
    loops = [n for n in g.nodes if n.op == "while_loop"]
    assert len(loops) == spec.dirs
    outputs = spec.outputs if spec.outputs is not None else OUTPUTS[spec.op]
    for n in loops:
        assert n.attrs["max_iterations"] == -(-spec.seq // CHUNK_STEPS)
        assert n.attrs["scans"] == (outputs[0] != "")
        (inner,) = [m for m in n.attrs["body"].nodes if m.op == "while_loop"]
        assert inner.attrs["max_iterations"] == CHUNK_STEPS
        assert inner.attrs["trip"] == (spec.seq % CHUNK_STEPS != 0)  # a padded last chunk
    cells = [n.op for n in g.nodes if n.op in ("lstm_cell", "gru_cell", "gemm")]
    assert cells == [], cells  # every step is inside the loops
    note = f"recurrent layer {spec.op} '{key}_node' ({spec.direction}): a loop over its {spec.seq} time steps"
    assert g.notes == [note + ("" if outputs[0] else ", Y not read")]


def test_short_sequences_are_unrolled(cases):
    """At most UNROLL_STEPS steps: one cell per step and direction, no loop; the note says so."""
    for spec in SPECS:
        if spec.seq <= UNROLL_STEPS:
            g = cases[spec.key].graph
            assert not any(n.op == "while_loop" for n in g.nodes), spec.key
            assert g.notes[0].startswith(f"recurrent layer {spec.op} '{spec.key}_node' (") and \
                f"unrolled, {spec.seq} time step" in g.notes[0], g.notes


def test_zero_initial_state_skips_first_recurrence(cases):
    """Without initial_h the first step has no H @ R^T: its lstm_cell takes no state."""
    spec, g = cases["lstm_fwd"].spec, cases["lstm_fwd"].graph
    assert [len(n.inputs) for n in g.nodes if n.op == "lstm_cell"] == [2] + [4] * (spec.seq - 1)
    assert sum(n.op == "gemm" for n in g.nodes) == 1  # the input projection


# ----------------------------------------------------------------------------- refusals


def _import_error(tmp_path, spec: Spec, values: dict | None = None) -> str:
    model, _ = spec.model(values=values)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(FlowcError) as info:
        gd.load_onnx(path)
    msg = str(info.value)
    assert f"'{spec.key}_node' ({spec.op}, opset 22)" in msg, msg
    return msg


def test_short_sequence_lens_refused(tmp_path):
    spec = Spec("short", "LSTM", optional=("sequence_lens",))
    values = dict(spec.values(), sequence_lens=np.array([3, 2], np.int32))
    msg = _import_error(tmp_path, spec, values)
    assert "sequence_lens [3, 2] must equal seq_length 3" in msg


def test_fed_sequence_lens_refused(tmp_path):
    spec = Spec("fedlens", "GRU", optional=("sequence_lens",), fed=("X", "sequence_lens"))
    msg = _import_error(tmp_path, spec)
    assert "sequence_lens" in msg and "must be a constant" in msg


@pytest.mark.parametrize("direction, attrs, words", [
    ("forward", {"activations": ["Gelu"]}, "activation 'Gelu'"),
    ("forward", {"activations": ["ScaledTanh"], "activation_alpha": [2.0]}, "explicit activation_beta"),
    ("bidirectional", {"activations": ["Tanh", "Tanh", "Tanh"]}, "3 activations given"),
    ("bidirectional", {"activations": ["Tanh"]}, "1 activations given; RNN needs 1 per direction (2 for 2"),
])
def test_bad_activations_refused(tmp_path, direction, attrs, words):
    assert words in _import_error(tmp_path, Spec("acts", "RNN", direction, attrs=attrs))


def test_bad_weight_shape_refused(tmp_path):
    spec = Spec("badw", "GRU")
    values = dict(spec.values(), W=np.zeros((1, 14, 4), np.float32))
    assert "input W has shape [1, 14, 4], expected [1, 15, 4]" in _import_error(tmp_path, spec, values)


def test_unknown_direction_refused(tmp_path):
    assert "direction 'sideways'" in _import_error(tmp_path, Spec("dir", "RNN", "sideways"))
