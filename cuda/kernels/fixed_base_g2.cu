// Fixed-base G2 multiplication: fixed_base.cu over G2's point operations (g2.cuh), for the
// parameter generator's B_G2 query.
#define GPUD_FIXED_BASE_G2 1
#include "fixed_base.cu"
