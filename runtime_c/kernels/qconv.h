/* Integer convolution of quantized models (int8/uint8 activations, int8 weights): int32 sums
 * of (x - x_zero) * w plus an int32 bias, times a fixed-point multiplier per output channel,
 * plus y_zero, clamped to [lo, hi] (the fused activation) - TFLite's integer scheme; see
 * graphdef/ops/quant.py for the op and its numpy reference.
 *
 * Layout: x (N, C, H, W) and y (N, M, OH, OW) channels-first, w (M, C/groups, KH, KW). Each
 * (image, output channel) plane is one unit of work. Three forms: a dense layer (one output
 * position) is a dot product per output (fc_qconv_dense); a dense convolution on AVX-512 VNNI
 * the dot-product form (fc_qconv_dot); anything else the plane form: per image and group,
 * x - x_zero is copied once into int16 planes, padded with zeros and split by stride phase, so
 * that every tap of the kernel adds one dense run of them, times its weight, into the int32
 * sums of its output channel (four output channels a pass, sharing the reads): loops the
 * compiler vectorizes. No float arithmetic with the fixed-point multipliers: a microcontroller
 * build links no float routine for it (``scale``, ONNX's float multipliers: the int32 sum times
 * the multiplier in float32, rounded half to even, as onnxruntime requantizes).
 */
#ifndef FLOWC_KERNELS_QCONV_H
#define FLOWC_KERNELS_QCONV_H

#include "flowc_rt.h"

typedef struct fc_qconv_geom {
    long n, c, h, w, m, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    int32_t x_zero, y_zero, lo, hi;
    int per_channel; /* q and shift hold one value per output channel (else one for all) */
    int single;      /* the fixed-point product rounded once (fc_qmul) */
} fc_qconv_geom;

/* acc * q * 2**(-31 - right), q in [0, 2**31), right >= 0: the high half of the doubled 64-bit
 * product rounded half away from zero, then an arithmetic right shift rounded half away from
 * zero (TFLite's MultiplyByQuantizedMultiplier for a multiplier below one, gemmlowp's double
 * rounding: LiteRT's convolutions); with ``single``, the 64-bit product rounded once, halves up
 * (LiteRT's fully connected layers). */
/* fc_qmul's double rounding for right < 31: (ab +- 2**30) / 2**31 truncated is (ab + 2**30) >> 31
 * floored whatever ab's sign (for ab < 0: ab + 1 - 2**30 + 2**31 - 1), an int32 as |ab| < 2**62,
 * so the rest runs in 32 bits (a Cortex-M4's requantization took ~50 instructions in 64-bit
 * arithmetic, ~12 here); always inlined into the kernels' output loops (fc_qconv_rq_do). */
static inline FC_DEVICE __attribute__((always_inline, unused)) int32_t fc_qmul32(int32_t acc, int32_t q, int right) {
    const int64_t ab = (int64_t)acc * q;
    const int32_t h = (int32_t)((ab + ((int64_t)1 << 30)) >> 31);
    const int32_t m = (int32_t)(((uint32_t)1 << right) - 1u);
    return (h >> right) + ((h & m) > (m >> 1) + (h < 0));
}

FC_INLINE int32_t fc_qmul(int32_t acc, int32_t q, int right, int single) {
    const int64_t ab = (int64_t)acc * q;
    int64_t high, mask, threshold;
    if (single)
        return (int32_t)((ab + ((int64_t)1 << (30 + right))) >> (31 + right));
    if (right < 31)
        return fc_qmul32(acc, q, right);
    high = (ab + (ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30))) / ((int64_t)1 << 31);
    mask = ((int64_t)1 << right) - 1;
    threshold = (mask >> 1) + (high < 0);
    return (int32_t)((high >> right) + ((high & mask) > threshold));
}

/* v (|v| <= 2**22) rounded to the nearest integer, halves to even, in float arithmetic alone:
 * v + 1.5 * 2**23 lies where floats are the integers, so the addition rounds (the default
 * rounding mode), and subtracting it back is exact. No libm call (a Cortex-M4 has no rounding
 * instruction: nearbyintf was a call per output), and a loop of it vectorizes. */
FC_INLINE float fc_qconv_rint(float v) { return (v + 12582912.0f) - 12582912.0f; }

#define FC_QCONV_BLOCK 4 /* output channels summed in one pass over the input planes */

/* The padded copy of an input plane (the rows and columns the windows read, from -ph and -pw)
 * split by phase: sh * sw planes of hq rows of wq, phase (ry, rx) holding rows ry, ry + sh, ...
 * and columns rx, rx + sw, ... of it, so that every tap reads one dense run of its phase. */
FC_INLINE long fc_qconv_hq(const fc_qconv_geom *g) {
    return ((g->oh - 1) * g->sh + (g->kh - 1) * g->dh + g->sh) / g->sh;
}
FC_INLINE long fc_qconv_wq(const fc_qconv_geom *g) {
    return ((g->ow - 1) * g->sw + (g->kw - 1) * g->dw + g->sw) / g->sw;
}

/* int16 values of one input channel's phases, and the columns a tap's pass reads past the last
 * phase's end ((kw - 1) * dw / sw, and up to 15 more: the passes run in whole blocks of 16; its
 * sums there are left), rounded up to 32 bytes. */
FC_INLINE long fc_qconv_ps(const fc_qconv_geom *g) {
    const long slack = (g->kw - 1) * g->dw / g->sw + (g->kh - 1) * g->dh / g->sh * fc_qconv_wq(g) + 16;
    return (g->sh * g->sw * fc_qconv_hq(g) * fc_qconv_wq(g) + slack + 15) / 16 * 16;
}

/* int32 sums of one output channel (oh rows of wq), rounded up to 64. */
FC_INLINE long fc_qconv_acc(const fc_qconv_geom *g) { return (g->oh * fc_qconv_wq(g) + 63) / 64 * 64; }

/* An output plane's positions rounded up to 64: its requantization runs in whole blocks of 64
 * (no scalar remainder) into a staging row, then copied out. */
FC_INLINE long fc_qconv_pn(const fc_qconv_geom *g) { return (g->oh * g->ow + 63) / 64 * 64; }

/* The dot-product form (x86 AVX-512 VNNI): a dense convolution (one group) runs as a product of
 * the weights (M, K = C * KH * KW) and the image's windows packed once per image as unsigned
 * bytes, four consecutive k of one output position together (x + 128 for int8: the sums are
 * corrected by (x_zero + 128) times the weights' sum), each instruction four products a lane
 * into 16 output positions' int32 sums: 4 channels x 64 positions a pass, or 16 channels x 16
 * positions where a plane has at most 16 (fc_qconv_dot_mb). */
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define FC_QCONV_DOT 1
#else
#define FC_QCONV_DOT 0
#endif

/* The same form on Arm's dot-product extension (AArch64 with __ARM_FEATURE_DOTPROD, e.g.
 * -mcpu=cortex-a76 or -march=armv8.2-a+dotprod): the windows packed as signed bytes (x - 128
 * for uint8: the sums corrected as above), each sdot four products a lane into four positions'
 * sums, 4 channels x 16 positions a pass (vdotq_laneq_s32 on the 4 channels' weights of four
 * k). FC_QCONV_PACKED: either. */
#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#define FC_QCONV_SDOT 1
#else
#define FC_QCONV_SDOT 0
#endif
#define FC_QCONV_PACKED (FC_QCONV_DOT || FC_QCONV_SDOT)

/* The column form (Cortex-M with the DSP extension: M4, M7, M33, M55): a dense convolution (one
 * group) takes four output positions at a time, their windows less x_zero packed as int16
 * columns, and each output channel's sums of them: each smlad two products of the channel's
 * int8 weights (four loaded at once, sign-extended in pairs: bytes 0 and 2, then 1 and 3) and a
 * column, so the columns hold each group of four k in that order (k0, k2, k1, k3). A dense layer
 * runs its dot products the same way. */
#if defined(__ARM_FEATURE_DSP) && defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M' && !FC_QCONV_PACKED
#include <arm_acle.h>
#define FC_QCONV_DSP 1
/* bytes 1 and 3 of v sign-extended to two int16 (sxtb16 of v rotated by 8: one instruction) */
FC_INLINE int32_t fc_qconv_sxtb16_r8(uint32_t v) {
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
    return r;
}
/* sum + the dot product of kf groups of four int8 weights (w) and four int16 values in the
 * column form's order (x: k0, k2, k1, k3): per group one weight word sign-extended in pairs,
 * two smlad (8 instructions a loop, written out: a compiler kept its pointers on the stack). */
FC_INLINE int32_t fc_qconv_dsp_dot(const int8_t *w, const int16_t *x, long kf, int32_t sum) {
    const int8_t *end = w + 4 * kf;
    uint32_t a, t, x0, x1;
    if (kf > 0)
        __asm__ volatile("1:\n\t"
                         "ldr %[a], [%[w]], #4\n\t"
                         "ldr %[x0], [%[x]], #4\n\t"
                         "ldr %[x1], [%[x]], #4\n\t"
                         "sxtb16 %[t], %[a]\n\t"
                         "sxtb16 %[a], %[a], ror #8\n\t"
                         "smlad %[s], %[t], %[x0], %[s]\n\t"
                         "smlad %[s], %[a], %[x1], %[s]\n\t"
                         "cmp %[w], %[end]\n\t"
                         "bne 1b"
                         : [s] "+&r"(sum), [w] "+&r"(w), [x] "+&r"(x), [a] "=&r"(a), [t] "=&r"(t), [x0] "=&r"(x0),
                           [x1] "=&r"(x1)
                         : [end] "r"(end)
                         : "cc", "memory");
    return sum;
}
/* s0 and s1 + the dot products of kf groups of four int8 weights of two rows (w0, w1) and four
 * x read in place less x_zero (zo: -x_zero in both halves): x's word extended in pairs with
 * the offset added (sxtab16, uxtab16 for unsigned x: bytes 0 and 2, then 1 and 3, the order the
 * weights' pairs take), each row two smlad (15 instructions for eight products). */
#define FC_QCONV_DSP_DOT2(name, ext)                                                                                 \
    FC_INLINE void name(const int8_t *w0, const int8_t *w1, const void *x, long kf, uint32_t zo, int32_t *s0,        \
                        int32_t *s1) {                                                                               \
        const int8_t *end = w0 + 4 * kf;                                                                             \
        int32_t a0 = *s0, a1 = *s1;                                                                                  \
        uint32_t v, a, b, t, x02;                                                                                    \
        if (kf > 0)                                                                                                  \
            __asm__ volatile("1:\n\t"                                                                                \
                             "ldr %[v], [%[x]], #4\n\t"                                                             \
                             "ldr %[a], [%[w0]], #4\n\t"                                                            \
                             "ldr %[b], [%[w1]], #4\n\t"                                                            \
                             ext " %[x02], %[zo], %[v]\n\t"                                                         \
                             ext " %[v], %[zo], %[v], ror #8\n\t"                                                   \
                             "sxtb16 %[t], %[a]\n\t"                                                                \
                             "sxtb16 %[a], %[a], ror #8\n\t"                                                        \
                             "smlad %[s0], %[t], %[x02], %[s0]\n\t"                                                 \
                             "smlad %[s0], %[a], %[v], %[s0]\n\t"                                                   \
                             "sxtb16 %[t], %[b]\n\t"                                                                \
                             "sxtb16 %[b], %[b], ror #8\n\t"                                                        \
                             "smlad %[s1], %[t], %[x02], %[s1]\n\t"                                                 \
                             "smlad %[s1], %[b], %[v], %[s1]\n\t"                                                   \
                             "cmp %[w0], %[end]\n\t"                                                                \
                             "bne 1b"                                                                               \
                             : [s0] "+&r"(a0), [s1] "+&r"(a1), [w0] "+&r"(w0), [w1] "+&r"(w1), [x] "+&r"(x),         \
                               [v] "=&r"(v), [a] "=&r"(a), [b] "=&r"(b), [t] "=&r"(t), [x02] "=&r"(x02)             \
                             : [end] "r"(end), [zo] "r"(zo)                                                         \
                             : "cc", "memory");                                                                     \
        *s0 = a0, *s1 = a1;                                                                                          \
    }
FC_QCONV_DSP_DOT2(fc_qconv_dsp_dot2_i8, "sxtab16")
FC_QCONV_DSP_DOT2(fc_qconv_dsp_dot2_u8, "uxtab16")
#else
#define FC_QCONV_DSP 0
#endif
/* A form kept out of line: its dispatcher's frame (a firmware's stack bound) stays small. */
#if defined(__GNUC__) || defined(__clang__)
#define FC_QCONV_APART static __attribute__((noinline, unused))
#else
#define FC_QCONV_APART static
#endif
/* One output channel's requantization set once for its outputs (the column and row forms):
 * what fc_qconv_one does for one output, the multiplier and bounds loaded once. */
#define FC_QCONV_AI static inline __attribute__((always_inline, unused))
typedef struct fc_qconv_rq {
    float sm, dlo, dhi; /* float multiplier (ONNX), bounds less y_zero */
    int32_t q, yz, lo, hi;
    int right, single, fl, fast; /* fast: double rounding with right < 31 (fc_qmul32, inlined) */
} fc_qconv_rq;
FC_QCONV_AI void fc_qconv_rq_set(fc_qconv_rq *r, const fc_qconv_geom *g, long pc, const int32_t *q,
                                 const int32_t *shift, const float *scale) {
    r->fl = scale != 0, r->yz = g->y_zero, r->lo = g->lo, r->hi = g->hi, r->single = g->single;
    r->sm = scale ? scale[pc] : 0.0f, r->dlo = (float)(g->lo - g->y_zero), r->dhi = (float)(g->hi - g->y_zero);
    r->q = scale ? 0 : q[pc], r->right = scale ? 0 : (int)-shift[pc];
    r->fast = !scale && !g->single && r->right < 31;
}
FC_QCONV_AI int32_t fc_qconv_rq_do(const fc_qconv_rq *r, int32_t acc) {
    if (r->fl) {
        float v = (float)acc * r->sm;
        v = v < r->dlo ? r->dlo : v;
        v = v > r->dhi ? r->dhi : v;
        return (int32_t)fc_qconv_rint(v) + r->yz;
    } else {
        const int32_t v = (r->fast ? fc_qmul32(acc, r->q, r->right) : fc_qmul(acc, r->q, r->right, r->single)) + r->yz;
        return v < r->lo ? r->lo : v > r->hi ? r->hi : v;
    }
}
/* Cortex-M55 and other cores with Helium (MVE): the column form and the dense layers take
 * 16 k a vmladava (16 products of int8 weights and int8 windows summed into an int32), the
 * windows packed as int8 x (x - 128 for uint8) with padding x_zero, and the sums corrected by
 * x_zero times the weights' sum (vaddva alongside); the last k of a row predicated off. */
#if FC_QCONV_DSP && defined(__ARM_FEATURE_MVE)
#include <arm_mve.h>
#define FC_QCONV_MVE 1
/* where k (kk) of column r (of four) lies in the Helium column form's packing: 16 k of each
 * column in turn */
FC_QCONV_AI long fc_qconv_mix(long kk, long r) { return (kk >> 4) * 64 + r * 16 + (kk & 15); }
/* The channel-rows form (fc_qconv_rows, a qconv with hwc_weights; dilation 1, at most
 * FC_QCONV_ROWS_KH kernel rows): kh input rows of wp positions of C int8 channels. */
#define FC_QCONV_ROWS_KH 16
FC_INLINE long fc_qconv_rows_wp(const fc_qconv_geom *g) { return (g->ow - 1) * g->sw + g->kw; }
FC_INLINE long fc_qconv_rows_scratch(const fc_qconv_geom *g) { return g->kh * fc_qconv_rows_wp(g) * g->c; }
/* The depthwise channel-rows form (fc_qconv_dwrows, w_layout hwo): the rows, then each
 * channel's first sum (bias less x_zero times its weights' sum). */
FC_INLINE long fc_qconv_dwrows_scratch(const fc_qconv_geom *g) { return fc_qconv_rows_scratch(g) + 4 * g->c; }
#else
#define FC_QCONV_MVE 0
#endif
/* where k (0 to 3) of a group of four lands in the column form: 1 and 2 swapped */
#define FC_QCONV_COLK(k) ((k) ^ ((((k) ^ ((k) >> 1)) & 1) * 3))
/* what the packing adds to x (modulo 256): x86 multiplies unsigned bytes by signed weights,
 * Arm's sdot signed bytes by signed weights */
#define FC_QCONV_OFF(is_signed) (FC_QCONV_DOT ? ((is_signed) ? 128 : 0) : ((is_signed) ? 0 : -128))

/* AMX-INT8 (built with -mamx-int8 -mamx-tile, e.g. -march=native on a CPU that has it; Linux,
 * which lends the tile registers to a process that asks: arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA), asked once, by a raw system call so that no header is needed): the
 * dot-product form's products on 16 x 16 tiles, 2 x 2 of them a pass (32 channels x 32
 * positions), 64 k a tile instruction (tdpbsud: the int8 weights times the packed windows'
 * unsigned bytes, in the layout the packing already writes). Where the kernel refuses, the
 * VNNI loop runs. */
#if FC_QCONV_DOT && defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__linux__) && defined(__x86_64__)
#define FC_QCONV_AMX 1
static int fc_qconv_amx_state __attribute__((unused)); /* 0 not asked, 1 granted, -1 refused */
FC_INLINE int fc_qconv_amx_ok(void) {
    if (fc_qconv_amx_state == 0) {
        long ret; /* arch_prctl (158) ARCH_REQ_XCOMP_PERM (0x1023) XFEATURE_XTILEDATA (18) */
        __asm__ volatile("syscall" : "=a"(ret) : "0"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
        fc_qconv_amx_state = ret == 0 ? 1 : -1;
    }
    return fc_qconv_amx_state > 0;
}
/* The tile configuration: C tiles 0-3 (16 rows of 16 int32), weights 4-5 and windows 6-7 (16
 * rows of 64 bytes). */
typedef struct fc_qconv_tiles {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} fc_qconv_tiles;
/* (a constant: GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes of the
 * configuration, so the stores of one built on the stack could be dropped) */
static const fc_qconv_tiles fc_qconv_tile_cfg __attribute__((unused)) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};
FC_INLINE void fc_qconv_amx_begin(void) { _tile_loadconfig(&fc_qconv_tile_cfg); }
#else
#define FC_QCONV_AMX 0
#endif

#if FC_QCONV_DOT
/* The four bytes at p (any alignment) in every 32-bit lane. */
FC_INLINE __m512i fc_qconv_word(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* out[j][c] = r[c][j]: a 16 x 16 byte transpose (four rounds of unpacking). */
FC_INLINE void fc_qconv_t16(const __m128i *r, __m128i *out) {
    __m128i a[16], b[16];
    int k, h, m, q, gq, p2;
    for (k = 0; k < 8; ++k) { /* positions 0-7 and 8-15, channel pairs */
        b[k] = _mm_unpacklo_epi8(r[2 * k], r[2 * k + 1]);
        b[8 + k] = _mm_unpackhi_epi8(r[2 * k], r[2 * k + 1]);
    }
    for (h = 0; h < 2; ++h) /* groups of four positions, channel quads */
        for (m = 0; m < 4; ++m) {
            a[h * 8 + m] = _mm_unpacklo_epi16(b[h * 8 + 2 * m], b[h * 8 + 2 * m + 1]);
            a[h * 8 + 4 + m] = _mm_unpackhi_epi16(b[h * 8 + 2 * m], b[h * 8 + 2 * m + 1]);
        }
    for (gq = 0; gq < 4; ++gq) /* pairs of positions, channel octets */
        for (q = 0; q < 2; ++q) {
            b[gq * 4 + q] = _mm_unpacklo_epi32(a[gq * 4 + 2 * q], a[gq * 4 + 2 * q + 1]);
            b[gq * 4 + 2 + q] = _mm_unpackhi_epi32(a[gq * 4 + 2 * q], a[gq * 4 + 2 * q + 1]);
        }
    for (gq = 0; gq < 4; ++gq) /* one position, all 16 channels */
        for (p2 = 0; p2 < 2; ++p2) {
            out[gq * 4 + p2 * 2] = _mm_unpacklo_epi64(b[gq * 4 + p2 * 2], b[gq * 4 + p2 * 2 + 1]);
            out[gq * 4 + p2 * 2 + 1] = _mm_unpackhi_epi64(b[gq * 4 + p2 * 2], b[gq * 4 + p2 * 2 + 1]);
        }
}
/* 16 bytes s[0], s[sw], ..., s[15 * sw] (sw 1, 2 or 4), the first n of them (n <= 16) read and
 * the rest 0: a masked load of the bytes there are, then every sw-th byte kept (vpmovwb, vpmovdb). */
FC_INLINE __m128i fc_qconv_take(const void *s, long n, long sw) {
    if (sw == 1)
        return _mm_maskz_loadu_epi8(n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1), s);
    if (sw == 2)
        return _mm256_cvtepi16_epi8(_mm256_maskz_loadu_epi8(n >= 16 ? (__mmask32)0x7FFFFFFF : (((__mmask32)1 << (2 * n - 1)) - 1), s));
    return _mm512_cvtepi32_epi8(_mm512_maskz_loadu_epi8(n >= 16 ? (((__mmask64)1 << 61) - 1) : (((__mmask64)1 << (4 * n - 3)) - 1), s));
}

/* dst[4 * p + r] = s_r[p * sw] + off (modulo 256) for the positions p of [0, n) of four byte
 * streams read every sw-th byte (sw 1, 2 or 4), 16 positions a pass: the loads and the last
 * store masked to the bytes there are. */
FC_INLINE void fc_qconv_weave(uint8_t *dst, const void *s0, const void *s1, const void *s2, const void *s3, long n,
                              int off, long sw) {
    const __m128i o = _mm_set1_epi8((char)off);
    long p;
    for (p = 0; p < n; p += 16) {
        const long left = n - p;
        const __m128i a = _mm_add_epi8(fc_qconv_take((const char *)s0 + p * sw, left, sw), o);
        const __m128i b = _mm_add_epi8(fc_qconv_take((const char *)s1 + p * sw, left, sw), o);
        const __m128i c = _mm_add_epi8(fc_qconv_take((const char *)s2 + p * sw, left, sw), o);
        const __m128i d = _mm_add_epi8(fc_qconv_take((const char *)s3 + p * sw, left, sw), o);
        const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
        const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
        __m512i z = _mm512_castsi128_si512(_mm_unpacklo_epi16(ab0, cd0));
        z = _mm512_inserti32x4(z, _mm_unpackhi_epi16(ab0, cd0), 1);
        z = _mm512_inserti32x4(z, _mm_unpacklo_epi16(ab1, cd1), 2);
        z = _mm512_inserti32x4(z, _mm_unpackhi_epi16(ab1, cd1), 3);
        _mm512_mask_storeu_epi8(dst + 4 * p, left >= 16 ? ~(__mmask64)0 : ((__mmask64)1 << (4 * left)) - 1, z);
    }
}
#endif

#if FC_QCONV_SDOT
/* dst[4 * p + r] = s_r[p * sw] + off (modulo 256) for the positions p of [0, n) of four byte
 * streams read every sw-th byte (the AVX-512 version's loop, in C). */
FC_INLINE void fc_qconv_weave(uint8_t *dst, const void *s0, const void *s1, const void *s2, const void *s3, long n,
                              int off, long sw) {
    const uint8_t *a = (const uint8_t *)s0, *b = (const uint8_t *)s1, *c = (const uint8_t *)s2;
    const uint8_t *d = (const uint8_t *)s3;
    long p;
    for (p = 0; p < n; ++p) {
        dst[4 * p] = (uint8_t)(a[p * sw] + off);
        dst[4 * p + 1] = (uint8_t)(b[p * sw] + off);
        dst[4 * p + 2] = (uint8_t)(c[p * sw] + off);
        dst[4 * p + 3] = (uint8_t)(d[p * sw] + off);
    }
}
#endif

/* A dense convolution of one output position (a dense layer on 1x1 planes, or a window over the
 * whole input): one dot product per output over the window, on every target. */
FC_INLINE int fc_qconv_dense(const fc_qconv_geom *g) { return g->groups == 1 && g->oh * g->ow == 1; }
FC_INLINE int fc_qconv_dot(const fc_qconv_geom *g) { return FC_QCONV_PACKED && g->groups == 1; }
FC_INLINE int fc_qconv_cols(const fc_qconv_geom *g) { return FC_QCONV_DSP && g->groups == 1; }
/* The row form (Cortex-M DSP): one input channel per group (depthwise), at most 64 taps: the
 * channel's plane less x_zero copied once as int16 rows with its padding (hp rows of wp), then
 * each output its taps' sums, two neighbouring taps of a row a smlad where dw is 1. */
FC_INLINE int fc_qconv_dwr(const fc_qconv_geom *g) {
    return FC_QCONV_DSP && g->c == g->groups && g->kh * g->kw <= 64;
}
FC_INLINE long fc_qconv_dwr_hp(const fc_qconv_geom *g) { return (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1; }
FC_INLINE long fc_qconv_dwr_wp(const fc_qconv_geom *g) { return (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1; }
/* the output channels of a pass of the dot-product form: 16 for planes of at most 16 positions
 * (AVX-512) */
FC_INLINE long fc_qconv_dot_mb(const fc_qconv_geom *g) {
    return FC_QCONV_DOT && g->oh * g->ow <= 16 ? 16 : FC_QCONV_BLOCK;
}
/* The output rows the dot-product form packs and computes at once (a plane of at most 256
 * positions, else rows of about 256), and their positions rounded up to 64. */
FC_INLINE long fc_qconv_dot_rows(const fc_qconv_geom *g) {
    const long r = 256 / g->ow < 1 ? 1 : 256 / g->ow;
    return g->oh * g->ow <= 256 || r > g->oh ? g->oh : r;
}
FC_INLINE long fc_qconv_cpn(const fc_qconv_geom *g) { return (fc_qconv_dot_rows(g) * g->ow + 63) / 64 * 64; }
/* groups of four k (the weights' K rounded up; the packed windows of 64 positions a block, four
 * vectors of 16 lanes), and the bytes of a row of padding the packing reads */
FC_INLINE long fc_qconv_k4(const fc_qconv_geom *g) { return (g->c / g->groups * g->kh * g->kw + 3) / 4; }
FC_INLINE long fc_qconv_rl(const fc_qconv_geom *g) { return (g->ow * g->sw + 63) / 64 * 64; }
/* The dot-product form's rows of sums and of weights (32 on the tiles: a pass's channels), and
 * its packed k4 groups (on the tiles rounded up to 16: a tile's 64 k). */
/* Whether the tiles take a convolution (where the machine lends them): planes of more than 16
 * positions, at least 32 output channels and 64 k (smaller ones would fill a tile's rows or
 * columns in part only, and take more scratch than the VNNI loops). */
FC_INLINE int fc_qconv_dot_amx(const fc_qconv_geom *g) {
    return FC_QCONV_AMX && fc_qconv_dot_mb(g) == FC_QCONV_BLOCK && g->m >= 32 && g->c * g->kh * g->kw >= 64;
}
FC_INLINE long fc_qconv_dot_ar(const fc_qconv_geom *g) { return fc_qconv_dot_amx(g) ? 32 : fc_qconv_dot_mb(g); }
/* int32 values of the dot-product form's sums: mb rows of cpn, or for the tiles a pass's 32 rows
 * of 64 and 32 rows of 16 first sums, whichever is more */
FC_INLINE long fc_qconv_dot_acc(const fc_qconv_geom *g) {
    const long v = fc_qconv_dot_mb(g) * fc_qconv_cpn(g);
    return fc_qconv_dot_amx(g) && v < 32 * 64 + 32 * 16 ? 32 * 64 + 32 * 16 : v;
}
FC_INLINE long fc_qconv_dot_k4r(const fc_qconv_geom *g) {
    return fc_qconv_dot_amx(g) ? (fc_qconv_k4(g) + 15) / 16 * 16 : fc_qconv_k4(g);
}

/* GNU vectors of 16 int32 (GCC, Clang) where the target has a vector unit (SSE2, NEON): the flat
 * form keeps its sums in them; plain loops elsewhere (a microcontroller's registers would not
 * hold them). */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(FC_NO_VECTOR) && (defined(__SSE2__) || defined(__ARM_NEON))
#define FC_QV 1
typedef int32_t fc_qv32 __attribute__((vector_size(64)));
#define FC_QV32_SPLAT(v) ((fc_qv32){v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v})
#else
#define FC_QV 0
#endif

/* The flat form (fc_qconv_flats): stride 1, one input channel per group, at most 64 taps. Planes
 * of more than 1024 positions are padded (fc_qconv_fpad): a copy in rows of wq (the columns the
 * windows read, from -pw), and the sums in rows of wq; smaller ones take kw copies in rows of w
 * with masks, sums in rows of ow (then wq == ow: fc_qconv_frw, the rows' width). A copy: `lead`
 * values (small planes: the most a tap reads left of its row), ph rows of padding, the h rows,
 * then rows of padding to where the last run of 64 sums reads (fs); the sums: the runs'
 * positions rounded up to 64 (fpn). */
FC_INLINE int fc_qconv_flat(const fc_qconv_geom *g) {
    return g->sh == 1 && g->sw == 1 && g->c == g->groups && g->kh * g->kw <= 64;
}
FC_INLINE int fc_qconv_fpad(const fc_qconv_geom *g) { return g->h * g->w > 1024 || g->ow != g->w; }
FC_INLINE long fc_qconv_frw(const fc_qconv_geom *g) {
    const long a = g->pw + g->w, b = g->ow + (g->kw - 1) * g->dw;
    return !fc_qconv_fpad(g) ? g->w : a > b ? a : b;
}
FC_INLINE long fc_qconv_fpn(const fc_qconv_geom *g) { return (g->oh * fc_qconv_frw(g) + 63) / 64 * 64; }
FC_INLINE long fc_qconv_ffs(const fc_qconv_geom *g) {
    const int pad = fc_qconv_fpad(g);
    const long rw = fc_qconv_frw(g), lead = pad ? 0 : g->pw;
    const long reach = lead + (g->kh - 1) * g->dh * rw + (g->kw - 1) * g->dw - (pad ? 0 : g->pw) + fc_qconv_fpn(g);
    const long image = lead + (g->ph + g->h) * rw;
    return ((reach > image ? reach : image) + 15) / 16 * 16;
}

/* The channel form (fc_qconv_dwcs; AVX-512 VNNI): a depthwise convolution (one input channel
 * per group, multiplier 1) that is strided or has small planes, 16 channels at a time with the
 * channels in the vector lanes: the input rows a band of output rows reads, transposed to
 * positions of 16 int32 (x - x_zero; the padding 0), fc_qconv_dwc_rows output rows a band; each
 * output position is then its taps' vpdpwssd on the 16 channels. Scratch: the band's rows of
 * padded positions, the taps' weights, the band's positions' offsets and their outputs. */
FC_INLINE int fc_qconv_dwc(const fc_qconv_geom *g) {
    return FC_QCONV_DOT && g->c == g->groups && g->m == g->c && g->kh * g->kw <= 64 &&
           (g->sh > 1 || g->sw > 1 || g->oh * g->ow < 64);
}
FC_INLINE long fc_qconv_dwc_wp(const fc_qconv_geom *g) { return (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1; }
FC_INLINE long fc_qconv_dwc_in(const fc_qconv_geom *g, long rows) { return (rows - 1) * g->sh + (g->kh - 1) * g->dh + 1; }
FC_INLINE long fc_qconv_dwc_rows(const fc_qconv_geom *g) {
    long r = 1; /* as many output rows as keep the band's input within 16 KiB */
    while (r < g->oh && fc_qconv_dwc_in(g, r + 1) * fc_qconv_dwc_wp(g) * 64 <= 16384)
        ++r;
    return r;
}
FC_INLINE long fc_qconv_dwc_scratch(const fc_qconv_geom *g) {
    const long r = fc_qconv_dwc_rows(g), np = (r * g->ow + 15) / 16 * 16;
    return (fc_qconv_dwc_in(g, r) * fc_qconv_dwc_wp(g) + 1) * 64 + g->kh * g->kw * 64 + np * 8 + np * 16;
}

/* Bytes of scratch of one call: the sums of FC_QCONV_BLOCK output channels, a staging row of
 * outputs, then the padded planes of a group's input channels (all of them for one group); in the dot-product form the sums, the staging row,
 * the image's packed windows, a block's weights, each channel's first sum and two rows (x_zero,
 * and the value packed as 0), whichever is larger (rows of sums and weights, and k4 groups, as
 * fc_qconv_dot_ar and fc_qconv_dot_k4r count them); for a dense layer (fc_qconv_dense) the window alone. */
FC_INLINE long fc_qconv_scratch(const fc_qconv_geom *g) {
    const long pn = fc_qconv_pn(g), k4 = fc_qconv_k4(g);
    const long planes = FC_QCONV_BLOCK * fc_qconv_acc(g) * 4 + pn + g->c / g->groups * fc_qconv_ps(g) * 2;
    const long cpn = fc_qconv_cpn(g), ar = fc_qconv_dot_ar(g), kr = fc_qconv_dot_k4r(g);
    const long dot = fc_qconv_dot_acc(g) * 4 + cpn + kr * 4 * cpn + ar * kr * 4 + g->m * 4 + 2 * fc_qconv_rl(g);
    if (fc_qconv_dense(g) && FC_QCONV_DSP && g->kh * g->kw * g->h * g->w == 1)
        return 0; /* x (N, K, 1, 1) read in place */
    if (fc_qconv_dense(g))
        return FC_QCONV_MVE ? (k4 + 3) / 4 * 16 : k4 * 4 * 2; /* the window, as int16 (as bytes: VNNI, MVE) */
    if (fc_qconv_cols(g) && FC_QCONV_MVE)
        return (k4 + 3) / 4 * 16 * 4; /* four columns of bytes, K rounded up to 16 */
    if (fc_qconv_cols(g))
        return ((k4 * 4 + 4) * 4 + k4 * 4) * 2; /* four columns and their last k % 4, a window */
    if (fc_qconv_dwr(g))
        return (fc_qconv_dwr_hp(g) * fc_qconv_dwr_wp(g) * 2 + 3) / 4 * 4; /* the padded plane */
    if (fc_qconv_dwc(g))
        return fc_qconv_dwc_scratch(g);
    if (fc_qconv_flat(g)) /* the sums, small planes' masks, the copies, the runs' outputs */
        return fc_qconv_fpn(g) * 5 + (fc_qconv_fpad(g) ? fc_qconv_ffs(g) : g->kw * ((g->h * g->w + 15) / 16 * 16 + fc_qconv_ffs(g))) * 4;
    return fc_qconv_dot(g) ? dot : planes;
}

#define FC_QT int8_t
#define FC_QFN(name) name##_i8
#include "kernels/qconv.inc"
#undef FC_QT
#undef FC_QFN
#define FC_QT uint8_t
#define FC_QFN(name) name##_u8
#include "kernels/qconv.inc"
#undef FC_QT
#undef FC_QFN

#endif /* FLOWC_KERNELS_QCONV_H */
