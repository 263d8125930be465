"""Recurrent layers over long sequences: a loop over one cell step, code and arena constant.

PyTorch's nn.LSTM (bidirectional, Y read by a linear head), nn.GRU (only the last hidden
state read) and nn.RNN (initial state fed, Y and the last state read), exported by
``torch.onnx.export(dynamo=False)`` at 16 and 2,048 time steps, become loops
(graphdef/onnx/ops_rnn.py); their compiled C and the interpreter are compared with
onnxruntime, and the generated model.c (its numbers aside: the input's size, the loop's
bound), the arena (a layer whose Y is not read) and, for cortex-m4, the code and the RAM are
the same at both lengths. A Conv1d + GRU sensor model (input [1, 3, T], conv1d to 8
channels, transpose, GRU of 32, last hidden state -> linear) is built for cortex-m4 at 512
and 2,048 steps: the same code, and an arena that grows only by the convolution's output
and its transpose.

Measured with this change (AMD EPYC host, one thread, batch 1, 2 cores shared; cortex-m4
figures from the linked test firmware, ``Footprint``):

- the sensor model on cortex-m4: 2.9 KiB of code and a 32 KiB arena at 512 steps (64 KiB at
  1,024, 128 KiB at 2,048: the conv output and its transpose, 2 x 8 x T floats); unrolled,
  41.8 KiB of code and a 384 KiB arena at 512 steps (91.7 KiB / 768 KiB at 1,024, 177 KiB /
  1.5 MiB at 2,048).
- per time step, the loop against the unrolled code (alternate runs of the two compiled
  models in one process, median of 30 ratios, T = 512 or 256): GRU(64, 128) 0.97, LSTM(64,
  128) 0.98, LSTM(256, 256) 1.01, GRU(64, 128) batch 4 0.96, reverse GRU(64, 128) with Y
  1.00, the sensor model 0.99, LSTM(8, 32) 0.97, GRU(8, 16) 0.98 (the unrolled code: 3.4 us,
  3.3 us, 16.7 us, 8.1 us, 2.6 us, 0.20 us, 0.25 us and 0.11 us a step).
"""

from __future__ import annotations

import io
import re
import shutil
import warnings
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

import codegen  # noqa: E402
import graphdef as gd  # noqa: E402
from codegen import pipeline  # noqa: E402
from codegen.target import Target  # noqa: E402
from graphdef.onnx.ops_rnn import CHUNK_STEPS, UNROLL_STEPS  # noqa: E402

pytestmark = pytest.mark.c

LENGTHS = (16, 2048)
TOL = 1e-4  # of max |onnxruntime output|
nn = torch.nn


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(12, 24, bidirectional=True)
        self.head = nn.Linear(48, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


class Gru(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(12, 24)
        self.head = nn.Linear(24, 3)

    def forward(self, x):
        _, h = self.rnn(x)
        return self.head(h[0])


class Rnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(12, 24)

    def forward(self, x, h0):
        return self.rnn(x, h0)


class Sensor(nn.Module):
    """Conv1d + GRU over a [1, channels, T] signal; the last hidden state classified."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 8, 5, padding=2)
        self.rnn = nn.GRU(8, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        seq = torch.relu(self.conv(x)).permute(2, 0, 1)  # [T, 1, 8]
        _, h = self.rnn(seq)
        return self.head(h[0])


MODELS = {"lstm": Lstm, "gru": Gru, "rnn": Rnn, "sensor": Sensor}
Y_READ = {"lstm": True, "gru": False, "rnn": True, "sensor": False}


def _export(key: str, steps: int, folder):
    """(graph, feeds, onnxruntime's outputs by name) of model ``key`` over ``steps`` steps."""
    torch.manual_seed(0)  # the same weights at every length
    module = MODELS[key]().eval()
    rng = np.random.default_rng(steps)
    shape = (1, 3, steps) if key == "sensor" else (steps, 1, 12)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    if key == "rnn":
        feeds["h0"] = rng.standard_normal((1, 1, 24)).astype(np.float32)
    path = folder / f"{key}_{steps}.onnx"
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        args = tuple(torch.from_numpy(v) for v in feeds.values())
        torch.onnx.export(module, args, str(path), input_names=list(feeds), opset_version=17, dynamo=False)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    return gd.load_onnx(path), feeds, expected


CASES = [(k, t) for k in MODELS if k != "sensor" for t in LENGTHS] + [("sensor", 512), ("sensor", 2048)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rnn_loops")
    return {(k, t): _export(k, t, folder) for k, t in CASES}


@pytest.fixture(scope="module")
def compiled(models):
    try:
        codegen.backends.c.toolchain.find_cc()
    except gd.FlowcError as e:
        pytest.skip(str(e))
    return dict(zip(models, codegen.compile_many([(f"{k}_{t}", m[0]) for (k, t), m in models.items()])))


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, what
    scale = max(float(np.abs(want).max()), 1e-6)
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= TOL * scale, f"{what}: max abs error {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("key, steps", CASES)
def test_matches_onnxruntime(key, steps, models, compiled):
    graph, feeds, expected = models[key, steps]
    gd.verify(graph)
    outs = [str(o) for o in graph.outputs]
    interp = dict(zip(outs, gd.run(graph, feeds, outs)))
    got = compiled[key, steps](**feeds)
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        _close(interp[name], want, f"{key} over {steps} steps, interpreter '{name}'")
        _close(got[name], want, f"{key} over {steps} steps, compiled '{name}'")


@pytest.mark.parametrize("key, steps", CASES)
def test_every_layer_is_a_loop(key, steps, models):
    """One loop per direction, scanning h only where Y is read; the graph's note says so."""
    graph = models[key, steps][0]
    loops = [n for n in graph.nodes if n.op == "while_loop"]
    assert len(loops) == (2 if key == "lstm" else 1)
    assert all(n.attrs["max_iterations"] == steps // CHUNK_STEPS for n in loops)
    assert all(n.attrs["scans"] == Y_READ[key] for n in loops)
    assert not any(n.op in ("lstm_cell", "gru_cell") for n in graph.nodes)
    (note,) = graph.notes
    assert f"a loop over its {steps} time steps" in note and ("Y not read" in note) != Y_READ[key], note


def _host(graph):
    c = pipeline.run(graph, pipeline.Options(), until="render")
    return c.sources.files["model.c"], c.program


@pytest.mark.parametrize("key", [k for k in MODELS if k != "sensor"])
def test_host_code_and_arena_do_not_depend_on_length(key, models):
    """model.c holds the same code at 16 and 2,048 steps but for its numbers (the input's
    size, the loops' bounds, the last time step's index); the arena is the same too, also
    where Y is read (its scan is the model's output buffer, or a buffer that grows with the
    steps when a node reads it). With two directions and Y read, the schedule may run the
    reverse loop first at one length and last at the other: that text is compared line by
    line, in sorted order."""
    (short, p16), (long, p2048) = (_host(models[key, t][0]) for t in LENGTHS)
    short, long = re.sub(r"\d+", "#", short), re.sub(r"\d+", "#", long)
    if key == "lstm":  # (and the two loops' names aside: which is while_loop, which while_loop_1)
        short, long = (re.sub(r"while_loop_#", "while_loop", t) for t in (short, long))
        assert sorted(short.splitlines()) == sorted(long.splitlines())
        assert sorted(n.op for n in p16.steps) == sorted(n.op for n in p2048.steps)
    else:
        assert short == long
        assert [n.op for n in p16.steps] == [n.op for n in p2048.steps]
    if key == "lstm":  # Y read by the head: its scans, at most once more in a copy
        y = 4 * 24 * 2  # bytes of Y a time step
        assert p2048.arena_bytes - p16.arena_bytes <= 2 * y * (LENGTHS[1] - LENGTHS[0])
    else:
        assert p16.arena_bytes == p2048.arena_bytes


def _m4(graph, folder):
    """The cortex-m4 footprint of ``graph`` (its library linked into the test firmware)."""
    if not shutil.which(Target("cortex-m4").compiler):
        pytest.skip("arm-none-eabi-gcc missing (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)")
    c = pipeline.run(
        graph, pipeline.Options(target=Target("cortex-m4"), product="library"), until="build", folder=folder
    )
    return c.results["build"].footprint


@pytest.mark.cross
@pytest.mark.parametrize("key", [k for k in MODELS if k != "sensor"])
def test_cortex_m4_footprint_does_not_depend_on_length(key, models, tmp_path):
    """The linked code and the flash are the same at 16 and 2,048 steps, within the few bytes
    that larger immediates take (and, with two directions and Y read, the glue of steps the
    schedule orders differently); RAM too when Y is not read."""
    short, long = (_m4(models[key, t][0], tmp_path / str(t)) for t in LENGTHS)
    slack = 64 if key == "lstm" else 16
    assert abs(short.code - long.code) <= slack and abs(short.flash - long.flash) <= slack, (short, long)
    assert short.weights == long.weights
    if key != "lstm":
        assert short.arena == long.arena and short.ram == long.ram, (short, long)


@pytest.mark.cross
def test_sensor_model_on_cortex_m4(models, tmp_path):
    """The Conv1d + GRU sensor model: the same few KiB of code at 512 and 2,048 steps (one
    step a timestep took 41.8 KiB and a 384 KiB arena at 512); the arena grows by the conv
    output and its transpose only (2 x 8 channels x T floats), not by the GRU."""
    short, long = (_m4(models["sensor", t][0], tmp_path / str(t)) for t in (512, 2048))
    assert abs(short.code - long.code) <= 16 and short.code < 4 * 1024, (short, long)
    assert long.arena - short.arena == 2 * 8 * 4 * (2048 - 512), (short, long)
    assert short.arena <= 2 * 8 * 4 * 512 + 2048, short


def _onnx_gru(tmp_path, steps: int, outputs: list[str], graph_outputs: list[str]):
    """A one-node GRU model (hidden 6, no bias) with outputs named ``outputs``; a Relu reads
    Y when "r" is among the ``graph_outputs``."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = [numpy_helper.from_array((0.4 * rng.standard_normal(s)).astype(np.float32), n)
         for n, s in (("W", (1, 18, 4)), ("R", (1, 18, 6)))]  # fmt: skip
    nodes = [helper.make_node("GRU", ["X", "W", "R"], outputs, hidden_size=6, name="gru")]
    if "r" in graph_outputs:
        nodes.append(helper.make_node("Relu", [outputs[0]], ["r"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (steps, 1, 4))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in graph_outputs],
        w,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / f"gru_{steps}_{'_'.join(graph_outputs)}.onnx"
    path.write_bytes(model.SerializeToString())
    return gd.load_onnx(path), path


@pytest.mark.parametrize(
    "outputs, graph_outputs, scans",
    [
        (["", "h"], ["h"], 0),  # Y unnamed
        (["y", "h"], ["h"], 0),  # named, read by nothing
        (["y", "h"], ["r", "h"], 1),  # read by a node
        (["y"], ["y"], 1),  # a graph output
    ],
)
def test_y_is_scanned_only_when_read(tmp_path, outputs, graph_outputs, scans):
    graph, _ = _onnx_gru(tmp_path, 20, outputs, graph_outputs)
    (loop,) = [n for n in graph.nodes if n.op == "while_loop"]
    assert loop.attrs["scans"] == scans


def test_short_layers_unrolled_and_inspect_says_which(tmp_path, capsys):
    """At most UNROLL_STEPS steps: one cell per step; one more: a loop. ``flowc inspect``
    prints the note of each."""
    from codegen.cli import main

    short, _ = _onnx_gru(tmp_path, UNROLL_STEPS, ["", "h"], ["h"])
    assert [n.op for n in short.nodes].count("gru_cell") == UNROLL_STEPS
    assert not any(n.op == "while_loop" for n in short.nodes)
    assert short.notes == [f"recurrent layer GRU 'gru' (forward): unrolled, {UNROLL_STEPS} time steps "
                           f"(at most {UNROLL_STEPS}), Y not read"]  # fmt: skip
    longer, path = _onnx_gru(tmp_path, UNROLL_STEPS + 1, ["", "h"], ["h"])
    assert sum(n.op == "while_loop" for n in longer.nodes) == 1
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    steps = UNROLL_STEPS + 1
    assert f"recurrent layer GRU 'gru' (forward): a loop over its {steps} time steps, Y not read" in out
