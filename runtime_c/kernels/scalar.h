/* Elementwise scalar functions: the bodies of fused elementwise loops.
 *
 * Floats compute in FC_A (float for f16 and f32, double for f64): fc_add_f32(a, b).
 * Integers compute in their own type and wrap on overflow, as numpy does; division by
 * zero and negative integer powers report through *err instead of trapping.
 * Semantics follow the numpy references in graphdef/ops/elementwise.py.
 */
#ifndef FC_KERNELS_SCALAR_H
#define FC_KERNELS_SCALAR_H

#include "flowc_rt.h"
#include "kernels/vmath.h"

/* floor, ceil and round without libm (kernels/scalar_float.inc, fc_floor_cvt) on cores whose
 * FPU has no rounding instruction: flowc's cortex-m0plus and cortex-m4 targets define it (the M7's
 * and M55's FPUs have vrintm, which compilers use for floorf; no predefined macro tells the
 * two apart) */
#ifndef FC_FLOOR_BY_CVT
#define FC_FLOOR_BY_CVT 0
#endif

#define FC_INC "kernels/scalar_float.inc"
#define FC_WANT_FLOATS
#include "kernels/instantiate.h"

#define FC_INC "kernels/scalar_int.inc"
#define FC_WANT_INTS
#include "kernels/instantiate.h"

/* Round a float to float16 and back: what storing an f16 intermediate would give. */
FC_INLINE float fc_narrow_f16(float v) { return fc_h2f(fc_f2h(v)); }

/* float -> integer conversion: truncate toward zero, NaN -> 0, saturate to int64 first,
 * then wrap to the target width (never undefined behaviour). */
FC_INLINE int64_t fc_f2i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

/* int64 -> narrower integer, wrapping modulo 2^bits (conversions through unsigned types
 * are defined; the final unsigned -> signed step is modulo on every compiler we target). */
FC_INLINE int8_t fc_to_i8(int64_t v) { return (int8_t)(uint8_t)(uint64_t)v; }
FC_INLINE uint8_t fc_to_u8(int64_t v) { return (uint8_t)(uint64_t)v; }
FC_INLINE int32_t fc_to_i32(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }
FC_INLINE int64_t fc_to_i64(int64_t v) { return v; }
FC_INLINE int16_t fc_to_i16(int64_t v) { return (int16_t)(uint16_t)(uint64_t)v; }
FC_INLINE uint16_t fc_to_u16(int64_t v) { return (uint16_t)(uint64_t)v; }
FC_INLINE uint32_t fc_to_u32(int64_t v) { return (uint32_t)(uint64_t)v; }
FC_INLINE uint64_t fc_to_u64(int64_t v) { return (uint64_t)v; }

#endif /* FC_KERNELS_SCALAR_H */
