/* Products of two row-major operands along their rows (float32), summed over a batch:
 *     C[i][j] += sum_b sum_p A[b*sa + i*lda + p] * B[b*sb + j*ldb + p]
 * for 0 <= i < m, 0 <= j < n, 0 <= p < k, 0 <= b < batch: the shape of a convolution's weight
 * gradient (each image's output gradient, Mg x positions, times its im2col, Cg*taps x
 * positions, along the positions, summed over the images). Both operands stream along p in
 * vector lanes, 4 rows of A by 4 of B at a time (16 accumulators; 2 by 4 with fewer than 32
 * vector registers) through the whole batch,
 * summed across lanes once at the end: no packing, as the packed GEMM would need B
 * transposed. Any sizes; any vector width of kernels/vecf.h, and plain C. */
#ifndef FC_KERNELS_GEMMNT_H
#define FC_KERNELS_GEMMNT_H

#include "flowc_rt.h"
#include "kernels/vecf.h"

/* Rows of A per block: 4 where 32 vector registers hold 16 accumulators and 8 loads (AVX-512),
 * else 2. The loaded vectors are held in registers (FC_VF_KEEP). */
#if FC_VF_VL >= 16
#define FC_GNT_RI 4
#else
#define FC_GNT_RI 2
#endif
#define FC_GNT_ROWS(X) X(0) X(1) X(2) X(3)
#define FC_GNT_DECL(r) fc_vf s##r##0 = z, s##r##1 = z, s##r##2 = z, s##r##3 = z;
#define FC_GNT_STEP(r)                                                                                  \
    if (r < FC_GNT_RI) {                                                                                \
        fc_vf x = fc_vf_load(a0 + ra[r] + p);                                                          \
        FC_VF_KEEP(x);                                                                                 \
        s##r##0 += x * y0, s##r##1 += x * y1, s##r##2 += x * y2, s##r##3 += x * y3;                     \
    }
#define FC_GNT_TAIL(r)                                                                                  \
    if (r < FC_GNT_RI) {                                                                                \
        const float x = a0[ra[r] + p];                                                                  \
        t[r][0] += x * b0[p], t[r][1] += x * b1[p], t[r][2] += x * b2[p], t[r][3] += x * b3[p];         \
    }
#define FC_GNT_SUM(r)                                                                                   \
    if (r < FC_GNT_RI) {                                                                                \
        t[r][0] += fc_vf_sum(s##r##0), t[r][1] += fc_vf_sum(s##r##1);                                   \
        t[r][2] += fc_vf_sum(s##r##2), t[r][3] += fc_vf_sum(s##r##3);                                   \
    }

FC_INLINE void fc_gemm_nt_f32(long m, long n, long k, long batch, const float *FC_RESTRICT a, long lda, long sa,
                              const float *FC_RESTRICT b, long ldb, long sb, float *FC_RESTRICT c, long ldc) {
    const long kv = k / FC_VF_VL * FC_VF_VL;
    const fc_vf z = FC_VF_SPLAT(0.0f);
    long i, j, p, q, e, r;
    for (i = 0; i < m; i += FC_GNT_RI) {
        const long ni = m - i < FC_GNT_RI ? m - i : FC_GNT_RI;
        long ra[4];
        for (r = 0; r < 4; ++r)
            ra[r] = (r < ni ? r : 0) * lda; /* rows past m repeat row i, their sums unused */
        for (j = 0; j < n; j += 4) {
            const long nj = n - j < 4 ? n - j : 4;
            const long d1 = nj > 1 ? ldb : 0, d2 = nj > 2 ? 2 * ldb : 0, d3 = nj > 3 ? 3 * ldb : 0;
            float t[4][4] = {{0.0f}};
            FC_GNT_ROWS(FC_GNT_DECL)
            for (e = 0; e < batch; ++e) {
                const float *a0 = a + e * sa + i * lda;
                const float *b0 = b + e * sb + j * ldb, *b1 = b0 + d1, *b2 = b0 + d2, *b3 = b0 + d3;
                for (p = 0; p < kv; p += FC_VF_VL) {
                    fc_vf y0 = fc_vf_load(b0 + p), y1 = fc_vf_load(b1 + p);
                    fc_vf y2 = fc_vf_load(b2 + p), y3 = fc_vf_load(b3 + p);
                    FC_VF_KEEP(y0);
                    FC_VF_KEEP(y1);
                    FC_VF_KEEP(y2);
                    FC_VF_KEEP(y3);
                    FC_GNT_ROWS(FC_GNT_STEP)
                }
                for (; p < k; ++p) {
                    FC_GNT_ROWS(FC_GNT_TAIL)
                }
            }
            FC_GNT_ROWS(FC_GNT_SUM)
            for (r = 0; r < ni; ++r)
                for (q = 0; q < nj; ++q)
                    c[(i + r) * ldc + j + q] += t[r][q];
        }
    }
}

/* rows x cols floats of src (row stride ls) into dst with row stride ld >= cols, zeros after
 * each row: an operand whose rows are padded to whole vectors (no scalar tail above). */
FC_INLINE void fc_rows_pad_f32(float *FC_RESTRICT dst, long ld, const float *FC_RESTRICT src, long ls, long rows,
                               long cols) {
    long r, j;
    for (r = 0; r < rows; ++r)
        for (j = 0; j < ld; ++j)
            dst[r * ld + j] = j < cols ? src[r * ls + j] : 0.0f;
}

#endif /* FC_KERNELS_GEMMNT_H */
