/* Branch-free float32 exp, tanh and erf, written so that a loop calling them vectorizes.
 *
 * libm's expf and tanhf are calls the C compiler cannot vectorize: a fused elementwise loop
 * or a GEMM epilogue with a tanh in it ran one element at a time (GPT-2's tanh-GELU: ~30 ns
 * per element). These are plain C99 on float and int32_t with no branches (selects only),
 * no calls and no tables, so GCC and Clang at -O3 turn the loops that call them into
 * AVX-512, AVX2, NEON or SSE code from this one source, and they stay correct scalar code
 * everywhere else (Cortex-M included).
 *
 * fc_vm_expf: round(x / ln 2) = n by the 1.5 * 2^23 trick, r = x - n ln 2 in two parts
 *             (Cody-Waite), e^r by a degree-7 polynomial (Cephes' expf coefficients), and
 *             2^n applied as two factors 2^(n/2) and 2^(n - n/2) so that results down in
 *             the subnormals and up to FLT_MAX round once. Above 88.7228: +inf; below
 *             -103.972: 0; NaN stays NaN. Max error 1 ulp over every float32 (tests).
 * fc_vm_tanhf: |x| < 0.625: x + x^3 P(x^2) (Cephes' tanhf polynomial); otherwise
 *             sign(x) (1 - 2 / (e^(2|x|) + 1)). tanh(+-inf) = +-1, NaN stays NaN, -0 stays
 *             -0. Max error 2 ulp.
 * fc_vm_erff: see below. Max error 3 ulp.
 * Error bounds are measured against numpy in float64 over a dense sweep of float32 inputs
 * (tests/runtime_c/test_vmath.py).
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

FC_INLINE float fc_vm_expf(float x) {
    const float hi = 88.72283935546875f, lo = -103.97207641601562f;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const int nan = x != x;
    float xc = nan ? 0.0f : x, n, r, p, e, y;
    int32_t ni, n1;
    xc = xc > hi ? hi : xc;
    xc = xc < lo ? lo : xc;
    n = (xc * 1.44269504088896341f + magic) - magic;
    r = xc - n * 0.693359375f; /* ln 2 = 0.693359375 - 2.12194440e-4 (Cody-Waite) */
    r = r + n * 2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    e = (p * (r * r) + r) + 1.0f;
    ni = (int32_t)n; /* -150 .. 128: both factors normal floats */
    n1 = ni / 2;
    y = e * fc_vm_bits_to_f32_((n1 + 127) * 8388608) * fc_vm_bits_to_f32_((ni - n1 + 127) * 8388608);
    y = x > hi ? HUGE_VALF : y;
    y = x < lo ? 0.0f : y;
    return nan ? x : y;
}

FC_INLINE float fc_vm_tanhf(float x) {
    const float ax = x < 0 ? -x : x, z = x * x;
    float small, e, big;
    small = -5.70498872745e-3f;
    small = small * z + 2.06390887954e-2f;
    small = small * z - 5.37397155531e-2f;
    small = small * z + 1.33314422036e-1f;
    small = small * z - 3.33332819422e-1f;
    small = small * z * x + x;
    small = z == 0.0f ? x : small; /* -0 and the smallest x: tanh(x) is x */
    e = fc_vm_expf(ax + ax);
    big = 1.0f - 2.0f / (e + 1.0f);
    big = x < 0 ? -big : big;
    return ax < 0.625f ? small : big; /* NaN: big, which is NaN */
}

/* erf: |x| < 1: x (2/sqrt(pi)) (1 - x^2/3 + x^4/10 - ...), the Maclaurin series to x^21;
 * otherwise sign(x) (1 - t P(t) e^(-x^2)) with t = 1 / (1 + 0.3275911 |x|) and P of degree
 * 4 (Abramowitz and Stegun 7.1.26, absolute error below 1.5e-7). erf(+-inf) = +-1, NaN stays
 * NaN, -0 stays -0. */
FC_INLINE float fc_vm_erff(float x) {
    const float ax = x < 0 ? -x : x, z = x * x;
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
    small = z == 0.0f ? 1.12837917e+00f * x : small; /* -0 stays -0 */
    t = 1.0f / (1.0f + 0.3275911f * ax);
    p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    big = 1.0f - p * t * fc_vm_expf(-z);
    big = ax > 4.0f ? 1.0f : big; /* 1 in float32 from 3.92 on; keeps inf * 0 away */
    big = x < 0 ? -big : big;
    return ax < 1.0f ? small : big; /* NaN: big, which is NaN */
}

#endif
