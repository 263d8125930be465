"""Resize: nearest, (multi)linear and cubic interpolation with every ONNX coordinate mode,
antialiasing and tf_crop_and_resize, separable per axis. Each resized axis is a table of
source indices and weights (``resize_table``), shared by the reference, the gradient and the
backends' kernels.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import apply, constant, operand
from ..errors import ShapeError
from ..ir import TensorType
from ..registry import KERNEL, Attr, Example, Sample, defop
from ._util import check_dtype
from .elementwise import mul

COORD_MODES = (
    "half_pixel",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "half_pixel_symmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_resolve(types, attrs):
    x = types[0]
    sizes, scales = attrs["sizes"], attrs["scales"]
    if sizes is None and scales is None:
        raise ShapeError("resize needs sizes or scales")
    if sizes is not None and scales is not None:
        # the resolved form, or ONNX's keep_aspect_ratio_policy: sizes round(d * scale)
        if (
            len(sizes) != x.rank
            or len(scales) != x.rank
            or not all(
                s in (math.floor(d * c), math.floor(d * c + 0.5)) or c == s / d
                for d, s, c in zip(x.shape, sizes, scales)
            )
        ):
            raise ShapeError(f"give sizes or scales, not both (sizes {sizes}, scales {scales})")
    elif scales is not None:
        if len(scales) != x.rank or any(s <= 0 for s in scales):
            raise ShapeError(f"scales {scales} must be {x.rank} positive values")
        sizes = tuple(int(math.floor(d * s)) for d, s in zip(x.shape, scales))
    else:
        if len(sizes) != x.rank or any(s < 0 for s in sizes):
            raise ShapeError(f"sizes {sizes} must be {x.rank} non-negative values")
        if any(d == 0 and s for d, s in zip(x.shape, sizes)):
            raise ShapeError(f"cannot resize an empty axis of {x.shape} to {sizes}")
        scales = tuple(s / d if d else 1.0 for d, s in zip(x.shape, sizes))
    if attrs["antialias"] and attrs["mode"] == "nearest":
        from ..errors import AttrError

        raise AttrError("antialias applies to the linear and cubic modes, not nearest")
    roi = attrs["roi"]
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        roi = roi or (0.0,) * x.rank + (1.0,) * x.rank  # no crop
        if len(roi) != 2 * x.rank:
            raise ShapeError(f"roi {roi} must hold {2 * x.rank} values (starts, then ends)")
    elif roi:
        from ..errors import AttrError

        raise AttrError("roi is used by coordinate_transformation_mode tf_crop_and_resize only")
    return {**attrs, "sizes": tuple(sizes), "scales": tuple(float(s) for s in scales), "roi": tuple(roi)}


def resize_source(in_len: int, out_len: int, scale: float, mode: str, roi=(0.0, 1.0)) -> np.ndarray:
    """Source coordinate (float64) of each output index along one axis (ONNX Resize).

    ``roi`` (start, end), as fractions of the input, is used by ``tf_crop_and_resize`` only.
    """
    y = np.arange(out_len, dtype=np.float64)
    out_w = scale * in_len
    if math.isclose(out_w, out_len, rel_tol=1e-12):
        out_w = float(out_len)  # sizes given: (sizes / in_len) * in_len is off by an ulp at times
    if mode == "align_corners":
        return np.zeros(out_len) if out_w == 1 else y * (in_len - 1) / (out_w - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "pytorch_half_pixel":
        return np.full(out_len, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_w == 1:
            src = np.full(out_len, (end - start) * (in_len - 1) / 2)
        else:
            src = y * (end - start) * (in_len - 1) / (out_w - 1)
        return src + start * (in_len - 1)
    adjustment = out_len / out_w  # half_pixel_symmetric
    return in_len / 2 * (1 - adjustment) + (y + 0.5) / scale - 0.5


def _two_taps(src, in_len, mode, nearest_mode):
    lo = np.floor(src)
    frac = src - lo
    lo = lo.astype(np.int64)
    if mode == "nearest":
        up = {
            "round_prefer_floor": frac > 0.5,
            "round_prefer_ceil": frac >= 0.5,
            "floor": np.zeros_like(frac, bool),
            "ceil": frac > 0,
        }[nearest_mode]
        idx = np.clip(lo + up, 0, in_len - 1)
        return idx, idx, np.zeros(len(src))
    return np.clip(lo, 0, in_len - 1), np.clip(lo + 1, 0, in_len - 1), frac


def resize_taps(in_len, out_len, scale, attrs):
    """Per output index: (index0, index1, weight1); the value is lerp(x[i0], x[i1], w1).

    Nearest and plain linear modes only (two taps); ``resize_table`` covers every mode.
    """
    src = resize_source(in_len, out_len, scale, attrs["coordinate_transformation_mode"])
    return _two_taps(src, in_len, attrs["mode"], attrs.get("nearest_mode", "round_prefer_floor"))


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances d (ONNX Resize, cubic_coeff_a = a)."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _antialiased(attrs, scale: float) -> bool:
    return bool(attrs.get("antialias")) and attrs["mode"] != "nearest" and scale < 1


def is_lerp(attrs, scale: float) -> bool:
    """Nearest and plain linear: at most two taps, lerp(x[i0], x[i1], w1)."""
    return attrs["mode"] in ("nearest", "linear") and not _antialiased(attrs, scale)


def resize_table(in_len: int, out_len: int, scale: float, attrs, roi=(0.0, 1.0)):
    """The taps of one axis: ``(idx, w)``, both of shape (out_len, ntaps), with
    ``y[j] = sum_k w[j, k] * x[idx[j, k]]``; a row whose indices are -1 lies outside the
    ``tf_crop_and_resize`` region and takes ``extrapolation_value``.

    Nearest has one tap, linear two, cubic four (Keys, ``cubic_coeff_a``); antialias widens
    linear and cubic to a filter stretched by 1/scale when shrinking. As in ONNX, a tap
    beyond the edge reads the edge sample, or is dropped (with the weights renormalized)
    under ``exclude_outside``.

    >>> idx, w = resize_table(4, 2, 0.5, {"mode": "linear", "antialias": True,
    ...                                   "coordinate_transformation_mode": "half_pixel"})
    >>> idx.tolist(), w.tolist()
    ([[0, 0, 1, 2], [1, 2, 3, 3]], [[0.125, 0.375, 0.375, 0.125], [0.125, 0.375, 0.375, 0.125]])
    """
    ctm = attrs["coordinate_transformation_mode"]
    src = resize_source(in_len, out_len, scale, ctm, roi)
    mode = attrs["mode"]
    if is_lerp(attrs, scale):
        i0, i1, w1 = _two_taps(src, in_len, mode, attrs.get("nearest_mode", "round_prefer_floor"))
        if mode == "nearest":
            idx, w = i0[:, None], np.ones((out_len, 1))
        else:
            idx, w = np.stack([i0, i1], 1), np.stack([1 - w1, w1], 1)
    else:
        # ONNX: ratio in (0, 1] from the sample at or left of src ("base"); taps base + t
        base = np.floor(src)
        ratio = src - base
        on_sample = ratio == 0
        base = np.where(on_sample, base - 1, base).astype(np.int64)
        ratio = np.where(on_sample, 1.0, ratio)
        s = min(scale, 1.0) if _antialiased(attrs, scale) else 1.0
        reach = 1 if mode == "linear" else 2  # kernel support, in samples of the output
        first = int(math.floor(-reach / s) + 1)
        t = np.arange(first, 2 - first)  # an even count of taps, 2 - 2 * first
        d = (t[None, :] - ratio[:, None]) * s
        if mode == "linear":
            w = np.clip(1 - np.abs(d), 0, 1)
        else:
            w = _cubic(d, attrs.get("cubic_coeff_a", -0.75))
        if s != 1.0:
            w = w / w.sum(1, keepdims=True)
        idx = base[:, None] + t[None, :]
        if attrs.get("exclude_outside"):  # (nearest and plain linear never need it)
            w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
            total = w.sum(1, keepdims=True)
            w = w / np.where(total == 0, 1.0, total)
        idx = np.clip(idx, 0, in_len - 1)
    if ctm == "tf_crop_and_resize":
        outside = (src < 0) | (src > in_len - 1)
        idx = np.where(outside[:, None], -1, idx)
        w = np.where(outside[:, None], 0.0, w)
    return idx.astype(np.int64), w


def axis_roi(attrs, a, rank):
    roi = attrs.get("roi") or ()
    return (roi[a], roi[a + rank]) if roi else (0.0, 1.0)


def axis_table(shape, attrs, a):
    roi = axis_roi(attrs, a, len(shape))
    return resize_table(shape[a], attrs["sizes"][a], attrs["scales"][a], attrs, roi)


def resize_axes(shape, attrs):
    return [
        a
        for a, (d, s) in enumerate(zip(shape, attrs["sizes"]))
        if d != s or attrs["scales"][a] != 1.0 or axis_roi(attrs, a, len(shape)) != (0.0, 1.0)
    ]


def _resize_ref(xs, attrs):
    y = xs[0].astype(np.float64)
    for a in resize_axes(y.shape, attrs):
        idx, w = axis_table(y.shape, attrs, a)
        bshape = [1] * y.ndim
        bshape[a] = -1
        taps = np.maximum(idx, 0)  # extrapolated rows (-1) are replaced below
        out = sum(np.take(y, taps[:, k], axis=a) * w[:, k].reshape(bshape) for k in range(w.shape[1]))
        y = np.where((idx[:, 0] < 0).reshape(bshape), attrs["extrapolation_value"], out)
    return y.astype(xs[0].dtype)


def _g_resize(op, gys):
    from ..builder import fill
    from .shape import scatter_add

    x, g = op.inputs[0], gys[0]
    shapes = [list(x.shape)]
    axes = resize_axes(x.shape, op.attrs)
    for a in axes:
        shapes.append(shapes[-1][:a] + [op.attrs["sizes"][a]] + shapes[-1][a + 1 :])
    for a, in_shape in zip(reversed(axes), reversed(shapes[:-1])):
        idx, w = axis_table(x.shape, op.attrs, a)
        bshape = [1] * x.rank
        bshape[a] = -1
        acc = fill(in_shape, 0, x.dtype)
        for k in range(w.shape[1]):  # extrapolated rows (-1) scatter a zero onto index 0
            wk = constant(w[:, k].reshape(bshape).astype(dtypes.np_dtype(x.dtype)))
            acc = scatter_add(acc, constant(np.maximum(idx[:, k], 0)), mul(g, wk), axis=a)
        g = acc
    return (g,)


def _resize_infer(types, attrs):
    check_dtype(types[0], dtypes.FLOATS)
    return TensorType(attrs["sizes"], types[0].dtype)


defop(
    "resize",
    ("x",),
    _resize_infer,
    _resize_ref,
    _g_resize,
    attrs={
        "sizes": Attr("ints", None),
        "scales": Attr("floats", None),
        "mode": Attr("str", "nearest", ("nearest", "linear", "cubic")),
        "coordinate_transformation_mode": Attr("str", "half_pixel", COORD_MODES),
        "nearest_mode": Attr("str", "round_prefer_floor", NEAREST_MODES),
        "cubic_coeff_a": Attr("float", -0.75),
        "exclude_outside": Attr("bool", False),
        "antialias": Attr("bool", False),
        "roi": Attr("floats", ()),
        "extrapolation_value": Attr("float", 0.0),
    },
    resolve=_resize_resolve,
    kind=KERNEL,
    doc="nearest, (multi)linear or cubic resize (antialias, tf_crop_and_resize) with ONNX "
    "coordinate modes; separable per axis",
    examples=(
        Example((Sample((1, 2, 2, 3)),), {"scales": (1.0, 1.0, 2.0, 1.5)}),
        Example(
            (Sample((2, 3, 4)),),
            {"sizes": (2, 5, 3), "mode": "linear", "coordinate_transformation_mode": "align_corners"},
        ),
        Example(
            (Sample((1, 2, 4, 5), "float64"),),
            {
                "sizes": (1, 2, 7, 3),
                "mode": "cubic",
                "cubic_coeff_a": -0.5,
                "exclude_outside": True,
                "antialias": True,
            },
        ),  # fmt: skip
        Example(
            (Sample((1, 1, 4, 4)),),
            {
                "sizes": (1, 1, 3, 5),
                "mode": "linear",
                "coordinate_transformation_mode": "tf_crop_and_resize",
                "roi": (0.0, 0.0, 0.2, -0.1, 1.0, 1.0, 0.8, 1.2),
                "extrapolation_value": 7.0,
            },
        ),  # fmt: skip
        # the two kernels (two taps: nearest and linear; more: cubic, antialias, crop) in
        # float64 and float16 too, and each coordinate transformation
        *(
            Example((Sample((1, 2, 3, 4), dt),), {"scales": (1.0, 1.0, 2.0, 1.5), **attrs}, grad=False)
            for dt, attrs in (
                ("float16", {"coordinate_transformation_mode": "asymmetric"}),
                ("float64", {"mode": "linear"}),
                ("float16", {"mode": "cubic"}),
                ("float32", {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}),
            )
        ),
        Example(
            (Sample((4, 3)),),
            {"sizes": (5, 3), "mode": "cubic", "coordinate_transformation_mode": "asymmetric"},
            grad=False,
        ),
        Example(
            (Sample((1, 2, 13, 9)),),
            {"scales": (1.0, 1.0, 0.3, 0.45), "mode": "linear", "antialias": True},
            grad=False,
        ),
        Example((Sample((1, 1, 9)),), {"sizes": (1, 1, 1), "mode": "cubic"}, grad=False),
        Example(
            (Sample((1, 2, 5, 6)),),
            {
                "sizes": (1, 2, 4, 5),
                "mode": "cubic",
                "coordinate_transformation_mode": "tf_crop_and_resize",
                "roi": (0.0, 0.0, -0.2, 0.1, 1.0, 1.0, 0.9, 1.4),
                "extrapolation_value": 7.5,
            },
            grad=False,
        ),  # fmt: skip
        Example(  # every sample outside the input
            (Sample((2, 4)),),
            {
                "sizes": (2, 3),
                "mode": "linear",
                "coordinate_transformation_mode": "tf_crop_and_resize",
                "roi": (0.0, 1.5, 1.0, 2.5),
                "extrapolation_value": -1.0,
            },
            grad=False,
        ),  # fmt: skip
    ),
)


def resize(
    x,
    sizes=None,
    scales=None,
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
    cubic_coeff_a=-0.75,
    exclude_outside=False,
    antialias=False,
    roi=(),
    extrapolation_value=0.0,
    name=None,
):
    """Resize like ONNX Resize: ``sizes`` or ``scales`` per axis, every mode and option.

    ``mode`` nearest (``nearest_mode``), linear or cubic (``cubic_coeff_a``,
    ``exclude_outside``); ``antialias`` filters linear and cubic shrinking;
    ``coordinate_transformation_mode`` tf_crop_and_resize crops to ``roi`` (starts, then
    ends, as fractions) and fills outside it with ``extrapolation_value``.

    >>> import numpy as np, graphdef as gd
    >>> with gd.Graph("g") as g:
    ...     x = gd.constant(np.arange(4, dtype=np.float32).reshape(1, 4))
    ...     y = gd.resize(x, sizes=(1, 2), mode="cubic")
    >>> gd.run(g, {}, [y])[0]
    array([[0.40625, 2.59375]], dtype=float32)
    """
    return apply(
        "resize",
        [operand(x)],
        name,
        sizes=sizes,
        scales=scales,
        mode=mode,
        coordinate_transformation_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        antialias=antialias,
        roi=roi,
        extrapolation_value=extrapolation_value,
    )


# the builders that graphdef exports
__all__ = ["resize"]
