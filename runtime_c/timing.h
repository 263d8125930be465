/* Monotonic time for the standalone binaries' --bench (POSIX clock_gettime). */
#ifndef FC_TIMING_H
#define FC_TIMING_H

#include <stdlib.h>
#include <time.h>

static inline int fc_cmp_double_(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of t[0 .. n) (n >= 1), which it sorts. */
static inline double fc_median(double *t, long n) {
    qsort(t, (size_t)n, sizeof(double), fc_cmp_double_);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static inline double fc_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

#endif /* FC_TIMING_H */
