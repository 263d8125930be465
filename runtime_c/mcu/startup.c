/* Minimal Cortex-M start-up for the MPS2 boards QEMU emulates (and most Cortex-M parts):
 * the vector table, then Reset_Handler copies .data from flash, zeroes .bss, turns the FPU
 * on when the code uses it, calls main() and reports its return value through semihosting.
 * Symbols come from mps2.ld. Faults print one line and exit with status 1.
 */
#include <stdint.h>

#include "semihost.h"

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _stack_top[];
int main(void);

void Reset_Handler(void);
void Fault_Handler(void);
void SysTick_Handler(void);

/* Wraps of the SysTick counter, for a firmware that counts with it (firmware.c; the only
 * exception this firmware enables). */
volatile uint32_t fc_systick_wraps;
void SysTick_Handler(void) { ++fc_systick_wraps; }

__attribute__((noreturn)) void Reset_Handler(void) {
    /* volatile: gcc would turn the loops into memcpy/memset calls, pulling them into every
     * firmware (and into the footprint of models that do not use them) */
    volatile uint32_t *src = _sidata, *dst = _sdata;
#if defined(__ARM_FP)
    /* CPACR: full access to coprocessors 10 and 11 (the FPU) before any float instruction */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    while (dst < _edata) *dst++ = *src++;
    for (dst = _sbss; dst < _ebss;) *dst++ = 0;
    fc_sh_exit(main());
}

void Fault_Handler(void) {
    fc_sh_write("fault: the firmware crashed (hard fault or an unexpected exception)\n");
    fc_sh_exit(1);
}

/* Initial stack pointer, then the 15 system exceptions: every one but reset and SysTick is a
 * fault here (this firmware enables no other interrupt). */
__attribute__((section(".isr_vector"), used)) void (*const fc_vectors[16])(void) = {
    (void (*)(void))_stack_top, Reset_Handler, Fault_Handler, Fault_Handler,
    Fault_Handler,              Fault_Handler, Fault_Handler, 0,
    0,                          0,             0,             Fault_Handler,
    Fault_Handler,              0,             Fault_Handler, SysTick_Handler,
};
