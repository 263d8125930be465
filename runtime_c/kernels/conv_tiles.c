/* The register-tile kernels of kernels/conv_tiles.h compiled on their own, as kernels/sgemm.c
 * does for the product's tiles (FC_KERNELS_APART). */
#define FC_KERNELS_APART 1
#define FC_CONV_TILES_HERE 1
#include "flowc_rt.h"
#include "kernels/conv_tiles.h"
