/* Resize of one axis by a two-tap table, float dtypes (f16, f32, f64).
 *
 * fc_resize_axis_SFX(x, y, outer, in_len, out_len, inner, i0, i1, w)
 *     x is (outer, in_len, inner), y is (outer, out_len, inner), and for each output row j
 *         y[o, j, i] = (1 - w[j]) * x[o, i0[j], i] + w[j] * x[o, i1[j], i]
 *     computed in FC_A. The tables (length out_len, indices in [0, in_len)) come from
 *     graphdef.ops.nn.resize_taps: nearest modes give w == 0 and i0 == i1, linear modes
 *     the fraction. A multi-axis (bi/tri-linear) resize applies this once per axis.
 *
 * A row whose weight is exactly 0 is copied from x[o, i0[j]] rather than blended: the same
 * value for finite inputs, and an infinite input stays infinite instead of becoming
 * inf * 1 + inf * 0 = NaN (which the numpy reference, blending every row, does produce).
 * y must not alias x.
 */
#ifndef FLOWC_KERNELS_RESIZE_H
#define FLOWC_KERNELS_RESIZE_H

#include "flowc_rt.h"

#define FC_INC "kernels/resize.inc"
#define FC_WANT_FLOATS
#include "kernels/instantiate.h"

#endif /* FLOWC_KERNELS_RESIZE_H */
