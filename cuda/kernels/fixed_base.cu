// Fixed-base G1 multiplication kernel (see fixed_base.cuh): out[i] = scalars[i] * G.
#include "fixed_base.cuh"

using namespace gpud;

extern "C" __global__ void __launch_bounds__(128)
    g1_fixed_base_kernel(uint32_t n, const g1_affine* __restrict__ table,
                         const uint32_t* __restrict__ scalars, g1_affine* __restrict__ out) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = fixed_base_mul(table, scalars + 8 * (size_t)i);
    }
}
