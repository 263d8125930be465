/* Dtype-free data movement: strided n-d copy, fill, and table-driven pad.
 * Elements are 1, 2, 4 or 8 bytes (elem_size) and are moved with memcpy, so any type of
 * that size works and no pointer is reinterpreted. Strides are in elements.
 *
 * void fc_copy_nd(y, y_strides, x, x_strides, dims, rank, elem_size)
 *     for every index vector idx within dims (rank 0 .. FC_COPY_MAX_RANK; rank 0 copies one
 *     element): y[idx . y_strides] = x[idx . x_strides]. Strides may be 0 (broadcast) or
 *     negative (then x or y points at the element of index 0, not at the lowest address).
 *     One kernel, many ops:
 *       transpose     x_strides permuted, y contiguous
 *       slice         x offset to the start, x_strides multiplied by the steps (< 0 too)
 *       expand        x_strides 0 on broadcast axes
 *       tile          x viewed as (reps, dim) pairs with stride 0 on the reps axes
 *       concat/split  y (or x) offset to the block, with the strides of the whole tensor
 *     y must not overlap x unless both describe exactly the same elements.
 * void fc_fill(y, count, value, elem_size)
 *     writes the element at value to y[0 .. count).
 * void fc_pad_nd(y, x, rank, out_dims, x_strides, src_index, fill, elem_size)
 *     y is contiguous with out_dims. Along axis d, src_index[d][o] (o < out_dims[d]) is the
 *     input index that output position o reads, or -1 for padding; an element with -1 on
 *     any axis is *fill, else x[sum_d src_index[d][o_d] * x_strides[d]]. The caller's
 *     tables express constant (-1), reflect and edge (mirrored or clamped indices) pads,
 *     and negative pads (crops) by starting past the cropped input.
 *
 * Ranks above FC_COPY_MAX_RANK, and element sizes other than 1, 2, 4, 8, do nothing.
 */
#ifndef FLOWC_KERNELS_COPY_H
#define FLOWC_KERNELS_COPY_H

#include "flowc_rt.h"

#define FC_COPY_MAX_RANK 8

/* n elements of size es from x (byte stride xs) to y (byte stride ys). memcpy with a
 * constant size compiles to one load and one store. */
FC_INLINE void fc_copy_run_(unsigned char *y, long ys, const unsigned char *x, long xs, long n,
                            int es) {
    long t;
    if (xs == es && ys == es) {
        memcpy(y, x, (size_t)(n * es));
        return;
    }
    switch (es) {
    case 1:
        for (t = 0; t < n; t++)
            y[t * ys] = x[t * xs];
        break;
    case 2:
        for (t = 0; t < n; t++)
            memcpy(y + t * ys, x + t * xs, 2);
        break;
    case 4:
        for (t = 0; t < n; t++)
            memcpy(y + t * ys, x + t * xs, 4);
        break;
    default:
        for (t = 0; t < n; t++)
            memcpy(y + t * ys, x + t * xs, 8);
        break;
    }
}

FC_INLINE int fc_copy_size_ok_(int elem_size) {
    return elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8;
}

FC_INLINE void fc_copy_nd(void *y, const long *y_strides, const void *x, const long *x_strides,
                          const long *dims, int rank, int elem_size) {
    unsigned char *yb = (unsigned char *)y;
    const unsigned char *xb = (const unsigned char *)x;
    long cnt[FC_COPY_MAX_RANK];
    long xo = 0, yo = 0; /* byte offsets of the current row's first element */
    long n, xs, ys;
    int d, last = rank - 1;
    if (rank < 0 || rank > FC_COPY_MAX_RANK || !fc_copy_size_ok_(elem_size))
        return;
    if (rank == 0) {
        memcpy(yb, xb, (size_t)elem_size);
        return;
    }
    for (d = 0; d < rank; d++) {
        if (dims[d] <= 0)
            return;
        cnt[d] = 0;
    }
    n = dims[last];
    xs = x_strides[last] * elem_size;
    ys = y_strides[last] * elem_size;
    for (;;) {
        fc_copy_run_(yb + yo, ys, xb + xo, xs, n, elem_size);
        /* Odometer over the outer axes; offsets move as integers, so no pointer ever
         * leaves its object between rows. */
        for (d = last - 1; d >= 0; d--) {
            xo += x_strides[d] * elem_size;
            yo += y_strides[d] * elem_size;
            if (++cnt[d] < dims[d])
                break;
            xo -= x_strides[d] * elem_size * dims[d];
            yo -= y_strides[d] * elem_size * dims[d];
            cnt[d] = 0;
        }
        if (d < 0)
            return;
    }
}

FC_INLINE void fc_fill(void *y, long count, const void *value, int elem_size) {
    unsigned char *yb = (unsigned char *)y;
    const unsigned char *v = (const unsigned char *)value;
    int b, same = 1;
    if (count <= 0 || !fc_copy_size_ok_(elem_size))
        return;
    for (b = 1; b < elem_size; b++)
        same &= v[b] == v[0];
    if (same) {
        memset(yb, v[0], (size_t)(count * elem_size));
        return;
    }
    fc_copy_run_(yb, elem_size, v, 0, count, elem_size);
}

FC_INLINE void fc_pad_nd(void *y, const void *x, int rank, const long *out_dims,
                         const long *x_strides, const long *const *src_index, const void *fill,
                         int elem_size) {
    unsigned char *yb = (unsigned char *)y;
    const unsigned char *xb = (const unsigned char *)x;
    long cnt[FC_COPY_MAX_RANK];
    /* off[d], pad[d]: byte offset into x and padding flag from axes 0 .. d-1 */
    long off[FC_COPY_MAX_RANK];
    int pad[FC_COPY_MAX_RANK];
    const long es = elem_size;
    long n, t;
    int d, last = rank - 1;
    if (rank < 0 || rank > FC_COPY_MAX_RANK || !fc_copy_size_ok_(elem_size))
        return;
    if (rank == 0) {
        memcpy(yb, xb, (size_t)es);
        return;
    }
    for (d = 0; d < rank; d++) {
        if (out_dims[d] <= 0)
            return;
        cnt[d] = 0;
    }
    n = out_dims[last];
    off[0] = 0;
    pad[0] = 0;
    d = 0; /* the prefix is valid for axes below d */
    for (;;) {
        const long *si = src_index[last];
        for (; d < last; d++) {
            const long s = src_index[d][cnt[d]];
            pad[d + 1] = pad[d] || s < 0;
            off[d + 1] = off[d] + (s < 0 ? 0 : s * x_strides[d] * es);
        }
        if (pad[last]) {
            fc_fill(yb, n, fill, elem_size);
        } else {
            for (t = 0; t < n; t++)
                memcpy(yb + t * es, si[t] < 0 ? (const unsigned char *)fill
                                              : xb + off[last] + si[t] * x_strides[last] * es,
                       (size_t)es);
        }
        yb += n * es;
        for (d = last - 1; d >= 0; d--) {
            if (++cnt[d] < out_dims[d])
                break;
            cnt[d] = 0;
        }
        if (d < 0)
            return;
    }
}

#endif /* FLOWC_KERNELS_COPY_H */
