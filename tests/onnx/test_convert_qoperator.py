"""onnxruntime's QOperator ops in the com.microsoft domain (graphdef/onnx/ops_quant_ms.py),
against onnxruntime.

One-node models built with ``onnx.helper`` sweep each op over every value of its input type
(int8 and uint8), zero points at both ends of the range and in the middle, and scales from 1e-6
to 1e3; the results, integers, may differ from onnxruntime's by at most 1 (the bound stated in
ops_quant_ms.py) and only QLinearAdd's may (a few near ties, at most 3%): every other op is
bit-exact with onnxruntime on these sweeps. Then whole models quantized by
onnxruntime's own quantizer (``quantize_static``, QOperator format, per-channel int8 weights,
int8 and uint8 activations) run in the interpreter and compiled to C.
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

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int32): TensorProto.INT32}  # fmt: skip
MS = "com.microsoft"


@dataclass
class Spec:
    key: str
    op: str
    inputs: list  # (name, array or None for a missing optional input), in the op's order
    attrs: dict = field(default_factory=dict)
    fed: tuple = ("x", "a", "b")  # inputs fed at run time; the others are initializers
    most: float = 0.0  # the share of the outputs that may be off by one (QLinearAdd's, see below)

    def model(self):
        names = [n if a is not None else "" for n, a in self.inputs]
        while names and not names[-1]:
            names.pop()
        node = helper.make_node(self.op, names, ["y"], domain=MS, **self.attrs)
        present = [(n, a) for n, a in self.inputs if a is not None]
        fed = [helper.make_tensor_value_info(n, ELEM[a.dtype], a.shape) for n, a in present if n in self.fed]
        inits = [numpy_helper.from_array(a, n) for n, a in present if n not in self.fed]
        graph = helper.make_graph([node], self.key, fed, [helper.make_empty_tensor_value_info("y")], inits)
        opsets = [helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 8
        return model

    @property
    def feeds(self) -> dict:
        return {n: a for n, a in self.inputs if a is not None and n in self.fed}

    def expected(self) -> np.ndarray:
        session = ort.InferenceSession(self.model().SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, self.feeds)[0]


def _rng(key: str):
    return np.random.default_rng(zlib.crc32(key.encode()))


def every(dtype, shape=(4, 64)) -> np.ndarray:
    """Every value of ``dtype`` (int8, uint8) once, in a shuffled order, in ``shape``."""
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1).astype(dtype)
    return _rng(str(shape) + np.dtype(dtype).name).permutation(values).reshape(shape)


def q(key, dtype, *shape):
    info = np.iinfo(dtype)
    return _rng(key + str(shape)).integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def f(v):
    return np.asarray(v, np.float32)


def zp(dtype, where: str):
    """A zero point of ``dtype`` at the low end, the middle or the high end of its range."""
    info = np.iinfo(dtype)
    return np.asarray({"lo": info.min, "mid": (info.min + info.max + 1) // 2, "hi": info.max}[where], dtype)


def _specs() -> list[Spec]:
    out = []
    for dt in (np.int8, np.uint8):
        name = np.dtype(dt).name
        # unary ops over every input value: input scale and zero point, output scale and zero point
        grid = [(0.05, "mid", 1 / 256, "lo"), (0.1, "lo", 0.02, "mid"), (1e-3, "hi", 1e-3, "hi"),
                (1e-6, "mid", 1e-6, "mid"), (1e3, "mid", 1e3, "lo"), (0.2, "hi", 8.0, "mid")]  # fmt: skip
        for op, attrs in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1}),
                          ("QLinearLeakyRelu", {})):  # fmt: skip
            for k, (xs, xz, ys, yz) in enumerate(grid):
                out.append(Spec(
                    f"{op}_{name}_{k}{'_alpha' if attrs else ''}", op,
                    [("x", every(dt)), ("xs", f(xs)), ("xz", zp(dt, xz)), ("ys", f(ys)), ("yz", zp(dt, yz))],
                    attrs,
                ))  # fmt: skip
        pairs = [(0.05, "mid", 0.02, "lo", 0.06, "mid"), (1e-3, "hi", 0.5, "mid", 0.4, "lo"),
                 (1e3, "lo", 1e3, "hi", 2e3, "hi"), (1e-6, "mid", 2e-6, "mid", 1e-6, "mid")]  # fmt: skip
        for op in ("QLinearAdd", "QLinearMul"):
            for k, (a_s, a_z, b_s, b_z, c_s, c_z) in enumerate(pairs):
                c_s = c_s * (a_s * 40 if op == "QLinearMul" else 1)
                # onnxruntime folds the zero points into one float32 constant, its rounding of which
                # (fused multiply-adds or not) moves a few results near a tie by one
                out.append(Spec(
                    f"{op}_{name}_{k}", op,
                    [("a", every(dt)), ("as", f(a_s)), ("az", zp(dt, a_z)), ("b", q(f"b{k}", dt, 64)),
                     ("bs", f(b_s)), ("bz", zp(dt, b_z)), ("cs", f(c_s)), ("cz", zp(dt, c_z))],
                    most=0.03 if op == "QLinearAdd" else 0.0,
                ))  # fmt: skip
        out.append(Spec(
            f"QLinearConcat_{name}", "QLinearConcat",
            [("ys", f(0.05)), ("yz", zp(dt, "mid")), ("a", every(dt)), ("as", f(0.03)), ("az", zp(dt, "lo")),
             ("b", q("cat", dt, 4, 16)), ("bs", f(0.05)), ("bz", zp(dt, "mid"))],
            {"axis": 1},
        ))  # fmt: skip
        pools = [((3, 3), (2, 2), (1, 1, 1, 1), 0), ((3, 3), (2, 2), (1, 1, 1, 1), 1),
                 ((2, 2), (2, 2), (0, 0, 0, 0), 0)]  # fmt: skip
        for k, (kernel, strides, pads, include) in enumerate(pools):
            out.append(Spec(
                f"QLinearAveragePool_{name}_{k}", "QLinearAveragePool",
                [("x", q(f"ap{k}", dt, 2, 3, 9, 9)), ("xs", f(0.04)), ("xz", zp(dt, "mid")), ("ys", f(0.03)),
                 ("yz", zp(dt, "lo"))],
                {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
                 "count_include_pad": include},
            ))  # fmt: skip
        for k, (hw, xs, ys) in enumerate([(5, 0.04, 0.03), (7, 1e-3, 2e-3), (1, 0.1, 0.1)]):
            out.append(Spec(
                f"QLinearGlobalAveragePool_{name}_{k}", "QLinearGlobalAveragePool",
                [("x", q(f"gap{k}", dt, 2, 16, hw, hw)), ("xs", f(xs)), ("xz", zp(dt, "hi")), ("ys", f(ys)),
                 ("yz", zp(dt, "mid"))],
            ))  # fmt: skip
        for k, (xs, shape, axis, opset) in enumerate([(0.1, (8, 32), -1, 13), (0.02, (2, 4, 16), 1, 1),
                                                      (1.0, (4, 10), -1, 13)]):  # fmt: skip
            out.append(Spec(
                f"QLinearSoftmax_{name}_{k}", "QLinearSoftmax",
                [("x", q(f"sm{k}", dt, *shape)), ("xs", f(xs)), ("xz", zp(dt, "mid")), ("ys", f(1 / 256)),
                 ("yz", zp(dt, "lo"))],
                {"axis": axis, "opset": opset},
            ))  # fmt: skip
        for k, (trans_b, per_channel, bias, quantized) in enumerate(
            [(1, True, True, True), (0, True, False, True), (1, False, True, True), (1, True, True, False)]
        ):  # fmt: skip
            m, kk, n = 6, 48, 10
            b = q(f"gb{k}", np.int8, n, kk) if trans_b else q(f"gb{k}", np.int8, kk, n)
            b_scale = _rng(f"gs{k}").uniform(0.002, 0.02, n).astype(np.float32) if per_channel else f(0.01)
            out.append(Spec(
                f"QGemm_{name}_{k}", "QGemm",
                [("a", q(f"ga{k}", dt, m, kk)), ("as", f(0.05)), ("az", zp(dt, "mid")), ("b", b),
                 ("bs", b_scale), ("bz", np.zeros(b_scale.shape, np.int8)),
                 ("c", _rng(f"gc{k}").integers(-3000, 3000, n).astype(np.int32) if bias else None),
                 ("ys", f(0.2) if quantized else None), ("yz", zp(dt, "lo") if quantized else None)],
                {"transB": trans_b},
                fed=("a",),
            ))  # fmt: skip
    return out


SPECS = _specs()


@dataclass
class Case:
    spec: Spec
    graph: gd.Graph
    expected: np.ndarray


@pytest.fixture(scope="module")
def cases(import_models):
    graphs = import_models(SPECS)
    return {s.key: Case(s, graphs[s.key], s.expected()) for s in SPECS}


@pytest.fixture(scope="module")
def compiled(cases, compile_graphs):
    return compile_graphs({key: c.graph for key, c in cases.items()})


def assert_close(have, case: Case, what: str) -> None:
    want = case.expected
    assert have.dtype == want.dtype and have.shape == want.shape, f"{what}: {have.dtype}{have.shape}"
    if want.dtype.kind == "f":  # QGemm without y_scale: float32
        np.testing.assert_allclose(have, want, rtol=1e-6, atol=1e-6, err_msg=what)
        return
    diff = np.abs(have.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= 1, f"{what}: off by {diff.max()} at {np.argmax(diff)}"
    assert np.mean(diff) <= case.spec.most, f"{what}: {np.count_nonzero(diff)} of {diff.size} off by one"


@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_interpreter_matches_onnxruntime(key, cases):
    case = cases[key]
    gd.verify(case.graph)
    out = str(case.graph.outputs[0])
    assert_close(np.asarray(gd.run(case.graph, case.spec.feeds, [out])[0]), case, f"{key} interpreter")


@pytest.mark.c
@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_compiled_matches_onnxruntime(key, cases, compiled):
    (have,) = compiled[key](**cases[key].spec.feeds).values()
    assert_close(np.asarray(have), cases[key], f"{key} compiled")


# ----------------------------------------------------------------------------- whole models


def _float_cnn(path) -> None:
    """A small CNN with every op the QOperator format has a com.microsoft op for."""
    rng = np.random.default_rng(7)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a1"]),
        helper.make_node("Mul", ["a1", "r1"], ["m1"]),
        helper.make_node("Sigmoid", ["m1"], ["s1"]),
        helper.make_node("LeakyRelu", ["a1"], ["l1"], alpha=0.1),
        helper.make_node("Concat", ["s1", "l1"], ["cat"], axis=1),
        helper.make_node("AveragePool", ["cat"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["ap"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], transB=1),
        helper.make_node("Softmax", ["g"], ["y"], axis=1),
    ]
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1), init("w2", 8, 8, 3, 3, scale=0.2),
             init("b2", 8, scale=0.1), init("wg", 5, 16), init("bg", 5, scale=0.1)]  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])
    graph = helper.make_graph(nodes, "cnn", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.fixture(scope="module")
def quantized_cnns(tmp_path_factory):
    """The CNN quantized by onnxruntime (QOperator, per-channel int8 weights), with int8 and
    with uint8 activations: {activation dtype: (path, graph, inputs)}."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    folder = tmp_path_factory.mktemp("qoperator")
    _float_cnn(folder / "float.onnx")
    rng = np.random.default_rng(3)
    samples = [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(12)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": x} for x in samples[:8]])

        def get_next(self):
            return next(self.it, None)

    out = {}
    for act in (QuantType.QInt8, QuantType.QUInt8):
        path = folder / f"cnn_{act.name}.onnx"
        quantize_static(folder / "float.onnx", path, Reader(), quant_format=QuantFormat.QOperator,
                        per_channel=True, activation_type=act, weight_type=QuantType.QInt8)  # fmt: skip
        ops = {(n.domain, n.op_type) for n in onnx.load(path).graph.node}
        assert (MS, "QLinearAdd") in ops and (MS, "QGemm") in ops and (MS, "QLinearSoftmax") in ops
        out[act.name] = (path, gd.load_onnx(path), samples[8:])
    return out


@pytest.mark.parametrize("act", ["QInt8", "QUInt8"])
def test_a_model_quantized_by_onnxruntime_runs_as_onnxruntime_runs_it(act, quantized_cnns, compile_graphs):
    """Interpreter and compiled C against onnxruntime on inputs the calibration did not see:
    the softmax's 1/256 steps equal, or one step apart."""
    path, graph, inputs = quantized_cnns[act]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (model,) = compile_graphs({f"cnn_{act}": graph}).values()
    out = str(graph.outputs[0])
    for x in inputs:
        (want,) = session.run(None, {"x": x})
        got = np.asarray(gd.run(graph, {"x": x}, [out])[0])
        (compiled,) = model(x=x).values()
        for have, what in ((got, "interpreter"), (np.asarray(compiled), "compiled")):
            np.testing.assert_allclose(have, want, rtol=0, atol=1 / 256 + 1e-7, err_msg=f"{act} {what}")


def _refused(key, op, inputs, attrs=None) -> Spec:
    return Spec(key, op, inputs, attrs or {})


REFUSED = [
    (_refused("nhwc", "QLinearGlobalAveragePool",
              [("x", q("r", np.int8, 1, 4, 4, 8)), ("xs", f(0.1)), ("xz", zp(np.int8, "mid")), ("ys", f(0.1)),
               ("yz", zp(np.int8, "mid"))], {"channels_last": 1}), "channels_last=1"),
    (_refused("mixed", "QLinearAdd",
              [("a", q("r", np.int8, 8)), ("as", f(0.1)), ("az", zp(np.int8, "mid")),
               ("b", q("r", np.uint8, 8)), ("bs", f(0.1)), ("bz", zp(np.uint8, "mid")), ("cs", f(0.1)),
               ("cz", zp(np.int8, "mid"))]),
     "A is int8 and B is uint8"),
    (_refused("concat_pairs", "QLinearConcat",
              [("ys", f(0.1)), ("yz", zp(np.int8, "mid")), ("a", q("r", np.int8, 2, 3)), ("as", f(0.1))],
              {"axis": 1}), "(X, X_scale, X_zero_point) triples"),
    (_refused("per_channel_x", "QLinearSigmoid",
              [("x", q("r", np.int8, 2, 3)), ("xs", f([0.1, 0.2, 0.3])), ("xz", zp(np.int8, "mid")),
               ("ys", f(0.1)), ("yz", zp(np.int8, "mid"))]), "X_scale of shape (3,) must be one value"),
]  # fmt: skip


@pytest.mark.parametrize("spec,words", REFUSED, ids=[s.key for s, _ in REFUSED])
def test_refused_with_a_reason_naming_the_node(tmp_path, spec, words):
    path = tmp_path / f"{spec.key}.onnx"
    path.write_bytes(spec.model().SerializeToString())
    with pytest.raises(gd.errors.FlowcError) as e:
        gd.load_onnx(path)
    message = str(e.value)
    assert words in message and spec.op in message and "\n" not in message
