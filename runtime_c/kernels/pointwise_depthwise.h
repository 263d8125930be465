/* flowc runtime: a 1x1 expansion convolution and the depthwise convolution after it as one
 * step, channels as vector lanes (the inverted-residual blocks of MobileNetV2/V3, MnasNet and
 * EfficientNet: 1x1 conv + activation, depthwise conv + activation).
 *
 * Apart, the expansion writes a tensor cexp / cin times the size of its input (EfficientNet-B0's
 * 16 -> 96 at 112x112: 4.8 MB) and the depthwise kernel reads it back, copies its planes into
 * stride phases or transposes them into channel blocks, then computes a few taps per value.
 * Here each item, a block of FC_PWDW_LANES expanded channels of one image, goes in passes of two
 * channel vectors down the image row by row: the expanded rows the next output row needs are
 * computed into a ring of (kh - 1) * dh + 1 padded rows of cells (all the padded rows for small
 * planes), a cell being one position's channels, two vectors (FC_PWDW_EXP positions at once:
 * each input value broadcast once, times the vectors of the channels' weights), and get the
 * first activation while in L1; then an output row is summed per vector from the ring's rows,
 * FC_PWDW_CELLS cells at once as in kernels/conv.h's channel blocks, gets the second
 * activation, and its whole chunks of FC_VF_VL positions are transposed out into the NCHW
 * planes. The expanded tensor never exists; a part's scratch is the ring and an item's output
 * cells.
 *
 * The ring's size (rows, cells) comes with the geometry (codegen/backends/c/pwdw.py, _ring).
 * x (n, cin, h, w); y (n, cexp, oh, ow). Weights, padded with zeros to cp channels (a multiple
 * of FC_PWDW_LANES), in blocks of FC_PWDW_LANES channels (an item's weights are contiguous: with
 * the channels strided, a block's vectors fell into a few cache sets): w1 (cp / LANES, cin,
 * LANES), the expansion's; b1 (cp); w2 (cp / LANES, kh * kw, LANES), the depthwise taps; b2
 * (cp). The activations are elementwise functions with kernels/conv.h's fc_dwconv_epilogue
 * signature applied in place to one row of floats (or NULL); the ring's pad cells stay 0, as
 * the depthwise convolution's zero padding is.
 * Each expanded value sums its bias and the input channels in order; each output its bias and
 * its taps row by row.
 */
#ifndef FLOWC_KERNELS_POINTWISE_DEPTHWISE_H
#define FLOWC_KERNELS_POINTWISE_DEPTHWISE_H

#include "kernels/conv.h"

#define FC_PWDW_LANES 32 /* channels an item: two AVX-512 vectors */
#define FC_PWDW_CELLS 8  /* output cells summed at once */
#if FC_VF_VL >= 16
#define FC_PWDW_EXP 12 /* expanded cells summed at once (two vectors each: 24 sums in registers) */
#else
#define FC_PWDW_EXP 6
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FC_PWDW_PREFETCH(p) __builtin_prefetch(p)
#else
#define FC_PWDW_PREFETCH(p) ((void)(p))
#endif

typedef struct {
    long n, cin, cexp, cp; /* images, input and expanded channels, cexp padded */
    long h, w, oh, ow;
    long kh, kw, sh, sw, ph, pw, dh, dw; /* the depthwise conv: kernel, stride, leading pads, dilation */
    long bands;                          /* bands of output rows an item is split into (threads) */
    long rows, cells; /* the ring: padded rows kept (a window's, or the whole plane's), cells a row */
} fc_pwdw_geom;

/* Floats of a part's scratch: the ring (rows x cells cells of up to FC_PWDW_LANES floats) and
 * the output cells of an item's channels. */
FC_VF_INLINE long fc_pwdw_scratch_floats(const fc_pwdw_geom *g) {
    return FC_PWDW_LANES * (g->rows * g->cells + g->oh * g->ow);
}

/* The ring cell (cs floats) of input position p (row p / w, column p % w). */
FC_VF_INLINE float *fc_pwdw_cell_(float *ring, long rows, long cells, long cs, long p, const fc_pwdw_geom *g) {
    return ring + ((p / g->w + g->ph) % rows * cells + g->pw + p % g->w) * cs;
}

/* The expanded cells of input positions [p0, p1) of image xi into the ring, for nv (1 or 2)
 * vectors of channels, whose weights start at w1 (FC_PWDW_LANES floats an input channel, the
 * second vector's FC_VF_VL after the first's) and biases are bias[0 .. nv): FC_PWDW_EXP
 * positions at once, each input value broadcast once for both vectors, the last group
 * overlapping the one before (its cells are written twice, with the same values). */
FC_VF_INLINE void fc_pwdw_expand_(const float *FC_RESTRICT xi, const float *FC_RESTRICT w1, const fc_vf *bias,
                                  float *ring, long rows, long cells, long p0, long p1, int nv,
                                  const fc_pwdw_geom *g) {
    enum { NE = FC_PWDW_EXP, VL = FC_VF_VL };
    const long hw = g->h * g->w, n = p1 - p0, groups = n < NE ? 0 : (n + NE - 1) / NE, cs = nv * VL;
    long grp, p, k, q;
    for (grp = 0; grp < groups; grp++) { /* counts, not `p + NE <= p1` loops: see conv.h */
        const long s = grp * NE + NE <= n ? p0 + grp * NE : p1 - NE;
        const float *xs = xi + s;
        fc_vf a[NE], b[NE];
        for (q = 0; q < NE; q++) {
            a[q] = bias[0];
            b[q] = bias[nv - 1];
        }
        for (k = 0; k < g->cin; k++) {
            const fc_vf wa = fc_vf_load(w1 + k * FC_PWDW_LANES);
            const fc_vf wb = nv == 2 ? fc_vf_load(w1 + k * FC_PWDW_LANES + VL) : wa;
            FC_PWDW_PREFETCH(xs + k * hw + 4 * NE);
            for (q = 0; q < NE; q++) {
                const fc_vf xv = FC_VF_SPLAT(xs[k * hw + q]);
                a[q] = xv * wa + a[q];
                if (nv == 2)
                    b[q] = xv * wb + b[q];
            }
        }
        for (q = 0; q < NE; q++) {
            float *c = fc_pwdw_cell_(ring, rows, cells, cs, s + q, g);
            fc_vf_store(c, a[q]);
            if (nv == 2)
                fc_vf_store(c + VL, b[q]);
        }
    }
    for (p = groups ? p1 : p0; p < p1; p++) {
        float *c = fc_pwdw_cell_(ring, rows, cells, cs, p, g);
        fc_vf a = bias[0], b = nv == 2 ? bias[1] : bias[0];
        for (k = 0; k < g->cin; k++) {
            const fc_vf xv = FC_VF_SPLAT(xi[k * hw + p]);
            a = xv * fc_vf_load(w1 + k * FC_PWDW_LANES) + a;
            if (nv == 2)
                b = xv * fc_vf_load(w1 + k * FC_PWDW_LANES + VL) + b;
        }
        fc_vf_store(c, a);
        if (nv == 2)
            fc_vf_store(c + VL, b);
    }
}

/* Padded rows [r0, r1) into the ring (cells of cs = nv * FC_VF_VL floats): the input rows
 * among them expanded as one run, each then given act1 (or NULL); pad rows zero. */
FC_VF_INLINE void fc_pwdw_fill_(const float *FC_RESTRICT xi, const float *FC_RESTRICT w1, const fc_vf *bias,
                                float *ring, long rows, long cells, long r0, long r1, int nv,
                                fc_dwconv_epilogue act1, const fc_pwdw_geom *g) {
    const long a = r0 - g->ph > 0 ? r0 - g->ph : 0, b = r1 - g->ph < g->h ? r1 - g->ph : g->h;
    const long cs = nv * FC_VF_VL;
    long r, k;
    for (r = r0; r < r1; r++) {
        if (r - g->ph >= 0 && r - g->ph < g->h)
            continue;
        for (k = 0; k < cells * nv; k++)
            fc_vf_store(ring + r % rows * cells * cs + k * FC_VF_VL, FC_VF_SPLAT(0.0f));
    }
    if (a >= b)
        return;
    fc_pwdw_expand_(xi, w1, bias, ring, rows, cells, a * g->w, b * g->w, nv, g);
    for (r = a; act1 && r < b; r++) {
        float *c = fc_pwdw_cell_(ring, rows, cells, cs, r * g->w, g);
        act1(c, g->w * cs, 1, g->w * cs, 0, 0, NULL);
    }
}

/* Output row i of the channel vector at offset off of the ring's cells (cs floats), into
 * ot's row i (cells of FC_VF_VL). */
FC_VF_INLINE void fc_pwdw_row_(const float *FC_RESTRICT ring, long rows, long cells, long cs, long off,
                               const float *FC_RESTRICT w2, fc_vf bias, float *FC_RESTRICT ot, long i,
                               const fc_pwdw_geom *g) {
    enum { VL = FC_VF_VL, NB = FC_PWDW_CELLS };
    const long row_blocks = (g->ow + NB - 1) / NB;
    long jb, q, t1, t2;
    for (jb = 0; jb < row_blocks; jb++) {
        const long j0 = jb * NB, n = g->ow - j0 < NB ? g->ow - j0 : NB;
        fc_vf a[NB];
        for (q = 0; q < NB; q++)
            a[q] = bias;
        for (t1 = 0; t1 < g->kh; t1++) {
            const float *srow = ring + (i * g->sh + t1 * g->dh) % rows * cells * cs + off;
            for (t2 = 0; t2 < g->kw; t2++) {
                const fc_vf wv = fc_vf_load(w2 + (t1 * g->kw + t2) * FC_PWDW_LANES);
                const float *src = srow + (j0 * g->sw + t2 * g->dw) * cs;
                for (q = 0; q < NB; q++)
                    a[q] = wv * fc_vf_load(src + q * g->sw * cs) + a[q];
            }
        }
        for (q = 0; q < n; q++)
            fc_vf_store(ot + (i * g->ow + j0 + q) * VL, a[q]);
    }
}

/* Output cells [q0, q0 + count) of ot (count <= FC_VF_VL) into the planes y + l * ohw of the
 * vector's first `lanes` channels: a register transpose for a whole vector of both. */
FC_VF_INLINE void fc_pwdw_out_(const float *FC_RESTRICT ot, long q0, long count, float *FC_RESTRICT y, long ohw,
                               long lanes) {
    long l, q;
    if (lanes == FC_VF_VL && count == FC_VF_VL) {
        fc_dwconv_cb_out_(ot, q0, y, ohw);
        return;
    }
    for (l = 0; l < lanes; l++)
        for (q = 0; q < count; q++)
            y[l * ohw + q0 + q] = ot[(q0 + q) * FC_VF_VL + l];
}

/* Output rows [i0, i1) of the nv (1 or 2) channel vectors from c0 on of image b: rows expanded
 * into the ring as the output rows need them, each output row summed per vector, given act2
 * and its whole chunks of FC_VF_VL positions (counted from the first row's start) transposed
 * out, the last chunk overlapping the one before (or, under FC_VF_VL positions, lane by lane).
 * w1, w2: the vectors' first weights (blocked as above). */
FC_VF_INLINE void fc_pwdw_pass_(const float *x, const float *w1, const float *b1, const float *w2, const float *b2,
                                float *y, float *mean, const fc_pwdw_geom *g, float *scratch, long b, long c0, int nv,
                                long i0, long i1, fc_dwconv_epilogue act1, fc_dwconv_epilogue act2) {
    enum { VL = FC_VF_VL };
    const long hw = g->h * g->w, ohw = g->oh * g->ow, cs = nv * VL, window = (g->kh - 1) * g->dh + 1;
    const long q0 = i0 * g->ow, q1 = i1 * g->ow; /* the output positions */
    const float *xi = x + b * g->cin * hw;
    const long rows = g->rows, cells = g->cells;
    long next = i0 * g->sh, chunk[2] = {0, 0}, i, k, s;
    float *ring = scratch, *ot = scratch + FC_PWDW_LANES * rows * cells;
    fc_vf bias1[2] = {FC_VF_SPLAT(0.0f), FC_VF_SPLAT(0.0f)}, bias2[2] = {FC_VF_SPLAT(0.0f), FC_VF_SPLAT(0.0f)};
    fc_vf total[2] = {FC_VF_SPLAT(0.0f), FC_VF_SPLAT(0.0f)};
    for (s = 0; s < nv; s++) {
        bias1[s] = fc_vf_load(b1 + c0 + s * VL);
        bias2[s] = fc_vf_load(b2 + c0 + s * VL);
    }
    for (k = 0; k < rows * cells * nv; k++) /* the pad columns: expanded rows leave them 0 */
        fc_vf_store(ring + k * VL, FC_VF_SPLAT(0.0f));
    for (i = i0; i < i1; i++) {
        const long need = i * g->sh + window; /* padded rows read: < need */
        if (next < i * g->sh)
            next = i * g->sh; /* rows between the windows (stride past the kernel) */
        if (next < need) {
            const long end = rows > window ? (i1 - 1) * g->sh + window : need; /* a whole-plane ring at once */
            fc_pwdw_fill_(xi, w1, bias1, ring, rows, cells, next, end, nv, act1, g);
            next = end;
        }
        for (s = 0; s < nv; s++) {
            const long lanes = g->cexp - (c0 + s * VL) < VL ? g->cexp - (c0 + s * VL) : VL;
            float *os = ot + s * ohw * VL, *ys = y + (b * g->cexp + c0 + s * VL) * ohw;
            fc_pwdw_row_(ring, rows, cells, cs, s * VL, w2 + s * VL, bias2[s], os, i, g);
            if (act2)
                act2(os + i * g->ow * VL, g->ow * VL, 1, g->ow * VL, 0, 0, NULL);
            if (mean) { /* the row's sum, then the rows' */
                fc_vf row = FC_VF_SPLAT(0.0f);
                for (k = 0; k < g->ow; k++)
                    row = row + fc_vf_load(os + (i * g->ow + k) * VL);
                total[s] = total[s] + row;
            }
            if (mean && i == i1 - 1) {
                float m[FC_VF_VL];
                long l;
                fc_vf_store(m, total[s] * FC_VF_SPLAT(1.0f / (float)ohw));
                for (l = 0; l < lanes; l++)
                    mean[b * g->cexp + c0 + s * VL + l] = m[l];
            }
            for (; q0 + (chunk[s] + 1) * VL <= (i + 1) * g->ow; chunk[s]++)
                fc_pwdw_out_(os, q0 + chunk[s] * VL, VL, ys, ohw, lanes);
            if (i == i1 - 1 && q0 + chunk[s] * VL < q1) /* the rest: the last chunk overlapping */
                fc_pwdw_out_(os, q1 - VL >= q0 ? q1 - VL : q0, q1 - q0 < VL ? q1 - q0 : VL, ys, ohw, lanes);
        }
    }
}

/* Units [lo, hi) of the n * cp / FC_PWDW_LANES * bands (image, block of FC_PWDW_LANES
 * channels, band of output rows), image-major, bands innermost; 0 and all of them for the
 * whole step. With one band, mean (or NULL) gets each output plane's mean (n, cexp): the sum
 * of each row's, in row order, over oh * ow. Disjoint ranges may run at once, each with its own scratch
 * (fc_pwdw_scratch_floats), and give the values of one call for all. A unit goes in passes of
 * two vectors of channels (one where the second would hold only padding); a band starts its
 * ring afresh (a window's rows less a stride computed again). */
FC_VF_INLINE void fc_pwdw_f32(const float *x, const float *w1, const float *b1, const float *w2, const float *b2,
                              float *y, float *mean, const fc_pwdw_geom *g, float *scratch, long lo, long hi,
                              fc_dwconv_epilogue act1, fc_dwconv_epilogue act2) {
    enum { VL = FC_VF_VL, PASS = 2 * FC_VF_VL };
    const long per = g->cp / FC_PWDW_LANES, taps = g->kh * g->kw;
    long unit, pass;
    for (unit = lo; unit < hi; unit++) {
        const long item = unit / g->bands, band = unit % g->bands, b = item / per, blk = item % per;
        const long i0 = band * g->oh / g->bands, i1 = (band + 1) * g->oh / g->bands;
        for (pass = 0; pass < FC_PWDW_LANES / PASS && i0 < i1; pass++) {
            const long c0 = blk * FC_PWDW_LANES + pass * PASS;
            const float *w1p = w1 + blk * g->cin * FC_PWDW_LANES + pass * PASS;
            const float *w2p = w2 + blk * taps * FC_PWDW_LANES + pass * PASS;
            if (c0 >= g->cexp)
                break;
            if (c0 + VL < g->cexp)
                fc_pwdw_pass_(x, w1p, b1, w2p, b2, y, mean, g, scratch, b, c0, 2, i0, i1, act1, act2);
            else
                fc_pwdw_pass_(x, w1p, b1, w2p, b2, y, mean, g, scratch, b, c0, 1, i0, i1, act1, act2);
        }
    }
}

#endif /* FLOWC_KERNELS_POINTWISE_DEPTHWISE_H */
