/* Recurrent cells, float dtypes (f16, f32, f64): one LSTM or GRU time step as one call, the
 * ops lstm_cell and gru_cell of graphdef/ops/rnn.py (see there for the math). The input
 * projection of every time step is a gemm before the recurrence; a step adds the recurrent
 * product h @ r to its gate inputs and applies the gate activations, in FC_A (float for f16).
 *
 * fc_lstm_cell_SFX(gates, r, h, c, h_out, c_out, batch, hidden, acc)
 *     gates (batch, 4 hidden) in the order i, o, f, c; r (hidden, 4 hidden), row-major, so that
 *     a = gates + h @ r; h, c (batch, hidden) or NULL for the zero state (c NULL with h
 *     given is a zero c). c_out = sigmoid(a_f) * c + sigmoid(a_i) * tanh(a_c),
 *     h_out = sigmoid(a_o) * tanh(c_out).
 * fc_gru_cell_SFX(gates, r, rbh, h, h_out, batch, hidden, linear_before_reset, acc)
 *     gates (batch, 3 hidden) in the order z, r, h; r (hidden, 3 hidden); rbh (hidden);
 *     h (batch, hidden) or NULL. z, q = sigmoid(gates_zr + h @ r_zr);
 *     n = tanh(gates_h + (q * h) @ r_h + rbh), or with linear_before_reset
 *     tanh(gates_h + q * (h @ r_h + rbh)); h_out = (1 - z) * n + z * h.
 * acc: FC_RNN_SCRATCH(batch, hidden) elements of FC_A (step scratch).
 * h_out may alias h and c_out c (each element is written after the last read of its input).
 *
 * The recurrent product is the whole cost at small batch: every step reads all of r (192 KiB
 * for a GRU of hidden 128), from L2, so the loops are written to stream r once per step
 * (see fc_rnn_product_vec_f32 below and fc_rnn_accumulate_ in rnn.inc). The activations are
 * fc_sigmoid / fc_tanh of kernels/scalar.h (kernels/vmath.h for float: branch-free, so the
 * loops over the gate columns vectorize).
 */
#ifndef FLOWC_KERNELS_RNN_H
#define FLOWC_KERNELS_RNN_H

#include "flowc_rt.h"
#include "kernels/scalar.h"
#include "kernels/vecf.h"

/* Scratch elements (FC_A) of one call: the gate accumulators and two state rows per entry. */
#define FC_RNN_SCRATCH(batch, hidden) ((batch) * 5 * (hidden))

/* float32: acc[b * as + j] += sum_k hs[b * kn + k] * r[k * rs + j] for b < batch, j < n.
 * Columns in blocks of 8 fc_vf vectors (128 floats with AVX-512, 64 with AVX2, 32 with SSE
 * or NEON) held in registers over FC_RNN_KC rows of r at a time, so r is the only memory
 * traffic: each row's run of the block is contiguous, and the FC_RNN_KC rows (16 KiB at
 * most) stay in L1 while every batch entry uses them, so r comes from L2 once per step
 * whatever the batch (reading a whole block column per entry made batch 3 cost 3.2x batch 1).
 * Auto-vectorized loops cannot promise registers: GCC kept a local accumulator array on the
 * stack once the kernel was inlined into a model (1.3x slower than this on a GRU of hidden
 * 128). Columns past the last whole block go row by row in a loop GCC vectorizes. Each sum
 * runs in k order. */
#define FC_RNN_KC 32
FC_VF_INLINE void fc_rnn_product_vec_f32(float *FC_RESTRICT acc, long as, const float *FC_RESTRICT hs,
                                         const float *FC_RESTRICT r, long rs, long batch, long kn, long n) {
    const long bw = 8 * FC_VF_VL, full = n / bw * bw;
    long j0, k0, b, k, j;
    for (j0 = 0; j0 < full; j0 += bw) {
        for (k0 = 0; k0 < kn; k0 += FC_RNN_KC) {
            const long k1 = k0 + FC_RNN_KC < kn ? k0 + FC_RNN_KC : kn;
            for (b = 0; b < batch; b++) {
                float *s = acc + b * as + j0;
                const float *hb = hs + b * kn;
                fc_vf t0 = fc_vf_load(s), t1 = fc_vf_load(s + FC_VF_VL);
                fc_vf t2 = fc_vf_load(s + 2 * FC_VF_VL), t3 = fc_vf_load(s + 3 * FC_VF_VL);
                fc_vf t4 = fc_vf_load(s + 4 * FC_VF_VL), t5 = fc_vf_load(s + 5 * FC_VF_VL);
                fc_vf t6 = fc_vf_load(s + 6 * FC_VF_VL), t7 = fc_vf_load(s + 7 * FC_VF_VL);
                for (k = k0; k < k1; k++) {
                    const fc_vf hk = FC_VF_SPLAT(hb[k]);
                    const float *rk = r + k * rs + j0;
                    t0 = hk * fc_vf_load(rk) + t0;
                    t1 = hk * fc_vf_load(rk + FC_VF_VL) + t1;
                    t2 = hk * fc_vf_load(rk + 2 * FC_VF_VL) + t2;
                    t3 = hk * fc_vf_load(rk + 3 * FC_VF_VL) + t3;
                    t4 = hk * fc_vf_load(rk + 4 * FC_VF_VL) + t4;
                    t5 = hk * fc_vf_load(rk + 5 * FC_VF_VL) + t5;
                    t6 = hk * fc_vf_load(rk + 6 * FC_VF_VL) + t6;
                    t7 = hk * fc_vf_load(rk + 7 * FC_VF_VL) + t7;
                }
                fc_vf_store(s, t0);
                fc_vf_store(s + FC_VF_VL, t1);
                fc_vf_store(s + 2 * FC_VF_VL, t2);
                fc_vf_store(s + 3 * FC_VF_VL, t3);
                fc_vf_store(s + 4 * FC_VF_VL, t4);
                fc_vf_store(s + 5 * FC_VF_VL, t5);
                fc_vf_store(s + 6 * FC_VF_VL, t6);
                fc_vf_store(s + 7 * FC_VF_VL, t7);
            }
        }
    }
    if (full == n)
        return;
    for (k = 0; k < kn; k++) {
        const float *FC_RESTRICT rk = r + k * rs;
        for (b = 0; b < batch; b++) {
            float *FC_RESTRICT s = acc + b * as;
            const float hk = hs[b * kn + k];
            for (j = full; j < n; j++)
                s[j] += hk * rk[j];
        }
    }
}

/* The recurrent product of each dtype (FC_FN(fc_rnn_product) in rnn.inc): float32 the
 * register-blocked one above, float16 and float64 the generic one of rnn.inc. */
#define fc_rnn_product_f32 fc_rnn_product_vec_f32
#define fc_rnn_product_f16 fc_rnn_accumulate__f16
#define fc_rnn_product_f64 fc_rnn_accumulate__f64

#define FC_INC "kernels/rnn.inc"
#define FC_WANT_FLOATS
#include "kernels/instantiate.h"

#undef fc_rnn_product_f32
#undef fc_rnn_product_f16
#undef fc_rnn_product_f64
#undef FC_RNN_KC

#endif /* FLOWC_KERNELS_RNN_H */
