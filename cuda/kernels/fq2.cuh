// BLS12-381 Fq2 = Fq[u] / (u^2 + 1), over the Montgomery Fq of fq.cuh.
//
// An element is c0 + c1 u, two fq_t: 96 bytes, the layout of blst's `blst_fp2` (fp[0] = c0,
// fp[1] = c1). Like fq.cuh everything is `__host__ __device__`, so the host harness runs the
// same limb operations as the GPU. Values stay fully reduced.
#ifndef GPUD_FQ2_CUH
#define GPUD_FQ2_CUH

#include "fq.cuh"

// Fq2 multiplication is three inlined Fq products (about 2000 instructions); a G2 point
// addition has a dozen of them, so on the device it is a real call by default (the G2 module
// builds one copy, and the instruction cache holds the loop). GPUD_FQ2_MUL_INLINE=1 inlines it.
#if defined(__CUDACC__) && !(defined(GPUD_FQ2_MUL_INLINE) && GPUD_FQ2_MUL_INLINE)
#define GPUD_FQ2_MUL_HD __host__ __device__ __noinline__
#else
#define GPUD_FQ2_MUL_HD GPUD_HD
#endif

namespace gpud {

struct alignas(16) fq2_t {
    fq_t c0, c1;
};

GPUD_HD fq2_t fq2_make(const fq_t& c0, const fq_t& c1) {
    fq2_t r;
    r.c0 = c0;
    r.c1 = c1;
    return r;
}

GPUD_HD fq2_t fq2_zero() { return fq2_make(fq_zero(), fq_zero()); }

GPUD_HD fq2_t fq2_one() { return fq2_make(fq_one(), fq_zero()); }

GPUD_HD bool fq2_is_zero(const fq2_t& a) { return fq_is_zero(a.c0) && fq_is_zero(a.c1); }

GPUD_HD bool fq2_eq(const fq2_t& a, const fq2_t& b) { return fq_eq(a.c0, b.c0) && fq_eq(a.c1, b.c1); }

GPUD_HD fq2_t fq2_add(const fq2_t& a, const fq2_t& b) {
    return fq2_make(fq_add(a.c0, b.c0), fq_add(a.c1, b.c1));
}

GPUD_HD fq2_t fq2_sub(const fq2_t& a, const fq2_t& b) {
    return fq2_make(fq_sub(a.c0, b.c0), fq_sub(a.c1, b.c1));
}

GPUD_HD fq2_t fq2_dbl(const fq2_t& a) { return fq2_add(a, a); }

GPUD_HD fq2_t fq2_neg(const fq2_t& a) { return fq2_make(fq_neg(a.c0), fq_neg(a.c1)); }

// (a0 + a1 u)(b0 + b1 u) = (a0 b0 - a1 b1) + ((a0 + a1)(b0 + b1) - a0 b0 - a1 b1) u:
// three Fq products (Karatsuba). The sums are reduced first, so every product's inputs are
// below p as mont_mul requires.
GPUD_FQ2_MUL_HD fq2_t fq2_mul(fq2_t a, fq2_t b) {
    fq_t t0 = fq_mul(a.c0, b.c0);
    fq_t t1 = fq_mul(a.c1, b.c1);
    fq_t t2 = fq_mul(fq_add(a.c0, a.c1), fq_add(b.c0, b.c1));
    return fq2_make(fq_sub(t0, t1), fq_sub(fq_sub(t2, t0), t1));
}

// (a0 + a1 u)^2 = (a0 + a1)(a0 - a1) + 2 a0 a1 u: two Fq products.
GPUD_FQ2_MUL_HD fq2_t fq2_sqr(fq2_t a) {
    fq_t t0 = fq_mul(fq_add(a.c0, a.c1), fq_sub(a.c0, a.c1));
    fq_t t1 = fq_mul(a.c0, a.c1);
    return fq2_make(t0, fq_dbl(t1));
}

// 1 / (a0 + a1 u) = (a0 - a1 u) / (a0^2 + a1^2); 0 for 0. Not used in the hot loops.
inline
#if defined(__CUDACC__)
    __host__ __device__
#endif
    fq2_t
    fq2_inv(const fq2_t& a) {
    fq_t norm = fq_add(fq_sqr(a.c0), fq_sqr(a.c1));
    fq_t t = fq_inv(norm);
    return fq2_make(fq_mul(a.c0, t), fq_neg(fq_mul(a.c1, t)));
}

}  // namespace gpud

#endif  // GPUD_FQ2_CUH
