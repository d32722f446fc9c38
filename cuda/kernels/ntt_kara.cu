// The NTT kernels with the Karatsuba field multiplication (fr.cuh: fr_mul_karatsuba): built as
// its own module so that one GPU run can time it beside the default product.
#define FR_MUL_KARATSUBA 1
#include "ntt.cu"
