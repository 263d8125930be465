/* Quantized elementwise add (graphdef/ops/quant.py ``qadd``, LiteRT's int8/uint8 ADD): each
 * operand less its zero point, times 2**left, requantized in fixed point (fc_qmul's double
 * rounding), the two summed, the sum requantized to the output, plus y_zero, clamped to
 * [lo, hi] - all in 32-bit arithmetic after one 64-bit product each (where the graph form of
 * the same arithmetic ran in int64: ~79 instructions an element on a Cortex-M). On Helium four
 * elements a pass: vqrdmulh (the doubled high half, rounded half up: fc_qmul's first step),
 * then vrshl after a negative lane's fixup (the shift rounded half away from zero). */
#ifndef FLOWC_KERNELS_QADD_H
#define FLOWC_KERNELS_QADD_H

#include "kernels/qconv.h"

typedef struct fc_qadd_params {
    int32_t a_zero, b_zero, y_zero, left;
    int32_t qa, ra, qb, rb, q, r; /* multipliers and right shifts (-shift, at most 31) */
    int32_t lo, hi;
} fc_qadd_params;

FC_QCONV_AI int32_t fc_qadd_one(int32_t a, int32_t b, const fc_qadd_params *p) {
    const int32_t sa = fc_qmul((a - p->a_zero) * (1 << p->left), p->qa, p->ra, 0);
    const int32_t sb = fc_qmul((b - p->b_zero) * (1 << p->left), p->qb, p->rb, 0);
    const int32_t v = fc_qmul(sa + sb, p->q, p->r, 0) + p->y_zero;
    return v < p->lo ? p->lo : v > p->hi ? p->hi : v;
}

#if FC_QCONV_MVE
/* four lanes of v times q * 2**(-31 - right), sh = -right in every lane (right < 31) */
FC_QCONV_AI int32x4_t fc_qadd_rq4(int32x4_t v, int32_t q, int32x4_t sh) {
    const int32x4_t h = vqrdmulhq_n_s32(v, q);
    return vrshlq_s32(vqaddq_s32(h, vshrq_n_s32(vandq_s32(h, sh), 31)), sh);
}
#endif

#define FC_QADD_DEF(SFX, T, LOAD, STORE)                                                                             \
    FC_INLINE void fc_qadd_##SFX(const T *FC_RESTRICT a, const T *FC_RESTRICT b, T *FC_RESTRICT y, long lo, long hi, \
                                 const fc_qadd_params *p) {                                                          \
        long i = lo;                                                                                                 \
        FC_QADD_VECTOR(LOAD, STORE)                                                                                  \
        for (; i < hi; ++i)                                                                                          \
            y[i] = (T)fc_qadd_one(a[i], b[i], p);                                                                    \
    }

#if FC_QCONV_MVE
#define FC_QADD_VECTOR(LOAD, STORE)                                                                                  \
    if (p->ra < 31 && p->rb < 31 && p->r < 31) {                                                                     \
        const int32x4_t sa = vdupq_n_s32(-p->ra), sb = vdupq_n_s32(-p->rb), sy = vdupq_n_s32(-p->r);                 \
        const int32x4_t vlo = vdupq_n_s32(p->lo), vhi = vdupq_n_s32(p->hi);                                          \
        for (; i < hi; i += 4) {                                                                                     \
            const mve_pred16_t pr = vctp32q((uint32_t)(hi - i));                                                     \
            const int32x4_t va = vshlq_r_s32(vsubq_n_s32(LOAD(a + i, pr), p->a_zero), p->left);                      \
            const int32x4_t vb = vshlq_r_s32(vsubq_n_s32(LOAD(b + i, pr), p->b_zero), p->left);                      \
            int32x4_t v = vaddq_s32(fc_qadd_rq4(va, p->qa, sa), fc_qadd_rq4(vb, p->qb, sb));                         \
            v = vminq_s32(vmaxq_s32(vaddq_n_s32(fc_qadd_rq4(v, p->q, sy), p->y_zero), vlo), vhi);                    \
            STORE(y + i, v, pr);                                                                                     \
        }                                                                                                            \
    }
#define FC_QADD_LD_I8(s, pr) vldrbq_z_s32((s), (pr))
#define FC_QADD_LD_U8(s, pr) vreinterpretq_s32_u32(vldrbq_z_u32((s), (pr)))
#define FC_QADD_ST_I8(d, v, pr) vstrbq_p_s32((d), (v), (pr))
#define FC_QADD_ST_U8(d, v, pr) vstrbq_p_u32((d), vreinterpretq_u32_s32(v), (pr))
#else
#define FC_QADD_VECTOR(LOAD, STORE)
#endif

FC_QADD_DEF(i8, int8_t, FC_QADD_LD_I8, FC_QADD_ST_I8)
FC_QADD_DEF(u8, uint8_t, FC_QADD_LD_U8, FC_QADD_ST_U8)

#endif /* FLOWC_KERNELS_QADD_H */
