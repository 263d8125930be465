/* flowc runtime: direct convolution and transposed convolution, channels-first.
 *
 * Any number of spatial axes up to 3: a kernel with fewer is given leading 1s (in = {1, 1, W}
 * for 1-D, {1, H, W} for 2-D) with stride 1, pad 0 and dilation 1 on the unused axes.
 * Every function is static inline and reads its geometry through a pointer, so a caller that
 * passes a `static const` geometry gets loops specialized to constants.
 *
 * Also home of the window helpers shared with kernels/pool.h (fc_win_*).
 */
#ifndef FLOWC_KERNELS_CONV_H
#define FLOWC_KERNELS_CONV_H

#include "flowc_rt.h"

typedef struct {
    long n, c, m, group;            /* batch, input channels, output channels, groups */
    long in[3], k[3], out[3];       /* spatial input, kernel and output sizes */
    long stride[3], pad[3], dil[3]; /* pad = pads at the beginning of each axis */
} fc_conv_geom;

/* ceil(a / b) for b > 0 and any sign of a, without overflow (C division truncates). */
FC_INLINE long fc_win_ceil_div(long a, long b) {
    return a / b + (a % b > 0);
}

/* The kernel offsets [*t0, *t1) for which window j along one axis (cells j*s - p + t*d)
 * lands inside [lo, hi); empty (*t0 == *t1) when none does. */
FC_INLINE void fc_win_span(long j, long s, long p, long d, long k, long lo, long hi, long *t0,
                           long *t1) {
    long start = j * s - p;
    long a = d == 1 ? lo - start : fc_win_ceil_div(lo - start, d); /* no division when undilated */
    long b = d == 1 ? hi - start : fc_win_ceil_div(hi - start, d);
    *t0 = a > 0 ? a : 0;
    *t1 = b < k ? b : k;
    if (*t1 < *t0)
        *t1 = *t0;
}

/* The transpose of a window: the window index j in [0, out) whose kernel offset t covers
 * cell i (j*s - p + t*d == i), or -1 when there is none. */
FC_INLINE long fc_win_src(long i, long t, long s, long p, long d, long out) {
    long q = i + p - t * d;
    if (q < 0 || q % s != 0 || q / s >= out)
        return -1;
    return q / s;
}

#define FC_INC "kernels/conv.inc"
#define FC_WANT_FLOATS
#include "kernels/instantiate.h"

/* ------------------------------------------------------------------ float32 depthwise
 * y = conv(x, w) + b for 2-D (or 1-D: h = kh = 1) convolution where every group is one input
 * channel: x (n, c, h, w), w (m, 1, kh, kw) with m a multiple of c (output channel m reads
 * input channel m / (m/c)), b (m) or NULL, y (n, m, oh, ow). Any size, stride, dilation and
 * padding.
 *
 * Per input channel, the plane is first copied into sh * sw "phase" planes of the zero-padded
 * input: phase (pr, pc) holds padded cells (i*sh + pr, j*sw + pc) for i < rows, j < cols with
 *     rows = oh + (kh-1)*dh / sh,   cols = ow + (kw-1)*dw / sw      (integer division).
 * Kernel tap (t1, t2) of output (i, j) is then cell (i + t1*dh/sh, j + t2*dw/sw) of phase
 * (t1*dh % sh, t2*dw % sw): every tap reads its phase plane contiguously, for any stride, and
 * no output needs a bounds check. The outputs are computed on the (oh, cols) grid, row after
 * row as one flat run of (oh-1)*cols + ow values (the last cols - ow of each row are thrown
 * away), FC_VF_VL at a time with the taps innermost, then copied out row by row. Wide planes
 * go through in bands of output rows, each with the phase rows it reads (a few KiB, in L1).
 * Scratch: fc_dwconv_scratch_floats(g) floats (the phase planes, then the flat run).
 * Each output sums the bias and its taps' products in one fixed order (not the generic
 * kernel's, so results may differ from it in the last bits).
 */
#include "kernels/vecf.h"

typedef struct {
    long n, c, m;                     /* batch, input channels, output channels */
    long h, w, oh, ow;                /* input and output planes */
    long kh, kw, sh, sw, ph, pw, dh, dw; /* kernel, stride, leading pads, dilation */
    long rows, cols;                  /* each phase plane, as above */
} fc_dwconv_geom;

FC_VF_INLINE long fc_dwconv_scratch_floats(const fc_dwconv_geom *g) {
    return g->sh * g->sw * g->rows * g->cols + (g->oh - 1) * g->cols + g->ow;
}

/* Input row src (w floats) into the sw phase rows dst + pc*plane of one padded row: column
 * c goes to phase (c + pw) % sw, column (c + pw) / sw, unless that is past cols; pad cells
 * hold fill (0 for convolution, -inf for max pooling). */
FC_VF_INLINE void fc_dwconv_row_(const float *FC_RESTRICT src, float *FC_RESTRICT dst, float fill,
                                 const fc_dwconv_geom *g) {
    const long plane = g->rows * g->cols;
    const long cmax = g->sw * g->cols - g->pw < g->w ? g->sw * g->cols - g->pw : g->w;
    long pc, j, c = 0;
    for (pc = 0; pc < g->sw; pc++) { /* zeros left and right of the input's columns */
        long j0 = fc_win_ceil_div(g->pw - pc, g->sw), j1 = fc_win_ceil_div(cmax + g->pw - pc, g->sw);
        float *d = dst + pc * plane;
        j0 = j0 < 0 ? 0 : j0 > g->cols ? g->cols : j0;
        j1 = j1 < j0 ? j0 : j1 > g->cols ? g->cols : j1;
        for (j = 0; j < j0; j++)
            d[j] = fill;
        for (j = j1; j < g->cols; j++)
            d[j] = fill;
    }
    if (g->sw == 1) {
        if (cmax > 0)
            memcpy(dst + g->pw, src, (size_t)cmax * sizeof *src);
        return;
    }
#if FC_VF_HAS_SHUFFLE
    if (g->sw == 2) { /* even columns to one phase, odd ones to the other */
        float *ev = dst + g->pw % 2 * plane + g->pw / 2, *od = dst + (g->pw + 1) % 2 * plane + (g->pw + 1) / 2;
        for (; c + 2 * FC_VF_VL <= cmax; c += 2 * FC_VF_VL) {
            const fc_vf a = fc_vf_load(src + c), b = fc_vf_load(src + c + FC_VF_VL);
            fc_vf_store(ev + c / 2, FC_VF_EVEN(a, b));
            fc_vf_store(od + c / 2, FC_VF_ODD(a, b));
        }
    }
#endif
    for (; c < cmax; c++)
        dst[(c + g->pw) % g->sw * plane + (c + g->pw) / g->sw] = src[c];
}

/* The phase planes of one input plane xp, pads holding fill. */
FC_VF_INLINE void fc_dwconv_phases_(const float *FC_RESTRICT xp, float *FC_RESTRICT ph, float fill,
                                    const fc_dwconv_geom *g) {
    const long plane = g->rows * g->cols;
    long pr, pc, i, j;
    for (pr = 0; pr < g->sh; pr++) {
        for (i = 0; i < g->rows; i++) {
            const long r = i * g->sh + pr - g->ph;
            float *dst = ph + pr * g->sw * plane + i * g->cols;
            if (r >= 0 && r < g->h) {
                fc_dwconv_row_(xp + r * g->w, dst, fill, g);
            } else {
                for (pc = 0; pc < g->sw; pc++)
                    for (j = 0; j < g->cols; j++)
                        dst[pc * plane + j] = fill;
            }
        }
    }
}

/* FC_VF_VL * nv outputs of the flat run from o on (nv is 1 to 4; 1 keeps two partial sums,
 * even and odd taps, to halve the chain of dependent additions). */
FC_VF_INLINE void fc_dwconv_block_(const float *FC_RESTRICT ph, const float *FC_RESTRICT wm,
                                   float bias, float *FC_RESTRICT out, long o, int nv,
                                   const fc_dwconv_geom *g) {
    const long plane = g->rows * g->cols;
    fc_vf a0 = FC_VF_SPLAT(bias), a1 = FC_VF_SPLAT(0.0f), a2 = a1, a3 = a1;
    long t1, t2;
    for (t1 = 0; t1 < g->kh; t1++) {
        const long v1 = t1 * g->dh;
        const float *row = ph + (v1 % g->sh) * g->sw * plane + v1 / g->sh * g->cols + o;
        for (t2 = 0; t2 < g->kw; t2++) {
            const long v2 = t2 * g->dw;
            const float *src = row + (v2 % g->sw) * plane + v2 / g->sw;
            const fc_vf wv = FC_VF_SPLAT(wm[t1 * g->kw + t2]);
            if (nv == 1) {
                if ((t1 * g->kw + t2) % 2)
                    a1 = wv * fc_vf_load(src) + a1;
                else
                    a0 = wv * fc_vf_load(src) + a0;
                continue;
            }
            a0 = wv * fc_vf_load(src) + a0;
            a1 = wv * fc_vf_load(src + FC_VF_VL) + a1;
            if (nv > 2)
                a2 = wv * fc_vf_load(src + 2 * FC_VF_VL) + a2;
            if (nv > 3)
                a3 = wv * fc_vf_load(src + 3 * FC_VF_VL) + a3;
        }
    }
    if (nv == 1) {
        fc_vf_store(out + o, a0 + a1);
        return;
    }
    a1 = a1 + FC_VF_SPLAT(bias);
    a2 = a2 + FC_VF_SPLAT(bias);
    a3 = a3 + FC_VF_SPLAT(bias);
    fc_vf_store(out + o, a0);
    fc_vf_store(out + o + FC_VF_VL, a1);
    if (nv > 2)
        fc_vf_store(out + o + 2 * FC_VF_VL, a2);
    if (nv > 3)
        fc_vf_store(out + o + 3 * FC_VF_VL, a3);
}

/* The flat run of one output plane. */
FC_VF_INLINE void fc_dwconv_plane_(const float *FC_RESTRICT ph, const float *FC_RESTRICT wm,
                                   float bias, float *FC_RESTRICT out, const fc_dwconv_geom *g) {
    const long len = (g->oh - 1) * g->cols + g->ow;
    const long plane = g->rows * g->cols;
    long o = 0, t1, t2;
    for (; o + 4 * FC_VF_VL <= len; o += 4 * FC_VF_VL)
        fc_dwconv_block_(ph, wm, bias, out, o, 4, g);
    if (o + 2 * FC_VF_VL <= len) {
        fc_dwconv_block_(ph, wm, bias, out, o, 2, g);
        o += 2 * FC_VF_VL;
    }
    for (; o + FC_VF_VL <= len; o += FC_VF_VL)
        fc_dwconv_block_(ph, wm, bias, out, o, 1, g);
    if (o < len && len >= FC_VF_VL) { /* the last vector again, overlapping: same values */
        fc_dwconv_block_(ph, wm, bias, out, len - FC_VF_VL, 1, g);
        return;
    }
    for (; o < len; o++) {
        float acc = bias;
        for (t1 = 0; t1 < g->kh; t1++) {
            const long v1 = t1 * g->dh;
            for (t2 = 0; t2 < g->kw; t2++) {
                const long v2 = t2 * g->dw;
                acc += wm[t1 * g->kw + t2]
                       * ph[((v1 % g->sh) * g->sw + v2 % g->sw) * plane + v1 / g->sh * g->cols
                            + v2 / g->sw + o];
            }
        }
        out[o] = acc;
    }
}

/* An elementwise epilogue of the depthwise kernel, with the signature of fc_sgemm_epilogue:
 * applied in place to cols outputs at c (rows is 1) of output plane i0 (image i0 / m, channel
 * i0 % m), from position j0 of the plane on; arg is the caller's. */
typedef void (*fc_dwconv_epilogue)(float *c, long ldc, long rows, long cols, long i0, long j0,
                                   const void *arg);

/* The epilogue of whole output planes [q0, q1) of y (ohw outputs each, m planes an image):
 * with flat, one call (one row) per image's run of them; else one per plane. */
FC_VF_INLINE void fc_dwconv_epi_planes_(float *y, long ohw, long m, long q0, long q1, int flat,
                                        fc_dwconv_epilogue epi, const void *arg) {
    while (q0 < q1) {
        const long image_end = (q0 / m + 1) * m, end = !flat ? q0 + 1 : image_end < q1 ? image_end : q1;
        epi(y + q0 * ohw, (end - q0) * ohw, 1, (end - q0) * ohw, q0, 0, arg);
        q0 = end;
    }
}

/* Stride 1, dilation 1: one output plane straight from the input plane, with no padded
 * copy. Output row i sums tap rows [t0, t1) (those inside the input); its columns [j0, j1),
 * whose whole window is inside the row, are the flat-run blocks above on the input rows
 * themselves (a geometry of t1 - t0 unit-stride tap rows, cols = w); the other columns sum
 * their taps inside the row one by one. */
FC_VF_INLINE void fc_dwconv_s1_plane_(const float *FC_RESTRICT xp, const float *FC_RESTRICT wm, float bias,
                                      float *FC_RESTRICT out, const fc_dwconv_geom *g) {
    const long ow = g->ow, pw = g->pw;
    long j0 = pw < ow ? pw : ow, j1 = g->w - g->kw + 1 + pw, i;
    j1 = j1 > ow ? ow : j1 < j0 ? j0 : j1;
    for (i = 0; i < g->oh; i++) {
        const long t0 = g->ph - i > 0 ? g->ph - i : 0;
        const long t1 = g->h + g->ph - i < g->kh ? g->h + g->ph - i : g->kh;
        const long row = (i - g->ph) * g->w - pw; /* x index of tap (0, 0) of column 0, less j */
        float *o = out + i * ow;
        long j, t, u;
        if (j1 - j0 >= FC_VF_VL) { /* then j0 == pw: xr below is inside the plane */
            /* counts, not `j + step <= n` loops (GCC's loop analysis misfires on those) */
            const long n = j1 - j0, quads = n / (4 * FC_VF_VL), rest = n / FC_VF_VL - 4 * quads;
            const float *xr = xp + (row + t0 * g->w + j0), *wr = wm + t0 * g->kw;
            fc_dwconv_geom r = *g;
            long q;
            r.kh = r.rows = t1 - t0;
            r.sh = r.sw = r.dh = r.dw = 1;
            r.cols = g->w;
            for (q = 0; q < quads; q++)
                fc_dwconv_block_(xr, wr, bias, o + j0, q * 4 * FC_VF_VL, 4, &r);
            if (rest == 3) /* the 1 to 3 vectors left, as one block */
                fc_dwconv_block_(xr, wr, bias, o + j0, quads * 4 * FC_VF_VL, 3, &r);
            else if (rest == 2)
                fc_dwconv_block_(xr, wr, bias, o + j0, quads * 4 * FC_VF_VL, 2, &r);
            else if (rest == 1)
                fc_dwconv_block_(xr, wr, bias, o + j0, quads * 4 * FC_VF_VL, 1, &r);
            if (n % FC_VF_VL) /* the last vector again, overlapping */
                fc_dwconv_block_(xr, wr, bias, o + j0, n - FC_VF_VL, 1, &r);
        }
        for (j = 0; j < ow; j++) { /* the border columns (all of them when the row is short) */
            long u0, u1;
            float acc = bias;
            if (j == j0 && j1 - j0 >= FC_VF_VL)
                j = j1;
            if (j >= ow)
                break;
            u0 = pw - j > 0 ? pw - j : 0;
            u1 = g->w + pw - j < g->kw ? g->w + pw - j : g->kw;
            for (t = t0; t < t1; t++)
                for (u = u0; u < u1; u++)
                    acc += wm[t * g->kw + u] * xp[row + j + t * g->w + u];
            o[j] = acc;
        }
    }
}

/* Output rows per band whose phase rows take about 8 KiB, so that a strided plane's phases
 * are written and read again while in L1: 96 planes 112x112 -> 56x56, 3x3 stride 2 (57x57
 * phase planes, 52 KiB whole) 420 -> 295 us; 16 KiB bands 327 us, 32 KiB 440. */
FC_VF_INLINE long fc_dwconv_band_(const fc_dwconv_geom *g) {
    const long fit = 2048 / (g->sh * g->sw * g->cols) - (g->rows - g->oh);
    return fit < 1 ? 1 : fit;
}

/* The geometry of output rows [i, i + band) (fewer at the end): its phases start at padded
 * row i*sh, input row i*sh - ph. */
FC_VF_INLINE fc_dwconv_geom fc_dwconv_band_geom_(const fc_dwconv_geom *g, long i, long band) {
    fc_dwconv_geom b = *g;
    b.oh = i + band < g->oh ? band : g->oh - i;
    b.rows = b.oh + (g->rows - g->oh);
    b.ph = g->ph - i * g->sh;
    return b;
}

/* Input planes [lo, hi) of the n * c (plane i * c + j: image i, channel j), each with its
 * m / c output planes; 0 and n * c for all. Disjoint ranges may run at once, each with its own
 * scratch, and give the values of one call for all. epi (or NULL) is applied to each output
 * plane in runs of whole rows of about 4 KiB, right after they are stored (still in L1); with
 * flat set (an epilogue that reads its inputs at the same flat index as the output, or
 * scalars), planes under 1024 outputs are instead given it in runs of consecutive planes of an
 * image of about 4 KiB, as one row (i0 the run's first plane, j0 0): 7x7 planes one by one paid
 * a call and a partial vector per 49 outputs (SiLU: 1 ns an output instead of 0.4). */
FC_VF_INLINE void fc_dwconv_epi_f32(const float *x, const float *w, const float *b, float *y,
                                    const fc_dwconv_geom *g, float *scratch, long lo, long hi,
                                    fc_dwconv_epilogue epi, const void *arg, int flat) {
    const long mult = g->m / g->c, taps = g->kh * g->kw;
    const long chunk = g->ow >= 1024 ? 1 : 1024 / g->ow; /* output rows per epilogue call */
    float *ph = scratch, *run = scratch + g->sh * g->sw * g->rows * g->cols;
    long p, k, i, r;
    /* stride 1, dilation 1 and rows of at least 4 vectors: no phase planes (narrower rows run
     * faster as the phase planes' one flat run) */
    const int unit = g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 && g->ow >= 4 * FC_VF_VL;
    const long ohw = g->oh * g->ow;
    const long band = fc_dwconv_band_(g);
    const int runs = epi && flat && ohw < 1024;
    long run0 = lo * mult; /* the first output plane not yet given the epilogue (runs) */
    for (p = lo; p < hi; p++) {
        for (k = 0; k < mult; k++) {
            const long m = p % g->c * mult + k; /* output channel */
            float *ym = y + (p * mult + k) * g->oh * g->ow;
            if (unit) {
                fc_dwconv_s1_plane_(x + p * g->h * g->w, w + m * taps, b ? b[m] : 0.0f, ym, g);
                for (i = 0; i < g->oh && epi && !runs; i += chunk) {
                    const long i1 = i + chunk < g->oh ? i + chunk : g->oh;
                    epi(ym + i * g->ow, (i1 - i) * g->ow, 1, (i1 - i) * g->ow, p * mult + k, i * g->ow, arg);
                }
            }
            for (i = 0; i < g->oh && !unit; i += band) { /* bands of output rows */
                const fc_dwconv_geom bg = fc_dwconv_band_geom_(g, i, band);
                fc_dwconv_phases_(x + p * g->h * g->w, ph, 0.0f, &bg);
                fc_dwconv_plane_(ph, w + m * taps, b ? b[m] : 0.0f, run, &bg);
                for (r = 0; r < bg.oh; r++)
                    memcpy(ym + (i + r) * g->ow, run + r * g->cols, (size_t)g->ow * sizeof *ym);
                if (epi && !runs)
                    epi(ym + i * g->ow, bg.oh * g->ow, 1, bg.oh * g->ow, p * mult + k, i * g->ow, arg);
            }
            if (runs) {
                const long q = p * mult + k + 1; /* output planes done */
                if ((q - run0) * ohw >= 1024 || q == hi * mult) {
                    fc_dwconv_epi_planes_(y, ohw, g->m, run0, q, 1, epi, arg);
                    run0 = q;
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ channel blocks
 * Small planes (7x7, 14x14) leave the flat run above mostly per-plane overhead: the phase
 * copy, whose short stores the next vector loads then wait on, and the copy out. For one output
 * channel per input channel (m == c), fc_dwconv_cb_epi_f32 computes FC_VF_VL planes at once
 * with the channels as the vector lanes: the block's input planes are transposed (16 x 16
 * register transposes where FC_VF_HAS_TRANSPOSE16) into hp x wp cells of FC_VF_VL floats
 * whose pads stay zero, its taps and biases likewise; every output cell is a vector sum over
 * the taps, FC_DWCONV_CB_CELLS cells of a row at a time (independent sums; cells past the
 * row's end are computed from the slack after the cells and thrown away); the outputs are
 * transposed back into the planes, which then get the epilogue as in fc_dwconv_epi_f32 (flat:
 * the block's planes of one image as one run). Planes left over (fewer than FC_VF_VL) go
 * through fc_dwconv_epi_f32, as all of them do when h * w or oh * ow is under FC_VF_VL. Each
 * output sums the bias, then its taps row by row. */
#define FC_DWCONV_CB_CELLS 8

/* The hp x wp cells of the padded input that the outputs' windows cover. */
FC_VF_INLINE void fc_dwconv_cb_window_(const fc_dwconv_geom *g, long *hp, long *wp) {
    *hp = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    *wp = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
}

/* Floats of the channel blocks' scratch (after fc_dwconv_scratch_floats(g)) for vectors of
 * vl lanes: the padded input cells and their slack, the taps, the biases, the outputs. */
FC_VF_INLINE long fc_dwconv_cb_floats(const fc_dwconv_geom *g, long vl) {
    long hp, wp;
    fc_dwconv_cb_window_(g, &hp, &wp);
    return vl * (hp * wp + FC_DWCONV_CB_CELLS * g->sw + g->kh * g->kw + 1 + g->oh * g->ow);
}

/* Input cells [q0, q0 + FC_VF_VL) of the FC_VF_VL planes src + l * sstride (lane l, w wide)
 * into the padded cells t (wp wide, pads ph above and pw left) as vectors of lanes, those of
 * them that land inside the cells' rows r1 and columns c1. */
FC_VF_INLINE void fc_dwconv_cb_in_(const float *FC_RESTRICT src, long sstride, long q0, long w, long wp,
                                   long ph, long pw, long r1, long c1, float *FC_RESTRICT t) {
#if FC_VF_HAS_TRANSPOSE16
    fc_vf r[16];
    long l, q;
    for (l = 0; l < 16; l++)
        r[l] = fc_vf_load(src + l * sstride + q0);
    FC_VF_TRANSPOSE16(r);
    for (q = 0; q < 16; q++) {
        const long row = (q0 + q) / w + ph, col = (q0 + q) % w + pw;
        if (row < r1 && col < c1)
            fc_vf_store(t + (row * wp + col) * 16, r[q]);
    }
#else
    long l, q;
    for (q = 0; q < FC_VF_VL; q++) {
        const long row = (q0 + q) / w + ph, col = (q0 + q) % w + pw;
        if (row < r1 && col < c1)
            for (l = 0; l < FC_VF_VL; l++)
                t[(row * wp + col) * FC_VF_VL + l] = src[l * sstride + q0 + q];
    }
#endif
}

/* Output cells [q0, q0 + FC_VF_VL) of ot (vectors of lanes) into the FC_VF_VL planes
 * y + l * ystride. */
FC_VF_INLINE void fc_dwconv_cb_out_(const float *FC_RESTRICT ot, long q0, float *FC_RESTRICT y, long ystride) {
#if FC_VF_HAS_TRANSPOSE16
    fc_vf r[16];
    long l;
    for (l = 0; l < 16; l++)
        r[l] = fc_vf_load(ot + (q0 + l) * 16);
    FC_VF_TRANSPOSE16(r);
    for (l = 0; l < 16; l++)
        fc_vf_store(y + l * ystride + q0, r[l]);
#else
    long l, q;
    for (l = 0; l < FC_VF_VL; l++)
        for (q = 0; q < FC_VF_VL; q++)
            y[l * ystride + q0 + q] = ot[(q0 + q) * FC_VF_VL + l];
#endif
}

FC_VF_INLINE void fc_dwconv_cb_epi_f32(const float *x, const float *w, const float *b, float *y,
                                       const fc_dwconv_geom *g, float *scratch, long lo, long hi,
                                       fc_dwconv_epilogue epi, const void *arg, int flat) {
    enum { VL = FC_VF_VL, NB = FC_DWCONV_CB_CELLS };
    const long taps = g->kh * g->kw, ohw = g->oh * g->ow, hw = g->h * g->w;
    long hp, wp, r1, c1, tcells;
    float *t = scratch + fc_dwconv_scratch_floats(g), *wt, *bt, *ot;
    fc_dwconv_cb_window_(g, &hp, &wp);
    r1 = g->h + g->ph < hp ? g->h + g->ph : hp; /* the cells input rows and columns land in */
    c1 = g->w + g->pw < wp ? g->w + g->pw : wp;
    tcells = hp * wp + NB * g->sw;
    wt = t + tcells * VL;
    bt = wt + taps * VL;
    ot = bt + VL;
    /* counts, not `p + VL <= hi` loops (GCC's loop analysis misfires on those); no blocks
     * for planes under FC_VF_VL cells (the transposes move whole vectors of them) */
    const long blocks = ohw < VL || hw < VL ? 0 : (hi - lo) / VL, row_blocks = (g->ow + NB - 1) / NB;
    const long in_chunks = (hw + VL - 1) / VL, out_chunks = (ohw + VL - 1) / VL;
    long blk, k;
    for (k = 0; k < tcells; k++) /* the pads: the planes' cells overwrite the rest */
        fc_vf_store(t + k * VL, FC_VF_SPLAT(0.0f));
    for (blk = 0; blk < blocks; blk++) {
        const long p = lo + blk * VL;
        long l, i, jb, q;
        for (k = 0; k < in_chunks; k++) /* the last chunk overlaps the one before */
            fc_dwconv_cb_in_(x + p * hw, hw, k * VL + VL <= hw ? k * VL : hw - VL, g->w, wp, g->ph, g->pw, r1, c1, t);
        for (l = 0; l < VL; l++) {
            const long ch = (p + l) % g->c;
            for (k = 0; k < taps; k++)
                wt[k * VL + l] = w[ch * taps + k];
            bt[l] = b ? b[ch] : 0.0f;
        }
        for (i = 0; i < g->oh; i++)
            for (jb = 0; jb < row_blocks; jb++) {
                const long j0 = jb * NB, n = g->ow - j0 < NB ? g->ow - j0 : (long)NB;
                const fc_vf bias = fc_vf_load(bt);
                fc_vf a[NB];
                long t1, t2;
                for (q = 0; q < NB; q++)
                    a[q] = bias;
                for (t1 = 0; t1 < g->kh; t1++)
                    for (t2 = 0; t2 < g->kw; t2++) {
                        const fc_vf wv = fc_vf_load(wt + (t1 * g->kw + t2) * VL);
                        const float *src = t + ((i * g->sh + t1 * g->dh) * wp + j0 * g->sw + t2 * g->dw) * VL;
                        for (q = 0; q < NB; q++)
                            a[q] = wv * fc_vf_load(src + q * g->sw * VL) + a[q];
                    }
                for (q = 0; q < n; q++)
                    fc_vf_store(ot + (i * g->ow + j0 + q) * VL, a[q]);
            }
        for (k = 0; k < out_chunks; k++)
            fc_dwconv_cb_out_(ot, k * VL + VL <= ohw ? k * VL : ohw - VL, y + p * ohw, ohw);
        if (epi)
            fc_dwconv_epi_planes_(y, ohw, g->m, p, p + VL, flat, epi, arg);
    }
    if (lo + blocks * VL < hi)
        fc_dwconv_epi_f32(x, w, b, y, g, scratch, lo + blocks * VL, hi, epi, arg, flat);
}

/* fc_dwconv_cb_epi_f32 without an epilogue. */
FC_VF_INLINE void fc_dwconv_cb_f32(const float *x, const float *w, const float *b, float *y,
                                   const fc_dwconv_geom *g, float *scratch, long lo, long hi) {
    fc_dwconv_cb_epi_f32(x, w, b, y, g, scratch, lo, hi, NULL, NULL, 0);
}

/* fc_dwconv_epi_f32 without an epilogue. */
FC_VF_INLINE void fc_dwconv_f32(const float *x, const float *w, const float *b, float *y,
                                const fc_dwconv_geom *g, float *scratch, long lo, long hi) {
    fc_dwconv_epi_f32(x, w, b, y, g, scratch, lo, hi, NULL, NULL, 0);
}

#endif /* FLOWC_KERNELS_CONV_H */
