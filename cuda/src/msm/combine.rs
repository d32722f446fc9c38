//! The host end of the MSM: window sums (Jacobian, blst layout) combined by doubling.

use blstrs::{G1Projective, G2Projective};
use group::Group;

pub use super::curve::G1JacobianLimbs as JacobianLimbs;
use super::curve::{G1, G2, G2JacobianLimbs, MsmCurve};

/// The G1 point a kernel wrote. Z = 0 is the point at infinity, as in blst.
pub fn jacobian_from_limbs(p: &JacobianLimbs) -> G1Projective {
    G1::from_jacobian(p)
}

/// sum_j 2^(c j) * windows[j] over any group's window sums, by Horner from the top window:
/// (W - 1) * c doublings.
pub fn combine_window_sums<C: MsmCurve>(
    windows: &[C::Jacobian],
    window_bits: u32,
) -> C::Projective {
    let mut acc = C::Projective::identity();
    for (j, w) in windows.iter().enumerate().rev() {
        if j + 1 != windows.len() {
            for _ in 0..window_bits {
                acc = acc.double();
            }
        }
        acc += C::from_jacobian(w);
    }
    acc
}

/// [`combine_window_sums`] for G1.
pub fn combine_windows(windows: &[JacobianLimbs], window_bits: u32) -> G1Projective {
    combine_window_sums::<G1>(windows, window_bits)
}

/// [`combine_window_sums`] for G2.
pub fn combine_windows_g2(windows: &[G2JacobianLimbs], window_bits: u32) -> G2Projective {
    combine_window_sums::<G2>(windows, window_bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use blst::blst_p1;
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

#[cfg(test)]
mod g2_tests {
    use super::*;
    use blst::blst_p2;
    use blstrs::Scalar;
    use ff::Field;

    fn limbs(p: &G2Projective) -> G2JacobianLimbs {
        let raw: &blst_p2 = p.as_ref();
        let mut out = [0u32; 72];
        let mut k = 0;
        for f in [raw.x, raw.y, raw.z] {
            for fp in f.fp {
                for l in fp.l {
                    out[k] = l as u32;
                    out[k + 1] = (l >> 32) as u32;
                    k += 2;
                }
            }
        }
        out
    }

    #[test]
    fn g2_horner_matches_scalar_multiplication_and_skips_infinity() {
        let g = G2Projective::generator();
        let ws: Vec<G2Projective> = (1..=4u64).map(|k| g * Scalar::from(k * 104729)).collect();
        let c = 11;
        let got = combine_windows_g2(&ws.iter().map(limbs).collect::<Vec<_>>(), c);
        let mut want = G2Projective::identity();
        for (j, w) in ws.iter().enumerate() {
            want += *w * Scalar::from(2u64).pow_vartime([u64::from(c) * j as u64]);
        }
        assert_eq!(got, want);
        let inf = limbs(&G2Projective::identity());
        assert_eq!(inf[48..72], [0u32; 24]);
        assert_eq!(
            combine_windows_g2(&[inf, limbs(&g)], 3),
            g * Scalar::from(8u64)
        );
    }
}
