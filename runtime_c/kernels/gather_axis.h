/* Gather and scatter-add along one axis, seen as (outer, dim, inner).
 *
 * int fc_gather_i64(y, x, idx, n_idx, outer, dim, inner_bytes)     (and fc_gather_i32)
 *     dtype-free: for each o < outer and j < n_idx, copies the inner_bytes bytes of
 *     x[o, idx[j], :] to y[o, j, :]; x is (outer, dim, inner), y is (outer, n_idx, inner).
 * int fc_scatter_add_SFX_i64(y, idx, upd, n_idx, outer, dim, inner)  (and ..._i32)
 *     every dtype: y, shape (outer, dim, inner), already holds the data; upd[o, j, :] is
 *     added to y[o, idx[j], :]. Repeated indices accumulate (in index order). Each add is
 *     rounded to FC_T: with f16 and repeated indices this rounds once per add where the
 *     numpy reference sums in float32 and rounds once. Integers wrap.
 *
 * int fc_check_index_i64(y, idx, n, depth)                             (and fc_check_index_i32)
 *     y = idx when every idx[j] lies in [0, depth) (no negative counting from the end here).
 *
 * idx is flat (the index tensor of any shape, in row-major order). A negative index counts
 * from the end; any index outside [-dim, dim) makes the kernel return FC_ERR_INDEX. All
 * indices are checked before anything is written, so on error y is untouched. Otherwise
 * the result is FC_OK. y must not alias x (gather) or upd (scatter).
 */
#ifndef FLOWC_KERNELS_GATHER_AXIS_H
#define FLOWC_KERNELS_GATHER_AXIS_H

#include "flowc_rt.h"

/* idx[j] as int64_t, idx holding int64_t (wide) or int32_t values. */
FC_INLINE int64_t fc_index_at_(const void *idx, int wide, long j) {
    return wide ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
}

/* FC_OK when every index lies in [-dim, dim), else FC_ERR_INDEX. */
FC_INLINE int fc_index_check_(const void *idx, int wide, long n_idx, long dim) {
    long j;
    for (j = 0; j < n_idx; j++) {
        const int64_t v = fc_index_at_(idx, wide, j);
        if (v < -(int64_t)dim || v >= (int64_t)dim)
            return FC_ERR_INDEX;
    }
    return FC_OK;
}

/* A checked index, made non-negative. */
FC_INLINE long fc_index_norm_(const void *idx, int wide, long j, long dim) {
    const int64_t v = fc_index_at_(idx, wide, j);
    return (long)(v < 0 ? v + (int64_t)dim : v);
}

/* y = idx when every element of idx lies in [0, depth) (check_index: class labels), else
 * FC_ERR_INDEX with y untouched. */
FC_INLINE int fc_check_index_any_(void *y, const void *idx, int wide, long n, long depth) {
    long j;
    for (j = 0; j < n; j++) {
        const int64_t v = fc_index_at_(idx, wide, j);
        if (v < 0 || v >= (int64_t)depth)
            return FC_ERR_INDEX;
    }
    if (y != idx && n > 0)
        memcpy(y, idx, (size_t)n * (wide ? sizeof(int64_t) : sizeof(int32_t)));
    return FC_OK;
}

FC_INLINE int fc_check_index_i64(int64_t *y, const int64_t *idx, long n, long depth) {
    return fc_check_index_any_(y, idx, 1, n, depth);
}

FC_INLINE int fc_check_index_i32(int32_t *y, const int32_t *idx, long n, long depth) {
    return fc_check_index_any_(y, idx, 0, n, depth);
}

FC_INLINE int fc_gather_any_(void *y, const void *x, const void *idx, int wide, long n_idx,
                             long outer, long dim, long inner_bytes) {
    unsigned char *yb = (unsigned char *)y;
    const unsigned char *xb = (const unsigned char *)x;
    long o, j;
    if (fc_index_check_(idx, wide, n_idx, dim) != FC_OK)
        return FC_ERR_INDEX;
    if (inner_bytes <= 0)
        return FC_OK;
    for (o = 0; o < outer; o++)
        for (j = 0; j < n_idx; j++)
            memcpy(yb + (o * n_idx + j) * inner_bytes,
                   xb + (o * dim + fc_index_norm_(idx, wide, j, dim)) * inner_bytes,
                   (size_t)inner_bytes);
    return FC_OK;
}

FC_INLINE int fc_gather_i64(void *y, const void *x, const int64_t *idx, long n_idx, long outer,
                            long dim, long inner_bytes) {
    return fc_gather_any_(y, x, idx, 1, n_idx, outer, dim, inner_bytes);
}

FC_INLINE int fc_gather_i32(void *y, const void *x, const int32_t *idx, long n_idx, long outer,
                            long dim, long inner_bytes) {
    return fc_gather_any_(y, x, idx, 0, n_idx, outer, dim, inner_bytes);
}

#define FC_INC "kernels/gather_axis.inc"
#define FC_WANT_FLOATS
#define FC_WANT_INTS
#include "kernels/instantiate.h"

#endif /* FLOWC_KERNELS_GATHER_AXIS_H */
