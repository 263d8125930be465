/* Branch-free float32 exp, expm1, log, log1p, tanh, erf, sin and cos, written so that a loop
 * calling them vectorizes.
 *
 * libm's expf, logf, sinf... are calls the C compiler cannot vectorize: a fused elementwise
 * loop or a GEMM epilogue with a tanh in it ran one element at a time (GPT-2's tanh-GELU: ~30
 * ns per element). These are plain C99 on float and (u)int32_t with no branches, no calls and
 * no tables, so GCC and Clang at -O3 turn the loops that call them into AVX-512, AVX2, NEON or
 * SSE code from this one source, and they stay correct scalar code everywhere else (Cortex-M
 * included). Every choice between two values is fc_vm_pick, a blend of their bits, not a
 * ?: select: GCC turns some selects back into branches (it threads a select on the input
 * through the selects that follow, or sinks a computation whose value only one side uses),
 * and a loop with a branch does not vectorize (GCC 12 for AArch64 vectorized none of these
 * loops with selects). FC_PICK (kernels/instantiate.h) is fc_vm_pick for the float kernels.
 *
 * fc_vm_expf: round(x / ln 2) = n by the 1.5 * 2^23 trick, r = x - n ln 2 in two parts
 *             (Cody-Waite), e^r by a degree-7 polynomial (Cephes' expf coefficients), and
 *             2^n applied as two factors 2^(n/2) and 2^(n - n/2) so that results down in
 *             the subnormals and up to FLT_MAX round once. Above 88.7228: +inf; below
 *             -103.972: 0; NaN stays NaN.
 * fc_vm_sigmoidf, fc_vm_expm1f, fc_vm_tanhf, fc_vm_erff, fc_vm_logf, fc_vm_log1pf, fc_vm_sinf, fc_vm_cosf:
 *             see each. In every one NaN stays NaN, +-inf maps as in libm, -0 to -0 where
 *             f(-0) is -0, and subnormal inputs and results are computed, not flushed
 *             (except sigmoid's results below FLT_MIN: 0).
 * Max error over float32 (tests/runtime_c/test_vmath.py: numpy in float64 over a dense sweep
 * of float32 inputs, subnormals, zeros, infinities and NaN included, scalar and vectorized
 * builds; bound enforced / measured): exp 1 / 0.95, expm1 2 / 1.40, log 1 / 0.75, log1p 1 /
 * 0.76, tanh 2 / 1.21, erf 3 / 2.93, sin 3 / 2.64 and cos 3 / 2.70 ulp for |x| <= 2^17, with
 * an absolute error below 2^-22 up to 2^20 and 2^-13 up to 2^23 (NaN beyond).
 */
#ifndef FLOWC_KERNELS_VMATH_H
#define FLOWC_KERNELS_VMATH_H

#include <stdint.h>
#include <string.h>

#include "flowc_rt.h"

FC_INLINE float fc_vm_bits_to_f32_(int32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

FC_INLINE uint32_t fc_vm_f32_to_ubits_(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

FC_INLINE float fc_vm_ubits_to_f32_(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* c ? a : b (c is 0 or 1), blended from the bits: both values are computed and used whatever
 * c is, so the compiler cannot make a branch of it (see the top of the file). */
FC_INLINE float fc_vm_pick(int c, float a, float b) {
    const uint32_t m = 0u - (uint32_t)c;
    return fc_vm_ubits_to_f32_((fc_vm_f32_to_ubits_(a) & m) | (fc_vm_f32_to_ubits_(b) & ~m));
}

#define FC_VM_NAN_ fc_vm_ubits_to_f32_(0x7fc00000u)

#define FC_VM_ROUND_ 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer, kept in the low bits */

/* e^r - 1 of x = n ln 2 + r, |r| <= ln 2 / 2, for x in [-103.98, 88.73]; sets *k to
 * n + FC_VM_ROUND_ (n = *k - FC_VM_ROUND_, and n in the low bits of *k for fc_vm_pow2_). r = x
 * for |x| < ln 2 / 2 (n = 0). */
FC_INLINE float fc_vm_expm1_reduced_(float x, float *k) {
    float r, p, n;
    *k = x * 1.44269504088896341f + FC_VM_ROUND_;
    n = *k - FC_VM_ROUND_;
    r = x - n * 0.693359375f; /* ln 2 = 0.693359375 - 2.12194440e-4 (Cody-Waite) */
    r = r + n * 2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * (r * r) + r;
}

/* 2^n of k = n + FC_VM_ROUND_ (fc_vm_expm1_reduced_'s) for n in [-126, 127], from the bits of
 * k, whose low bits are n, rather than a conversion to int, which is undefined for NaN: a NaN k
 * gives some float, and the NaN it is then multiplied with stays NaN. */
FC_INLINE float fc_vm_pow2_(float k) {
    return fc_vm_ubits_to_f32_((fc_vm_f32_to_ubits_(k) + 127u) << 23);
}

/* e^t for |t| <= 87.33 (n in -126 .. 126: 2^n one normal float, no range picks), by
 * fc_vm_expm1_reduced_; a NaN t gives NaN. The sigmoid and tanh clamp t to such a range. */
FC_INLINE float fc_vm_exp_normal_(float t) {
    float k;
    const float e = fc_vm_expm1_reduced_(t, &k) + 1.0f;
    return e * fc_vm_pow2_(k);
}

FC_INLINE float fc_vm_expf(float x) {
    const float hi = 88.72283935546875f, lo = -103.97207641601562f;
    const int nan = x != x;
    float xc = fc_vm_pick(nan, 0.0f, x), k, e, y;
    int32_t ni, n1;
    xc = fc_vm_pick(xc > hi, hi, xc);
    xc = fc_vm_pick(xc < lo, lo, xc);
    e = fc_vm_expm1_reduced_(xc, &k) + 1.0f;
    ni = (int32_t)(k - FC_VM_ROUND_); /* -150 .. 128: both factors normal floats */
    n1 = ni / 2;
    y = e * fc_vm_bits_to_f32_((n1 + 127) * 8388608) * fc_vm_bits_to_f32_((ni - n1 + 127) * 8388608);
    y = fc_vm_pick(x > hi, HUGE_VALF, y);
    y = fc_vm_pick(x < lo, 0.0f, y);
    return fc_vm_pick(nan, x, y);
}

/* e^x - 1 without the cancellation near 0: q = e^r - 1 of fc_vm_expm1_reduced_, which is the
 * result for n = 0 (|x| < ln 2 / 2, subnormal x included); otherwise e^x - 1 = 2 (h - 1/2 + h q)
 * with h = 2^(n - 1), a normal float from x = -18 (below about -17.3 the result is -1 in
 * float32) to 88.7228 (above: +inf). NaN stays NaN, -0 stays -0. */
FC_INLINE float fc_vm_expm1f(float x) {
    const float hi = 88.72283935546875f, lo = -18.0f;
    const int nan = x != x;
    float xc = fc_vm_pick(nan, 0.0f, x), k, q, h, y;
    xc = fc_vm_pick(xc > hi, hi, xc);
    xc = fc_vm_pick(xc < lo, lo, xc);
    q = fc_vm_expm1_reduced_(xc, &k);
    h = fc_vm_pow2_(k - 1.0f); /* n in -26 .. 128 */
    y = 2.0f * ((h - 0.5f) + h * q);
    y = fc_vm_pick(k == FC_VM_ROUND_, q, y); /* n = 0 */
    y = fc_vm_pick(x == 0.0f, x, y); /* -0 */
    y = fc_vm_pick(x > hi, HUGE_VALF, y);
    return fc_vm_pick(nan, x, y);
}

/* sigmoid 1 / (1 + e^-x), with e = e^t for t = -x clamped to [-87.33, 87.33], so that e and
 * 2^n are normal floats. 2^n is fc_vm_pow2_'s, so a NaN input needs no pick of its own: it
 * runs through the arithmetic and comes out NaN. For x above 87.33 the result rounds to 1. Below
 * -87.33, where it is under FLT_MIN (1.2e-38), it is 0: the subnormal tail is flushed, since
 * arithmetic on subnormals is ~20x slower on x86 and a SiLU x * sigmoid(x) over a tensor with
 * such values would crawl. Some 26 vector instructions, 0.40 ns an element on AVX-512 (0.51
 * with a conversion to int and picks for NaN and the sign): SiLU is about a fifth of
 * EfficientNet-B0's time. */
FC_INLINE float fc_vm_sigmoidf(float x) {
    const float lim = 87.33f;
    float t = fc_vm_pick(x > lim, -lim, -x);
    t = fc_vm_pick(x < -lim, lim, t);
    return fc_vm_pick(x < -lim, 0.0f, 1.0f / (1.0f + fc_vm_exp_normal_(t)));
}

/* tanh: |x| < 0.625: x + x^3 P(x^2) (Cephes' tanhf polynomial); otherwise
 * sign(x) (1 - 2 / (e^(2|x|) + 1)) with |x| clamped to 10 (tanh rounds to 1 from 9.01 on), so
 * that e^(2|x|) is fc_vm_exp_normal_'s, as in the sigmoid: 1.17 ns an element on AVX-512 instead
 * of 1.69 through fc_vm_expf (bench/vmath.py; GPT-2's tanh-GELU). tanh(+-inf) = +-1, NaN stays
 * NaN (through the arithmetic), -0 stays -0. */
FC_INLINE float fc_vm_tanhf(float x) {
    const float ax = fc_vm_pick(x < 0, -x, x), z = x * x;
    float small, t, big;
    small = -5.70498872745e-3f;
    small = small * z + 2.06390887954e-2f;
    small = small * z - 5.37397155531e-2f;
    small = small * z + 1.33314422036e-1f;
    small = small * z - 3.33332819422e-1f;
    small = small * z * x + x;
    small = fc_vm_pick(z == 0.0f, x, small); /* -0 and the smallest x: tanh(x) is x */
    t = fc_vm_pick(ax > 10.0f, 10.0f, ax);
    big = 1.0f - 2.0f / (fc_vm_exp_normal_(t + t) + 1.0f);
    big = fc_vm_pick(x < 0, -big, big);
    return fc_vm_pick(ax < 0.625f, small, big); /* NaN: big, which is NaN */
}

/* erf: |x| < 1: x (2/sqrt(pi)) (1 - x^2/3 + x^4/10 - ...), the Maclaurin series to x^21;
 * otherwise sign(x) (1 - t P(t) e^(-x^2)) with t = 1 / (1 + 0.3275911 |x|) and P of degree
 * 4 (Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7). erf(+-inf) = +-1, NaN stays
 * NaN, -0 stays -0. */
FC_INLINE float fc_vm_erff(float x) {
    const float ax = fc_vm_pick(x < 0, -x, x), z = x * x;
    float small, t, p, big;
    small = 1.48071928e-08f; /* 2/sqrt(pi) (-1)^n / (n! (2n + 1)), n = 10 .. 0 */
    small = small * z - 1.63658447e-07f;
    small = small * z + 1.64621144e-06f;
    small = small * z - 1.49256504e-05f;
    small = small * z + 1.20553330e-04f;
    small = small * z - 8.54832702e-04f;
    small = small * z + 5.22397763e-03f;
    small = small * z - 2.68661706e-02f;
    small = small * z + 1.12837917e-01f;
    small = small * z - 3.76126389e-01f;
    small = small * z * x + 1.12837917e+00f * x;
    small = fc_vm_pick(z == 0.0f, 1.12837917e+00f * x, small); /* -0 stays -0 */
    t = 1.0f / (1.0f + 0.3275911f * ax);
    p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    big = 1.0f - p * t * fc_vm_expf(-z);
    big = fc_vm_pick(ax > 4.0f, 1.0f, big); /* 1 in float32 from 3.92 on; keeps inf * 0 away */
    big = fc_vm_pick(x < 0, -big, big);
    return fc_vm_pick(ax < 1.0f, small, big); /* NaN: big, which is NaN */
}

/* log(1 + f) - f for f in [sqrt(1/2) - 1, sqrt(2) - 1]: -f^2/2 + f^3 P(f) with Cephes' logf
 * polynomial P of degree 8. */
FC_INLINE float fc_vm_log1p_tail_(float f) {
    const float z = f * f;
    float p = 7.0376836292e-2f;
    p = p * f - 1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f - 1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f - 1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f - 2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    return p * f * z - 0.5f * z;
}

/* x = 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)) for a positive finite x (subnormals
 * scaled by 2^24 first), from the bits; returns f (exact) and sets *e. Any other x gives
 * finite values, without undefined behaviour. */
FC_INLINE float fc_vm_log_split_(float x, float *e) {
    const int sub = x < 1.17549435e-38f; /* below FLT_MIN */
    const uint32_t bits = fc_vm_f32_to_ubits_(fc_vm_pick(sub, x * 16777216.0f, x));
    const float m = fc_vm_ubits_to_f32_((bits & 0x007fffffu) | 0x3f800000u); /* [1, 2) */
    const int big = m > 1.41421354f;
    *e = (float)((int32_t)((bits >> 23) & 255u) - 127 - 24 * sub + big);
    return fc_vm_pick(big, 0.5f * m, m) - 1.0f;
}

/* log: log(1 + f) + e ln 2 (ln 2 in two parts) of fc_vm_log_split_. log(+-0) = -inf,
 * log(x < 0) = NaN, log(inf) = inf, NaN stays NaN. */
FC_INLINE float fc_vm_logf(float x) {
    float e, f = fc_vm_log_split_(x, &e), y, special;
    y = (f + (fc_vm_log1p_tail_(f) - 2.12194440e-4f * e)) + 0.693359375f * e;
    special = fc_vm_pick(x == 0.0f, -HUGE_VALF, FC_VM_NAN_);
    special = fc_vm_pick((x == HUGE_VALF) | (x != x), x, special);
    return fc_vm_pick(!(x > 0.0f) | (x == HUGE_VALF), special, y);
}

/* log(1 + x): for x in [sqrt(1/2) - 1, sqrt(2) - 1] the polynomial directly (the argument is
 * exact, so small x keep their relative accuracy); otherwise log of u = 1 + x as fc_vm_logf
 * has it, plus (x - (u - 1)) / u, the first-order correction for the rounding of 1 + x.
 * log1p(-1) = -inf, below -1 NaN, log1p(inf) = inf, NaN stays NaN; the sign is x's, so -0
 * stays -0. */
FC_INLINE float fc_vm_log1pf(float x) {
    const float u = 1.0f + x;
    const int near0 = (x > -0.29289321f) & (x < 0.41421356f); /* &, |: no branch as with &&, || */
    float eu, fu = fc_vm_log_split_(u, &eu), f, e, corr, y, special;
    uint32_t sign;
    f = fc_vm_pick(near0, x, fu);
    e = fc_vm_pick(near0, 0.0f, eu);
    corr = fc_vm_pick(near0, 0.0f, (x - (u - 1.0f)) / u);
    y = (f + ((fc_vm_log1p_tail_(f) + corr) - 2.12194440e-4f * e)) + 0.693359375f * e;
    special = fc_vm_pick(x == -1.0f, -HUGE_VALF, FC_VM_NAN_);
    special = fc_vm_pick((x == HUGE_VALF) | (x != x), x, special);
    y = fc_vm_pick(!(x > -1.0f) | (x == HUGE_VALF), special, y);
    sign = fc_vm_f32_to_ubits_(x) & 0x80000000u;
    return fc_vm_ubits_to_f32_((fc_vm_f32_to_ubits_(y) & 0x7fffffffu) | sign);
}

/* sin (cos_shift 0) or cos (cos_shift 1) of x, both computed on |x| (sin then takes the sign
 * of x back). n = round(|x| 2/pi) and r = |x| - n pi/2 by Cody-Waite with pi/2 in four parts:
 * P1, P2, P3 of 12 bits and P4 of 24 (their sum is within 2e-21 of pi/2), n split as nh + nl
 * with nh a multiple of 2^12 and |nl| <= 2^11, so that each product of nh or nl with P1, P2
 * or P3 is exact and only n P4 rounds. Up to |x| = 2^17 r keeps its last bits, next to the
 * multiples of pi/2 too (the closest float32 to one, 252.898, is 4.2e-9 from 161 pi/2). r lies
 * in [-pi/4, pi/4] widened by the rounding of |x| 2/pi: to 0.80 at 2^17, 0.97 at 2^21 and
 * 1.52 at 2^23, where the polynomials lose accuracy (hence the absolute bounds at the top).
 * Then the Cephes sinf and cosf polynomials on r; the quadrant n mod 4 (nl mod 4: nh is a
 * multiple of 4) picks one and the sign. Beyond 2^23 float32 values are 1 or more apart and
 * the result is NaN, as at +-inf. */
FC_INLINE float fc_vm_sincos_(float x, uint32_t cos_shift) {
    const float limit = 8388608.0f, magic = 8388608.0f; /* a + 2^23 rounds a >= 0 to an integer */
    const float split = 51539607552.0f; /* 1.5 * 2^35: rounds to a multiple of 2^12 */
    const float p1 = 1.57080078125f, p2 = -4.453584551811218e-6f, p3 = -8.706138032721356e-10f;
    const float p4 = 6.223371969669989e-14f;
    const uint32_t xbits = fc_vm_f32_to_ubits_(x);
    const float ax = fc_vm_ubits_to_f32_(xbits & 0x7fffffffu);
    const float a = fc_vm_pick(ax <= limit, ax, 0.0f); /* inf, NaN, huge: picked away below */
    float n, nh, nl, r, z, s, c, w, y;
    uint32_t q, sign;
    n = (a * 0.636619772f + magic) - magic;
    nh = (n + split) - split;
    nl = n - nh;
    r = a - nh * p1;
    r = r - nl * p1;
    r = r - nh * p2;
    r = r - nl * p2;
    r = r - nh * p3;
    r = r - nl * p3;
    r = r - n * p4;
    z = r * r;
    s = -1.9515295891e-4f;
    s = s * z + 8.3321608736e-3f;
    s = s * z - 1.6666654611e-1f;
    s = s * z * r + r;
    c = 2.443315711809948e-5f;
    c = c * z - 1.388731625493765e-3f;
    c = c * z + 4.166664568298827e-2f;
    w = 1.0f - 0.5f * z;
    c = w + (c * z * z + ((1.0f - w) - 0.5f * z)); /* with the rounding error of w */
    q = (uint32_t)(int32_t)nl + cos_shift;
    y = fc_vm_pick((int)(q & 1u), c, s);
    sign = (q & 2u) << 30; /* quadrants 2 and 3 negate */
    sign ^= cos_shift ? 0u : xbits & 0x80000000u;
    y = fc_vm_ubits_to_f32_(fc_vm_f32_to_ubits_(y) ^ sign);
    return fc_vm_pick(ax <= limit, y, fc_vm_pick(x != x, x, FC_VM_NAN_));
}

FC_INLINE float fc_vm_sinf(float x) { return fc_vm_sincos_(x, 0u); }
FC_INLINE float fc_vm_cosf(float x) { return fc_vm_sincos_(x, 1u); }

#endif
