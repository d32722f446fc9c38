//! Host check of the fixed-base kernel's per-thread code (`kernels/fixed_base.cuh`, compiled
//! here with g++ over the very headers NVRTC compiles) against blstrs: `k · G` in affine form,
//! byte for byte, in G1 and G2, for random and edge-case scalars, with infinities inside and at
//! the ends of the kernel's batches (one inversion per batch). Fresh random inputs each run
//! (the seed is printed; `FIXED_BASE_SEED` replays one).

mod common;

use blst::{blst_p1_affine, blst_p2_affine};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::Field;
use gpud_cuda::fixed_base::{canonical_limbs, table};
use group::{Curve, Group};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

fn g1_bytes(p: &G1Affine) -> Vec<u8> {
    let raw: &blst_p1_affine = p.as_ref();
    raw.x
        .l
        .iter()
        .chain(raw.y.l.iter())
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

fn g2_bytes(p: &G2Affine) -> Vec<u8> {
    let raw: &blst_p2_affine = p.as_ref();
    raw.x
        .fp
        .iter()
        .chain(raw.y.fp.iter())
        .flat_map(|f| f.l.iter())
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

/// Edge cases, random scalars, single-byte scalars, and runs of zeros (infinity) placed at
/// random inside the batches of 8.
fn scalars(rng: &mut ChaCha20Rng) -> Vec<Scalar> {
    let mut s = vec![
        Scalar::ZERO,
        Scalar::ONE,
        -Scalar::ONE,
        Scalar::from(2u64),
        Scalar::from(255u64),
        Scalar::from(256u64),
        Scalar::from(u64::MAX),
        -Scalar::from(2u64).pow_vartime([128u64]),
    ];
    s.extend((0..200).map(|_| Scalar::random(&mut *rng)));
    // One non-zero byte in every position (single window additions).
    s.extend(
        (0..32).map(|w| Scalar::from(2u64).pow_vartime([8 * w as u64]) * Scalar::from(171u64)),
    );
    // A whole batch of zeros, then zeros sprinkled in.
    s.extend([Scalar::ZERO; 8]);
    for _ in 0..40 {
        let at = rng.gen_range(0..s.len());
        s[at] = Scalar::ZERO;
    }
    // A length that leaves a short last batch.
    s.push(Scalar::random(&mut *rng));
    s
}

fn seed() -> u64 {
    let seed = std::env::var("FIXED_BASE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().next_u64());
    eprintln!("FIXED_BASE_SEED={seed}");
    seed
}

/// Runs the harness for `group` over `table` (as bytes) and `ks`.
fn harness(group: u32, table: Vec<u8>, ks: &[Scalar]) -> Vec<u8> {
    let mut input = Vec::new();
    input.extend(group.to_le_bytes());
    input.extend((ks.len() as u32).to_le_bytes());
    input.extend(table);
    for s in ks {
        for limb in canonical_limbs(s) {
            input.extend(limb.to_le_bytes());
        }
    }
    common::run_harness(&common::compile_harness("fixed_base_harness"), input)
}

/// `k · G` from the harness equals blstrs' byte for byte in one group: `group` is the
/// harness's number for it, `bytes` an affine point's layout, `g` a random point.
fn check<P>(group: u32, g: P, bytes: impl Fn(&P::AffineRepr) -> Vec<u8>, rng: &mut ChaCha20Rng)
where
    P: Curve + std::ops::Mul<Scalar, Output = P>,
    P::AffineRepr: Default + Clone,
{
    let ks = scalars(rng);
    let out = harness(group, table(&g).iter().flat_map(&bytes).collect(), &ks);
    let size = bytes(&P::AffineRepr::default()).len();
    assert_eq!(out.len(), size * ks.len());
    for (i, s) in ks.iter().enumerate() {
        let want = bytes(&(g * *s).to_affine());
        assert_eq!(
            &out[size * i..size * (i + 1)],
            &want[..],
            "G{group}, scalar {i}"
        );
    }
}

#[test]
fn g1_fixed_base_code_matches_blstrs_byte_for_byte() {
    let mut rng = ChaCha20Rng::seed_from_u64(seed());
    let g = G1Projective::generator() * Scalar::random(&mut rng);
    check(1, g, g1_bytes, &mut rng);
}

#[test]
fn g2_fixed_base_code_matches_blstrs_byte_for_byte() {
    let mut rng = ChaCha20Rng::seed_from_u64(seed());
    let g = G2Projective::generator() * Scalar::random(&mut rng);
    check(2, g, g2_bytes, &mut rng);
}

/// Tests run on parallel threads, and each compiles the harness it runs: a thread must never
/// execute a binary another thread's compiler is still writing.
#[test]
fn parallel_checks_share_one_compiled_harness() {
    let seed = seed();
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            scope.spawn(move || {
                let mut rng = ChaCha20Rng::seed_from_u64(seed ^ t);
                let g = G1Projective::generator() * Scalar::random(&mut rng);
                check(1, g, g1_bytes, &mut rng);
            });
        }
    });
}

/// A runner that starts a process per test compiles the harness in each of them at once: one
/// must never execute the binary while another's compiler writes over it. Three copies of this
/// test binary run the G1 check side by side.
#[test]
fn test_processes_compiling_the_harness_at_once_all_pass() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "g1_fixed_base_code_matches_blstrs_byte_for_byte"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("a copy of the test binary starts")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("the copy exits");
        assert!(
            out.status.success(),
            "a test process failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
