// Fixed-base scalar multiplication, k * G for many k and one G, in G1 or G2: what a Groth16
// parameter generator spends its time on (every point of a proving key is a multiple of one
// generator of its group). Templates over the group's point operations (g1_ops, g2_ops).
//
// From a table of d * 2^(8w) * G (w = 0..31 windows of 8 bits, d = 1..255) each scalar costs at
// most 32 mixed additions (one per non-zero byte) into an XYZZ accumulator. The accumulators of
// a batch of up to GPUD_FB_BATCH points are then made affine with one field inversion
// (Montgomery's trick): an inversion costs about 570 field products, more than the 32
// additions, so inverting once per batch instead of once per point more than halves a G1
// point's work. Scalars are canonical (not Montgomery), 8 x 32-bit limbs, little-endian; the
// output is blst's affine layout, infinity as (0, 0).
//
// The including file includes g1.cuh and/or g2.cuh first.
#ifndef GPUD_FIXED_BASE_CUH
#define GPUD_FIXED_BASE_CUH

namespace gpud {

// Windows of 8 bits over a 256-bit scalar, and the non-zero digits of each.
#define GPUD_FB_WINDOWS 32
#define GPUD_FB_DIGITS 255
// Points made affine with one inversion.
#define GPUD_FB_BATCH 8

// k * G (XYZZ) where table[w * 255 + d - 1] = d * 2^(8w) * G.
template <class Ops>
GPUD_HD typename Ops::xyzz fixed_base_sum(const typename Ops::affine* table, const uint32_t* k) {
    typename Ops::xyzz acc = Ops::inf();
    for (int w = 0; w < GPUD_FB_WINDOWS; w++) {
        uint32_t d = (k[w >> 2] >> (8 * (w & 3))) & 0xffu;
        if (d != 0) Ops::add_affine(acc, table[w * GPUD_FB_DIGITS + (int)d - 1]);
    }
    return acc;
}

// out[j] = scalars[j] * G in affine form for j < count (count <= GPUD_FB_BATCH), with one
// inversion. `scratch` holds `count` XYZZ points (the accumulators between the two passes).
template <class Ops>
GPUD_HD void fixed_base_batch(const typename Ops::affine* table, const uint32_t* scalars,
                              typename Ops::xyzz* scratch, typename Ops::affine* out,
                              uint32_t count) {
    typedef typename Ops::fe fe;
    // prefix[j]: the product of ZZ * ZZZ over the finite points among 0..=j.
    fe prefix[GPUD_FB_BATCH];
    fe run = Ops::fe_one();
    for (uint32_t j = 0; j < count; j++) {
        typename Ops::xyzz acc = fixed_base_sum<Ops>(table, scalars + 8 * j);
        scratch[j] = acc;
        if (!Ops::is_inf(acc)) run = Ops::fe_mul(run, Ops::fe_mul(acc.zz, acc.zzz));
        prefix[j] = run;
    }
    // inv = 1 / prefix[j] while walking down from the last point.
    fe inv = Ops::fe_inv(run);
    for (uint32_t j = count; j-- > 0;) {
        typename Ops::xyzz p = scratch[j];
        typename Ops::affine r;
        if (Ops::is_inf(p)) {
            r.x = Ops::fe_zero();
            r.y = Ops::fe_zero();
            out[j] = r;
            continue;
        }
        fe zz_zzz = Ops::fe_mul(p.zz, p.zzz);
        fe t = j > 0 ? Ops::fe_mul(inv, prefix[j - 1]) : inv;  // 1 / (ZZ ZZZ)
        inv = Ops::fe_mul(inv, zz_zzz);
        // x = X / ZZ, y = Y / ZZZ.
        r.x = Ops::fe_mul(p.x, Ops::fe_mul(t, p.zzz));
        r.y = Ops::fe_mul(p.y, Ops::fe_mul(t, p.zz));
        out[j] = r;
    }
}

}  // namespace gpud

#endif  // GPUD_FIXED_BASE_CUH
