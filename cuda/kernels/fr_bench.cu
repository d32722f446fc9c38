// Field multiplication throughput: the compute ceiling the NTT timings are read against.
// Each thread runs four independent chains of dependent products (enough independent work
// to keep the multiply pipes busy) and stores the results so that nothing is optimized away.
#include "fr.cuh"

extern "C" __global__ void __launch_bounds__(256) fr_mul_throughput(fr_t *x, const fr_t *y, unsigned iters) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    fr_t a0 = x[4 * i], a1 = x[4 * i + 1], a2 = x[4 * i + 2], a3 = x[4 * i + 3];
    const fr_t b = y[i];
    for (unsigned k = 0; k < iters; k++) {
        a0 = fr_mul(a0, b);
        a1 = fr_mul(a1, b);
        a2 = fr_mul(a2, b);
        a3 = fr_mul(a3, b);
    }
    x[4 * i] = a0;
    x[4 * i + 1] = a1;
    x[4 * i + 2] = a2;
    x[4 * i + 3] = a3;
}
