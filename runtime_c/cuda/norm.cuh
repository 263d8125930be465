/* Softmax, log-softmax, layer norm and reductions on the GPU: one warp per row, its lanes striding along
 * the row, the row's maximum and sums combined with warp shuffles (fc_cu_warp_max/_sum), the
 * arithmetic in float (double for float64) as runtime_c/kernels/norm.h's. A block of 256
 * threads takes 8 rows at a time; the rows loop over the grid. */
#ifndef FC_CUDA_NORM_CUH
#define FC_CUDA_NORM_CUH

#include "cuda/fc_cuda.h"

#define FC_CU_ROWS_PER_BLOCK (FC_CU_BLOCK / 32)

static inline unsigned fc_cu_row_blocks(long rows) {
    long b = (rows + FC_CU_ROWS_PER_BLOCK - 1) / FC_CU_ROWS_PER_BLOCK;
    return (unsigned)(b < 1 ? 1 : b > (1L << 20) ? (1L << 20) : b);
}

/* Rows (o, i) of x viewed as (outer, len, inner): row r = o * inner + i, elements stride inner. */
template <class T>
__global__ void __launch_bounds__(FC_CU_BLOCK) fc_cu_softmax(const T *x, T *y, long rows, long len, long inner,
                                                             int log_out) {
    typedef typename fc_cu_acc<T>::type A;
    const int lane = (int)(threadIdx.x & 31);
    const long warps = (long)gridDim.x * FC_CU_ROWS_PER_BLOCK;
    for (long r = (long)blockIdx.x * FC_CU_ROWS_PER_BLOCK + threadIdx.x / 32; r < rows; r += warps) {
        const long base = r / inner * len * inner + r % inner;
        A m = (A)-HUGE_VAL, sum = 0;
        for (long l = lane; l < len; l += 32) {
            const A v = fc_cu_ld(x[base + l * inner]);
            if (v > m || v != v) m = v;
        }
        m = fc_cu_warp_max(m);
        for (long l = lane; l < len; l += 32) sum += fc_cu_exp(fc_cu_ld(x[base + l * inner]) - m);
        sum = fc_cu_warp_sum(sum);
        const A ls = fc_cu_log(sum);
        for (long l = lane; l < len; l += 32) {
            const A d = fc_cu_ld(x[base + l * inner]) - m;
            fc_cu_st(y + base + l * inner, log_out ? d - ls : fc_cu_exp(d) / sum);
        }
    }
}

/* Rows of n contiguous elements: (x - mean) / sqrt(variance + eps) * scale (+ bias). */
template <class T>
__global__ void __launch_bounds__(FC_CU_BLOCK) fc_cu_layer_norm(const T *x, const T *scale, const T *bias, T *y,
                                                                long rows, long n, double eps) {
    typedef typename fc_cu_acc<T>::type A;
    const int lane = (int)(threadIdx.x & 31);
    const long warps = (long)gridDim.x * FC_CU_ROWS_PER_BLOCK;
    for (long r = (long)blockIdx.x * FC_CU_ROWS_PER_BLOCK + threadIdx.x / 32; r < rows; r += warps) {
        const T *xr = x + r * n;
        A sum = 0, sq = 0;
        for (long i = lane; i < n; i += 32) sum += fc_cu_ld(xr[i]);
        const A mu = fc_cu_warp_sum(sum) / (A)n;
        for (long i = lane; i < n; i += 32) {
            const A d = fc_cu_ld(xr[i]) - mu;
            sq += d * d;
        }
        const A den = fc_cu_sqrt(fc_cu_warp_sum(sq) / (A)n + (A)eps);
        for (long i = lane; i < n; i += 32) {
            A v = (fc_cu_ld(xr[i]) - mu) / den * fc_cu_ld(scale[i]);
            if (bias) v += fc_cu_ld(bias[i]);
            fc_cu_st(y + r * n + i, v);
        }
    }
}

/* Sums, means, maxima and minima of x viewed as (outer, len, inner) along len: a warp an output
 * (o, i), its lanes striding along the reduced run (op: 0 sum, 1 mean, 2 max, 3 min). */
template <class T>
__global__ void __launch_bounds__(FC_CU_BLOCK) fc_cu_reduce(const T *x, T *y, long rows, long len, long inner,
                                                            int op) {
    typedef typename fc_cu_acc<T>::type A;
    const int lane = (int)(threadIdx.x & 31);
    const long warps = (long)gridDim.x * FC_CU_ROWS_PER_BLOCK;
    for (long r = (long)blockIdx.x * FC_CU_ROWS_PER_BLOCK + threadIdx.x / 32; r < rows; r += warps) {
        const long base = r / inner * len * inner + r % inner;
        A acc = op == 2 ? (A)-HUGE_VAL : op == 3 ? (A)HUGE_VAL : (A)0;
        for (long l = lane; l < len; l += 32) {
            const A v = fc_cu_ld(x[base + l * inner]);
            if (op < 2)
                acc += v;
            else if (op == 2 ? v > acc || (v != v && acc == acc) : v < acc || (v != v && acc == acc))
                acc = v; /* a NaN replaces a number and is never replaced */
        }
        acc = op < 2 ? fc_cu_warp_sum(acc) : op == 2 ? fc_cu_warp_max(acc) : fc_cu_warp_min(acc);
        if (lane == 0) fc_cu_st(y + r, op == 1 ? acc / (A)len : acc);
    }
}

#endif /* FC_CUDA_NORM_CUH */
