// The NTT kernels with the field multiplication as it was first measured (fr.cuh:
// fr_negate_opaque, FR_MUL_FOLDABLE_NEG): built as its own module so that one GPU run can time
// the first version (legacy passes, this multiplication) beside the current one.
#define FR_MUL_FOLDABLE_NEG 1
#include "ntt.cu"
