// NTT kernels over BLS12-381 Fr: radix-2^k passes in shared memory (with coset, 1/n and 1/Z
// scaling folded into their loads or stores), bit reversal, and the pointwise step of the
// Groth16 H polynomial. Thin loops: the arithmetic
// and index math live in ntt.cuh and fr.cuh, which the CPU tests run on the host.
#include "ntt.cuh"

typedef unsigned long long u64;

__device__ __forceinline__ u64 first_index() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 grid_stride() { return (u64)gridDim.x * blockDim.x; }

// out[e] = omega^e for e < count, from the three-level power table of omega.
extern "C" __global__ void ntt_twiddles(fr_t *out, const fr_t *pow_table, u64 count) {
    for (u64 e = first_index(); e < count; e += grid_stride()) out[e] = ntt_twiddle_entry(pow_table, e);
}

// One pass of k stages over a batch stored back to back (see ntt.cuh). One block per SUBS
// sub-problems; dynamic shared memory: 32 bytes per element of the block. `scale` is a power
// table when p.scale asks for one.
extern "C" __global__ void __launch_bounds__(256) ntt_pass_kernel(fr_t *data, const fr_t *twiddles,
                                                                 const fr_t *scale, ntt_pass p) {
    extern __shared__ fr_u32 sm[];
    const fr_u32 E = ntt_block_elems(p);
    const u64 block = blockIdx.x;
    for (fr_u32 i = threadIdx.x; i < E; i += blockDim.x) ntt_pass_load(p, data, scale, block, sm, i);
    __syncthreads();
    for (fr_u32 r = 0; r < p.k; r++) {
        fr_u32 log_hp = ntt_stage_log_hp(p, r);
        for (fr_u32 b = threadIdx.x; b < E / 2; b += blockDim.x)
            ntt_butterfly(p, twiddles, block, sm, b, log_hp);
        __syncthreads();
    }
    for (fr_u32 i = threadIdx.x; i < E; i += blockDim.x) ntt_pass_store(p, data, scale, block, sm, i);
}

// A pass by register radix rounds (ntt.cuh: nttr_*): nttr_threads(p, 3) threads per block, one block
// per SUBS sub-problems; dynamic shared memory: 32 bytes per element of the block.
template <fr_u32 LR>
__device__ __forceinline__ void ntt_radix_body(fr_t *data, const fr_t *twiddles, const fr_t *scale, const ntt_pass &p) {
    extern __shared__ __align__(16) fr_u32 smr[];
    const u64 block = blockIdx.x;
    const fr_u32 rounds = nttr_rounds(p, LR);
    for (fr_u32 j = 0; j < rounds; j++) {
        if (j > 0) __syncthreads();
        nttr_round(p, LR, data, twiddles, scale, block, smr, threadIdx.x, j);
    }
}

extern "C" __global__ void __launch_bounds__(128) ntt_radix_kernel(fr_t *data, const fr_t *twiddles,
                                                                  const fr_t *scale, ntt_pass p) {
    ntt_radix_body<NTTR_MAX_LOG_RADIX>(data, twiddles, scale, p);
}

// The same with 4 elements per thread (rounds of at most 2 stages): nttr_threads(p, 2) threads.
extern "C" __global__ void __launch_bounds__(256) ntt_radix4_kernel(fr_t *data, const fr_t *twiddles,
                                                                   const fr_t *scale, ntt_pass p) {
    ntt_radix_body<2>(data, twiddles, scale, p);
}

// The same, compiled for 4 blocks of 256 threads per multiprocessor (64 registers, a few spilled)
// instead of 3 (80 registers): Nsight Compute shows the 80-register kernel latency-bound, with
// 6 warps per scheduler of which 1.3 are eligible on average.
extern "C" __global__ void __launch_bounds__(256, 4) ntt_radix4_occ4_kernel(fr_t *data, const fr_t *twiddles,
                                                                        const fr_t *scale, ntt_pass p) {
    ntt_radix_body<2>(data, twiddles, scale, p);
}

// Tiled in-place bit reversal (ntt.cuh: ntt_bitrev_tile_*), polynomials of 2^8 points or more:
// one block of 256 threads per middle index; blocks past the pair's smaller index return.
extern "C" __global__ void __launch_bounds__(NTT_BR_THREADS) ntt_bitrev_tiled_kernel(fr_t *data, fr_u32 log_n) {
    __shared__ fr_u32 tiles[NTT_BR_SMEM_WORDS];
    const u64 b = blockIdx.x;
    ntt_bitrev_tile_load(data, b, log_n, tiles, threadIdx.x);
    __syncthreads();
    ntt_bitrev_tile_store(data, b, log_n, tiles, threadIdx.x);
}

// Groth16 H, pointwise by tiles (ntt.cuh: h_pointwise_tile_load), polynomials of 2^8 points or
// more: a <- a * b - c in bit-reversed order, as h_pointwise; launched like the tiled bit reversal.
extern "C" __global__ void __launch_bounds__(NTT_BR_THREADS) h_pointwise_tiled_kernel(fr_t *a, const fr_t *b,
                                                                                   const fr_t *c, fr_u32 log_n) {
    __shared__ fr_u32 tiles[NTT_BR_SMEM_WORDS];
    const u64 blk = blockIdx.x;
    h_pointwise_tile_load(a, b, c, blk, log_n, tiles, threadIdx.x);
    __syncthreads();
    ntt_bitrev_tile_store(a, blk, log_n, tiles, threadIdx.x);
}

// In-place bit-reversal permutation of each 2^log_n-point polynomial of the batch.
extern "C" __global__ void ntt_bitrev_kernel(fr_t *data, fr_u32 log_n, u64 total) {
    for (u64 g = first_index(); g < total; g += grid_stride()) ntt_bitrev_one(data, g, log_n);
}

// Groth16 H: a <- a * b - c on the coset, in bit-reversed order.
extern "C" __global__ void h_pointwise(fr_t *a, const fr_t *b, const fr_t *c, fr_u32 log_n) {
    for (u64 i = first_index(); i < (1ull << log_n); i += grid_stride()) h_pointwise_one(a, b, c, i, log_n);
}

// c <- c * b element-wise over n elements: the C evaluations of a satisfied constraint system
// from the A and B ones (c_i = a_i * b_i, with c holding a copy of a), so C need not cross the
// host link.
extern "C" __global__ void h_product(fr_t *c, const fr_t *b, u64 n) {
    for (u64 i = first_index(); i < n; i += grid_stride()) c[i] = fr_mul(c[i], b[i]);
}
