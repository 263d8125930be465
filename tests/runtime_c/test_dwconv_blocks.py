"""The channel-block depthwise kernel (fc_dwconv_cb_f32 in kernels/conv.h: FC_VF_VL planes at
once, the channels as vector lanes) against the plane-by-plane one, on every vector width the
header supports (16 with register transposes, 8, 4 and the scalar build), for whole ranges
and for part ranges that leave planes over."""

from __future__ import annotations

import numpy as np
import pytest

from .test_sgemm import BUILDS, build_param

CDEF = """
long cb_floats(long h, long w, long k, long s, long p);
void both(const float *x, const float *w, const float *b, float *y_cb, float *y_ref, float *scratch,
          long n, long c, long h, long wd, long k, long s, long p, long lo, long hi);
"""

SOURCE = r"""
#include "kernels/conv.h"

static fc_dwconv_geom geom(long n, long c, long h, long w, long k, long s, long p) {
    fc_dwconv_geom g;
    g.n = n; g.c = c; g.m = c; g.h = h; g.w = w;
    g.oh = (h + 2 * p - k) / s + 1; g.ow = (w + 2 * p - k) / s + 1;
    g.kh = g.kw = k; g.sh = g.sw = s; g.ph = g.pw = p; g.dh = g.dw = 1;
    g.rows = g.oh + (k - 1) / s; g.cols = g.ow + (k - 1) / s;
    return g;
}

long cb_floats(long h, long w, long k, long s, long p) {
    const fc_dwconv_geom g = geom(1, 1, h, w, k, s, p);
    return fc_dwconv_scratch_floats(&g) + fc_dwconv_cb_floats(&g, 16);
}

void both(const float *x, const float *w, const float *b, float *y_cb, float *y_ref, float *scratch,
          long n, long c, long h, long wd, long k, long s, long p, long lo, long hi) {
    const fc_dwconv_geom g = geom(n, c, h, wd, k, s, p);
    fc_dwconv_cb_f32(x, w, b, y_cb, &g, scratch, lo, hi);
    fc_dwconv_f32(x, w, b, y_ref, &g, scratch, lo, hi);
}
"""

CASES = [  # (n, c, h, w, k, stride, pad)
    (1, 48, 7, 7, 5, 1, 2),  # EfficientNet's last blocks
    (2, 40, 7, 7, 3, 1, 1),  # blocks across images, planes left over
    (1, 36, 14, 14, 3, 2, 1),  # strided, the input bigger than the output
    (1, 20, 9, 8, 5, 2, 2),  # odd sizes, pads bigger than the last stride window
    (1, 17, 4, 4, 3, 1, 1),  # 16 cells: one transpose chunk each way
    (1, 18, 9, 6, 5, 2, 2),  # 15 output cells: too few for the blocks, all planes one by one
]


@pytest.mark.parametrize("build", [build_param(n) for n in ("native", "avx2", "default", "scalar")])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}x{c[2]}x{c[3]}-k{c[4]}s{c[5]}" for c in CASES])
def test_channel_blocks_equal_the_plane_kernel(c_lib, build, case):
    ffi, lib = c_lib(CDEF, SOURCE, BUILDS[build][0])
    n, c, h, w, k, s, p = case
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    scratch = np.zeros(lib.cb_floats(h, w, k, s, p), np.float32)
    for lo, hi in ((0, n * c), (3, n * c - 2)):
        y_cb = np.full((n, c, oh, ow), np.nan, np.float32)
        y_ref = y_cb.copy()
        ptr = [ffi.from_buffer("float[]", a) for a in (x, wt, b, y_cb, y_ref, scratch)]
        lib.both(*ptr, n, c, h, w, k, s, p, lo, hi)
        got, want = y_cb.reshape(n * c, -1)[lo:hi], y_ref.reshape(n * c, -1)[lo:hi]
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
        assert np.isnan(y_cb.reshape(n * c, -1)[:lo]).all() and np.isnan(y_cb.reshape(n * c, -1)[hi:]).all()
