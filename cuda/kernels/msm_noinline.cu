// The MSM kernels with field multiplication as a real call instead of inlined (smaller code,
// fewer instruction-cache misses, a call's overhead): built as a second module so that one GPU
// run can time both. See msm.cu.
#define GPUD_FQ_MUL_NOINLINE 1
#include "msm.cu"
