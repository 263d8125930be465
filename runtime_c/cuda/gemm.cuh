/* Tiled products on the GPU: one kernel for matmul, gemm and convolution (implicit GEMM).
 *
 * A problem P says what the product is: sizes m x n x k per batch, ``batches``, and for one
 * batch (``at(z)``) how to read A(i, p) and B(p, j), zero outside, and how to store the sum of
 * output (i, j). The kernel computes a 64 x 64 tile of outputs per block of 256 threads, each
 * thread a 4 x 4 register tile (rows ty + 16 r, columns tx + 16 c), over slabs of k of 16
 * staged in shared memory; each output's sum runs over p in order, as the C kernels' do.
 */
#ifndef FC_CUDA_GEMM_CUH
#define FC_CUDA_GEMM_CUH

#include "cuda/fc_cuda.h"

#define FC_CU_TM 64
#define FC_CU_TN 64
#define FC_CU_TK 16

template <class P>
__global__ void __launch_bounds__(256) fc_cu_tiled(P p) {
    typedef typename P::acc A;
    __shared__ A as[FC_CU_TK][FC_CU_TM + 1];
    __shared__ A bs[FC_CU_TK][FC_CU_TN + 1];
    const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
    const long i0 = (long)blockIdx.y * FC_CU_TM, j0 = (long)blockIdx.x * FC_CU_TN;
    for (long z = blockIdx.z; z < p.batches; z += gridDim.z) {
        const P q = p.at(z);
        A acc[4][4];
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 4; ++c) acc[r][c] = 0;
        for (long p0 = 0; p0 < q.k; p0 += FC_CU_TK) {
            for (int l = 0; l < 4; ++l) {
                const int e = tid + 256 * l;
                const int row = e / FC_CU_TK, kk = e % FC_CU_TK;
                const long i = i0 + row, pa = p0 + kk;
                as[kk][row] = i < q.m && pa < q.k ? q.a(i, pa) : (A)0;
                const int kb = e / FC_CU_TN, col = e % FC_CU_TN;
                const long j = j0 + col, pb = p0 + kb;
                bs[kb][col] = j < q.n && pb < q.k ? q.b(pb, j) : (A)0;
            }
            __syncthreads();
            for (int kk = 0; kk < FC_CU_TK; ++kk) {
                A av[4], bv[4];
                for (int r = 0; r < 4; ++r) av[r] = as[kk][ty + 16 * r];
                for (int c = 0; c < 4; ++c) bv[c] = bs[kk][tx + 16 * c];
                for (int r = 0; r < 4; ++r)
                    for (int c = 0; c < 4; ++c) acc[r][c] += av[r] * bv[c];
            }
            __syncthreads();
        }
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 4; ++c) {
                const long i = i0 + ty + 16 * r, j = j0 + tx + 16 * c;
                if (i < q.m && j < q.n) q.store(i, j, acc[r][c]);
            }
    }
}

/* The same problems computed directly, a thread an output (batch z, row i, column j), the sum
 * over p in a register: for products too narrow for 64 x 64 tiles, such as a depthwise
 * convolution (a group of one input channel and one or a few output channels, k the taps). */
template <class P>
__global__ void __launch_bounds__(FC_CU_BLOCK) fc_cu_direct(P p, long count) {
    typedef typename P::acc A;
    const long stride = (long)gridDim.x * blockDim.x;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += stride) {
        const long j = e % p.n, i = e / p.n % p.m, z = e / (p.n * p.m);
        const P q = p.at(z);
        A acc = 0;
        for (long k = 0; k < q.k; ++k) acc += q.a(i, k) * q.b(k, j);
        q.store(i, j, acc);
    }
}

/* The grid of fc_cu_tiled for a problem (batches past 65535 loop inside the kernel). */
static inline dim3 fc_cu_tiled_grid(long m, long n, long batches) {
    return dim3((unsigned)((n + FC_CU_TN - 1) / FC_CU_TN), (unsigned)((m + FC_CU_TM - 1) / FC_CU_TM),
                (unsigned)(batches < 65535 ? (batches > 0 ? batches : 1) : 65535));
}

/* Strided batched product y = alpha * A B + beta * C (matmul and gemm). Batch axes, at most 4,
 * innermost first: batch z's offsets of a, b and y. */
template <class T>
struct fc_cu_matmul {
    typedef typename fc_cu_acc<T>::type acc;
    long m, n, k, batches;
    const T *pa;
    long a_rs, a_cs;
    const T *pb;
    long b_rs, b_cs;
    T *py;
    const T *pc;
    long c_rs, c_cs;
    double alpha, beta;
    int axes;
    long size[4], sa[4], sb[4], sy[4];

    FC_DEVICE fc_cu_matmul at(long z) const {
        fc_cu_matmul q = *this;
        for (int d = 0; d < axes; ++d) {
            const long i = z % size[d];
            z /= size[d];
            q.pa += i * sa[d];
            q.pb += i * sb[d];
            q.py += i * sy[d];
        }
        return q;
    }
    FC_DEVICE acc a(long i, long p) const { return fc_cu_ld(pa[i * a_rs + p * a_cs]); }
    FC_DEVICE acc b(long p, long j) const { return fc_cu_ld(pb[p * b_rs + j * b_cs]); }
    FC_DEVICE void store(long i, long j, acc v) const {
        if (alpha != 1) v *= (acc)alpha;
        if (pc) {
            const acc cv = fc_cu_ld(pc[i * c_rs + j * c_cs]);
            v += beta != 1 ? (acc)beta * cv : cv;
        }
        fc_cu_st(py + i * n + j, v);
    }
};

/* im2col's element without im2col: x at (image, output position) ``row`` and (input channel of
 * group g, tap) ``col`` of a convolution, 0 in the padding. Three spatial axes. */
template <class T>
FC_DEVICE typename fc_cu_acc<T>::type fc_cu_conv_tap(const T *x, long row, long col, long g, long groups, long c,
                                                     const long *in, const long *kr, const long *out,
                                                     const long *stride, const long *pad, const long *dil) {
    const long taps = kr[0] * kr[1] * kr[2], opos = out[0] * out[1] * out[2];
    const long img = row / opos, pos = row % opos, ci = col / taps, tap = col % taps;
    const long o2 = pos % out[2], o1 = pos / out[2] % out[1], o0 = pos / (out[2] * out[1]);
    const long t2 = tap % kr[2], t1 = tap / kr[2] % kr[1], t0 = tap / (kr[2] * kr[1]);
    const long s0 = o0 * stride[0] - pad[0] + t0 * dil[0];
    const long s1 = o1 * stride[1] - pad[1] + t1 * dil[1];
    const long s2 = o2 * stride[2] - pad[2] + t2 * dil[2];
    if (s0 < 0 || s0 >= in[0] || s1 < 0 || s1 >= in[1] || s2 < 0 || s2 >= in[2]) return 0;
    return fc_cu_ld(x[((img * c + g * (c / groups) + ci) * in[0] + s0) * in[1] * in[2] + s1 * in[2] + s2]);
}

/* Convolution as an implicit GEMM, one batch per group: rows i are (image, output position),
 * columns j the group's output channels, p runs over (input channel of the group, tap). Three
 * spatial axes, outer ones of size 1 for 1-D and 2-D. */
template <class T>
struct fc_cu_conv {
    typedef typename fc_cu_acc<T>::type acc;
    long m, n, k, batches;
    const T *x, *w, *bias;
    T *y;
    long c, mo;   /* input and output channels of the whole convolution */
    long g;       /* this batch's group */
    long in[3], kr[3], out[3], stride[3], pad[3], dil[3];

    FC_DEVICE fc_cu_conv at(long z) const {
        fc_cu_conv q = *this;
        q.g = z;
        return q;
    }
    FC_DEVICE acc a(long i, long p) const { return fc_cu_conv_tap(x, i, p, g, batches, c, in, kr, out, stride, pad, dil); }
    FC_DEVICE acc b(long p, long j) const { return fc_cu_ld(w[(g * n + j) * k + p]); }
    FC_DEVICE void store(long i, long j, acc v) const {
        const long opos = out[0] * out[1] * out[2], img = i / opos, pos = i % opos, oc = g * n + j;
        if (bias) v += fc_cu_ld(bias[oc]);
        fc_cu_st(y + (img * mo + oc) * opos + pos, v);
    }
};

/* The weight gradient of a convolution, one batch per group: rows i are the group's output
 * channels, columns j (input channel of the group, tap), p runs over (image, output position):
 * dw[oc, j] = sum_p gy[image, oc, position] * x[image, channel, the tap's input position]. */
template <class T>
struct fc_cu_conv_wgrad {
    typedef typename fc_cu_acc<T>::type acc;
    long m, n, k, batches;
    const T *x, *gy;
    T *dw;
    long c, mo; /* input channels of x, output channels of gy */
    long g;
    long in[3], kr[3], out[3], stride[3], pad[3], dil[3];

    FC_DEVICE fc_cu_conv_wgrad at(long z) const {
        fc_cu_conv_wgrad q = *this;
        q.g = z;
        return q;
    }
    FC_DEVICE acc a(long i, long p) const {
        const long opos = out[0] * out[1] * out[2];
        return fc_cu_ld(gy[((p / opos) * mo + g * m + i) * opos + p % opos]);
    }
    FC_DEVICE acc b(long p, long j) const { return fc_cu_conv_tap(x, p, j, g, batches, c, in, kr, out, stride, pad, dil); }
    FC_DEVICE void store(long i, long j, acc v) const { fc_cu_st(dw + (g * m + i) * n + j, v); }
};

#endif /* FC_CUDA_GEMM_CUH */
