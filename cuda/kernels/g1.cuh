// BLS12-381 G1 (y^2 = x^3 + 4 over Fq) for bucket accumulation.
//
// Inputs are affine points laid out as blstrs/blst lay them out (`blst_p1_affine`: x then y,
// 96 bytes, Montgomery limbs; the point at infinity is x = y = 0). Buckets are kept in XYZZ
// coordinates (x = X/ZZ, y = Y/ZZZ, ZZ^3 = ZZZ^2; the point at infinity has ZZ = ZZZ = 0), which
// give the cheapest mixed addition (8M + 2S) with an affine input. Results leave as Jacobian
// points with the layout of `blst_p1` (X, Y, Z; x = X/Z^2, y = Y/Z^3; infinity Z = 0).
//
// Formulas: Explicit-Formulas Database, "shortw-xyzz" (madd-2008-s, add-2008-s, dbl-2008-s-1,
// mdbl-2008-s-1) with a = 0, written here with every exceptional case handled: either input at
// infinity, P + P (doubling) and P + (-P) (infinity).
#ifndef GPUD_G1_CUH
#define GPUD_G1_CUH

#include "fq.cuh"

namespace gpud {

struct g1_affine {
    fq_t x, y;
};

struct g1_xyzz {
    fq_t x, y, zz, zzz;
};

struct g1_jacobian {
    fq_t x, y, z;
};

GPUD_HD bool g1_affine_is_inf(const g1_affine& p) { return fq_is_zero(p.x) && fq_is_zero(p.y); }

GPUD_HD g1_affine g1_affine_neg(const g1_affine& p) {
    g1_affine r;
    r.x = p.x;
    r.y = fq_neg(p.y);  // -0 = 0 keeps infinity at infinity
    return r;
}

GPUD_HD g1_xyzz g1_xyzz_inf() {
    g1_xyzz r;
    r.x = fq_zero();
    r.y = fq_zero();
    r.zz = fq_zero();
    r.zzz = fq_zero();
    return r;
}

GPUD_HD bool g1_xyzz_is_inf(const g1_xyzz& p) { return fq_is_zero(p.zz); }

GPUD_HD g1_xyzz g1_xyzz_from_affine(const g1_affine& p) {
    if (g1_affine_is_inf(p)) return g1_xyzz_inf();
    g1_xyzz r;
    r.x = p.x;
    r.y = p.y;
    r.zz = fq_one();
    r.zzz = fq_one();
    return r;
}

// 2 * (x, y) for an affine point (mdbl-2008-s-1). y = 0 does not occur on G1 (no 2-torsion),
// but the formula gives ZZ = 0 (infinity) for it anyway.
GPUD_HD_CALL g1_xyzz g1_xyzz_dbl_affine(const fq_t& x, const fq_t& y) {
    fq_t u = fq_dbl(y);
    fq_t v = fq_sqr(u);
    fq_t w = fq_mul(u, v);
    fq_t s = fq_mul(x, v);
    fq_t x2 = fq_sqr(x);
    fq_t m = fq_add(fq_dbl(x2), x2);
    g1_xyzz r;
    r.x = fq_sub(fq_sqr(m), fq_dbl(s));
    r.y = fq_sub(fq_mul(m, fq_sub(s, r.x)), fq_mul(w, y));
    r.zz = v;
    r.zzz = w;
    return r;
}

// 2P in XYZZ (dbl-2008-s-1, a = 0): 6M + 3S.
GPUD_HD_CALL g1_xyzz g1_xyzz_dbl(const g1_xyzz& p) {
    fq_t u = fq_dbl(p.y);
    fq_t v = fq_sqr(u);
    fq_t w = fq_mul(u, v);
    fq_t s = fq_mul(p.x, v);
    fq_t x2 = fq_sqr(p.x);
    fq_t m = fq_add(fq_dbl(x2), x2);
    g1_xyzz r;
    r.x = fq_sub(fq_sqr(m), fq_dbl(s));
    r.y = fq_sub(fq_mul(m, fq_sub(s, r.x)), fq_mul(w, p.y));
    r.zz = fq_mul(v, p.zz);
    r.zzz = fq_mul(w, p.zzz);
    return r;  // infinity in, infinity out: zz = 0 gives zz' = 0
}

// acc += q, q affine (madd-2008-s): 8M + 2S in the common case.
GPUD_HD void g1_xyzz_add_affine(g1_xyzz& acc, const g1_affine& q) {
    if (g1_affine_is_inf(q)) return;
    if (g1_xyzz_is_inf(acc)) {
        acc = g1_xyzz_from_affine(q);
        return;
    }
    fq_t u2 = fq_mul(q.x, acc.zz);
    fq_t s2 = fq_mul(q.y, acc.zzz);
    fq_t p = fq_sub(u2, acc.x);
    fq_t r = fq_sub(s2, acc.y);
    if (fq_is_zero(p)) {
        if (fq_is_zero(r)) {
            acc = g1_xyzz_dbl_affine(q.x, q.y);  // acc == q
        } else {
            acc = g1_xyzz_inf();  // acc == -q
        }
        return;
    }
    fq_t pp = fq_sqr(p);
    fq_t ppp = fq_mul(p, pp);
    fq_t qq = fq_mul(acc.x, pp);
    fq_t x3 = fq_sub(fq_sub(fq_sqr(r), ppp), fq_dbl(qq));
    fq_t y3 = fq_sub(fq_mul(r, fq_sub(qq, x3)), fq_mul(acc.y, ppp));
    acc.x = x3;
    acc.y = y3;
    acc.zz = fq_mul(acc.zz, pp);
    acc.zzz = fq_mul(acc.zzz, ppp);
}

// acc += q, both XYZZ (add-2008-s): 12M + 2S in the common case.
GPUD_HD_CALL void g1_xyzz_add(g1_xyzz& acc, const g1_xyzz& q) {
    if (g1_xyzz_is_inf(q)) return;
    if (g1_xyzz_is_inf(acc)) {
        acc = q;
        return;
    }
    fq_t u1 = fq_mul(acc.x, q.zz);
    fq_t u2 = fq_mul(q.x, acc.zz);
    fq_t s1 = fq_mul(acc.y, q.zzz);
    fq_t s2 = fq_mul(q.y, acc.zzz);
    fq_t p = fq_sub(u2, u1);
    fq_t r = fq_sub(s2, s1);
    if (fq_is_zero(p)) {
        if (fq_is_zero(r)) {
            acc = g1_xyzz_dbl(acc);
        } else {
            acc = g1_xyzz_inf();
        }
        return;
    }
    fq_t pp = fq_sqr(p);
    fq_t ppp = fq_mul(p, pp);
    fq_t qq = fq_mul(u1, pp);
    fq_t x3 = fq_sub(fq_sub(fq_sqr(r), ppp), fq_dbl(qq));
    fq_t y3 = fq_sub(fq_mul(r, fq_sub(qq, x3)), fq_mul(s1, ppp));
    acc.x = x3;
    acc.y = y3;
    acc.zz = fq_mul(fq_mul(acc.zz, q.zz), pp);
    acc.zzz = fq_mul(fq_mul(acc.zzz, q.zzz), ppp);
}

// k * p for a small non-negative k (double-and-add, most significant bit first).
GPUD_HD_CALL g1_xyzz g1_xyzz_mul_small(const g1_xyzz& p, uint32_t k) {
    g1_xyzz r = g1_xyzz_inf();
    if (k == 0) return r;
    int top = 31;
    while (((k >> top) & 1u) == 0) top--;
    r = p;
    for (int bit = top - 1; bit >= 0; bit--) {
        r = g1_xyzz_dbl(r);
        if ((k >> bit) & 1u) g1_xyzz_add(r, p);
    }
    return r;
}

// XYZZ -> Jacobian without an inversion: Z = ZZ*ZZZ, X = X*ZZ*ZZZ^2, Y = Y*ZZ^3*ZZZ^2.
// (X/Z^2 = X/ZZ and Y/Z^3 = Y/ZZZ for any ZZ, ZZZ.) Infinity (ZZ = 0) gives Z = 0.
GPUD_HD_CALL g1_jacobian g1_xyzz_to_jacobian(const g1_xyzz& p) {
    g1_jacobian r;
    if (g1_xyzz_is_inf(p)) {
        r.x = fq_one();
        r.y = fq_one();
        r.z = fq_zero();
        return r;
    }
    fq_t zzz2 = fq_sqr(p.zzz);
    fq_t zz3 = fq_mul(fq_sqr(p.zz), p.zz);
    r.x = fq_mul(fq_mul(p.x, p.zz), zzz2);
    r.y = fq_mul(fq_mul(p.y, zz3), zzz2);
    r.z = fq_mul(p.zz, p.zzz);
    return r;
}

// XYZZ -> affine (one inversion); infinity gives (0, 0). Host tests and final outputs only.
inline
#if defined(__CUDACC__)
    __host__ __device__
#endif
    g1_affine
    g1_xyzz_to_affine(const g1_xyzz& p) {
    g1_affine r;
    if (g1_xyzz_is_inf(p)) {
        r.x = fq_zero();
        r.y = fq_zero();
        return r;
    }
    // One inversion of ZZ*ZZZ gives both 1/ZZ and 1/ZZZ.
    fq_t t = fq_inv(fq_mul(p.zz, p.zzz));  // 1/(ZZ ZZZ)
    fq_t inv_zz = fq_mul(t, p.zzz);
    fq_t inv_zzz = fq_mul(t, p.zz);
    r.x = fq_mul(p.x, inv_zz);
    r.y = fq_mul(p.y, inv_zzz);
    return r;
}

// The point operations the generic Pippenger steps of msm.cuh use, for G1.
struct g1_ops {
    typedef g1_affine affine;
    typedef g1_xyzz xyzz;
    typedef g1_jacobian jacobian;
    GPUD_HD static affine neg(const affine& p) { return g1_affine_neg(p); }
    GPUD_HD static xyzz inf() { return g1_xyzz_inf(); }
    GPUD_HD static bool is_inf(const xyzz& p) { return g1_xyzz_is_inf(p); }
    GPUD_HD static void add_affine(xyzz& acc, const affine& q) { g1_xyzz_add_affine(acc, q); }
    GPUD_HD static void add(xyzz& acc, const xyzz& q) { g1_xyzz_add(acc, q); }
    GPUD_HD static xyzz dbl(const xyzz& p) { return g1_xyzz_dbl(p); }
    GPUD_HD static xyzz mul_small(const xyzz& p, uint32_t k) { return g1_xyzz_mul_small(p, k); }
    GPUD_HD static jacobian to_jacobian(const xyzz& p) { return g1_xyzz_to_jacobian(p); }
    // Whether the MSM's accumulation loads the next point while it adds the current one: a G1
    // point is 24 words beside an addition of ~4000 instructions.
    static constexpr bool prefetch = true;
    // The coordinates' field (the fixed-base kernel's batched inversion).
    typedef fq_t fe;
    GPUD_HD static fe fe_mul(const fe& a, const fe& b) { return fq_mul(a, b); }
    GPUD_HD static fe fe_one() { return fq_one(); }
    GPUD_HD static fe fe_zero() { return fq_zero(); }
    GPUD_HD_CALL static fe fe_inv(const fe& a) { return fq_inv(a); }
};

}  // namespace gpud

#endif  // GPUD_G1_CUH
