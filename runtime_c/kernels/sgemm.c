/* The tile kernels of kernels/sgemm.h compiled on their own: a model built with FC_KERNELS_APART
 * only declares them, and flowc compiles this file once per ISA and flags (its cache keeps the
 * object), instead of once into every model. See kernels/sgemm.h. */
#define FC_KERNELS_APART 1
#define FC_SGEMM_HERE 1
#include "flowc_rt.h"
#include "kernels/sgemm.h"
