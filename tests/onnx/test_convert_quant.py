"""ONNX quantization ops and BitCast (graphdef/onnx/ops_quant.py), against onnxruntime.

Each case is a one-node ONNX model built with ``onnx.helper``: QuantizeLinear (per tensor,
per axis, blocked with a short last block, int8/uint8/int16/uint16, output_dtype, float16,
ties to even, saturation, precision), DequantizeLinear (the same granularities, int32,
float16 and output_dtype), DynamicQuantizeLinear (mixed, positive, negative, all-zero
inputs), MatMulInteger, QLinearMatMul (per row and per column), ConvInteger and QLinearConv
(padding, strides, groups, per-channel zero points and scales, bias, the float64
accumulation path) and BitCast. Scales and zero points are fed as graph inputs in some
cases and given as initializers in others. The imported graph runs in the interpreter and,
compiled to C (all cases in one library), through cffi; integer results must match
exactly. onnx's reference evaluator stands in where onnxruntime 1.31 has no kernel
(BitCast, blocked and int16 quantization at the newest opsets, precision).
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
from codegen import pipeline  # noqa: E402
from graphdef.errors import FlowcError  # noqa: E402

ELEM = {np.dtype(k): v for k, v in (
    (np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16), (np.float64, TensorProto.DOUBLE),
    (np.int64, TensorProto.INT64), (np.int32, TensorProto.INT32), (np.int16, TensorProto.INT16),
    (np.uint16, TensorProto.UINT16), (np.int8, TensorProto.INT8), (np.uint8, TensorProto.UINT8),
    (np.uint32, TensorProto.UINT32), (np.uint64, TensorProto.UINT64), (np.bool_, TensorProto.BOOL))}


@dataclass
class Spec:
    key: str
    op: str
    inputs: list  # (name, array or None for a missing optional input), in ONNX order
    attrs: dict = field(default_factory=dict)
    outputs: tuple = ("y",)
    opset: int = 21
    consts: tuple = ()  # inputs given as initializers
    reference: object = "ort"  # "onnx" (onnx.reference) where onnxruntime has no kernel, or fn(**inputs)

    def model(self):
        names = [n if a is not None else "" for n, a in self.inputs]
        while names and not names[-1]:
            names.pop()
        node = helper.make_node(self.op, names, list(self.outputs), **self.attrs)
        present = [(n, a) for n, a in self.inputs if a is not None]
        fed = [helper.make_tensor_value_info(n, ELEM[a.dtype], a.shape)
               for n, a in present if n not in self.consts]
        inits = [numpy_helper.from_array(a, n) for n, a in present if n in self.consts]
        outs = [helper.make_empty_tensor_value_info(n) for n in self.outputs]
        graph = helper.make_graph([node], self.key, fed, outs, inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10 if self.opset <= 23 else 11
        return model

    @property
    def feeds(self) -> dict:
        return {n: a for n, a in self.inputs if a is not None and n not in self.consts}

    def expected(self) -> dict:
        model = self.model()
        if callable(self.reference):
            got = self.reference(**{n: a for n, a in self.inputs if a is not None})
        elif self.reference == "onnx":
            from onnx.reference import ReferenceEvaluator

            got = ReferenceEvaluator(model).run(None, self.feeds)
        else:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            got = session.run(None, self.feeds)
        return {n: np.asarray(v) for n, v in zip(self.outputs, got)}


def _rng(key: str):
    return np.random.default_rng(zlib.crc32(key.encode()))


def f32(key, *shape, scale=4.0, dtype=np.float32):
    return (_rng(key + str(shape)).standard_normal(shape) * scale).astype(dtype)


def q(key, dtype, *shape):
    info = np.iinfo(dtype)
    return _rng(key + "q" + str(shape)).integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def scales(key, *shape, dtype=np.float32):
    return _rng(key + "s" + str(shape)).uniform(0.01, 0.1, shape).astype(dtype)


def s(v, dtype=np.float32):
    return np.asarray(v, dtype)


def _ort_float_conv(x, w, attrs):
    """A float32 Conv by onnxruntime: exact for small integers (every sum below 2**24)."""
    assert np.prod(w.shape[1:]) * 255 * 255 <= 2**24
    x, w = x.astype(np.float32), w.astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                              helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "w": w})[0]


def conv_integer_reference(attrs):
    """ConvInteger with a per-channel w zero point (onnxruntime takes one value only)."""

    def run(x, w, xz=None, wz=None):
        xs = x.astype(np.float64) - (0 if xz is None else float(xz))
        per_channel = (-1,) + (1,) * (w.ndim - 1)
        ws = w.astype(np.float64) - (0 if wz is None else wz.astype(np.float64).reshape(per_channel))
        return [_ort_float_conv(xs, ws, attrs).astype(np.int64).astype(np.int32)]

    return run


def matmul_integer_reference(A, B, a_zp, b_zp):
    """MatMulInteger with per-row a zero points (onnxruntime takes one value only)."""
    a = A.astype(np.int64) - a_zp.astype(np.int64).reshape(-1, 1)
    return [(a @ (B.astype(np.int64) - b_zp.astype(np.int64))).astype(np.int32)]


# ties at every half and values past both ends of the uint8 and int8 ranges
TIES = np.array([-300.0, -129.5, -128.5, -2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 3.49, 126.5, 127.5, 254.5,
                 255.5, 300.0, 1e9, -1e9], np.float32)


# ----------------------------------------------------------------------------- the cases


def quantize_specs():
    def ql(key, inputs, attrs=None, opset=21, **kw):
        return Spec(f"quantize_{key}", "QuantizeLinear", inputs, attrs or {}, opset=opset, **kw)

    x = f32("qx", 2, 3, 4, scale=3.0)
    return [
        ql("ties_uint8_opset10", [("x", TIES), ("s", s(1.0)), ("z", s(0, np.uint8))], opset=10),
        ql("ties_int8_zero_point", [("x", TIES), ("s", s(1.0)), ("z", s(-3, np.int8))], opset=13),
        ql("scaled_ties_uint8", [("x", TIES * 0.25), ("s", s(0.25)), ("z", s(128, np.uint8))], opset=13),
        ql("no_zero_point_is_uint8", [("x", x), ("s", s(0.02))], opset=13),
        ql("per_axis_int8", [("x", x), ("s", scales("pa", 3)), ("z", q("pz", np.int8, 3))], opset=13),
        ql("per_axis_last_negative", [("x", x), ("s", scales("pl", 4)), ("z", q("plz", np.uint8, 4))],
           {"axis": -1}, opset=13, consts=("s", "z")),
        ql("per_axis_axis0_const", [("x", x), ("s", scales("p0", 2)), ("z", q("p0z", np.int8, 2))],
           {"axis": 0}, opset=13, consts=("s", "z")),
        ql("float16", [("x", f32("h", 3, 5, dtype=np.float16)), ("s", s(0.03, np.float16)),
                       ("z", s(7, np.uint8))], opset=19),
        ql("int16", [("x", f32("i16", 4, 6, scale=400.0)), ("s", s(0.01)), ("z", s(-20, np.int16))]),
        ql("uint16", [("x", f32("u16", 4, 6, scale=400.0)), ("s", s(0.02)), ("z", s(30000, np.uint16))]),
        ql("output_dtype_int8", [("x", x), ("s", s(0.05))], {"output_dtype": TensorProto.INT8}),
        ql("blocked_short_last_block", [("x", f32("bx", 3, 7)), ("s", scales("bs", 3, 3)),
                                        ("z", q("bz", np.int8, 3, 3))], {"axis": 1, "block_size": 3},
           reference="onnx"),
        ql("blocked_axis0_symmetric", [("x", f32("b0", 4, 5)), ("s", scales("b0s", 2, 5))],
           {"axis": 0, "block_size": 2, "output_dtype": TensorProto.INT16}, reference="onnx"),
        ql("precision_float32_of_float16_scale", [("x", f32("pr", 8)), ("s", s(0.03, np.float16)),
                                                   ("z", s(3, np.uint8))],
           {"precision": TensorProto.FLOAT}, opset=23, reference="onnx"),
        ql("int32_input", [("x", np.arange(-300, 300, 37, dtype=np.int32)), ("s", s(2.0)),
                           ("z", s(1, np.int8))], opset=13, reference="onnx"),
    ]


def dequantize_specs():
    def dq(key, inputs, attrs=None, opset=21, **kw):
        return Spec(f"dequantize_{key}", "DequantizeLinear", inputs, attrs or {}, opset=opset, **kw)

    return [
        dq("uint8_opset10", [("x", q("d", np.uint8, 2, 5)), ("s", s(0.1)), ("z", s(130, np.uint8))],
           opset=10),
        dq("int8_no_zero_point", [("x", q("dn", np.int8, 7)), ("s", s(0.25))], opset=13),
        dq("int32", [("x", np.array([-2**31, -5, 0, 7, 2**31 - 1], np.int32)), ("s", s(0.5))], opset=13),
        dq("per_axis", [("x", q("da", np.int8, 2, 3, 4)), ("s", scales("da", 3)),
                        ("z", q("daz", np.int8, 3))], opset=13),
        dq("per_axis_const", [("x", q("dc", np.uint8, 2, 3, 4)), ("s", scales("dc", 4)),
                              ("z", q("dcz", np.uint8, 4))], {"axis": 2}, opset=13, consts=("s", "z")),
        dq("float16", [("x", q("dh", np.uint8, 9)), ("s", s(0.07, np.float16)), ("z", s(100, np.uint8))],
           opset=19),
        dq("int16", [("x", q("d16", np.int16, 3, 4)), ("s", s(0.001)), ("z", s(-7, np.int16))]),
        dq("uint16", [("x", q("du16", np.uint16, 3, 4)), ("s", s(0.001)), ("z", s(40000, np.uint16))]),
        dq("blocked", [("x", q("db", np.int8, 2, 7)), ("s", scales("db", 2, 2)),
                       ("z", q("dbz", np.int8, 2, 2))], {"axis": 1, "block_size": 4}),
        dq("output_dtype_float16", [("x", q("do", np.int8, 6)), ("s", s(0.3))],
           {"output_dtype": TensorProto.FLOAT16}, opset=23, reference="onnx"),
    ]


def dynamic_specs():
    def dyn(key, x):
        return Spec(f"dynamic_{key}", "DynamicQuantizeLinear", [("x", x)], outputs=("y", "scale", "zp"),
                    opset=11)

    return [
        dyn("mixed", f32("dm", 3, 4)),
        dyn("positive", np.abs(f32("dp", 10)) + 1.0),
        dyn("negative", -np.abs(f32("dng", 2, 5)) - 0.5),
        dyn("all_zero", np.zeros((4,), np.float32)),
    ]


def matmul_specs():
    a8, b8 = q("ma", np.uint8, 4, 6), q("mb", np.int8, 6, 5)
    return [
        Spec("matmul_integer_per_row_col", "MatMulInteger",
             [("A", a8), ("B", b8), ("a_zp", q("maz", np.uint8, 4)), ("b_zp", q("mbz", np.int8, 5))],
             opset=10, reference=matmul_integer_reference),
        Spec("matmul_integer_batched_scalar_zp", "MatMulInteger",
             [("A", q("mba", np.int8, 2, 3, 6)), ("B", q("mbb", np.uint8, 6, 4)), ("a_zp", s(-3, np.int8)),
              ("b_zp", s(200, np.uint8))], opset=10),
        Spec("matmul_integer_no_zp", "MatMulInteger", [("A", a8), ("B", q("mu", np.uint8, 6, 2))], opset=10),
        Spec("matmul_integer_long_k", "MatMulInteger",
             [("A", q("ka", np.uint8, 2, 1500)), ("B", q("kb", np.uint8, 1500, 3)), ("a_zp", s(0, np.uint8)),
              ("b_zp", s(255, np.uint8))], opset=10, consts=("a_zp",)),
        Spec("qlinear_matmul_uint8", "QLinearMatMul",
             [("a", a8), ("as", s(0.05)), ("az", s(120, np.uint8)), ("b", q("qb", np.uint8, 6, 5)),
              ("bs", s(0.04)), ("bz", s(110, np.uint8)), ("ys", s(0.3)), ("yz", s(128, np.uint8))], opset=10),
        Spec("qlinear_matmul_int8_batched", "QLinearMatMul",
             [("a", q("qa", np.int8, 2, 3, 6)), ("as", s([0.02])), ("az", s([1], np.int8)),
              ("b", q("qb8", np.int8, 2, 6, 4)), ("bs", s([0.03])), ("bz", s([-2], np.int8)),
              ("ys", s([0.2])), ("yz", s([-5], np.int8))], opset=21),
        Spec("qlinear_matmul_per_column_const", "QLinearMatMul",
             [("a", a8), ("as", s(0.05)), ("az", s(120, np.uint8)), ("b", b8), ("bs", scales("qc", 5)),
              ("bz", s(np.zeros(5), np.int8)), ("ys", s(0.25)), ("yz", s(3, np.uint8))], opset=10,
             consts=("b", "bs", "bz")),
        Spec("qlinear_matmul_float16_scales", "QLinearMatMul",
             [("a", a8), ("as", s(0.05, np.float16)), ("az", s(120, np.uint8)), ("b", b8),
              ("bs", s(0.04, np.float16)), ("bz", s(3, np.int8)), ("ys", s(0.4, np.float16)),
              ("yz", s(-1, np.int8))], opset=21, reference="onnx"),
    ]


def conv_specs():
    x = q("cx", np.uint8, 1, 4, 6, 6)
    w = q("cw", np.uint8, 6, 2, 3, 3)
    xi, wi = q("ci", np.int8, 2, 3, 5, 5), q("cwi", np.int8, 4, 3, 3, 3)
    big_x, big_w = q("bx", np.uint8, 1, 32, 4, 4), q("bw", np.uint8, 2, 32, 3, 3)  # 288 terms: float64
    return [
        Spec("conv_integer_pads_groups_per_channel", "ConvInteger",
             [("x", x), ("w", w), ("xz", s(128, np.uint8)), ("wz", q("cwz", np.uint8, 6))],
             {"pads": [1, 0, 1, 2], "group": 2, "strides": [1, 2]}, opset=10,
             reference=conv_integer_reference({"pads": [1, 0, 1, 2], "group": 2, "strides": [1, 2]})),
        Spec("conv_integer_int8_same_upper", "ConvInteger", [("x", xi), ("w", wi), ("xz", s(-4, np.int8))],
             {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, opset=10),
        Spec("conv_integer_dilated_1d_const_w", "ConvInteger",
             [("x", q("c1", np.uint8, 2, 3, 9)), ("w", q("c1w", np.uint8, 2, 3, 3)), ("xz", None),
              ("wz", s([5, 250], np.uint8))], {"dilations": [2]}, opset=10, consts=("w", "wz"),
             reference=conv_integer_reference({"dilations": [2]})),
        Spec("conv_integer_float64_sums", "ConvInteger",
             [("x", big_x), ("w", big_w), ("xz", s(0, np.uint8)), ("wz", s(0, np.uint8))],
             {"pads": [1, 1, 1, 1]}, opset=10),
        Spec("qlinear_conv_uint8_bias_per_channel", "QLinearConv",
             [("x", x), ("xs", s(0.03)), ("xz", s(128, np.uint8)), ("w", w), ("ws", scales("qw", 6)),
              ("wz", q("qwz", np.uint8, 6)), ("ys", s(0.5)), ("yz", s(100, np.uint8)),
              ("B", _rng("qb").integers(-3000, 3000, 6).astype(np.int32))],
             {"pads": [1, 1, 1, 1], "group": 2}, opset=10),
        Spec("qlinear_conv_int8", "QLinearConv",
             [("x", xi), ("xs", s(0.05)), ("xz", s(3, np.int8)), ("w", wi), ("ws", s(0.02)),
              ("wz", s(0, np.int8)), ("ys", s(0.1)), ("yz", s(-10, np.int8))], {"strides": [2, 1]}, opset=10,
             consts=("w", "ws", "wz")),
        Spec("qlinear_conv_float64_sums", "QLinearConv",
             [("x", big_x), ("xs", s(0.01)), ("xz", s(120, np.uint8)), ("w", big_w), ("ws", s(0.01)),
              ("wz", s(128, np.uint8)), ("ys", s(2.0)), ("yz", s(128, np.uint8))], opset=10),
    ]


def bitcast_specs():
    def bc(key, x, to, **kw):
        return Spec(f"bitcast_{key}", "BitCast", [("x", x)], {"to": to}, opset=26, reference="onnx", **kw)

    specials = np.array([0.0, -0.0, 1.5, -np.inf, np.inf, np.nan, 1e-45, 3.4e38], np.float32)
    return [
        bc("float32_to_int32_specials", specials, TensorProto.INT32),
        bc("int32_to_float32", np.array([[0, 1, -1], [2139095041, -8388608, 7]], np.int32),
           TensorProto.FLOAT),
        bc("float16_to_int16", np.array([1.0, -2.5, np.inf, 65504], np.float16), TensorProto.INT16),
        bc("uint64_to_float64", np.array([0, 1, 2**63, 2**64 - 1], np.uint64), TensorProto.DOUBLE),
        bc("bool_to_uint8", np.array([True, False, True]), TensorProto.UINT8),
        bc("int8_to_bool_01", np.array([0, 1, 1, 0], np.int8), TensorProto.BOOL),
        bc("uint16_to_float16_const", np.array([0x3C00, 0x7E00, 0x8001], np.uint16), TensorProto.FLOAT16,
           consts=("x",)),
        bc("scalar_uint32_to_int32", np.array(4294967295, np.uint32), TensorProto.INT32),
    ]


SPECS = (quantize_specs() + dequantize_specs() + dynamic_specs() + matmul_specs() + conv_specs()
         + bitcast_specs())


# ----------------------------------------------------------------------------- machinery


@dataclass
class Case:
    spec: Spec
    graph: gd.Graph
    expected: dict


def assert_same(got: dict, expected: dict, what: str) -> None:
    """Integers bit for bit, floats to a few units in the last place, NaN and signs included."""
    assert sorted(got) == sorted(expected), f"{what}: outputs {sorted(got)} != {sorted(expected)}"
    for name, want in expected.items():
        have = got[name]
        assert have.shape == want.shape and have.dtype == want.dtype, \
            f"{what} output '{name}': {have.dtype}{have.shape} != {want.dtype}{want.shape}"
        if want.dtype.kind == "f":
            np.testing.assert_allclose(have, want, rtol=4 * np.finfo(want.dtype).eps, atol=0, equal_nan=True,
                                       err_msg=f"{what} output '{name}'")
        else:
            np.testing.assert_array_equal(have, want, err_msg=f"{what} output '{name}'")


@pytest.fixture(scope="module")
def cases(import_models):
    graphs = import_models(SPECS)
    return {s.key: Case(s, graphs[s.key], s.expected()) for s in SPECS}


@pytest.fixture(scope="module")
def compiled(cases, compile_graphs):
    return compile_graphs({key: c.graph for key, c in cases.items()})


@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_interpreter_matches_reference(key, cases):
    case = cases[key]
    gd.verify(case.graph)
    outs = [str(o) for o in case.graph.outputs]
    got = dict(zip(outs, gd.run(case.graph, case.spec.feeds, outs)))
    assert_same(got, case.expected, f"{key} interpreter")


@pytest.mark.c
@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_compiled_matches_reference(key, cases, compiled):
    assert_same(compiled[key](**cases[key].spec.feeds), cases[key].expected, f"{key} compiled")


# ----------------------------------------------------------------------------- structure


def test_quantize_is_one_fused_loop(cases):
    """Divide, round, add, clip and cast of x fuse into a single elementwise step in C (the
    per-channel zero point is converted once, on its own)."""

    g = pipeline.optimize(cases["quantize_per_axis_int8"].graph)
    full = [n.op for n in g.nodes
            if n.op not in ("placeholder", "identity") and n.outputs[0].shape == (2, 3, 4)]
    assert full == ["fused"], full


def test_a_quantize_dequantize_pair_stays_in_float(tmp_path):
    """DequantizeLinear of a QuantizeLinear output reads the saturated float before the cast:
    no integer round trip in the fused loop (which then vectorizes), the same values as
    onnxruntime, bit for bit, halves and saturation included."""
    x = np.concatenate([np.arange(-12, 12) * 0.025, [-9.0, 9.0, 1e-7, -1e-7],
                        f32("qdq", 36, scale=3.0)]).astype(np.float32).reshape(4, 16)  # fmt: skip
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]  # fmt: skip
    scale = np.linspace(0.01, 0.05, 16).astype(np.float32)
    zero = np.arange(-8, 8).astype(np.int8)
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_empty_tensor_value_info("y")], inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "qdq.onnx"
    path.write_bytes(model.SerializeToString())
    g = gd.load_onnx(path)
    steps = [n for n in pipeline.optimize(g).nodes if n.op not in ("placeholder", "constant")]
    assert all(t.dtype == "float32" for n in steps for t in n.outputs), [(n.op, n.outputs) for n in steps]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    np.testing.assert_array_equal(np.asarray(gd.run(g, {"x": x}, [str(g.outputs[0])])[0]), want)


def test_small_convolutions_accumulate_in_float32(cases):
    def conv_dtype(key):
        (conv,) = [n for n in cases[key].graph.nodes if n.op == "conv"]
        return conv.outputs[0].dtype

    assert conv_dtype("conv_integer_pads_groups_per_channel") == "float32"  # 2 * 9 terms
    assert conv_dtype("conv_integer_float64_sums") == "float64"  # 32 * 9 terms > 258


def test_constant_inputs_are_folded_at_import(tmp_path):
    spec = Spec("folded", "QuantizeLinear", [("x", TIES), ("s", s(0.5)), ("z", s(3, np.int8))],
                consts=("x", "s", "z"), opset=13)
    path = tmp_path / "m.onnx"
    path.write_bytes(spec.model().SerializeToString())
    g = gd.load_onnx(path)
    assert {n.op for n in g.nodes} == {"constant"}
    (got,) = gd.run(g, {}, [str(g.outputs[0])])
    np.testing.assert_array_equal(got, spec.expected()["y"])


def dynamic_linear_model():
    """A linear layer as onnxruntime's dynamic quantization writes it: DynamicQuantizeLinear on
    the activations, MatMulInteger with uint8 weights, Cast to float and the two scales."""
    w = q("lw", np.uint8, 6, 4)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xs", "ws"], ["scale"]),
        helper.make_node("Mul", ["accf", "scale"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(s(131, np.uint8), "wz"),
             numpy_helper.from_array(s(0.02), "ws")]
    graph = helper.make_graph(nodes, "dynamic_linear",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def test_dynamically_quantized_linear_layer(tmp_path):
    model = dynamic_linear_model()
    path = tmp_path / "linear.onnx"
    path.write_bytes(model.SerializeToString())
    x = f32("lx", 3, 6)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    g = gd.load_onnx(path)
    (got,) = gd.run(g, {"x": x}, ["y"])
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.c
def test_dynamically_quantized_linear_layer_compiled(tmp_path):
    """The int32 accumulator, cast to float, is the graph output's buffer in C."""
    import codegen

    model = dynamic_linear_model()
    path = tmp_path / "linear.onnx"
    path.write_bytes(model.SerializeToString())
    x = f32("lx", 3, 6)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    try:
        codegen.backends.c.toolchain.find_cc()
    except FlowcError as e:
        pytest.skip(str(e))
    compiled = codegen.compile(gd.load_onnx(path))
    np.testing.assert_allclose(compiled(x=x)["y"], want, rtol=1e-6)


# ----------------------------------------------------------------------------- refusals


def _import(tmp_path, spec: Spec):
    path = tmp_path / "m.onnx"
    path.write_bytes(spec.model().SerializeToString())
    return gd.load_onnx(path)


x34 = f32("r", 3, 4)


def _int4_zero_point(tmp_path):
    """A model whose zero point is an INT4 initializer (flowc has no 4-bit dtype)."""
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    inits = [numpy_helper.from_array(s(0.1), "s"), helper.make_tensor("z", TensorProto.INT4, (), [1])]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.INT4, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    path = tmp_path / "int4.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_int4_zero_point_is_refused(tmp_path):
    with pytest.raises(gd.UnsupportedError, match="initializer 'z'.*not support"):
        gd.load_onnx(_int4_zero_point(tmp_path))


@pytest.mark.parametrize("spec, words", [
    (Spec("float8_out", "QuantizeLinear", [("x", x34), ("s", s(0.1))],
          {"output_dtype": TensorProto.FLOAT8E4M3FN}), "output_dtype=FLOAT8E4M3FN"),
    (Spec("int4_out", "QuantizeLinear", [("x", x34), ("s", s(0.1))], {"output_dtype": TensorProto.INT4}),
     "output_dtype=INT4"),
    (Spec("bf16_precision", "QuantizeLinear", [("x", x34), ("s", s(0.1))],
          {"precision": TensorProto.BFLOAT16}, opset=23), "precision=BFLOAT16"),
    (Spec("int32_zero_point", "QuantizeLinear", [("x", x34), ("s", s(0.1)), ("z", s(1, np.int32))]),
     "y_zero_point has dtype int32"),
    (Spec("mismatched_output_dtype", "QuantizeLinear", [("x", x34), ("s", s(0.1)), ("z", s(1, np.int8))],
          {"output_dtype": TensorProto.UINT8}), "differs"),
    (Spec("per_axis_length", "QuantizeLinear", [("x", x34), ("s", scales("pl", 3))], {"axis": 1}),
     "1-D tensor of length 4"),
    (Spec("axis_range", "DequantizeLinear", [("x", q("ar", np.int8, 3, 4)), ("s", scales("ar", 3))],
          {"axis": 2}), "axis 2 is out of range"),
    (Spec("blocked_shape", "DequantizeLinear", [("x", q("bs", np.int8, 3, 8)), ("s", scales("bs", 3, 3))],
          {"axis": 1, "block_size": 2}), "needs \\(3, 4\\)"),
    (Spec("dequantize_float_x", "DequantizeLinear", [("x", x34), ("s", s(0.1))]), "x has dtype float32"),
    (Spec("zero_point_type", "DequantizeLinear", [("x", q("zt", np.int8, 4)), ("s", s(0.1)),
                                                  ("z", s(1, np.uint8))]), "x_zero_point has dtype uint8"),
    (Spec("dynamic_float16", "DynamicQuantizeLinear", [("x", x34.astype(np.float16))],
          outputs=("y", "s", "z"), opset=11), "x has dtype float16"),
    (Spec("matmul_int16", "MatMulInteger", [("A", q("m16", np.int16, 2, 3)), ("B", q("m16b", np.int8, 3, 2))],
          opset=10), "A has dtype int16"),
    (Spec("qconv_x_scale_vector", "QLinearConv",
          [("x", q("qx", np.uint8, 1, 2, 3, 3)), ("xs", s([0.1, 0.2])), ("xz", s(0, np.uint8)),
           ("w", q("qw", np.uint8, 2, 2, 1, 1)), ("ws", s(0.1)), ("wz", s(0, np.uint8)), ("ys", s(0.1)),
           ("yz", s(0, np.uint8))], opset=10), "x_scale of shape \\(2,\\) must be one value"),
    (Spec("conv_integer_x_zp_vector", "ConvInteger",
          [("x", q("cv", np.uint8, 1, 2, 3, 3)), ("w", q("cvw", np.uint8, 2, 2, 1, 1)),
           ("xz", s([1, 2], np.uint8))], opset=10), "x_zero_point of shape \\(2,\\) must be one value"),
    (Spec("bitcast_widths", "BitCast", [("x", x34)], {"to": TensorProto.INT16}, opset=26),
     "bit widths must be equal"),
    (Spec("bitcast_bfloat16", "BitCast", [("x", q("bf", np.int16, 3))], {"to": TensorProto.BFLOAT16},
          opset=26), "BFLOAT16"),
])
def test_refused_with_a_reason(tmp_path, spec, words):
    with pytest.raises(FlowcError, match=words):
        _import(tmp_path, spec)


@pytest.mark.c
def test_an_integer_convolution_is_not_computed_by_winograd(tmp_path):
    """A QLinearConv deep enough for Winograd (16 channels, 3x3) but summing in float32 keeps an
    exact algorithm (its integer weights say so): the compiled C equals the interpreter bit for
    bit, and both are within 1 of onnxruntime."""
    import codegen

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, 16, 20, 20)).astype(np.uint8)
    w = rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("xs", np.float32(0.02)), ("xz", np.uint8(128)), ("w", w), ("ws", np.full(16, 0.003, np.float32)),
        ("wz", np.zeros(16, np.int8)), ("ys", np.float32(0.5)), ("yz", np.uint8(100)))]  # fmt: skip
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1])
    xi = helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)
    graph = helper.make_graph([node], "qconv", [xi], [helper.make_empty_tensor_value_info("y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (tmp_path / "qconv.onnx").write_bytes(model.SerializeToString())
    g = gd.load_onnx(tmp_path / "qconv.onnx")
    lowered = pipeline.run(g, pipeline.Options(), until="lower").results["lower"]
    assert "conv_winograd" not in [n.op for n in lowered.nodes]
    interp = np.asarray(gd.run(g, {"x": x}, [str(g.outputs[0])])[0])
    (have,) = codegen.compile(g, name="qconv_exact", cache=False)(x=x).values()
    np.testing.assert_array_equal(have, interp)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.abs(have.astype(np.int64) - session.run(None, {"x": x})[0]).max() <= 1
