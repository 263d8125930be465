/* Tiled products on tensor cores (--precision tf32, bf16, fp16): the problems of gemm.cuh
 * (matmul, gemm, implicit-GEMM convolution, its weight gradient) read as float, rounded to the
 * tensor cores' input type in shared memory, multiplied by warp matrix operations (wmma) with
 * float accumulators. A block of 8 warps computes a 64 x 64 tile: warp w the 16 rows
 * 16 (w / 2) and the 32 columns 32 (w % 2), as two 16 x 16 fragments; slabs of k of 16; the
 * sums go through shared memory to the problem's store (bias, alpha, beta, layout). */
#ifndef FC_CUDA_MMA_CUH
#define FC_CUDA_MMA_CUH

#include "cuda/gemm.cuh"

#ifdef FC_CUDA_SIM
#include "cuda/sim_wmma.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#endif

/* Tensor-core input kinds: the type staged in shared memory, the fragment type, k of one op. */
struct fc_cu_tc_f16 {
    typedef __half elem;
    typedef __half frag;
    enum { K = 16 };
    static __device__ inline elem from(float v) { return __float2half(v); }
    template <class F>
    static __device__ inline void round(F &) {}
};
struct fc_cu_tc_bf16 {
    typedef __nv_bfloat16 elem;
    typedef __nv_bfloat16 frag;
    enum { K = 16 };
    static __device__ inline elem from(float v) { return __float2bfloat16(v); }
    template <class F>
    static __device__ inline void round(F &) {}
};
struct fc_cu_tc_tf32 {
    typedef float elem;
    typedef nvcuda::wmma::precision::tf32 frag;
    enum { K = 8 };
    static __device__ inline elem from(float v) { return v; }
    template <class F>
    static __device__ inline void round(F &f) {
        for (int t = 0; t < f.num_elements; t++) f.x[t] = nvcuda::wmma::__float_to_tf32(f.x[t]);
    }
};

/* A problem P and a kind TC, as one template argument (a kernel name in FC_LAUNCH takes no comma). */
template <class P, class TC>
struct fc_cu_tc {
    typedef P problem;
    typedef TC kind;
};

template <class PT>
__global__ void __launch_bounds__(256) fc_cu_tiled_tc(typename PT::problem p) {
    using namespace nvcuda;
    typedef typename PT::problem P;
    typedef typename PT::kind TC;
    typedef typename TC::elem E;
    __shared__ __align__(32) E as[FC_CU_TM][FC_CU_TK + 8];
    __shared__ __align__(32) E bs[FC_CU_TK][FC_CU_TN + 8];
    __shared__ __align__(32) float cs[FC_CU_TM][FC_CU_TN + 4];
    const int tid = (int)threadIdx.x, warp = tid / 32, wr = warp / 2, wc = warp % 2;
    const long i0 = (long)blockIdx.y * FC_CU_TM, j0 = (long)blockIdx.x * FC_CU_TN;
    for (long z = blockIdx.z; z < p.batches; z += gridDim.z) {
        const P q = p.at(z);
        wmma::fragment<wmma::accumulator, 16, 16, TC::K, float> acc[2];
        wmma::fill_fragment(acc[0], 0.0f);
        wmma::fill_fragment(acc[1], 0.0f);
        for (long p0 = 0; p0 < q.k; p0 += FC_CU_TK) {
            for (int l = 0; l < 4; ++l) {
                const int e = tid + 256 * l;
                const int row = e / FC_CU_TK, kk = e % FC_CU_TK;
                const long i = i0 + row, pa = p0 + kk;
                as[row][kk] = TC::from(i < q.m && pa < q.k ? (float)q.a(i, pa) : 0.0f);
                const int kb = e / FC_CU_TN, col = e % FC_CU_TN;
                const long j = j0 + col, pb = p0 + kb;
                bs[kb][col] = TC::from(j < q.n && pb < q.k ? (float)q.b(pb, j) : 0.0f);
            }
            __syncthreads();
            for (int kk = 0; kk < FC_CU_TK; kk += TC::K) {
                wmma::fragment<wmma::matrix_a, 16, 16, TC::K, typename TC::frag, wmma::row_major> fa;
                wmma::load_matrix_sync(fa, &as[16 * wr][kk], FC_CU_TK + 8);
                TC::round(fa);
                for (int c = 0; c < 2; ++c) {
                    wmma::fragment<wmma::matrix_b, 16, 16, TC::K, typename TC::frag, wmma::row_major> fb;
                    wmma::load_matrix_sync(fb, &bs[kk][32 * wc + 16 * c], FC_CU_TN + 8);
                    TC::round(fb);
                    wmma::mma_sync(acc[c], fa, fb, acc[c]);
                }
            }
            __syncthreads();
        }
        for (int c = 0; c < 2; ++c)
            wmma::store_matrix_sync(&cs[16 * wr][32 * wc + 16 * c], acc[c], FC_CU_TN + 4, wmma::mem_row_major);
        __syncthreads();
        for (int e = tid; e < FC_CU_TM * FC_CU_TN; e += 256) {
            const long i = i0 + e / FC_CU_TN, j = j0 + e % FC_CU_TN;
            if (i < q.m && j < q.n) q.store(i, j, cs[e / FC_CU_TN][e % FC_CU_TN]);
        }
        __syncthreads();
    }
}

#endif /* FC_CUDA_MMA_CUH */
