/* The clock of a profiling build (-DFC_PROFILE) on a Cortex-M board: SysTick's ticks of the
 * processor clock (the firmware starts it; startup.c counts its wraps), not microseconds. The
 * firmware prints each step's sum and the calibration that turns ticks into instructions
 * (codegen/backends/c/mcu.py run_firmware(profile=True)). Found before runtime/timing.h: the
 * profiling build puts runtime/mcu first on the include path. */
#ifndef FC_TIMING_H
#define FC_TIMING_H

#include <stdint.h>

extern volatile uint32_t fc_systick_wraps;

static inline double fc_now_us(void) {
    uint32_t wraps, value;
    do {
        wraps = fc_systick_wraps;
        value = *(volatile uint32_t *)0xE000E018u; /* SysTick's current value, counting down */
    } while (wraps != fc_systick_wraps);
    return (double)wraps * 16777216.0 + (double)(0xFFFFFFu - value);
}

#endif /* FC_TIMING_H */
