"""The resize op's cubic, antialias, exclude_outside and tf_crop_and_resize options against an
independent numpy oracle, and their gradients against central differences.

The oracle follows the ONNX Resize definition per output element: the source coordinate, the
ratio in (0, 1] from the sample at or left of it, the filter taps around it (Keys' cubic
kernel, or the triangle/cubic kernel stretched by 1/scale for antialias), edge samples for
taps beyond the input (or dropped and renormalized under exclude_outside), and
extrapolation_value outside a crop. It loops over output positions in float64 and shares no
code with the op's tables (graphdef.ops.resize.resize_table). Nearest and linear are tested in
test_ops_nn.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import graphdef as gd

GRADS_TESTED = {"resize"}

TOL = {
    "float16": {"rtol": 5e-3, "atol": 5e-3},
    "float32": {"rtol": 2e-5, "atol": 2e-5},
    "float64": {"rtol": 1e-10, "atol": 1e-12},
}
RNG = np.random.default_rng(11)


def run(x, **attrs):
    g = gd.Graph("t")
    with g:
        y = gd.resize(gd.placeholder("x", x.shape, x.dtype.name), **attrs)
    assert gd.verify(g) is g
    (out,) = gd.run(g, {"x": x}, [y])
    assert out.shape == y.shape and out.dtype == x.dtype
    return out


def keys(d: float, a: float) -> float:
    """Keys' cubic convolution kernel W(d) with parameter a."""
    d = abs(d)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    if d < 2:
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return 0.0


def source(i, n, out_len, scale, ctm, roi):
    width = scale * n
    if math.isclose(width, out_len, rel_tol=1e-12):
        width = out_len
    if ctm == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if ctm == "align_corners":
        return 0.0 if width == 1 else i * (n - 1) / (width - 1)
    if ctm == "asymmetric":
        return i / scale
    if ctm == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if width > 1 else -0.5
    assert ctm == "tf_crop_and_resize"
    start, end = roi
    if width == 1:
        return (end - start) * (n - 1) / 2 + start * (n - 1)
    return i * (end - start) * (n - 1) / (width - 1) + start * (n - 1)


def taps_1d(i, n, out_len, scale, mode, ctm, a, exclude, antialias, roi):
    """[(input index, weight)] of output i along one axis, or None outside a crop."""
    c = source(i, n, out_len, scale, ctm, roi)
    if ctm == "tf_crop_and_resize" and not 0 <= c <= n - 1:
        return None
    base = math.floor(c)
    ratio = c - base
    if ratio == 0:  # prefer the sample to the left: ratio in (0, 1]
        base, ratio = base - 1, 1.0
    stretch = min(scale, 1.0) if antialias else 1.0
    support = 1 if mode == "linear" else 2
    out = []
    t = math.floor(-support / stretch) + 1
    while t <= 1 - (math.floor(-support / stretch) + 1):
        d = (t - ratio) * stretch
        w = max(0.0, 1 - abs(d)) if mode == "linear" else keys(d, a)
        out.append([base + t, w])
        t += 1
    if antialias:
        total = sum(w for _, w in out)
        out = [[j, w / total] for j, w in out]
    if exclude:
        out = [[j, w if 0 <= j < n else 0.0] for j, w in out]
        total = sum(w for _, w in out) or 1.0
        out = [[j, w / total] for j, w in out]
    return [(min(max(j, 0), n - 1), w) for j, w in out]


def oracle(
    x,
    sizes,
    scales,
    mode,
    ctm="half_pixel",
    a=-0.75,
    exclude=False,
    antialias=False,
    roi=None,
    extrapolation=0.0,
):
    if sizes is None:
        sizes = [math.floor(d * s) for d, s in zip(x.shape, scales)]
    else:
        scales = [s / d for d, s in zip(x.shape, sizes)]
    rank = x.ndim
    roi = roi or [0.0] * rank + [1.0] * rank
    y = x.astype(np.float64)
    for axis in range(rank):  # separable: one axis at a time, as ONNX defines it
        n = y.shape[axis]
        if sizes[axis] == n and scales[axis] == 1 and (roi[axis], roi[axis + rank]) == (0.0, 1.0):
            continue
        moved = np.moveaxis(y, axis, 0)
        out = np.zeros((sizes[axis],) + moved.shape[1:])
        for i in range(sizes[axis]):
            # antialias only widens a shrinking filter
            taps = taps_1d(
                i,
                n,
                sizes[axis],
                scales[axis],
                mode,
                ctm,
                a,
                exclude,
                antialias and scales[axis] < 1,
                (roi[axis], roi[axis + rank]),
            )
            out[i] = extrapolation if taps is None else sum(w * moved[j] for j, w in taps)
        y = np.moveaxis(out, 0, axis)
    return y


def check(got, want, dtype):
    np.testing.assert_allclose(got.astype(np.float64), want, **TOL[dtype])


CASES = [  # x shape, sizes, scales
    ((1, 2, 4, 5), None, (1, 1, 2, 1.5)),
    ((1, 1, 6, 7), (1, 1, 3, 4), None),
    ((2, 9), None, (0.5, 0.35)),
    ((1, 1, 5), (1, 1, 11), None),
    ((3, 4), (1, 7), None),
    ((1, 1, 8), (1, 1, 1), None),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"])
@pytest.mark.parametrize("xs,sizes,scales", CASES)
def test_cubic(xs, sizes, scales, ctm, dtype):
    x = RNG.uniform(-2, 2, xs).astype(dtype)
    got = run(x, sizes=sizes, scales=scales, mode="cubic", coordinate_transformation_mode=ctm)
    check(got, oracle(x, sizes, scales, "cubic", ctm), dtype)


@pytest.mark.parametrize("a,exclude", [(-0.5, False), (-0.5, True), (-0.75, True), (-1.0, False)])
@pytest.mark.parametrize("xs,sizes,scales", CASES)
def test_cubic_coefficient_and_exclude_outside(xs, sizes, scales, a, exclude):
    x = RNG.uniform(-2, 2, xs)
    got = run(x, sizes=sizes, scales=scales, mode="cubic", cubic_coeff_a=a, exclude_outside=exclude)
    check(got, oracle(x, sizes, scales, "cubic", a=a, exclude=exclude), "float64")


@pytest.mark.parametrize("exclude", [False, True])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("xs,sizes,scales", CASES)
def test_antialias(xs, sizes, scales, mode, exclude):
    x = RNG.uniform(-2, 2, xs)
    got = run(x, sizes=sizes, scales=scales, mode=mode, antialias=True, exclude_outside=exclude)
    check(got, oracle(x, sizes, scales, mode, exclude=exclude, antialias=True), "float64")


def test_antialias_is_a_box_average_at_integer_factors():
    """Linear antialias at 1/2: a triangle filter two samples wide, weights 1/8 3/8 3/8 1/8."""
    x = np.arange(8.0).reshape(1, 8)
    got = run(x, scales=(1, 0.5), mode="linear", antialias=True)
    np.testing.assert_allclose(got, [[0.625, 2.5, 4.5, 6.375]])  # the edges repeat the end sample


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize(
    "xs,sizes,roi",
    [
        ((1, 1, 5, 6), (1, 1, 3, 4), (0, 0, 0.2, -0.3, 1, 1, 0.8, 1.25)),
        ((2, 7), (2, 5), (0, 0.5, 1, 0.1)),  # a flipped crop
        ((1, 1, 4), (1, 1, 1), (0, 0, 0.25, 1, 1, 0.75)),
        ((1, 3, 4), (1, 3, 4), (0, 0, 0, 1, 1, 1)),  # the whole input: identity
    ],
)
def test_tf_crop_and_resize(xs, sizes, roi, mode):
    x = RNG.uniform(-2, 2, xs)
    got = run(
        x,
        sizes=sizes,
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        roi=roi,
        extrapolation_value=-9.0,
    )
    if mode == "nearest":  # the oracle above is for filters: nearest keeps the taps' nearest sample
        want = run(
            x,
            sizes=sizes,
            mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize",
            roi=roi,
            extrapolation_value=-9.0,
        )
        assert np.array_equal(got == -9.0, want == -9.0)
        return
    check(
        got, oracle(x, sizes, None, mode, "tf_crop_and_resize", roi=list(roi), extrapolation=-9.0), "float64"
    )


def test_crop_of_an_axis_that_keeps_its_size_is_not_skipped():
    x = np.arange(5.0).reshape(1, 5)
    got = run(
        x,
        sizes=(1, 5),
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        roi=(0, 0.5, 1, 1.5),
        extrapolation_value=-1.0,
    )
    np.testing.assert_allclose(got, [[2.0, 3.0, 4.0, -1.0, -1.0]])  # source i + 2
    got = run(
        x,
        sizes=(1, 5),
        mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
        roi=(0, 0.75, 1, 1.75),
        extrapolation_value=-1.0,
    )
    np.testing.assert_allclose(got, [[3.0, 4.0, -1.0, -1.0, -1.0]])  # source i + 3


def test_nearest_and_linear_keep_two_taps():
    from graphdef.ops.resize import resize_table, resize_taps

    attrs = {"mode": "linear", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "floor"}
    idx, w = resize_table(5, 8, 8 / 5, attrs)
    i0, i1, w1 = resize_taps(5, 8, 8 / 5, attrs)
    assert idx.shape == (8, 2) and np.array_equal(idx[:, 0], i0) and np.array_equal(idx[:, 1], i1)
    assert np.array_equal(w[:, 1], w1) and np.array_equal(w[:, 0], 1 - w1)
    idx, w = resize_table(5, 8, 8 / 5, {**attrs, "mode": "nearest"})
    assert idx.shape == (8, 1) and np.all(w == 1)


def test_keep_aspect_ratio_sizes_are_accepted():
    """sizes round(d * scale) with their scale (ONNX keep_aspect_ratio_policy) is a valid pair."""
    x = RNG.uniform(-1, 1, (1, 1, 2, 4))
    got = run(x, sizes=(1, 1, 2, 3), scales=(1, 1, 0.75, 0.75), mode="cubic")  # floor(1.5) = 1, round = 2
    assert got.shape == (1, 1, 2, 3)


@pytest.mark.parametrize(
    "attrs,words",
    [
        ({"scales": (1, 0.5), "mode": "nearest", "antialias": True}, "antialias"),
        ({"scales": (1, 2), "mode": "cubic", "roi": (0, 0, 1, 1)}, "roi"),
        ({"sizes": (1, 2), "coordinate_transformation_mode": "tf_crop_and_resize", "roi": (0, 1)}, "roi"),
        ({"scales": (1, 2), "mode": "area"}, "must be one of"),
    ],
)
def test_bad_options_are_refused(attrs, words):
    with gd.Graph("g"):
        x = gd.placeholder("x", (2, 4))
        with pytest.raises(gd.FlowcError, match=words):
            gd.resize(x, **attrs)


# ----------------------------------------------------------------------------- gradients
def numeric_grad(attrs, x, w):
    g = gd.Graph("g")
    with g:
        xp = gd.placeholder("x", x.shape, "float64")
        loss = gd.reduce_sum(gd.resize(xp, **attrs) * gd.constant(w))
        (grad,) = gd.gradients(loss, [xp])
    (analytic,) = gd.run(g, {"x": x}, [grad])
    numeric = np.zeros_like(x)
    eps = 1e-6
    for idx in itertools.product(*map(range, x.shape)):
        plus, minus = x.copy(), x.copy()
        plus[idx] += eps
        minus[idx] -= eps
        numeric[idx] = (gd.run(g, {"x": plus}, [loss])[0] - gd.run(g, {"x": minus}, [loss])[0]) / (2 * eps)
    return analytic, numeric


@pytest.mark.parametrize(
    "attrs,out_shape",
    [
        ({"scales": (1, 1, 2, 1.5), "mode": "cubic"}, (1, 2, 6, 6)),
        (
            {"sizes": (1, 2, 2, 3), "mode": "cubic", "exclude_outside": True, "cubic_coeff_a": -0.5},
            (1, 2, 2, 3),
        ),
        ({"sizes": (1, 2, 2, 2), "mode": "linear", "antialias": True}, (1, 2, 2, 2)),
        ({"sizes": (1, 2, 1, 3), "mode": "cubic", "antialias": True}, (1, 2, 1, 3)),
        (
            {
                "sizes": (1, 2, 4, 3),
                "mode": "linear",
                "coordinate_transformation_mode": "tf_crop_and_resize",
                "roi": (0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3),
                "extrapolation_value": 2.0,
            },
            (1, 2, 4, 3),
        ),
    ],
    ids=["cubic", "cubic-exclude", "linear-antialias", "cubic-antialias", "crop"],
)
def test_gradient(attrs, out_shape):
    x = RNG.uniform(-2, 2, (1, 2, 3, 4))
    w = RNG.uniform(0.5, 1.5, out_shape)
    analytic, numeric = numeric_grad(attrs, x, w)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)
