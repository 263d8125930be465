/* The float16 wire of a data-parallel training step's compressed gradient buckets
 * (templates/mpi/ops/allreduce_start.c.j2 and allreduce_wait.c.j2 with wire float16): packing a
 * bucket's float32 gradients into float16 bits, the MPI user operation that sums two such
 * buffers (each pair added in float32 and rounded to the nearest half: commutative, so every
 * rank gets the same sum) and unpacking with the mean's scale. Each runs on the vector unit's
 * conversions where the build has them (x86 F16C, 16 or 8 lanes; AArch64 NEON, 4 lanes), which
 * round to nearest even as fc_f2h does, else on fc_f2h / fc_h2f: the same bits either way.
 * Needs MPI and mpi/fc_mpi.h. */
#ifndef FC_MPI_ALLREDUCE_H
#define FC_MPI_ALLREDUCE_H

#include <mpi.h>

#include "fc_mpi.h"
#include "flowc_rt.h"

#if defined(__F16C__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define FC_F16_LANES 8
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define FC_F16_LANES 4
#else
#define FC_F16_LANES 1
#endif

/* dst[i] = float16 of src[i] */
FC_INLINE void fc_f2h_n(fc_f16 *dst, const float *src, long n) {
    long i = 0;
#if FC_F16_LANES == 8
#ifdef __AVX512F__
    for (; i < (n & ~15L); i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < (n & ~7L); i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#elif FC_F16_LANES == 4
    for (; i < (n & ~3L); i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
#endif
    for (; i < n; ++i) dst[i] = fc_f2h(src[i]);
}

/* dst[i] = float of src[i], times scale */
FC_INLINE void fc_h2f_scale_n(float *dst, const fc_f16 *src, long n, float scale) {
    long i = 0;
#if FC_F16_LANES == 8
#ifdef __AVX512F__
    const __m512 s16 = _mm512_set1_ps(scale);
    for (; i < (n & ~15L); i += 16)
        _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))), s16));
#endif
    {
        const __m256 s8 = _mm256_set1_ps(scale);
        for (; i < (n & ~7L); i += 8)
            _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))), s8));
    }
#elif FC_F16_LANES == 4
    {
        const float32x4_t s4 = vdupq_n_f32(scale);
        for (; i < (n & ~3L); i += 4)
            vst1q_f32(dst + i, vmulq_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))), s4));
    }
#endif
    for (; i < n; ++i) dst[i] = fc_h2f(src[i]) * scale;
}

FC_INLINE void fc_sum_f16(void *in, void *inout, int *len, MPI_Datatype *type) {
    const fc_f16 *a = (const fc_f16 *)in;
    fc_f16 *b = (fc_f16 *)inout;
    int i = 0, n = *len;
    (void)type;
#if FC_F16_LANES == 8
    for (; i < (n & ~7); i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
        _mm_storeu_si128((__m128i *)(b + i), _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT));
    }
#elif FC_F16_LANES == 4
    for (; i < (n & ~3); i += 4) {
        float32x4_t x = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(a + i)));
        float32x4_t y = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(b + i)));
        vst1_u16(b + i, vreinterpret_u16_f16(vcvt_f16_f32(vaddq_f32(x, y))));
    }
#endif
    for (; i < n; ++i) b[i] = fc_f2h(fc_h2f(a[i]) + fc_h2f(b[i]));
}

/* Post the float16 sum of buf: the operation is freed at once (MPI completes the pending
 * reduction with it), or, for a hierarchical reduction (whose later steps fc_mpi_wait posts), kept
 * until then. */
FC_INLINE int fc_iallreduce_f16(fc_mpi *m, fc_f16 *buf, long count, MPI_Request *req, const char *what) {
    static MPI_Op kept = MPI_OP_NULL;
    MPI_Op op;
    if (m->node != MPI_COMM_NULL) {
        if (kept == MPI_OP_NULL && MPI_Op_create(fc_sum_f16, 1, &kept) != MPI_SUCCESS)
            fc_mpi_abort(m, "MPI_Op_create of the float16 sum failed");
        return fc_mpi_iallreduce(m, buf, count, MPI_UINT16_T, kept, req, what);
    }
    if (MPI_Op_create(fc_sum_f16, 1, &op) != MPI_SUCCESS) fc_mpi_abort(m, "MPI_Op_create of the float16 sum failed");
    fc_mpi_iallreduce(m, buf, count, MPI_UINT16_T, op, req, what);
    if (MPI_Op_free(&op) != MPI_SUCCESS) fc_mpi_abort(m, "MPI_Op_free of the float16 sum failed");
    return 0;
}

#endif /* FC_MPI_ALLREDUCE_H */
