/* Normalization kernels, float dtypes (f16, f32, f64): inference batch norm, layer norm,
 * softmax and log-softmax. They compute in FC_A (float for f16 and f32) and follow the
 * numpy references of graphdef/ops/nn.py operation for operation:
 *
 * fc_batch_norm_SFX(x, scale, bias, mean, var, y, n, c, inner, eps)
 *     x and y are (n, c, inner); the other four have length c.
 *     y = (x - mean) * (scale / sqrt(var + eps)) + bias       (per channel)
 * fc_layer_norm_SFX(x, scale, bias, y, outer, inner, eps)
 *     normalizes each of the outer rows of length inner; scale and bias have length inner
 *     (bias may be NULL).  y = (x - mu) / sqrt(var + eps) * scale + bias, where mu and var
 *     are the row's mean and (biased) variance, the variance taken of the centred values.
 * fc_softmax_SFX(x, y, outer, len, inner), fc_log_softmax_SFX(...)
 *     along the middle axis of an (outer, len, inner) view, shifted by the maximum so that
 *     exp never overflows; a NaN anywhere along the axis makes that whole slice NaN, as in
 *     numpy.
 *
 * y may alias x in every kernel (each element is written after its last read).
 */
#ifndef FLOWC_KERNELS_NORM_H
#define FLOWC_KERNELS_NORM_H

#include "flowc_rt.h"

/* libm in the compute type: the float functions for f16/f32, the double ones for f64. */
#define FC_NORM_MATH_(fn, v) \
    (sizeof(FC_A) == sizeof(float) ? (FC_A)fn##f((float)(v)) : (FC_A)fn((double)(v)))
#define FC_NORM_SQRT(v) FC_NORM_MATH_(sqrt, v)
#define FC_NORM_EXP(v) FC_NORM_MATH_(exp, v)
#define FC_NORM_LOG(v) FC_NORM_MATH_(log, v)

#define FC_INC "kernels/norm.inc"
#define FC_WANT_FLOATS
#include "kernels/instantiate.h"

/* ------------------------------------------------------------------ float32 fast paths
 * fc_layer_norm_vec_f32, fc_softmax_vec_f32 and fc_log_softmax_vec_f32 take the arguments of
 * their generic twins above and compute the same values with fc_vf vectors (kernels/vecf.h):
 * sums in another order, x * (1/den) for divisions, and fc_vf_exp (about 1 ulp) for expf.
 * Softmax runs along contiguous rows (inner == 1) or across inner positions, FC_VF_VL slices
 * at a time. A slice holding a NaN or an infinite maximum goes through the generic code, so
 * such slices give exactly numpy's NaNs. y may alias x.
 */
#include "kernels/vecf.h"

FC_VF_INLINE void fc_layer_norm_vec_f32(const float *x, const float *scale, const float *bias, float *y,
                                        long outer, long inner, double eps) {
    /* Every loop runs over a count fixed before it (pairs, whole vectors, the rest), not from
     * where the loop before it stopped: with the sizes constant, GCC then sees each remainder
     * loop's exact trip count (0 for inner = 768) instead of warning that an unbounded one
     * "invokes undefined behavior" (-Waggressive-loop-optimizations). */
    const long pairs = inner / (2 * FC_VF_VL) * (2 * FC_VF_VL), full = inner / FC_VF_VL * FC_VF_VL;
    long o, i;
    if (inner <= 0)
        return;
    for (o = 0; o < outer; o++) {
        const float *xr = x + o * inner;
        float *yr = y + o * inner;
        fc_vf s0 = FC_VF_SPLAT(0.0f), s1 = s0, mv, rv;
        float sum, sq, mu, r;
        for (i = 0; i < pairs; i += 2 * FC_VF_VL) {
            s0 = s0 + fc_vf_load(xr + i);
            s1 = s1 + fc_vf_load(xr + i + FC_VF_VL);
        }
        for (i = pairs; i < full; i += FC_VF_VL)
            s0 = s0 + fc_vf_load(xr + i);
        sum = fc_vf_sum(s0 + s1);
        for (i = full; i < inner; i++)
            sum += xr[i];
        mu = sum / (float)inner;
        mv = FC_VF_SPLAT(mu);
        s0 = s1 = FC_VF_SPLAT(0.0f);
        for (i = 0; i < pairs; i += 2 * FC_VF_VL) {
            const fc_vf d0 = fc_vf_load(xr + i) - mv, d1 = fc_vf_load(xr + i + FC_VF_VL) - mv;
            s0 = d0 * d0 + s0;
            s1 = d1 * d1 + s1;
        }
        for (i = pairs; i < full; i += FC_VF_VL) {
            const fc_vf d0 = fc_vf_load(xr + i) - mv;
            s0 = d0 * d0 + s0;
        }
        sq = fc_vf_sum(s0 + s1);
        for (i = full; i < inner; i++)
            sq += (xr[i] - mu) * (xr[i] - mu);
        r = 1.0f / sqrtf(sq / (float)inner + (float)eps);
        rv = FC_VF_SPLAT(r);
        for (i = 0; i < full; i += FC_VF_VL) {
            fc_vf v = (fc_vf_load(xr + i) - mv) * rv * fc_vf_load(scale + i);
            if (bias != NULL)
                v = v + fc_vf_load(bias + i);
            fc_vf_store(yr + i, v);
        }
        for (i = full; i < inner; i++)
            yr[i] = (xr[i] - mu) * r * scale[i] + (bias != NULL ? bias[i] : 0.0f);
    }
}

#if FC_VF_VL > 1
/* Up to FC_VF_VL floats p[0 .. n) in a vector, the other lanes fill. */
FC_VF_INLINE fc_vf fc_norm_part_(const float *p, long n, float fill) {
    float lane[FC_VF_VL];
    long i;
    for (i = 0; i < FC_VF_VL; i++)
        lane[i] = i < n ? p[i] : fill;
    return fc_vf_load(lane);
}

/* One contiguous row of len >= 1. */
FC_VF_INLINE void fc_softmax_row_f32_(const float *x, float *y, long len, int log_out) {
    const long full = len / FC_VF_VL * FC_VF_VL, rest = len - full;
    fc_vf mv = FC_VF_SPLAT(-HUGE_VALF), sv = FC_VF_SPLAT(0.0f), v;
    fc_vi bad = FC_VI_SPLAT(0);
    float m, s, lane[FC_VF_VL];
    int32_t flag[FC_VF_VL];
    long i;
    if (full >= 4 * FC_VF_VL) { /* four running maxima: the compare-and-blend chain is slow */
        fc_vf m1 = mv, m2 = mv, m3 = mv;
        for (i = 0; i + 4 * FC_VF_VL <= full; i += 4 * FC_VF_VL) {
            const fc_vf v0 = fc_vf_load(x + i), v1 = fc_vf_load(x + i + FC_VF_VL);
            const fc_vf v2 = fc_vf_load(x + i + 2 * FC_VF_VL), v3 = fc_vf_load(x + i + 3 * FC_VF_VL);
            bad |= (v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3);
            mv = fc_vf_max2(mv, v0);
            m1 = fc_vf_max2(m1, v1);
            m2 = fc_vf_max2(m2, v2);
            m3 = fc_vf_max2(m3, v3);
        }
        mv = fc_vf_max2(fc_vf_max2(mv, m1), fc_vf_max2(m2, m3));
    } else {
        i = 0;
    }
    for (; i < full; i += FC_VF_VL) {
        v = fc_vf_load(x + i);
        bad |= v != v;
        mv = fc_vf_max2(mv, v);
    }
    if (rest) {
        v = fc_norm_part_(x + full, rest, -HUGE_VALF);
        bad |= v != v;
        mv = fc_vf_max2(mv, v);
    }
    m = fc_vf_max(mv);
    memcpy(flag, &bad, sizeof flag);
    for (i = 0; i < FC_VF_VL; i++)
        if (flag[i])
            m = HUGE_VALF;
    if (!(m < HUGE_VALF && m > -HUGE_VALF)) { /* NaN, +inf, or all -inf */
        fc_softmax_slice__f32(x, y, len, 1, log_out);
        return;
    }
    mv = FC_VF_SPLAT(m);
    for (i = 0; i + 2 * FC_VF_VL <= full; i += 2 * FC_VF_VL) {
        const fc_vf e0 = fc_vf_exp(fc_vf_load(x + i) - mv);
        const fc_vf e1 = fc_vf_exp(fc_vf_load(x + i + FC_VF_VL) - mv);
        sv = sv + (e0 + e1);
        if (!log_out) {
            fc_vf_store(y + i, e0);
            fc_vf_store(y + i + FC_VF_VL, e1);
        }
    }
    for (; i < full; i += FC_VF_VL) {
        v = fc_vf_exp(fc_vf_load(x + i) - mv);
        sv = sv + v;
        if (!log_out)
            fc_vf_store(y + i, v);
    }
    if (rest) {
        v = fc_vf_exp(fc_norm_part_(x + full, rest, -HUGE_VALF) - mv);
        sv = sv + v;
        fc_vf_store(lane, v);
        if (!log_out)
            for (i = 0; i < rest; i++)
                y[full + i] = lane[i];
    }
    s = fc_vf_sum(sv);
    if (log_out) {
        const float ls = logf(s);
        for (i = 0; i < full; i += FC_VF_VL)
            fc_vf_store(y + i, (fc_vf_load(x + i) - mv) - FC_VF_SPLAT(ls));
        for (i = full; i < len; i++)
            y[i] = (x[i] - m) - ls;
    } else {
        const float r = 1.0f / s;
        const fc_vf rv = FC_VF_SPLAT(r);
        for (i = 0; i < full; i += FC_VF_VL)
            fc_vf_store(y + i, fc_vf_load(y + i) * rv);
        for (i = full; i < len; i++)
            y[i] *= r;
    }
}

/* FC_VF_VL slices side by side: x[l * inner + lane], l < len. */
FC_VF_INLINE void fc_softmax_cols_f32_(const float *x, float *y, long len, long inner, int log_out) {
    fc_vf mv = FC_VF_SPLAT(-HUGE_VALF), sv = FC_VF_SPLAT(0.0f), v;
    fc_vi bad = FC_VI_SPLAT(0);
    float lane[FC_VF_VL];
    int32_t flag[FC_VF_VL];
    long l, i;
    for (l = 0; l < len; l++) {
        v = fc_vf_load(x + l * inner);
        bad |= v != v;
        mv = fc_vf_max2(mv, v);
    }
    bad |= mv == FC_VF_SPLAT(HUGE_VALF);
    bad |= mv == FC_VF_SPLAT(-HUGE_VALF);
    memcpy(flag, &bad, sizeof flag);
    for (i = 0; i < FC_VF_VL; i++) {
        if (flag[i]) {
            for (i = 0; i < FC_VF_VL; i++)
                fc_softmax_slice__f32(x + i, y + i, len, inner, log_out);
            return;
        }
    }
    for (l = 0; l < len; l++) {
        v = fc_vf_exp(fc_vf_load(x + l * inner) - mv);
        sv = sv + v;
        if (!log_out)
            fc_vf_store(y + l * inner, v);
    }
    if (log_out) {
        fc_vf_store(lane, sv);
        for (i = 0; i < FC_VF_VL; i++)
            lane[i] = logf(lane[i]);
        sv = fc_vf_load(lane);
        for (l = 0; l < len; l++)
            fc_vf_store(y + l * inner, (fc_vf_load(x + l * inner) - mv) - sv);
    } else {
        sv = FC_VF_SPLAT(1.0f) / sv;
        for (l = 0; l < len; l++)
            fc_vf_store(y + l * inner, fc_vf_load(y + l * inner) * sv);
    }
}
#endif

FC_VF_INLINE void fc_softmax_vec_any_f32_(const float *x, float *y, long outer, long len, long inner,
                                          int log_out) {
    const long vec_cols = FC_VF_VL > 1 && inner > 1 ? inner / FC_VF_VL * FC_VF_VL : 0;
    long o, i;
    if (len <= 0)
        return;
    for (o = 0; o < outer; o++) {
        const float *xo = x + o * len * inner;
        float *yo = y + o * len * inner;
#if FC_VF_VL > 1
        if (inner == 1) {
            fc_softmax_row_f32_(xo, yo, len, log_out);
            continue;
        }
        for (i = 0; i < vec_cols; i += FC_VF_VL)
            fc_softmax_cols_f32_(xo + i, yo + i, len, inner, log_out);
#endif
        for (i = vec_cols; i < inner; i++)
            fc_softmax_slice__f32(xo + i, yo + i, len, inner, log_out);
    }
}

FC_VF_INLINE void fc_softmax_vec_f32(const float *x, float *y, long outer, long len, long inner) {
    fc_softmax_vec_any_f32_(x, y, outer, len, inner, 0);
}

FC_VF_INLINE void fc_log_softmax_vec_f32(const float *x, float *y, long outer, long len, long inner) {
    fc_softmax_vec_any_f32_(x, y, outer, len, inner, 1);
}

#undef FC_NORM_MATH_
#undef FC_NORM_SQRT
#undef FC_NORM_EXP
#undef FC_NORM_LOG

#endif /* FLOWC_KERNELS_NORM_H */
