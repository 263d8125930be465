/* General matrix product over strided operands, every dtype.
 *
 *     y[i*n + j] = alpha * sum_p a[i*a_rs + p*a_cs] * b[p*b_rs + j*b_cs]
 *                + beta * c[i*c_rs + j*c_cs]                  (c may be NULL: no term)
 *
 * Strides are in elements and express transposes (swap rs and cs) and broadcasting (0).
 * y is contiguous (m, n). It may alias c only when c has y's layout (c_rs == n, c_cs == 1):
 * each y element is written after the one c element it reads. k may be 0 (y = beta * c).
 *
 * Floats accumulate in FC_ACC (float for f16 and f32, as numpy's float32 matmul does) and
 * round once on store. Integers ignore alpha and beta (the caller guarantees both are 1)
 * and accumulate in uint64_t, so overflow wraps exactly as numpy's fixed-width matmul.
 *
 * Loop order i, j, p (a dot product per output): correct for every stride pattern; a
 * blocked, vectorized kernel for contiguous operands can specialize later.
 */
#ifndef FLOWC_KERNELS_MATMUL_H
#define FLOWC_KERNELS_MATMUL_H

#include "flowc_rt.h"

#define FC_INC "kernels/matmul.inc"
#define FC_WANT_FLOATS
#define FC_WANT_INTS
#include "kernels/instantiate.h"

#endif /* FLOWC_KERNELS_MATMUL_H */
