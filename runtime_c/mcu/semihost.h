/* Arm semihosting: text output and exit through the debugger (or QEMU with
 * -semihosting-config enable=on,target=native). Used by the firmware that runs a model on an
 * emulated board; the model library itself never calls it.
 *
 * A call is `bkpt 0xAB` with the operation in r0 and its argument in r1 (Thumb, M profile).
 * On a board without a debugger attached, bkpt faults: keep these calls out of production.
 */
#ifndef FLOWC_SEMIHOST_H
#define FLOWC_SEMIHOST_H

#define FC_SH_WRITE0 0x04u          /* write a NUL-terminated string */
#define FC_SH_EXIT 0x18u            /* report an exception: ends the session */
#define FC_SH_APP_EXIT 0x20026u     /* ADP_Stopped_ApplicationExit: exit status 0 */
#define FC_SH_RUNTIME_ERROR 0x20023u /* ADP_Stopped_RunTimeErrorUnknown: exit status 1 */

static inline __attribute__((unused)) unsigned fc_semihost(unsigned op, const void *arg) {
    register unsigned r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static inline __attribute__((unused)) void fc_sh_write(const char *text) {
    fc_semihost(FC_SH_WRITE0, text);
}

static inline __attribute__((unused, noreturn)) void fc_sh_exit(int status) {
    fc_semihost(FC_SH_EXIT, (const void *)(status == 0 ? FC_SH_APP_EXIT : FC_SH_RUNTIME_ERROR));
    for (;;) {
    }
}

#endif /* FLOWC_SEMIHOST_H */
