"""Sliding windows, shared by convolution and pooling: output sizes, padding (explicit, or
SAME as ONNX's auto_pad), and the strided views the numpy references read.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ._util import spatial


# ----------------------------------------------------------------------------- windows
def window_out(size, k, stride, pad_b, pad_e, dilation, ceil_mode=False) -> int:
    """Output length of a sliding window (conv or pool) along one axis."""
    span = dilation * (k - 1) + 1
    room = size + pad_b + pad_e - span
    if room < 0:
        raise ShapeError(f"window of span {span} is larger than the padded input {size + pad_b + pad_e}")
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_b:
        out -= 1  # the last window must start inside the input or the leading pad
    return out


def _window_resolve(types, attrs, kernel=None):
    n = types[0].rank - 2
    if n < 1:
        raise ShapeError(f"expected (N, C, *spatial) input, got rank {types[0].rank}")
    out = dict(attrs)
    out["strides"] = spatial(attrs, "strides", n, 1)
    out["dilations"] = spatial(attrs, "dilations", n, 1)
    out["pads"] = spatial(attrs, "pads", 2 * n, 0)
    if any(s < 1 for s in out["strides"]) or any(d < 1 for d in out["dilations"]):
        raise ShapeError(f"strides {out['strides']} and dilations {out['dilations']} must be >= 1")
    if any(p < 0 for p in out["pads"]):
        raise ShapeError(f"pads {out['pads']} must be >= 0")
    if "kernel_shape" in attrs and len(attrs["kernel_shape"]) != n:
        raise ShapeError(f"kernel_shape {attrs['kernel_shape']} must have {n} values")
    return out


def _out_spatial(in_shape, kernel, attrs, ceil_mode=False):
    n = len(kernel)
    return tuple(
        window_out(
            in_shape[i],
            kernel[i],
            attrs["strides"][i],
            attrs["pads"][i],
            attrs["pads"][n + i],
            attrs["dilations"][i],
            ceil_mode,
        )
        for i in range(n)
    )


def _windows(in_spatial, kernel, attrs, out_spatial):
    """For each kernel offset: (offset tuple, slices into the padded input)."""
    s, d = attrs["strides"], attrs["dilations"]
    for k in np.ndindex(*kernel):
        yield (
            k,
            tuple(
                slice(k[i] * d[i], k[i] * d[i] + s[i] * (out_spatial[i] - 1) + 1, s[i])
                for i in range(len(kernel))
            ),
        )


def _padded(x, attrs, out_spatial, kernel, value):
    """x padded by pads, plus what ceil_mode windows reach past the end."""
    n = len(kernel)
    s, d, p = attrs["strides"], attrs["dilations"], attrs["pads"]
    width = [(0, 0), (0, 0)]
    for i in range(n):
        need = (out_spatial[i] - 1) * s[i] + d[i] * (kernel[i] - 1) + 1
        end = max(p[n + i], need - x.shape[2 + i] - p[i])
        width.append((p[i], end))
    return np.pad(x, width, mode="constant", constant_values=value)




def same_pads(in_spatial, kernel, strides, dilations, upper=True) -> tuple[int, ...]:
    """Pads for 'same' output size ceil(in / stride); the odd pixel goes at the end if upper."""
    begins, ends = [], []
    for i, k, s, d in zip(in_spatial, kernel, strides, dilations):
        total = max((-(-i // s) - 1) * s + d * (k - 1) + 1 - i, 0)
        small = total // 2
        begins.append(small if upper else total - small)
        ends.append(total - small if upper else small)
    return tuple(begins + ends)


def _pairs(v, n, what):
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    if len(v) != n:
        raise ShapeError(f"{what} {v} must have {n} values")
    return v
