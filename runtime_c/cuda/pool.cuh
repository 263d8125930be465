/* Max and average pooling on the GPU, direct: one thread per output element, its window read
 * from the input (runtime_c/kernels/pool.h's geometry, spans and divisors, so the windows,
 * the NaN rule and the counts are the C kernels'). */
#ifndef FC_CUDA_POOL_CUH
#define FC_CUDA_POOL_CUH

#include "cuda/fc_cuda.h"
#include "kernels/pool.h"

template <class T>
__global__ void __launch_bounds__(FC_CU_BLOCK) fc_cu_pool(const T *x, T *y, fc_pool_geom g, int is_max, long count) {
    typedef typename fc_cu_acc<T>::type A;
    const long *in = g.in, *s = g.stride, *p = g.pad, *d = g.dil;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const long o2 = i % g.out[2], o1 = i / g.out[2] % g.out[1], o0 = i / (g.out[2] * g.out[1]) % g.out[0];
        const T *xp = x + i / (g.out[0] * g.out[1] * g.out[2]) * (in[0] * in[1] * in[2]);
        long a0, e0, a1, e1, a2, e2;
        fc_pool_span(&g, 0, o0, &a0, &e0);
        fc_pool_span(&g, 1, o1, &a1, &e1);
        fc_pool_span(&g, 2, o2, &a2, &e2);
        A acc = is_max ? (A)-HUGE_VAL : (A)0;
        for (long t0 = a0; t0 < e0; t0++) {
            const long i0 = o0 * s[0] - p[0] + t0 * d[0];
            for (long t1 = a1; t1 < e1; t1++) {
                const long row = (i0 * in[1] + o1 * s[1] - p[1] + t1 * d[1]) * in[2] + o2 * s[2] - p[2];
                for (long t2 = a2; t2 < e2; t2++) {
                    const A v = fc_cu_ld(xp[row + t2 * d[2]]);
                    if (!is_max)
                        acc += v;
                    else if (v > acc || v != v)
                        acc = v; /* once NaN, nothing compares greater */
                }
            }
        }
        if (!is_max) acc /= (A)(fc_pool_count(&g, 0, o0) * fc_pool_count(&g, 1, o1) * fc_pool_count(&g, 2, o2));
        fc_cu_st(y + i, acc);
    }
}

#endif /* FC_CUDA_POOL_CUH */
