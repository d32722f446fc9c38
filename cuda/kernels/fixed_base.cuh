// Fixed-base scalar multiplication in G1: k * G for many k and one G, from a table of
// d * 2^(8w) * G (w = 0..31 windows of 8 bits, d = 1..255), as the parameter generator needs
// (every point of a Groth16 proving key is a multiple of one G1 generator).
//
// Per scalar: at most 32 mixed additions (one per non-zero byte) into an XYZZ accumulator,
// then one inversion to affine. Scalars are canonical (not Montgomery), 8 x 32-bit limbs,
// little-endian; the output is blst's affine layout, infinity as (0, 0).
#ifndef GPUD_FIXED_BASE_CUH
#define GPUD_FIXED_BASE_CUH

#include "g1.cuh"

namespace gpud {

// Windows of 8 bits over a 256-bit scalar, and the non-zero digits of each.
#define GPUD_FB_WINDOWS 32
#define GPUD_FB_DIGITS 255

// k * G where table[w * 255 + d - 1] = d * 2^(8w) * G.
inline
#if defined(__CUDACC__)
    __host__ __device__
#endif
    g1_affine
    fixed_base_mul(const g1_affine* table, const uint32_t* k) {
    g1_xyzz acc = g1_xyzz_inf();
    for (int w = 0; w < GPUD_FB_WINDOWS; w++) {
        uint32_t d = (k[w >> 2] >> (8 * (w & 3))) & 0xffu;
        if (d != 0) g1_xyzz_add_affine(acc, table[w * GPUD_FB_DIGITS + (int)d - 1]);
    }
    return g1_xyzz_to_affine(acc);
}

}  // namespace gpud

#endif  // GPUD_FIXED_BASE_CUH
