//! The host end of the MSM: window sums (Jacobian, blst layout) combined by doubling.

use blst::{blst_fp, blst_p1};
use blstrs::G1Projective;
use group::Group;

/// A Jacobian point as the kernels write it: X, Y, Z, each 12 little-endian `u32` limbs in
/// Montgomery form (the bytes of blst's `blst_p1`).
pub type JacobianLimbs = [u32; 36];

fn fp_from_limbs(l: &[u32]) -> blst_fp {
    let mut w = [0u64; 6];
    for (i, word) in w.iter_mut().enumerate() {
        *word = u64::from(l[2 * i]) | (u64::from(l[2 * i + 1]) << 32);
    }
    blst_fp { l: w }
}

/// The point a kernel wrote. Z = 0 is the point at infinity, as in blst.
pub fn jacobian_from_limbs(p: &JacobianLimbs) -> G1Projective {
    let mut out = G1Projective::identity();
    *out.as_mut() = blst_p1 {
        x: fp_from_limbs(&p[0..12]),
        y: fp_from_limbs(&p[12..24]),
        z: fp_from_limbs(&p[24..36]),
    };
    out
}

/// sum_j 2^(c j) * windows[j], by Horner from the top window: (W - 1) * c doublings.
pub fn combine_windows(windows: &[JacobianLimbs], window_bits: u32) -> G1Projective {
    let mut acc = G1Projective::identity();
    for (j, w) in windows.iter().enumerate().rev() {
        if j + 1 != windows.len() {
            for _ in 0..window_bits {
                acc = acc.double();
            }
        }
        acc += &jacobian_from_limbs(w);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use blstrs::Scalar;
    use ff::Field;

    fn limbs(p: &G1Projective) -> JacobianLimbs {
        let raw: &blst_p1 = p.as_ref();
        let mut out = [0u32; 36];
        for (k, f) in [raw.x, raw.y, raw.z].iter().enumerate() {
            for i in 0..6 {
                out[12 * k + 2 * i] = f.l[i] as u32;
                out[12 * k + 2 * i + 1] = (f.l[i] >> 32) as u32;
            }
        }
        out
    }

    #[test]
    fn horner_matches_scalar_multiplication() {
        let g = G1Projective::generator();
        let ws: Vec<G1Projective> = (1..=5u64).map(|k| g * Scalar::from(k * 7919)).collect();
        let c = 13;
        let got = combine_windows(&ws.iter().map(limbs).collect::<Vec<_>>(), c);
        let mut want = G1Projective::identity();
        for (j, w) in ws.iter().enumerate() {
            want += *w * Scalar::from(2u64).pow_vartime([u64::from(c) * j as u64]);
        }
        assert_eq!(got, want);
    }

    #[test]
    fn infinity_windows_are_skipped() {
        let inf = limbs(&G1Projective::identity());
        assert_eq!(inf[24..36], [0u32; 12]);
        assert_eq!(combine_windows(&[inf, inf], 4), G1Projective::identity());
        let g = G1Projective::generator();
        let got = combine_windows(&[inf, limbs(&g)], 4);
        assert_eq!(got, g * Scalar::from(16u64));
    }
}
