/* float32 matrix product with packed panels and a register-blocked micro-kernel.
 *
 *     C[i*ldc + j] = alpha * sum_p A(i, p) * B(p, j)  +  beta * C[i*ldc + j]  (+ bias)
 *     then, per output tile while it is in L1: epilogue(tile)                (optional)
 *
 * for 0 <= i < m, 0 <= j < n, 0 <= p < k. Everything a call needs is one plan struct
 * (fc_sgemm_plan); generated code declares it `static const` and the driver is static
 * inline (always_inline under GNU compilers), so gcc folds every field into the loops.
 *
 * Operands. Each of A (m x k) and B (k x n) is either
 *   - raw: A(i, p) = a[i*a_rs + p*a_cs], B(p, j) = b[p*b_rs + j*b_cs] (element strides, so
 *     row-major, transposed, sliced and broadcast views all work), packed into the caller's
 *     scratch memory block by block at run time; raw A with a_direct = 1 is instead read in
 *     place by the micro-kernel (as fast as packed for row-major or transposed A, whose
 *     packing would cost up to 20% on small products; any strides are correct), and so are
 *     the whole column panels of a row-major raw B (b_cs 1) with b_direct = 1 (the last,
 *     partial one is packed: a load there would read past the row); or
 *   - pre-packed (a_packed / b_packed = 1): the whole operand already in the layout below,
 *     as written by fc_sgemm_pack_a / fc_sgemm_pack_b or their numpy twins pack_a / pack_b in
 *     graphdef/ops/_sgemm_pack.py (constant weights are packed once, at compile time).
 *
 * Packed layout (depends on mr, nr and kc only; never on mc, nc or the ISA beyond mr/nr):
 *   A: mpad = ceil(m/mr)*mr rows, zero-padded. For each k block [pc, pc+kb) (kb = min(kc,
 *      k - pc)), for each row panel ir = 0, mr, 2mr, ...: the kb x mr panel, k-major:
 *          Ap[pc*mpad + ir*kb + p*mr + i] = A(ir + i, pc + p)         (0 for ir+i >= m)
 *   B: npad = ceil(n/nr)*nr columns, zero-padded, likewise by k block then column panel:
 *          Bp[pc*npad + jr*kb + p*nr + j] = B(pc + p, jr + j)         (0 for jr+j >= n)
 *   Sizes: mpad*k and npad*k floats (fc_sgemm_packed_a_floats / _b_floats).
 *
 * Micro-tile. mr x nr with nr = FC_SGEMM_NV vectors of FC_SGEMM_VL floats, chosen by the
 * compiler flags (one source, GCC/Clang vector extensions):
 *     -mavx512f               avx512   VL 16, 14 x 32   (28 zmm accumulators)
 *     -mavx2 -mfma (or -mavx) avx2     VL  8,  6 x 16   (12 ymm accumulators)
 *     aarch64 NEON            aarch64  VL  4,  8 x 12   (24 q accumulators)
 *     SSE2 / armv7 NEON / ... v128     VL  4,  4 x 8
 *     -DFC_NO_VECTOR, non-GNU scalar   VL  1,  4 x 4    (plain C99)
 * FC_SGEMM_ISA names the choice (FC_SGEMM_ISA_ID numbers it for #if: scalar 1, avx512 2,
 * avx2 3, aarch64 4, v128 5). A plan whose mr/nr differ from FC_SGEMM_MR/NR (packed for
 * another target) still computes the right result through a scalar micro-kernel, slowly, but
 * it needs more scratch than its own target: generated models stop the build with #error
 * when the flags select another kernel than the one their plans and scratch were made for.
 * Multiply-adds are fused where the target has FMA (intrinsics; gcc does not contract a*b+c
 * under -std=c99).
 *
 * Blocking (GotoBLAS loops): jc over n by nc, pc over k by kc (pack B block kb x nb),
 * ic over m by mc (pack A block mb x kb unless A is pre-packed or read in place), then
 * micro-tiles. order 0 runs row panels innermost: the B micro-panel (kc*nr floats) stays in
 * L1 while the A block streams from L2; when one A block covers all rows, raw B is packed one
 * micro-panel at a time just before its row panels use it (scratch kc*nr floats). order 1
 * runs column panels innermost (the A micro-panel stays in L1, the B block in L2). mc is
 * rounded up to a multiple of mr and nc to one of nr. Sums run over p in order within a k
 * block (1- and 2-row tiles: four interleaved chains), k blocks are added to C in order.
 *
 * beta: 0 means C is only written (it may hold garbage or NaN); 1 adds the product to C;
 * other values scale C. bias: FC_SGEMM_BIAS_ROW adds bias[i], FC_SGEMM_BIAS_COL bias[j],
 * after alpha and beta. The epilogue, when not NULL, is called once per output tile after its
 * final value is stored: epi(&C[i0*ldc + j0], ldc, rows, cols, i0, j0, epi_arg) with
 * rows <= mr, cols <= nr; a static inline function passed by name is inlined.
 *
 * Threads: fc_sgemm(..., part, parts) computes the part-th of `parts` disjoint slices of C
 * (whole micro-panels; split along n when it has at least as many panels as m, else along
 * m). Every part needs its own scratch of fc_sgemm_scratch_bytes(plan) bytes; parts may run
 * concurrently; part 0 of 1 is the whole product. Results do not depend on parts.
 *
 * No malloc, no globals written. Scratch and packed operands need only float alignment; 64-byte
 * alignment (the arena's) is fastest.
 */
#ifndef FLOWC_KERNELS_SGEMM_H
#define FLOWC_KERNELS_SGEMM_H

#include "flowc_rt.h"
#include "vecf.h"

/* With constant plans gcc's -Warray-bounds / -Wstringop-overread (-Wall, -O2 and up) inspect
 * paths that the plan makes unreachable (e.g. the whole-panel copy of a 1-column B) and report
 * them as errors under -Werror: silenced here, for this header's code only. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#if __GNUC__ >= 11
#pragma GCC diagnostic ignored "-Wstringop-overread"
#endif
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

/* ------------------------------------------------------------------ target selection */
#if defined(FC_NO_VECTOR) || !(defined(__GNUC__) || defined(__clang__))
#define FC_SGEMM_VL 1
#define FC_SG_MR_DEFAULT 4
#define FC_SGEMM_NV 4
#define FC_SGEMM_ISA "scalar"
#define FC_SG_ISA_NAME scalar
#define FC_SGEMM_ISA_ID 1
#elif defined(__AVX512F__)
#include <immintrin.h>
#define FC_SGEMM_VL 16
#define FC_SG_MR_DEFAULT 14
#define FC_SGEMM_NV 2
#define FC_SGEMM_ISA "avx512"
#define FC_SG_ISA_NAME avx512
#define FC_SGEMM_ISA_ID 2
#elif defined(__AVX__)
#include <immintrin.h>
#define FC_SGEMM_VL 8
#define FC_SG_MR_DEFAULT 6
#define FC_SGEMM_NV 2
#define FC_SGEMM_ISA "avx2"
#define FC_SG_ISA_NAME avx2
#define FC_SGEMM_ISA_ID 3
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define FC_SGEMM_VL 4
#define FC_SG_MR_DEFAULT 8
#define FC_SGEMM_NV 3
#define FC_SGEMM_ISA "aarch64"
#define FC_SG_ISA_NAME aarch64
#define FC_SGEMM_ISA_ID 4
#elif defined(__SSE2__) || defined(__ARM_NEON) || defined(__ALTIVEC__) || defined(__wasm_simd128__)
#define FC_SGEMM_VL 4
#define FC_SG_MR_DEFAULT 4
#define FC_SGEMM_NV 2
#define FC_SGEMM_ISA "v128"
#define FC_SG_ISA_NAME v128
#define FC_SGEMM_ISA_ID 5
#else
#define FC_SGEMM_VL 1
#define FC_SG_MR_DEFAULT 4
#define FC_SGEMM_NV 4
#define FC_SGEMM_ISA "scalar"
#define FC_SG_ISA_NAME scalar
#define FC_SGEMM_ISA_ID 1
#endif
#ifndef FC_SGEMM_MR /* -DFC_SGEMM_MR=r (1 <= r <= 14) picks another tile height */
#define FC_SGEMM_MR FC_SG_MR_DEFAULT
#endif
#define FC_SGEMM_NR (FC_SGEMM_VL * FC_SGEMM_NV)
#if defined(__AVX512F__) || defined(__aarch64__)
#define FC_SG_REGS 32 /* vector registers */
#else
#define FC_SG_REGS 16
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FC_SG_PREFETCH(p) __builtin_prefetch(p)
#define FC_SG_PREFETCH_W(p) __builtin_prefetch(p, 1)
#define FC_SG_PREFETCH_L2(p) __builtin_prefetch(p, 0, 2)
#define FC_SGEMM_DRIVER static inline __attribute__((always_inline, unused))
#define FC_SG_BODY static inline __attribute__((always_inline, unused))
#define FC_SG_KSTATIC static __attribute__((noinline, unused))
#define FC_SG_KAPART __attribute__((noinline, weak, visibility("hidden")))
#define FC_SG_KDECL extern __attribute__((visibility("hidden")))
#else
#define FC_SG_PREFETCH(p) ((void)(p))
#define FC_SG_PREFETCH_W(p) ((void)(p))
#define FC_SG_PREFETCH_L2(p) ((void)(p))
#define FC_SGEMM_DRIVER static inline
#define FC_SG_BODY static inline
#define FC_SG_KSTATIC static inline
#define FC_SG_KAPART
#define FC_SG_KDECL extern
#endif

/* The tile kernels (FC_SG_KERNEL: the functions a build spends most of its time compiling) are
 * compiled into every file that includes this header, as static functions; or, with
 * FC_KERNELS_APART defined, only declared here and compiled once into kernels/sgemm.c (which
 * defines FC_SGEMM_HERE too), a file flowc builds once per ISA and flags and keeps in its cache.
 * Their names carry the ISA and tile height (FC_SG_K(mk_1_1) is fc_sg_avx512_r14_mk_1_1), and
 * they are weak and hidden: two models built alike may be linked into one program, and models
 * built for other kernels never call each other's. */
#if !defined(FC_KERNELS_APART)
#define FC_SG_DEFINE 1
#define FC_SG_KERNEL FC_SG_KSTATIC
#elif defined(FC_SGEMM_HERE)
#define FC_SG_DEFINE 1
#define FC_SG_KERNEL FC_SG_KAPART
#else
#define FC_SG_DEFINE 0
#endif
#define FC_SG_TAG_(isa, mr) fc_sg_##isa##_r##mr
#define FC_SG_TAG(isa, mr) FC_SG_TAG_(isa, mr)
#define FC_SG_K(n) FC_CAT(FC_SG_TAG(FC_SG_ISA_NAME, FC_SGEMM_MR), n)

/* ------------------------------------------------------------------ the vector type */
/* vecf.h's float vector (the same width rule); on aarch64 the NEON type itself, which the
 * vfmaq_f32 intrinsic takes. */
#if FC_SGEMM_VL != FC_VF_VL
#error "sgemm.h and vecf.h disagree on the vector width"
#endif
#if FC_SGEMM_VL == 4 && defined(__aarch64__)
typedef float32x4_t fc_sgemm_v; /* a GNU vector type: + - * work on it */
#define FC_SG_SPLAT(s) vdupq_n_f32(s)
#else
typedef fc_vf fc_sgemm_v;
#define FC_SG_SPLAT(s) FC_VF_SPLAT(s)
#endif

/* c + a*b, fused where the target has it. */
#if FC_SGEMM_VL == 16
#define FC_SG_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#elif FC_SGEMM_VL == 8 && defined(__FMA__)
#define FC_SG_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#elif FC_SGEMM_VL == 4 && defined(__aarch64__)
#define FC_SG_FMA(a, b, c) vfmaq_f32(c, a, b)
#else
#define FC_SG_FMA(a, b, c) ((c) + (a) * (b))
#endif

#if FC_SGEMM_VL == 4 && defined(__aarch64__)
FC_INLINE fc_sgemm_v fc_sg_load(const float *p) { return vld1q_f32(p); }
FC_INLINE void fc_sg_store(float *p, fc_sgemm_v v) { vst1q_f32(p, v); }
#else
#define fc_sg_load fc_vf_load
#define fc_sg_store fc_vf_store
#endif

/* ------------------------------------------------------------------ the plan */
#define FC_SGEMM_BIAS_NONE 0
#define FC_SGEMM_BIAS_ROW 1 /* bias[i], one per row of C (conv output channel) */
#define FC_SGEMM_BIAS_COL 2 /* bias[j], one per column of C (dense layer unit) */

typedef struct fc_sgemm_plan {
    long m, n, k;        /* C is m x n, the sum runs over k; any may be 0 */
    long a_rs, a_cs;     /* raw A(i, p) = a[i*a_rs + p*a_cs]; ignored when a_packed */
    long b_rs, b_cs;     /* raw B(p, j) = b[p*b_rs + j*b_cs]; ignored when b_packed */
    long ldc;            /* C(i, j) = c[i*ldc + j] */
    float alpha, beta;   /* C = alpha*A*B + beta*C; beta 0: C is not read */
    int a_packed;        /* 1: a is in the packed layout above (mr, kc) */
    int b_packed;        /* 1: b is in the packed layout above (nr, kc) */
    int bias;            /* FC_SGEMM_BIAS_NONE, _ROW or _COL */
    int order;           /* 1: column panels innermost (A micro-panel in L1); 0: row panels */
    int a_direct;        /* 1: raw A is read in place by the micro-kernel, never packed */
    int b_direct;        /* 1: raw B with b_cs 1 is read in place, whole column panels (the last
                            partial one is packed) */
    long mr, nr;         /* micro-tile; FC_SGEMM_MR and FC_SGEMM_NR for the fast kernel */
    long mc, kc, nc;     /* cache blocks (rows of A, depth, columns of B) */
} fc_sgemm_plan;

/* Called once per output tile, after its final store: c points at C(i0, j0). */
typedef void (*fc_sgemm_epilogue)(float *c, long ldc, long rows, long cols, long i0, long j0,
                                  const void *arg);

FC_INLINE long fc_sg_min(long a, long b) { return a < b ? a : b; }
FC_INLINE long fc_sg_roundup(long x, long to) { return (x + to - 1) / to * to; }

/* Floats in the whole packed A (mpad * k) and B (k * npad). */
FC_INLINE size_t fc_sgemm_packed_a_floats(const fc_sgemm_plan *p) {
    return (size_t)fc_sg_roundup(p->m, p->mr) * (size_t)p->k;
}
FC_INLINE size_t fc_sgemm_packed_b_floats(const fc_sgemm_plan *p) {
    return (size_t)fc_sg_roundup(p->n, p->nr) * (size_t)p->k;
}

/* The packed B block of k rows [pc, pc + kb) and columns from jc (a multiple of nr); b holds
 * npad = roundup(n, nr) columns per k row (the layout at the top). */
FC_INLINE const float *fc_sg_packed_b_block(const float *b, long npad, long pc, long jc, long kb) {
    return b + pc * npad + jc * kb;
}

/* Effective blocks: at most the (padded) matrix, multiples of the micro-tile. */
FC_INLINE long fc_sg_kc(const fc_sgemm_plan *p) { return p->kc > 0 ? fc_sg_min(p->kc, p->k) : p->k; }
FC_INLINE long fc_sg_mc(const fc_sgemm_plan *p) {
    return fc_sg_min(fc_sg_roundup(p->mc > 0 ? p->mc : p->m, p->mr), fc_sg_roundup(p->m, p->mr));
}
FC_INLINE long fc_sg_nc(const fc_sgemm_plan *p) {
    return fc_sg_min(fc_sg_roundup(p->nc > 0 ? p->nc : p->n, p->nr), fc_sg_roundup(p->n, p->nr));
}

/* Whether raw B is packed one micro-panel at a time, just before its use (order 0 with one A
 * block: each B micro-panel is used once per k block, so it never leaves L1). */
FC_INLINE int fc_sg_fly_b(const fc_sgemm_plan *p) {
    return !p->b_packed && p->order == 0 && fc_sg_mc(p) >= fc_sg_roundup(p->m, p->mr);
}

/* Floats of scratch for the A block, rounded up so that the B buffer after it stays 64-byte
 * aligned (as the scratch itself should be). */
FC_INLINE size_t fc_sg_abuf_floats(const fc_sgemm_plan *p) {
    return ((size_t)fc_sg_mc(p) * (size_t)fc_sg_kc(p) + 15) / 16 * 16;
}

/* Whether raw A is read in place (a_direct, on the native tile). */
FC_INLINE int fc_sg_direct_a(const fc_sgemm_plan *p) {
    return p->a_direct && !p->a_packed && p->mr == FC_SGEMM_MR && p->nr == FC_SGEMM_NR;
}

/* Whether raw B is read in place (b_direct, row-major, on the native tile). */
FC_INLINE int fc_sg_direct_b(const fc_sgemm_plan *p) {
    return p->b_direct && !p->b_packed && p->b_cs == 1 && p->mr == FC_SGEMM_MR && p->nr == FC_SGEMM_NR;
}

/* Scratch bytes one part needs (0 when both operands are pre-packed or the product is empty). */
FC_INLINE size_t fc_sgemm_scratch_bytes(const fc_sgemm_plan *p) {
    size_t floats = 0;
    if (p->m <= 0 || p->n <= 0 || p->k <= 0)
        return 0;
    if (!p->a_packed && !fc_sg_direct_a(p))
        floats += fc_sg_abuf_floats(p);
    if (!p->b_packed)
        floats += (size_t)(fc_sg_fly_b(p) ? p->nr : fc_sg_nc(p)) * (size_t)fc_sg_kc(p);
    return floats * sizeof(float);
}

/* ------------------------------------------------------------------ packing */
/* rows x kb of A (A(i, p) = a[i*rs + p*cs]) into panels of mr rows: out[ir*kb + p*mr + i]. */
FC_INLINE void fc_sg_pack_a_block(long mr, long rows, long kb, const float *a, long rs, long cs,
                                  float *FC_RESTRICT out) {
    long ir, i, p;
    for (ir = 0; ir < rows; ir += mr) {
        const long h = fc_sg_min(mr, rows - ir);
        const float *src = a + ir * rs;
        if (cs == 1 || (cs != 0 && (cs < 0 ? -cs : cs) <= (rs < 0 ? -rs : rs))) {
            for (i = 0; i < h; i++) /* each row is read along k: gather it into column i */
                for (p = 0; p < kb; p++)
                    out[p * mr + i] = src[i * rs + p * cs];
        } else {
            for (p = 0; p < kb; p++)
                for (i = 0; i < h; i++)
                    out[p * mr + i] = src[i * rs + p * cs];
        }
        for (i = h; i < mr; i++)
            for (p = 0; p < kb; p++)
                out[p * mr + i] = 0.0f;
        out += mr * kb;
    }
}

/* kb x cols of B (B(p, j) = b[p*rs + j*cs]) into panels of nr columns: out[jr*kb + p*nr + j].
 * next, when not NULL, is the first element of the next columns to pack (b + cols*cs): its
 * rows are prefetched while this block is copied, for packing one micro-panel at a time. */
FC_INLINE void fc_sg_pack_b_block(long nr, long cols, long kb, const float *b, long rs, long cs,
                                  float *FC_RESTRICT out, const float *next) {
    long jr, j, p;
    for (jr = 0; jr < cols; jr += nr) {
        const long w = fc_sg_min(nr, cols - jr);
        const float *src = b + jr * cs;
        if (cs == 1 && w == FC_SGEMM_NR && nr == FC_SGEMM_NR) {
            for (p = 0; p < kb; p++) { /* whole native panel rows: vector copies */
                const float *row = src + p * rs;
                long u;
                if (next) {
                    FC_SG_PREFETCH(next + p * rs);
                    FC_SG_PREFETCH(next + p * rs + FC_SGEMM_NR - 1);
                }
                for (u = 0; u < FC_SGEMM_NV; u++)
                    fc_sg_store(out + p * FC_SGEMM_NR + u * FC_SGEMM_VL, fc_sg_load(row + u * FC_SGEMM_VL));
            }
        } else if (cs == 1) {
            for (p = 0; p < kb; p++) {
                if (next)
                    FC_SG_PREFETCH(next + p * rs);
                for (j = 0; j < w; j++)
                    out[p * nr + j] = src[p * rs + j];
                for (j = w; j < nr; j++)
                    out[p * nr + j] = 0.0f;
            }
        } else {
            if ((rs < 0 ? -rs : rs) <= (cs < 0 ? -cs : cs) && rs != 0) {
                for (j = 0; j < w; j++) /* each column is read along k */
                    for (p = 0; p < kb; p++)
                        out[p * nr + j] = src[p * rs + j * cs];
            } else {
                for (p = 0; p < kb; p++)
                    for (j = 0; j < w; j++)
                        out[p * nr + j] = src[p * rs + j * cs];
            }
            for (p = 0; p < kb; p++)
                for (j = w; j < nr; j++)
                    out[p * nr + j] = 0.0f;
        }
        out += nr * kb;
    }
}

/* The whole A (A(i, p) = a[i*rs + p*cs]) in the packed layout: fc_sgemm_packed_a_floats(p). */
FC_INLINE void fc_sgemm_pack_a(const fc_sgemm_plan *p, const float *a, long rs, long cs, float *out) {
    const long kc = fc_sg_kc(p), mpad = fc_sg_roundup(p->m, p->mr);
    long pc;
    for (pc = 0; pc < p->k; pc += kc)
        fc_sg_pack_a_block(p->mr, p->m, fc_sg_min(kc, p->k - pc), a + pc * cs, rs, cs, out + pc * mpad);
}

/* The whole B (B(p, j) = b[p*rs + j*cs]) in the packed layout: fc_sgemm_packed_b_floats(p). */
FC_INLINE void fc_sgemm_pack_b(const fc_sgemm_plan *p, const float *b, long rs, long cs, float *out) {
    const long kc = fc_sg_kc(p), npad = fc_sg_roundup(p->n, p->nr);
    long pc;
    for (pc = 0; pc < p->k; pc += kc)
        fc_sg_pack_b_block(p->nr, p->n, fc_sg_min(kc, p->k - pc), b + pc * rs, rs, cs, out + pc * npad, NULL);
}

/* ------------------------------------------------------------------ storing a tile */
/* Where and how one micro-kernel call stores its tile. */
typedef struct fc_sg_out {
    float *c;               /* C(i0, j0) */
    long ldc, cols;         /* cols valid columns (rows are the kernel's own) */
    float alpha, beta;      /* beta 0: C not read; 1: added */
    const float *bias_row;  /* bias of the tile's row 0, or NULL */
    const float *bias_col;  /* bias of the tile's column 0, or NULL */
    const char *pf;         /* or NULL: the tile prefetches pf + p * pfs into L2 at k step p */
    long pfs;
} fc_sg_out;

FC_SG_BODY void fc_sg_put1(const fc_sg_out *o, long i, long j, float t) {
    float *c = o->c + i * o->ldc + j;
    if (o->alpha != 1.0f)
        t *= o->alpha;
    if (o->beta == 1.0f)
        t += *c;
    else if (o->beta != 0.0f)
        t += o->beta * *c;
    if (o->bias_row)
        t += o->bias_row[i];
    if (o->bias_col)
        t += o->bias_col[j];
    *c = t;
}

/* Elements j .. j+count-1 of row i, from t: the partial last vector of an edge tile. Kept out
 * of line so that the micro-kernels stay small. */
#if FC_SG_DEFINE
FC_SG_KERNEL void FC_SG_K(put_tail)(const fc_sg_out *o, long i, long j, const float *t, long count) {
    long x;
    for (x = 0; x < count; x++)
        fc_sg_put1(o, i, j + x, t[x]);
}
#else
FC_SG_KDECL void FC_SG_K(put_tail)(const fc_sg_out *o, long i, long j, const float *t, long count);
#endif

/* Row i, vector u of the tile. */
FC_SG_BODY void fc_sg_put(const fc_sg_out *o, long i, long u, fc_sgemm_v t) {
    const long j = u * FC_SGEMM_VL;
    float *c = o->c + i * o->ldc + j;
    if (o->cols - j >= FC_SGEMM_VL) {
        if (o->alpha != 1.0f)
            t = t * FC_SG_SPLAT(o->alpha);
        if (o->beta == 1.0f)
            t = t + fc_sg_load(c);
        else if (o->beta != 0.0f)
            t = FC_SG_FMA(FC_SG_SPLAT(o->beta), fc_sg_load(c), t);
        if (o->bias_row)
            t = t + FC_SG_SPLAT(o->bias_row[i]);
        if (o->bias_col)
            t = t + fc_sg_load(o->bias_col + j);
        fc_sg_store(c, t);
    } else {
        float tmp[FC_SGEMM_VL];
        fc_sg_store(tmp, t);
        FC_SG_K(put_tail)(o, i, j, tmp, o->cols - j);
    }
}

/* ------------------------------------------------------------------ micro-kernels */
/* B's vectors of a k step held in registers (FC_VF_KEEP): with few rows gcc folded each load
 * into every multiply-add (a batch-32 dense layer, 32 = 14 + 14 + 4 rows, 32 x 512 x 784:
 * 252.6 -> 225.4 us kept). */
#define FC_SG_KEEP(b0, b1, b2, b3)                         \
    {                                                      \
        FC_VF_KEEP(b0);                                    \
        if (U > 1) FC_VF_KEEP(b1);                         \
        if (U > 2) FC_VF_KEEP(b2);                         \
        if (U > 3) FC_VF_KEEP(b3);                         \
    }
#define FC_SG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define FC_SG_DECL(i) fc_sgemm_v c##i##_0 = z, c##i##_1 = z, c##i##_2 = z, c##i##_3 = z;
#define FC_SG_STEP(i)                                      \
    if (i < R) {                                           \
        const fc_sgemm_v ai = FC_SG_SPLAT(a[i * ars]);     \
        c##i##_0 = FC_SG_FMA(ai, b0, c##i##_0);            \
        if (U > 1)                                         \
            c##i##_1 = FC_SG_FMA(ai, b1, c##i##_1);        \
        if (U > 2)                                         \
            c##i##_2 = FC_SG_FMA(ai, b2, c##i##_2);        \
        if (U > 3)                                         \
            c##i##_3 = FC_SG_FMA(ai, b3, c##i##_3);        \
    }
/* The tile's rows of C, fetched while the k loop runs (they are read or written after it). */
#define FC_SG_PREFETCH_ROW(i)                              \
    if (i < R) {                                           \
        FC_SG_PREFETCH_W(o->c + i * o->ldc);               \
        FC_SG_PREFETCH_W(o->c + i * o->ldc + (U * FC_SGEMM_VL - 1)); \
    }
#define FC_SG_PUT(i)                                       \
    if (i < R) {                                           \
        fc_sg_put(o, i, 0, c##i##_0);                      \
        if (U > 1)                                         \
            fc_sg_put(o, i, 1, c##i##_1);                  \
        if (U > 2)                                         \
            fc_sg_put(o, i, 2, c##i##_2);                  \
        if (U > 3)                                         \
            fc_sg_put(o, i, 3, c##i##_3);                  \
    }

/* Row i of a whole tile that only writes C (alpha 1, beta 0, no column bias), plus the row's
 * bias: c, ldc and brow are the tile's, in locals (fc_sg_put reads them from the struct again
 * after every store and tests alpha, beta and the biases per vector: ~20 instructions a
 * vector, which at small k cost as much as the multiply-adds). */
#define FC_SG_STORE(i)                                                                     \
    if (i < R) {                                                                           \
        float *ci = c + i * ldc;                                                           \
        const fc_sgemm_v bi = brow ? FC_SG_SPLAT(brow[i]) : z;                             \
        fc_sg_store(ci, c##i##_0 + bi);                                                    \
        if (U > 1)                                                                         \
            fc_sg_store(ci + FC_SGEMM_VL, c##i##_1 + bi);                                  \
        if (U > 2)                                                                         \
            fc_sg_store(ci + 2 * FC_SGEMM_VL, c##i##_2 + bi);                              \
        if (U > 3)                                                                         \
            fc_sg_store(ci + 3 * FC_SGEMM_VL, c##i##_3 + bi);                              \
    }
/* The locals FC_SG_STORE reads, and whether the tile may take it. */
#define FC_SG_STORE_LOCALS                                                                 \
    float *const c = o->c;                                                                 \
    const long ldc = o->ldc;                                                               \
    const float *const brow = o->bias_row;                                                 \
    const int whole = o->alpha == 1.0f && o->beta == 0.0f && !o->bias_col && o->cols >= U * FC_SGEMM_VL;

/* R rows (<= FC_SGEMM_MR) x U vectors (<= FC_SGEMM_NV) of the tile, over kc: a is an A
 * micro-panel (stride FC_SGEMM_MR per p), b a B micro-panel (stride FC_SGEMM_NR per p).
 * R and U are constants at every call, so only their accumulators exist. PF (packed A): each
 * step also prefetches the same step of the next A micro-panel, the one the next tile reads
 * (the next row panel, or the next k block's first). A layer's weights at batch 1 are read
 * once per call from L3 or memory, and the hardware prefetchers did not keep up: ResNet-50's
 * 512 x 4608 x 49 products ran at 86 GFLOP/s, 128 with the prefetch (one thread). Without PF,
 * each step prefetches o->pf + p * o->pfs into L2 where fc_sgemm set o->pf: the tile's share of
 * the next packed B micro-panel (the weights of a dense layer). */
FC_SG_BODY void fc_sg_micro_body(const int R, const int U, long kc, const float *FC_RESTRICT a,
                                 const long ars, const long acs, const float *FC_RESTRICT b, const long bs,
                                 const fc_sg_out *o, const int PF) {
    const fc_sgemm_v z = FC_SG_SPLAT(0.0f);
    const long pfd = kc * acs;
    long p;
    const char *pfb = o->pf ? o->pf : (const char *)b; /* none: the line b reads anyway */
    const long pfs = o->pf ? o->pfs : 0;
    FC_SG_ROWS(FC_SG_DECL)
    FC_SG_ROWS(FC_SG_PREFETCH_ROW)
    for (p = 0; p < kc; p++) {
        fc_sgemm_v b0 = fc_sg_load(b);
        fc_sgemm_v b1 = U > 1 ? fc_sg_load(b + FC_SGEMM_VL) : z;
        fc_sgemm_v b2 = U > 2 ? fc_sg_load(b + 2 * FC_SGEMM_VL) : z;
        fc_sgemm_v b3 = U > 3 ? fc_sg_load(b + 3 * FC_SGEMM_VL) : z;
        FC_SG_KEEP(b0, b1, b2, b3)
        FC_SG_ROWS(FC_SG_STEP)
        if (PF)
            FC_SG_PREFETCH(a + pfd);
        if (!PF) { /* PF: A is the packed weights and B a raw activation, warm in cache */
            FC_SG_PREFETCH_L2(pfb);
            pfb += pfs;
        }
        a += acs;
        b += bs;
    }
    {
        FC_SG_STORE_LOCALS
        if (whole) {
            FC_SG_ROWS(FC_SG_STORE)
        } else {
            FC_SG_ROWS(FC_SG_PUT)
        }
    }
}

/* Tiles of one or two rows have too few accumulators (r*u < 8) to hide the FMA latency:
 * four chains over p (p mod 4), summed at the end, where the registers allow. */
#define FC_SG_TDECL(i)                                                                    \
    fc_sgemm_v c##i##_0 = z, c##i##_1 = z, c##i##_2 = z, c##i##_3 = z;                    \
    fc_sgemm_v d##i##_0 = z, d##i##_1 = z, d##i##_2 = z, d##i##_3 = z;                    \
    fc_sgemm_v e##i##_0 = z, e##i##_1 = z, e##i##_2 = z, e##i##_3 = z;                    \
    fc_sgemm_v f##i##_0 = z, f##i##_1 = z, f##i##_2 = z, f##i##_3 = z;
#define FC_SG_TFMA(x, i, s)                                                               \
    if (i < R) {                                                                          \
        const fc_sgemm_v ai = FC_SG_SPLAT(a[s * acs + i * ars]);                          \
        x##i##_0 = FC_SG_FMA(ai, q0, x##i##_0);                                            \
        if (U > 1)                                                                        \
            x##i##_1 = FC_SG_FMA(ai, q1, x##i##_1);                                        \
        if (U > 2)                                                                        \
            x##i##_2 = FC_SG_FMA(ai, q2, x##i##_2);                                        \
        if (U > 3)                                                                        \
            x##i##_3 = FC_SG_FMA(ai, q3, x##i##_3);                                        \
    }
/* Step s of chain x: B's row s loaded once for both rows, held in registers (FC_SG_KEEP):
 * 2 x 64 x 256 63% -> 75% of peak. */
#define FC_SG_TSTEP(x, s)                                                                 \
    {                                                                                     \
        const float *bq = b + s * bs;                                                     \
        fc_sgemm_v q0 = fc_sg_load(bq);                                                   \
        fc_sgemm_v q1 = U > 1 ? fc_sg_load(bq + FC_SGEMM_VL) : z;                         \
        fc_sgemm_v q2 = U > 2 ? fc_sg_load(bq + 2 * FC_SGEMM_VL) : z;                     \
        fc_sgemm_v q3 = U > 3 ? fc_sg_load(bq + 3 * FC_SGEMM_VL) : z;                     \
        FC_SG_KEEP(q0, q1, q2, q3)                                                        \
        FC_SG_TFMA(x, 0, s) FC_SG_TFMA(x, 1, s)                                           \
    }
#define FC_SG_TSUM(i)                                                                     \
    c##i##_0 = (c##i##_0 + d##i##_0) + (e##i##_0 + f##i##_0);                             \
    c##i##_1 = (c##i##_1 + d##i##_1) + (e##i##_1 + f##i##_1);                             \
    c##i##_2 = (c##i##_2 + d##i##_2) + (e##i##_2 + f##i##_2);                             \
    c##i##_3 = (c##i##_3 + d##i##_3) + (e##i##_3 + f##i##_3);

FC_SG_BODY void fc_sg_micro_thin(const int R, const int U, long kc, const float *FC_RESTRICT a,
                                 const long ars, const long acs, const float *FC_RESTRICT b, const long bs,
                                 const fc_sg_out *o) {
    const fc_sgemm_v z = FC_SG_SPLAT(0.0f);
    long p;
    FC_SG_TDECL(0)
    FC_SG_TDECL(1)
    for (p = 0; p + 4 <= kc; p += 4) {
        FC_SG_TSTEP(c, 0) FC_SG_TSTEP(d, 1) FC_SG_TSTEP(e, 2) FC_SG_TSTEP(f, 3)
        a += 4 * acs;
        b += 4 * bs;
    }
    for (; p < kc; p++) {
        FC_SG_TSTEP(c, 0)
        a += acs;
        b += bs;
    }
    FC_SG_TSUM(0)
    FC_SG_TSUM(1)
    {
        FC_SG_STORE_LOCALS
        if (whole) {
            FC_SG_STORE(0)
            FC_SG_STORE(1)
        } else {
            FC_SG_PUT(0)
            FC_SG_PUT(1)
        }
    }
}

/* A micro-panel element (i, p) is a[i*ars + p*acs]: packed (1, FC_SGEMM_MR), or raw A read in
 * place (row-major: (lda, 1); transposed: (1, lda)). B's row p of the tile is at b + p*bs: a
 * packed micro-panel (bs FC_SGEMM_NR) or raw B read in place (bs its row stride). */
typedef void (*fc_sg_kernel_fn)(long kc, const float *a, long ars, long acs, const float *b, long bs,
                                const fc_sg_out *o);

#if FC_SG_DEFINE
#define FC_SG_INST(r, u)                                                                          \
    FC_SG_KERNEL void FC_SG_K(mk_##r##_##u)(long kc, const float *a, long ars, long acs, const float *b, \
                                            long bs, const fc_sg_out *o) {                        \
        if (FC_SGEMM_VL > 1 && r <= 2 && r * u < 8 && 4 * r * u <= FC_SG_REGS - 4)                \
            fc_sg_micro_thin(r, u, kc, a, ars, acs, b, bs, o);                                    \
        else                                                                                      \
            fc_sg_micro_body(r, u, kc, a, ars, acs, b, bs, o, 0);                                 \
    }
/* The whole tile from a packed A: strides known, so loads use immediate offsets. */
FC_SG_KERNEL void FC_SG_K(mk_full_packed)(long kc, const float *a, const float *b, const fc_sg_out *o) {
    fc_sg_micro_body(FC_SGEMM_MR, FC_SGEMM_NV, kc, a, 1, FC_SGEMM_MR, b, FC_SGEMM_NR, o, 1);
}
/* The same with raw B read in place, bs floats from one row to the next. */
FC_SG_KERNEL void FC_SG_K(mk_full_raw_b)(long kc, const float *a, const float *b, long bs, const fc_sg_out *o) {
    fc_sg_micro_body(FC_SGEMM_MR, FC_SGEMM_NV, kc, a, 1, FC_SGEMM_MR, b, bs, o, 1);
}
#else
#define FC_SG_INST(r, u)                                                                       \
    FC_SG_KDECL void FC_SG_K(mk_##r##_##u)(long kc, const float *a, long ars, long acs, const float *b, \
                                           long bs, const fc_sg_out *o);
FC_SG_KDECL void FC_SG_K(mk_full_packed)(long kc, const float *a, const float *b, const fc_sg_out *o);
FC_SG_KDECL void FC_SG_K(mk_full_raw_b)(long kc, const float *a, const float *b, long bs, const fc_sg_out *o);
#endif
/* the kernels of fc_sg_tile's table: rows 1 .. MR, vectors 1 .. NV */
#if FC_SGEMM_NV == 2
#define FC_SG_INST_R(r) FC_SG_INST(r, 1) FC_SG_INST(r, 2)
#elif FC_SGEMM_NV == 3
#define FC_SG_INST_R(r) FC_SG_INST(r, 1) FC_SG_INST(r, 2) FC_SG_INST(r, 3)
#else
#define FC_SG_INST_R(r) FC_SG_INST(r, 1) FC_SG_INST(r, 2) FC_SG_INST(r, 3) FC_SG_INST(r, 4)
#endif
#define FC_SG_INSTS1 FC_SG_INST_R(1)
#define FC_SG_INSTS2 FC_SG_INSTS1 FC_SG_INST_R(2)
#define FC_SG_INSTS3 FC_SG_INSTS2 FC_SG_INST_R(3)
#define FC_SG_INSTS4 FC_SG_INSTS3 FC_SG_INST_R(4)
#define FC_SG_INSTS5 FC_SG_INSTS4 FC_SG_INST_R(5)
#define FC_SG_INSTS6 FC_SG_INSTS5 FC_SG_INST_R(6)
#define FC_SG_INSTS7 FC_SG_INSTS6 FC_SG_INST_R(7)
#define FC_SG_INSTS8 FC_SG_INSTS7 FC_SG_INST_R(8)
#define FC_SG_INSTS9 FC_SG_INSTS8 FC_SG_INST_R(9)
#define FC_SG_INSTS10 FC_SG_INSTS9 FC_SG_INST_R(10)
#define FC_SG_INSTS11 FC_SG_INSTS10 FC_SG_INST_R(11)
#define FC_SG_INSTS12 FC_SG_INSTS11 FC_SG_INST_R(12)
#define FC_SG_INSTS13 FC_SG_INSTS12 FC_SG_INST_R(13)
#define FC_SG_INSTS14 FC_SG_INSTS13 FC_SG_INST_R(14)
#define FC_SG_INSTS_(n) FC_SG_INSTS##n
#define FC_SG_INSTS(n) FC_SG_INSTS_(n)
FC_SG_INSTS(FC_SGEMM_MR)

#if FC_SGEMM_NV == 2
#define FC_SG_ROWFNS(r) {FC_SG_K(mk_##r##_1), FC_SG_K(mk_##r##_2)}
#elif FC_SGEMM_NV == 3
#define FC_SG_ROWFNS(r) {FC_SG_K(mk_##r##_1), FC_SG_K(mk_##r##_2), FC_SG_K(mk_##r##_3)}
#else
#define FC_SG_ROWFNS(r) {FC_SG_K(mk_##r##_1), FC_SG_K(mk_##r##_2), FC_SG_K(mk_##r##_3), FC_SG_K(mk_##r##_4)}
#endif
#define FC_SG_UPTO1 FC_SG_ROWFNS(1)
#define FC_SG_UPTO2 FC_SG_UPTO1, FC_SG_ROWFNS(2)
#define FC_SG_UPTO3 FC_SG_UPTO2, FC_SG_ROWFNS(3)
#define FC_SG_UPTO4 FC_SG_UPTO3, FC_SG_ROWFNS(4)
#define FC_SG_UPTO5 FC_SG_UPTO4, FC_SG_ROWFNS(5)
#define FC_SG_UPTO6 FC_SG_UPTO5, FC_SG_ROWFNS(6)
#define FC_SG_UPTO7 FC_SG_UPTO6, FC_SG_ROWFNS(7)
#define FC_SG_UPTO8 FC_SG_UPTO7, FC_SG_ROWFNS(8)
#define FC_SG_UPTO9 FC_SG_UPTO8, FC_SG_ROWFNS(9)
#define FC_SG_UPTO10 FC_SG_UPTO9, FC_SG_ROWFNS(10)
#define FC_SG_UPTO11 FC_SG_UPTO10, FC_SG_ROWFNS(11)
#define FC_SG_UPTO12 FC_SG_UPTO11, FC_SG_ROWFNS(12)
#define FC_SG_UPTO13 FC_SG_UPTO12, FC_SG_ROWFNS(13)
#define FC_SG_UPTO14 FC_SG_UPTO13, FC_SG_ROWFNS(14)
#define FC_SG_UPTO_(n) FC_SG_UPTO##n
#define FC_SG_UPTO(n) FC_SG_UPTO_(n)

/* Where vectors are one float (the scalar kernels: microcontrollers, portable builds) the tile's
 * kernel is chosen by a switch of direct calls rather than read from a table of pointers, so
 * that a firmware's stack bound follows every call (codegen/backends/c/mcu.py stack_bound). */
#if FC_SGEMM_VL == 1
#define FC_SG_SWITCH 1
#define FC_SG_CASE(r, u)                                                                         \
    case ((r) - 1) * FC_SGEMM_NV + (u) - 1:                                                      \
        FC_SG_K(mk_##r##_##u)(kc, a, ars, acs, b, bs, o);                                        \
        break;
#if FC_SGEMM_NV == 2
#define FC_SG_CASES_R(r) FC_SG_CASE(r, 1) FC_SG_CASE(r, 2)
#elif FC_SGEMM_NV == 3
#define FC_SG_CASES_R(r) FC_SG_CASE(r, 1) FC_SG_CASE(r, 2) FC_SG_CASE(r, 3)
#else
#define FC_SG_CASES_R(r) FC_SG_CASE(r, 1) FC_SG_CASE(r, 2) FC_SG_CASE(r, 3) FC_SG_CASE(r, 4)
#endif
#define FC_SG_CASES1 FC_SG_CASES_R(1)
#define FC_SG_CASES2 FC_SG_CASES1 FC_SG_CASES_R(2)
#define FC_SG_CASES3 FC_SG_CASES2 FC_SG_CASES_R(3)
#define FC_SG_CASES4 FC_SG_CASES3 FC_SG_CASES_R(4)
#define FC_SG_CASES5 FC_SG_CASES4 FC_SG_CASES_R(5)
#define FC_SG_CASES6 FC_SG_CASES5 FC_SG_CASES_R(6)
#define FC_SG_CASES7 FC_SG_CASES6 FC_SG_CASES_R(7)
#define FC_SG_CASES8 FC_SG_CASES7 FC_SG_CASES_R(8)
#define FC_SG_CASES9 FC_SG_CASES8 FC_SG_CASES_R(9)
#define FC_SG_CASES10 FC_SG_CASES9 FC_SG_CASES_R(10)
#define FC_SG_CASES11 FC_SG_CASES10 FC_SG_CASES_R(11)
#define FC_SG_CASES12 FC_SG_CASES11 FC_SG_CASES_R(12)
#define FC_SG_CASES13 FC_SG_CASES12 FC_SG_CASES_R(13)
#define FC_SG_CASES14 FC_SG_CASES13 FC_SG_CASES_R(14)
#define FC_SG_CASES_(n) FC_SG_CASES##n
#define FC_SG_CASES(n) FC_SG_CASES_(n)
#else
#define FC_SG_SWITCH 0
#endif

/* On microcontrollers (M-profile) the partial tiles at the edges take one compact loop
 * instead of a kernel per shape: the 16 unrolled kernels of the 4 x 4 tile are 24 KB of flash,
 * and the edges a small share of a layer's products (DS-CNN: 31.9 to 9.0 KB of kernels, 0.4%
 * more instructions). */
#if FC_SG_SWITCH && defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
#define FC_SG_COMPACT 1
#if FC_SG_DEFINE
FC_SG_KERNEL void FC_SG_K(edge)(long rows, long cols, long kc, const float *a, long ars, long acs, const float *b,
                                long bs, const fc_sg_out *o) {
    long i, j, p;
    for (i = 0; i < rows; i++) { /* a row at a time: the tile's B panel is read again per row */
        const float *ai = a + i * ars;
#if FC_SGEMM_NR == 4
        if (cols == 4) { /* a whole row of the tile (a dense layer's one row): four sums */
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            for (p = 0; p < kc; p++) {
                const float x = ai[p * acs], *bp = b + p * bs;
                s0 += x * bp[0];
                s1 += x * bp[1];
                s2 += x * bp[2];
                s3 += x * bp[3];
            }
            fc_sg_put1(o, i, 0, s0);
            fc_sg_put1(o, i, 1, s1);
            fc_sg_put1(o, i, 2, s2);
            fc_sg_put1(o, i, 3, s3);
            continue;
        }
#endif
        for (j = 0; j < cols; j++) {
            float s = 0.0f;
            for (p = 0; p < kc; p++)
                s += ai[p * acs] * b[p * bs + j];
            fc_sg_put1(o, i, j, s);
        }
    }
}
#else
FC_SG_KDECL void FC_SG_K(edge)(long rows, long cols, long kc, const float *a, long ars, long acs, const float *b,
                               long bs, const fc_sg_out *o);
#endif
#else
#define FC_SG_COMPACT 0
#endif

/* Columns [j0, cols) of a tile from a packed A micro-panel (element (i, p) at a[p*MR + i]), for
 * targets whose MR rows fit one vector: per column, the rows as one vector summed over p, then
 * put element by element. A 7x7 image (n = 49) has a second column panel of 17 columns: one
 * vector and this for the 49th column, instead of a second vector for one column (the U = 2
 * kernel over 32); a 14x14 one (n = 196) a last panel of 4 columns: this, 4 multiply-adds a k
 * step instead of the U = 1 kernel's 14 (n = 196 products 6-12% faster; ResNet-50 3.5%).
 * Columns go four at a time (fc_sg_narrow4, a function of its own so that the one-column loop
 * compiles as before), then one at a time (four chains); the last p is summed apart, so that
 * no load reads past the panel. */
#if FC_SGEMM_VL > 1 && FC_SGEMM_MR <= FC_SGEMM_VL
#define FC_SG_NARROW 4 /* columns past the last whole vector that go here; 0: none */
#define FC_SG_NB_(s, x, p, j) s = FC_SG_FMA(x, FC_SG_SPLAT(b[(p) * FC_SGEMM_NR + (j)]), s)
#if FC_SG_DEFINE
/* Column j of the tile: s (its sum over p < q = kc - 1) plus the last p, element by element. */
FC_SG_BODY void fc_sg_narrow_put_(long rows, long j, fc_sgemm_v s, long q, const float *a, const float *b,
                                  const fc_sg_out *o) {
    float t[FC_SGEMM_VL];
    long i;
    fc_sg_store(t, s);
    for (i = 0; i < rows; i++)
        fc_sg_put1(o, i, j, t[i] + a[q * FC_SGEMM_MR + i] * b[q * FC_SGEMM_NR + j]);
}

/* Columns [j, j + 4): one A load for the four, two chains a column (even and odd p). */
FC_SG_KERNEL void FC_SG_K(narrow4)(long rows, long j, long kc, const float *a, const float *b, const fc_sg_out *o) {
    const fc_sgemm_v z = FC_SG_SPLAT(0.0f);
    const long q = kc - 1; /* p below q: whole vector loads */
    fc_sgemm_v e0 = z, e1 = z, e2 = z, e3 = z, d0 = z, d1 = z, d2 = z, d3 = z;
    long p;
    for (p = 0; p + 2 <= q; p += 2) {
        const fc_sgemm_v x0 = fc_sg_load(a + p * FC_SGEMM_MR), x1 = fc_sg_load(a + (p + 1) * FC_SGEMM_MR);
        FC_SG_NB_(e0, x0, p, j), FC_SG_NB_(d0, x1, p + 1, j);
        FC_SG_NB_(e1, x0, p, j + 1), FC_SG_NB_(d1, x1, p + 1, j + 1);
        FC_SG_NB_(e2, x0, p, j + 2), FC_SG_NB_(d2, x1, p + 1, j + 2);
        FC_SG_NB_(e3, x0, p, j + 3), FC_SG_NB_(d3, x1, p + 1, j + 3);
    }
    if (p < q) {
        const fc_sgemm_v x0 = fc_sg_load(a + p * FC_SGEMM_MR);
        FC_SG_NB_(e0, x0, p, j), FC_SG_NB_(e1, x0, p, j + 1);
        FC_SG_NB_(e2, x0, p, j + 2), FC_SG_NB_(e3, x0, p, j + 3);
    }
    fc_sg_narrow_put_(rows, j, e0 + d0, q, a, b, o);
    fc_sg_narrow_put_(rows, j + 1, e1 + d1, q, a, b, o);
    fc_sg_narrow_put_(rows, j + 2, e2 + d2, q, a, b, o);
    fc_sg_narrow_put_(rows, j + 3, e3 + d3, q, a, b, o);
}

FC_SG_KERNEL void FC_SG_K(narrow)(long rows, long j0, long cols, long kc, const float *a, const float *b,
                               const fc_sg_out *o) {
    const fc_sgemm_v z = FC_SG_SPLAT(0.0f);
    const long q = kc - 1; /* p below q: whole vector loads */
    long j, p;
    for (j = j0; j + 4 <= cols; j += 4)
        FC_SG_K(narrow4)(rows, j, kc, a, b, o);
    for (; j < cols; j++) {
        fc_sgemm_v s0 = z, s1 = z, s2 = z, s3 = z;
        for (p = 0; p + 4 <= q; p += 4) {
            FC_SG_NB_(s0, fc_sg_load(a + p * FC_SGEMM_MR), p, j);
            FC_SG_NB_(s1, fc_sg_load(a + (p + 1) * FC_SGEMM_MR), p + 1, j);
            FC_SG_NB_(s2, fc_sg_load(a + (p + 2) * FC_SGEMM_MR), p + 2, j);
            FC_SG_NB_(s3, fc_sg_load(a + (p + 3) * FC_SGEMM_MR), p + 3, j);
        }
        for (; p < q; p++)
            FC_SG_NB_(s0, fc_sg_load(a + p * FC_SGEMM_MR), p, j);
        fc_sg_narrow_put_(rows, j, (s0 + s1) + (s2 + s3), q, a, b, o);
    }
}
#else
FC_SG_KDECL void FC_SG_K(narrow)(long rows, long j0, long cols, long kc, const float *a, const float *b,
                                  const fc_sg_out *o);
#endif
#undef FC_SG_NB_
#else
#define FC_SG_NARROW 0
#endif

/* One tile of the native micro-tile: rows <= MR, cols <= NR; A element (i, p) at
 * a[i*ars + p*acs]. A packed panel whose last 1 to 4 columns start a vector takes the
 * vectors before them and fc_sg_narrow for them. */
FC_INLINE void fc_sg_tile(long rows, long cols, long kc, const float *a, long ars, long acs,
                          const float *b, long bs, const fc_sg_out *o) {
#if !FC_SG_SWITCH
    static const fc_sg_kernel_fn table[FC_SGEMM_MR][FC_SGEMM_NV] = {FC_SG_UPTO(FC_SGEMM_MR)};
#endif
    const long u = (cols + FC_SGEMM_VL - 1) / FC_SGEMM_VL, rem = cols % FC_SGEMM_VL;
    if (rows == FC_SGEMM_MR && cols == FC_SGEMM_NR && ars == 1 && acs == FC_SGEMM_MR) {
        if (bs == FC_SGEMM_NR)
            FC_SG_K(mk_full_packed)(kc, a, b, o);
        else
            FC_SG_K(mk_full_raw_b)(kc, a, b, bs, o);
    } else if (rem > 0 && rem <= FC_SG_NARROW && kc > 1 && ars == 1 && acs == FC_SGEMM_MR && bs == FC_SGEMM_NR) {
#if FC_SG_NARROW
        if (u > 1) {
            fc_sg_out w = *o;
            w.cols = (u - 1) * FC_SGEMM_VL;
            table[rows - 1][u - 2](kc, a, 1, FC_SGEMM_MR, b, FC_SGEMM_NR, &w);
        }
        FC_SG_K(narrow)(rows, (u - 1) * FC_SGEMM_VL, cols, kc, a, b, o);
#endif
    } else {
#if FC_SG_COMPACT
        FC_SG_K(edge)(rows, cols, kc, a, ars, acs, b, bs, o);
        (void)u;
#elif FC_SG_SWITCH
        switch ((rows - 1) * FC_SGEMM_NV + u - 1) {
            FC_SG_CASES(FC_SGEMM_MR)
        default:
            break;
        }
#else
        table[rows - 1][u - 1](kc, a, ars, acs, b, bs, o);
#endif
    }
}

/* Any mr x nr (a plan packed for another target): one dot product per element. */
FC_INLINE void fc_sg_tile_any(long mr, long nr, long rows, long cols, long kc, const float *a,
                              const float *b, const fc_sg_out *o) {
    long i, j, p;
    for (i = 0; i < rows; i++)
        for (j = 0; j < cols; j++) {
            float acc = 0.0f;
            for (p = 0; p < kc; p++)
                acc += a[p * mr + i] * b[p * nr + j];
            fc_sg_put1(o, i, j, acc);
        }
}

/* ------------------------------------------------------------------ the driver */
/* C = beta*C (+ bias), epilogue: the k == 0 product. */
FC_INLINE void fc_sg_no_k(const fc_sgemm_plan *P, float *c, const float *bias, long m0, long m1,
                          long n0, long n1) {
    fc_sg_out o;
    long i, j;
    o.c = c;
    o.ldc = P->ldc;
    o.cols = n1;
    o.alpha = 1.0f;
    o.beta = P->beta;
    o.bias_row = P->bias == FC_SGEMM_BIAS_ROW ? bias : NULL;
    o.bias_col = P->bias == FC_SGEMM_BIAS_COL ? bias : NULL;
    o.pf = NULL;
    o.pfs = 0;
    for (i = m0; i < m1; i++)
        for (j = n0; j < n1; j++)
            fc_sg_put1(&o, i, j, 0.0f);
}

/* The slice [m0, m1) x [n0, n1) of C of part `part` of `parts` (whole micro-panels): along
 * the columns when there are at least as many column panels as row panels, or when that
 * balances the parts clearly better (the largest part's share of the panels at least 10%
 * smaller), e.g. 64 x 64 on 14 x 32 tiles over 2 parts: one column panel each (1/2) rather
 * than 3 and 2 row panels (3/5); otherwise along the rows, so that each part reads only its
 * rows of A (a layer's weights, streamed from memory at batch 1). */
FC_INLINE void fc_sgemm_part_range(const fc_sgemm_plan *P, long part, long parts, long *m0, long *m1,
                                   long *n0, long *n1) {
    const long mp = (P->m + P->mr - 1) / P->mr, np = (P->n + P->nr - 1) / P->nr;
    *m0 = 0;
    *m1 = P->m;
    *n0 = 0;
    *n1 = P->n;
    if (parts <= 1)
        return;
    /* largest shares: ceil(np / parts) / np <= 0.9 ceil(mp / parts) / mp, cross-multiplied */
    if (np >= mp || 10 * ((np + parts - 1) / parts) * mp <= 9 * ((mp + parts - 1) / parts) * np) {
        *n0 = np * part / parts * P->nr;
        *n1 = fc_sg_min(P->n, np * (part + 1) / parts * P->nr);
    } else {
        *m0 = mp * part / parts * P->mr;
        *m1 = fc_sg_min(P->m, mp * (part + 1) / parts * P->mr);
    }
}

/* C = alpha*A*B + beta*C (+ bias), epilogue per tile; the part-th of `parts` slices.
 * a, b: raw or packed as the plan says; bias: m (ROW) or n (COL) floats, or NULL;
 * epi: NULL or a function; scratch: fc_sgemm_scratch_bytes(plan) bytes for this part. */
FC_SGEMM_DRIVER void fc_sgemm(const fc_sgemm_plan *P, const float *a, const float *b, float *c,
                              const float *bias, fc_sgemm_epilogue epi, const void *epi_arg,
                              void *scratch, long part, long parts) {
    const long mr = P->mr, nr = P->nr, k = P->k, ldc = P->ldc;
    const long kc = fc_sg_kc(P), mc = fc_sg_mc(P), nc = fc_sg_nc(P);
    const long mpad = fc_sg_roundup(P->m, mr), npad = fc_sg_roundup(P->n, nr);
    const int native = mr == FC_SGEMM_MR && nr == FC_SGEMM_NR;
    const int fly_b = fc_sg_fly_b(P);
    const int direct_a = fc_sg_direct_a(P);
    const int direct_b = fc_sg_direct_b(P);
    /* A micro-panel addressing: packed, or raw A in place */
    const long a_rs = direct_a ? P->a_rs : 1, a_cs = direct_a ? P->a_cs : mr;
    long m0, m1, n0, n1, jc, pc, ic, ir, jr;
    float *abuf = NULL, *bbuf = NULL;
    fc_sg_out o;

    if (P->m <= 0 || P->n <= 0)
        return;
    fc_sgemm_part_range(P, part, parts, &m0, &m1, &n0, &n1);
    if (m0 >= m1 || n0 >= n1)
        return;
    if (k <= 0) {
        fc_sg_no_k(P, c, bias, m0, m1, n0, n1);
        if (epi)
            for (ic = m0; ic < m1; ic += mr)
                for (jc = n0; jc < n1; jc += nr)
                    epi(c + ic * ldc + jc, ldc, fc_sg_min(mr, m1 - ic), fc_sg_min(nr, n1 - jc), ic, jc,
                        epi_arg);
        return;
    }
    if (!P->b_packed || (!P->a_packed && !direct_a)) {
        abuf = (float *)scratch;
        bbuf = P->a_packed || direct_a ? abuf : abuf + fc_sg_abuf_floats(P);
    }
    o.ldc = ldc;
    o.alpha = P->alpha;
    o.pf = NULL;
    o.pfs = 0;
    for (jc = n0; jc < n1; jc += nc) {
        const long nb = fc_sg_min(nc, n1 - jc);
        for (pc = 0; pc < k; pc += kc) {
            const long kb = fc_sg_min(kc, k - pc);
            const int last = pc + kb >= k;
            const long a_step = direct_a ? P->a_rs : kb; /* from one row panel to the next, per row */
            /* raw B read in place: the block's whole column panels (columns below jpart) from b;
             * its partial last one, if any, packed once into bbuf */
            const long jpart = direct_b ? nb / nr * nr : 0;
            const float *bp, *ap;
            if (P->b_packed) {
                bp = fc_sg_packed_b_block(b, npad, pc, jc, kb);
            } else if (direct_b) {
                bp = b + pc * P->b_rs + jc;
                if (jpart < nb)
                    fc_sg_pack_b_block(nr, nb - jpart, kb, bp + jpart, P->b_rs, 1, bbuf, NULL);
            } else if (fly_b) {
                bp = bbuf;
            } else {
                fc_sg_pack_b_block(nr, nb, kb, b + pc * P->b_rs + jc * P->b_cs, P->b_rs, P->b_cs, bbuf, NULL);
                bp = bbuf;
            }
            o.beta = pc == 0 ? P->beta : 1.0f;
            for (ic = m0; ic < m1; ic += mc) {
                const long mb = fc_sg_min(mc, m1 - ic);
                if (P->a_packed) {
                    ap = a + pc * mpad + ic * kb;
                } else if (direct_a) {
                    ap = a + ic * P->a_rs + pc * P->a_cs;
                } else {
                    fc_sg_pack_a_block(mr, mb, kb, a + ic * P->a_rs + pc * P->a_cs, P->a_rs, P->a_cs, abuf);
                    ap = abuf;
                }
/* The B micro-panel of the block's columns from jr (bpj) and its row stride (bs): raw B in
 * place, or packed (a panel packed just before its use and a partial one in bbuf, else in the
 * packed block) */
#define FC_SG_B_PANEL                                                                             \
    const int raw = jr < jpart;                                                                   \
    const float *bpj = raw ? bp + jr : fly_b || direct_b ? bbuf : bp + jr * kb;                   \
    const long bs = raw ? P->b_rs : nr
#define FC_SG_DO_TILE                                                                             \
    do {                                                                                          \
        const long rows = fc_sg_min(mr, mb - ir), cols = fc_sg_min(nr, nb - jr);                  \
        float *ct = c + (ic + ir) * ldc + jc + jr;                                                \
        o.c = ct;                                                                                 \
        o.cols = cols;                                                                            \
        o.bias_row = last && P->bias == FC_SGEMM_BIAS_ROW ? bias + ic + ir : NULL;                \
        o.bias_col = last && P->bias == FC_SGEMM_BIAS_COL ? bias + jc + jr : NULL;                \
        if (native)                                                                               \
            fc_sg_tile(rows, cols, kb, ap + ir * a_step, a_rs, a_cs, bpj, bs, &o);                \
        else                                                                                      \
            fc_sg_tile_any(mr, nr, rows, cols, kb, ap + ir * kb, bpj, &o);                        \
        if (last && epi)                                                                          \
            epi(ct, ldc, rows, cols, ic + ir, jc + jr, epi_arg);                                  \
    } while (0)
                if (P->order == 1) {
                    for (ir = 0; ir < mb; ir += mr)
                        for (jr = 0; jr < nb; jr += nr) {
                            FC_SG_B_PANEL;
                            FC_SG_DO_TILE;
                        }
                } else {
                    /* the full-height tiles of a panel of several prefetch (sgemm.h's B prefetch) */
                    const long full = mb > mr ? mb / mr : 0;
                    for (jr = 0; jr < nb; jr += nr) {
                        FC_SG_B_PANEL;
                        /* packed B (a layer's weights, read from L3 or memory once a call): each
                         * row tile of this micro-panel prefetches its share of the next one (or of
                         * the next k block's first) into L2, pfs bytes a k step; without it the
                         * tiles waited on B (GPT-2's 128 x 1024 x 256 products ran 20% slower with
                         * cold weights than with warm ones) */
                        const char *pf = NULL;
                        long pbytes = 0, pfs = 0;
                        if (P->b_packed && full > 0 && (jr + nr < nb || pc + kb < k)) {
                            const long kn = jr + nr < nb ? kb : fc_sg_min(kc, k - pc - kb);
                            pf = (const char *)(jr + nr < nb ? bpj + nr * kb
                                                             : fc_sg_packed_b_block(b, npad, pc + kb, jc, kn));
                            pbytes = kn * nr * (long)sizeof(float);
                            /* tile t from t * pfs * kb, the last ones held inside the panel */
                            pfs = fc_sg_min((pbytes + full * kb - 1) / (full * kb), pbytes / kb);
                        }
                        if (fly_b && !direct_b) {
                            const float *src = b + pc * P->b_rs + (jc + jr) * P->b_cs;
                            fc_sg_pack_b_block(nr, fc_sg_min(nr, nb - jr), kb, src, P->b_rs, P->b_cs, bbuf,
                                               jr + nr < nb ? src + nr * P->b_cs : NULL);
                        }
                        for (ir = 0; ir < mb; ir += mr) {
                            o.pf = pf && ir / mr < full ? pf + fc_sg_min(ir / mr * pfs * kb, pbytes - pfs * kb) : NULL;
                            o.pfs = pfs;
                            FC_SG_DO_TILE;
                        }
                    }
                }
#undef FC_SG_DO_TILE
#undef FC_SG_B_PANEL
            }
        }
    }
}

/* fc_sgemm_apart: fc_sgemm compiled once into kernels/sgemm.c with the tile kernels
 * (FC_KERNELS_APART), under the ISA's name; fc_sgemm itself where they are not apart. A large
 * product calls it: inlined with its plan a constant, the driver was most of the time a
 * model's own files took to compile (ResNet-50's two: 1.2 s each, 0.4-0.6 s with it and
 * conv_tiles.h's and winograd.h's drivers apart, at the same run time), while a small product
 * gains from the inlined one (8 products of 1 x 64 x 64: 0.99 us against 1.28). */
#if !defined(FC_KERNELS_APART)
#define fc_sgemm_apart fc_sgemm
#else
#define fc_sgemm_apart FC_SG_K(sgemm)
#if defined(FC_SGEMM_HERE)
FC_SG_KAPART void fc_sgemm_apart(const fc_sgemm_plan *P, const float *a, const float *b, float *c, const float *bias,
                                 fc_sgemm_epilogue epi, const void *epi_arg, void *scratch, long part, long parts) {
    fc_sgemm(P, a, b, c, bias, epi, epi_arg, scratch, part, parts);
}
#else
FC_SG_KDECL void fc_sgemm_apart(const fc_sgemm_plan *P, const float *a, const float *b, float *c, const float *bias,
                                fc_sgemm_epilogue epi, const void *epi_arg, void *scratch, long part, long parts);
#endif
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif /* FLOWC_KERNELS_SGEMM_H */
