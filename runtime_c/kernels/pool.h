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
#include "kernels/conv.h"  /* the window helpers fc_win_* */
#include "kernels/vmath.h" /* float32 <-> bits */

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

/* Whether g is the common CNN pooling: 2x2 windows at stride 2 over the last two axes, no
 * padding or dilation, no partial windows (ceil mode): pool.inc has fast paths for it. */
FC_INLINE int fc_pool_is_2x2(const fc_pool_geom *g) {
    int ax;
    if (g->k[0] != 1 || g->stride[0] != 1 || g->out[0] != g->in[0]) return 0;
    for (ax = 0; ax < 3; ax++)
        if (g->pad[ax] || g->pad_end[ax] || g->dil[ax] != 1) return 0;
    for (ax = 1; ax < 3; ax++)
        if (g->k[ax] != 2 || g->stride[ax] != 2 || g->out[ax] != g->in[ax] / 2) return 0;
    return 1;
}

/* float32 max_pool_grad over 2x2 windows at stride 2 (fc_pool_is_2x2): each window's cells
 * compared in fc_max_pool_grad's order (the first strictly greater wins), every cell of gx
 * written once (an odd last row or column, which no window covers, zeroed) with the value the
 * general loop writes (0 + gy). The winner picks the bits through masks, not branches: the
 * maximum's place is random, and branching on it ran 10x slower (LeNet's 32x6x28x28: 249 us
 * against 26). */
FC_INLINE void fc_max_pool_grad_2x2_f32(const float *x, const float *gy, float *gx, const fc_pool_geom *g) {
    const long h = g->in[1], w = g->in[2], ow = g->out[2], oh = g->out[1], rows = g->planes * g->in[0];
    long r, o1, o2;
    for (r = 0; r < rows; r++) {
        const float *xp = x + r * h * w;
        float *gp = gx + r * h * w;
        for (o1 = 0; o1 < oh; o1++) {
            const float *x0 = xp + 2 * o1 * w, *x1 = x0 + w;
            float *g0 = gp + 2 * o1 * w, *g1 = g0 + w;
            for (o2 = 0; o2 < ow; o2++) {
                const float a = x0[2 * o2], b = x0[2 * o2 + 1], c = x1[2 * o2], e = x1[2 * o2 + 1];
                const uint32_t v = fc_vm_f32_to_ubits_(0.0f + gy[o2]);
                const uint32_t mb = 0u - (uint32_t)(b > a);
                const float m1 = b > a ? b : a;
                const uint32_t mc = 0u - (uint32_t)(c > m1);
                const float m2 = c > m1 ? c : m1;
                const uint32_t me = 0u - (uint32_t)(e > m2);
                g0[2 * o2] = fc_vm_ubits_to_f32_(v & ~(mb | mc | me));
                g0[2 * o2 + 1] = fc_vm_ubits_to_f32_(v & mb & ~(mc | me));
                g1[2 * o2] = fc_vm_ubits_to_f32_(v & mc & ~me);
                g1[2 * o2 + 1] = fc_vm_ubits_to_f32_(v & me);
            }
            if (w & 1) g0[w - 1] = g1[w - 1] = 0.0f;
            gy += ow;
        }
        if (h & 1) memset(gp + (h - 1) * w, 0, (size_t)w * sizeof *gp);
    }
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
