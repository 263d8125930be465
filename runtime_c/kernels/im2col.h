/* im2col for convolution as a matrix product (float32, channels-first, 1 to 3 spatial axes).
 *
 * For one image and one group: x holds cg channels of in[0] x in[1] x in[2] values; col gets
 * one row per (channel, kernel offset) and one column per output position:
 *     col[((c*k0 + t0)*k1 + t1)*k2 + t2][(o0*out1 + o1)*out2 + o2]
 *         = x[c][o0*s0 - p0 + t0*d0][o1*s1 - p1 + t1*d1][o2*s2 - p2 + t2*d2]   (0 outside)
 * so that y[m][p] = sum_r W[m][r] * col[r][p] with W the group's weights as (mg, cg*k0*k1*k2).
 * The geometry is fc_conv_geom (kernels/conv.h); no allocation.
 */
#ifndef FC_KERNELS_IM2COL_H
#define FC_KERNELS_IM2COL_H

#include "flowc_rt.h"
#include "kernels/conv.h"

/* gcc makes the row copies below memcpy calls, which cost more than rows of a few dozen
 * floats (LeNet-5's training step spent 11% of its time in memcpy); keep them loops. */
#if defined(__GNUC__) && !defined(__clang__)
#define FC_IM2COL_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define FC_IM2COL_LOOPS
#endif

/* First and one-past-last output index whose input index o*s - p + t*d is in [0, n). */
FC_INLINE void fc_im2col_range(long n, long out, long s, long p, long off, long *lo, long *hi) {
    long a = p - off, b = n - 1 + p - off;  /* need a <= o*s <= b */
    long l = a <= 0 ? 0 : (a + s - 1) / s;
    long h = b < 0 ? 0 : b / s + 1;
    *lo = l < out ? l : out;
    *hi = h < out ? (h > *lo ? h : *lo) : out;
}

/* Output rows [r0, r1) (row r = o0 * out[1] + o1, each out[2] positions long) of the im2col
 * matrix of cg channels: col has cg * k[0] * k[1] * k[2] rows of L = (r1 - r0) * out[2]
 * values, row (c, t0, t1, t2) holding the input under kernel tap (t0, t1, t2) of channel c at
 * every output position of the slice (0 in the padding). */
FC_IM2COL_LOOPS FC_INLINE void fc_im2col_rows_ld_f32(const float *FC_RESTRICT x, float *FC_RESTRICT col,
                                                      const fc_conv_geom *g, long cg, long r0, long r1, long ld) {
    const long L = ld;
    long c, t0, t1, t2, r, o2;
    for (c = 0; c < cg; ++c)
        for (t0 = 0; t0 < g->k[0]; ++t0)
            for (t1 = 0; t1 < g->k[1]; ++t1)
                for (t2 = 0; t2 < g->k[2]; ++t2) {
                    float *row = col + (((c * g->k[0] + t0) * g->k[1] + t1) * g->k[2] + t2) * L;
                    long lo2, hi2;
                    fc_im2col_range(g->in[2], g->out[2], g->stride[2], g->pad[2], t2 * g->dil[2], &lo2, &hi2);
                    long o0 = r0 / g->out[1], o1 = r0 % g->out[1]; /* row r, counted on (no division a row) */
                    for (r = r0; r < r1; ++r, o1 = o1 + 1 < g->out[1] ? o1 + 1 : (++o0, 0)) {
                        const long i0 = o0 * g->stride[0] - g->pad[0] + t0 * g->dil[0];
                        const long i1 = o1 * g->stride[1] - g->pad[1] + t1 * g->dil[1];
                        float *dst = row + (r - r0) * g->out[2];
                        if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1]) {
                            for (o2 = 0; o2 < g->out[2]; ++o2) dst[o2] = 0.0f;
                            continue;
                        }
                        {
                            /* index, not pointer: base alone may be negative */
                            const long base = ((c * g->in[0] + i0) * g->in[1] + i1) * g->in[2]
                                              - g->pad[2] + t2 * g->dil[2];
                            const long s2 = g->stride[2];
                            for (o2 = 0; o2 < lo2; ++o2) dst[o2] = 0.0f;
                            if (s2 == 1)
                                for (o2 = lo2; o2 < hi2; ++o2) dst[o2] = x[base + o2];
                            else
                                for (o2 = lo2; o2 < hi2; ++o2) dst[o2] = x[base + o2 * s2];
                            for (o2 = hi2; o2 < g->out[2]; ++o2) dst[o2] = 0.0f;
                        }
                    }
                }
}

/* The same with rows of exactly the slice's positions. */
FC_INLINE void fc_im2col_rows_f32(const float *FC_RESTRICT x, float *FC_RESTRICT col, const fc_conv_geom *g, long cg,
                                  long r0, long r1) {
    fc_im2col_rows_ld_f32(x, col, g, cg, r0, r1, (r1 - r0) * g->out[2]);
}

/* The whole im2col matrix, each row ld >= out0 * out1 * out2 floats apart, zeros after its
 * positions (rows padded to whole vectors for kernels/weight_grad.h). */
FC_INLINE void fc_im2col_pad_f32(const float *FC_RESTRICT x, float *FC_RESTRICT col, const fc_conv_geom *g, long cg,
                                 long ld) {
    const long P = g->out[0] * g->out[1] * g->out[2], rows = cg * g->k[0] * g->k[1] * g->k[2];
    long r, j;
    fc_im2col_rows_ld_f32(x, col, g, cg, 0, g->out[0] * g->out[1], ld);
    for (r = 0; r < rows; ++r)
        for (j = P; j < ld; ++j)
            col[r * ld + j] = 0.0f;
}

/* The whole im2col matrix: every output row. */
FC_INLINE void fc_im2col_f32(const float *FC_RESTRICT x, float *FC_RESTRICT col, const fc_conv_geom *g, long cg) {
    fc_im2col_rows_f32(x, col, g, cg, 0, g->out[0] * g->out[1]);
}

/* The adjoint of fc_im2col_f32: x[c][i0][i1][i2] += col[(c, t0, t1, t2)][(o0, o1, o2)] for every
 * tap and output position whose input index i = o*s - p + t*d is inside the image (a
 * transposed convolution's scatter of W^T X, with the roles of its input and output swapped). */
FC_IM2COL_LOOPS FC_INLINE void fc_col2im_f32(const float *FC_RESTRICT col, float *FC_RESTRICT x, const fc_conv_geom *g, long cg) {
    const long L = g->out[0] * g->out[1] * g->out[2];
    long c, t0, t1, t2, r, o2;
    for (c = 0; c < cg; ++c)
        for (t0 = 0; t0 < g->k[0]; ++t0)
            for (t1 = 0; t1 < g->k[1]; ++t1)
                for (t2 = 0; t2 < g->k[2]; ++t2) {
                    const float *row = col + (((c * g->k[0] + t0) * g->k[1] + t1) * g->k[2] + t2) * L;
                    long lo2, hi2;
                    fc_im2col_range(g->in[2], g->out[2], g->stride[2], g->pad[2], t2 * g->dil[2], &lo2, &hi2);
                    long o0 = 0, o1 = 0; /* row r, counted on */
                    for (r = 0; r < g->out[0] * g->out[1]; ++r, o1 = o1 + 1 < g->out[1] ? o1 + 1 : (++o0, 0)) {
                        const long i0 = o0 * g->stride[0] - g->pad[0] + t0 * g->dil[0];
                        const long i1 = o1 * g->stride[1] - g->pad[1] + t1 * g->dil[1];
                        const float *src = row + r * g->out[2];
                        if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1])
                            continue;
                        {
                            const long base = ((c * g->in[0] + i0) * g->in[1] + i1) * g->in[2]
                                              - g->pad[2] + t2 * g->dil[2];
                            const long s2 = g->stride[2];
                            if (s2 == 1)
                                for (o2 = lo2; o2 < hi2; ++o2) x[base + o2] += src[o2];
                            else
                                for (o2 = lo2; o2 < hi2; ++o2) x[base + o2 * s2] += src[o2];
                        }
                    }
                }
}

#endif /* FC_KERNELS_IM2COL_H */
