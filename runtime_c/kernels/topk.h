/* The k largest (or smallest) values along one axis, and their indices.
 *
 * int fc_topk_SFX(x, values, indices, outer, dim, inner, k, largest)
 *     every numeric dtype. x is (outer, dim, inner); values (same dtype) and indices
 *     (int64_t) are (outer, k, inner), 0 <= k <= dim. Along each line, the k first elements
 *     in the order "better first": with largest != 0 the larger value, else the smaller one;
 *     equal values by the smaller index (as ONNX TopK specifies). NaN counts as larger than
 *     every number (as numpy's sort), so it comes first when largest and last otherwise.
 *     The output is always sorted, best first. Returns FC_OK.
 *
 * Selection is a bounded heap built in the output line itself (no scratch memory):
 * O(dim log k) per line, then O(k log k) to sort the k kept elements.
 */
#ifndef FLOWC_KERNELS_TOPK_H
#define FLOWC_KERNELS_TOPK_H

#include "flowc_rt.h"

#define FC_INC "kernels/topk.inc"
#define FC_WANT_FLOATS
#define FC_WANT_INTS
#include "kernels/instantiate.h"

#endif /* FLOWC_KERNELS_TOPK_H */
