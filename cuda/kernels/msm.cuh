// Pippenger MSM over BLS12-381 G1 and G2: the per-thread steps.
//
// The steps are generic over a point-operations struct `C` (g1_ops in g1.cuh, g2_ops in
// g2.cuh: the affine, XYZZ and Jacobian types and their additions), so both groups share one
// Pippenger; the scalar steps (1-3) do not depend on the group at all. The including module
// includes the curve header first (msm.cu does).
//
// Every step is a `__host__ __device__` function of a thread index; the kernels in msm.cu are
// thin wrappers that call them with their global thread index, and the host test harness
// (cuda/tests/host/fq_harness.cpp) runs the same functions over every index in a loop. The
// order of steps (the "plan") is driven from Rust (cuda/src/msm/plan.rs) on the GPU and
// mirrored by the harness.
//
// Steps, for n points, windows of c bits, W = ceil(255/c) windows, B = 2^(c-1) buckets each:
//  1. scalar_prepare: Montgomery scalar -> canonical s; if s > (r-1)/2 use r - s and negate
//     the point (so s < 2^254); signed c-bit digits in [-B, B]; count the digits per bucket
//     key = window * B + |digit| - 1 (zero digits are dropped: zero scalars cost nothing).
//  2. exclusive scan of the counts: bucket offsets, total entry count M = offsets[W*B].
//  3. scatter: each (key, point index, sign) lands at its bucket's offset plus a per-bucket
//     atomic rank: a counting sort (the order inside a bucket does not matter).
//  4. accumulate: thread t takes sorted entries [t*L, (t+1)*L) whatever the buckets are, so a
//     bucket holding a quarter of all points (witness scalars equal to one) is spread over
//     many threads; runs that start and end inside a thread go straight to their bucket,
//     runs cut by a segment edge go to two "slots" per thread.
//  5. combine: the same segmented pass over the slots (full XYZZ additions), repeated with
//     fewer threads until one thread is left; every bucket is then written exactly once.
//  6. bucket reduction: sum over b of b * S_b per window, in chunks of m buckets (running
//     sums, then the chunk's offset times its plain sum by double-and-add), and group sums
//     down to one XYZZ point per window.
//  7. to Jacobian; the host combines the W window sums by doubling (Horner).
#ifndef GPUD_MSM_CUH
#define GPUD_MSM_CUH

#include "fq.cuh"

namespace gpud {

// The scalar field Fr, only for leaving Montgomery form.
struct FrParams {
    static const int N = 8;
    static const uint32_t inv = 0xffffffffu;
    GPUD_HD static uint32_t m(int i) {
        switch (i) {
            case 0: return 0x00000001u;
            case 1: return 0xffffffffu;
            case 2: return 0xfffe5bfeu;
            case 3: return 0x53bda402u;
            case 4: return 0x09a1d805u;
            case 5: return 0x3339d808u;
            case 6: return 0x299d7d48u;
            default: return 0x73eda753u;
        }
    }
    // (r - 1) / 2
    GPUD_HD static uint32_t half(int i) {
        switch (i) {
            case 0: return 0x80000000u;
            case 1: return 0x7fffffffu;
            case 2: return 0x7fff2dffu;
            case 3: return 0xa9ded201u;
            case 4: return 0x04d0ec02u;
            case 5: return 0x199cec04u;
            case 6: return 0x94cebea4u;
            default: return 0x39f6d3a9u;
        }
    }
};

// Slot keys carry this bit when the slot holds no partial sum (a filler that keeps the slot
// array sorted by key); the low 31 bits are the bucket key.
#define GPUD_MSM_FILLER 0x80000000u
#define GPUD_MSM_KEY_MASK 0x7fffffffu
// Key of the slots of threads that got no entries; above every real key.
#define GPUD_MSM_SENTINEL 0x7fffffffu

GPUD_HD uint32_t msm_min(uint32_t a, uint32_t b) { return a < b ? a : b; }

// ---------------------------------------------------------------------------------------------
// 1. Scalars
// ---------------------------------------------------------------------------------------------

// Montgomery scalar (8 limbs) -> canonical s' and negate flag, written as 8 limbs with the
// flag in bit 255: s' = s if s <= (r-1)/2, else r - s with the flag set. s' < 2^254.
GPUD_HD void msm_scalar_canonical(const uint32_t* mont, uint32_t* out) {
    uint32_t s[8];
    mont_from<FrParams>(s, mont);
    uint32_t borrow;
    {
        carry_t c;
        uint32_t t = sub_cc(c, FrParams::half(0), s[0]);
        GPUD_UNROLL
        for (int j = 1; j < 8; j++) t = subc_cc(c, FrParams::half(j), s[j]);
        (void)t;
        borrow = subc(c, 0, 0);  // all ones when s > half
    }
    uint32_t neg[8];
    {
        carry_t c;
        neg[0] = sub_cc(c, FrParams::m(0), s[0]);
        GPUD_UNROLL
        for (int j = 1; j < 8; j++) neg[j] = subc_cc(c, FrParams::m(j), s[j]);
    }
    GPUD_UNROLL
    for (int j = 0; j < 8; j++) out[j] = (neg[j] & borrow) | (s[j] & ~borrow);
    out[7] |= borrow & 0x80000000u;
}

// Bits [pos, pos + c) of a 256-bit little-endian value, c <= 31.
GPUD_HD uint32_t msm_bits(const uint32_t* s, uint32_t pos, uint32_t c) {
    uint32_t limb = pos >> 5;
    uint32_t sh = pos & 31u;
    if (limb >= 8) return 0;
    uint64_t v = s[limb];
    if (limb + 1 < 8) v |= (uint64_t)s[limb + 1] << 32;
    return (uint32_t)(v >> sh) & ((1u << c) - 1u);
}

// Signed digit of window j for the canonical scalar s (flag bit already masked off), given the
// carry out of window j-1. Returns |digit| (0..B) and sets neg and the carry into window j+1.
GPUD_HD uint32_t msm_digit(const uint32_t* s, uint32_t j, uint32_t c, uint32_t& carry,
                           uint32_t& neg) {
    uint32_t b = 1u << (c - 1);
    uint32_t v = msm_bits(s, j * c, c) + carry;
    if (v > b) {
        carry = 1;
        neg = 1;
        return (b << 1) - v;  // digit v - 2^c, magnitude 2^c - v (0 when v = 2^c)
    }
    carry = 0;
    neg = 0;
    return v;
}

// Canonical scalar words from a prepared scalar (flag cleared) and its flag.
GPUD_HD uint32_t msm_load_prepared(const uint32_t* prepared, uint32_t* s) {
    GPUD_UNROLL
    for (int j = 0; j < 8; j++) s[j] = prepared[j];
    uint32_t flag = s[7] >> 31;
    s[7] &= 0x7fffffffu;
    return flag;
}

// ---------------------------------------------------------------------------------------------
// Atomic counters. On the device the lanes of a warp that hit one key share one atomic (the
// hot bucket of witness scalars would otherwise serialize); all 32 lanes must call it together
// (pass key = 0xffffffff to take part without counting).
// ---------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ uint32_t msm_atomic_slot(uint32_t* counters, uint32_t key) {
    uint32_t lane = threadIdx.x & 31u;
    uint32_t peers = __match_any_sync(0xffffffffu, key);
    uint32_t leader = __ffs(peers) - 1;
    uint32_t base = 0;
    if (key != 0xffffffffu && lane == leader) base = atomicAdd(&counters[key], __popc(peers));
    base = __shfl_sync(0xffffffffu, base, leader);
    return base + __popc(peers & ((1u << lane) - 1u));
}
#else
inline uint32_t msm_atomic_slot(uint32_t* counters, uint32_t key) {
    if (key == 0xffffffffu) return 0;
    return counters[key]++;
}
#endif

// Step 1 for scalar i (threads i >= n take part in the warp-wide counting with no key).
// mont: n * 8 words; prepared: n * 8 words; counts: W*B + 1 words, zeroed.
GPUD_HD void msm_scalar_prepare(uint32_t i, uint32_t n, uint32_t c, uint32_t windows,
                                const uint32_t* mont, uint32_t* prepared, uint32_t* counts) {
    uint32_t s[8];
    uint32_t live = i < n;
    if (live) {
        uint32_t m[8];
        GPUD_UNROLL
        for (int j = 0; j < 8; j++) m[j] = mont[(uint64_t)i * 8 + j];
        msm_scalar_canonical(m, s);
        GPUD_UNROLL
        for (int j = 0; j < 8; j++) prepared[(uint64_t)i * 8 + j] = s[j];
        s[7] &= 0x7fffffffu;
    } else {
        GPUD_UNROLL
        for (int j = 0; j < 8; j++) s[j] = 0;
    }
    uint32_t b = 1u << (c - 1);
    uint32_t carry = 0;
    for (uint32_t j = 0; j < windows; j++) {
        uint32_t neg;
        uint32_t mag = msm_digit(s, j, c, carry, neg);
        uint32_t key = (live && mag != 0) ? j * b + mag - 1 : 0xffffffffu;
        msm_atomic_slot(counts, key);
    }
}

// Step 3 for scalar i: entries[offsets[key] + fill[key]++] = key << 32 | sign << 31 | i.
// fill: W*B words, zeroed.
GPUD_HD void msm_scatter(uint32_t i, uint32_t n, uint32_t c, uint32_t windows,
                         const uint32_t* prepared, const uint32_t* offsets, uint32_t* fill,
                         uint64_t* entries) {
    uint32_t s[8];
    uint32_t flag = 0;
    uint32_t live = i < n;
    if (live) {
        flag = msm_load_prepared(prepared + (uint64_t)i * 8, s);
    } else {
        GPUD_UNROLL
        for (int j = 0; j < 8; j++) s[j] = 0;
    }
    uint32_t b = 1u << (c - 1);
    uint32_t carry = 0;
    for (uint32_t j = 0; j < windows; j++) {
        uint32_t neg;
        uint32_t mag = msm_digit(s, j, c, carry, neg);
        uint32_t key = (live && mag != 0) ? j * b + mag - 1 : 0xffffffffu;
        uint32_t rank = msm_atomic_slot(fill, key);
        if (key != 0xffffffffu) {
            entries[offsets[key] + rank] = ((uint64_t)key << 32) | ((uint64_t)(neg ^ flag) << 31) | i;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Exclusive scan, by chunks: sums of chunks, a scan of the sums (recursively, the same
// steps), then each chunk rewritten with its base.
// ---------------------------------------------------------------------------------------------
GPUD_HD void msm_scan_chunk_sum(uint32_t t, uint32_t len, uint32_t chunk, const uint32_t* data,
                                uint32_t* sums) {
    uint64_t begin = (uint64_t)t * chunk;
    if (begin >= len) return;
    uint32_t end = (uint32_t)msm_min((uint32_t)(begin + chunk), len);
    uint32_t acc = 0;
    for (uint32_t i = (uint32_t)begin; i < end; i++) acc += data[i];
    sums[t] = acc;
}

// bases == nullptr means a base of 0 (the single-chunk case).
GPUD_HD void msm_scan_chunk_apply(uint32_t t, uint32_t len, uint32_t chunk, uint32_t* data,
                                  const uint32_t* bases) {
    uint64_t begin = (uint64_t)t * chunk;
    if (begin >= len) return;
    uint32_t end = (uint32_t)msm_min((uint32_t)(begin + chunk), len);
    uint32_t acc = bases ? bases[t] : 0u;
    for (uint32_t i = (uint32_t)begin; i < end; i++) {
        uint32_t v = data[i];
        data[i] = acc;
        acc += v;
    }
}

// ---------------------------------------------------------------------------------------------
// 4/5. Segmented accumulation.
// ---------------------------------------------------------------------------------------------

// Entries of step 3 as the source of the first pass: affine bases, sign in bit 31.
template <class C>
struct msm_entry_source {
    typedef C ops;
    const uint64_t* entries;
    const typename C::affine* bases;
    struct item {
        uint32_t key;
        typename C::affine p;
    };
    GPUD_HD uint32_t key(uint32_t i) const { return (uint32_t)(entries[i] >> 32); }
    GPUD_HD item load(uint32_t i) const {
        uint64_t e = entries[i];
        item it;
        it.key = (uint32_t)(e >> 32);
        uint32_t idx = (uint32_t)e & 0x7fffffffu;
        it.p = bases[idx];
        if ((uint32_t)e >> 31) it.p = C::neg(it.p);
        return it;
    }
    GPUD_HD static void add(typename C::xyzz& acc, bool& real, const item& it) {
        C::add_affine(acc, it.p);
        real = true;
    }
};

// Slots of a previous pass as the source: XYZZ partial sums, filler flag in the key.
template <class C>
struct msm_slot_source {
    typedef C ops;
    const uint32_t* keys;
    const typename C::xyzz* points;
    struct item {
        uint32_t key;
        uint32_t filler;
        typename C::xyzz p;
    };
    GPUD_HD uint32_t key(uint32_t i) const { return keys[i] & GPUD_MSM_KEY_MASK; }
    GPUD_HD item load(uint32_t i) const {
        item it;
        uint32_t k = keys[i];
        it.key = k & GPUD_MSM_KEY_MASK;
        it.filler = k & GPUD_MSM_FILLER;
        it.p = it.filler ? C::inf() : points[i];
        return it;
    }
    GPUD_HD static void add(typename C::xyzz& acc, bool& real, const item& it) {
        if (it.filler) return;
        C::add(acc, it.p);
        real = true;
    }
};

// Thread t sums the runs of equal keys among items [t*seg, (t+1)*seg) of `count` (sorted by
// key). A run that begins and ends inside the range is written to buckets[key] (if it holds a
// real item); the first and last runs, when the neighbouring range holds the same key, go to
// out slots 2t and 2t+1. Slots that get no partial sum are fillers carrying the key of the
// first (2t) or last (2t+1) run, so the slot array stays sorted by key.
template <class Src>
GPUD_HD void msm_segment_accumulate(uint32_t t, uint32_t seg, uint32_t count, const Src& src,
                                    typename Src::ops::xyzz* buckets, uint32_t* out_keys,
                                    typename Src::ops::xyzz* out_points) {
    typedef typename Src::ops C;
    uint64_t begin64 = (uint64_t)t * seg;
    if (begin64 >= count) {
        out_keys[2 * (uint64_t)t] = GPUD_MSM_SENTINEL | GPUD_MSM_FILLER;
        out_keys[2 * (uint64_t)t + 1] = GPUD_MSM_SENTINEL | GPUD_MSM_FILLER;
        return;
    }
    uint32_t begin = (uint32_t)begin64;
    uint64_t end64 = begin64 + seg;
    uint32_t end = end64 < count ? (uint32_t)end64 : count;
    uint32_t first_key = src.key(begin);
    uint32_t last_key = src.key(end - 1);
    bool cont_prev = begin > 0 && src.key(begin - 1) == first_key;
    bool cont_next = end < count && src.key(end) == last_key;
    uint32_t key0 = first_key | GPUD_MSM_FILLER;
    uint32_t key1 = last_key | GPUD_MSM_FILLER;

    typename C::xyzz acc = C::inf();
    bool real = false;
    bool first_run = true;
    uint32_t cur = first_key;
    // With the group's `prefetch`, the next entry is loaded before the current one is added,
    // hiding the load's latency behind the addition at the cost of a point's registers held
    // across it; without, it is loaded after.
    typename Src::item it = src.load(begin);
    for (uint32_t i = begin; i < end; i++) {
        typename Src::item next = it;
        if (C::prefetch && i + 1 < end) next = src.load(i + 1);
        if (it.key != cur) {
            // The run `cur` ends inside the range.
            if (first_run && cont_prev) {
                out_points[2 * (uint64_t)t] = acc;
                key0 = cur | (real ? 0u : GPUD_MSM_FILLER);
            } else if (real) {
                buckets[cur] = acc;
            }
            first_run = false;
            cur = it.key;
            acc = C::inf();
            real = false;
        }
        Src::add(acc, real, it);
        if (C::prefetch) {
            it = next;
        } else if (i + 1 < end) {
            it = src.load(i + 1);
        }
    }
    // The last run (cur == last_key).
    bool partial = (first_run && cont_prev) || cont_next;
    if (!partial) {
        if (real) buckets[cur] = acc;
    } else if (first_run) {
        out_points[2 * (uint64_t)t] = acc;
        key0 = cur | (real ? 0u : GPUD_MSM_FILLER);
    } else {
        out_points[2 * (uint64_t)t + 1] = acc;
        key1 = cur | (real ? 0u : GPUD_MSM_FILLER);
    }
    out_keys[2 * (uint64_t)t] = key0;
    out_keys[2 * (uint64_t)t + 1] = key1;
}

// ---------------------------------------------------------------------------------------------
// 6. Bucket reduction.
// ---------------------------------------------------------------------------------------------

// Thread t = window * (B/m) + k handles buckets of magnitude k*m + 1 .. (k+1)*m of its window:
// out[t] = sum_i (k*m + i + 1) * S(k*m + i) over its buckets, empty buckets (count 0) skipped.
template <class C>
GPUD_HD void msm_bucket_reduce(uint32_t t, uint32_t windows, uint32_t b, uint32_t m,
                               const uint32_t* offsets, const typename C::xyzz* buckets,
                               typename C::xyzz* out) {
    uint32_t chunks = b / m;
    if (t >= windows * chunks) return;
    uint32_t j = t / chunks;
    uint32_t k = t % chunks;
    uint32_t base = j * b + k * m;
    typename C::xyzz running = C::inf();
    typename C::xyzz sum = C::inf();
    for (uint32_t i = m; i-- > 0;) {
        uint32_t key = base + i;
        if (offsets[key + 1] != offsets[key]) C::add(running, buckets[key]);
        C::add(sum, running);
    }
    // sum = sum_i (i+1) S_i; add (k*m) * (sum_i S_i).
    if (k != 0 && !C::is_inf(running)) {
        typename C::xyzz shifted = C::mul_small(running, k * m);
        C::add(sum, shifted);
    }
    out[t] = sum;
}

// Thread t = window * groups + g: out[t] = sum of in[window * per + g*G .. + G) (clamped).
template <class C>
GPUD_HD void msm_group_sum(uint32_t t, uint32_t windows, uint32_t per, uint32_t group,
                           const typename C::xyzz* in, typename C::xyzz* out) {
    uint32_t groups = (per + group - 1) / group;
    if (t >= windows * groups) return;
    uint32_t j = t / groups;
    uint32_t g = t % groups;
    uint32_t begin = g * group;
    uint32_t end = msm_min(begin + group, per);
    typename C::xyzz acc = C::inf();
    for (uint32_t i = begin; i < end; i++) C::add(acc, in[(uint64_t)j * per + i]);
    out[t] = acc;
}

template <class C>
GPUD_HD void msm_to_jacobian(uint32_t t, uint32_t count, const typename C::xyzz* in,
                             typename C::jacobian* out) {
    if (t >= count) return;
    out[t] = C::to_jacobian(in[t]);
}

}  // namespace gpud

#endif  // GPUD_MSM_CUH
