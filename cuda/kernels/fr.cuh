// BLS12-381 scalar field Fr: r = 0x73eda753299d7d483339d80809a1d80553bda402fffe5bfeffffffff00000001.
//
// Elements are 8 little-endian 32-bit limbs in Montgomery form with R = 2^256: the same bytes
// as blstrs' `Scalar` (4 little-endian u64 limbs, Montgomery, R = 2^256), so buffers of Scalars
// are used on the device without conversion.
//
// Written once for host and device. On the device the carry chains are single PTX instructions
// (add.cc / madc.hi.cc ...) that keep the carry in the hardware flag; on the host (plain C++,
// used by the CPU tests that compare against blstrs) each primitive emulates the same
// instruction with an explicit carry word. The field algorithms above the primitives are the
// same code on both sides, so the host tests exercise the device's carry-chain order.
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
// -r^-1 mod 2^32 (r = 1 mod 2^32).
#define FR_PINV 0xffffffffu

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

// One row of the CIOS product: t[0..9) += x * y[0..8) (y is a field element or the modulus).
// The caller guarantees the sum fits 9 limbs (CIOS bound: t < 2^33 * r < 2^288).
#define FR_ROW(T, X, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)                                          \
    do {                                                                                     \
        fr_carry k_;                                                                         \
        T[0] = mad_lo_cc(k_, X, Y0, T[0]);                                                   \
        T[1] = madc_lo_cc(k_, X, Y1, T[1]);                                                  \
        T[2] = madc_lo_cc(k_, X, Y2, T[2]);                                                  \
        T[3] = madc_lo_cc(k_, X, Y3, T[3]);                                                  \
        T[4] = madc_lo_cc(k_, X, Y4, T[4]);                                                  \
        T[5] = madc_lo_cc(k_, X, Y5, T[5]);                                                  \
        T[6] = madc_lo_cc(k_, X, Y6, T[6]);                                                  \
        T[7] = madc_lo_cc(k_, X, Y7, T[7]);                                                  \
        T[8] = addc(k_, T[8], 0u);                                                           \
        fr_carry h_;                                                                         \
        T[1] = mad_hi_cc(h_, X, Y0, T[1]);                                                   \
        T[2] = madc_hi_cc(h_, X, Y1, T[2]);                                                  \
        T[3] = madc_hi_cc(h_, X, Y2, T[3]);                                                  \
        T[4] = madc_hi_cc(h_, X, Y3, T[4]);                                                  \
        T[5] = madc_hi_cc(h_, X, Y4, T[5]);                                                  \
        T[6] = madc_hi_cc(h_, X, Y5, T[6]);                                                  \
        T[7] = madc_hi_cc(h_, X, Y6, T[7]);                                                  \
        T[8] = madc_hi(h_, X, Y7, T[8]);                                                     \
    } while (0)

// a * b * R^-1 mod r (Montgomery product), by CIOS over 32-bit limbs: for each limb of b,
// add a * b_i, add m * r with m chosen to clear the low limb, shift one limb down. The running
// value stays below 2r, so one conditional subtraction finishes.
FR_FN fr_t fr_mul(const fr_t &a, const fr_t &b) {
    fr_u32 t[9];
#pragma unroll
    for (int i = 0; i < 9; i++) t[i] = 0;
#pragma unroll
    for (int i = 0; i < FR_LIMBS; i++) {
        fr_u32 bi = b.l[i];
        FR_ROW(t, bi, a.l[0], a.l[1], a.l[2], a.l[3], a.l[4], a.l[5], a.l[6], a.l[7]);
        fr_u32 m = t[0] * FR_PINV;
        FR_ROW(t, m, FR_P0, FR_P1, FR_P2, FR_P3, FR_P4, FR_P5, FR_P6, FR_P7);
        // t[0] is now 0 (mod 2^32): divide by 2^32.
#pragma unroll
        for (int j = 0; j < 8; j++) t[j] = t[j + 1];
        t[8] = 0;
    }
    fr_t r;
#pragma unroll
    for (int i = 0; i < FR_LIMBS; i++) r.l[i] = t[i];
    return fr_reduce_once(r);
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
