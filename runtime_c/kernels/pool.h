/* flowc runtime: max and average pooling and their gradients, channels-first.
 *
 * Spatial axes are always 3 (leading 1s, stride 1, pads 0, dilation 1 on unused axes).
 * Window position j along an axis covers input cells j*stride - pad + t*dil for t in [0, k);
 * cells outside [0, in) are pads and never read. out[] is given and may hold ceil_mode
 * windows that run past the end pads. Every window must contain at least one input cell
 * (the graph's shape rule guarantees it: pads are smaller than the window span).
 *
 * max_pool: floats and ints (i8, u8, i32, i64); avg_pool and both gradients: floats.
 */
#ifndef FLOWC_KERNELS_POOL_H
#define FLOWC_KERNELS_POOL_H

#include "flowc_rt.h"
#include "kernels/conv.h" /* the window helpers fc_win_* */

typedef struct {
    long planes; /* n * c */
    long in[3], k[3], out[3];
    long stride[3], pad[3], pad_end[3], dil[3];
    int count_include_pad; /* avg pool divisor: cells inside input+pads (1) or input (0) */
} fc_pool_geom;

/* The kernel offsets [*t0, *t1) of window j on axis ax that land inside the input. */
FC_INLINE void fc_pool_span(const fc_pool_geom *g, int ax, long j, long *t0, long *t1) {
    fc_win_span(j, g->stride[ax], g->pad[ax], g->dil[ax], g->k[ax], 0, g->in[ax], t0, t1);
}

/* The average pool divisor of window j on axis ax: its cells inside [0, in), or inside
 * [-pad, in + pad_end) with count_include_pad (ceil_mode cells past the end pads never count). */
FC_INLINE long fc_pool_count(const fc_pool_geom *g, int ax, long j) {
    long t0, t1;
    long lo = g->count_include_pad ? -g->pad[ax] : 0;
    long hi = g->in[ax] + (g->count_include_pad ? g->pad_end[ax] : 0);
    fc_win_span(j, g->stride[ax], g->pad[ax], g->dil[ax], g->k[ax], lo, hi, &t0, &t1);
    return t1 - t0;
}

/* The window j on axis ax that covers input cell i with kernel offset t, or -1. */
FC_INLINE long fc_pool_src(const fc_pool_geom *g, int ax, long i, long t) {
    return fc_win_src(i, t, g->stride[ax], g->pad[ax], g->dil[ax], g->out[ax]);
}

#define FC_INC "kernels/pool.inc"
#define FC_WANT_FLOATS
#define FC_WANT_INTS
#include "kernels/instantiate.h"

/* ------------------------------------------------------------------ float32, 2-D fast path
 * fc_pool2d_f32: max_pool (is_max 1) or avg_pool (0) of float32 with at most two spatial axes,
 * the same results as fc_max_pool_f32 / fc_avg_pool_f32 (sums in another order). It runs on
 * the stride-phase planes of kernels/conv.h's depthwise convolution: d describes the same
 * windows as g with n = 1, c = m = planes; pads hold -inf for max and 0 for sums, so no window
 * needs a bounds check. Averages divide each sum by the count of fc_pool_count.
 * A plane holding a NaN goes through fc_max_pool_f32 (NaN propagation as in numpy).
 * It computes planes [lo, hi) (0 and planes for all): disjoint ranges may run at once, each
 * with its own scratch, and give the values of one call for all.
 * Scratch: fc_dwconv_scratch_floats(d) + ow floats.
 */
FC_VF_INLINE void fc_pool2d_block_(const float *FC_RESTRICT ph, float *FC_RESTRICT out, long o, int nv,
                                   int is_max, const fc_dwconv_geom *g) {
    const long plane = g->rows * g->cols;
    const fc_vf init = FC_VF_SPLAT(is_max ? -HUGE_VALF : 0.0f);
    fc_vf a[4];
    long t1, t2;
    int v;
    for (v = 0; v < 4; v++)
        a[v] = init;
    for (t1 = 0; t1 < g->kh; t1++) {
        const long v1 = t1 * g->dh;
        const float *row = ph + (v1 % g->sh) * g->sw * plane + v1 / g->sh * g->cols + o;
        for (t2 = 0; t2 < g->kw; t2++) {
            const long v2 = t2 * g->dw;
            const float *src = row + (v2 % g->sw) * plane + v2 / g->sw;
            for (v = 0; v < nv; v++) {
                const fc_vf x = fc_vf_load(src + v * FC_VF_VL);
                a[v] = is_max ? fc_vf_max2(a[v], x) : a[v] + x;
            }
        }
    }
    for (v = 0; v < nv; v++)
        fc_vf_store(out + o + v * FC_VF_VL, a[v]);
}

/* Output rows [i0, i0 + b->oh) of one plane, b the band's geometry (fc_dwconv_epi_f32's
 * bands): the phase rows they read, the flat run over them, the rows copied (averages divided)
 * out to yp. */
FC_VF_INLINE void fc_pool2d_band_(const float *FC_RESTRICT xp, float *FC_RESTRICT yp, const fc_pool_geom *pg,
                                  const fc_dwconv_geom *b, long i0, int is_max, float *FC_RESTRICT ph,
                                  float *FC_RESTRICT run, const float *FC_RESTRICT cw) {
    const long len = (b->oh - 1) * b->cols + b->ow, plane = b->rows * b->cols;
    /* counts, not `o + step <= len` loops (GCC's loop analysis misfires on those when the
     * geometry is not all constants) */
    const long quads = len / (4 * FC_VF_VL), ones = len / FC_VF_VL - 4 * quads;
    long o, q, i, j, t1, t2;
    fc_dwconv_phases_(xp, ph, is_max ? -HUGE_VALF : 0.0f, b);
    for (q = 0; q < quads; q++)
        fc_pool2d_block_(ph, run, q * 4 * FC_VF_VL, 4, is_max, b);
    for (q = 0; q < ones; q++)
        fc_pool2d_block_(ph, run, (4 * quads + q) * FC_VF_VL, 1, is_max, b);
    o = (4 * quads + ones) * FC_VF_VL;
    if (o < len && len >= FC_VF_VL) {
        fc_pool2d_block_(ph, run, len - FC_VF_VL, 1, is_max, b);
        o = len;
    }
    for (; o < len; o++) {
        float acc = is_max ? -HUGE_VALF : 0.0f;
        for (t1 = 0; t1 < b->kh; t1++) {
            const long v1 = t1 * b->dh;
            for (t2 = 0; t2 < b->kw; t2++) {
                const long v2 = t2 * b->dw;
                const float v = ph[((v1 % b->sh) * b->sw + v2 % b->sw) * plane + v1 / b->sh * b->cols
                                   + v2 / b->sw + o];
                acc = is_max ? (acc < v ? v : acc) : acc + v;
            }
        }
        run[o] = acc;
    }
    for (i = 0; i < b->oh; i++) {
        const float *r = run + i * b->cols;
        float *yr = yp + (i0 + i) * b->ow;
        if (is_max) {
            memcpy(yr, r, (size_t)b->ow * sizeof *yr);
        } else {
            const float ch = (float)fc_pool_count(pg, 1, i0 + i);
            for (j = 0; j < b->ow; j++)
                yr[j] = r[j] / (ch * cw[j]);
        }
    }
}

FC_VF_INLINE void fc_pool2d_f32(const float *x, float *y, const fc_pool_geom *pg, const fc_dwconv_geom *g,
                                int is_max, float *scratch, long lo, long hi) {
    const long len = (g->oh - 1) * g->cols + g->ow, plane = g->rows * g->cols;
    const long band = fc_dwconv_band_(g);
    float *ph = scratch, *run = scratch + g->sh * g->sw * plane, *cw = run + len;
    long pl, i, j;
    if (!is_max)
        for (j = 0; j < g->ow; j++)
            cw[j] = (float)fc_pool_count(pg, 2, j);
    for (pl = lo; pl < hi; pl++) {
        const float *xp = x + pl * g->h * g->w;
        float *yp = y + pl * g->oh * g->ow;
        if (is_max && fc_vf_any_nan(xp, g->h * g->w)) {
            fc_pool_geom one = *pg;
            one.planes = 1;
            fc_max_pool_f32(xp, yp, &one);
            continue;
        }
        for (i = 0; i < g->oh; i += band) {
            const fc_dwconv_geom b = fc_dwconv_band_geom_(g, i, band);
            fc_pool2d_band_(xp, yp, pg, &b, i, is_max, ph, run, cw);
        }
    }
}

#endif /* FLOWC_KERNELS_POOL_H */
