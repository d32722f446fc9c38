//! CPU multi-scalar multiplications over the proving key's affine bases (blst's Pippenger).

use blst::{MultiPoint, blst_p1, blst_p1_affine, blst_p2, blst_p2_affine};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use group::Group;
use rayon::prelude::*;

/// Scalars as blst wants them: canonical little-endian, 32 bytes each.
fn scalar_bytes(scalars: &[Scalar]) -> Vec<u8> {
    let mut out = vec![0u8; scalars.len() * 32];
    out.par_chunks_mut(32 * 1024)
        .zip(scalars.par_chunks(1024))
        .for_each(|(bytes, scalars)| {
            for (b, s) in bytes.chunks_exact_mut(32).zip(scalars) {
                b.copy_from_slice(&s.to_bytes_le());
            }
        });
    out
}

/// `Σ scalars[i] · bases[i]` over G1. Uses the first `scalars.len()` bases.
///
/// # Panics
/// If there are fewer bases than scalars (callers check lengths against the proving key).
pub fn g1(bases: &[G1Affine], scalars: &[Scalar]) -> G1Projective {
    assert!(bases.len() >= scalars.len(), "fewer G1 bases than scalars");
    if scalars.is_empty() {
        return G1Projective::identity();
    }
    let bases = &bases[..scalars.len()];
    // SAFETY: blstrs declares `#[repr(transparent)] struct G1Affine(blst_p1_affine)`, so a slice
    // of one is a slice of the other with the same length and layout.
    let raw: &[blst_p1_affine] =
        unsafe { std::slice::from_raw_parts(bases.as_ptr().cast(), bases.len()) };
    let sum: blst_p1 = raw.mult(&scalar_bytes(scalars), 255);
    // SAFETY: `#[repr(transparent)] struct G1Projective(blst_p1)`, and blst returns a valid
    // point (the identity for an all-zero sum).
    unsafe { std::mem::transmute::<blst_p1, G1Projective>(sum) }
}

/// `Σ scalars[i] · bases[i]` over G2. Uses the first `scalars.len()` bases.
///
/// # Panics
/// If there are fewer bases than scalars.
pub fn g2(bases: &[G2Affine], scalars: &[Scalar]) -> G2Projective {
    assert!(bases.len() >= scalars.len(), "fewer G2 bases than scalars");
    if scalars.is_empty() {
        return G2Projective::identity();
    }
    let bases = &bases[..scalars.len()];
    // SAFETY: `#[repr(transparent)] struct G2Affine(blst_p2_affine)` in blstrs.
    let raw: &[blst_p2_affine] =
        unsafe { std::slice::from_raw_parts(bases.as_ptr().cast(), bases.len()) };
    let sum: blst_p2 = raw.mult(&scalar_bytes(scalars), 255);
    // SAFETY: `#[repr(transparent)] struct G2Projective(blst_p2)` in blstrs.
    unsafe { std::mem::transmute::<blst_p2, G2Projective>(sum) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ff::Field;
    use group::Curve;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn msm_matches_naive_sum_with_zeros_and_ones() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for n in [1usize, 5, 40, 700] {
            let g1s: Vec<G1Affine> = (0..n)
                .map(|_| G1Projective::random(&mut rng).to_affine())
                .collect();
            let g2s: Vec<G2Affine> = (0..n)
                .map(|_| G2Projective::random(&mut rng).to_affine())
                .collect();
            let scalars: Vec<Scalar> = (0..n)
                .map(|i| match i % 4 {
                    0 => Scalar::ZERO,
                    1 => Scalar::ONE,
                    2 => Scalar::from(i as u64),
                    _ => Scalar::random(&mut rng),
                })
                .collect();
            let naive1 = g1s
                .iter()
                .zip(&scalars)
                .fold(G1Projective::identity(), |acc, (b, s)| acc + b * s);
            let naive2 = g2s
                .iter()
                .zip(&scalars)
                .fold(G2Projective::identity(), |acc, (b, s)| acc + b * s);
            assert_eq!(g1(&g1s, &scalars), naive1, "n = {n}");
            assert_eq!(g2(&g2s, &scalars), naive2, "n = {n}");
        }
        assert_eq!(g1(&[], &[]), G1Projective::identity());
    }
}
