//! Host check of the fixed-base kernel's per-thread code (`kernels/fixed_base.cuh`, compiled
//! here with g++ over the very headers NVRTC compiles) against blstrs: `k · G` in affine form,
//! byte for byte, for random and edge-case scalars. Fresh random inputs each run (the seed is
//! printed; `FIXED_BASE_SEED` replays one).

mod common;

use blst::blst_p1_affine;
use blstrs::{G1Affine, G1Projective, Scalar};
use ff::Field;
use gpud_cuda::fixed_base::{canonical_limbs, table};
use group::{Curve, Group};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

fn affine_bytes(p: &G1Affine) -> Vec<u8> {
    let raw: &blst_p1_affine = p.as_ref();
    raw.x
        .l
        .iter()
        .chain(raw.y.l.iter())
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

#[test]
fn fixed_base_code_matches_blstrs_byte_for_byte() {
    let seed = std::env::var("FIXED_BASE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().next_u64());
    eprintln!("FIXED_BASE_SEED={seed}");
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let g = G1Projective::generator() * Scalar::random(&mut rng);
    let t = table(&g);
    let mut scalars = vec![
        Scalar::ZERO,
        Scalar::ONE,
        -Scalar::ONE,
        Scalar::from(2u64),
        Scalar::from(255u64),
        Scalar::from(256u64),
        Scalar::from(u64::MAX),
        -Scalar::from(2u64).pow_vartime([128u64]),
    ];
    scalars.extend((0..300).map(|_| Scalar::random(&mut rng)));
    // Scalars with one non-zero byte in every position (single window additions).
    scalars.extend(
        (0..32).map(|w| Scalar::from(2u64).pow_vartime([8 * w as u64]) * Scalar::from(171u64)),
    );

    let mut input = Vec::new();
    input.extend((scalars.len() as u32).to_le_bytes());
    for p in &t {
        input.extend(affine_bytes(p));
    }
    for s in &scalars {
        for limb in canonical_limbs(s) {
            input.extend(limb.to_le_bytes());
        }
    }
    let out = common::run_harness(&common::compile_harness("fixed_base_harness"), input);
    assert_eq!(out.len(), 96 * scalars.len());
    for (i, s) in scalars.iter().enumerate() {
        let want = affine_bytes(&(g * s).to_affine());
        assert_eq!(&out[96 * i..96 * (i + 1)], &want[..], "scalar {i}");
    }
}
