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

#endif /* FLOWC_KERNELS_POOL_H */
