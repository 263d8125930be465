/* The CPU simulator's stand-ins for CUDA's half and bfloat16 types and the warp matrix
 * (nvcuda::wmma) API, for runtime_c/cuda/mma.cuh: every thread of a warp holds the whole
 * fragment (CUDA spreads it over the lanes in an unspecified order), so loads, products and
 * stores compute the same values as a warp does, with the inputs rounded to the fragment's
 * type and the sums in float. */
#ifndef FC_CUDA_SIM_WMMA_H
#define FC_CUDA_SIM_WMMA_H

#include <type_traits>

#include "flowc_rt.h"

struct __half {
    uint16_t bits;
};
inline __half __float2half(float v) { return __half{fc_f2h(v)}; }
inline float __half2float(__half h) { return fc_h2f(h.bits); }

struct __nv_bfloat16 {
    uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16(float v) { /* to nearest even; NaN stays NaN */
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    if ((b & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(uint16_t)((b >> 16) | 0x40u)};
    b += 0x7fffu + ((b >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(b >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t b = (uint32_t)h.bits << 16;
    float v;
    memcpy(&v, &b, sizeof v);
    return v;
}

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    enum {
        rows = std::is_same<Use, matrix_b>::value ? K : M,
        cols = std::is_same<Use, matrix_a>::value ? K : N,
        num_elements = rows * cols
    };
    float x[num_elements];
};

inline float fc_sim_value(float v) { return v; }
inline float fc_sim_value(__half v) { return __half2float(v); }
inline float fc_sim_value(__nv_bfloat16 v) { return __bfloat162float(v); }

inline float __float_to_tf32(float v) { /* 10 mantissa bits, to nearest (ties away) */
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    if ((b & 0x7f800000u) != 0x7f800000u) b = (b + 0x1000u) & ~0x1fffu;
    memcpy(&v, &b, sizeof v);
    return v;
}

template <class U, int M, int N, int K, class T, class L, class S>
inline void load_matrix_sync(fragment<U, M, N, K, T, L> &f, const S *p, unsigned ldm) {
    typedef fragment<U, M, N, K, T, L> F;
    for (int r = 0; r < F::rows; ++r)
        for (int c = 0; c < F::cols; ++c) f.x[r * F::cols + c] = fc_sim_value(p[r * ldm + c]);
}
template <int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<accumulator, M, N, K, T, L> &f, float v) {
    for (float &e : f.x) e = v;
}
template <int M, int N, int K, class TA, class LA, class TB, class LB, class T, class L>
inline void mma_sync(fragment<accumulator, M, N, K, T, L> &d, const fragment<matrix_a, M, N, K, TA, LA> &a,
                     const fragment<matrix_b, M, N, K, TB, LB> &b, const fragment<accumulator, M, N, K, T, L> &c) {
    float out[M * N];
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float s = c.x[i * N + j];
            for (int k = 0; k < K; ++k) s += a.x[i * K + k] * b.x[k * N + j];
            out[i * N + j] = s;
        }
    memcpy(d.x, out, sizeof out);
}
template <int M, int N, int K, class T, class L>
inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, T, L> &f, unsigned ldm, layout_t) {
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) p[i * ldm + j] = f.x[i * N + j];
}
}  // namespace wmma
}  // namespace nvcuda

#define __align__(n) __attribute__((aligned(n)))

#endif /* FC_CUDA_SIM_WMMA_H */
