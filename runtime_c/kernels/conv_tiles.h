/* Direct convolution on register tiles (float32, 2-D, channels-first, one group).
 *
 * Where a convolution's output plane is small (7x7, 8x8, 14x14), im2col + GEMM spends as long
 * copying the im2col matrix and packing it as on the products. Here each output tile is R
 * consecutive positions of one output row times NR output channels (FC_SGEMM_NV vectors),
 * summed in registers over every (input channel, kernel row, kernel column) tap:
 *     acc[i][co] += xp[c][oh*sh + t0][(ow0 + i)*sw + t1] * w[cb][c][t0][t1][co]
 * the input value broadcast (from a zero-padded copy of the image, so that no tap is tested)
 * and the weights of NR channels loaded as vectors. The weights are packed at compile time in
 * blocks of NR output channels (the last padded with zeros):
 *     wp[((cb * C + c) * KH + t0) * KW + t1][co]      (NR floats a tap)
 * The tile is then stored transposed into y (NCHW) and biased; the step's epilogue runs on
 * runs of whole output rows of a channel block while they are in L1. R is at most FC_CD_RMAX
 * (the accumulators, NR weights and one broadcast fill the vector registers: 14 on AVX-512, 6
 * with 16 registers); tiles are instantiated per R and for strides 1 and 2 (the broadcasts
 * then use immediate offsets).
 *
 * Per image and part: fc_cd_pad writes the part's own padded copy and the tap offsets into
 * its scratch (read by no other thread), then fc_cd_items computes the part's run of items
 * (output channel block, output row), block-major, so that the parts of a step share the
 * weights out between them; or, where the copy is larger than the weights, each part takes a
 * run of output rows of every block and pads only the input rows they read.
 */
#ifndef FLOWC_KERNELS_CONV_TILES_H
#define FLOWC_KERNELS_CONV_TILES_H

#include "kernels/sgemm.h"

#define FC_CD_RMAX_ ((FC_SG_REGS - FC_SGEMM_NV - 1) / FC_SGEMM_NV)
#define FC_CD_RMAX (FC_CD_RMAX_ < 14 ? (FC_CD_RMAX_ < 1 ? 1 : FC_CD_RMAX_) : 14)
#define FC_CD_EPI_RUN 64 /* positions an epilogue call covers at least (fc_cd_items) */

typedef struct fc_cd_geom {
    long c, m;          /* input channels, output channels */
    long h, w, oh, ow;  /* input and output planes */
    long kh, kw, sh, sw, ph, pw;
    long hp, wp;        /* the padded copy: (oh - 1) * sh + kh rows of (ow - 1) * sw + kw */
} fc_cd_geom;

/* Floats of scratch one image needs: the padded copy, then C * KH * KW tap offsets (ints). */
FC_INLINE long fc_cd_scratch_floats(const fc_cd_geom *g) {
    return g->c * g->hp * g->wp + g->c * g->kh * g->kw;
}

/* Rows [r0, r1) of every channel of the padded copy of image x (C x H x W), and the offset of
 * every tap in it (0 and hp: the whole copy). */
FC_INLINE void fc_cd_pad(const float *FC_RESTRICT x, float *FC_RESTRICT xp, const fc_cd_geom *g, long r0,
                         long r1) {
    int *off = (int *)(xp + g->c * g->hp * g->wp);
    long c, r, j, t0, t1;
    for (c = 0; c < g->c; ++c)
        for (r = r0; r < r1; ++r) {
            float *dst = xp + (c * g->hp + r) * g->wp;
            const long ir = r - g->ph;
#if FC_SGEMM_VL == 16
            /* rows are short (9 to 58 floats): masked vectors, not a library call per row */
            const int in = ir >= 0 && ir < g->h;
            const uintptr_t src = (uintptr_t)(x + (in ? (c * g->h + ir) * g->w : 0)); /* an address only */
            for (j = 0; j < g->wp; j += 16) {
                const long n = g->wp - j < 16 ? g->wp - j : 16;
                long lo = g->pw - j, hi = g->pw + g->w - j; /* the lanes that hold input */
                lo = lo < 0 ? 0 : lo > 16 ? 16 : lo;
                hi = !in || hi < lo ? lo : hi > 16 ? 16 : hi;
                {
                    const __mmask16 val = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
                    const float *from = (const float *)(src + (uintptr_t)(j - g->pw) * sizeof(float));
                    _mm512_mask_storeu_ps(dst + j, (__mmask16)((1u << n) - 1u), _mm512_maskz_loadu_ps(val, from));
                }
            }
            continue;
#endif
            if (ir < 0 || ir >= g->h) {
                for (j = 0; j < g->wp; ++j) dst[j] = 0.0f;
                continue;
            }
            {
                const float *src = x + (c * g->h + ir) * g->w;
                const long lo = g->pw < g->wp ? g->pw : g->wp;
                const long hi = g->pw + g->w < g->wp ? g->pw + g->w : g->wp;
                for (j = 0; j < lo; ++j) dst[j] = 0.0f;
                for (j = lo; j < hi; ++j) dst[j] = src[j - g->pw];
                for (j = hi > lo ? hi : lo; j < g->wp; ++j) dst[j] = 0.0f;
            }
        }
    for (c = 0; c < g->c; ++c)
        for (t0 = 0; t0 < g->kh; ++t0)
            for (t1 = 0; t1 < g->kw; ++t1)
                off[(c * g->kh + t0) * g->kw + t1] = (int)((c * g->hp + t0) * g->wp + t1);
}

/* The accumulators and their steps are sgemm.h's (FC_SG_DECL, FC_SG_STEP: row i's value at
 * a[i * ars]); a tile's rows are its output positions. */
#define FC_CD_SAVE(i)                                                \
    if (i < R) {                                                     \
        fc_sg_store(t + i * FC_SGEMM_NR, c##i##_0);                  \
        if (U > 1)                                                   \
            fc_sg_store(t + i * FC_SGEMM_NR + FC_SGEMM_VL, c##i##_1); \
        if (U > 2)                                                   \
            fc_sg_store(t + i * FC_SGEMM_NR + 2 * FC_SGEMM_VL, c##i##_2); \
        if (U > 3)                                                   \
            fc_sg_store(t + i * FC_SGEMM_NR + 3 * FC_SGEMM_VL, c##i##_3); \
    }

/* One tile: t[i][co] (R rows of U vectors) = the sum over the taps of x0[off[p] + i*S] times
 * the first U vectors of the NR weights of tap p (w, NR floats a tap). S 0: the stride s at
 * run time. U is FC_SGEMM_NV, or 1 for a block of at most FC_SGEMM_VL channels (a stem of 16
 * output channels would otherwise sum as many zero weights as real ones). Each tap also
 * prefetches pf + p * pfs: the tiles of a block's rows share out the prefetch of the next
 * block's weights (at batch 1 a layer's weights come from memory once; read only by the first
 * row's tile they stalled it: 512 -> 512 channels on 7x7 in a ResNet-18 ran 14-18% slower
 * than im2col + GEMM, whose products use each weight once for every position). */
FC_SG_BODY void fc_cd_body(const int R, const int U, const int S0, long s, long taps,
                           const int *FC_RESTRICT off, const float *FC_RESTRICT x0, const float *FC_RESTRICT w,
                           const float *pf, long pfs, float *FC_RESTRICT t) {
    const fc_sgemm_v z = FC_SG_SPLAT(0.0f);
    const long ars = S0 ? S0 : s;
    long p;
    FC_SG_ROWS(FC_SG_DECL)
    for (p = 0; p < taps; ++p) {
        const float *a = x0 + off[p];
        fc_sgemm_v b0 = fc_sg_load(w);
        fc_sgemm_v b1 = U > 1 ? fc_sg_load(w + FC_SGEMM_VL) : z;
        fc_sgemm_v b2 = U > 2 ? fc_sg_load(w + 2 * FC_SGEMM_VL) : z;
        fc_sgemm_v b3 = U > 3 ? fc_sg_load(w + 3 * FC_SGEMM_VL) : z;
        FC_SG_KEEP(b0, b1, b2, b3)
        FC_SG_ROWS(FC_SG_STEP)
        FC_SG_PREFETCH(pf);
        w += FC_SGEMM_NR;
        pf += pfs;
    }
    FC_SG_ROWS(FC_CD_SAVE)
}

typedef void (*fc_cd_tile_fn)(long s, long taps, const int *off, const float *x0, const float *w, const float *pf,
                              long pfs, float *t);

/* Tile functions of R rows and U vectors for strides run-time (_s), 1 and 2. */
/* Like sgemm.h's tile kernels: static here, or with FC_KERNELS_APART declared here and compiled
 * once into kernels/conv_tiles.c (FC_CONV_TILES_HERE). */
#if !defined(FC_KERNELS_APART)
#define FC_CD_DEFINE 1
#define FC_CD_KERNEL FC_SG_KSTATIC
#elif defined(FC_CONV_TILES_HERE)
#define FC_CD_DEFINE 1
#define FC_CD_KERNEL FC_SG_KAPART
#else
#define FC_CD_DEFINE 0
#endif
#if FC_CD_DEFINE
#define FC_CD_INST_(r, u, name)                                                                           \
    FC_CD_KERNEL void FC_SG_K(name##_1)(long s, long taps, const int *off, const float *x0, const float *w, \
                                        const float *pf, long pfs, float *t) {                            \
        fc_cd_body(r, u, 1, s, taps, off, x0, w, pf, pfs, t);                                             \
    }                                                                                                     \
    FC_CD_KERNEL void FC_SG_K(name##_2)(long s, long taps, const int *off, const float *x0, const float *w, \
                                        const float *pf, long pfs, float *t) {                            \
        fc_cd_body(r, u, 2, s, taps, off, x0, w, pf, pfs, t);                                             \
    }                                                                                                     \
    FC_CD_KERNEL void FC_SG_K(name##_s)(long s, long taps, const int *off, const float *x0, const float *w, \
                                        const float *pf, long pfs, float *t) {                            \
        fc_cd_body(r, u, 0, s, taps, off, x0, w, pf, pfs, t);                                             \
    }
#else
#define FC_CD_DECL_(name, sfx)                                                                                \
    FC_SG_KDECL void FC_SG_K(name##sfx)(long s, long taps, const int *off, const float *x0, const float *w, \
                                        const float *pf, long pfs, float *t);
#define FC_CD_INST_(r, u, name) FC_CD_DECL_(name, _1) FC_CD_DECL_(name, _2) FC_CD_DECL_(name, _s)
#endif
#define FC_CD_INST(r) FC_CD_INST_(r, FC_SGEMM_NV, cd_mk_##r) FC_CD_INST_(r, 1, cd_mk1_##r)
FC_CD_INST(1) FC_CD_INST(2) FC_CD_INST(3) FC_CD_INST(4) FC_CD_INST(5) FC_CD_INST(6) FC_CD_INST(7)
FC_CD_INST(8) FC_CD_INST(9) FC_CD_INST(10) FC_CD_INST(11) FC_CD_INST(12) FC_CD_INST(13) FC_CD_INST(14)
#define FC_CD_FNS(r)                                          \
    {{FC_SG_K(cd_mk_##r##_s), FC_SG_K(cd_mk_##r##_1), FC_SG_K(cd_mk_##r##_2)},  \
     {FC_SG_K(cd_mk1_##r##_s), FC_SG_K(cd_mk1_##r##_1), FC_SG_K(cd_mk1_##r##_2)}}

/* The tile t (R rows of positions, NR channels a row) into y[co * ldc + i] for its first
 * `rows` channels, plus their bias (or none). AVX-512: 16 x 16 blocks transposed in registers
 * and stored R lanes at a time (reading the tile back a float at a time waits on the stores
 * that just wrote it: a third of the step's time). */
FC_INLINE void fc_cd_store(const float *FC_RESTRICT t, long R, long rows, const float *bias, float *FC_RESTRICT y,
                           long ldc) {
    long co, i;
#if FC_SGEMM_VL == 16 && FC_VF_HAS_TRANSPOSE16 && defined(__AVX512F__)
    if (R <= 16) {
        const __mmask16 lanes = (__mmask16)((1u << R) - 1u);
        long h;
        for (h = 0; h * 16 < rows; ++h) {
            fc_vf r[16];
            float b[16];
            for (i = 0; i < 16; ++i) r[i] = fc_vf_load(t + i * FC_SGEMM_NR + h * 16);
            FC_VF_TRANSPOSE16(r);
            for (co = 0; co < 16; ++co) b[co] = bias && h * 16 + co < rows ? bias[h * 16 + co] : 0.0f;
            for (co = 0; co < 16 && h * 16 + co < rows; ++co)
                _mm512_mask_storeu_ps(y + (h * 16 + co) * ldc, lanes, (__m512)(r[co] + FC_VF_SPLAT(b[co])));
        }
        return;
    }
#endif
    for (co = 0; co < rows; ++co) {
        const float b = bias ? bias[co] : 0.0f;
        float *yc = y + co * ldc;
        for (i = 0; i < R; ++i) yc[i] = t[i * FC_SGEMM_NR + co] + b;
    }
}

/* Items [i0, i1) of one image (item = output channel block * OH + output row): xp and the tap
 * offsets after it from fc_cd_pad, wp the packed weights, bias (M floats) or NULL, y the
 * image's output (M x OH x OW); epi (or NULL) is called on stored runs of whole output rows of
 * a channel block, rows = its channels, columns = the run's positions (ldc OH * OW, i0/j0 the
 * block's first channel and the run's first position).
 * nr: the output channels of a block of wp; fc_cd_items_any (plain loops) where that is not
 * this build's FC_SGEMM_NR. */
FC_INLINE void fc_cd_items_any(const fc_cd_geom *g, long nr, const float *xp, const float *wp, const float *bias,
                               float *y, long i0, long i1, fc_sgemm_epilogue epi, const void *epi_arg) {
    const int *off = (const int *)(xp + g->c * g->hp * g->wp);
    const long taps = g->c * g->kh * g->kw, ohw = g->oh * g->ow;
    long item, o, co, p;
    for (item = i0; item < i1; ++item) {
        const long cb = item / g->oh, r = item % g->oh, co0 = cb * nr;
        const long rows = g->m - co0 < nr ? g->m - co0 : nr;
        const float *wb = wp + cb * taps * nr, *x0 = xp + r * g->sh * g->wp;
        float *yb = y + co0 * ohw + r * g->ow;
        for (co = 0; co < rows; ++co)
            for (o = 0; o < g->ow; ++o) {
                float acc = 0.0f;
                for (p = 0; p < taps; ++p) acc += x0[off[p] + o * g->sw] * wb[p * nr + co];
                yb[co * ohw + o] = acc + (bias ? bias[co0 + co] : 0.0f);
            }
        if (epi)
            epi(yb, ohw, rows, g->ow, co0, r * g->ow, epi_arg);
    }
}

FC_INLINE void fc_cd_items(const fc_cd_geom *g, long nr, const float *xp, const float *wp, const float *bias,
                           float *y, long i0, long i1, fc_sgemm_epilogue epi, const void *epi_arg) {
    /* [R - 1][a block of at most one vector of channels][stride: run time, 1, 2] */
    static const fc_cd_tile_fn fns[14][2][3] = {FC_CD_FNS(1),  FC_CD_FNS(2),  FC_CD_FNS(3),  FC_CD_FNS(4),
                                                FC_CD_FNS(5),  FC_CD_FNS(6),  FC_CD_FNS(7),  FC_CD_FNS(8),
                                                FC_CD_FNS(9),  FC_CD_FNS(10), FC_CD_FNS(11), FC_CD_FNS(12),
                                                FC_CD_FNS(13), FC_CD_FNS(14)};
    const int *off = (const int *)(xp + g->c * g->hp * g->wp);
    const long taps = g->c * g->kh * g->kw, ohw = g->oh * g->ow;
    const long segs = (g->ow + FC_CD_RMAX - 1) / FC_CD_RMAX;
    const int si = g->sw == 1 ? 1 : g->sw == 2 ? 2 : 0;
    float t[(FC_CD_RMAX < 16 ? 16 : FC_CD_RMAX) * FC_SGEMM_NR] FC_ALIGNED(64) = {0};
    long item, q;
    if (nr != FC_SGEMM_NR) { /* weights packed for another build's vectors */
        fc_cd_items_any(g, nr, xp, wp, bias, y, i0, i1, epi, epi_arg);
        return;
    }
    long pend = -1; /* the block's first output row not yet given the epilogue, or -1 */
    for (item = i0; item < i1; ++item) {
        const long cb = item / g->oh, r = item % g->oh, co0 = cb * FC_SGEMM_NR;
        const long rows = g->m - co0 < FC_SGEMM_NR ? g->m - co0 : FC_SGEMM_NR;
        const float *wb = wp + cb * taps * FC_SGEMM_NR;
        /* the slice of the next block's weights this row's tiles prefetch: taps * pfs floats
         * from row r's share on (the last rows' shares when there are more rows than NR; none
         * after the last block) */
        const int more = co0 + FC_SGEMM_NR < g->m;
        const long pfs = FC_SGEMM_NR / g->oh > 1 ? FC_SGEMM_NR / g->oh : 1;
        const long pf0 = r * taps * pfs < (FC_SGEMM_NR - pfs) * taps ? r * taps * pfs : (FC_SGEMM_NR - pfs) * taps;
        const float *pf = more ? wb + taps * FC_SGEMM_NR + pf0 : wb;
        for (q = 0; q < segs; ++q) {
            const long ow0 = q * g->ow / segs, R = (q + 1) * g->ow / segs - ow0;
            float *yb = y + co0 * ohw + r * g->ow + ow0;
            fns[R - 1][rows <= FC_SGEMM_VL][si](g->sw, taps, off, xp + r * g->sh * g->wp + ow0 * g->sw, wb, pf,
                                                more ? pfs : 0, t);
            fc_cd_store(t, R, rows, bias ? bias + co0 : NULL, yb, ohw);
        }
        /* the epilogue on runs of whole output rows of the block (consecutive in each plane) of
         * at least FC_CD_EPI_RUN positions, not on each tile: a tile's R <= 14 positions are
         * less than a vector, and the epilogue's loop over them ran scalar (the stem of a
         * ResNet, 112x112 positions, spent longer in its ReLU than in its taps) */
        if (epi) {
            pend = pend < 0 ? r : pend;
            if (item + 1 == i1 || r + 1 == g->oh || (r + 1 - pend) * g->ow >= FC_CD_EPI_RUN) {
                epi(y + co0 * ohw + pend * g->ow, ohw, rows, (r + 1 - pend) * g->ow, co0, pend * g->ow, epi_arg);
                pend = -1;
            }
        }
    }
}

/* One part's share of image x: with rows set, output rows [i0, i1) of every channel block, from
 * the padded rows they read (the copy is larger than the weights); else items [i0, i1), from
 * the whole padded copy (each part its blocks' weights). xp: the part's scratch. */
FC_INLINE void fc_cd_part(const fc_cd_geom *g, long nr, int rows, const float *x, float *xp, const float *wp,
                          const float *bias, float *y, long i0, long i1, fc_sgemm_epilogue epi, const void *epi_arg) {
    long cb;
    if (!rows) {
        fc_cd_pad(x, xp, g, 0, g->hp);
        fc_cd_items(g, nr, xp, wp, bias, y, i0, i1, epi, epi_arg);
        return;
    }
    fc_cd_pad(x, xp, g, i0 * g->sh, (i1 - 1) * g->sh + g->kh);
    for (cb = 0; cb * nr < g->m; ++cb)
        fc_cd_items(g, nr, xp, wp, bias, y, cb * g->oh + i0, cb * g->oh + i1, epi, epi_arg);
}

/* fc_cd_part_apart: fc_cd_part compiled once into kernels/conv_tiles.c (FC_KERNELS_APART), as
 * sgemm.h's fc_sgemm_apart, for large steps (a small one gains from its geometry a constant:
 * 16 -> 16 channels 3x3 on 14x14 ran 20% slower apart). */
#if !defined(FC_KERNELS_APART)
#define fc_cd_part_apart fc_cd_part
#else
#define fc_cd_part_apart FC_SG_K(cd_part)
#if defined(FC_CONV_TILES_HERE)
FC_SG_KAPART void fc_cd_part_apart(const fc_cd_geom *g, long nr, int rows, const float *x, float *xp, const float *wp,
                                   const float *bias, float *y, long i0, long i1, fc_sgemm_epilogue epi,
                                   const void *epi_arg) {
    fc_cd_part(g, nr, rows, x, xp, wp, bias, y, i0, i1, epi, epi_arg);
}
#else
FC_SG_KDECL void fc_cd_part_apart(const fc_cd_geom *g, long nr, int rows, const float *x, float *xp, const float *wp,
                                  const float *bias, float *y, long i0, long i1, fc_sgemm_epilogue epi,
                                  const void *epi_arg);
#endif
#endif

#endif /* FLOWC_KERNELS_CONV_TILES_H */
