// fr_bench with the field multiplication as it was before the opaque negation (fr.cuh:
// fr_negate_opaque): ptxas splits every m * r_j product of the reduction into two multiply-pipe
// instructions. Built as its own module so that one GPU run times both products.
#define FR_MUL_FOLDABLE_NEG 1
#include "fr_bench.cu"
