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

// =============================================================================================
// Register-radix passes (ntt_radix_kernel): the same passes (ntt_pass: sub-problems, element
// placement, scaling) computed with fewer trips through shared memory.
//
// Each thread keeps 2^R elements of one sub-problem in registers (R = min(3, k)) and runs up to
// R consecutive stages on them before they go back to shared memory: a "round". A pass of k
// stages is ceil(k / R) rounds; the short round comes first in DIF (largest half-sizes) and
// last in DIT, so that the round on the smallest half-sizes always has R stages. The first
// round reads its elements straight from global memory (scaling on load folded in) and the last
// writes them straight back (scaling on store folded in), so a pass of 8 stages makes two
// exchanges through shared memory instead of eight, with two barriers, and every thread has
// 2^(R-1) independent butterflies per stage to overlap.
//
// A round with half-sizes 2^s .. 2^(s+r-1) works on groups: the 2^r elements
// t = hi * 2^(s+r) + i * 2^s + lo (i < 2^r) of one sub-problem u; thread `tid` of T takes
// groups tid, tid + T, .. (2^(R-r) of them). Stage q of the round (half-size 2^(s+q)) pairs i
// and i + 2^q.
//
// Twiddles as in ntt_butterfly. Products by a twiddle of 1 are skipped where that is uniform
// over the warp: in passes with stride 1, the round on half-sizes 1, 2, 4 (7 of its 12 products
// per group). The inverse twiddle omega^-e = -omega^(n/2-e) is applied by swapping the
// subtraction's operands instead of negating it.
// =============================================================================================
//
// `lr` (log2 of the elements per thread at most) is 3 in ntt_radix_kernel and 2 in
// ntt_radix4_kernel (4 elements per thread, twice the threads, fewer registers), a compile-time
// constant in each.
#define NTTR_MAX_LOG_RADIX 3u

FR_FN fr_u32 nttr_log_radix(const ntt_pass &p, fr_u32 lr) { return p.k < lr ? p.k : lr; }

// Threads per block.
FR_FN fr_u32 nttr_threads(const ntt_pass &p, fr_u32 lr) { return 1u << (p.log_subs + p.k - nttr_log_radix(p, lr)); }

FR_FN fr_u32 nttr_rounds(const ntt_pass &p, fr_u32 lr) {
    const fr_u32 R = nttr_log_radix(p, lr);
    return (p.k + R - 1) / R;
}

// Round j (in execution order) covers local half-sizes 2^s .. 2^(s+r-1).
FR_FN void nttr_round_shape(const ntt_pass &p, fr_u32 lr, fr_u32 j, fr_u32 &s, fr_u32 &r) {
    const fr_u32 R = nttr_log_radix(p, lr), rounds = nttr_rounds(p, lr);
    const fr_u32 short_r = p.k - R * (rounds - 1);
    if (p.dit) {
        r = (j + 1 == rounds) ? short_r : R;
        s = R * j;
    } else {
        r = (j == 0) ? short_r : R;
        s = (j == 0) ? p.k - short_r : p.k - short_r - R * j;
    }
}

// Group g of a round: its sub-problem u (in the block) and the hi, lo parts of its elements'
// local indices. Passes whose rows are SUBS consecutive sub-problems (S >= SUBS) put u in the
// lowest bits of g, so that neighbouring lanes read neighbouring global elements; the others
// (S < SUBS: sub-problems are contiguous ranges) put lo, then hi, lowest.
FR_FN void nttr_group(const ntt_pass &p, fr_u32 s, fr_u32 r, fr_u32 g, fr_u32 &u, fr_u32 &hi, fr_u32 &lo) {
    const fr_u32 lsubs = p.log_subs, hbits = p.k - s - r;
    if (p.log_stride >= lsubs) {
        u = g & ((1u << lsubs) - 1);
        g >>= lsubs;
        lo = g & ((1u << s) - 1);
        hi = g >> s;
    } else {
        lo = g & ((1u << s) - 1);
        g >>= s;
        hi = g & ((1u << hbits) - 1);
        u = g >> hbits;
    }
}

// Shared memory of a radix pass: two planes of 16 bytes per element (limbs 0-3, limbs 4-7),
// E elements each, so an element moves as two 16-byte accesses. Slot of element t of sub-problem
// u: sl = u * 2^k + t with bits 0..2 XORed with (sl >> 3) + (sl >> 6) + (sl >> 9) (mod 8), a
// function of the untouched higher bits, so the map is a permutation. It spreads the strided
// groups of a round over the 8 bank groups of a 16-byte access: over the passes of 2^20..2^27,
// 1.00 to 1.54 times the conflict-free number of shared-memory wavefronts (a model of every
// access of every round; without the XOR, up to 8 times).
FR_FN fr_u32 nttr_slot(const ntt_pass &p, fr_u32 u, fr_u32 t) {
    const fr_u32 sl = (u << p.k) | t;
    return sl ^ (((sl >> 3) + (sl >> 6) + (sl >> 9)) & 7u);
}

FR_FN fr_t nttr_smem_get(const fr_u32 *sm, fr_u32 E, fr_u32 slot) {
    fr_t v;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const fr_u32 *src = sm + 4 * ((fr_u64)h * E + slot);
#if defined(__CUDA_ARCH__)
        const uint4 q = *reinterpret_cast<const uint4 *>(src);
        v.l[4 * h] = q.x;
        v.l[4 * h + 1] = q.y;
        v.l[4 * h + 2] = q.z;
        v.l[4 * h + 3] = q.w;
#else
        for (int l = 0; l < 4; l++) v.l[4 * h + l] = src[l];
#endif
    }
    return v;
}

FR_FN void nttr_smem_put(fr_u32 *sm, fr_u32 E, fr_u32 slot, const fr_t &v) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        fr_u32 *dst = sm + 4 * ((fr_u64)h * E + slot);
#if defined(__CUDA_ARCH__)
        *reinterpret_cast<uint4 *>(dst) = make_uint4(v.l[4 * h], v.l[4 * h + 1], v.l[4 * h + 2], v.l[4 * h + 3]);
#else
        for (int l = 0; l < 4; l++) dst[l] = v.l[4 * h + l];
#endif
    }
}

// Sub-problem q of the batch (block's u-th) and the global index of its element t; false past
// the end of the batch.
FR_FN bool nttr_subproblem(const ntt_pass &p, fr_u64 block, fr_u32 u, fr_u64 &q) {
    q = (block << p.log_subs) + u;
    return q < ntt_subproblems(p);
}

FR_FN fr_u64 nttr_global(const ntt_pass &p, fr_u64 q, fr_u32 t) {
    const fr_u32 ls = p.log_stride;
    return ((q >> ls) << (p.k + ls)) + ((fr_u64)t << ls) + (q & ((1ull << ls) - 1));
}

// ntt_scale_one as a real call on the device: the rounds that load or store from global memory
// scale each of their elements, and inlining those two products per element into every round
// instance doubled the kernel's code (35,000 SASS instructions instead of 15,000).
#if defined(__CUDA_ARCH__)
__device__ __noinline__ fr_t nttr_scale(const fr_t *table, fr_t v, fr_u64 i, fr_u32 log_n, fr_u32 bitrev) {
    return ntt_scale_one(table, v, i, log_n, bitrev);
}
#else
FR_FN fr_t nttr_scale(const fr_t *table, fr_t v, fr_u64 i, fr_u32 log_n, fr_u32 bitrev) {
    return ntt_scale_one(table, v, i, log_n, bitrev);
}
#endif

FR_FN fr_t nttr_ldg(const fr_t *a, fr_u64 i) {
#if defined(__CUDA_ARCH__)
    const uint4 *q = reinterpret_cast<const uint4 *>(a + i);
    const uint4 x = __ldg(q), y = __ldg(q + 1);
    fr_t v;
    v.l[0] = x.x; v.l[1] = x.y; v.l[2] = x.z; v.l[3] = x.w;
    v.l[4] = y.x; v.l[5] = y.y; v.l[6] = y.z; v.l[7] = y.w;
    return v;
#else
    return a[i];
#endif
}

// The stages of one round on the 2^r elements of a group (r = 1..3, compile time), in
// registers. lo: the group's low index bits; lo_sub: the sub-problem's offset in its stride.
template <int r, bool DIT>
FR_FN void nttr_stages(const ntt_pass &p, const fr_t *table, fr_t *v, fr_u32 s, fr_u32 lo, fr_u32 lo_sub) {
    const fr_u32 half_n = 1u << (p.log_n - 1);
    // Products by 1 known for the whole warp: stride 1, half-sizes from 1 (s = 0).
    const bool uniform_one = p.log_stride == 0 && s == 0;
#pragma unroll
    for (int qq = 0; qq < r; qq++) {
        const int q = DIT ? qq : r - 1 - qq;
        const fr_u32 log_hp = s + (fr_u32)q;
        const fr_u32 shift = p.log_n - 1 - log_hp - p.log_stride;
#pragma unroll
        for (int i = 0; i < (1 << r); i++) {
            if (i & (1 << q)) continue;
            fr_t &x = v[i];
            fr_t &y = v[i + (1 << q)];
            if (uniform_one && (i & ((1 << q) - 1)) == 0) {
                // w = 1.
                const fr_t a = fr_add(x, y), b = fr_sub(x, y);
                x = a;
                y = b;
                continue;
            }
            const fr_u32 jl = ((fr_u32)(i & ((1 << q) - 1)) << s) | lo;
            const fr_u32 e = ((jl << p.log_stride) | lo_sub) << shift;
            // Inverse: w' = -omega^-e = omega^(n/2-e), and -1 for e = 0 (possible only when the
            // low bits of i are zero, known at compile time), so the sign is the same for every
            // butterfly of the pass.
            fr_t w = nttr_ldg(table, p.inverse ? (half_n - e) & (half_n - 1) : e);
            if (p.inverse && (i & ((1 << q) - 1)) == 0 && e == 0) w = fr_minus_one();
            if (DIT) {
                const fr_t wy = fr_mul(w, y);
                if (p.inverse) {
                    const fr_t a = fr_sub(x, wy), b = fr_add(x, wy);
                    x = a;
                    y = b;
                } else {
                    const fr_t a = fr_add(x, wy), b = fr_sub(x, wy);
                    x = a;
                    y = b;
                }
            } else {
                const fr_t a = fr_add(x, y);
                const fr_t d = p.inverse ? fr_sub(y, x) : fr_sub(x, y);
                x = a;
                y = fr_mul(d, w);
            }
        }
    }
}

// Round j of the pass for thread tid: read each of its groups (from global memory in the first
// round, from shared memory after), run the round's stages, write them (to global memory in
// the last round, to shared memory before). A barrier must separate rounds.
template <int r>
FR_FN void nttr_round_r(const ntt_pass &p, fr_u32 lr, fr_t *data, const fr_t *table, const fr_t *scale,
                        fr_u64 block, fr_u32 *sm, fr_u32 tid, fr_u32 j, fr_u32 s) {
    const fr_u32 R = nttr_log_radix(p, lr), E = ntt_block_elems(p);
    const bool first = j == 0, last = j + 1 == nttr_rounds(p, lr);
    // A round of fewer than R stages has 2^(R - r) groups per thread: group gi * threads + tid,
    // so that neighbouring lanes take neighbouring groups in each of them (coalesced rows in
    // the first round of a pass; 1.00-1.42 times the conflict-free shared-memory wavefronts
    // over the 2^20..2^24 plans, against 1.15-1.46 with a thread's groups adjacent).
    const fr_u32 groups = 1u << (R - (fr_u32)r), threads = nttr_threads(p, lr);
    for (fr_u32 gi = 0; gi < groups; gi++) {
        fr_u32 u, hi, lo;
        nttr_group(p, s, (fr_u32)r, gi * threads + tid, u, hi, lo);
        fr_u64 q;
        if (!nttr_subproblem(p, block, u, q)) continue;
        const fr_u32 t0 = (hi << (s + (fr_u32)r)) | lo;
        fr_t v[1 << r];
#pragma unroll
        for (int i = 0; i < (1 << r); i++) {
            const fr_u32 t = t0 | ((fr_u32)i << s);
            if (first) {
                const fr_u64 x = nttr_global(p, q, t);
                v[i] = data[x];
                if (p.scale == NTT_SCALE_ON_LOAD) v[i] = nttr_scale(scale, v[i], x, p.log_n, p.scale_bitrev);
            } else {
                v[i] = nttr_smem_get(sm, E, nttr_slot(p, u, t));
            }
        }
        const fr_u32 lo_sub = (fr_u32)(q & ((1ull << p.log_stride) - 1));
        if (p.dit) nttr_stages<r, true>(p, table, v, s, lo, lo_sub);
        else nttr_stages<r, false>(p, table, v, s, lo, lo_sub);
#pragma unroll
        for (int i = 0; i < (1 << r); i++) {
            const fr_u32 t = t0 | ((fr_u32)i << s);
            if (last) {
                const fr_u64 x = nttr_global(p, q, t);
                fr_t o = v[i];
                if (p.scale == NTT_SCALE_ON_STORE) o = nttr_scale(scale, o, x, p.log_n, p.scale_bitrev);
                data[x] = o;
            } else {
                nttr_smem_put(sm, E, nttr_slot(p, u, t), v[i]);
            }
        }
    }
}

FR_FN void nttr_round(const ntt_pass &p, fr_u32 lr, fr_t *data, const fr_t *table, const fr_t *scale,
                      fr_u64 block, fr_u32 *sm, fr_u32 tid, fr_u32 j) {
    fr_u32 s, r;
    nttr_round_shape(p, lr, j, s, r);
    if (r == 3 && lr >= 3) nttr_round_r<3>(p, lr, data, table, scale, block, sm, tid, j, s);
    else if (r == 2) nttr_round_r<2>(p, lr, data, table, scale, block, sm, tid, j, s);
    else nttr_round_r<1>(p, lr, data, table, scale, block, sm, tid, j, s);
}

// =============================================================================================
// Bit reversal by tiles (ntt_bitrev_tiled_kernel), for polynomials of 2^L >= 2^8 points.
// Index bits (a: top 4, c: middle L - 8, d: low 4) reverse to (rev d, rev c, rev a): the 256
// elements with middle c (a tile: 16 rows of 16 consecutive elements) go to the tile with middle
// rev(c), transposed. A block owns the pair of tiles c <= rev(c), reads both and writes both,
// so the permutation is in place, and every global access is a row of 16 consecutive elements
// (512 bytes). Blocks with c > rev(c) have nothing to do.
// =============================================================================================
#define NTT_BR_TILE_BITS 4u
#define NTT_BR_TILE (1u << NTT_BR_TILE_BITS)
#define NTT_BR_ROW (NTT_BR_TILE + 1u)                // padded row: transposed reads spread over banks
#define NTT_BR_PLANE (NTT_BR_TILE * NTT_BR_ROW)      // words per limb plane of one tile
#define NTT_BR_THREADS (NTT_BR_TILE * NTT_BR_TILE)   // one thread per element of a tile
#define NTT_BR_SMEM_WORDS (2u * FR_LIMBS * NTT_BR_PLANE)

FR_FN fr_u32 ntt_bitrev_bits(fr_u32 x, fr_u32 bits) { return (fr_u32)ntt_bitrev(x, bits); }

// Blocks of the launch over `total` elements of 2^log_n-point polynomials.
FR_FN fr_u64 ntt_bitrev_tiled_blocks(fr_u64 total) { return total >> (2 * NTT_BR_TILE_BITS); }

// Block b: its polynomial's first element, and the middle bits c, c' = rev(c) of its tiles;
// false when the block has nothing to do.
FR_FN bool ntt_bitrev_tiles(fr_u64 b, fr_u32 log_n, fr_u64 &base, fr_u32 &c, fr_u32 &c2) {
    const fr_u32 mid = log_n - 2 * NTT_BR_TILE_BITS;
    base = (b >> mid) << log_n;
    c = (fr_u32)(b & ((1ull << mid) - 1));
    c2 = ntt_bitrev_bits(c, mid);
    return c <= c2;
}

// Thread tid puts value(x) of element x = (a, c, d), a = tid / 16, d = tid % 16, of both tiles
// into shared memory.
template <class Value>
FR_FN void ntt_tiles_load(Value value, fr_u64 b, fr_u32 log_n, fr_u32 *sm, fr_u32 tid) {
    fr_u64 base;
    fr_u32 c, c2;
    if (!ntt_bitrev_tiles(b, log_n, base, c, c2)) return;
    const fr_u32 a = tid >> NTT_BR_TILE_BITS, d = tid & (NTT_BR_TILE - 1);
    const fr_u32 cs[2] = {c, c2};
    for (int h = 0; h < 2; h++) {
        if (h == 1 && c2 == c) break;
        const fr_u64 x = base + ((fr_u64)a << (log_n - NTT_BR_TILE_BITS)) + ((fr_u64)cs[h] << NTT_BR_TILE_BITS) + d;
        const fr_t v = value(x);
        fr_u32 *tile = sm + (fr_u32)h * FR_LIMBS * NTT_BR_PLANE;
        for (int l = 0; l < FR_LIMBS; l++) tile[l * NTT_BR_PLANE + a * NTT_BR_ROW + d] = v.l[l];
    }
}

// The bit reversal's load: the elements themselves.
FR_FN void ntt_bitrev_tile_load(const fr_t *data, fr_u64 b, fr_u32 log_n, fr_u32 *sm, fr_u32 tid) {
    ntt_tiles_load([&](fr_u64 x) { return data[x]; }, b, log_n, sm, tid);
}

// Groth16 H's pointwise step by tiles (h_pointwise_tiled_kernel): a * b - c is computed as the
// tiles are loaded, and ntt_bitrev_tile_store writes it to `a` in bit-reversed order, as
// h_pointwise_one does. Every global access is a row of 16 consecutive elements, where
// h_pointwise_one reads and writes the partner of each element at a bit-reversed index.
FR_FN void h_pointwise_tile_load(const fr_t *a, const fr_t *b, const fr_t *c, fr_u64 blk, fr_u32 log_n,
                                 fr_u32 *sm, fr_u32 tid) {
    ntt_tiles_load([&](fr_u64 x) { return fr_sub(fr_mul(a[x], b[x]), c[x]); }, blk, log_n, sm, tid);
}

// Thread tid writes element (a', d') = (tid / 16, tid % 16) of both tiles: the element of the
// other tile at (rev d', rev a').
FR_FN void ntt_bitrev_tile_store(fr_t *data, fr_u64 b, fr_u32 log_n, const fr_u32 *sm, fr_u32 tid) {
    fr_u64 base;
    fr_u32 c, c2;
    if (!ntt_bitrev_tiles(b, log_n, base, c, c2)) return;
    const fr_u32 a = tid >> NTT_BR_TILE_BITS, d = tid & (NTT_BR_TILE - 1);
    const fr_u32 sa = ntt_bitrev_bits(d, NTT_BR_TILE_BITS), sd = ntt_bitrev_bits(a, NTT_BR_TILE_BITS);
    const fr_u32 cs[2] = {c, c2};
    for (int h = 0; h < 2; h++) {
        if (h == 1 && c2 == c) break;
        // Tile h's elements go to the tile with middle bits rev(cs[h]) = cs[1 - h].
        const fr_u32 *tile = sm + (fr_u32)h * FR_LIMBS * NTT_BR_PLANE;
        fr_t v;
        for (int l = 0; l < FR_LIMBS; l++) v.l[l] = tile[l * NTT_BR_PLANE + sa * NTT_BR_ROW + sd];
        const fr_u32 dst = cs[c2 == c ? 0 : 1 - h];
        const fr_u64 x = base + ((fr_u64)a << (log_n - NTT_BR_TILE_BITS)) + ((fr_u64)dst << NTT_BR_TILE_BITS) + d;
        data[x] = v;
    }
}
