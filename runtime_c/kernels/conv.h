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
    long a = fc_win_ceil_div(lo - start, d);
    long b = fc_win_ceil_div(hi - start, d);
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

#endif /* FLOWC_KERNELS_CONV_H */
