"""Converters for signal processing, optimizer steps, GridSample and Resize.

- Resize (opset 11 on): every mode of the ``resize`` op (nearest, linear, cubic with
  ``cubic_coeff_a`` and ``exclude_outside``, antialias, ``tf_crop_and_resize`` with ``roi`` and
  ``extrapolation_value``), ``axes`` and ``keep_aspect_ratio_policy``; integer images are
  resized in float64 and rounded back (half to even, saturating), as ONNX specifies.
- DFT (17, 20) and STFT (17): one matmul with a constant DFT matrix built at import (sizes
  are static), the complex axis folded into the matrix: ``[..., n * c] @ W[n * c, k * 2]``.
- HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix (17): their inputs decide the
  output shape, so they must be constants; the values are computed at import.
- Momentum, Adagrad, Adam (ai.onnx.preview.training 1): elementwise compositions; the update
  count T is data (``T > 0`` selects with ``where``).
- GridSample (16, 20, 22): source coordinates from the grid with elementwise ops, the
  neighbours (1, 2 or 4 per spatial axis) gathered from the flattened input with one
  ``gather_elements`` and summed with their weights; zeros, border and reflection padding;
  any number of spatial axes. Padding follows the ONNX reference: a sampling point outside
  the input is first clamped or reflected, then each tap is (onnxruntime, like PyTorch, pads
  only the taps, which differs for cubic border and reflection).
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..builder import Tensor, constant
from ..ops import elementwise as E
from ..ops import index as I
from ..ops import math as M
from ..ops import nn as N
from ..ops import reduce as R
from ..ops import resize as RS
from ..ops import shape as S
from .importer import converter, onnx_dtype

TRAINING = "ai.onnx.preview.training"
MAX_DFT_ENTRIES = 1 << 24  # DFT matrix size limit: 64 MiB of float32 weights


def _const(value, dtype: str) -> Tensor:
    return constant(np.asarray(value, dtype=dtypes.np_dtype(dtype)))


def _cast(x: Tensor, dtype: str) -> Tensor:
    return x if x.dtype == dtype else E.cast(x, dtype)


def _scalar(node, i: int, what: str, default=None) -> int:
    """A scalar (or one-element) integer input known at import time."""
    if not node.has(i):
        if default is None:
            raise node.unsupported(f"input {i} ({what}) is missing")
        return default
    v = np.asarray(node.const(i, f"({what}) "))
    if v.size != 1:
        raise node.unsupported(f"{what} must be a scalar, got shape {list(v.shape)}")
    return int(v.reshape(()))


def _floats_only(node, x: Tensor, what: str = "input") -> None:
    if x.dtype not in dtypes.FLOATS:
        raise node.unsupported(f"{what} has dtype {x.dtype}; only float16/32/64 are supported")


# ----------------------------------------------------------------------------- resize
_RESIZE_MODES = ("nearest", "linear", "cubic")


@converter("Resize", 11)
def _resize11(node):
    x = node.tensor(0)
    shape, rank = node.shape(0), len(node.shape(0))
    axes = list(range(rank))
    if node.opset >= 18 and node.attr("axes") is not None:
        axes = [int(a) for a in node.attr("axes")]
        if any(not -rank <= a < rank for a in axes):
            raise node.unsupported(f"axes {axes} out of range for rank {rank}")
        axes = [a % rank for a in axes]
        if len(set(axes)) != len(axes):
            raise node.unsupported(f"axes {axes} repeat an axis")
    mode = node.attr("mode", "nearest")
    if mode not in _RESIZE_MODES:
        raise node.unsupported(f"mode '{mode}' is not one of nearest, linear, cubic")
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    if ctm not in RS.COORD_MODES:
        raise node.unsupported(f"coordinate_transformation_mode '{ctm}' is not supported")
    nearest_mode = node.attr("nearest_mode", "round_prefer_floor")
    if nearest_mode not in RS.NEAREST_MODES:
        raise node.unsupported(f"nearest_mode '{nearest_mode}' is not supported")

    scales = sizes = None
    if node.has(3) and node.const(3, "(sizes) ").size:
        given = [int(v) for v in node.const(3, "(sizes) ").reshape(-1)]
        if len(given) != len(axes):
            raise node.unsupported(f"sizes {given} must have {len(axes)} values")
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        sizes = list(shape)
        if policy == "stretch":
            for k, a in enumerate(axes):
                sizes[a] = given[k]
        elif policy in ("not_larger", "not_smaller"):
            if any(shape[a] == 0 for a in axes):
                raise node.unsupported("keep_aspect_ratio_policy needs non-empty resized axes")
            ratios = [given[k] / shape[a] for k, a in enumerate(axes)]
            r = min(ratios) if policy == "not_larger" else max(ratios)
            scales = [1.0] * rank
            for a in axes:
                sizes[a] = int(math.floor(r * shape[a] + 0.5))
                scales[a] = r
        else:
            raise node.unsupported(f"keep_aspect_ratio_policy '{policy}' is not supported")
    elif node.has(2) and node.const(2, "(scales) ").size:
        given = [float(v) for v in node.const(2, "(scales) ").reshape(-1)]
        if len(given) != len(axes):
            raise node.unsupported(f"scales {given} must have {len(axes)} values")
        scales = [1.0] * rank
        for k, a in enumerate(axes):
            scales[a] = given[k]
    else:
        raise node.unsupported("needs constant scales or sizes")

    roi = ()
    if ctm == "tf_crop_and_resize":
        roi_full = [0.0] * rank + [1.0] * rank
        if node.has(1) and node.const(1, "(roi) ").size:
            given = [float(v) for v in node.const(1, "(roi) ").reshape(-1)]
            if len(given) != 2 * len(axes):
                raise node.unsupported(f"roi {given} must have {2 * len(axes)} values")
            for k, a in enumerate(axes):
                roi_full[a], roi_full[rank + a] = given[k], given[len(axes) + k]
        roi = tuple(roi_full)
    antialias = bool(node.attr("antialias", 0)) and mode != "nearest"  # ONNX: linear and cubic only
    attrs = dict(
        sizes=sizes,
        scales=scales,
        mode=mode,
        coordinate_transformation_mode=ctm,
        nearest_mode=nearest_mode,
        cubic_coeff_a=float(node.attr("cubic_coeff_a", -0.75)),
        exclude_outside=bool(node.attr("exclude_outside", 0)),
        antialias=antialias,
        roi=roi,
        extrapolation_value=float(node.attr("extrapolation_value", 0.0)),
    )
    if x.dtype in dtypes.FLOATS:
        return RS.resize(x, **attrs)
    if x.dtype == "bool":
        raise node.unsupported("bool input is not supported")
    # integer images: resize in float64, then round half to even and saturate (ONNX saturate_cast)
    info = np.iinfo(dtypes.np_dtype(x.dtype))
    y = RS.resize(E.cast(x, "float64"), **attrs)
    if mode != "nearest" or ctm == "tf_crop_and_resize":
        y = E.clip(M.round(y), float(info.min), float(info.max))
    return E.cast(y, x.dtype)


# ----------------------------------------------------------------------------- windows
def _window_args(node):
    size = _scalar(node, 0, "size")
    if size < 0:
        raise node.unsupported(f"size {size} must be non-negative")
    dtype = onnx_dtype(node.attr("output_datatype", 1), "output_datatype")
    if dtype not in dtypes.FLOATS:
        raise node.unsupported(f"output_datatype {dtype} is not a float type")
    node.check_size((size,), "float64", "the window")
    return size, dtype, bool(node.attr("periodic", 1))


@converter("HannWindow", 17)
def _hann(node):
    size, dtype, periodic = _window_args(node)
    n = np.arange(size, dtype=dtypes.np_dtype(dtype))  # computed in the output type, as ONNX does
    return (np.sin(n * np.pi / (size if periodic else size - 1)) ** 2).astype(dtypes.np_dtype(dtype))


@converter("HammingWindow", 17)
def _hamming(node):
    size, dtype, periodic = _window_args(node)
    n = np.arange(size, dtype=dtypes.np_dtype(dtype))
    alpha = 25.0 / 46.0
    y = alpha - np.cos(n * np.pi * 2 / (size if periodic else size - 1)) * (1 - alpha)
    return y.astype(dtypes.np_dtype(dtype))


@converter("BlackmanWindow", 17)
def _blackman(node):
    size, dtype, periodic = _window_args(node)
    n, length = np.arange(size), size if periodic else size - 1
    y = np.cos(n * (np.pi * 2) / length) * -0.5 + np.cos(n * (np.pi * 4) / length) * 0.08 + 0.42
    return y.astype(dtypes.np_dtype(dtype))


@converter("MelWeightMatrix", 17)
def _mel_weight_matrix(node):
    num_mel_bins = _scalar(node, 0, "num_mel_bins")
    dft_length = _scalar(node, 1, "dft_length")
    sample_rate = _scalar(node, 2, "sample_rate")
    lower = float(np.asarray(node.const(3, "(lower_edge_hertz) ")).reshape(()))
    upper = float(np.asarray(node.const(4, "(upper_edge_hertz) ")).reshape(()))
    dtype = onnx_dtype(node.attr("output_datatype", 1), "output_datatype")
    if num_mel_bins <= 0 or dft_length <= 0 or sample_rate <= 0:
        raise node.unsupported("num_mel_bins, dft_length and sample_rate must be positive")
    bins = dft_length // 2 + 1
    node.check_size((bins, num_mel_bins + 2), "float64", "the mel weight matrix")
    to_mel = lambda hz: 2595 * np.log1p(hz / 700) / np.log(10)  # noqa: E731
    low, high = to_mel(lower), to_mel(upper)
    mel = np.arange(num_mel_bins + 2) * ((high - low) / (num_mel_bins + 2)) + low
    edges = (((dft_length + 1) * (700 * np.expm1(mel / 2595 * np.log(10)))) // sample_rate).astype(int)
    if edges.min() < 0 or edges.max() >= bins:
        raise node.unsupported(
            f"the mel band edges fall outside the {bins} spectrogram bins (check the hertz range)"
        )
    out = np.zeros((bins, num_mel_bins))
    for i in range(num_mel_bins):
        lo, center, hi = edges[i], edges[i + 1], edges[i + 2]
        if center == lo:
            out[center, i] = 1
        else:
            out[lo : center + 1, i] = (np.arange(lo, center + 1) - lo) / (center - lo)
        if hi > center:
            out[center:hi, i] = (hi - np.arange(center, hi)) / (hi - center)
    return out.astype(dtypes.np_dtype(dtype))


# ----------------------------------------------------------------------------- DFT / STFT
def dft_matrix(n_in: int, c_in: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The real matrix W of a DFT along one axis, float64, shape (n_in * c_in, k * c_out).

    Rows are (input sample n, part c) with c = 0 real and 1 imaginary (``c_in`` 1 for a real
    signal); columns are (output bin k, part). The signal is cut or zero-padded to ``length``.
    Forward: k < length (``onesided``: length // 2 + 1). Inverse: 1/length, k < length;
    ``onesided`` inverse is the IRFFT: bins k <= length // 2 in, a real signal out (c_out 1).

    >>> dft_matrix(2, 1, 2, False, False).tolist()  # [x0 + x1, 0, x0 - x1, 0]
    [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, -1.0, 0.0]]
    """
    n = np.arange(n_in)[:, None]
    irfft = inverse and onesided
    bins = length if inverse else (length // 2 + 1 if onesided else length)
    k = np.arange(length if irfft else bins)[None, :]
    # the angle 2 pi k n / length, reduced mod length first; quarter turns exact
    turn = (k * n) % length
    theta = 2 * np.pi * turn / length
    cos, sin = np.cos(theta), np.sin(theta)
    quarter = (4 * turn) % length == 0
    q = (4 * turn) // length % 4
    cos = np.where(quarter, np.array([1.0, 0.0, -1.0, 0.0])[q], cos)
    sin = np.where(quarter, np.array([0.0, 1.0, 0.0, -1.0])[q], sin) * (1 if inverse else -1)
    live = n < length  # samples beyond dft_length are cut
    if irfft:
        # x[m] = 1/L sum_k c_k (Re Y[k] cos - Im Y[k] sin), c_k = 2 but for DC and Nyquist
        weight = np.where((n == 0) | ((length % 2 == 0) & (n == length // 2)), 1.0, 2.0) / length
        weight = np.where(n <= length // 2, weight, 0.0)  # bins past length // 2 are ignored
        parts = [cos * weight, -sin * weight][:c_in]
        w = np.stack(parts, 1)[:, :, :, None]  # (n, c, m, 1)
    else:
        scale = (1.0 / length if inverse else 1.0) * live
        re = np.stack([cos, -sin][:c_in], 1)  # contribution of (n, c) to Re y[k]
        im = np.stack([sin, cos][:c_in], 1)
        w = np.stack([re, im], 3) * scale[:, :, None, None]  # (n, c, k, 2)
    return w.reshape(n_in * c_in, -1) + 0.0  # (no negative zeros)


def _dft(node, x: Tensor, axis: int, length: int, inverse: bool, onesided: bool, window=None) -> Tensor:
    """DFT of x (``[..., n, ..., c]``, c = 1 real or 2 complex) along ``axis``; one matmul."""
    rank = x.rank
    perm = [a for a in range(rank - 1) if a != axis] + [axis, rank - 1]
    xt = S.transpose(x, perm) if perm != list(range(rank)) else x
    lead, n, c = xt.shape[:-2], xt.shape[-2], xt.shape[-1]
    entries = n * c * (length // 2 + 1 if onesided and not inverse else length) * 2
    if entries > MAX_DFT_ENTRIES:
        raise node.unsupported(
            f"a DFT of {n} samples to {length} bins needs a {entries}-entry constant matrix, more than "
            f"flowc builds ({MAX_DFT_ENTRIES}); flowc has no FFT kernel"
        )
    w = dft_matrix(n, c, length, inverse, onesided)
    if window is not None:  # a constant window folds into the matrix
        w = w * np.repeat(np.asarray(window, np.float64), c)[:, None]
    y = N.matmul(S.reshape(xt, (*lead, n * c)), _const(w, x.dtype))
    c_out = 1 if inverse and onesided else 2
    y = S.reshape(y, (*lead, y.shape[-1] // c_out, c_out))
    back = [perm.index(a) for a in range(rank)]
    return S.transpose(y, back) if back != list(range(rank)) else y


def _dft_common(node, axis: int):
    x = node.tensor(0)
    _floats_only(node, x)
    rank = x.rank
    if rank < 2 or x.shape[-1] not in (1, 2):
        raise node.unsupported(f"input {list(x.shape)} must end in a dimension of 1 (real) or 2 (complex)")
    if not -rank <= axis < rank or axis % rank == rank - 1:
        raise node.unsupported(f"axis {axis} must be a signal axis of the rank-{rank} input")
    axis %= rank
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if onesided and inverse and x.shape[-1] != 2:
        raise node.unsupported("an inverse onesided DFT (IRFFT) takes complex input")
    default = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    length = _scalar(node, 1, "dft_length", default)
    if length <= 0:
        raise node.unsupported(f"dft_length {length} must be positive")
    return _dft(node, x, axis, length, inverse, onesided)


@converter("DFT", 17)
def _dft17(node):
    return _dft_common(node, int(node.attr("axis", 1)))


@converter("DFT", 20)
def _dft20(node):
    return _dft_common(node, _scalar(node, 2, "axis", -2))


@converter("STFT", 17)
def _stft(node):
    x = node.tensor(0)
    _floats_only(node, x, "signal")
    if x.rank != 3 or x.shape[-1] not in (1, 2):
        raise node.unsupported(f"signal {list(x.shape)} must be [batch, length, 1 or 2]")
    step = _scalar(node, 1, "frame_step")
    window = None
    if node.has(2):
        window = node.inputs[2]
        if len(window.shape) != 1:
            raise node.unsupported(f"window {list(window.shape)} must be 1-D")
    frame = _scalar(node, 3, "frame_length", window.shape[0] if window is not None else x.shape[1])
    if window is not None and window.shape[0] != frame:
        raise node.unsupported(f"window length {window.shape[0]} != frame_length {frame}")
    if step <= 0 or not 0 < frame <= x.shape[1]:
        raise node.unsupported(
            f"frame_step {step} and frame_length {frame} do not fit signal length {x.shape[1]}"
        )
    frames = 1 + (x.shape[1] - frame) // step
    node.check_size((frames, frame), "int64", "the frame indices")
    starts = np.arange(frames)[:, None] * step + np.arange(frame)[None, :]
    framed = S.gather(x, constant(starts.astype(np.int64)), axis=1)  # [b, frames, frame, c]
    folded = None
    if isinstance(window, np.ndarray):
        folded = window
    elif window is not None:
        framed = E.mul(framed, S.reshape(_cast(window, x.dtype), (frame, 1)))
    onesided = bool(node.attr("onesided", 1))
    return _dft(node, framed, 2, frame, False, onesided, folded)


# ----------------------------------------------------------------------------- optimizers
def _optimizer_inputs(node, groups: int):
    n = len(node.inputs) - 2
    if n <= 0 or n % groups:
        raise node.unsupported(
            f"expects R, T and {groups} tensors per optimized input, got {len(node.inputs)}"
        )
    k = n // groups
    tensors = [node.tensor(i) for i in range(2, len(node.inputs))]
    for t in tensors:
        _floats_only(node, t, f"'{t.name}'")
    return [tensors[g * k : (g + 1) * k] for g in range(groups)]


def _rate(node, x: Tensor) -> tuple[Tensor, Tensor]:
    """R as x's dtype, and T (the update count) as x's dtype."""
    r = _cast(node.tensor(0), x.dtype)
    t = node.tensor(1)
    if math.prod(r.shape) != 1 or math.prod(t.shape) != 1:
        raise node.unsupported("R and T must be scalars")
    return S.reshape(r, ()), S.reshape(_cast(t, x.dtype), ())


@converter("Momentum", 1, domain=TRAINING)
def _momentum(node):
    xs, gs, vs = _optimizer_inputs(node, 3)
    alpha, beta = float(node.attr("alpha")), float(node.attr("beta"))
    norm = float(node.attr("norm_coefficient"))
    mode = node.attr("mode", "standard")
    if mode not in ("standard", "nesterov"):
        raise node.unsupported(f"mode '{mode}' is not standard or nesterov")
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        r, t = _rate(node, x)
        g_reg = x * norm + g
        beta_t = E.where(t > 0, _const(beta, x.dtype), _const(1.0, x.dtype))  # beta is 1 at T = 0
        v_new = v * alpha + beta_t * g_reg
        step = v_new if mode == "standard" else g_reg + v_new * alpha
        new_x.append(x - r * step)
        new_v.append(v_new)
    return new_x + new_v


@converter("Adagrad", 1, domain=TRAINING)
def _adagrad(node):
    xs, gs, hs = _optimizer_inputs(node, 3)
    decay, eps = float(node.attr("decay_factor", 0.0)), float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        r, t = _rate(node, x)
        r = r / (t * decay + 1.0)
        g_reg = x * norm + g
        h_new = h + g_reg * g_reg
        new_x.append(x - r * g_reg / (E.sqrt(h_new) + eps))
        new_h.append(h_new)
    return new_x + new_h


@converter("Adam", 1, domain=TRAINING)
def _adam(node):
    xs, gs, vs, hs = _optimizer_inputs(node, 4)
    alpha, beta = float(node.attr("alpha", 0.9)), float(node.attr("beta", 0.999))
    eps, norm = float(node.attr("epsilon", 1e-6)), float(node.attr("norm_coefficient", 0.0))
    post = float(node.attr("norm_coefficient_post", 0.0))
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        r, t = _rate(node, x)
        g_reg = x * norm + g
        v_new = v * alpha + g_reg * (1 - alpha)
        h_new = h * beta + g_reg * g_reg * (1 - beta)
        # bias correction from T = 1 on; the T = 0 branch never divides by 1 - alpha**0 = 0
        started = t > 0
        one = _const(1.0, x.dtype)
        num = E.where(started, E.sqrt(1.0 - E.pow(_const(beta, x.dtype), t)), one)
        den = E.where(started, 1.0 - E.pow(_const(alpha, x.dtype), t), one)
        x_new = x - r * num / den * (v_new / (E.sqrt(h_new) + eps))
        new_x.append(x_new * (1 - post))
        new_v.append(v_new)
        new_h.append(h_new)
    return new_x + new_v + new_h


# ----------------------------------------------------------------------------- GridSample
_CUBIC_A = -0.75  # GridSample's cubic kernel (PyTorch's)


def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
    """Reflect coordinates outside [lo, hi] by the borders until inside (ONNX GridSample)."""
    span = hi - lo
    if span <= 0:
        return x * 0.0 + lo
    below = x < lo
    dx = E.where(below, lo - x, x - hi)  # distance past the nearer border
    n = M.floor(dx / span)
    r = dx - n * span
    even = E.equal(n - M.floor(n / 2.0) * 2.0, 0.0)
    reflected = E.where(E.equal(below, even), r + lo, hi - r)
    return E.where(E.logical_or(below, x > hi), reflected, x)


def _axis_taps(coord: Tensor, d: int, mode: str, padding: str, align: bool):
    """Neighbours of the sampling points along one spatial axis of length d.

    ``coord`` is the normalized grid coordinate, shape (N, *out, 1). Returns the int64 input
    indices (N, *out, taps), their weights (same shape, None for nearest) and, for zeros
    padding, the mask of taps inside the input.
    """
    lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
    x = (coord + 1.0) / 2.0 * float(d - 1) if align else ((coord + 1.0) * float(d) - 1.0) / 2.0
    if mode == "nearest":
        x = M.round(x)  # half to even, as ONNX and PyTorch
    if padding == "border":
        x = E.where(E.logical_or(x < lo, x > hi), E.clip(x, 0.0, d - 1.0), x)
    elif padding == "reflection":
        x = _reflect(x, lo, hi)
    else:  # zeros: far outside every tap reads zero anyway; keeps the index arithmetic small
        x = E.clip(x, -3.0, d + 2.0)
    weights = None
    if mode == "nearest":
        taps = x
    else:
        base = M.floor(x)
        t = x - base
        if mode == "linear":
            offsets, parts = [0.0, 1.0], [1.0 - t, t]
        else:
            a, u = _CUBIC_A, 1.0 - t
            offsets = [-1.0, 0.0, 1.0, 2.0]
            parts = [
                ((a * (t + 1.0) - 5 * a) * (t + 1.0) + 8 * a) * (t + 1.0) - 4 * a,
                ((a + 2) * t - (a + 3)) * t * t + 1.0,
                ((a + 2) * u - (a + 3)) * u * u + 1.0,
                ((a * (u + 1.0) - 5 * a) * (u + 1.0) + 8 * a) * (u + 1.0) - 4 * a,
            ]
        taps = base + _const(offsets, x.dtype)
        weights = S.concat(parts, axis=-1)
    if padding == "reflection":
        taps = _reflect(taps, lo, hi)
    idx = E.cast(taps, "int64")
    valid = None
    if padding == "zeros":
        valid = E.logical_and(idx >= 0, idx < d)
        if weights is not None:
            weights = E.where(valid, weights, 0.0)
    idx = E.clip(idx, 0, d - 1)
    return idx, weights, valid


def _grid_sample(node, mode: str):
    x, grid = node.tensor(0), node.tensor(1)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic"):
        raise node.unsupported(f"mode '{mode}' is not supported")
    padding = node.attr("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise node.unsupported(f"padding_mode '{padding}' is not supported")
    align = bool(node.attr("align_corners", 0))
    r = x.rank - 2
    if r < 1 or (node.opset < 20 and r != 2):
        raise node.unsupported(
            f"input {list(x.shape)} needs {'2' if node.opset < 20 else '1 or more'} spatial axes"
        )
    if grid.rank != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        raise node.unsupported(f"grid {list(grid.shape)} does not fit input {list(x.shape)}")
    _floats_only(node, grid, "grid")
    if mode != "nearest" and x.dtype not in dtypes.FLOATS:
        raise node.unsupported(f"mode '{mode}' needs float input, got {x.dtype}")
    n, c, dims, out = x.shape[0], x.shape[1], x.shape[2:], grid.shape[1:-1]
    q, p = math.prod(out), math.prod(dims)
    if q == 0 or c == 0:
        return E.cast(_const(np.zeros((n, c, *out)), "float64"), x.dtype)
    if p == 0:
        raise node.unsupported("the input has an empty spatial axis")
    per_axis = []
    for i, d in enumerate(dims):  # grid lists the coordinates innermost axis first
        coord = S.slice_(grid, [r - 1 - i], [r - i], axes=[r + 1])
        per_axis.append(_axis_taps(coord, d, mode, padding, align))
    # combine the axes by broadcasting: (N, *out, t_0, ..., t_r-1)
    strides = [math.prod(dims[i + 1 :]) for i in range(r)]
    flat = weight = valid = None
    for i, (idx, w, ok) in enumerate(per_axis):
        shape = (n, *out) + tuple(idx.shape[-1] if j == i else 1 for j in range(r))
        term = S.reshape(idx * strides[i] if strides[i] != 1 else idx, shape)
        flat = term if flat is None else flat + term
        if w is not None:
            w = S.reshape(w, shape)
            weight = w if weight is None else weight * w
        if ok is not None and w is None:
            ok = S.reshape(ok, shape)
            valid = ok if valid is None else E.logical_and(valid, ok)
    taps = math.prod(flat.shape[r + 1 :])
    flat = S.reshape(flat, (n, 1, q * taps))
    picked = I.gather_elements(S.reshape(x, (n, c, p)), S.expand(flat, (n, c, q * taps)), axis=2)
    picked = S.reshape(picked, (n, c, q, taps))
    if weight is not None:
        weight = S.reshape(_cast(weight, x.dtype), (n, 1, q, taps))
        y = R.reduce_sum(picked * weight, axes=[3])
    else:
        if valid is not None:
            zero = _const(0, x.dtype) if x.dtype != "bool" else _const(False, "bool")
            picked = E.where(S.reshape(valid, (n, 1, q, taps)), picked, zero)
        y = S.reshape(picked, (n, c, q))
    return S.reshape(y, (n, c, *out))


@converter("GridSample", 16)
def _grid_sample16(node):
    return _grid_sample(node, node.attr("mode", "bilinear"))


@converter("GridSample", 20)
def _grid_sample20(node):
    return _grid_sample(node, node.attr("mode", "linear"))
