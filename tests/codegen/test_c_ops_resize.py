"""The resize op's tap-table kernel (cubic, antialias, exclude_outside, tf_crop_and_resize)
through generated C (one shared library for all cases) against the interpreter, and a
sanitizer run of a standalone binary. Nearest and linear (the two-tap kernel) are in
test_c_ops.py."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import codegen
import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(5)
FLOATS = ("float32", "float64", "float16")


def arr(shape, dtype):
    return RNG.uniform(-3, 3, shape).astype(dtype)


CASES: list[tuple[str, object, list[np.ndarray]]] = []


def case(cid, fn, *inputs):
    CASES.append((cid, fn, list(inputs)))


for dt in FLOATS:
    for ctm in ("half_pixel", "align_corners", "asymmetric"):
        case(
            f"cubic-up-{ctm}-{dt}",
            lambda x, ctm=ctm: gd.resize(
                x, scales=(1, 1, 2, 1.5), mode="cubic", coordinate_transformation_mode=ctm
            ),
            arr((1, 2, 3, 4), dt),
        )
    case(
        f"cubic-down-exclude-{dt}",
        lambda x: gd.resize(x, sizes=(1, 2, 3, 2), mode="cubic", cubic_coeff_a=-0.5, exclude_outside=True),
        arr((1, 2, 7, 5), dt),
    )
    for mode in ("linear", "cubic"):
        case(
            f"antialias-{mode}-{dt}",
            lambda x, mode=mode: gd.resize(x, scales=(1, 1, 0.3, 0.45), mode=mode, antialias=True),
            arr((1, 2, 13, 9), dt),
        )
    case(
        f"crop-{dt}",
        lambda x: gd.resize(
            x,
            sizes=(1, 2, 4, 5),
            mode="cubic",
            coordinate_transformation_mode="tf_crop_and_resize",
            roi=(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.4),
            extrapolation_value=7.5,
        ),
        arr((1, 2, 5, 6), dt),
    )
case("cubic-inner-axis", lambda x: gd.resize(x, sizes=(5, 3), mode="cubic"), arr((4, 3), "float32"))
case("cubic-one-output", lambda x: gd.resize(x, sizes=(1, 1, 1), mode="cubic"), arr((1, 1, 9), "float32"))
case(
    "crop-all-outside",
    lambda x: gd.resize(
        x,
        sizes=(2, 3),
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        roi=(0, 1.5, 1, 2.5),
        extrapolation_value=-1.0,
    ),
    arr((2, 4), "float32"),
)


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_c_matches_interpreter(cid, built, c_outputs, tol):
    for name, g, w in c_outputs(built, cid):
        np.testing.assert_allclose(g, w, **tol[w.dtype.name], err_msg=name)


def test_the_tap_kernel_is_used(built):
    """Cubic goes through fc_resize_taps, one call per resized axis; linear keeps fc_resize_axis."""
    from codegen import pipeline

    graph, _ = built["cubic-up-half_pixel-float32"]
    text = "".join(
        v
        for v in pipeline.run(graph, pipeline.Options(name="m")).sources.files.values()
        if isinstance(v, str)
    )
    assert text.count("fc_resize_taps_f32(") == 2 and "fc_resize_axis_f32(" not in text
    with gd.Graph("lin") as graph:
        gd.resize(gd.placeholder("in0", (2, 3)), scales=(1, 2), mode="linear", name="y")
    text = "".join(
        v
        for v in pipeline.run(graph, pipeline.Options(name="m")).sources.files.values()
        if isinstance(v, str)
    )
    assert "fc_resize_axis_f32(" in text and "fc_resize_taps_f32(" not in text


def test_infinities_stay_in_place():
    """A tap of weight 0 is skipped: an infinite sample does not turn its neighbours NaN."""
    x = np.array([[1.0, np.inf, 3.0, 4.0, 5.0, 6.0]], np.float32)
    g = gd.Graph("inf")
    with g:
        y = gd.resize(
            gd.placeholder("x", x.shape),
            sizes=(1, 11),
            mode="cubic",
            coordinate_transformation_mode="align_corners",
        )
    got = codegen.compile(g)(x=x)[y.name]
    assert np.isfinite(got[0, 6:]).all()  # taps 2..5 only: weights for the inf sample are exactly 0


def test_binary_runs_clean_under_sanitizers(tmp_path):
    """Both kernels (two taps, N taps with crop rows) in one binary under ASan/UBSan."""
    d = arr((1, 2, 7, 6), "float32")
    g = gd.Graph("family")
    with g:
        x = gd.placeholder("x", d.shape)
        a = gd.resize(x, scales=(1, 1, 2, 1.5), mode="linear")
        b = gd.resize(a, sizes=(1, 2, 5, 4), mode="cubic", antialias=True, exclude_outside=True)
        c = gd.resize(
            x,
            sizes=(1, 2, 3, 8),
            mode="cubic",
            coordinate_transformation_mode="tf_crop_and_resize",
            roi=(0, 0, 0.3, -0.5, 1, 1, 0.6, 1.5),
            extrapolation_value=2.0,
        )
        gd.identity(b, name="b")
        gd.identity(c, name="c")
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g1", "-O1"]
    out = codegen.export(g, tmp_path / "san", name="san", outputs=["b", "c"], flags=flags)
    np.save(tmp_path / "x.npy", d)
    res = subprocess.run(
        [str(out / "san"), "--in", f"x={tmp_path / 'x.npy'}", "--out-dir", str(tmp_path / "res")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr
    for name, w in zip(["b", "c"], gd.run(g, {"x": d}, ["b", "c"])):
        np.testing.assert_allclose(np.load(tmp_path / "res" / f"{name}.npy"), w, rtol=1e-5, atol=1e-6)
