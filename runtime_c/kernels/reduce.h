/* Reductions over the middle axis of an (outer, len, inner) view; y is (outer, inner).
 *
 * fc_reduce_{sum,max,min,prod}_SFX(x, y, outer, len, inner)   floats and ints
 * fc_reduce_mean_SFX(x, y, outer, len, inner)                 floats
 * fc_argmax_SFX(x, y, outer, len, inner, select_last)         floats and ints, y is int64_t
 * fc_argmin_SFX(...)
 *
 * Sums, products and means accumulate in FC_ACC (float for f16 and f32; uint64_t for
 * integers, so overflow wraps as numpy's fixed-width results do). len may be 0 for sum
 * (gives 0) and prod (gives 1); max, min, mean, argmax and argmin need len >= 1 (with
 * len == 0 they write nothing). max and min propagate NaN like numpy; argmax and argmin
 * return the first NaN (the last one with select_last), otherwise the first extreme (the
 * last one on ties with select_last), which is numpy on a flipped axis.
 *
 * Loop order: blocks of up to FC_REDUCE_BLOCK inner positions hold their accumulators in
 * a local array while the len rows stream past, so the input is read contiguously whatever
 * the axis. y may alias x only when len == 1 or inner == 1.
 */
#ifndef FLOWC_KERNELS_REDUCE_H
#define FLOWC_KERNELS_REDUCE_H

#include "flowc_rt.h"

#define FC_REDUCE_BLOCK 64

/* The loop shared by every reduction: acc[b] starts at INIT, or at the first row when
 * FROM is 1; STEP(acc[b], v) folds in rows FROM .. len-1; OUT(acc[b]) is stored. Expects
 * x, y, outer, len, inner in scope and FC_T, FC_LD of the instantiated dtype. */
#define FC_REDUCE_LOOP_(ACC_T, INIT, FROM, STEP, OUT)                                        \
    do {                                                                                     \
        long o_, i0_, l_, b_;                                                                \
        for (o_ = 0; o_ < outer; o_++) {                                                     \
            for (i0_ = 0; i0_ < inner; i0_ += FC_REDUCE_BLOCK) {                             \
                ACC_T acc_[FC_REDUCE_BLOCK];                                                 \
                const long nb_ = inner - i0_ < FC_REDUCE_BLOCK ? inner - i0_ : FC_REDUCE_BLOCK; \
                const long base_ = o_ * len * inner + i0_;                                   \
                for (b_ = 0; b_ < nb_; b_++)                                                 \
                    acc_[b_] = (FROM) ? (ACC_T)FC_LD(x[base_ + b_]) : (ACC_T)(INIT);         \
                for (l_ = (FROM); l_ < len; l_++)                                            \
                    for (b_ = 0; b_ < nb_; b_++)                                             \
                        STEP(acc_[b_], FC_LD(x[base_ + l_ * inner + b_]));                   \
                for (b_ = 0; b_ < nb_; b_++)                                                 \
                    y[o_ * inner + i0_ + b_] = OUT(acc_[b_]);                                \
            }                                                                                \
        }                                                                                    \
    } while (0)

#define FC_INC "kernels/reduce.inc"
#define FC_WANT_FLOATS
#define FC_WANT_INTS
#include "kernels/instantiate.h"

#undef FC_REDUCE_LOOP_

/* float32 sum and mean over contiguous rows (inner == 1, e.g. a global average pool):
 * fc_reduce_{sum,mean}_rows_f32(x, y, outer, len). The generic loop keeps one running sum a
 * row, which the compiler may not vectorize (that would reorder the additions) and which
 * waits on every addition; here four vector accumulators take the row in a fixed order (the
 * same result on every run and thread count), then their lanes, then the tail. */
#include "kernels/vecf.h"

FC_VF_INLINE float fc_reduce_row_sum_f32_(const float *x, long len) {
    /* loops over counts, not `i + step <= len` (GCC's loop analysis misfires on those) */
    const long blocks = len / (4 * FC_VF_VL), vectors = len / FC_VF_VL;
    fc_vf a0 = FC_VF_SPLAT(0.0f), a1 = a0, a2 = a0, a3 = a0;
    long b, i;
    float s;
    for (b = 0; b < blocks; b++) {
        const float *p = x + b * 4 * FC_VF_VL;
        a0 += fc_vf_load(p);
        a1 += fc_vf_load(p + FC_VF_VL);
        a2 += fc_vf_load(p + 2 * FC_VF_VL);
        a3 += fc_vf_load(p + 3 * FC_VF_VL);
    }
    for (b = blocks * 4; b < vectors; b++)
        a0 += fc_vf_load(x + b * FC_VF_VL);
    s = fc_vf_sum((a0 + a1) + (a2 + a3));
    for (i = vectors * FC_VF_VL; i < len; i++)
        s += x[i];
    return s;
}

FC_VF_INLINE void fc_reduce_sum_rows_f32(const float *x, float *y, long outer, long len) {
    long o;
    for (o = 0; o < outer; o++)
        y[o] = fc_reduce_row_sum_f32_(x + o * len, len);
}

FC_VF_INLINE void fc_reduce_mean_rows_f32(const float *x, float *y, long outer, long len) {
    long o;
    for (o = 0; o < outer; o++)
        y[o] = fc_reduce_row_sum_f32_(x + o * len, len) / (float)len;
}

/* int8, uint8 and int16 sums widened to int32 (reduce_sum with dtype int32, an integer average
 * pool's): fc_reduce_sum_wide_{i8,u8,i16}(x, y, outer, len, inner), y int32_t. Each value is
 * added as it is, modulo 2**32 as numpy's int32 sum (exact for len below 2**23); no widened copy
 * of x is made. Rows (inner 1) sum in one running int32 the compiler vectorizes. */
#define FC_REDUCE_WIDE_(SFX, T)                                                                       \
    FC_INLINE void fc_reduce_sum_wide_##SFX(const T *x, int32_t *y, long outer, long len, long inner) { \
        long o, i0, l, b;                                                                            \
        if (inner == 1) {                                                                            \
            for (o = 0; o < outer; o++) {                                                            \
                const T *r = x + o * len;                                                            \
                uint32_t s = 0;                                                                      \
                for (l = 0; l < len; l++)                                                            \
                    s += (uint32_t)(int32_t)r[l];                                                    \
                y[o] = (int32_t)s;                                                                   \
            }                                                                                        \
            return;                                                                                  \
        }                                                                                            \
        for (o = 0; o < outer; o++)                                                                  \
            for (i0 = 0; i0 < inner; i0 += FC_REDUCE_BLOCK) {                                        \
                uint32_t acc[FC_REDUCE_BLOCK];                                                       \
                const long nb = inner - i0 < FC_REDUCE_BLOCK ? inner - i0 : FC_REDUCE_BLOCK;         \
                const T *r = x + o * len * inner + i0;                                               \
                for (b = 0; b < nb; b++)                                                             \
                    acc[b] = 0;                                                                      \
                for (l = 0; l < len; l++)                                                            \
                    for (b = 0; b < nb; b++)                                                         \
                        acc[b] += (uint32_t)(int32_t)r[l * inner + b];                               \
                for (b = 0; b < nb; b++)                                                             \
                    y[o * inner + i0 + b] = (int32_t)acc[b];                                         \
            }                                                                                        \
    }
FC_REDUCE_WIDE_(i8, int8_t)
FC_REDUCE_WIDE_(u8, uint8_t)
FC_REDUCE_WIDE_(i16, int16_t)
#undef FC_REDUCE_WIDE_

#endif /* FLOWC_KERNELS_REDUCE_H */
