/* flowc runtime: a float32 vector type for kernels vectorized by hand, without intrinsics.
 *
 * fc_vf holds FC_VF_VL floats: a GNU vector (vector_size) under GCC and Clang, sized for the
 * widest float unit the compiler flags enable, and a plain float elsewhere or with
 * -DFC_NO_VECTOR, so every kernel written on it is also plain C99:
 *     -mavx512f  16      -mavx (or -mavx2)  8      SSE2, NEON, AltiVec, wasm simd  4
 *     anything else, non-GNU compilers, FC_NO_VECTOR  1
 * The arithmetic operators work on fc_vf directly. Multiply-adds are written a * b + c: Clang
 * fuses them (its default -ffp-contract=on), GCC in ISO C mode does not.
 *
 * fc_vf_load / fc_vf_store    unaligned, through memcpy (any float pointer)
 * FC_VF_SPLAT(s)              every lane s
 * fc_vf_sum / fc_vf_max       horizontal sum (lanes in order) and maximum
 * fc_vf_max2(a, b)            per lane a < b ? b : a (NaN in b is dropped)
 * fc_vf_any_nan(p, n)         whether p[0 .. n) holds a NaN
 * fc_vf_exp                   e^x per lane for x <= 0 or NaN-free finite x below 88
 *                             (range reduction by ln 2 and a degree-6 polynomial, about 1
 *                             ulp; x below -87.3 gives 0), expf when FC_VF_VL is 1
 */
#ifndef FLOWC_KERNELS_VECF_H
#define FLOWC_KERNELS_VECF_H

#include "flowc_rt.h"

#if defined(FC_NO_VECTOR) || !(defined(__GNUC__) || defined(__clang__))
#define FC_VF_VL 1
#elif defined(__AVX512F__)
#define FC_VF_VL 16
#elif defined(__AVX__)
#define FC_VF_VL 8
#elif defined(__SSE2__) || defined(__ARM_NEON) || defined(__ALTIVEC__) || defined(__wasm_simd128__)
#define FC_VF_VL 4
#else
#define FC_VF_VL 1
#endif

#if defined(__GNUC__) || defined(__clang__)
/* Kernels on fc_vf read their geometry from `static const` structs: inlining them into the
 * generated step is what turns the geometry into constants. */
#define FC_VF_INLINE static inline FC_DEVICE __attribute__((always_inline, unused))
#else
#define FC_VF_INLINE static inline FC_DEVICE
#endif

#if FC_VF_VL == 1
typedef float fc_vf;
#define FC_VF_SPLAT(s) ((float)(s))
#else
typedef float fc_vf __attribute__((vector_size(FC_VF_VL * 4)));
typedef int32_t fc_vi __attribute__((vector_size(FC_VF_VL * 4)));
#if FC_VF_VL == 16
#define FC_VF_SPLAT(s) ((fc_vf){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s})
#define FC_VI_SPLAT(s) ((fc_vi){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s})
#elif FC_VF_VL == 8
#define FC_VF_SPLAT(s) ((fc_vf){s, s, s, s, s, s, s, s})
#define FC_VI_SPLAT(s) ((fc_vi){s, s, s, s, s, s, s, s})
#else
#define FC_VF_SPLAT(s) ((fc_vf){s, s, s, s})
#define FC_VI_SPLAT(s) ((fc_vi){s, s, s, s})
#endif
#endif

/* FC_VF_KEEP(v): the vector v held in a register. With few uses of a loaded vector gcc folds
 * the load into every multiply-add that uses it (vfmadd231ps (mem), ...), a 512-bit load per
 * multiply-add: kernels/sgemm.h's tiles of 3 or 4 rows then ran at 49% of an AVX-512 core's
 * peak, 95% with the loads kept (4 x 64 x 256); the empty asm makes v a register value. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && FC_VF_VL > 1
#define FC_VF_KEEP(v) __asm__("" : "+v"(v))
#else
#define FC_VF_KEEP(v) ((void)0)
#endif

/* FC_VF_EVEN(a, b) / FC_VF_ODD(a, b): the even / odd lanes of the 2*FC_VF_VL floats a then b
 * (a stride-2 load), where FC_VF_HAS_SHUFFLE is 1. */
#if FC_VF_VL > 1 && defined(__clang__)
#define FC_VF_HAS_SHUFFLE 1
#define FC_VF_SHUF_(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#elif FC_VF_VL > 1
#define FC_VF_HAS_SHUFFLE 1
#define FC_VF_SHUF_(a, b, ...) __builtin_shuffle(a, b, (fc_vi){__VA_ARGS__})
#else
#define FC_VF_HAS_SHUFFLE 0
#endif
#if FC_VF_VL == 16
#define FC_VF_EVEN(a, b) FC_VF_SHUF_(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
#define FC_VF_ODD(a, b) FC_VF_SHUF_(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)
#elif FC_VF_VL == 8
#define FC_VF_EVEN(a, b) FC_VF_SHUF_(a, b, 0, 2, 4, 6, 8, 10, 12, 14)
#define FC_VF_ODD(a, b) FC_VF_SHUF_(a, b, 1, 3, 5, 7, 9, 11, 13, 15)
#elif FC_VF_VL == 4
#define FC_VF_EVEN(a, b) FC_VF_SHUF_(a, b, 0, 2, 4, 6)
#define FC_VF_ODD(a, b) FC_VF_SHUF_(a, b, 1, 3, 5, 7)
#endif

/* FC_VF_TRANSPOSE16(r): the 16 x 16 floats of r[0..15] (a row each) transposed in place, in
 * four butterfly stages (rows i and i + b exchange the lanes j with j & b set), where
 * FC_VF_VL is 16 and FC_VF_HAS_SHUFFLE is 1 (FC_VF_HAS_TRANSPOSE16). */
#if FC_VF_VL == 16 && FC_VF_HAS_SHUFFLE
#define FC_VF_HAS_TRANSPOSE16 1
#define FC_VF_TSTAGE_(r, b, ...)                                                                  \
    do {                                                                                          \
        int i_;                                                                                   \
        for (i_ = 0; i_ < 16; i_++)                                                               \
            if (!(i_ & b)) {                                                                      \
                const fc_vf x_ = r[i_], y_ = r[i_ + b];                                           \
                __VA_ARGS__                                                                       \
            }                                                                                     \
    } while (0)
#define FC_VF_TRANSPOSE16(r)                                                                      \
    do {                                                                                          \
        FC_VF_TSTAGE_(r, 8, r[i_] = FC_VF_SHUF_(x_, y_, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23); \
                      r[i_ + 8] = FC_VF_SHUF_(x_, y_, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);); \
        FC_VF_TSTAGE_(r, 4, r[i_] = FC_VF_SHUF_(x_, y_, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27); \
                      r[i_ + 4] = FC_VF_SHUF_(x_, y_, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);); \
        FC_VF_TSTAGE_(r, 2, r[i_] = FC_VF_SHUF_(x_, y_, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29); \
                      r[i_ + 2] = FC_VF_SHUF_(x_, y_, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);); \
        FC_VF_TSTAGE_(r, 1, r[i_] = FC_VF_SHUF_(x_, y_, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30); \
                      r[i_ + 1] = FC_VF_SHUF_(x_, y_, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);); \
    } while (0)
#else
#define FC_VF_HAS_TRANSPOSE16 0
#endif

FC_VF_INLINE fc_vf fc_vf_load(const float *p) {
    fc_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

FC_VF_INLINE void fc_vf_store(float *p, fc_vf v) { memcpy(p, &v, sizeof v); }

FC_VF_INLINE float fc_vf_sum(fc_vf v) {
    float lane[FC_VF_VL], s = 0;
    int i;
    memcpy(lane, &v, sizeof v);
    for (i = 0; i < FC_VF_VL; i++)
        s += lane[i];
    return s;
}

/* NaN lanes are skipped: callers that care look for NaN themselves. */
FC_VF_INLINE float fc_vf_max(fc_vf v) {
    float lane[FC_VF_VL], m;
    int i;
    memcpy(lane, &v, sizeof v);
    m = lane[0];
    for (i = 1; i < FC_VF_VL; i++)
        if (lane[i] > m)
            m = lane[i];
    return m;
}

#if FC_VF_VL == 1
FC_VF_INLINE fc_vf fc_vf_exp(fc_vf x) { return expf(x); }
FC_VF_INLINE fc_vf fc_vf_max2(fc_vf a, fc_vf b) { return a < b ? b : a; }

FC_VF_INLINE int fc_vf_any_nan(const float *p, long n) {
    long i;
    for (i = 0; i < n; i++)
        if (isnan(p[i]))
            return 1;
    return 0;
}
#else
/* Whether any of p[0 .. n) is NaN. */
FC_VF_INLINE int fc_vf_any_nan(const float *p, long n) {
    fc_vi acc = FC_VI_SPLAT(0);
    int32_t lane[FC_VF_VL];
    long i;
    for (i = 0; i + FC_VF_VL <= n; i += FC_VF_VL) {
        const fc_vf v = fc_vf_load(p + i);
        acc |= v != v;
    }
    for (; i < n; i++)
        if (isnan(p[i]))
            return 1;
    memcpy(lane, &acc, sizeof acc);
    for (i = 0; i < FC_VF_VL; i++)
        if (lane[i])
            return 1;
    return 0;
}

/* Lanes where a < b take b: max(a, b) when neither is NaN. */
FC_VF_INLINE fc_vf fc_vf_max2(fc_vf a, fc_vf b) {
    const fc_vi lt = a < b; /* -1 where true */
    fc_vi ia, ib;
    memcpy(&ia, &a, sizeof a);
    memcpy(&ib, &b, sizeof b);
    ia = (ia & ~lt) | (ib & lt);
    memcpy(&a, &ia, sizeof a);
    return a;
}

FC_VF_INLINE fc_vf fc_vf_exp(fc_vf x) {
    const fc_vf lo = FC_VF_SPLAT(-87.33654f), magic = FC_VF_SPLAT(12582912.0f); /* 1.5 * 2^23 */
    const fc_vi under = x < lo;
    fc_vf t, n, r, z, p;
    fc_vi bits;
    x = fc_vf_max2(x, lo);
    /* n = round(x / ln 2): adding 1.5 * 2^23 leaves n in the low mantissa bits */
    t = x * FC_VF_SPLAT(1.44269504f) + magic;
    n = t - magic;
    r = x - n * FC_VF_SPLAT(0.693359375f); /* ln 2 in two parts: the first is exact */
    r = r - n * FC_VF_SPLAT(-2.12194440e-4f);
    z = r * r;
    p = FC_VF_SPLAT(1.9875691500e-4f);
    p = p * r + FC_VF_SPLAT(1.3981999507e-3f);
    p = p * r + FC_VF_SPLAT(8.3334519073e-3f);
    p = p * r + FC_VF_SPLAT(4.1665795894e-2f);
    p = p * r + FC_VF_SPLAT(1.6666665459e-1f);
    p = p * r + FC_VF_SPLAT(5.0000001201e-1f);
    p = p * z + r + FC_VF_SPLAT(1.0f);
    /* 2^n: n + 127 in the exponent field; n >= -126 after the clamp, n <= 127 for x < 88.7 */
    memcpy(&bits, &t, sizeof t);
    bits = (bits - FC_VI_SPLAT(0x4B400000) + FC_VI_SPLAT(127)) << 23;
    memcpy(&t, &bits, sizeof t);
    p = p * t;
    memcpy(&bits, &p, sizeof p);
    bits &= ~under;
    memcpy(&p, &bits, sizeof p);
    return p;
}
#endif

#endif /* FLOWC_KERNELS_VECF_H */
