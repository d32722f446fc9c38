// MSM kernels over BLS12-381 G1 (or G2, with GPUD_MSM_G2=1: msm_g2.cu): thin wrappers over the
// per-thread steps of msm.cuh (which the host tests run on the CPU), one thread per index. The
// launcher (cuda/src/msm/gpu.rs) queues them in the order of the plan (cuda/src/msm/plan.rs).
// Both groups' modules export the same kernel names with the group's point types.
//
// Heavy kernels (point arithmetic) run 128 threads a block; the light ones (scalars, scan) 256.
// msm_noinline.cu and msm_nocap.cu include this file with other settings, to compare builds.
#ifndef GPUD_MSM_CU
#define GPUD_MSM_CU

// GPUD_MSM_CURVE, when defined, names the point operations (a variant build's); else G2 with
// GPUD_MSM_G2=1, G1 otherwise.
#ifndef GPUD_MSM_CURVE
#if defined(GPUD_MSM_G2) && GPUD_MSM_G2
#include "g2.cuh"
#define GPUD_MSM_CURVE gpud::g2_ops
#else
#include "g1.cuh"
#define GPUD_MSM_CURVE gpud::g1_ops
#endif
#endif
typedef GPUD_MSM_CURVE msm_curve;
#include "msm.cuh"

using namespace gpud;

typedef msm_curve::affine msm_affine;
typedef msm_curve::xyzz msm_xyzz;
typedef msm_curve::jacobian msm_jacobian;

// Minimum resident blocks per multiprocessor asked of ptxas for the accumulation and combining
// kernels (a register cap of 65536 / (128 * GPUD_MSM_MIN_BLOCKS)); 0 leaves it to ptxas.
#ifndef GPUD_MSM_MIN_BLOCKS
#define GPUD_MSM_MIN_BLOCKS 3
#endif
#if GPUD_MSM_MIN_BLOCKS > 0
#define GPUD_MSM_HOT_BOUNDS __launch_bounds__(128, GPUD_MSM_MIN_BLOCKS)
#else
#define GPUD_MSM_HOT_BOUNDS __launch_bounds__(128)
#endif

__device__ __forceinline__ uint32_t msm_tid() { return blockIdx.x * blockDim.x + threadIdx.x; }

// Step 1: canonical scalars (with the negate flag in bit 255) and counts per bucket key.
// Every lane of the last warp takes part in the warp-wide counting, so the grid is whole warps.
extern "C" __global__ void __launch_bounds__(256)
    msm_prepare_kernel(uint32_t n, uint32_t c, uint32_t windows, const uint32_t* mont,
                       uint32_t* prepared, uint32_t* counts) {
    msm_scalar_prepare(msm_tid(), n, c, windows, mont, prepared, counts);
}

// Step 2: chunk sums of the counts, then each chunk rewritten as its exclusive prefix sums.
extern "C" __global__ void __launch_bounds__(256)
    msm_scan_sum_kernel(uint32_t len, uint32_t chunk, const uint32_t* data, uint32_t* sums) {
    msm_scan_chunk_sum(msm_tid(), len, chunk, data, sums);
}

// bases == 0: a single chunk starting at 0.
extern "C" __global__ void __launch_bounds__(256)
    msm_scan_apply_kernel(uint32_t len, uint32_t chunk, uint32_t* data, const uint32_t* bases) {
    msm_scan_chunk_apply(msm_tid(), len, chunk, data, bases);
}

// Step 3: the counting sort's scatter.
extern "C" __global__ void __launch_bounds__(256)
    msm_scatter_kernel(uint32_t n, uint32_t c, uint32_t windows, const uint32_t* prepared,
                       const uint32_t* offsets, uint32_t* fill, uint64_t* entries) {
    msm_scatter(msm_tid(), n, c, windows, prepared, offsets, fill, entries);
}

// Step 4: segments of `seg` sorted entries per thread; the entry count is read on the device
// (offsets[keys]) so that nothing waits for the host.
extern "C" __global__ void GPUD_MSM_HOT_BOUNDS
    msm_accumulate_kernel(uint32_t threads, uint32_t seg, const uint32_t* total,
                          const uint64_t* entries, const msm_affine* bases, msm_xyzz* buckets,
                          uint32_t* out_keys, msm_xyzz* out_points) {
    uint32_t t = msm_tid();
    if (t >= threads) return;
    msm_entry_source<msm_curve> src;
    src.entries = entries;
    src.bases = bases;
    msm_segment_accumulate(t, seg, *total, src, buckets, out_keys, out_points);
}

// Step 5: one combining pass over the slots of the previous pass.
extern "C" __global__ void GPUD_MSM_HOT_BOUNDS
    msm_combine_kernel(uint32_t threads, uint32_t seg, uint32_t count, const uint32_t* in_keys,
                       const msm_xyzz* in_points, msm_xyzz* buckets, uint32_t* out_keys,
                       msm_xyzz* out_points) {
    uint32_t t = msm_tid();
    if (t >= threads) return;
    msm_slot_source<msm_curve> src;
    src.keys = in_keys;
    src.points = in_points;
    msm_segment_accumulate(t, seg, count, src, buckets, out_keys, out_points);
}

// Step 6: weighted bucket sums per chunk of buckets, then group sums down to one per window.
extern "C" __global__ void __launch_bounds__(128)
    msm_bucket_reduce_kernel(uint32_t windows, uint32_t b, uint32_t m, const uint32_t* offsets,
                             const msm_xyzz* buckets, msm_xyzz* out) {
    msm_bucket_reduce<msm_curve>(msm_tid(), windows, b, m, offsets, buckets, out);
}

extern "C" __global__ void __launch_bounds__(128)
    msm_group_sum_kernel(uint32_t windows, uint32_t per, uint32_t group, const msm_xyzz* in,
                         msm_xyzz* out) {
    msm_group_sum<msm_curve>(msm_tid(), windows, per, group, in, out);
}

// Step 7: window sums to Jacobian (blst_p1 / blst_p2 layout) for the host.
extern "C" __global__ void __launch_bounds__(128)
    msm_to_jacobian_kernel(uint32_t count, const msm_xyzz* in, msm_jacobian* out) {
    msm_to_jacobian<msm_curve>(msm_tid(), count, in, out);
}

#endif  // GPUD_MSM_CU
