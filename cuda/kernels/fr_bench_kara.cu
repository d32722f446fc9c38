// fr_bench with the Karatsuba field multiplication (fr.cuh: fr_mul_karatsuba): built as its own
// module so that one GPU run times both products.
#define FR_MUL_KARATSUBA 1
#include "fr_bench.cu"
