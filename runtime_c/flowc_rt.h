/* flowc runtime: the base every generated model and kernel includes.
 *
 * Portable C99: fixed-width types, status codes, float16 <-> float conversion, alignment
 * and inlining macros. No allocation, no I/O, no globals.
 */
#ifndef FLOWC_RT_H
#define FLOWC_RT_H

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* CUDA builds (nvcc, or a host C++ compiler with runtime_c/cuda/sim.h) compile every kernel
 * for the device too, on its scalar paths. */
#if defined(__CUDACC__) || defined(FC_CUDA_SIM)
#define FC_DEVICE __host__ __device__
#ifndef FC_NO_VECTOR
#define FC_NO_VECTOR 1
#endif
#else
#define FC_DEVICE
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FC_INLINE static inline FC_DEVICE __attribute__((unused))
#define FC_NOINLINE __attribute__((noinline))
#define FC_HIDDEN __attribute__((visibility("hidden"))) /* shared by a model's files, not exported */
#define FC_ALIGNED(n) __attribute__((aligned(n)))
#define FC_RESTRICT __restrict__
#else
#define FC_INLINE static inline FC_DEVICE
#define FC_NOINLINE
#define FC_HIDDEN
#define FC_ALIGNED(n)
#define FC_RESTRICT
#endif

/* Status codes returned by <model>_run and by kernels that can fail on data. */
#define FC_OK 0
#define FC_ERR_NULL 1      /* a required pointer is NULL */
#define FC_ERR_ALIGN 2     /* the arena (or state) is not aligned as the header says */
#define FC_ERR_INDEX 3     /* an index tensor holds a value out of range */
#define FC_ERR_DIV_ZERO 4  /* integer division by zero */
#define FC_ERR_NEG_POW 5   /* integer power with a negative exponent */
#define FC_ERR_BOUND 7     /* a loop reached its compiled bound of iterations */

#define FC_CAT_(a, b) a##_##b
#define FC_CAT(a, b) FC_CAT_(a, b)

typedef uint16_t fc_f16;  /* IEEE 754 binary16, stored as its bits */
typedef uint8_t fc_bool;  /* 0 or 1, one byte like numpy's bool */

/* float16 bits -> float (exact). */
FC_INLINE float fc_h2f(fc_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    float out;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13); /* inf or nan */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign; /* signed zero */
    } else {        /* subnormal: normalize */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while ((man & 0x400u) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* float -> float16 bits, rounding to nearest even (as numpy does). */
FC_INLINE fc_f16 fc_f2h(float f) {
    uint32_t bits;
    uint32_t sign, exp, man;
    memcpy(&bits, &f, sizeof bits);
    sign = (bits >> 16) & 0x8000u;
    exp = (bits >> 23) & 0xffu;
    man = bits & 0x7fffffu;
    if (exp == 0xffu) /* inf, or nan kept quiet */
        return (fc_f16)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    if (exp > 142u) /* overflow to infinity */
        return (fc_f16)(sign | 0x7c00u);
    if (exp >= 113u) { /* normal half */
        uint32_t h = ((exp - 112u) << 10) | (man >> 13);
        uint32_t rest = man & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++; /* may carry into the exponent, up to infinity: still correct */
        return (fc_f16)(sign | h);
    }
    if (exp >= 102u) { /* subnormal half */
        uint32_t full = man | 0x800000u;
        uint32_t shift = 126u - exp; /* 14 .. 24 */
        uint32_t h = full >> shift;
        uint32_t rest = full & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (h & 1u)))
            h++;
        return (fc_f16)(sign | h);
    }
    return (fc_f16)sign; /* underflow to signed zero */
}

#endif /* FLOWC_RT_H */
