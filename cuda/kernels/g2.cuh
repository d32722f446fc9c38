// BLS12-381 G2 (y^2 = x^3 + 4(1 + u) over Fq2) for bucket accumulation.
//
// The twin of g1.cuh over Fq2 (fq2.cuh): the XYZZ formulas for a = 0 never use the curve's b,
// so they are G1's line for line with Fq2 operations. Inputs are affine points laid out as
// blstrs/blst lay them out (`blst_p2_affine`: x then y, each a `blst_fp2` c0, c1: 192 bytes of
// Montgomery limbs; the point at infinity is x = y = 0). Buckets are XYZZ (384 bytes). Results
// leave as Jacobian points with the layout of `blst_p2` (X, Y, Z; 288 bytes; infinity Z = 0).
//
// Formulas: Explicit-Formulas Database, "shortw-xyzz" (madd-2008-s, add-2008-s, dbl-2008-s-1,
// mdbl-2008-s-1) with a = 0, written here with every exceptional case handled: either input at
// infinity, P + P (doubling) and P + (-P) (infinity).
#ifndef GPUD_G2_CUH
#define GPUD_G2_CUH

#include "fq2.cuh"

namespace gpud {

struct g2_affine {
    fq2_t x, y;
};

struct g2_xyzz {
    fq2_t x, y, zz, zzz;
};

struct g2_jacobian {
    fq2_t x, y, z;
};

GPUD_HD bool g2_affine_is_inf(const g2_affine& p) { return fq2_is_zero(p.x) && fq2_is_zero(p.y); }

GPUD_HD g2_affine g2_affine_neg(const g2_affine& p) {
    g2_affine r;
    r.x = p.x;
    r.y = fq2_neg(p.y);  // -0 = 0 keeps infinity at infinity
    return r;
}

GPUD_HD g2_xyzz g2_xyzz_inf() {
    g2_xyzz r;
    r.x = fq2_zero();
    r.y = fq2_zero();
    r.zz = fq2_zero();
    r.zzz = fq2_zero();
    return r;
}

GPUD_HD bool g2_xyzz_is_inf(const g2_xyzz& p) { return fq2_is_zero(p.zz); }

GPUD_HD g2_xyzz g2_xyzz_from_affine(const g2_affine& p) {
    if (g2_affine_is_inf(p)) return g2_xyzz_inf();
    g2_xyzz r;
    r.x = p.x;
    r.y = p.y;
    r.zz = fq2_one();
    r.zzz = fq2_one();
    return r;
}

// 2 * (x, y) for an affine point (mdbl-2008-s-1). y = 0 does not occur in the prime-order
// G2 (no 2-torsion),
// but the formula gives ZZ = 0 (infinity) for it anyway.
GPUD_HD_CALL g2_xyzz g2_xyzz_dbl_affine(const fq2_t& x, const fq2_t& y) {
    fq2_t u = fq2_dbl(y);
    fq2_t v = fq2_sqr(u);
    fq2_t w = fq2_mul(u, v);
    fq2_t s = fq2_mul(x, v);
    fq2_t x2 = fq2_sqr(x);
    fq2_t m = fq2_add(fq2_dbl(x2), x2);
    g2_xyzz r;
    r.x = fq2_sub(fq2_sqr(m), fq2_dbl(s));
    r.y = fq2_sub(fq2_mul(m, fq2_sub(s, r.x)), fq2_mul(w, y));
    r.zz = v;
    r.zzz = w;
    return r;
}

// 2P in XYZZ (dbl-2008-s-1, a = 0): 6M + 3S.
GPUD_HD_CALL g2_xyzz g2_xyzz_dbl(const g2_xyzz& p) {
    fq2_t u = fq2_dbl(p.y);
    fq2_t v = fq2_sqr(u);
    fq2_t w = fq2_mul(u, v);
    fq2_t s = fq2_mul(p.x, v);
    fq2_t x2 = fq2_sqr(p.x);
    fq2_t m = fq2_add(fq2_dbl(x2), x2);
    g2_xyzz r;
    r.x = fq2_sub(fq2_sqr(m), fq2_dbl(s));
    r.y = fq2_sub(fq2_mul(m, fq2_sub(s, r.x)), fq2_mul(w, p.y));
    r.zz = fq2_mul(v, p.zz);
    r.zzz = fq2_mul(w, p.zzz);
    return r;  // infinity in, infinity out: zz = 0 gives zz' = 0
}

// acc += q, q affine (madd-2008-s): 8M + 2S in the common case.
GPUD_HD void g2_xyzz_add_affine(g2_xyzz& acc, const g2_affine& q) {
    if (g2_affine_is_inf(q)) return;
    if (g2_xyzz_is_inf(acc)) {
        acc = g2_xyzz_from_affine(q);
        return;
    }
    fq2_t u2 = fq2_mul(q.x, acc.zz);
    fq2_t s2 = fq2_mul(q.y, acc.zzz);
    fq2_t p = fq2_sub(u2, acc.x);
    fq2_t r = fq2_sub(s2, acc.y);
    if (fq2_is_zero(p)) {
        if (fq2_is_zero(r)) {
            acc = g2_xyzz_dbl_affine(q.x, q.y);  // acc == q
        } else {
            acc = g2_xyzz_inf();  // acc == -q
        }
        return;
    }
    fq2_t pp = fq2_sqr(p);
    fq2_t ppp = fq2_mul(p, pp);
    fq2_t qq = fq2_mul(acc.x, pp);
    fq2_t x3 = fq2_sub(fq2_sub(fq2_sqr(r), ppp), fq2_dbl(qq));
    fq2_t y3 = fq2_sub(fq2_mul(r, fq2_sub(qq, x3)), fq2_mul(acc.y, ppp));
    acc.x = x3;
    acc.y = y3;
    acc.zz = fq2_mul(acc.zz, pp);
    acc.zzz = fq2_mul(acc.zzz, ppp);
}

// acc += q, both XYZZ (add-2008-s): 12M + 2S in the common case.
GPUD_HD_CALL void g2_xyzz_add(g2_xyzz& acc, const g2_xyzz& q) {
    if (g2_xyzz_is_inf(q)) return;
    if (g2_xyzz_is_inf(acc)) {
        acc = q;
        return;
    }
    fq2_t u1 = fq2_mul(acc.x, q.zz);
    fq2_t u2 = fq2_mul(q.x, acc.zz);
    fq2_t s1 = fq2_mul(acc.y, q.zzz);
    fq2_t s2 = fq2_mul(q.y, acc.zzz);
    fq2_t p = fq2_sub(u2, u1);
    fq2_t r = fq2_sub(s2, s1);
    if (fq2_is_zero(p)) {
        if (fq2_is_zero(r)) {
            acc = g2_xyzz_dbl(acc);
        } else {
            acc = g2_xyzz_inf();
        }
        return;
    }
    fq2_t pp = fq2_sqr(p);
    fq2_t ppp = fq2_mul(p, pp);
    fq2_t qq = fq2_mul(u1, pp);
    fq2_t x3 = fq2_sub(fq2_sub(fq2_sqr(r), ppp), fq2_dbl(qq));
    fq2_t y3 = fq2_sub(fq2_mul(r, fq2_sub(qq, x3)), fq2_mul(s1, ppp));
    acc.x = x3;
    acc.y = y3;
    acc.zz = fq2_mul(fq2_mul(acc.zz, q.zz), pp);
    acc.zzz = fq2_mul(fq2_mul(acc.zzz, q.zzz), ppp);
}

// k * p for a small non-negative k (double-and-add, most significant bit first).
GPUD_HD_CALL g2_xyzz g2_xyzz_mul_small(const g2_xyzz& p, uint32_t k) {
    g2_xyzz r = g2_xyzz_inf();
    if (k == 0) return r;
    int top = 31;
    while (((k >> top) & 1u) == 0) top--;
    r = p;
    for (int bit = top - 1; bit >= 0; bit--) {
        r = g2_xyzz_dbl(r);
        if ((k >> bit) & 1u) g2_xyzz_add(r, p);
    }
    return r;
}

// XYZZ -> Jacobian without an inversion: Z = ZZ*ZZZ, X = X*ZZ*ZZZ^2, Y = Y*ZZ^3*ZZZ^2.
// (X/Z^2 = X/ZZ and Y/Z^3 = Y/ZZZ for any ZZ, ZZZ.) Infinity (ZZ = 0) gives Z = 0.
GPUD_HD_CALL g2_jacobian g2_xyzz_to_jacobian(const g2_xyzz& p) {
    g2_jacobian r;
    if (g2_xyzz_is_inf(p)) {
        r.x = fq2_one();
        r.y = fq2_one();
        r.z = fq2_zero();
        return r;
    }
    fq2_t zzz2 = fq2_sqr(p.zzz);
    fq2_t zz3 = fq2_mul(fq2_sqr(p.zz), p.zz);
    r.x = fq2_mul(fq2_mul(p.x, p.zz), zzz2);
    r.y = fq2_mul(fq2_mul(p.y, zz3), zzz2);
    r.z = fq2_mul(p.zz, p.zzz);
    return r;
}

// XYZZ -> affine (one inversion); infinity gives (0, 0). Host tests and final outputs only.
inline
#if defined(__CUDACC__)
    __host__ __device__
#endif
    g2_affine
    g2_xyzz_to_affine(const g2_xyzz& p) {
    g2_affine r;
    if (g2_xyzz_is_inf(p)) {
        r.x = fq2_zero();
        r.y = fq2_zero();
        return r;
    }
    // One inversion of ZZ*ZZZ gives both 1/ZZ and 1/ZZZ.
    fq2_t t = fq2_inv(fq2_mul(p.zz, p.zzz));  // 1/(ZZ ZZZ)
    fq2_t inv_zz = fq2_mul(t, p.zzz);
    fq2_t inv_zzz = fq2_mul(t, p.zz);
    r.x = fq2_mul(p.x, inv_zz);
    r.y = fq2_mul(p.y, inv_zzz);
    return r;
}

// The point operations the generic Pippenger steps of msm.cuh use, for G2.
struct g2_ops {
    typedef g2_affine affine;
    typedef g2_xyzz xyzz;
    typedef g2_jacobian jacobian;
    GPUD_HD static affine neg(const affine& p) { return g2_affine_neg(p); }
    GPUD_HD static xyzz inf() { return g2_xyzz_inf(); }
    GPUD_HD static bool is_inf(const xyzz& p) { return g2_xyzz_is_inf(p); }
    GPUD_HD static void add_affine(xyzz& acc, const affine& q) { g2_xyzz_add_affine(acc, q); }
    GPUD_HD static void add(xyzz& acc, const xyzz& q) { g2_xyzz_add(acc, q); }
    GPUD_HD static xyzz dbl(const xyzz& p) { return g2_xyzz_dbl(p); }
    GPUD_HD static xyzz mul_small(const xyzz& p, uint32_t k) { return g2_xyzz_mul_small(p, k); }
    GPUD_HD static jacobian to_jacobian(const xyzz& p) { return g2_xyzz_to_jacobian(p); }
    // Whether the MSM's accumulation loads the next point while it adds the current one: a G2
    // point is 48 words beside an accumulator of 96 that already fills the register file, and
    // an addition of ~28 field products is far longer than the load. Without it the
    // accumulation spills 202 bytes instead of 742 (ptxas, sm_90).
    static constexpr bool prefetch = false;
    // The coordinates' field (the fixed-base kernel's batched inversion).
    typedef fq2_t fe;
    GPUD_HD static fe fe_mul(const fe& a, const fe& b) { return fq2_mul(a, b); }
    GPUD_HD static fe fe_one() { return fq2_one(); }
    GPUD_HD static fe fe_zero() { return fq2_zero(); }
    GPUD_HD_CALL static fe fe_inv(const fe& a) { return fq2_inv(a); }
};

}  // namespace gpud

#endif  // GPUD_G2_CUH
