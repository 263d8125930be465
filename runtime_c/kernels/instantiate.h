/* Instantiates a kernel family once per element type.
 *
 * Usage, in a kernel family header:
 *     #define FC_INC "kernels/pool.inc"
 *     #define FC_WANT_FLOATS          (f16, f32, f64)
 *     #define FC_WANT_INTS            (i8, u8, i16, u16, i32, u32, i64, u64), optional
 *     #include "kernels/instantiate.h"
 *
 * Inside the .inc file:
 *     FC_T         storage type             (fc_f16 for f16)
 *     FC_A         compute type: float for f16 and f32, double for f64; for integers the
 *                  value type int64_t (uint64_t for u8), used for comparisons
 *     FC_ACC       accumulator for sums and products: FC_A for floats; uint64_t for
 *                  integers, so overflow wraps (as numpy does) instead of being undefined
 *     FC_LD(v)     storage -> compute       FC_ST(v)  compute -> storage
 *     FC_FN(name)  name##_##suffix, e.g. fc_conv_f32
 *     FC_IS_FLOAT  1 for float types, 0 for ints
 *     FC_LOWEST    the smallest value of the storage type, as FC_A (-inf for floats)
 *     FC_M(fn)     the libm function for FC_A (floats only): FC_M(exp) is expf or exp
 *     FC_VM(fn)    exp, expm1, log, log1p, tanh, erf, sin or cos as kernels/vmath.h has them for
 *                  float (vectorizable), libm's for double: FC_VM(exp) is fc_vm_expf or exp
 *     FC_PICK(c, a, b)  c ? a : b; for float kernels/vmath.h's fc_vm_pick, a bit blend the
 *                  compiler cannot turn into a branch (a loop with a branch does not vectorize)
 *     FC_ISNEG(v)  v < 0 for signed integer types, 0 for u8 (avoids -Wtype-limits; ints only)
 */
#define FC_FN(name) FC_CAT(name, FC_SFX)

#ifdef FC_WANT_FLOATS
#define FC_SFX f16
#define FC_M(fn) fn##f
#define FC_VM(fn) fc_vm_##fn##f
#define FC_PICK(c, a, b) fc_vm_pick((c), (a), (b))
#define FC_T fc_f16
#define FC_A float
#define FC_ACC float
#define FC_LD(v) fc_h2f(v)
#define FC_ST(v) fc_f2h(v)
#define FC_IS_FLOAT 1
#define FC_LOWEST (-HUGE_VALF)
#include FC_INC
#undef FC_SFX
#undef FC_M
#undef FC_VM
#undef FC_PICK
#undef FC_T
#undef FC_A
#undef FC_ACC
#undef FC_LD
#undef FC_ST
#undef FC_IS_FLOAT
#undef FC_LOWEST

#define FC_SFX f32
#define FC_M(fn) fn##f
#define FC_VM(fn) fc_vm_##fn##f
#define FC_PICK(c, a, b) fc_vm_pick((c), (a), (b))
#define FC_T float
#define FC_A float
#define FC_ACC float
#define FC_LD(v) (v)
#define FC_ST(v) (v)
#define FC_IS_FLOAT 1
#define FC_LOWEST (-HUGE_VALF)
#include FC_INC
#undef FC_SFX
#undef FC_M
#undef FC_VM
#undef FC_PICK
#undef FC_T
#undef FC_A
#undef FC_ACC
#undef FC_LD
#undef FC_ST
#undef FC_IS_FLOAT
#undef FC_LOWEST

#define FC_SFX f64
#define FC_M(fn) fn
#define FC_VM(fn) fn
#define FC_PICK(c, a, b) ((c) ? (a) : (b))
#define FC_T double
#define FC_A double
#define FC_ACC double
#define FC_LD(v) (v)
#define FC_ST(v) (v)
#define FC_IS_FLOAT 1
#define FC_LOWEST (-HUGE_VAL)
#include FC_INC
#undef FC_SFX
#undef FC_M
#undef FC_VM
#undef FC_PICK
#undef FC_T
#undef FC_A
#undef FC_ACC
#undef FC_LD
#undef FC_ST
#undef FC_IS_FLOAT
#undef FC_LOWEST
#endif /* FC_WANT_FLOATS */

#ifdef FC_WANT_INTS
#define FC_IS_FLOAT 0
#define FC_LD(v) (v)
#define FC_ACC uint64_t

#define FC_SFX i8
#define FC_ISNEG(v) ((v) < 0)
#define FC_T int8_t
#define FC_A int64_t
#define FC_ST(v) ((int8_t)(uint8_t)(uint64_t)(v))
#define FC_LOWEST INT8_MIN
#include FC_INC
#undef FC_SFX
#undef FC_T
#undef FC_A
#undef FC_ST
#undef FC_LOWEST
#undef FC_ISNEG

#define FC_SFX u8
#define FC_ISNEG(v) 0
#define FC_T uint8_t
#define FC_A uint64_t
#define FC_ST(v) ((uint8_t)(v))
#define FC_LOWEST 0
#include FC_INC
#undef FC_SFX
#undef FC_T
#undef FC_A
#undef FC_ST
#undef FC_LOWEST
#undef FC_ISNEG

#define FC_SFX i16
#define FC_ISNEG(v) ((v) < 0)
#define FC_T int16_t
#define FC_A int64_t
#define FC_ST(v) ((int16_t)(uint16_t)(uint64_t)(v))
#define FC_LOWEST INT16_MIN
#include FC_INC
#undef FC_SFX
#undef FC_T
#undef FC_A
#undef FC_ST
#undef FC_LOWEST
#undef FC_ISNEG

#define FC_SFX u16
#define FC_ISNEG(v) 0
#define FC_T uint16_t
#define FC_A uint64_t
#define FC_ST(v) ((uint16_t)(v))
#define FC_LOWEST 0
#include FC_INC
#undef FC_SFX
#undef FC_T
#undef FC_A
#undef FC_ST
#undef FC_LOWEST
#undef FC_ISNEG

#define FC_SFX u32
#define FC_ISNEG(v) 0
#define FC_T uint32_t
#define FC_A uint64_t
#define FC_ST(v) ((uint32_t)(v))
#define FC_LOWEST 0
#include FC_INC
#undef FC_SFX
#undef FC_T
#undef FC_A
#undef FC_ST
#undef FC_LOWEST
#undef FC_ISNEG

#define FC_SFX u64
#define FC_ISNEG(v) 0
#define FC_T uint64_t
#define FC_A uint64_t
#define FC_ST(v) ((uint64_t)(v))
#define FC_LOWEST 0
#include FC_INC
#undef FC_SFX
#undef FC_T
#undef FC_A
#undef FC_ST
#undef FC_LOWEST
#undef FC_ISNEG

#define FC_SFX i32
#define FC_ISNEG(v) ((v) < 0)
#define FC_T int32_t
#define FC_A int64_t
#define FC_ST(v) ((int32_t)(uint32_t)(uint64_t)(v))
#define FC_LOWEST INT32_MIN
#include FC_INC
#undef FC_SFX
#undef FC_T
#undef FC_A
#undef FC_ST
#undef FC_LOWEST
#undef FC_ISNEG

#define FC_SFX i64
#define FC_ISNEG(v) ((v) < 0)
#define FC_T int64_t
#define FC_A int64_t
#define FC_ST(v) ((int64_t)(uint64_t)(v))
#define FC_LOWEST INT64_MIN
#include FC_INC
#undef FC_SFX
#undef FC_T
#undef FC_A
#undef FC_ST
#undef FC_LOWEST
#undef FC_ISNEG

#undef FC_IS_FLOAT
#undef FC_LD
#undef FC_ACC
#endif /* FC_WANT_INTS */

#undef FC_FN
#undef FC_INC
#undef FC_WANT_FLOATS
#undef FC_WANT_INTS
