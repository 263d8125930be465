/* flowc CUDA runtime: what every generated .cu file includes besides runtime_c's kernels.
 *
 * The kernels of runtime_c/kernels/ are compiled for the device too (flowc_rt.h's FC_DEVICE):
 * a step with no kernel of its own here runs its C body, one CUDA thread per unit of the
 * step's split (an element, a row, a plane), or on one thread when it has no split.
 */
#ifndef FC_CUDA_H
#define FC_CUDA_H

#ifndef FC_CUDA_SIM
#include <cuda_runtime.h>
/* kernel<<<grid, block, 0, stream>>>(args): one spelling for nvcc and for the host simulator */
#define FC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#endif

#include "flowc_rt.h"

#define FC_CU_BLOCK 256 /* threads of a block of the per-unit kernels */

/* A run's first failure (an index out of range, integer division by zero, ...): one word of
 * device memory, kept by its first writer, read and cleared by <model>_wait. */
static __device__ inline void fc_cu_fail(int *status, int s) {
    if (s != FC_OK) atomicCAS(status, 0, s);
}

/* Blocks of FC_CU_BLOCK threads that cover ``units`` units (at least one block). */
static inline unsigned fc_cu_blocks(long units) {
    long b = (units + FC_CU_BLOCK - 1) / FC_CU_BLOCK;
    return (unsigned)(b > 0 ? b : 1);
}

/* Blocks for a grid-stride loop over ``count`` items: at most 2^20 blocks. */
static inline unsigned fc_cu_blocks_capped(long count) {
    long b = (count + FC_CU_BLOCK - 1) / FC_CU_BLOCK;
    return (unsigned)(b < 1 ? 1 : b > (1L << 20) ? (1L << 20) : b);
}

/* Storage <-> compute for the device kernels of this folder (float16 computes in float). */
FC_INLINE float fc_cu_ld(float v) { return v; }
FC_INLINE double fc_cu_ld(double v) { return v; }
FC_INLINE float fc_cu_ld(fc_f16 v) { return fc_h2f(v); }
FC_INLINE void fc_cu_st(float *p, float v) { *p = v; }
FC_INLINE void fc_cu_st(double *p, double v) { *p = v; }
FC_INLINE void fc_cu_st(fc_f16 *p, float v) { *p = fc_f2h(v); }

template <class T>
struct fc_cu_acc {
    typedef float type;
};
template <>
struct fc_cu_acc<double> {
    typedef double type;
};

FC_INLINE float fc_cu_exp(float v) { return expf(v); }
FC_INLINE double fc_cu_exp(double v) { return exp(v); }
FC_INLINE float fc_cu_log(float v) { return logf(v); }
FC_INLINE double fc_cu_log(double v) { return log(v); }
FC_INLINE float fc_cu_sqrt(float v) { return sqrtf(v); }
FC_INLINE double fc_cu_sqrt(double v) { return sqrt(v); }

/* Sum, maximum and minimum over the 32 lanes of a warp, every lane getting the result (a NaN
 * wins the maximum and the minimum, as numpy's). Every lane of the warp must call them. */
template <class A>
__device__ inline A fc_cu_warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <class A>
__device__ inline A fc_cu_warp_max(A v) {
    for (int o = 16; o > 0; o >>= 1) {
        const A u = __shfl_xor_sync(0xffffffffu, v, o);
        if (u > v || u != u) v = u;
    }
    return v;
}

template <class A>
__device__ inline A fc_cu_warp_min(A v) {
    for (int o = 16; o > 0; o >>= 1) {
        const A u = __shfl_xor_sync(0xffffffffu, v, o);
        if (u < v || u != u) v = u;
    }
    return v;
}

#endif /* FC_CUDA_H */
