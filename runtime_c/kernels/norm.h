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

#undef FC_NORM_MATH_
#undef FC_NORM_SQRT
#undef FC_NORM_EXP
#undef FC_NORM_LOG

#endif /* FLOWC_KERNELS_NORM_H */
