/* Gathers and scatters by element and by index tuple (ONNX GatherElements, ScatterElements,
 * GatherND, ScatterND).
 *
 * "Elements" geometry. The index tensor (n elements, row-major) is described by `rank` dims
 * (merged by the caller, size-1 axes dropped) and, per dim, the stride of that dim in data,
 * 0 for the indexed axis. Element e of the index tensor, at coordinates c, addresses data
 * element  sum_d c[d] * strides[d] + idx[e] * axis_stride,  idx[e] normalized over axis_dim.
 *
 * int fc_gather_elements_i64(y, x, idx, n, rank, dims, strides, axis_dim, axis_stride, elem_size)
 *     (and _i32) dtype-free: y[e] = that element of x, for e < n; y has the index shape.
 * int fc_scatter_elements_SFX_i64(y, idx, upd, n, rank, dims, strides, axis_dim, axis_stride, op)
 *     (and _i32) every numeric dtype: y already holds the data; for e = 0, 1, ... n-1 in
 *     order, y[addr(e)] = combine(y[addr(e)], upd[e]) (upd has the index shape).
 *
 * "ND" geometry. data is seen as (batches, ...) with batch_stride elements per batch; idx
 * as (batches, count, k) index tuples, component j normalized over dims[j] and weighted by
 * strides[j] (element strides of data). Each tuple addresses a slice of `slice` contiguous
 * elements.
 *
 * int fc_gather_nd_i64(y, x, idx, batches, count, k, dims, strides, batch_stride, slice,
 *                      elem_size)
 *     (and _i32) dtype-free: y, shape (batches, count, slice), gets the addressed slices.
 * int fc_scatter_nd_SFX_i64(y, idx, upd, count, k, dims, strides, slice, op)
 *     (and _i32) every numeric dtype, one batch: y already holds the data; for tuples
 *     t = 0 .. count-1 in order, the addressed slice of y is combined with upd[t, :].
 *
 * combine, by op: FC_RED_NONE writes the update (with repeated indices the last one wins),
 * FC_RED_ADD and FC_RED_MUL add or multiply (rounded to FC_T after each step; integers
 * wrap), FC_RED_MAX and FC_RED_MIN keep the larger or smaller (a NaN on either side gives
 * NaN, as numpy's maximum). bool data uses the u8 kernels (same storage), FC_RED_NONE only.
 *
 * A negative index counts from the end; any index outside [-dim, dim) makes the kernel return
 * FC_ERR_INDEX, and all indices are checked before anything is written. Otherwise FC_OK.
 * y must not overlap x, idx or upd. elem_size is 1, 2, 4 or 8 (others copy nothing).
 */
#ifndef FLOWC_KERNELS_GATHER_ND_H
#define FLOWC_KERNELS_GATHER_ND_H

#include "flowc_rt.h"
#include "kernels/gather_axis.h"

#define FC_RED_NONE 0
#define FC_RED_ADD 1
#define FC_RED_MUL 2
#define FC_RED_MAX 3
#define FC_RED_MIN 4

/* One element of es bytes from x to y; a constant size compiles to one load and store. */
FC_INLINE void fc_gs_move_(unsigned char *y, const unsigned char *x, int es) {
    switch (es) {
    case 1:
        *y = *x;
        break;
    case 2:
        memcpy(y, x, 2);
        break;
    case 4:
        memcpy(y, x, 4);
        break;
    case 8:
        memcpy(y, x, 8);
        break;
    default:
        break;
    }
}

/* Data offset of the first element of row `row` (rows run over dims[0 .. rank-2]). */
FC_INLINE long fc_gs_row_offset_(long row, int rank, const long *dims, const long *strides) {
    long off = 0;
    int d;
    for (d = rank - 2; d >= 0; d--) {
        off += (row % dims[d]) * strides[d];
        row /= dims[d];
    }
    return off;
}

FC_INLINE int fc_gather_elements_any_(void *y, const void *x, const void *idx, int wide, long n,
                                      int rank, const long *dims, const long *strides,
                                      long axis_dim, long axis_stride, int es) {
    unsigned char *yb = (unsigned char *)y;
    const unsigned char *xb = (const unsigned char *)x;
    long row, rows, len, step, t, e = 0;
    if (fc_index_check_(idx, wide, n, axis_dim) != FC_OK)
        return FC_ERR_INDEX;
    if (n <= 0 || rank <= 0)
        return FC_OK;
    len = dims[rank - 1];
    step = strides[rank - 1];
    rows = n / len;
    for (row = 0; row < rows; row++) {
        const long base = fc_gs_row_offset_(row, rank, dims, strides);
        for (t = 0; t < len; t++, e++) {
            const long at = base + t * step + fc_index_norm_(idx, wide, e, axis_dim) * axis_stride;
            fc_gs_move_(yb + e * es, xb + at * es, es);
        }
    }
    return FC_OK;
}

FC_INLINE int fc_gather_elements_i64(void *y, const void *x, const int64_t *idx, long n, int rank,
                                     const long *dims, const long *strides, long axis_dim,
                                     long axis_stride, int elem_size) {
    return fc_gather_elements_any_(y, x, idx, 1, n, rank, dims, strides, axis_dim, axis_stride,
                                   elem_size);
}

FC_INLINE int fc_gather_elements_i32(void *y, const void *x, const int32_t *idx, long n, int rank,
                                     const long *dims, const long *strides, long axis_dim,
                                     long axis_stride, int elem_size) {
    return fc_gather_elements_any_(y, x, idx, 0, n, rank, dims, strides, axis_dim, axis_stride,
                                   elem_size);
}

/* FC_OK when component j of every k-tuple lies in [-dims[j], dims[j]), else FC_ERR_INDEX. */
FC_INLINE int fc_gs_check_nd_(const void *idx, int wide, long tuples, long k, const long *dims) {
    long t, j;
    for (t = 0; t < tuples; t++)
        for (j = 0; j < k; j++) {
            const int64_t v = fc_index_at_(idx, wide, t * k + j);
            if (v < -(int64_t)dims[j] || v >= (int64_t)dims[j])
                return FC_ERR_INDEX;
        }
    return FC_OK;
}

/* Element offset of the slice that checked tuple t addresses. */
FC_INLINE long fc_gs_tuple_offset_(const void *idx, int wide, long t, long k, const long *dims,
                                   const long *strides) {
    long j, off = 0;
    for (j = 0; j < k; j++)
        off += fc_index_norm_(idx, wide, t * k + j, dims[j]) * strides[j];
    return off;
}

FC_INLINE int fc_gather_nd_any_(void *y, const void *x, const void *idx, int wide, long batches,
                                long count, long k, const long *dims, const long *strides,
                                long batch_stride, long slice, int es) {
    unsigned char *yb = (unsigned char *)y;
    const unsigned char *xb = (const unsigned char *)x;
    const size_t bytes = (size_t)(slice * es);
    long b, t;
    if (fc_gs_check_nd_(idx, wide, batches * count, k, dims) != FC_OK)
        return FC_ERR_INDEX;
    if (bytes == 0)
        return FC_OK;
    for (b = 0; b < batches; b++)
        for (t = 0; t < count; t++) {
            const long tuple = b * count + t;
            const long at = b * batch_stride + fc_gs_tuple_offset_(idx, wide, tuple, k, dims, strides);
            memcpy(yb + tuple * (long)bytes, xb + at * es, bytes);
        }
    return FC_OK;
}

FC_INLINE int fc_gather_nd_i64(void *y, const void *x, const int64_t *idx, long batches, long count,
                               long k, const long *dims, const long *strides, long batch_stride,
                               long slice, int elem_size) {
    return fc_gather_nd_any_(y, x, idx, 1, batches, count, k, dims, strides, batch_stride, slice,
                             elem_size);
}

FC_INLINE int fc_gather_nd_i32(void *y, const void *x, const int32_t *idx, long batches, long count,
                               long k, const long *dims, const long *strides, long batch_stride,
                               long slice, int elem_size) {
    return fc_gather_nd_any_(y, x, idx, 0, batches, count, k, dims, strides, batch_stride, slice,
                             elem_size);
}

#define FC_INC "kernels/gather_nd.inc"
#define FC_WANT_FLOATS
#define FC_WANT_INTS
#include "kernels/instantiate.h"

#endif /* FLOWC_KERNELS_GATHER_ND_H */
