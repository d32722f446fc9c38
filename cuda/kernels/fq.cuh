// BLS12-381 base field Fq (381-bit prime p) in Montgomery form, R = 2^384.
//
// Twelve 32-bit limbs, little-endian: the same bytes as blst's `blst_fp` (six little-endian
// u64 limbs, Montgomery form, R = 2^384), so points laid out by blstrs are read as they are.
//
// Everything here is `__host__ __device__`: under NVRTC/nvcc the carry chains are PTX
// `add.cc`/`mad.lo.cc`/`madc.hi.cc` instructions; compiled by a plain C++ compiler (the host
// test harness in cuda/tests/host) the same algorithm runs on an emulated carry flag, so the
// host tests exercise the exact sequence of limb operations that the GPU executes.
//
// Values are kept fully reduced in [0, p).
#ifndef GPUD_FQ_CUH
#define GPUD_FQ_CUH

#if defined(__CUDACC_RTC__)
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
typedef long long int64_t;
#else
#include <stdint.h>
#endif

#if defined(__CUDACC__)
#define GPUD_HD __host__ __device__ __forceinline__
#define GPUD_UNROLL _Pragma("unroll")
#else
#define GPUD_HD inline
#define GPUD_UNROLL _Pragma("GCC unroll 32")
#endif

// Field multiplication is large (about 650 instructions); with GPUD_FQ_MUL_NOINLINE=1 it is
// a real call, which keeps the point-addition code small enough for the instruction cache.
// Which one is faster on a given chip is measured, not assumed (see cuda/README-msm.md).
#if defined(__CUDA_ARCH__) && defined(GPUD_FQ_MUL_NOINLINE) && GPUD_FQ_MUL_NOINLINE
#define GPUD_MUL_HD __host__ __device__ __noinline__
#else
#define GPUD_MUL_HD GPUD_HD
#endif

// Functions that are called from several places but are not on the hottest path (full point
// additions, doublings) are real calls on the device: inlining every copy made the CUBIN
// about 9 MB and NVRTC slow, for no gain.
#if defined(__CUDACC__)
#define GPUD_HD_CALL __host__ __device__ __noinline__
#else
#define GPUD_HD_CALL inline
#endif

namespace gpud {

// ---------------------------------------------------------------------------------------------
// Carry-chain primitives. On the device the carry lives in the PTX condition code (CC.CF) and
// `carry_t` is empty; `asm volatile` keeps the statements of one chain in program order. On
// the host the flag is a member. A chain must never be interleaved with another chain.
// ---------------------------------------------------------------------------------------------
struct carry_t {
#if !defined(__CUDA_ARCH__)
    uint32_t cf;
    GPUD_HD carry_t() : cf(0) {}
#endif
};

#if defined(__CUDA_ARCH__)
#define GPUD_UNUSED_CARRY(c) (void)(c)
GPUD_HD uint32_t add_cc(carry_t& c, uint32_t a, uint32_t b) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("add.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
GPUD_HD uint32_t addc_cc(carry_t& c, uint32_t a, uint32_t b) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("addc.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
GPUD_HD uint32_t addc(carry_t& c, uint32_t a, uint32_t b) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("addc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
GPUD_HD uint32_t sub_cc(carry_t& c, uint32_t a, uint32_t b) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("sub.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
GPUD_HD uint32_t subc_cc(carry_t& c, uint32_t a, uint32_t b) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("subc.cc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
GPUD_HD uint32_t subc(carry_t& c, uint32_t a, uint32_t b) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("subc.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
GPUD_HD uint32_t mad_lo_cc(carry_t& c, uint32_t a, uint32_t b, uint32_t d) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("mad.lo.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(d));
    return r;
}
GPUD_HD uint32_t madc_lo_cc(carry_t& c, uint32_t a, uint32_t b, uint32_t d) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("madc.lo.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(d));
    return r;
}
GPUD_HD uint32_t madc_hi_cc(carry_t& c, uint32_t a, uint32_t b, uint32_t d) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("madc.hi.cc.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(d));
    return r;
}
GPUD_HD uint32_t madc_hi(carry_t& c, uint32_t a, uint32_t b, uint32_t d) {
    GPUD_UNUSED_CARRY(c);
    uint32_t r;
    asm volatile("madc.hi.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(d));
    return r;
}
GPUD_HD uint32_t mul_lo(uint32_t a, uint32_t b) { return a * b; }
GPUD_HD uint32_t mul_hi(uint32_t a, uint32_t b) { return __umulhi(a, b); }
#else
GPUD_HD uint32_t add_cc(carry_t& c, uint32_t a, uint32_t b) {
    uint64_t s = (uint64_t)a + b;
    c.cf = (uint32_t)(s >> 32);
    return (uint32_t)s;
}
GPUD_HD uint32_t addc_cc(carry_t& c, uint32_t a, uint32_t b) {
    uint64_t s = (uint64_t)a + b + c.cf;
    c.cf = (uint32_t)(s >> 32);
    return (uint32_t)s;
}
GPUD_HD uint32_t addc(carry_t& c, uint32_t a, uint32_t b) { return a + b + c.cf; }
GPUD_HD uint32_t sub_cc(carry_t& c, uint32_t a, uint32_t b) {
    c.cf = a < b ? 1u : 0u;
    return a - b;
}
GPUD_HD uint32_t subc_cc(carry_t& c, uint32_t a, uint32_t b) {
    uint64_t s = (uint64_t)b + c.cf;
    uint32_t r = (uint32_t)((uint64_t)a - s);
    c.cf = (uint64_t)a < s ? 1u : 0u;
    return r;
}
GPUD_HD uint32_t subc(carry_t& c, uint32_t a, uint32_t b) { return a - b - c.cf; }
GPUD_HD uint32_t mad_lo_cc(carry_t& c, uint32_t a, uint32_t b, uint32_t d) {
    return add_cc(c, a * b, d);
}
GPUD_HD uint32_t madc_lo_cc(carry_t& c, uint32_t a, uint32_t b, uint32_t d) {
    return addc_cc(c, a * b, d);
}
GPUD_HD uint32_t madc_hi_cc(carry_t& c, uint32_t a, uint32_t b, uint32_t d) {
    return addc_cc(c, (uint32_t)(((uint64_t)a * b) >> 32), d);
}
GPUD_HD uint32_t madc_hi(carry_t& c, uint32_t a, uint32_t b, uint32_t d) {
    return (uint32_t)(((uint64_t)a * b) >> 32) + d + c.cf;
}
GPUD_HD uint32_t mul_lo(uint32_t a, uint32_t b) { return a * b; }
GPUD_HD uint32_t mul_hi(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * b) >> 32); }
#endif

// ---------------------------------------------------------------------------------------------
// Generic Montgomery arithmetic over N 32-bit limbs (N even). `P` supplies N, the modulus
// limbs `P::m(i)` (a switch on a compile-time index after unrolling) and `P::inv` =
// -m^-1 mod 2^32. The modulus must be below 2^(32N-1) (Fq: 381 bits in 384; Fr: 255 bits in
// 256), which keeps each half of the split accumulator below 2^(32(N+1)): a row adds less than
// 2m * 2^32 to a half that holds less than 2m.
// ---------------------------------------------------------------------------------------------

// One row of the Montgomery product (one limb b of the multiplier) on a split accumulator:
// `ev` holds limbs at even offsets from the row (limb k at position k), `od` the odd ones
// (limb k at position k + 1), so the even products a[0], a[2], .. and the odd products a[1],
// a[3], .. each form one unbroken mad.lo/madc.hi carry chain. After the reduction of the row
// ev[0] is zero and the accumulator is divided by 2^32: the two arrays swap roles for the next
// row (od becomes the even half; ev, shifted down two limbs while the next odd products are
// added, becomes the odd half, and its limb at position 0 is folded into the new even half).
//
// Bound (m < 2^(32N-1)): the accumulator stays below 2m between rows and below 2m * 2^32 within
// one, so the carries dropped at the top are zero.
template <class P, bool FIRST>
GPUD_HD void mont_row(uint32_t* ev, uint32_t* od, const uint32_t* a, uint32_t bi) {
    const int N = P::N;
    if (FIRST) {
        GPUD_UNROLL
        for (int k = 0; k < N; k += 2) {
            ev[k] = mul_lo(a[k], bi);
            ev[k + 1] = mul_hi(a[k], bi);
            od[k] = mul_lo(a[k + 1], bi);
            od[k + 1] = mul_hi(a[k + 1], bi);
        }
    } else {
        {
            // Fold the odd half's position-0 limb into the even half; its carry belongs at
            // position 1, the first limb of the odd half, so it enters the odd chain.
            carry_t c;
            ev[0] = add_cc(c, ev[0], od[1]);
            GPUD_UNROLL
            for (int k = 0; k < N - 2; k += 2) {
                od[k] = madc_lo_cc(c, a[k + 1], bi, od[k + 2]);
                od[k + 1] = madc_hi_cc(c, a[k + 1], bi, od[k + 3]);
            }
            od[N - 2] = madc_lo_cc(c, a[N - 1], bi, 0);
            od[N - 1] = madc_hi(c, a[N - 1], bi, 0);
        }
        {
            carry_t c;
            ev[0] = mad_lo_cc(c, a[0], bi, ev[0]);
            ev[1] = madc_hi_cc(c, a[0], bi, ev[1]);
            GPUD_UNROLL
            for (int k = 2; k < N; k += 2) {
                ev[k] = madc_lo_cc(c, a[k], bi, ev[k]);
                ev[k + 1] = madc_hi_cc(c, a[k], bi, ev[k + 1]);
            }
            od[N - 1] = addc(c, od[N - 1], 0);  // the even chain's carry, at position N
        }
    }
    uint32_t m = ev[0] * P::inv;
    {
        carry_t c;
        od[0] = mad_lo_cc(c, P::m(1), m, od[0]);
        od[1] = madc_hi_cc(c, P::m(1), m, od[1]);
        GPUD_UNROLL
        for (int k = 2; k < N; k += 2) {
            od[k] = madc_lo_cc(c, P::m(k + 1), m, od[k]);
            od[k + 1] = madc_hi_cc(c, P::m(k + 1), m, od[k + 1]);
        }
    }
    {
        carry_t c;
        ev[0] = mad_lo_cc(c, P::m(0), m, ev[0]);
        ev[1] = madc_hi_cc(c, P::m(0), m, ev[1]);
        GPUD_UNROLL
        for (int k = 2; k < N; k += 2) {
            ev[k] = madc_lo_cc(c, P::m(k), m, ev[k]);
            ev[k + 1] = madc_hi_cc(c, P::m(k), m, ev[k + 1]);
        }
        od[N - 1] = addc(c, od[N - 1], 0);
    }
}

// r = a * b / 2^(32N) mod m, for a, b < m; r fully reduced. r may alias a or b.
// CIOS, one row per limb of b, on the split accumulator of mont_row (about 4N + 3 instructions
// a row), then one merge and a conditional subtraction.
template <class P>
GPUD_HD void mont_mul(uint32_t* r, const uint32_t* a, const uint32_t* b) {
    const int N = P::N;
    uint32_t x[N], y[N];
    mont_row<P, true>(x, y, a, b[0]);
    mont_row<P, false>(y, x, a, b[1]);
    GPUD_UNROLL
    for (int i = 2; i < N; i += 2) {
        mont_row<P, false>(x, y, a, b[i]);
        mont_row<P, false>(y, x, a, b[i + 1]);
    }
    // The last row had ev = y, od = x; after its division by 2^32 the value is x + (y >> 32),
    // below 2m < 2^(32N).
    uint32_t t[N];
    {
        carry_t c;
        t[0] = add_cc(c, x[0], y[1]);
        GPUD_UNROLL
        for (int j = 1; j < N - 1; j++) t[j] = addc_cc(c, x[j], y[j + 1]);
        t[N - 1] = addc(c, x[N - 1], 0);
    }
    uint32_t s[N];
    uint32_t borrow;
    {
        carry_t c;
        s[0] = sub_cc(c, t[0], P::m(0));
        GPUD_UNROLL
        for (int j = 1; j < N; j++) s[j] = subc_cc(c, t[j], P::m(j));
        borrow = subc(c, 0, 0);  // all ones when t < m
    }
    GPUD_UNROLL
    for (int j = 0; j < N; j++) r[j] = (t[j] & borrow) | (s[j] & ~borrow);
}

// Montgomery reduction of a single-width value: r = a / 2^(32N) mod m (leaves Montgomery form).
template <class P>
GPUD_HD void mont_from(uint32_t* r, const uint32_t* a) {
    uint32_t one[P::N];
    GPUD_UNROLL
    for (int j = 0; j < P::N; j++) one[j] = j == 0 ? 1u : 0u;
    mont_mul<P>(r, a, one);
}

// ---------------------------------------------------------------------------------------------
// Fq
// ---------------------------------------------------------------------------------------------
struct FqParams {
    static const int N = 12;
    static const uint32_t inv = 0xfffcfffdu;
    GPUD_HD static uint32_t m(int i) {
        switch (i) {
            case 0: return 0xffffaaabu;
            case 1: return 0xb9feffffu;
            case 2: return 0xb153ffffu;
            case 3: return 0x1eabfffeu;
            case 4: return 0xf6b0f624u;
            case 5: return 0x6730d2a0u;
            case 6: return 0xf38512bfu;
            case 7: return 0x64774b84u;
            case 8: return 0x434bacd7u;
            case 9: return 0x4b1ba7b6u;
            case 10: return 0x397fe69au;
            default: return 0x1a0111eau;
        }
    }
    // R mod p (Montgomery one).
    GPUD_HD static uint32_t one(int i) {
        switch (i) {
            case 0: return 0x0002fffdu;
            case 1: return 0x76090000u;
            case 2: return 0xc40c0002u;
            case 3: return 0xebf4000bu;
            case 4: return 0x53c758bau;
            case 5: return 0x5f489857u;
            case 6: return 0x70525745u;
            case 7: return 0x77ce5853u;
            case 8: return 0xa256ec6du;
            case 9: return 0x5c071a97u;
            case 10: return 0xfa80e493u;
            default: return 0x15f65ec3u;
        }
    }
};

// An element of Fq in Montgomery form; 48 bytes, layout of blst_fp. Aligned to 16 so that
// points (96, 144 and 192 bytes) move with 16-byte loads and stores; device buffers are
// 256-byte aligned.
struct alignas(16) fq_t {
    uint32_t l[12];
};

GPUD_HD fq_t fq_zero() {
    fq_t r;
    GPUD_UNROLL
    for (int j = 0; j < 12; j++) r.l[j] = 0;
    return r;
}

GPUD_HD fq_t fq_one() {
    fq_t r;
    GPUD_UNROLL
    for (int j = 0; j < 12; j++) r.l[j] = FqParams::one(j);
    return r;
}

GPUD_HD bool fq_is_zero(const fq_t& a) {
    uint32_t acc = 0;
    GPUD_UNROLL
    for (int j = 0; j < 12; j++) acc |= a.l[j];
    return acc == 0;
}

GPUD_HD bool fq_eq(const fq_t& a, const fq_t& b) {
    uint32_t acc = 0;
    GPUD_UNROLL
    for (int j = 0; j < 12; j++) acc |= a.l[j] ^ b.l[j];
    return acc == 0;
}

GPUD_MUL_HD fq_t fq_mul(fq_t a, fq_t b) {
    fq_t r;
    mont_mul<FqParams>(r.l, a.l, b.l);
    return r;
}

GPUD_MUL_HD fq_t fq_sqr(fq_t a) {
    fq_t r;
    mont_mul<FqParams>(r.l, a.l, a.l);
    return r;
}

// a + b mod p. a + b < 2p < 2^382 never overflows 12 limbs.
GPUD_HD fq_t fq_add(const fq_t& a, const fq_t& b) {
    uint32_t t[12], s[12], borrow;
    {
        carry_t c;
        t[0] = add_cc(c, a.l[0], b.l[0]);
        GPUD_UNROLL
        for (int j = 1; j < 12; j++) t[j] = addc_cc(c, a.l[j], b.l[j]);
    }
    {
        carry_t c;
        s[0] = sub_cc(c, t[0], FqParams::m(0));
        GPUD_UNROLL
        for (int j = 1; j < 12; j++) s[j] = subc_cc(c, t[j], FqParams::m(j));
        borrow = subc(c, 0, 0);
    }
    fq_t r;
    GPUD_UNROLL
    for (int j = 0; j < 12; j++) r.l[j] = (t[j] & borrow) | (s[j] & ~borrow);
    return r;
}

// a - b mod p.
GPUD_HD fq_t fq_sub(const fq_t& a, const fq_t& b) {
    uint32_t t[12], borrow;
    {
        carry_t c;
        t[0] = sub_cc(c, a.l[0], b.l[0]);
        GPUD_UNROLL
        for (int j = 1; j < 12; j++) t[j] = subc_cc(c, a.l[j], b.l[j]);
        borrow = subc(c, 0, 0);
    }
    fq_t r;
    {
        carry_t c;
        r.l[0] = add_cc(c, t[0], FqParams::m(0) & borrow);
        GPUD_UNROLL
        for (int j = 1; j < 12; j++) r.l[j] = addc_cc(c, t[j], FqParams::m(j) & borrow);
    }
    return r;
}

GPUD_HD fq_t fq_dbl(const fq_t& a) { return fq_add(a, a); }

// -a mod p (zero stays zero).
GPUD_HD fq_t fq_neg(const fq_t& a) {
    uint32_t nz = fq_is_zero(a) ? 0u : 0xffffffffu;
    fq_t r;
    carry_t c;
    r.l[0] = sub_cc(c, FqParams::m(0) & nz, a.l[0]);
    GPUD_UNROLL
    for (int j = 1; j < 12; j++) r.l[j] = subc_cc(c, FqParams::m(j) & nz, a.l[j]);
    return r;
}

// a^(p-2) = a^-1 (0 for a = 0). Square-and-multiply, most significant bit first; not used in
// the hot loops.
inline
#if defined(__CUDACC__)
    __host__ __device__
#endif
    fq_t
    fq_inv(const fq_t& a) {
    // p - 2, limbs little-endian.
    fq_t r = fq_one();
    for (int i = 11; i >= 0; i--) {
        uint32_t e = FqParams::m(i) - (i == 0 ? 2u : 0u);
        for (int bit = 31; bit >= 0; bit--) {
            r = fq_sqr(r);
            if ((e >> bit) & 1u) r = fq_mul(r, a);
        }
    }
    return r;
}

}  // namespace gpud

#endif  // GPUD_FQ_CUH
