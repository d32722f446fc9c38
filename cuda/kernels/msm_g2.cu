// The MSM kernels over BLS12-381 G2: msm.cu's kernels with G2's point operations (g2.cuh).
// Same kernel names and arguments as the G1 module, with 192-byte affine bases, 384-byte XYZZ
// buckets and 288-byte Jacobian window sums.
//
// The hot kernels get no register cap here: a G2 accumulator (four Fq2 elements, 96 words)
// and the incoming point (48 words) already fill what a cap of 168 allows.
#ifndef GPUD_MSM_MIN_BLOCKS
#define GPUD_MSM_MIN_BLOCKS 0
#endif
#define GPUD_MSM_G2 1
#include "msm.cu"
