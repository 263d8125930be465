"""ONNX signal, optimizer, GridSample and Resize converters (graphdef/onnx/ops_signal.py),
against onnxruntime or onnx's reference evaluator.

Each case is a one-node ONNX model built with ``onnx.helper``: Resize in every mode (cubic
with its coefficient and exclude_outside, antialias, tf_crop_and_resize, axes, the aspect
ratio policies, integer images), DFT (real and complex, every axis, dft_length cut and
padded, inverse, one-sided, IRFFT) and STFT (windows given as data or constants), the window
functions and MelWeightMatrix, the preview-training optimizers Momentum, Adagrad and Adam
(one and several tensors, first step T = 0 and later ones), and GridSample (nearest, linear,
cubic; zeros, border and reflection padding; corners aligned or not; 1-D to 3-D; grids
reaching far outside the input). The imported graph runs in the interpreter and, compiled
to C (all cases in one library), through cffi.
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

ELEM = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.bool_): TensorProto.BOOL,
}
TRAINING = "ai.onnx.preview.training"


@dataclass
class Spec:
    key: str
    op: str
    inputs: list  # (name, array or None for a missing optional input), in ONNX order
    attrs: dict = field(default_factory=dict)
    outputs: tuple = ("Y",)
    opset: int = 20
    consts: tuple = ()  # inputs given as initializers (shape-deciding values)
    out_types: tuple | None = None  # ONNX element types of the outputs; default: the first input's
    tol: float = 1e-4  # of max |expected|
    atol: float = 0.0
    reference: str = "ort"  # or "onnx" (onnx.reference) where onnxruntime refuses or differs
    domain: str = ""

    def model(self):
        names = [n if a is not None else "" for n, a in self.inputs]
        while names and not names[-1]:
            names.pop()
        node = helper.make_node(self.op, names, list(self.outputs), domain=self.domain or None, **self.attrs)
        present = [(n, a) for n, a in self.inputs if a is not None]
        fed = [
            helper.make_tensor_value_info(n, ELEM[a.dtype], a.shape)
            for n, a in present
            if n not in self.consts
        ]
        inits = [numpy_helper.from_array(a, n) for n, a in present if n in self.consts]
        types = self.out_types or (ELEM[present[0][1].dtype],) * len(self.outputs)
        outs = [helper.make_tensor_value_info(n, t, None) for n, t in zip(self.outputs, types)]
        graph = helper.make_graph([node], self.key, fed, outs, inits)
        opsets = [helper.make_opsetid("", self.opset)]
        if self.domain:
            opsets.append(helper.make_opsetid(self.domain, 1))
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 10  # onnxruntime 1.31 reads IR <= 11
        return model

    @property
    def feeds(self) -> dict:
        return {n: a for n, a in self.inputs if a is not None and n not in self.consts}

    def expected(self) -> dict:
        model = self.model()
        if self.reference == "onnx":
            from onnx.reference import ReferenceEvaluator

            got = ReferenceEvaluator(model).run(None, self.feeds)
            if self.out_types:  # the reference's Adam returns float64 for one tensor
                got = [
                    np.asarray(v).astype(helper.tensor_dtype_to_np_dtype(t))
                    for v, t in zip(got, self.out_types)
                ]
        else:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            got = session.run(None, self.feeds)
        return {n: np.asarray(v) for n, v in zip(self.outputs, got)}


def _rng(key: str):
    return np.random.default_rng(zlib.crc32(key.encode()))


def f32(key, *shape, scale=1.0, dtype=np.float32):
    return (_rng(key + str(shape)).standard_normal(shape) * scale).astype(dtype)


def i64(*values):
    return np.array(values, np.int64)


def scalar(v, dtype=np.int64):
    return np.array(v, dtype)


# ----------------------------------------------------------------------------- the cases


def resize_specs():
    out = []
    x = f32("rz", 1, 2, 5, 6)

    def rs(key, x, scales=None, sizes=None, roi=None, opset=19, ref="ort", tol=1e-4, **attrs):
        inputs = [
            ("X", x),
            ("roi", roi),
            ("scales", None if scales is None else np.float32(scales)),
            ("sizes", None if sizes is None else np.int64(sizes)),
        ]
        consts = ("roi", "scales", "sizes")
        out.append(
            Spec(f"resize_{key}", "Resize", inputs, attrs, opset=opset, consts=consts, reference=ref, tol=tol)
        )

    for ctm in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
        rs(f"cubic_up_{ctm}", x, scales=[1, 1, 2, 1.5], mode="cubic", coordinate_transformation_mode=ctm)
        rs(f"cubic_down_{ctm}", x, sizes=[1, 2, 3, 4], mode="cubic", coordinate_transformation_mode=ctm)
    rs("cubic_a05_exclude", x, scales=[1, 1, 1.6, 0.5], mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
    rs("cubic_opset11", x, scales=[1, 1, 2, 2], mode="cubic", opset=11, roi=np.float32([]))
    rs("cubic_axes", x, sizes=[7, 4], mode="cubic", axes=[3, 2])
    rs("cubic_not_larger", x, sizes=[8, 8], mode="cubic", axes=[2, 3], keep_aspect_ratio_policy="not_larger")
    rs(
        "cubic_not_smaller",
        x,
        sizes=[3, 3],
        mode="cubic",
        axes=[2, 3],
        keep_aspect_ratio_policy="not_smaller",
    )
    big = f32("rzb", 1, 1, 13, 17)
    for mode in ("linear", "cubic"):
        rs(f"{mode}_antialias_scales", big, scales=[1, 1, 0.4, 0.3], mode=mode, antialias=1)
        rs(f"{mode}_antialias_sizes", big, sizes=[1, 1, 5, 6], mode=mode, antialias=1)
        rs(f"{mode}_antialias_up", big, sizes=[1, 1, 20, 9], mode=mode, antialias=1)  # no filter up
        rs(
            f"{mode}_antialias_exclude",
            big,
            scales=[1, 1, 0.5, 0.35],
            mode=mode,
            antialias=1,
            exclude_outside=1,
            ref="onnx",
        )
    for mode in ("nearest", "linear", "cubic"):
        rs(
            f"crop_{mode}",
            x,
            sizes=[1, 2, 4, 5],
            roi=np.float32([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3]),
            mode=mode,
            coordinate_transformation_mode="tf_crop_and_resize",
            extrapolation_value=-7.0,
        )
    rs(
        "crop_axes",
        x,
        sizes=[3, 4],
        roi=np.float32([0.1, 0.4, 0.8, 1.2]),
        axes=[3, 2],
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
    )
    rs("cubic_f64", x.astype(np.float64), scales=[1, 1, 1.5, 0.75], mode="cubic", ref="onnx")
    rs("cubic_f16", x.astype(np.float16), scales=[1, 1, 2, 2], mode="cubic", tol=3e-3)
    img = _rng("img").integers(0, 256, (1, 3, 6, 5)).astype(np.uint8)
    rs("cubic_uint8", img, scales=[1, 1, 1.7, 2.2], mode="cubic", tol=0.5 / 255, ref="onnx")
    rs(
        "linear_uint8_antialias",
        img,
        sizes=[1, 3, 3, 2],
        mode="linear",
        antialias=1,
        tol=0.5 / 255,
        ref="onnx",
    )
    rs("nearest_int32", img.astype(np.int32), scales=[1, 1, 2, 0.6], mode="nearest")
    return out


def dft_specs():
    out = []
    real = f32("dr", 2, 6, 5, 1)
    cplx = f32("dc", 2, 6, 5, 2)
    for key, x, attrs, length, opset in [
        ("real_axis1", real, {"axis": 1}, None, 17),
        ("real_axis2", real, {"axis": 2}, None, 17),
        ("real_neg", real, {"axis": -2}, None, 17),
        ("complex", cplx, {"axis": 1}, None, 17),
        ("pad", cplx, {"axis": 2}, 8, 17),
        ("cut", real, {"axis": 1}, 4, 17),
        ("inverse", cplx, {"axis": 1, "inverse": 1}, None, 17),
        ("inverse_pad", cplx, {"axis": 2, "inverse": 1}, 7, 17),
        ("rfft", real, {"axis": 1, "onesided": 1}, None, 17),
        ("rfft_odd", real, {"axis": 2, "onesided": 1}, None, 17),
        ("rfft_cut", real, {"axis": 1, "onesided": 1}, 5, 17),
        ("irfft", cplx, {"axis": 1, "inverse": 1, "onesided": 1}, None, 17),
        ("irfft_odd", cplx, {"axis": 2, "inverse": 1, "onesided": 1}, 9, 17),
        ("complex_onesided", cplx, {"axis": 1, "onesided": 1}, None, 17),
    ]:
        inputs = [("x", x), ("dft_length", None if length is None else scalar(length))]
        out.append(
            Spec(f"dft17_{key}", "DFT", inputs, attrs, opset=opset, consts=("dft_length",), reference="onnx")
        )
    for key, x, axis, attrs, length in [
        ("default_axis", cplx, None, {}, None),
        ("axis0", real, 0, {}, None),
        ("axis_neg", cplx, -3, {"inverse": 1}, 8),
        ("rfft", real, 2, {"onesided": 1}, 6),
        ("irfft", cplx, 1, {"inverse": 1, "onesided": 1}, None),
    ]:
        inputs = [
            ("x", x),
            ("dft_length", None if length is None else scalar(length)),
            ("axis", None if axis is None else scalar(axis)),
        ]
        out.append(
            Spec(f"dft20_{key}", "DFT", inputs, attrs, consts=("dft_length", "axis"), reference="onnx")
        )
    out.append(
        Spec(
            "dft20_f64",
            "DFT",
            [("x", cplx.astype(np.float64)), ("dft_length", None), ("axis", scalar(1))],
            {"inverse": 1},
            consts=("axis",),
            reference="onnx",
        )
    )
    sig = f32("sig", 2, 40, 1)
    csig = f32("csig", 1, 30, 2)
    hann = (np.sin(np.arange(12) * np.pi / 12) ** 2).astype(np.float32)
    for key, x, step, window, length, attrs, consts in [
        ("plain", sig, 5, None, 16, {}, ()),
        ("window_input", sig, 4, hann, None, {}, ()),
        ("window_const", sig, 7, hann, 12, {}, ("window",)),
        ("twosided", sig, 6, hann, None, {"onesided": 0}, ("window",)),
        ("complex", csig, 3, hann[:10] + 0.5, None, {"onesided": 0}, ()),
    ]:
        inputs = [
            ("signal", x),
            ("frame_step", scalar(step)),
            ("window", window),
            ("frame_length", None if length is None else scalar(length)),
        ]
        out.append(
            Spec(
                f"stft_{key}",
                "STFT",
                inputs,
                attrs,
                opset=17,
                consts=("frame_step", "frame_length") + consts,
                reference="onnx",
            )
        )
    return out


def window_specs():
    out = []
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        for size in (1, 10, 11):
            for periodic in (0, 1):
                out.append(
                    Spec(
                        f"{op}_{size}_{periodic}",
                        op,
                        [("size", scalar(size, np.int32))],
                        {"periodic": periodic},
                        opset=17,
                        consts=("size",),
                        out_types=(TensorProto.FLOAT,),
                        tol=1e-6,
                        atol=1e-7,
                    )
                )
        out.append(
            Spec(
                f"{op}_double",
                op,
                [("size", scalar(16))],
                {"output_datatype": TensorProto.DOUBLE},
                opset=17,
                consts=("size",),
                out_types=(TensorProto.DOUBLE,),
                tol=1e-6,
            )
        )
    for bins, dft, rate, lo, hi in [(8, 64, 8000, 0.0, 4000.0), (5, 32, 16000, 100.0, 6000.0)]:
        out.append(
            Spec(
                f"mel_{bins}_{dft}",
                "MelWeightMatrix",
                [
                    ("n", scalar(bins)),
                    ("d", scalar(dft)),
                    ("r", scalar(rate)),
                    ("lo", np.float32(lo)),
                    ("hi", np.float32(hi)),
                ],
                opset=17,
                consts=("n", "d", "r", "lo", "hi"),
                out_types=(TensorProto.FLOAT,),
                tol=1e-6,
                reference="onnx",
            )
        )
    return out


def optimizer_specs():
    out = []
    r = np.float32(0.1)
    x1, x2 = f32("x1", 3, 2), f32("x2", 4)
    g1, g2 = f32("g1", 3, 2), f32("g2", 4)
    v1, v2 = f32("v1", 3, 2), f32("v2", 4)
    h1, h2 = np.abs(f32("h1", 3, 2)), np.abs(f32("h2", 4))

    def opt(key, op, tensors, outs, t, **attrs):
        inputs = [("R", r), ("T", scalar(t))] + tensors
        out.append(
            Spec(
                f"{op}_{key}",
                op,
                inputs,
                attrs,
                outputs=outs,
                domain=TRAINING,
                reference="onnx",
                out_types=(TensorProto.FLOAT,) * len(outs),
                tol=1e-5,
            )
        )

    for t in (0, 3):
        for mode in ("standard", "nesterov"):
            opt(
                f"{mode}_t{t}",
                "Momentum",
                [("X", x1), ("G", g1), ("V", v1)],
                ("Xn", "Vn"),
                t,
                alpha=0.9,
                beta=0.5,
                norm_coefficient=0.01,
                mode=mode,
            )
        opt(
            f"t{t}",
            "Adagrad",
            [("X", x1), ("G", g1), ("H", h1)],
            ("Xn", "Hn"),
            t,
            decay_factor=0.1,
            epsilon=1e-5,
            norm_coefficient=0.01,
        )
        opt(
            f"t{t}",
            "Adam",
            [("X", x1), ("G", g1), ("V", v1), ("H", h1)],
            ("Xn", "Vn", "Hn"),
            t,
            alpha=0.9,
            beta=0.99,
            epsilon=1e-4,
            norm_coefficient=0.01,
            norm_coefficient_post=0.05,
        )
    opt(
        "multiple",
        "Momentum",
        [("X1", x1), ("X2", x2), ("G1", g1), ("G2", g2), ("V1", v1), ("V2", v2)],
        ("X1n", "X2n", "V1n", "V2n"),
        2,
        alpha=0.9,
        beta=0.5,
        norm_coefficient=0.0,
        mode="standard",
    )
    opt(
        "multiple",
        "Adagrad",
        [("X1", x1), ("X2", x2), ("G1", g1), ("G2", g2), ("H1", h1), ("H2", h2)],
        ("X1n", "X2n", "H1n", "H2n"),
        1,
    )
    opt(
        "multiple",
        "Adam",
        [("X1", x1), ("X2", x2), ("G1", g1), ("G2", g2), ("V1", v1), ("V2", v2), ("H1", h1), ("H2", h2)],
        ("X1n", "X2n", "V1n", "V2n", "H1n", "H2n"),
        5,
    )
    return out


def grid_specs():
    out = []
    x2 = f32("gx", 2, 3, 4, 5)
    grid2 = f32("gg", 2, 3, 6, 2, scale=0.8)  # some points outside [-1, 1]
    far = f32("gf", 2, 2, 3, 2, scale=3.0)  # reflected more than once
    for mode in ("nearest", "linear", "cubic"):
        for padding in ("zeros", "border", "reflection"):
            for align in (0, 1):
                # onnxruntime follows PyTorch for cubic border/reflection (it pads each tap, not
                # the sampling point first): the ONNX reference is the definition
                ref = "onnx" if mode == "cubic" and padding != "zeros" else "ort"
                out.append(
                    Spec(
                        f"grid_{mode}_{padding}_{align}",
                        "GridSample",
                        [("X", x2), ("grid", grid2)],
                        {"mode": mode, "padding_mode": padding, "align_corners": align},
                        reference=ref,
                    )
                )
            out.append(
                Spec(
                    f"grid_far_{mode}_{padding}",
                    "GridSample",
                    [("X", x2), ("grid", far)],
                    {"mode": mode, "padding_mode": padding},
                    reference="onnx",
                )
            )
    # opset 16 spells the modes bilinear and bicubic
    for mode in ("bilinear", "bicubic", "nearest"):
        out.append(
            Spec(f"grid16_{mode}", "GridSample", [("X", x2), ("grid", grid2)], {"mode": mode}, opset=16)
        )
    x3 = f32("gx3", 1, 2, 3, 4, 2)
    grid3 = f32("gg3", 1, 2, 3, 2, 3, scale=0.8)
    for mode in ("nearest", "linear", "cubic"):
        for padding in ("zeros", "border", "reflection"):
            out.append(
                Spec(
                    f"grid3d_{mode}_{padding}",
                    "GridSample",
                    [("X", x3), ("grid", grid3)],
                    {"mode": mode, "padding_mode": padding, "align_corners": 1},
                    reference="onnx",
                )
            )
    x1 = f32("gx1", 1, 2, 5)
    grid1 = f32("gg1", 1, 7, 1, scale=0.9)
    out.append(
        Spec(
            "grid1d_linear", "GridSample", [("X", x1), ("grid", grid1)], {"mode": "linear"}, reference="onnx"
        )
    )
    unit = f32("gu", 1, 1, 1, 3)  # an axis of length 1
    out.append(
        Spec(
            "grid_unit_reflection",
            "GridSample",
            [("X", unit), ("grid", f32("gug", 1, 2, 2, 2))],
            {"mode": "linear", "padding_mode": "reflection"},
            reference="onnx",
        )
    )
    ints = _rng("gi").integers(-50, 50, (1, 2, 4, 4)).astype(np.int32)
    out.append(
        Spec(
            "grid_nearest_int32",
            "GridSample",
            [("X", ints), ("grid", f32("gig", 1, 3, 3, 2))],
            {"mode": "nearest"},
            reference="onnx",
        )
    )
    out.append(
        Spec(
            "grid_f64",
            "GridSample",
            [("X", x2.astype(np.float64)), ("grid", grid2)],
            {"mode": "cubic", "padding_mode": "border"},
            reference="onnx",
        )
    )
    return out


SPECS = resize_specs() + dft_specs() + window_specs() + optimizer_specs() + grid_specs()


# ----------------------------------------------------------------------------- machinery


@dataclass
class Case:
    spec: Spec
    graph: gd.Graph
    expected: dict


def assert_close(got: dict, expected: dict, tol: float, what: str, atol: float = 0.0) -> None:
    assert sorted(got) == sorted(expected), f"{what}: outputs {sorted(got)} != {sorted(expected)}"
    for name, want in expected.items():
        have = got[name]
        assert have.shape == want.shape and have.dtype == want.dtype, (
            f"{what} output '{name}': {have.dtype}{have.shape} != {want.dtype}{want.shape}"
        )
        assert np.array_equal(np.isnan(have), np.isnan(want)), f"{what} output '{name}': NaNs differ"
        finite = np.isfinite(want)
        if not finite.any():
            continue
        want, have = want[finite].astype(np.float64), have[finite].astype(np.float64)
        scale = max(float(np.abs(want).max()), 1e-6)
        err = float(np.abs(have - want).max())
        assert err <= tol * scale + atol, (
            f"{what} output '{name}': max abs error {err:.3g} (scale {scale:.3g})"
        )


@pytest.fixture(scope="module")
def cases(import_models):
    graphs = import_models(SPECS)
    return {s.key: Case(s, graphs[s.key], s.expected()) for s in SPECS}


@pytest.fixture(scope="module")
def compiled(cases, compile_graphs):
    return compile_graphs({key: c.graph for key, c in cases.items()})


def _feeds(case):
    fed = set(case.graph.inputs)
    return {n: a for n, a in case.spec.feeds.items() if n in fed}


@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_interpreter_matches_reference(key, cases):
    case = cases[key]
    gd.verify(case.graph)
    outs = [str(o) for o in case.graph.outputs]
    got = dict(zip(outs, gd.run(case.graph, _feeds(case), outs)))
    assert_close(got, case.expected, case.spec.tol, f"{key} interpreter", case.spec.atol)


@pytest.mark.c
@pytest.mark.parametrize("key", [s.key for s in SPECS])
def test_compiled_matches_reference(key, cases, compiled):
    case = cases[key]
    assert_close(
        compiled[key](**_feeds(case)), case.expected, case.spec.tol, f"{key} compiled", case.spec.atol
    )


# ----------------------------------------------------------------------------- structure


def test_resize_stays_one_op(cases):
    """Cubic, antialias and crops are the resize op (one per axis after decomposition)."""
    for key in ("resize_cubic_up_half_pixel", "resize_cubic_antialias_scales", "resize_crop_cubic"):
        assert [n.op for n in cases[key].graph.nodes if n.op not in ("placeholder", "identity")] == [
            "resize"
        ], key


def test_dft_is_one_matmul(cases):
    for key in ("dft17_real_axis2", "dft20_irfft", "stft_window_const"):
        ops = [n.op for n in cases[key].graph.nodes]
        assert ops.count("matmul") == 1 and not {"mul", "cos", "sin"} & set(ops), (key, ops)


def test_windows_are_constants(cases):
    g = cases["HannWindow_10_1"].graph
    assert {n.op for n in g.nodes} == {"constant"}


def test_grid_sample_gathers_once(cases):
    for key in ("grid_cubic_zeros_0", "grid3d_linear_reflection"):
        ops = [n.op for n in cases[key].graph.nodes]
        assert ops.count("gather_elements") == 1, key


# ----------------------------------------------------------------------------- refusals


def _import(tmp_path, spec: Spec):
    path = tmp_path / "m.onnx"
    path.write_bytes(spec.model().SerializeToString())
    return gd.load_onnx(path)


x4 = f32("rq", 1, 2, 3, 4)


@pytest.mark.parametrize(
    "spec, words",
    [
        (
            Spec(
                "resize_area",
                "Resize",
                [("X", x4), ("roi", None), ("scales", np.float32([1, 1, 2, 2]))],
                {"mode": "area"},
                opset=19,
                consts=("scales",),
            ),
            "mode 'area'",
        ),
        (Spec("resize_no_sizes", "Resize", [("X", x4)], opset=19), "scales or sizes"),
        (
            Spec(
                "resize_roi_len",
                "Resize",
                [("X", x4), ("roi", np.float32([0, 1])), ("scales", None), ("sizes", i64(1, 2, 3, 3))],
                {"coordinate_transformation_mode": "tf_crop_and_resize"},
                opset=19,
                consts=("roi", "sizes"),
            ),
            "roi",
        ),
        (
            Spec(
                "resize_bool",
                "Resize",
                [("X", x4 > 0), ("roi", None), ("scales", np.float32([1, 1, 2, 2]))],
                opset=19,
                consts=("scales",),
            ),
            "bool",
        ),
        (
            Spec(
                "dft_length_input", "DFT", [("x", f32("d", 1, 4, 1)), ("L", scalar(4))], {"axis": 1}, opset=17
            ),
            "must be a constant",
        ),
        (
            Spec(
                "dft_axis_complex",
                "DFT",
                [("x", f32("d", 1, 4, 2)), ("L", None), ("axis", scalar(-1))],
                consts=("axis",),
            ),
            "axis -1",
        ),
        (Spec("dft_trailing", "DFT", [("x", f32("d", 1, 4, 3))], {"axis": 1}, opset=17), "1 \\(real\\) or 2"),
        (Spec("dft_huge", "DFT", [("x", f32("d", 1, 5000, 1))], {"axis": 1}, opset=17), "no FFT kernel"),
        (
            Spec(
                "irfft_real",
                "DFT",
                [("x", f32("d", 1, 4, 1))],
                {"axis": 1, "inverse": 1, "onesided": 1},
                opset=17,
            ),
            "complex input",
        ),
        (
            Spec(
                "stft_frame",
                "STFT",
                [("s", f32("s", 1, 8, 1)), ("step", scalar(2)), ("w", None), ("len", scalar(9))],
                opset=17,
                consts=("step", "len"),
            ),
            "do not fit",
        ),
        (
            Spec(
                "stft_window_len",
                "STFT",
                [("s", f32("s", 1, 8, 1)), ("step", scalar(2)), ("w", f32("w", 4)), ("len", scalar(5))],
                opset=17,
                consts=("step", "len"),
            ),
            "window length",
        ),
        (
            Spec("hann_input", "HannWindow", [("size", scalar(8))], opset=17, out_types=(TensorProto.FLOAT,)),
            "must be a constant",
        ),
        (
            Spec(
                "grid16_3d",
                "GridSample",
                [("X", f32("g", 1, 1, 2, 2, 2)), ("grid", f32("g", 1, 2, 2, 2, 3))],
                opset=16,
            ),
            "2 spatial axes",
        ),
        (Spec("grid_shape", "GridSample", [("X", x4), ("grid", f32("g", 1, 2, 2, 3))]), "does not fit"),
        (
            Spec(
                "grid_int_linear", "GridSample", [("X", x4.astype(np.int32)), ("grid", f32("g", 1, 2, 2, 2))]
            ),
            "needs float input",
        ),
        (
            Spec(
                "momentum_mode",
                "Momentum",
                [("R", np.float32(0.1)), ("T", scalar(1)), ("X", x4), ("G", x4), ("V", x4)],
                {"alpha": 0.9, "beta": 0.1, "norm_coefficient": 0.0, "mode": "heavy"},
                outputs=("A", "B"),
                domain=TRAINING,
            ),
            "mode 'heavy'",
        ),
        (
            Spec(
                "adam_arity",
                "Adam",
                [("R", np.float32(0.1)), ("T", scalar(1)), ("X", x4), ("G", x4), ("V", x4)],
                outputs=("A",),
                domain=TRAINING,
            ),
            "4 tensors",
        ),
    ],
)
def test_refused_with_a_reason(tmp_path, spec, words):
    with pytest.raises(FlowcError, match=words):
        _import(tmp_path, spec)
