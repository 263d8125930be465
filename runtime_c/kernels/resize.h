/* Resize of one axis by tap tables, float dtypes (f16, f32, f64).
 *
 * x is (outer, in_len, inner), y is (outer, out_len, inner); the tables (indices in
 * [0, in_len)) come from graphdef.ops.nn.resize_table, computed when the model is compiled.
 * A multi-axis resize applies one of these once per axis. Both compute in FC_A.
 *
 * fc_resize_axis_SFX(x, y, outer, in_len, out_len, inner, i0, i1, w)
 *     two taps (nearest and linear modes), tables of length out_len:
 *         y[o, j, i] = (1 - w[j]) * x[o, i0[j], i] + w[j] * x[o, i1[j], i]
 *     nearest modes give w == 0 and i0 == i1.
 *
 * fc_resize_taps_SFX(x, y, outer, in_len, out_len, inner, ntaps, idx, w, fill)
 *     ntaps taps (cubic, antialiased linear and cubic, tf_crop_and_resize), tables of
 *     length out_len * ntaps, row j at j * ntaps:
 *         y[o, j, i] = sum_k w[j, k] * x[o, idx[j, k], i]
 *     a row whose first index is negative lies outside the crop region: y = fill.
 *
 * A tap whose weight is exactly 0 is skipped (a row of weight 0 is a copy in
 * fc_resize_axis): the same value for finite inputs, and an infinite input stays infinite
 * instead of becoming inf * 0 = NaN (which the numpy reference, blending every tap, does
 * produce). y must not alias x.
 */
#ifndef FLOWC_KERNELS_RESIZE_H
#define FLOWC_KERNELS_RESIZE_H

#include "flowc_rt.h"

#define FC_INC "kernels/resize.inc"
#define FC_WANT_FLOATS
#include "kernels/instantiate.h"

#endif /* FLOWC_KERNELS_RESIZE_H */
