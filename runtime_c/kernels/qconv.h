/* Integer convolution of quantized models (int8/uint8 activations, int8 weights): int32 sums
 * of (x - x_zero) * w plus an int32 bias, times a fixed-point multiplier per output channel,
 * plus y_zero, clamped to [lo, hi] (the fused activation) - TFLite's integer scheme; see
 * graphdef/ops/quant.py for the op and its numpy reference.
 *
 * Layout: x (N, C, H, W) and y (N, M, OH, OW) channels-first, w (M, C/groups, KH, KW). Each
 * (image, output channel) plane is one unit of work. Per image, x - x_zero is copied once into
 * int16 planes, padded with zeros and split by stride phase, so that every tap of the kernel
 * adds one dense run of them, times its weight, into the int32 sums of its output channel (four
 * output channels a pass, sharing the reads): loops the compiler vectorizes. No float
 * arithmetic with the fixed-point multipliers: a microcontroller build links no float routine
 * for it (``scale``, ONNX's float multipliers, rounds in double).
 */
#ifndef FLOWC_KERNELS_QCONV_H
#define FLOWC_KERNELS_QCONV_H

#include "flowc_rt.h"

typedef struct fc_qconv_geom {
    long n, c, h, w, m, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    int32_t x_zero, y_zero, lo, hi;
    int per_channel; /* q and shift hold one value per output channel (else one for all) */
} fc_qconv_geom;

/* acc * q * 2**(-31 - right), q in [0, 2**31), right >= 0: the high half of the doubled 64-bit
 * product rounded half away from zero, then an arithmetic right shift rounded half away from
 * zero (TFLite's MultiplyByQuantizedMultiplier for a multiplier below one). */
FC_INLINE int32_t fc_qmul(int32_t acc, int32_t q, int right) {
    const int64_t ab = (int64_t)acc * q;
    const int64_t high = (ab + (ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30))) / ((int64_t)1 << 31);
    const int64_t mask = ((int64_t)1 << right) - 1;
    const int64_t threshold = (mask >> 1) + (high < 0);
    return (int32_t)((high >> right) + ((high & mask) > threshold));
}

/* acc * scale in double, rounded half to even (the current rounding mode: C's default),
 * saturated to int32 (ONNX's QLinearConv with a float multiplier). */
FC_INLINE int32_t fc_qround(int32_t acc, double scale) {
    const double v = nearbyint((double)acc * scale);
    return v < -2147483648.0 ? INT32_MIN : v > 2147483647.0 ? INT32_MAX : (int32_t)v;
}

#define FC_QCONV_BLOCK 4 /* output channels summed in one pass over the input planes */

/* The padded copy of an input plane (the rows and columns the windows read, from -ph and -pw)
 * split by phase: sh * sw planes of hq rows of wq, phase (ry, rx) holding rows ry, ry + sh, ...
 * and columns rx, rx + sw, ... of it, so that every tap reads one dense run of its phase. */
FC_INLINE long fc_qconv_hq(const fc_qconv_geom *g) {
    return ((g->oh - 1) * g->sh + (g->kh - 1) * g->dh + g->sh) / g->sh;
}
FC_INLINE long fc_qconv_wq(const fc_qconv_geom *g) {
    return ((g->ow - 1) * g->sw + (g->kw - 1) * g->dw + g->sw) / g->sw;
}

/* int16 values of one input channel's phases, and the columns a tap's pass reads past the last
 * phase's end ((kw - 1) * dw / sw; its sums there are left), rounded up to 32 bytes. */
FC_INLINE long fc_qconv_ps(const fc_qconv_geom *g) {
    const long slack = (g->kw - 1) * g->dw / g->sw + (g->kh - 1) * g->dh / g->sh * fc_qconv_wq(g);
    return (g->sh * g->sw * fc_qconv_hq(g) * fc_qconv_wq(g) + slack + 15) / 16 * 16;
}

/* int32 sums of one output channel (oh rows of wq), rounded up to 16 (64 bytes). */
FC_INLINE long fc_qconv_acc(const fc_qconv_geom *g) { return (g->oh * fc_qconv_wq(g) + 15) / 16 * 16; }

/* Bytes of scratch of one call: the sums of FC_QCONV_BLOCK output channels, then the image's
 * padded planes. */
FC_INLINE long fc_qconv_scratch(const fc_qconv_geom *g) {
    return FC_QCONV_BLOCK * fc_qconv_acc(g) * 4 + g->c * fc_qconv_ps(g) * 2;
}

#define FC_QT int8_t
#define FC_QFN(name) name##_i8
#include "kernels/qconv.inc"
#undef FC_QT
#undef FC_QFN
#define FC_QT uint8_t
#define FC_QFN(name) name##_u8
#include "kernels/qconv.inc"
#undef FC_QT
#undef FC_QFN

#endif /* FLOWC_KERNELS_QCONV_H */
