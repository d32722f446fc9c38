// Fixed-base multiplication kernel (see fixed_base.cuh): out[i] = scalars[i] * G, one thread per
// batch of GPUD_FB_BATCH points. Over G1, or over G2 with GPUD_FIXED_BASE_G2=1
// (fixed_base_g2.cu); both modules export the same kernel name.
#if defined(GPUD_FIXED_BASE_G2) && GPUD_FIXED_BASE_G2
#include "g2.cuh"
typedef gpud::g2_ops fb_curve;
#else
#include "g1.cuh"
typedef gpud::g1_ops fb_curve;
#endif
#include "fixed_base.cuh"

using namespace gpud;

extern "C" __global__ void __launch_bounds__(128)
    fixed_base_kernel(uint32_t n, const fb_curve::affine* __restrict__ table,
                      const uint32_t* __restrict__ scalars, fb_curve::xyzz* __restrict__ scratch,
                      fb_curve::affine* __restrict__ out) {
    uint32_t batches = (n + GPUD_FB_BATCH - 1) / GPUD_FB_BATCH;
    for (uint32_t b = blockIdx.x * blockDim.x + threadIdx.x; b < batches;
         b += gridDim.x * blockDim.x) {
        uint32_t first = b * GPUD_FB_BATCH;
        uint32_t count = n - first < GPUD_FB_BATCH ? n - first : GPUD_FB_BATCH;
        fixed_base_batch<fb_curve>(table, scalars + 8 * (size_t)first, scratch + first,
                                   out + first, count);
    }
}
