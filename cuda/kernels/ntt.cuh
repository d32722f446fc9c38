// NTT building blocks shared by the kernels (ntt.cu) and the CPU tests (which run the same
// code block by block and thread by thread on the host).
//
// A transform of n = 2^L points is the radix-2 network: L stages of butterflies, stage with
// half-size h pairing x and x + h inside blocks of 2h. One kernel launch ("pass") runs k
// consecutive stages: the elements that those stages mix are 2^k points spaced S apart
// (a "sub-problem"), so a thread block loads SUBS such sub-problems into shared memory, runs
// k stages there, and writes them back in place. Passes with large S take SUBS neighbouring
// sub-problems, so every row of a load is SUBS consecutive elements (coalesced).
//
// DIF (decimation in frequency): natural order in, bit-reversed order out, stages from
// h = n/2 down to 1, butterfly (x, y) -> (x + y, (x - y) w).
// DIT (decimation in time): bit-reversed order in, natural order out, stages from h = 1 up
// to n/2, butterfly (x, y) -> (x + w y, x - w y).
// In both, the twiddle of the pair whose upper element sits at offset j < h in its block of
// 2h is w = omega_{2h}^j = omega_n^(j n / 2h), read from a table of omega_n^e, e < n/2.
// Inverse transforms use omega^-1: omega_n^-e = -omega_n^(n/2 - e) for 0 < e < n/2.
#pragma once
#include "fr.cuh"

struct ntt_pass {
    fr_u32 log_n;        // transform size n = 2^log_n
    fr_u32 log_stride;   // S = 2^log_stride: distance between the elements of one sub-problem
    fr_u32 k;            // stages in this pass: a sub-problem has 2^k elements
    fr_u32 log_subs;     // sub-problems per block: the block holds 2^(log_subs + k) elements
    fr_u64 total;        // elements over the whole batch (batch * n)
    fr_u32 inverse;      // use omega^-1
    fr_u32 dit;          // DIT order (stages with growing h) instead of DIF
    fr_u32 scale;        // multiply by the power table: 0 never, 1 as loaded, 2 before storing
    fr_u32 scale_bitrev; // index the power table by the bit-reversed position
};

#define NTT_SCALE_NONE 0u
#define NTT_SCALE_ON_LOAD 1u
#define NTT_SCALE_ON_STORE 2u

// Elements a block holds.
FR_FN fr_u32 ntt_block_elems(const ntt_pass &p) { return 1u << (p.log_subs + p.k); }

// Shared-memory slot of element t of the block's sub-problem u. Sub-problems are padded apart
// so that a load or store row (the SUBS sub-problems at one t, then the next t) falls in
// distinct banks: with 2^k >= 32 the padding 32 / SUBS makes u * (2^k + pad) + t, over a warp's
// SUBS values of u and 32 / SUBS values of t, cover all 32 banks. Smaller sub-problems (only in
// transforms of under 2^5 points per pass) are not padded.
FR_FN fr_u32 ntt_pad(const ntt_pass &p) { return p.k >= 5 ? (32u >> p.log_subs) : 0u; }

FR_FN fr_u32 ntt_slot(const ntt_pass &p, fr_u32 u, fr_u32 t) { return u * ((1u << p.k) + ntt_pad(p)) + t; }

// Words per limb plane of the block's shared memory (the kernel's dynamic shared memory is 8 of
// these planes; PassParams::shared_bytes computes the same on the host).
FR_FN fr_u32 ntt_plane(const ntt_pass &p) { return ntt_block_elems(p) + (ntt_pad(p) << p.log_subs); }

// Sub-problems over the whole batch.
FR_FN fr_u64 ntt_subproblems(const ntt_pass &p) { return p.total >> p.k; }

// Where the block's i-th loaded element lives: global index and shared-memory slot (see
// ntt_slot). Returns false past the end.
FR_FN bool ntt_locate(const ntt_pass &p, fr_u64 block, fr_u32 i, fr_u64 &x, fr_u32 &slot) {
    const fr_u32 k = p.k, ls = p.log_stride, lsubs = p.log_subs;
    if (ls >= lsubs) {
        // S >= SUBS: row t holds the SUBS sub-problems with consecutive offsets lo0 + u.
        fr_u64 q0 = block << lsubs;
        fr_u64 hi = q0 >> ls;
        fr_u64 lo0 = q0 & ((1ull << ls) - 1);
        fr_u32 u = i & ((1u << lsubs) - 1);
        fr_u32 t = i >> lsubs;
        x = (hi << (k + ls)) + ((fr_u64)t << ls) + lo0 + u;
        slot = ntt_slot(p, u, t);
    } else {
        // S < SUBS: the block's sub-problems cover one contiguous range; load it in order.
        x = (block << (lsubs + k)) + i;
        fr_u32 hi_l = i >> (k + ls);
        fr_u32 rem = i & ((1u << (k + ls)) - 1);
        fr_u32 t = rem >> ls;
        fr_u32 lo = rem & ((1u << ls) - 1);
        slot = ntt_slot(p, (hi_l << ls) | lo, t);
    }
    return x < p.total;
}

// Twiddle omega_n^(+-e) for 0 <= e < n/2 from the table of omega_n^e.
FR_FN fr_t ntt_twiddle(const fr_t *table, fr_u64 half_n, fr_u64 e, fr_u32 inverse) {
    if (!inverse) return table[e];
    if (e == 0) return fr_one();
    return fr_neg(table[half_n - e]);
}

// Shared memory holds the block's elements limb-planar (limb l of slot s at l * E + s, E the
// plane size), so a warp touching consecutive slots touches consecutive banks.
FR_FN fr_t ntt_smem_get(const fr_u32 *sm, fr_u32 E, fr_u32 s) {
    fr_t v;
#pragma unroll
    for (int l = 0; l < FR_LIMBS; l++) v.l[l] = sm[l * E + s];
    return v;
}

FR_FN void ntt_smem_put(fr_u32 *sm, fr_u32 E, fr_u32 s, const fr_t &v) {
#pragma unroll
    for (int l = 0; l < FR_LIMBS; l++) sm[l * E + s] = v.l[l];
}

// Butterfly number b (0 <= b < E/2) of the local stage with half-size 2^log_hp, on the block's
// shared memory. Skips butterflies of sub-problems past the end of the batch.
FR_FN void ntt_butterfly(const ntt_pass &p, const fr_t *table, fr_u64 block, fr_u32 *sm,
                         fr_u32 b, fr_u32 log_hp) {
    const fr_u32 k = p.k, E = ntt_plane(p);
    fr_u32 u = b >> (k - 1);
    fr_u32 bb = b & ((1u << (k - 1)) - 1);
    fr_u64 q = (block << p.log_subs) + u;
    if (q >= ntt_subproblems(p)) return;
    fr_u32 hp = 1u << log_hp;
    fr_u32 jl = bb & (hp - 1);
    fr_u32 t1 = ((bb >> log_hp) << (log_hp + 1)) | jl;
    fr_u32 s1 = ntt_slot(p, u, t1), s2 = s1 + hp;
    // Offset of the upper element in its block of 2h (h = hp * S), and its twiddle exponent
    // j * n / 2h.
    fr_u64 lo = q & ((1ull << p.log_stride) - 1);
    fr_u64 j = ((fr_u64)jl << p.log_stride) | lo;
    fr_u64 e = j << (p.log_n - 1 - log_hp - p.log_stride);
    fr_t w = ntt_twiddle(table, 1ull << (p.log_n - 1), e, p.inverse);
    fr_t x = ntt_smem_get(sm, E, s1);
    fr_t y = ntt_smem_get(sm, E, s2);
    fr_t o1, o2;
    if (p.dit) {
        fr_t wy = fr_mul(w, y);
        o1 = fr_add(x, wy);
        o2 = fr_sub(x, wy);
    } else {
        o1 = fr_add(x, y);
        o2 = fr_mul(fr_sub(x, y), w);
    }
    ntt_smem_put(sm, E, s1, o1);
    ntt_smem_put(sm, E, s2, o2);
}

// log2 of the local half-size at local stage r (0 <= r < k): DIF runs h from large to small.
FR_FN fr_u32 ntt_stage_log_hp(const ntt_pass &p, fr_u32 r) {
    return p.dit ? r : p.k - 1 - r;
}

// Reverse the low `bits` bits of x.
FR_FN fr_u64 ntt_bitrev(fr_u64 x, fr_u32 bits) {
    if (bits == 0) return 0;
#if defined(__CUDA_ARCH__)
    return __brevll(x) >> (64 - bits);
#else
    fr_u64 r = 0;
    for (fr_u32 i = 0; i < bits; i++) r |= ((x >> i) & 1ull) << (bits - 1 - i);
    return r;
#endif
}

// c * g^e from two tables covering e < 2^27: lo[e mod 2^14] * hi[e >> 14], where hi already
// carries the constant c. Used for coset shifts, 1/n and 1/Z scaling, and to expand twiddles.
#define NTT_POW_LO_BITS 14
#define NTT_POW_HI_BITS 13
#define NTT_POW_TABLE_LEN ((1 << NTT_POW_LO_BITS) + (1 << NTT_POW_HI_BITS))

FR_FN fr_t ntt_pow_from_table(const fr_t *table, fr_u64 e) {
    return fr_mul(table[e & ((1u << NTT_POW_LO_BITS) - 1)], table[(1u << NTT_POW_LO_BITS) + (e >> NTT_POW_LO_BITS)]);
}

// Element i of a batch of n-point polynomials, scaled by c * g^e with e its index in the
// polynomial (or the bit-reversed index, for data in bit-reversed order).
FR_FN fr_t ntt_scale_one(const fr_t *table, fr_t v, fr_u64 i, fr_u32 log_n, fr_u32 bitrev) {
    fr_u64 idx = i & ((1ull << log_n) - 1);
    fr_u64 e = bitrev ? ntt_bitrev(idx, log_n) : idx;
    return fr_mul(v, ntt_pow_from_table(table, e));
}

// Twiddle table entry e: omega^e from the power table of omega (c = 1).
FR_FN fr_t ntt_twiddle_entry(const fr_t *pow_table, fr_u64 e) {
    return ntt_pow_from_table(pow_table, e);
}

// The block's i-th element: global memory to shared memory, and back, with the pass's
// scaling folded in (saving a separate pass over memory).
FR_FN void ntt_pass_load(const ntt_pass &p, const fr_t *data, const fr_t *scale, fr_u64 block, fr_u32 *sm,
                         fr_u32 i) {
    fr_u64 x;
    fr_u32 slot;
    if (!ntt_locate(p, block, i, x, slot)) return;
    fr_t v = data[x];
    if (p.scale == NTT_SCALE_ON_LOAD) v = ntt_scale_one(scale, v, x, p.log_n, p.scale_bitrev);
    ntt_smem_put(sm, ntt_plane(p), slot, v);
}

FR_FN void ntt_pass_store(const ntt_pass &p, fr_t *data, const fr_t *scale, fr_u64 block, const fr_u32 *sm,
                          fr_u32 i) {
    fr_u64 x;
    fr_u32 slot;
    if (!ntt_locate(p, block, i, x, slot)) return;
    fr_t v = ntt_smem_get(sm, ntt_plane(p), slot);
    if (p.scale == NTT_SCALE_ON_STORE) v = ntt_scale_one(scale, v, x, p.log_n, p.scale_bitrev);
    data[x] = v;
}

// Bit-reversal permutation, in place: global element g swaps with its partner when it is the
// smaller of the pair.
FR_FN void ntt_bitrev_one(fr_t *data, fr_u64 g, fr_u32 log_n) {
    fr_u64 i = g & ((1ull << log_n) - 1);
    fr_u64 j = ntt_bitrev(i, log_n);
    if (i < j) {
        fr_u64 gj = (g - i) + j;
        fr_t a = data[g], b = data[gj];
        data[g] = b;
        data[gj] = a;
    }
}

// Groth16 H, pointwise on the coset: a <- a * b - c, written in bit-reversed order. The pair
// (i, rev(i)) is handled by the call for the smaller index, so the permutation is in place.
FR_FN void h_pointwise_one(fr_t *a, const fr_t *b, const fr_t *c, fr_u64 i, fr_u32 log_n) {
    fr_u64 j = ntt_bitrev(i, log_n);
    if (i > j) return;
    fr_t vi = fr_sub(fr_mul(a[i], b[i]), c[i]);
    if (i == j) {
        a[i] = vi;
    } else {
        fr_t vj = fr_sub(fr_mul(a[j], b[j]), c[j]);
        a[i] = vj;
        a[j] = vi;
    }
}
