// BLS12-381 scalar field Fr: r = 0x73eda753299d7d483339d80809a1d80553bda402fffe5bfeffffffff00000001.
//
// Elements are 8 little-endian 32-bit limbs in Montgomery form with R = 2^256: the same bytes
// as blstrs' `Scalar` (4 little-endian u64 limbs, Montgomery, R = 2^256), so buffers of Scalars
// are used on the device without conversion.
//
// Written once for host and device. On the device the carry chains are single PTX instructions
// (add.cc / madc.hi.cc ...) whose carry ptxas keeps in predicate registers; on the host (plain
// C++, used by the CPU tests that compare against blstrs) each primitive emulates the same
// instruction with an explicit carry word. The field algorithms above the primitives are the
// same code on both sides, so the host tests exercise the device's carry-chain order.
//
// Limbs: 8 x 32 bits. Hopper has no 64-bit integer multiplier (a 64 x 64 product is four
// 32-bit ones plus carries), and ptxas fuses a chain's `madc.lo.cc; madc.hi.cc` of one product
// into a single wide multiply-add with carry (IMAD.WIDE.U32.X). fr_mul_cios is arranged so that
// every product (a*b and m*r) gets that form: 232 SASS instructions per product, of which 111.5
// IMAD.WIDE.U32(.X) and 2 IMAD — the multiply pipe's minimum for schoolbook CIOS with r's two
// free low limbs — against 288 (160 on the multiply pipe) before the opaque negation below, and
// 624 for the textbook row-by-row CIOS (cuobjdump of sm_90 CUBIN, CUDA 13.0 NVRTC, 2026-11-30).
// fr_mul_karatsuba (used where FR_MUL_KARATSUBA=1) needs 96 wide multiply-adds but ~70 more
// additions: 286.5 instructions per product in fr_bench_kara, of which 96 IMAD.WIDE.U32(.X) and
// 35 other IMAD (ptxas moves additions and moves there), against 234 / 112 / 5 for fr_mul_cios
// in fr_bench (CUDA 13.0 NVRTC, sm_90).
#pragma once

#if defined(__CUDACC__)
#define FR_FN __host__ __device__ __forceinline__
#else
#define FR_FN static inline
#endif

typedef unsigned int fr_u32;
typedef unsigned long long fr_u64;

#define FR_LIMBS 8

// 16-byte aligned so that a whole element moves as two 16-byte accesses.
struct alignas(16) fr_t {
    fr_u32 l[FR_LIMBS];
};

// The modulus, R mod r (one) and R^2 mod r, as 32-bit limbs.
#define FR_P0 0x00000001u
#define FR_P1 0xffffffffu
#define FR_P2 0xfffe5bfeu
#define FR_P3 0x53bda402u
#define FR_P4 0x09a1d805u
#define FR_P5 0x3339d808u
#define FR_P6 0x299d7d48u
#define FR_P7 0x73eda753u
// r = 1 mod 2^32, so -r^-1 mod 2^32 is -1: the Montgomery factor of a limb s is simply -s.

// Carry state of one chain. On the device the carry lives in the condition-code flag, which
// chained asm volatile statements pass along in program order; the struct is then empty.
struct fr_carry {
#if !defined(__CUDA_ARCH__)
    fr_u32 c;
#endif
};

#if defined(__CUDA_ARCH__)
#define FR_PTX2(op, d, a, b) asm volatile(op " %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b))
#define FR_PTX3(op, d, a, b, c) asm volatile(op " %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c))
#endif

// a + b, carry out.
FR_FN fr_u32 add_cc(fr_carry &k, fr_u32 a, fr_u32 b) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX2("add.cc.u32", d, a, b);
#else
    fr_u64 s = (fr_u64)a + b;
    d = (fr_u32)s;
    k.c = (fr_u32)(s >> 32);
#endif
    return d;
}

// a + b + carry, carry out.
FR_FN fr_u32 addc_cc(fr_carry &k, fr_u32 a, fr_u32 b) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX2("addc.cc.u32", d, a, b);
#else
    fr_u64 s = (fr_u64)a + b + k.c;
    d = (fr_u32)s;
    k.c = (fr_u32)(s >> 32);
#endif
    return d;
}

// a + b + carry, ends the chain.
FR_FN fr_u32 addc(fr_carry &k, fr_u32 a, fr_u32 b) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX2("addc.u32", d, a, b);
#else
    d = (fr_u32)((fr_u64)a + b + k.c);
#endif
    return d;
}

// a - b, borrow out.
FR_FN fr_u32 sub_cc(fr_carry &k, fr_u32 a, fr_u32 b) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX2("sub.cc.u32", d, a, b);
#else
    fr_u64 s = (fr_u64)a - b;
    d = (fr_u32)s;
    k.c = (fr_u32)(s >> 32) & 1u;
#endif
    return d;
}

// a - b - borrow, borrow out.
FR_FN fr_u32 subc_cc(fr_carry &k, fr_u32 a, fr_u32 b) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX2("subc.cc.u32", d, a, b);
#else
    fr_u64 s = (fr_u64)a - b - k.c;
    d = (fr_u32)s;
    k.c = (fr_u32)(s >> 32) & 1u;
#endif
    return d;
}

// a - b - borrow, ends the chain.
FR_FN fr_u32 subc(fr_carry &k, fr_u32 a, fr_u32 b) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX2("subc.u32", d, a, b);
#else
    d = (fr_u32)((fr_u64)a - b - k.c);
#endif
    return d;
}

// lo(a * b) + c, carry out.
FR_FN fr_u32 mad_lo_cc(fr_carry &k, fr_u32 a, fr_u32 b, fr_u32 c) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX3("mad.lo.cc.u32", d, a, b, c);
#else
    fr_u64 s = (fr_u64)(fr_u32)((fr_u64)a * b) + c;
    d = (fr_u32)s;
    k.c = (fr_u32)(s >> 32);
#endif
    return d;
}

// lo(a * b) + c + carry, carry out.
FR_FN fr_u32 madc_lo_cc(fr_carry &k, fr_u32 a, fr_u32 b, fr_u32 c) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX3("madc.lo.cc.u32", d, a, b, c);
#else
    fr_u64 s = (fr_u64)(fr_u32)((fr_u64)a * b) + c + k.c;
    d = (fr_u32)s;
    k.c = (fr_u32)(s >> 32);
#endif
    return d;
}

// hi(a * b) + c, carry out.
FR_FN fr_u32 mad_hi_cc(fr_carry &k, fr_u32 a, fr_u32 b, fr_u32 c) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX3("mad.hi.cc.u32", d, a, b, c);
#else
    fr_u64 s = (((fr_u64)a * b) >> 32) + c;
    d = (fr_u32)s;
    k.c = (fr_u32)(s >> 32);
#endif
    return d;
}

// hi(a * b) + c + carry, carry out.
FR_FN fr_u32 madc_hi_cc(fr_carry &k, fr_u32 a, fr_u32 b, fr_u32 c) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX3("madc.hi.cc.u32", d, a, b, c);
#else
    fr_u64 s = (((fr_u64)a * b) >> 32) + c + k.c;
    d = (fr_u32)s;
    k.c = (fr_u32)(s >> 32);
#endif
    return d;
}

// hi(a * b) + c + carry, ends the chain.
FR_FN fr_u32 madc_hi(fr_carry &k, fr_u32 a, fr_u32 b, fr_u32 c) {
    fr_u32 d;
#if defined(__CUDA_ARCH__)
    (void)k;
    FR_PTX3("madc.hi.u32", d, a, b, c);
#else
    d = (fr_u32)((((fr_u64)a * b) >> 32) + c + k.c);
#endif
    return d;
}

// a * b, 64 bits. On the device an opaque mul.wide.u32: NVVM otherwise turns a product of
// zero-extended words into a 64-bit multiply when one factor's extension is loop-invariant,
// and ptxas then adds the (zero) cross products.
FR_FN fr_u64 mul_wide(fr_u32 a, fr_u32 b) {
#if defined(__CUDA_ARCH__)
    fr_u64 d;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(d) : "r"(a), "r"(b));
    return d;
#else
    return (fr_u64)a * b;
#endif
}

FR_FN fr_t fr_zero() {
    fr_t z;
#pragma unroll
    for (int i = 0; i < FR_LIMBS; i++) z.l[i] = 0;
    return z;
}

// Montgomery one (R mod r).
FR_FN fr_t fr_one() {
    fr_t o;
    o.l[0] = 0xfffffffeu; o.l[1] = 0x00000001u; o.l[2] = 0x00034802u; o.l[3] = 0x5884b7fau;
    o.l[4] = 0xecbc4ff5u; o.l[5] = 0x998c4fefu; o.l[6] = 0xacc5056fu; o.l[7] = 0x1824b159u;
    return o;
}

// -1 in Montgomery form (r - R mod r).
FR_FN fr_t fr_minus_one() {
    fr_t o;
    o.l[0] = 0x00000003u; o.l[1] = 0xfffffffdu; o.l[2] = 0xfffb13fcu; o.l[3] = 0xfb38ec08u;
    o.l[4] = 0x1ce5880fu; o.l[5] = 0x99ad8818u; o.l[6] = 0x7cd877d8u; o.l[7] = 0x5bc8f5f9u;
    return o;
}

FR_FN bool fr_is_zero(const fr_t &a) {
    fr_u32 acc = 0;
#pragma unroll
    for (int i = 0; i < FR_LIMBS; i++) acc |= a.l[i];
    return acc == 0;
}

FR_FN bool fr_eq(const fr_t &a, const fr_t &b) {
    fr_u32 acc = 0;
#pragma unroll
    for (int i = 0; i < FR_LIMBS; i++) acc |= a.l[i] ^ b.l[i];
    return acc == 0;
}

// t - r if t >= r, else t. Input t < 2r (fits 8 limbs since 2r < 2^256).
FR_FN fr_t fr_reduce_once(const fr_t &t) {
    fr_carry k;
    fr_t s;
    s.l[0] = sub_cc(k, t.l[0], FR_P0);
    s.l[1] = subc_cc(k, t.l[1], FR_P1);
    s.l[2] = subc_cc(k, t.l[2], FR_P2);
    s.l[3] = subc_cc(k, t.l[3], FR_P3);
    s.l[4] = subc_cc(k, t.l[4], FR_P4);
    s.l[5] = subc_cc(k, t.l[5], FR_P5);
    s.l[6] = subc_cc(k, t.l[6], FR_P6);
    s.l[7] = subc_cc(k, t.l[7], FR_P7);
    // All ones when t < r (the subtraction borrowed): keep t.
    fr_u32 keep = subc(k, 0u, 0u);
    fr_t r;
#pragma unroll
    for (int i = 0; i < FR_LIMBS; i++) r.l[i] = (t.l[i] & keep) | (s.l[i] & ~keep);
    return r;
}

// a + b mod r. a, b < r, so a + b < 2^256: no carry leaves the top limb.
FR_FN fr_t fr_add(const fr_t &a, const fr_t &b) {
    fr_carry k;
    fr_t t;
    t.l[0] = add_cc(k, a.l[0], b.l[0]);
    t.l[1] = addc_cc(k, a.l[1], b.l[1]);
    t.l[2] = addc_cc(k, a.l[2], b.l[2]);
    t.l[3] = addc_cc(k, a.l[3], b.l[3]);
    t.l[4] = addc_cc(k, a.l[4], b.l[4]);
    t.l[5] = addc_cc(k, a.l[5], b.l[5]);
    t.l[6] = addc_cc(k, a.l[6], b.l[6]);
    t.l[7] = addc(k, a.l[7], b.l[7]);
    return fr_reduce_once(t);
}

// a - b mod r.
FR_FN fr_t fr_sub(const fr_t &a, const fr_t &b) {
    fr_carry k;
    fr_t t;
    t.l[0] = sub_cc(k, a.l[0], b.l[0]);
    t.l[1] = subc_cc(k, a.l[1], b.l[1]);
    t.l[2] = subc_cc(k, a.l[2], b.l[2]);
    t.l[3] = subc_cc(k, a.l[3], b.l[3]);
    t.l[4] = subc_cc(k, a.l[4], b.l[4]);
    t.l[5] = subc_cc(k, a.l[5], b.l[5]);
    t.l[6] = subc_cc(k, a.l[6], b.l[6]);
    t.l[7] = subc_cc(k, a.l[7], b.l[7]);
    // All ones when a < b: add r back (masked), so the result wraps into [0, r).
    fr_u32 m = subc(k, 0u, 0u);
    fr_carry c;
    t.l[0] = add_cc(c, t.l[0], FR_P0 & m);
    t.l[1] = addc_cc(c, t.l[1], FR_P1 & m);
    t.l[2] = addc_cc(c, t.l[2], FR_P2 & m);
    t.l[3] = addc_cc(c, t.l[3], FR_P3 & m);
    t.l[4] = addc_cc(c, t.l[4], FR_P4 & m);
    t.l[5] = addc_cc(c, t.l[5], FR_P5 & m);
    t.l[6] = addc_cc(c, t.l[6], FR_P6 & m);
    t.l[7] = addc(c, t.l[7], FR_P7 & m);
    return t;
}

// -a mod r (0 stays 0).
FR_FN fr_t fr_neg(const fr_t &a) {
    return fr_sub(fr_zero(), a);
}

// -x mod 2^32, as the Montgomery factor of the reduction rows. On the device the negation is
// an inline PTX instruction: written in C++, the compiler front end rewrites (0 - x) * c as
// x * (-c) for the low half of every m * r_j product but cannot for the high half, and ptxas then
// emits each product as IMAD.X + IMAD.HI.U32.X instead of one IMAD.WIDE.U32.X (sm_90 SASS of
// fr_bench: 192 + 192 split instructions per 4 products, against 0 with the opaque negation;
// 984 instead of 1176 instructions in the loop). FR_MUL_FOLDABLE_NEG=1 restores the C++
// negation, to time the difference (kernels/fr_bench_v0.cu).
FR_FN fr_u32 fr_negate_opaque(fr_u32 x) {
#if defined(__CUDA_ARCH__) && !(defined(FR_MUL_FOLDABLE_NEG) && FR_MUL_FOLDABLE_NEG)
    fr_u32 r;
    asm("sub.u32 %0, 0, %1;" : "=r"(r) : "r"(x));
    return r;
#else
    return 0u - x;
#endif
}

// One CIOS reduction step on V = E + O * 2^32 + pend (fr_mul_cios's layout): adds m * r with
// m = -V mod 2^32, which clears limb 0. Limb 0 of V is E[0] + pend (mod 2^32). m * r adds m at
// limb 0 (r's limb 0 is 1), which clears it with a carry of (s != 0); r's limb 1 is 2^32 - 1,
// so m * that adds -m = s at limb 1 and m - (m != 0) at limb 2 (into O, which starts at limb 1).
// S_FROM_CHAIN takes s from the E chain's first add instead of a separate add: fr_mul_cios was
// measured with the separate add, fr_mul_karatsuba with the chain's (the chain's form compiles
// fr_mul_cios to 24 fewer SASS instructions per 4 products, not yet timed on a GPU).
template <bool S_FROM_CHAIN>
FR_FN void fr_cios_reduce_step(fr_u32 E[9], fr_u32 O[8], fr_u32 pend) {
    fr_carry k;
    const fr_u32 s = S_FROM_CHAIN ? add_cc(k, E[0], pend) : E[0] + pend;
    const fr_u32 m = fr_negate_opaque(s);
    const fr_u32 c0 = s != 0u ? 1u : 0u;
    const fr_u32 hi1 = m - c0;
    {
        if (!S_FROM_CHAIN) (void)add_cc(k, E[0], pend);
        E[1] = addc_cc(k, E[1], c0);
        E[2] = madc_lo_cc(k, m, FR_P2, E[2]);
        E[3] = madc_hi_cc(k, m, FR_P2, E[3]);
        E[4] = madc_lo_cc(k, m, FR_P4, E[4]);
        E[5] = madc_hi_cc(k, m, FR_P4, E[5]);
        E[6] = madc_lo_cc(k, m, FR_P6, E[6]);
        E[7] = madc_hi_cc(k, m, FR_P6, E[7]);
        E[8] = addc(k, E[8], 0u);
    }
    {
        fr_carry k;
        O[0] = add_cc(k, O[0], s);
        O[1] = addc_cc(k, O[1], hi1);
        O[2] = madc_lo_cc(k, m, FR_P3, O[2]);
        O[3] = madc_hi_cc(k, m, FR_P3, O[3]);
        O[4] = madc_lo_cc(k, m, FR_P5, O[4]);
        O[5] = madc_hi_cc(k, m, FR_P5, O[5]);
        O[6] = madc_lo_cc(k, m, FR_P7, O[6]);
        O[7] = madc_hi(k, m, FR_P7, O[7]);
    }
}

// Divides V = E + O * 2^32 + pend by 2^32 once limb 0 is clear, by renaming: the new E is O,
// the new O is E's limbs 2..8, the new pend is E's limb 1. No limb moves between registers.
FR_FN void fr_cios_shift(fr_u32 E[9], fr_u32 O[8], fr_u32 &pend) {
    pend = E[1];
    fr_u32 ne[9], no[8];
#pragma unroll
    for (int k = 0; k < 8; k++) ne[k] = O[k];
    ne[8] = 0;
#pragma unroll
    for (int k = 0; k < 7; k++) no[k] = E[k + 2];
    no[7] = 0;
#pragma unroll
    for (int k = 0; k < 9; k++) E[k] = ne[k];
#pragma unroll
    for (int k = 0; k < 8; k++) O[k] = no[k];
}

// After the last step: V / 2^32 = O + E[1..9), not yet reduced.
FR_FN fr_t fr_cios_value(const fr_u32 E[9], const fr_u32 O[8]) {
    fr_t r;
    fr_carry k;
    r.l[0] = add_cc(k, O[0], E[1]);
    r.l[1] = addc_cc(k, O[1], E[2]);
    r.l[2] = addc_cc(k, O[2], E[3]);
    r.l[3] = addc_cc(k, O[3], E[4]);
    r.l[4] = addc_cc(k, O[4], E[5]);
    r.l[5] = addc_cc(k, O[5], E[6]);
    r.l[6] = addc_cc(k, O[6], E[7]);
    r.l[7] = addc(k, O[7], E[8]);
    return r;
}

// Montgomery product a * b * 2^-256 mod r, by CIOS over 32-bit limbs with the running sum
// split in two halves so that every product's low and high words land in one aligned register
// pair, which ptxas turns into single wide multiply-adds with carry (IMAD.WIDE.U32.X):
//   V = E + O * 2^32 + pend,
// E collecting the products a_j * b_i with j even (at limb j), O those with j odd (at limb
// j - 1), pend a single limb carried from the previous step. Each step adds a * b_i, then m * r
// with m = -V mod 2^32 (r = 1 mod 2^32), and divides by 2^32 by renaming: the new E is O, the
// new O is E's limbs 2..8, the new pend is E's limb 1. No limb ever moves between registers.
// Bounds: V < 2^33 r < 2^288 throughout (CIOS), so E fits 9 limbs, O 8, and no chain carries
// out of its top limb.
FR_FN fr_t fr_mul_cios(const fr_t &a, const fr_t &b) {
    fr_u32 E[9], O[8], pend = 0;
#pragma unroll
    for (int k = 0; k < 9; k++) E[k] = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) O[k] = 0;
#pragma unroll
    for (int i = 0; i < FR_LIMBS; i++) {
        const fr_u32 bi = b.l[i];
        {
            fr_carry k;
            E[0] = mad_lo_cc(k, a.l[0], bi, E[0]);
            E[1] = madc_hi_cc(k, a.l[0], bi, E[1]);
            E[2] = madc_lo_cc(k, a.l[2], bi, E[2]);
            E[3] = madc_hi_cc(k, a.l[2], bi, E[3]);
            E[4] = madc_lo_cc(k, a.l[4], bi, E[4]);
            E[5] = madc_hi_cc(k, a.l[4], bi, E[5]);
            E[6] = madc_lo_cc(k, a.l[6], bi, E[6]);
            E[7] = madc_hi_cc(k, a.l[6], bi, E[7]);
            E[8] = addc(k, E[8], 0u);
        }
        {
            fr_carry k;
            O[0] = mad_lo_cc(k, a.l[1], bi, O[0]);
            O[1] = madc_hi_cc(k, a.l[1], bi, O[1]);
            O[2] = madc_lo_cc(k, a.l[3], bi, O[2]);
            O[3] = madc_hi_cc(k, a.l[3], bi, O[3]);
            O[4] = madc_lo_cc(k, a.l[5], bi, O[4]);
            O[5] = madc_hi_cc(k, a.l[5], bi, O[5]);
            O[6] = madc_lo_cc(k, a.l[7], bi, O[6]);
            O[7] = madc_hi(k, a.l[7], bi, O[7]);
        }
        fr_cios_reduce_step<false>(E, O, pend);
        if (i + 1 < FR_LIMBS) fr_cios_shift(E, O, pend);
    }
    // V / 2^32, below 2r.
    return fr_reduce_once(fr_cios_value(E, O));
}

// z = a * b + c * 2^128 mod 2^256 for 4-limb a, b, c (the 128 x 128-bit products of
// fr_mul_karatsuba). As in fr_mul_cios, products go to two accumulators so that each one's low
// and high words are an aligned register pair (one wide multiply-add each, no moves): a_j * b_i
// lands at limbs i + j, i + j + 1, in E when i + j is even and in O when it is odd. Row 0 is
// plain products; each later row is one chain per accumulator, whose carry goes to the limb
// above the chain (fresh, or holding only an earlier carry: no overflow). c rides for free in
// the multiply-adds whose addend would be a fresh zero limb (4 and 5 in row 1, 6 and 7 in rows
// 2 and 3). Every chain that could carry out of limb 7 ends there, as the result is mod 2^256.
FR_FN void fr_mul_128(fr_u32 z[8], const fr_u32 a[4], const fr_u32 b[4], const fr_u32 c[4]) {
    fr_u32 E[8], O[8];
    fr_u64 p;
    p = mul_wide(a[0], b[0]);
    E[0] = (fr_u32)p;
    E[1] = (fr_u32)(p >> 32);
    p = mul_wide(a[2], b[0]);
    E[2] = (fr_u32)p;
    E[3] = (fr_u32)(p >> 32);
    p = mul_wide(a[1], b[0]);
    O[1] = (fr_u32)p;
    O[2] = (fr_u32)(p >> 32);
    p = mul_wide(a[3], b[0]);
    O[3] = (fr_u32)p;
    O[4] = (fr_u32)(p >> 32);
    {
        // Row 1: a_1, a_3 to E at limbs 2..5 (4, 5 fresh: c_0, c_1); a_0, a_2 to O at 1..4.
        const fr_u32 bi = b[1];
        fr_carry ke, ko;
        E[2] = mad_lo_cc(ke, a[1], bi, E[2]);
        E[3] = madc_hi_cc(ke, a[1], bi, E[3]);
        E[4] = madc_lo_cc(ke, a[3], bi, c[0]);
        E[5] = madc_hi_cc(ke, a[3], bi, c[1]);
        E[6] = addc(ke, 0u, 0u);
        O[1] = mad_lo_cc(ko, a[0], bi, O[1]);
        O[2] = madc_hi_cc(ko, a[0], bi, O[2]);
        O[3] = madc_lo_cc(ko, a[2], bi, O[3]);
        O[4] = madc_hi_cc(ko, a[2], bi, O[4]);
        O[5] = addc(ko, 0u, 0u);
    }
    {
        // Row 2: a_0, a_2 to E at limbs 2..5; a_1, a_3 to O at 3..6 (6 fresh: c_2).
        const fr_u32 bi = b[2];
        fr_carry ke, ko;
        E[2] = mad_lo_cc(ke, a[0], bi, E[2]);
        E[3] = madc_hi_cc(ke, a[0], bi, E[3]);
        E[4] = madc_lo_cc(ke, a[2], bi, E[4]);
        E[5] = madc_hi_cc(ke, a[2], bi, E[5]);
        E[6] = addc(ke, E[6], 0u);
        O[3] = mad_lo_cc(ko, a[1], bi, O[3]);
        O[4] = madc_hi_cc(ko, a[1], bi, O[4]);
        O[5] = madc_lo_cc(ko, a[3], bi, O[5]);
        O[6] = madc_hi_cc(ko, a[3], bi, c[2]);
        O[7] = addc(ko, 0u, 0u);
    }
    {
        // Row 3: a_1, a_3 to E at limbs 4..7 (7 fresh: c_3); a_0, a_2 to O at 3..6.
        const fr_u32 bi = b[3];
        fr_carry ke, ko;
        E[4] = mad_lo_cc(ke, a[1], bi, E[4]);
        E[5] = madc_hi_cc(ke, a[1], bi, E[5]);
        E[6] = madc_lo_cc(ke, a[3], bi, E[6]);
        E[7] = madc_hi(ke, a[3], bi, c[3]);
        O[3] = mad_lo_cc(ko, a[0], bi, O[3]);
        O[4] = madc_hi_cc(ko, a[0], bi, O[4]);
        O[5] = madc_lo_cc(ko, a[2], bi, O[5]);
        O[6] = madc_hi_cc(ko, a[2], bi, O[6]);
        O[7] = addc(ko, O[7], 0u);
    }
    fr_carry k;
    z[0] = E[0];
    z[1] = add_cc(k, E[1], O[1]);
#pragma unroll
    for (int j = 2; j < 7; j++) z[j] = addc_cc(k, E[j], O[j]);
    z[7] = addc(k, E[7], O[7]);
}

// fr_mul_cios's result with one level of Karatsuba for a * b (48 wide products instead of 64),
// then a word-by-word Montgomery reduction of the 512-bit product (48 more): fewer multiply-pipe
// instructions for more additions (see the top of the file), so it pays only where the ALU pipe
// has room; kept as a variant to time (fr_bench_kara, ntt_kara). Needs a, b < r.
// With A = A0 + A1 2^128, B = B0 + B1 2^128 (A0 = limbs 0..3):
//   a b = z0 + mid 2^128 + z2 2^256,  z0 = A0 B0,  z2 = A1 B1,
//   mid = A0 B1 + A1 B0 = (A0 + A1)(B0 + B1) - z0 - z2.
// A1, B1 < 2^127 (r < 2^255), so mid < 2^256 and is computed mod 2^256: with
// A0 + A1 = sa + ca 2^128 and B0 + B1 = sb + cb 2^128, (A0 + A1)(B0 + B1) = sa sb +
// (ca sb + cb sa) 2^128 mod 2^256 (ca cb 2^256 drops out), the correction riding in the
// sa * sb product's free addends.
// Reduction: for T = T_lo + T_hi 2^256, (T + M r) / 2^256 = (T_lo + M r) / 2^256 + T_hi with M
// the Montgomery factor of T_lo alone. The first term is fr_mul_cios's loop without the a * b
// rows (same E/O layout), so its running value stays below 2^256 + 2^32 r < 2^288 (E 9 limbs,
// O 8, no chain carries out) and ends at most r; T_hi <= a b / 2^256 < r^2 / 2^256 < 0.46 r, so
// the sum is below 2r < 2^256 and one conditional subtraction finishes.
FR_FN fr_t fr_mul_karatsuba(const fr_t &a, const fr_t &b) {
    fr_u32 sa[4], sb[4], ca, cb;
    {
        fr_carry k;
        sa[0] = add_cc(k, a.l[0], a.l[4]);
        sa[1] = addc_cc(k, a.l[1], a.l[5]);
        sa[2] = addc_cc(k, a.l[2], a.l[6]);
        sa[3] = addc_cc(k, a.l[3], a.l[7]);
        ca = addc(k, 0u, 0u);
    }
    {
        fr_carry k;
        sb[0] = add_cc(k, b.l[0], b.l[4]);
        sb[1] = addc_cc(k, b.l[1], b.l[5]);
        sb[2] = addc_cc(k, b.l[2], b.l[6]);
        sb[3] = addc_cc(k, b.l[3], b.l[7]);
        cb = addc(k, 0u, 0u);
    }
    // ca sb + cb sa mod 2^128.
    fr_u32 corr[4];
    {
        fr_carry k;
        corr[0] = add_cc(k, ca ? sb[0] : 0u, cb ? sa[0] : 0u);
        corr[1] = addc_cc(k, ca ? sb[1] : 0u, cb ? sa[1] : 0u);
        corr[2] = addc_cc(k, ca ? sb[2] : 0u, cb ? sa[2] : 0u);
        corr[3] = addc(k, ca ? sb[3] : 0u, cb ? sa[3] : 0u);
    }
    const fr_u32 none[4] = {0u, 0u, 0u, 0u};
    fr_u32 z0[8], z1[8], z2[8];
    fr_mul_128(z0, a.l, b.l, none);
    fr_mul_128(z2, a.l + 4, b.l + 4, none);
    fr_mul_128(z1, sa, sb, corr);
    // mid = z1 - z0 - z2 mod 2^256.
    fr_u32 mid[8];
    {
        fr_carry k;
        mid[0] = sub_cc(k, z1[0], z0[0]);
#pragma unroll
        for (int j = 1; j < 7; j++) mid[j] = subc_cc(k, z1[j], z0[j]);
        mid[7] = subc(k, z1[7], z0[7]);
    }
    {
        fr_carry k;
        mid[0] = sub_cc(k, mid[0], z2[0]);
#pragma unroll
        for (int j = 1; j < 7; j++) mid[j] = subc_cc(k, mid[j], z2[j]);
        mid[7] = subc(k, mid[7], z2[7]);
    }
    // Montgomery reduction of T_lo = z0 + mid_lo 2^128 (mid_lo = mid mod 2^128, T_lo < 2^257)
    // by fr_mul_cios's steps (see there; V = E + O 2^32 + pend), starting from E = z0 and O =
    // mid_lo at limbs 4..7 (O[j] is limb j + 1): no addition needed, and the carry of z0 +
    // mid_lo 2^128 into limb 8 stays in V.
    fr_u32 E[9], O[8], pend = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) E[j] = z0[j];
    E[8] = 0;
    O[0] = O[1] = O[2] = 0;
    O[3] = mid[0];
    O[4] = mid[1];
    O[5] = mid[2];
    O[6] = mid[3];
    O[7] = 0;
#pragma unroll
    for (int i = 0; i < FR_LIMBS; i++) {
        fr_cios_reduce_step<true>(E, O, pend);
        if (i + 1 < FR_LIMBS) fr_cios_shift(E, O, pend);
    }
    // T_hi = z2 + (mid >> 128), without the carry out of T_lo (inside V). Meanwhile
    // (T_lo + M r) / 2^256 = O + E[1..9) < (2^257 + 2^256 r) / 2^256 <= r + 1.
    fr_t h;
    {
        fr_carry k;
        h.l[0] = add_cc(k, z2[0], mid[4]);
        h.l[1] = addc_cc(k, z2[1], mid[5]);
        h.l[2] = addc_cc(k, z2[2], mid[6]);
        h.l[3] = addc_cc(k, z2[3], mid[7]);
        h.l[4] = addc_cc(k, z2[4], 0u);
        h.l[5] = addc_cc(k, z2[5], 0u);
        h.l[6] = addc_cc(k, z2[6], 0u);
        h.l[7] = addc(k, z2[7], 0u);
    }
    fr_t r = fr_cios_value(E, O);
    {
        fr_carry k;
        r.l[0] = add_cc(k, r.l[0], h.l[0]);
#pragma unroll
        for (int j = 1; j < 7; j++) r.l[j] = addc_cc(k, r.l[j], h.l[j]);
        r.l[7] = addc(k, r.l[7], h.l[7]);
    }
    return fr_reduce_once(r);
}

// The Montgomery product every kernel uses: fr_mul_cios, or fr_mul_karatsuba where the module
// defines FR_MUL_KARATSUBA=1 (kernels/fr_bench_kara.cu, ntt_kara.cu; timed side by side).
FR_FN fr_t fr_mul(const fr_t &a, const fr_t &b) {
#if defined(FR_MUL_KARATSUBA) && FR_MUL_KARATSUBA
    return fr_mul_karatsuba(a, b);
#else
    return fr_mul_cios(a, b);
#endif
}

FR_FN fr_t fr_sqr(const fr_t &a) {
    return fr_mul(a, a);
}

// a^e for a 64-bit exponent (square and multiply, most significant bit first).
FR_FN fr_t fr_pow_u64(const fr_t &a, fr_u64 e) {
    fr_t r = fr_one();
    for (int i = 63; i >= 0; i--) {
        r = fr_sqr(r);
        if ((e >> i) & 1ull) r = fr_mul(r, a);
    }
    return r;
}
