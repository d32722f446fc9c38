// The G2 MSM kernels with the accumulation's prefetch of the next point (G1's setting; the
// product's G2 operations turn it off, g2.cuh), for comparison on the GPU.
#include "g2.cuh"

struct g2_ops_prefetch : gpud::g2_ops {
    static constexpr bool prefetch = true;
};

#define GPUD_MSM_CURVE g2_ops_prefetch
#include "msm_g2.cu"
