/* Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution transforms (float32, channels-first).
 *
 * A 3x3, stride-1 convolution computes each m x m output tile from an a x a input tile
 * (a = m + 2) as   Y = A^T [ sum_c U_c (.) (B^T d_c B) ] A,   U_c = G g_c G^T,
 * so the a*a element-wise products become a*a matrix products over channels, one per
 * transform position xi = (r, s):  M_xi (K x tiles) = U_xi (K x C) * V_xi (C x tiles),
 * which fc_sgemm computes on its packed layout (kernels/sgemm.h). The weights U are
 * transformed and packed at compile time (codegen/backends/c/winograd.py); this header holds
 * the run-time parts, for one chunk of whole tile rows of one image, L tiles numbered row by
 * row, padded to npad (a multiple of the GEMM's nr: the padding tiles are zeros):
 *
 *   fc_wino_phases:  the input rows a chunk reads, split by column phase (x mod m), so that
 *                    every tile's window is at unit stride;
 *   fc_wino<m>_in:   one channel of the chunk -> V_xi, written straight into the packed B
 *                    panels of the a*a products;
 *   fc_wino<m>_out:  row k of the a*a products -> the m*m values of each tile, plus bias;
 *   fc_wino_store:   those tiles into the output rows of channel k, then the step's
 *                    epilogue over each row segment while it is in L1.
 *
 * The transforms are 1-D passes over tiles (one loop per pass, through restrict pointers,
 * that the compiler vectorizes). The matrices (Lavin & Gray; F(4x4) at 0, +-1, +-2, inf):
 *
 *   F(2x2): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *           A^T = [1 1 1 0; 0 1 -1 -1]
 *   F(4x4): B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0;
 *                  0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
 *           A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
 *
 * Float32 error (max |error| / max |y| against float64 on random and trained-like data, 16 to
 * 512 channels): F(2x2) at most 6e-7, as im2col; F(4x4) at most 1.2e-5 (RMS up to 3.3e-6).
 * No allocation; the caller gives every buffer.
 */
#ifndef FC_KERNELS_WINOGRAD_H
#define FC_KERNELS_WINOGRAD_H

#include "flowc_rt.h"
#include "kernels/sgemm.h"

/* ------------------------------------------------------------------ 1-D transforms over n tiles */
/* y = B^T x, F(2x2): 4 rows in, 4 out. */
FC_INLINE void fc_wino2_bt(const float *FC_RESTRICT x0, const float *FC_RESTRICT x1, const float *FC_RESTRICT x2,
                           const float *FC_RESTRICT x3, float *FC_RESTRICT y0, float *FC_RESTRICT y1,
                           float *FC_RESTRICT y2, float *FC_RESTRICT y3, long n) {
    long t;
    for (t = 0; t < n; ++t) {
        y0[t] = x0[t] - x2[t];
        y1[t] = x1[t] + x2[t];
        y2[t] = x2[t] - x1[t];
        y3[t] = x1[t] - x3[t];
    }
}

/* y = A^T x + bias, F(2x2): 4 rows in, 2 out. */
FC_INLINE void fc_wino2_at(const float *FC_RESTRICT x0, const float *FC_RESTRICT x1, const float *FC_RESTRICT x2,
                           const float *FC_RESTRICT x3, float *FC_RESTRICT y0, float *FC_RESTRICT y1, float bias,
                           long n) {
    long t;
    for (t = 0; t < n; ++t) {
        y0[t] = x0[t] + x1[t] + x2[t] + bias;
        y1[t] = x1[t] - x2[t] - x3[t] + bias;
    }
}

/* y = B^T x, F(4x4): 6 rows in, 6 out (shared terms: 14 operations a tile). */
FC_INLINE void fc_wino4_bt(const float *FC_RESTRICT x0, const float *FC_RESTRICT x1, const float *FC_RESTRICT x2,
                           const float *FC_RESTRICT x3, const float *FC_RESTRICT x4, const float *FC_RESTRICT x5,
                           float *FC_RESTRICT y0, float *FC_RESTRICT y1, float *FC_RESTRICT y2,
                           float *FC_RESTRICT y3, float *FC_RESTRICT y4, float *FC_RESTRICT y5, long n) {
    long t;
    for (t = 0; t < n; ++t) {
        const float a = x4[t] - 4.0f * x2[t], b = x3[t] - 4.0f * x1[t];
        const float c = x4[t] - x2[t], d = 2.0f * (x3[t] - x1[t]);
        y0[t] = 4.0f * x0[t] - 5.0f * x2[t] + x4[t];
        y1[t] = a + b;
        y2[t] = a - b;
        y3[t] = c + d;
        y4[t] = c - d;
        y5[t] = 4.0f * x1[t] - 5.0f * x3[t] + x5[t];
    }
}

/* y = A^T x + bias, F(4x4): 6 rows in, 4 out. */
FC_INLINE void fc_wino4_at(const float *FC_RESTRICT x0, const float *FC_RESTRICT x1, const float *FC_RESTRICT x2,
                           const float *FC_RESTRICT x3, const float *FC_RESTRICT x4, const float *FC_RESTRICT x5,
                           float *FC_RESTRICT y0, float *FC_RESTRICT y1, float *FC_RESTRICT y2,
                           float *FC_RESTRICT y3, float bias, long n) {
    long t;
    for (t = 0; t < n; ++t) {
        const float s12 = x1[t] + x2[t], d12 = x1[t] - x2[t];
        const float s34 = x3[t] + x4[t], d34 = x3[t] - x4[t];
        y0[t] = x0[t] + s12 + s34 + bias;
        y1[t] = d12 + 2.0f * d34 + bias;
        y2[t] = s12 + 4.0f * s34 + bias;
        y3[t] = d12 + 8.0f * d34 + x5[t] + bias;
    }
}

/* ------------------------------------------------------------------ input side */
/* Input rows [ih0, ih0 + rows) of a plane of h x w values (zeros outside it), padded by pl
 * columns on the left, split by column phase: ph[q*rows*pw + i*pw + j] = x[ih0 + i][j*m + q - pl]
 * for j in [0, pw). xp holds rows x (m*pw) floats (m*pw >= pl + w), every cell outside
 * columns [pl, pl + w) zero (fc_wino_zero once before the first call): the rows are copied
 * into it, then split in one loop. */
FC_INLINE void fc_wino_phases(long m, const float *FC_RESTRICT x, long h, long w, long pl, long ih0, long rows,
                              float *FC_RESTRICT xp, float *FC_RESTRICT ph, long pw) {
    const long wp = m * pw, qs = rows * pw;
    /* rows [0, a) and [b, rows) lie outside the plane. Three loops rather than a test per row:
     * gcc 12.2 -O3 with AVX miscompiles the copy when a zero/copy branch sits in the row loop. */
    const long a = ih0 >= 0 ? 0 : -ih0 < rows ? -ih0 : rows;
    const long b = h - ih0 < a ? a : h - ih0 < rows ? h - ih0 : rows;
    long i, j, q;
    for (i = 0; i < a; ++i)
        for (j = 0; j < w; ++j)
            xp[i * wp + pl + j] = 0.0f;
    for (i = a; i < b; ++i)
        for (j = 0; j < w; ++j)
            xp[i * wp + pl + j] = x[(ih0 + i) * w + j];
    for (i = b; i < rows; ++i)
        for (j = 0; j < w; ++j)
            xp[i * wp + pl + j] = 0.0f;
    if (m == 4) {
        for (j = 0; j < qs; ++j) {
            ph[j] = xp[4 * j];
            ph[qs + j] = xp[4 * j + 1];
            ph[2 * qs + j] = xp[4 * j + 2];
            ph[3 * qs + j] = xp[4 * j + 3];
        }
    } else if (m == 2) {
        for (j = 0; j < qs; ++j) {
            ph[j] = xp[2 * j];
            ph[qs + j] = xp[2 * j + 1];
        }
    } else {
        for (q = 0; q < m; ++q)
            for (j = 0; j < qs; ++j)
                ph[q * qs + j] = xp[j * m + q];
    }
}

FC_INLINE void fc_wino_zero(float *FC_RESTRICT p, long n) {
    long i;
    for (i = 0; i < n; ++i)
        p[i] = 0.0f;
}

/* Where channel c's row of product xi = 0 starts in a packed B of npad columns and k blocks
 * of kc (kernels/sgemm.h layout); *kb gets the depth of its k block. Product xi's is
 * vstride = channels * npad floats further. */
FC_INLINE float *fc_wino_panel(float *vp, long c, long channels, long kc, long npad, long nr, long *kb) {
    const long pc = c / kc * kc;
    *kb = channels - pc < kc ? channels - pc : kc;
    return vp + pc * npad + (c - pc) * nr;
}

/* One channel of a chunk of `rows` tile rows of tw tiles (L = rows*tw, npad a multiple of nr):
 * ph from fc_wino_phases (rows*m + 2 input rows, pw >= twv + 1 phase columns, phase q at
 * ph + q*qs); tmp holds
 * a*a*ts floats (ts >= npad and >= (rows-1)*tw + twv, twv: tw rounded up to the vector width:
 * each tile row's pass runs over whole vectors, the excess overwritten by the next row or
 * cleared). V_xi (xi = r*a + s) of tile t goes to vc[xi*vstride + (t/nr)*nr*kb + t%nr]
 * (fc_wino_panel); tiles L .. npad get zeros. */
FC_INLINE void fc_wino4_in(const float *FC_RESTRICT ph, long pw, long qs, long rows, long tw, long twv,
                           float *FC_RESTRICT tmp, long ts, float *FC_RESTRICT vc, long vstride, long kb, long nr,
                           long npad) {
    const long L = rows * tw;
    long ty, col, r, jr, t;
    for (ty = 0; ty < rows; ++ty) /* B^T d: down each column of the windows */
        for (col = 0; col < 6; ++col) {
            const float *p = ph + col % 4 * qs + ty * 4 * pw + col / 4;
            float *o = tmp + col * ts + ty * tw;
            fc_wino4_bt(p, p + pw, p + 2 * pw, p + 3 * pw, p + 4 * pw, p + 5 * pw, o, o + 6 * ts, o + 12 * ts,
                        o + 18 * ts, o + 24 * ts, o + 30 * ts, twv);
        }
    for (r = 0; r < 36; ++r)
        for (t = L; t < npad; ++t)
            tmp[r * ts + t] = 0.0f;
    for (r = 0; r < 6; ++r) /* (B^T d) B: along each row, into the panels */
        for (jr = 0; jr < npad; jr += nr) {
            const float *p = tmp + r * 6 * ts + jr;
            float *o = vc + r * 6 * vstride + jr * kb;
            fc_wino4_bt(p, p + ts, p + 2 * ts, p + 3 * ts, p + 4 * ts, p + 5 * ts, o, o + vstride, o + 2 * vstride,
                        o + 3 * vstride, o + 4 * vstride, o + 5 * vstride, nr);
        }
}

FC_INLINE void fc_wino2_in(const float *FC_RESTRICT ph, long pw, long qs, long rows, long tw, long twv,
                           float *FC_RESTRICT tmp, long ts, float *FC_RESTRICT vc, long vstride, long kb, long nr,
                           long npad) {
    const long L = rows * tw;
    long ty, col, r, jr, t;
    for (ty = 0; ty < rows; ++ty)
        for (col = 0; col < 4; ++col) {
            const float *p = ph + col % 2 * qs + ty * 2 * pw + col / 2;
            float *o = tmp + col * ts + ty * tw;
            fc_wino2_bt(p, p + pw, p + 2 * pw, p + 3 * pw, o, o + 4 * ts, o + 8 * ts, o + 12 * ts, twv);
        }
    for (r = 0; r < 16; ++r)
        for (t = L; t < npad; ++t)
            tmp[r * ts + t] = 0.0f;
    for (r = 0; r < 4; ++r)
        for (jr = 0; jr < npad; jr += nr) {
            const float *p = tmp + r * 4 * ts + jr;
            float *o = vc + r * 4 * vstride + jr * kb;
            fc_wino2_bt(p, p + ts, p + 2 * ts, p + 3 * ts, o, o + vstride, o + 2 * vstride, o + 3 * vstride, nr);
        }
}

/* ------------------------------------------------------------------ output side */
/* Tiles [n0, n1) of row k of the products: mk[xi*mstride + t] is M_xi(k, t); writes
 * yt[(r*m + s)*ld + t], output (r, s) of tile t, plus bias; q holds m*a*ld floats. */
FC_INLINE void fc_wino4_out(const float *FC_RESTRICT mk, long mstride, float *FC_RESTRICT q,
                            float *FC_RESTRICT yt, long ld, long n0, long n1, float bias) {
    const long n = n1 - n0;
    long col, r;
    for (col = 0; col < 6; ++col) { /* A^T M: down each column */
        const float *s = mk + col * mstride + n0;
        float *o = q + col * ld + n0;
        fc_wino4_at(s, s + 6 * mstride, s + 12 * mstride, s + 18 * mstride, s + 24 * mstride, s + 30 * mstride, o,
                    o + 6 * ld, o + 12 * ld, o + 18 * ld, 0.0f, n);
    }
    for (r = 0; r < 4; ++r) { /* (A^T M) A: along each row */
        const float *s = q + r * 6 * ld + n0;
        float *o = yt + r * 4 * ld + n0;
        fc_wino4_at(s, s + ld, s + 2 * ld, s + 3 * ld, s + 4 * ld, s + 5 * ld, o, o + ld, o + 2 * ld, o + 3 * ld,
                    bias, n);
    }
}

FC_INLINE void fc_wino2_out(const float *FC_RESTRICT mk, long mstride, float *FC_RESTRICT q,
                            float *FC_RESTRICT yt, long ld, long n0, long n1, float bias) {
    const long n = n1 - n0;
    long col, r;
    for (col = 0; col < 4; ++col) {
        const float *s = mk + col * mstride + n0;
        float *o = q + col * ld + n0;
        fc_wino2_at(s, s + 4 * mstride, s + 8 * mstride, s + 12 * mstride, o, o + 4 * ld, 0.0f, n);
    }
    for (r = 0; r < 2; ++r) {
        const float *s = q + r * 4 * ld + n0;
        float *o = yt + r * 2 * ld + n0;
        fc_wino2_at(s, s + ld, s + 2 * ld, s + 3 * ld, o, o + ld, bias, n);
    }
}

/* Tiles [n0, n1) of a chunk whose first tile row is ty0 (tile t at tile row ty0 + t / tw,
 * column t % tw), from yt[(r*m + s)*ld + t], into channel k's plane yk of oh x ow outputs;
 * then epi (if any) over each row segment written: epi(row, ow, 1, cols, k, j0, arg) with j0
 * the segment's first position in the plane. */
FC_INLINE void fc_wino_store(long m, const float *FC_RESTRICT yt, long ld, float *FC_RESTRICT yk, long oh,
                             long ow, long tw, long ty0, long n0, long n1, long k, fc_sgemm_epilogue epi,
                             const void *arg) {
    long t = n0;
    while (t < n1) {
        const long ty = t / tw, tx0 = t % tw;
        const long tx1 = tw - tx0 < n1 - t ? tw : tx0 + (n1 - t);
        const long ow0 = tx0 * m, ow1 = tx1 * m < ow ? tx1 * m : ow;
        const long full = ow1 / m; /* tiles [tx0, full) lie wholly inside the plane */
        long r;
        for (r = 0; r < m && (ty0 + ty) * m + r < oh; ++r) {
            const long row = (ty0 + ty) * m + r;
            const float *src = yt + r * m * ld + (t - tx0);
            float *dst = yk + row * ow;
            long tx, s;
            if (m == 4) {
                for (tx = tx0; tx < full; ++tx) {
                    dst[4 * tx] = src[tx];
                    dst[4 * tx + 1] = src[ld + tx];
                    dst[4 * tx + 2] = src[2 * ld + tx];
                    dst[4 * tx + 3] = src[3 * ld + tx];
                }
            } else if (m == 2) {
                for (tx = tx0; tx < full; ++tx) {
                    dst[2 * tx] = src[tx];
                    dst[2 * tx + 1] = src[ld + tx];
                }
            } else {
                for (tx = tx0; tx < full; ++tx)
                    for (s = 0; s < m; ++s)
                        dst[tx * m + s] = src[s * ld + tx];
            }
            for (s = 0; full * m + s < ow1; ++s)
                dst[full * m + s] = src[s * ld + full];
            if (epi)
                epi(dst + ow0, ow, 1, ow1 - ow0, k, row * ow + ow0, arg);
        }
        t += tx1 - tx0;
    }
}

#endif /* FC_KERNELS_WINOGRAD_H */
