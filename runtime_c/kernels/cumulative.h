/* Running sums and products along the middle axis of an (outer, len, inner) view.
 *
 * fc_cumsum_SFX(x, y, outer, len, inner, exclusive, reverse)    floats and ints
 * fc_cumprod_SFX(x, y, outer, len, inner, exclusive, reverse)
 *
 * y has x's shape. Inclusive: y[k] folds x[0..k]; exclusive: x[0..k-1] (the first is 0 for
 * sums, 1 for products); reverse runs from the end of the axis instead. Accumulators are
 * FC_ACC (float for f16 and f32; uint64_t for integers, so overflow wraps as numpy's
 * fixed-width results do, never undefined). Each element of x is read once, before the
 * same element of y is written, so y may alias x.
 *
 * Loop order: blocks of up to FC_CUM_BLOCK inner positions hold their accumulators in a
 * local array while the len rows stream past, so memory is walked contiguously.
 */
#ifndef FLOWC_KERNELS_CUMULATIVE_H
#define FLOWC_KERNELS_CUMULATIVE_H

#include "flowc_rt.h"

#define FC_CUM_BLOCK 64

#define FC_INC "kernels/cumulative.inc"
#define FC_WANT_FLOATS
#define FC_WANT_INTS
#include "kernels/instantiate.h"

#endif /* FLOWC_KERNELS_CUMULATIVE_H */
