// The MSM kernels without the register cap on the hot kernels (ptxas then uses about 174
// registers there, no spills, 2 blocks of 128 threads per multiprocessor instead of 3): built as
// a third module so that one GPU run can time both. See msm.cu.
#define GPUD_MSM_MIN_BLOCKS 0
#include "msm.cu"
