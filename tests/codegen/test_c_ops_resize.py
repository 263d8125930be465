"""The resize op's two kernels in generated C: which one a mode takes, an infinite sample next
to taps of weight 0, and both in a standalone binary under the sanitizers. The cases (every
mode, coordinate transformation, antialias, exclude_outside and tf_crop_and_resize, in each
float dtype) are the op's examples, tests/codegen/test_c_examples.py."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import codegen
import graphdef as gd

pytestmark = pytest.mark.c

RNG = np.random.default_rng(5)


def arr(shape, dtype):
    return RNG.uniform(-3, 3, shape).astype(dtype)


def _sources(graph) -> str:
    from codegen import pipeline

    files = pipeline.run(graph, pipeline.Options(name="m")).sources.files.values()
    return "".join(v for v in files if isinstance(v, str))


def test_the_tap_kernel_is_used():
    """Cubic goes through fc_resize_taps, one call per resized axis; linear keeps fc_resize_axis."""
    with gd.Graph("cubic") as graph:
        gd.resize(gd.placeholder("in0", (1, 2, 3, 4)), scales=(1, 1, 2, 1.5), mode="cubic", name="y")
    text = _sources(graph)
    assert text.count("fc_resize_taps_f32(") == 2 and "fc_resize_axis_f32(" not in text
    with gd.Graph("lin") as graph:
        gd.resize(gd.placeholder("in0", (2, 3)), scales=(1, 2), mode="linear", name="y")
    text = _sources(graph)
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
