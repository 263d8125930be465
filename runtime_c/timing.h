/* Monotonic time for the standalone binaries' --bench (POSIX clock_gettime). */
#ifndef FC_TIMING_H
#define FC_TIMING_H

#include <time.h>

static inline double fc_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

#endif /* FC_TIMING_H */
