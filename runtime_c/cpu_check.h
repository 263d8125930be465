/* A standalone binary's start-up check on x86-64 (GCC or clang): the instruction sets the build
 * was compiled for (its predefined macros: -march=native takes the build machine's) against the
 * CPU's (cpuid, through __builtin_cpu_supports), before any of their instructions can run (a
 * constructor, itself compiled for the baseline x86-64). On a CPU without one: one line naming
 * it and the fix, and exit code 5, instead of an "Illegal instruction" crash. The model's
 * weights are packed for the build's instruction set, so the fix is a compile for another:
 * flowc's --portable (any x86-64) or a compile on the machine that runs it. Included once, by
 * the generated main.c, after defining FC_CPU_CHECK_NAME (the program's name). */
#ifndef FLOWC_CPU_CHECK_H
#define FLOWC_CPU_CHECK_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FC_NO_CPU_CHECK)
#include <stdio.h>
#include <stdlib.h>

#if defined(__clang__)
#define FC_CPU_BASELINE
#else
#define FC_CPU_BASELINE __attribute__((target("arch=x86-64")))
#endif

/* the first instruction set the build uses that the CPU lacks, or NULL */
static FC_CPU_BASELINE const char *fc_cpu_missing(void) {
    __builtin_cpu_init();
#ifdef __SSE4_2__
    if (!__builtin_cpu_supports("sse4.2"))
        return "SSE4.2";
#endif
#ifdef __POPCNT__
    if (!__builtin_cpu_supports("popcnt"))
        return "POPCNT";
#endif
#ifdef __AVX__
    if (!__builtin_cpu_supports("avx"))
        return "AVX";
#endif
#ifdef __AVX2__
    if (!__builtin_cpu_supports("avx2"))
        return "AVX2";
#endif
#ifdef __FMA__
    if (!__builtin_cpu_supports("fma"))
        return "FMA";
#endif
#if defined(__F16C__) && !defined(__clang__) /* (a name clang's builtin lacks) */
    if (!__builtin_cpu_supports("f16c"))
        return "F16C";
#endif
#ifdef __BMI__
    if (!__builtin_cpu_supports("bmi"))
        return "BMI";
#endif
#ifdef __BMI2__
    if (!__builtin_cpu_supports("bmi2"))
        return "BMI2";
#endif
#ifdef __AVX512F__
    if (!__builtin_cpu_supports("avx512f"))
        return "AVX-512F";
#endif
#ifdef __AVX512CD__
    if (!__builtin_cpu_supports("avx512cd"))
        return "AVX-512CD";
#endif
#ifdef __AVX512BW__
    if (!__builtin_cpu_supports("avx512bw"))
        return "AVX-512BW";
#endif
#ifdef __AVX512DQ__
    if (!__builtin_cpu_supports("avx512dq"))
        return "AVX-512DQ";
#endif
#ifdef __AVX512VL__
    if (!__builtin_cpu_supports("avx512vl"))
        return "AVX-512VL";
#endif
#ifdef __AVX512IFMA__
    if (!__builtin_cpu_supports("avx512ifma"))
        return "AVX-512 IFMA";
#endif
#ifdef __AVX512VBMI__
    if (!__builtin_cpu_supports("avx512vbmi"))
        return "AVX-512 VBMI";
#endif
#ifdef __AVX512VBMI2__
    if (!__builtin_cpu_supports("avx512vbmi2"))
        return "AVX-512 VBMI2";
#endif
#ifdef __AVX512VNNI__
    if (!__builtin_cpu_supports("avx512vnni"))
        return "AVX-512 VNNI";
#endif
#ifdef __AVX512BITALG__
    if (!__builtin_cpu_supports("avx512bitalg"))
        return "AVX-512 BITALG";
#endif
#ifdef __AVX512VPOPCNTDQ__
    if (!__builtin_cpu_supports("avx512vpopcntdq"))
        return "AVX-512 VPOPCNTDQ";
#endif
#ifdef __AVX512BF16__
    if (!__builtin_cpu_supports("avx512bf16"))
        return "AVX-512 BF16";
#endif
#ifdef __AVX512FP16__
    if (!__builtin_cpu_supports("avx512fp16"))
        return "AVX-512 FP16";
#endif
#ifdef __AVXVNNI__
    if (!__builtin_cpu_supports("avxvnni"))
        return "AVX-VNNI";
#endif
#ifdef __GFNI__
    if (!__builtin_cpu_supports("gfni"))
        return "GFNI";
#endif
#if defined(__VAES__) && !defined(__clang__) /* (a name clang's builtin lacks) */
    if (!__builtin_cpu_supports("vaes"))
        return "VAES";
#endif
#ifdef __VPCLMULQDQ__
    if (!__builtin_cpu_supports("vpclmulqdq"))
        return "VPCLMULQDQ";
#endif
#ifdef __AMX_TILE__
    if (!__builtin_cpu_supports("amx-tile"))
        return "AMX-TILE";
#endif
#ifdef __AMX_INT8__
    if (!__builtin_cpu_supports("amx-int8"))
        return "AMX-INT8";
#endif
#ifdef __AMX_BF16__
    if (!__builtin_cpu_supports("amx-bf16"))
        return "AMX-BF16";
#endif
    return NULL;
}

static FC_CPU_BASELINE __attribute__((constructor, used)) void fc_cpu_check(void) {
    const char *missing = fc_cpu_missing();
    if (missing) {
        fprintf(stderr,
                "%s: this CPU has no %s, which this build of the model uses (compiled for the build "
                "machine's instruction set); compile the model with flowc --portable to run it on any "
                "x86-64, or compile it on this machine\n",
                FC_CPU_CHECK_NAME, missing);
        exit(5);
    }
}
#endif

#endif /* FLOWC_CPU_CHECK_H */
