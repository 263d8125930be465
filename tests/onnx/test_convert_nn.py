"""ONNX ops that flowc imports as compositions (graphdef/onnx/ops_nn.py), against onnxruntime.

Each case is a one-node ONNX model built with ``onnx.helper``: Attention (3-D and 4-D, GQA and
MQA, causal, bool and float masks, KV cache, nonpad_kv_seqlen, softcap, scale, every
qk_matmul_output_mode, float16, local windows), the normalizations, the losses, the composite
reductions across opsets, Shrink, Einsum, Lp pooling, CenterCropPad, Col2Im, AffineGrid,
RotaryEmbedding and SwiGLU. The imported graph runs in the interpreter and, compiled to C
(all cases in one library), through cffi; both are compared with onnxruntime, or with
onnx's reference evaluator for opsets onnxruntime 1.31 does not load (Attention 25, SwiGLU).
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

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
        np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int64): TensorProto.INT64,
        np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL}


@dataclass
class Spec:
    key: str
    op: str
    inputs: list  # (name, array or None for a missing optional input), in ONNX order
    attrs: dict = field(default_factory=dict)
    outputs: tuple = ("Y",)
    opset: int = 23
    consts: tuple = ()  # inputs given as initializers (shape-deciding values)
    out_types: tuple | None = None  # ONNX element types of the outputs; default: the first input's
    tol: float = 1e-4  # of max |expected|
    reference: object = "ort"  # "onnx" (onnx.reference) where onnxruntime refuses, or fn(**feeds) -> list

    def model(self):
        names = [n if a is not None else "" for n, a in self.inputs]
        while names and not names[-1]:
            names.pop()
        node = helper.make_node(self.op, names, list(self.outputs), **self.attrs)
        present = [(n, a) for n, a in self.inputs if a is not None]
        fed = [helper.make_tensor_value_info(n, ELEM[a.dtype], a.shape)
               for n, a in present if n not in self.consts]
        inits = [numpy_helper.from_array(a, n) for n, a in present if n in self.consts]
        types = self.out_types or (ELEM[present[0][1].dtype],) * len(self.outputs)
        outs = [helper.make_tensor_value_info(n, t, None) for n, t in zip(self.outputs, types) if n]
        graph = helper.make_graph([node], self.key, fed, outs, inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10  # onnxruntime 1.31 reads IR <= 11
        return model

    @property
    def feeds(self) -> dict:
        return {n: a for n, a in self.inputs if a is not None and n not in self.consts}

    def expected(self) -> dict:
        model = self.model()
        if callable(self.reference):
            got = self.reference(**self.feeds)
        elif self.reference == "onnx":
            from onnx.reference import ReferenceEvaluator

            got = ReferenceEvaluator(model).run(None, self.feeds)
        else:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            got = session.run(None, self.feeds)
        return {n: np.asarray(v) for n, v in zip([n for n in self.outputs if n], got)}


def _rng(key: str):
    return np.random.default_rng(zlib.crc32(key.encode()))


def f32(key, *shape, scale=1.0, dtype=np.float32):
    return (_rng(key + str(shape)).standard_normal(shape) * scale).astype(dtype)


def ints(key, hi, *shape, dtype=np.int64):
    return _rng(key + "i" + str(shape)).integers(0, hi, shape).astype(dtype)


# ----------------------------------------------------------------------------- the cases


def attention_specs():
    def qkv(key, q, k, v, dtype=np.float32):
        return [("Q", f32(key + "q", *q, dtype=dtype)), ("K", f32(key + "k", *k, dtype=dtype)),
                ("V", f32(key + "v", *v, dtype=dtype))]

    def att(key, inputs, attrs=None, outputs=("Y",), opset=23, **kw):
        return Spec(f"attention_{key}", "Attention", inputs, attrs or {}, outputs, opset, **kw)

    q4, k4 = (2, 3, 4, 8), (2, 3, 6, 8)
    fully = np.array([[True] * 6, [False] * 6, [True, False] * 3, [False] * 5 + [True]])  # row 1: nothing
    past = [("attn_mask", f32("pm", 4, 9)), ("past_key", f32("pk", 2, 3, 3, 8)),
            ("past_value", f32("pv", 2, 3, 3, 8))]
    fp16 = qkv("h", q4, k4, k4, np.float16)
    return [
        att("4d", qkv("a", q4, k4, k4)),
        att("4d_causal", qkv("b", q4, k4, k4), {"is_causal": 1}),
        att("4d_scale_softcap", qkv("c", q4, k4, (2, 3, 6, 5)), {"scale": 0.3, "softcap": 2.0}),
        att("3d_gqa", qkv("d", (2, 4, 48), (2, 6, 16), (2, 6, 24)), {"q_num_heads": 6, "kv_num_heads": 2}),
        att("3d_mqa_causal", qkv("e", (1, 5, 24), (1, 5, 8), (1, 5, 8)),
            {"q_num_heads": 3, "kv_num_heads": 1, "is_causal": 1}),
        att("bool_mask_fully_masked_row", qkv("f", q4, k4, k4) + [("attn_mask", fully)]),
        att("float_mask_4d", qkv("g", q4, k4, k4) + [("attn_mask", f32("gm", 2, 1, 4, 6))]),
        att("short_bool_mask_causal", qkv("g2", q4, k4, k4) + [("attn_mask", fully[:, :4])], {"is_causal": 1},
            reference="onnx"),  # onnxruntime wants a mask as long as K
        att("past_present_qk_bias", qkv("i", q4, k4, k4) + past, {"qk_matmul_output_mode": 2},
            outputs=("Y", "present_key", "present_value", "qk")),
        att("past_causal_qk_softcap", qkv("j", q4, k4, k4) + past, {"is_causal": 1, "softcap": 1.5,
                                                                     "qk_matmul_output_mode": 1},
            outputs=("Y", "present_key", "present_value", "qk")),
        att("qk_raw_with_softcap", qkv("k", q4, k4, k4), {"softcap": 1.0}, outputs=("Y", "", "", "qk")),
        # masked scores are -inf in mode 2 (onnxruntime writes the lowest float instead)
        att("qk_bias_fully_masked_fed", qkv("l2", q4, k4, k4) + [("attn_mask", fully)],
            {"qk_matmul_output_mode": 2}, outputs=("Y", "", "", "qk"), reference="onnx"),
        att("qk_bias_fully_masked_const", qkv("l2", q4, k4, k4) + [("attn_mask", fully)],
            {"qk_matmul_output_mode": 2}, outputs=("Y", "", "", "qk"), consts=("attn_mask",),
            reference="onnx"),
        att("qk_bias_float_mask_causal", qkv("l3", (1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8)) + [
            ("attn_mask", f32("l3m", 1, 2, 4, 6))], {"qk_matmul_output_mode": 2, "is_causal": 1},
            outputs=("Y", "", "", "qk"), reference="onnx"),
        att("qk_softmax_fully_masked", qkv("l", q4, k4, k4) + [("attn_mask", fully)],
            {"qk_matmul_output_mode": 3}, outputs=("Y", "", "", "qk")),
        att("3d_past_present", qkv("m", (2, 4, 24), (2, 2, 24), (2, 2, 12)) + [
            ("attn_mask", None), ("past_key", f32("mk", 2, 3, 5, 8)), ("past_value", f32("mv", 2, 3, 5, 4))],
            {"q_num_heads": 3, "kv_num_heads": 3}, outputs=("Y", "present_key", "present_value")),
        att("fp16_causal", fp16, {"is_causal": 1}, tol=2e-3),
        att("fp16_softmax_precision", fp16, {"softmax_precision": 1}, tol=2e-3),
        att("nonpad_causal", qkv("n", (3, 2, 2, 8), (3, 2, 6, 8), (3, 2, 6, 8)) + [
            ("attn_mask", None), ("past_key", None), ("past_value", None),
            ("nonpad_kv_seqlen", np.array([6, 3, 1], np.int64))], {"is_causal": 1}, opset=24),
        att("nonpad_float_mask", qkv("o", q4, k4, (2, 3, 6, 4)) + [
            ("attn_mask", f32("om", 4, 5)), ("past_key", None), ("past_value", None),
            ("nonpad_kv_seqlen", np.array([5, 2], np.int64))], opset=24, reference="onnx"),
        att("window_causal", qkv("p", q4, k4, k4), {"is_causal": 1, "left_window_size": 2}, opset=25,
            reference="onnx"),
        att("window_bidirectional_nonpad", qkv("r", q4, (2, 3, 7, 8), (2, 3, 7, 8)) + [
            ("attn_mask", fully[:, :1]), ("past_key", None), ("past_value", None),
            ("nonpad_kv_seqlen", np.array([7, 5], np.int64))],
            {"left_window_size": 1, "right_window_size": 2}, opset=25, reference="onnx"),
    ]


def _lrn(X, size=4, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN by its definition (onnxruntime takes odd sizes only; onnx.reference loops over N)."""
    sq = np.zeros_like(X)
    c = X.shape[1]
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c, i + int(np.ceil((size - 1) / 2)) + 1)
        sq[:, i] = (X[:, lo:hi] ** 2).sum(axis=1)
    return [(X / (bias + alpha / size * sq) ** beta).astype(X.dtype)]


def norm_specs():
    x3, x4 = f32("x3", 2, 3, 5), f32("x4", 2, 6, 3, 4)
    ln, gn, inorm = "LayerNormalization", "GroupNormalization", "InstanceNormalization"
    return [
        Spec("layernorm_all_outputs", ln, [("X", x3), ("S", f32("s", 3, 5)), ("B", f32("b", 5))],
             {"axis": 1, "epsilon": 1e-3}, ("Y", "Mean", "InvStdDev"), 17),
        Spec("layernorm_y_only", ln, [("X", x3), ("S", f32("s", 5))], {"axis": -1}, opset=17),
        Spec("layernorm_mean_only_fp16", ln,
             [("X", x3.astype(np.float16)), ("S", f32("s", 5, dtype=np.float16))], {}, ("Y", "Mean"), 17,
             out_types=(TensorProto.FLOAT16, TensorProto.FLOAT), tol=2e-3),
        Spec("rmsnorm_axis2", "RMSNormalization", [("X", x4), ("S", f32("rs", 3, 4))],
             {"axis": 2, "epsilon": 0.1}),
        Spec("rmsnorm_default", "RMSNormalization", [("X", x3), ("S", f32("rs", 5))]),
        Spec("groupnorm_21", gn, [("X", x4), ("S", f32("gs", 6)), ("B", f32("gb", 6))],
             {"num_groups": 3, "epsilon": 1e-2}, opset=21),
        Spec("groupnorm_18_per_group", gn, [("X", x4), ("S", f32("gs", 3)), ("B", f32("gb", 3))],
             {"num_groups": 3}, opset=18),
        Spec("groupnorm_21_one_group", gn, [("X", x3), ("S", f32("gs", 3)), ("B", f32("gb", 3))],
             {"num_groups": 1}, opset=21),
        Spec("instancenorm_4d", inorm, [("X", x4), ("S", f32("is", 6)), ("B", f32("ib", 6))],
             {"epsilon": 1e-3}, opset=13),
        Spec("instancenorm_3d", inorm, [("X", x3), ("S", f32("is", 3)), ("B", f32("ib", 3))], opset=13),
        Spec("mvn_default", "MeanVarianceNormalization", [("X", x4)], opset=13),
        Spec("mvn_axes", "MeanVarianceNormalization", [("X", x3)], {"axes": [1]}, opset=13),
        Spec("lpnorm_p2_zero_row", "LpNormalization",
             [("X", np.concatenate([x3, np.zeros((2, 3, 1), np.float32)], 2))], {"axis": -1}, opset=13),
        Spec("lpnorm_p1_axis0", "LpNormalization", [("X", x3)], {"axis": 0, "p": 1}, opset=13),
        Spec("lrn_odd", "LRN", [("X", x4)], {"size": 3, "alpha": 0.1, "beta": 0.6, "bias": 1.5}, opset=13),
        Spec("lrn_even_5d", "LRN", [("X", f32("x5", 1, 5, 2, 3, 2))], {"size": 4}, opset=13, reference=_lrn),
    ]


def loss_specs():
    x, x4 = f32("nx", 4, 5), f32("nx4", 2, 5, 3, 2)
    t4 = ints("nt4", 5, 2, 3, 2)
    t4[1, 0, 0] = 2
    neg = t4.copy()  # ignored targets outside [0, C); only valid where ignore_index names them
    neg[0, 1, 1] = neg[1, 2, 0] = -3
    w = np.abs(f32("nw", 5)) + 0.1
    return [
        Spec("nll_mean", "NegativeLogLikelihoodLoss", [("X", x), ("T", ints("nt", 5, 4))], opset=13),
        Spec("nll_sum_weight_ii", "NegativeLogLikelihoodLoss", [("X", x4), ("T", t4), ("W", w)],
             {"reduction": "sum", "ignore_index": 2}, opset=13),
        Spec("nll_mean_weight_ii", "NegativeLogLikelihoodLoss", [("X", x4), ("T", neg), ("W", w)],
             {"ignore_index": -3}, opset=13),
        Spec("nll_mean_ii_no_weight", "NegativeLogLikelihoodLoss", [("X", x4), ("T", t4)],
             {"ignore_index": 2}, opset=13),
        Spec("nll_none_int32", "NegativeLogLikelihoodLoss",
             [("X", x), ("T", ints("nt", 5, 4, dtype=np.int32))], {"reduction": "none"}, opset=13),
        Spec("sce_mean", "SoftmaxCrossEntropyLoss", [("X", x), ("T", ints("st", 5, 4))], opset=13),
        Spec("sce_none_log_prob", "SoftmaxCrossEntropyLoss", [("X", x4), ("T", neg)],
             {"reduction": "none", "ignore_index": -3}, ("loss", "log_prob"), 13),
        Spec("sce_mean_weight_ii_log_prob", "SoftmaxCrossEntropyLoss", [("X", x4), ("T", t4), ("W", w)],
             {"ignore_index": 2}, ("loss", "log_prob"), 13),
    ]


def reduce_specs():
    x = f32("rx", 3, 4, 5)
    pos = np.abs(x) + 0.1
    spiky = x.copy()
    spiky[0, :, 1] = -np.inf
    spiky[1, 2, 3] = 80.0  # exp would overflow without the shift
    axes = ("axes", np.array([0, -1], np.int64))
    empty = ("axes", np.zeros(0, np.int64))
    return [
        Spec("reduce_l1_13", "ReduceL1", [("X", x)], {"axes": [1], "keepdims": 0}, opset=13),
        Spec("reduce_l1_18", "ReduceL1", [("X", x), axes], opset=18, consts=("axes",)),
        Spec("reduce_l2_18_all", "ReduceL2", [("X", x)], {"keepdims": 0}, opset=18),
        Spec("reduce_l2_18_noop", "ReduceL2", [("X", x), empty], {"noop_with_empty_axes": 1}, opset=18,
             consts=("axes",)),
        Spec("reduce_sum_square_int32", "ReduceSumSquare", [("X", ints("ri", 9, 3, 4, dtype=np.int32))],
             {"axes": [0]}, opset=13),
        Spec("reduce_sum_square_18", "ReduceSumSquare", [("X", x), axes], {"keepdims": 0}, opset=18,
             consts=("axes",)),
        Spec("reduce_log_sum_11", "ReduceLogSum", [("X", pos)], {"axes": [2, 0]}, opset=11),
        Spec("reduce_log_sum_18_noop", "ReduceLogSum", [("X", pos)], {"noop_with_empty_axes": 1}, opset=18),
        Spec("reduce_log_sum_exp_13", "ReduceLogSumExp", [("X", spiky)], {"axes": [2]}, opset=13),
        Spec("reduce_log_sum_exp_18", "ReduceLogSumExp", [("X", spiky), axes], {"keepdims": 0}, opset=18,
             consts=("axes",)),
    ]


def misc_specs():
    x = f32("mx", 2, 3, 5, 6)
    image = f32("ci", 2, 3 * 4, 12)  # Col2Im: C=3, block 2x2, 12 blocks
    return [
        Spec("shrink_soft", "Shrink", [("X", f32("sh", 4, 5))], {"lambd": 0.5, "bias": 0.3}, opset=9),
        Spec("shrink_int", "Shrink", [("X", np.arange(-4, 5, dtype=np.int32))], {"lambd": 1.5, "bias": 1.0},
             opset=9),
        Spec("lppool_p3_pads", "LpPool", [("X", x)], {"kernel_shape": [3, 2], "p": 3, "pads": [1, 0, 1, 1],
                                                        "strides": [2, 1]}, opset=18),
        Spec("lppool_p1_same", "LpPool", [("X", x)],
             {"kernel_shape": [2, 2], "p": 1, "auto_pad": "SAME_UPPER"}, opset=11),
        Spec("lppool_1d_ceil_overhang", "LpPool", [("X", f32("l1", 1, 2, 8))],
             {"kernel_shape": [3], "strides": [2], "ceil_mode": 1}, opset=18),
        Spec("global_lppool_p2", "GlobalLpPool", [("X", x)], opset=13),
        Spec("global_lppool_p3", "GlobalLpPool", [("X", f32("g3", 2, 3, 4))], {"p": 3}, opset=13),
        Spec("center_crop_pad", "CenterCropPad", [("X", x), ("shape", np.array([4, 9], np.int64))],
             {"axes": [-2, 3]}, opset=18, consts=("shape",)),
        Spec("center_crop_pad_all", "CenterCropPad",
             [("X", f32("cc", 5, 2, 3)), ("shape", np.array([2, 4, 3]))], opset=18, consts=("shape",)),
        Spec("col2im_strides_pads", "Col2Im", [("X", image), ("image_shape", np.array([5, 8])),
                                                ("block_shape", np.array([2, 2]))],
             {"strides": [2, 2], "pads": [0, 1, 1, 0], "dilations": [1, 2]}, opset=18,
             consts=("image_shape", "block_shape")),
        Spec("col2im_3d", "Col2Im", [("X", f32("c3", 1, 2 * 8, 24)), ("image_shape", np.array([3, 4, 5])),
                                      ("block_shape", np.array([2, 2, 2]))], opset=18,
             consts=("image_shape", "block_shape")),
        Spec("affine_grid_2d", "AffineGrid",
             [("theta", f32("t2", 2, 2, 3)), ("size", np.array([2, 1, 3, 4]))], opset=20, consts=("size",)),
        Spec("affine_grid_3d_align", "AffineGrid", [("theta", f32("t3", 1, 3, 4)),
                                                     ("size", np.array([1, 2, 2, 3, 4]))],
             {"align_corners": 1}, opset=20, consts=("size",)),
        Spec("rotary_4d_positions", "RotaryEmbedding", [
            ("X", f32("re", 2, 3, 4, 8)), ("cos", f32("co", 10, 4)), ("sin", f32("si", 10, 4)),
            ("pos", ints("po", 10, 2, 4))]),
        Spec("rotary_3d_interleaved_partial", "RotaryEmbedding",
             [("X", f32("r3", 2, 4, 24)), ("cos", f32("c3", 2, 4, 2)), ("sin", f32("s3", 2, 4, 2))],
             {"interleaved": 1, "num_heads": 3, "rotary_embedding_dim": 4}),
        Spec("rotary_4d_partial", "RotaryEmbedding", [
            ("X", f32("r4", 1, 2, 3, 8)), ("cos", f32("c4", 5, 3)), ("sin", f32("s4", 5, 3)),
            ("pos", np.array([[4, 0, 2]]))], {"rotary_embedding_dim": 6}),
        Spec("swiglu_alpha", "SwiGLU", [("A", f32("sa", 3, 4)), ("B", f32("sb", 3, 4))], {"alpha": 1.7},
             opset=28, reference="onnx"),
    ]


EINSUM = [
    ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
    ("batch_matmul", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("implicit", "ij,jk", [(3, 4), (4, 2)]),
    ("transpose", "ijk->kij", [(2, 3, 4)]),
    ("sum", "ij->i", [(3, 4)]),
    ("total", "ij->", [(3, 4)]),
    ("trace", "ii", [(4, 4)]),
    ("batch_diagonal", "...ii->...i", [(2, 3, 3)]),
    ("inner", "i,i", [(5,), (5,)]),
    ("outer", "i,j->ij", [(3,), (4,)]),
    ("broadcast_ellipsis", "...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("three_operands", "ij,jk,kl->li", [(2, 3), (3, 4), (4, 5)]),
    ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("summed_label", "ijk,jl->il", [(2, 3, 4), (3, 5)]),
]


def einsum_specs():
    # onnxruntime refuses ellipsis dimensions of size 1 against larger ones; numpy broadcasts them
    return [Spec(f"einsum_{key}", "Einsum", [(f"x{i}", f32(key + str(i), *s)) for i, s in enumerate(shapes)],
                 {"equation": eq}, opset=12, reference="onnx" if "broadcast" in key else "ort")
            for key, eq, shapes in EINSUM]


SPECS = attention_specs() + norm_specs() + loss_specs() + reduce_specs() + misc_specs() + einsum_specs()


# ----------------------------------------------------------------------------- machinery


@dataclass
class Case:
    spec: Spec
    graph: gd.Graph
    expected: dict


def assert_close(got: dict, expected: dict, tol: float, what: str) -> None:
    want_names = sorted(n for n in expected if n)
    assert sorted(got) == want_names, f"{what}: outputs {sorted(got)} != {want_names}"
    for name in want_names:
        want, have = expected[name], got[name]
        assert have.shape == want.shape and have.dtype == want.dtype, \
            f"{what} output '{name}': {have.dtype}{have.shape} != {want.dtype}{want.shape}"
        assert np.array_equal(np.isnan(have), np.isnan(want)), f"{what} output '{name}': NaNs differ"
        assert np.array_equal(np.isinf(have), np.isinf(want)), f"{what} output '{name}': infinities differ"
        finite = np.isfinite(want)
        if not finite.any():
            continue
        scale = max(float(np.abs(want[finite].astype(np.float64)).max()), 1e-6)
        err = float(np.abs(have[finite].astype(np.float64) - want[finite]).max())
        assert err <= tol * scale, f"{what} output '{name}': max abs error {err:.3g} (scale {scale:.3g})"


@pytest.fixture(scope="module")
def cases(import_models):
    graphs = import_models(SPECS)
    return {s.key: Case(s, graphs[s.key], {n: v for n, v in s.expected().items() if n}) for s in SPECS}


@pytest.fixture(scope="module")
def compiled(cases, compile_graphs):
    return compile_graphs({key: c.graph for key, c in cases.items()})


@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_interpreter_matches_reference(key, cases):
    case = cases[key]
    gd.verify(case.graph)
    outs = [str(o) for o in case.graph.outputs]
    got = dict(zip(outs, gd.run(case.graph, case.spec.feeds, outs)))
    assert_close(got, case.expected, case.spec.tol, f"{key} interpreter")


@pytest.mark.c
@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_compiled_matches_reference(key, cases, compiled):
    assert_close(compiled[key](**cases[key].spec.feeds), cases[key].expected, cases[key].spec.tol,
                 f"{key} compiled")


# ----------------------------------------------------------------------------- structure


def test_gqa_shares_key_heads_without_copies(cases):
    """Grouped query heads fold into the query rows: K and V are never repeated or expanded."""
    g = cases["attention_3d_gqa"].graph
    assert not [n for n in g.nodes if n.op in ("expand", "tile", "concat")]
    assert sum(n.op == "matmul" for n in g.nodes) == 2


def test_static_masks_are_constants(cases):
    """Causal and window masks are built at import time: no comparisons in the graph."""
    for key in ("attention_4d_causal", "attention_window_causal"):
        ops = {n.op for n in cases[key].graph.nodes}
        assert not ops & {"less", "less_equal", "greater", "greater_equal", "equal"}, key


def test_layer_norm_y_only_keeps_the_kernel(cases):
    ops = [n.op for n in cases["layernorm_y_only"].graph.nodes]
    assert ops.count("layer_norm") == 1 and not {"reduce_mean", "sqrt"} & set(ops)


# ----------------------------------------------------------------------------- refusals


def _import(tmp_path, spec: Spec):
    path = tmp_path / "m.onnx"
    path.write_bytes(spec.model().SerializeToString())
    return gd.load_onnx(path)


q4 = f32("rq", 1, 2, 3, 4)


@pytest.mark.parametrize("spec, words", [
    (Spec("att_no_heads", "Attention", [("Q", f32("a", 1, 3, 8)), ("K", f32("b", 1, 3, 8)),
                                          ("V", f32("c", 1, 3, 8))]), "q_num_heads"),
    (Spec("att_bf16_softmax", "Attention", [("Q", q4), ("K", q4), ("V", q4)], {"softmax_precision": 16}),
     "softmax_precision=16"),
    (Spec("att_past_alone", "Attention", [("Q", q4), ("K", q4), ("V", q4), ("m", None), ("pk", q4)]),
     "together"),
    (Spec("att_heads", "Attention", [("Q", f32("d", 1, 3, 3, 4)), ("K", q4), ("V", q4)]), "multiple"),
    (Spec("einsum_bad", "Einsum", [("x", f32("e", 2, 3))], {"equation": "ij->k"}, opset=12), "names one"),
    (Spec("einsum_rank", "Einsum", [("x", f32("e", 2, 3))], {"equation": "ijk->i"}, opset=12), "rank"),
    (Spec("einsum_sizes", "Einsum", [("x", f32("e", 2, 3)), ("y", f32("f", 4, 3))], {"equation": "ij,ij->i"},
          opset=12), "sizes"),
    (Spec("lpnorm_p3", "LpNormalization", [("X", q4)], {"p": 3}, opset=13), "p=3"),
    (Spec("groupnorm_groups", "GroupNormalization", [("X", q4), ("S", f32("s", 2)), ("B", f32("b", 2))],
          {"num_groups": 3}, opset=21), "num_groups"),
    (Spec("nll_reduction", "NegativeLogLikelihoodLoss", [("X", f32("x", 2, 3)), ("T", ints("t", 3, 2))],
          {"reduction": "max"}, opset=13), "reduction"),
    (Spec("rotary_dim", "RotaryEmbedding", [("X", q4), ("cos", f32("c", 3, 3)), ("sin", f32("s", 3, 3))],
          {"rotary_embedding_dim": 6}), "rotary_embedding_dim"),
    (Spec("layernorm_stash", "LayerNormalization", [("X", q4), ("S", f32("s", 4))], {"stash_type": 16},
          ("Y", "Mean"), 17), "stash_type"),
])
def test_refused_with_a_reason(tmp_path, spec, words):
    with pytest.raises(FlowcError, match=words):
        _import(tmp_path, spec)
