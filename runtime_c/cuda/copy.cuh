/* Strided copies on the GPU: transpose, slice, expand, tile, bitcast, concat and split (the C
 * backend's copy plans, codegen/backends/c/layout.py copy_plan), one thread per element.
 * Element i of the view, its index vector over dims (last axis fastest), goes from
 * x[index . xs] to y[index . ys]; strides are in elements (of T, the element's size). */
#ifndef FC_CUDA_COPY_CUH
#define FC_CUDA_COPY_CUH

#include "cuda/fc_cuda.h"

#define FC_CU_COPY_RANK 8

struct fc_cu_view {
    int rank;
    long dims[FC_CU_COPY_RANK], ys[FC_CU_COPY_RANK], xs[FC_CU_COPY_RANK];
};

template <class T>
__global__ void __launch_bounds__(FC_CU_BLOCK) fc_cu_copy(T *y, const T *x, fc_cu_view v, long count) {
    const long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        long r = i, yo = 0, xo = 0;
        for (int d = v.rank - 1; d >= 0; --d) {
            const long c = r % v.dims[d];
            r /= v.dims[d];
            yo += c * v.ys[d];
            xo += c * v.xs[d];
        }
        y[yo] = x[xo];
    }
}


/* Gather along one axis, seen as (outer, dim, inner): y[o, j, :] = x[o, idx[j], :], one thread
 * an element of y (inner counted in elements of T). A negative index counts from the end; one
 * outside [-dim, dim) fails the run with FC_ERR_INDEX (its elements are written as zero). */
template <class T, class I>
__device__ inline void fc_cu_gather_at(T *y, const T *x, const I *idx, long i, long n_idx, long dim, long inner,
                               int *status) {
    const long in = i % inner, j = i / inner % n_idx, o = i / (inner * n_idx);
    long v = (long)idx[j];
    if (v < 0) v += dim;
    if (v < 0 || v >= dim) {
        fc_cu_fail(status, FC_ERR_INDEX);
        y[i] = T();
        return;
    }
    y[i] = x[(o * dim + v) * inner + in];
}

#define FC_CU_GATHER(name, I)                                                                           \
    template <class T>                                                                                  \
    __global__ void __launch_bounds__(FC_CU_BLOCK)                                                      \
        name(T *y, const T *x, const I *idx, long n_idx, long dim, long inner, long count, int *status) { \
        const long stride = (long)gridDim.x * blockDim.x;                                               \
        for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)              \
            fc_cu_gather_at(y, x, idx, i, n_idx, dim, inner, status);                                   \
    }
FC_CU_GATHER(fc_cu_gather_i64, int64_t)
FC_CU_GATHER(fc_cu_gather_i32, int32_t)

#endif /* FC_CUDA_COPY_CUH */
