//! The engines benchmark (`gpud-bench engines`) on the CPU: two runs of the CPU engine on one
//! key, timed by stage, their proofs compared.

use gpud_prover::{CircuitSpec, CpuEngine, ParamsCache};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

#[test]
fn the_engines_benchmark_runs_and_compares_proofs() {
    let spec = CircuitSpec::parse("synthetic", 8).unwrap();
    // Cached across runs in Cargo's per-target temporary directory.
    let cache = ParamsCache::new(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpud-bench-params"),
    );
    let (key, _) = cache
        .load_or_generate(&spec, &mut ChaCha20Rng::seed_from_u64(8))
        .unwrap();
    let case = |name| gpud_bench::proofs::EngineCase {
        name,
        engine: &CpuEngine,
        device: ("cpu".into(), 0),
        warmup: 1,
        reps: 2,
    };
    let row = gpud_bench::proofs::engines(&spec, &key, &[case("cpu"), case("cpu-again")]).unwrap();
    assert_eq!(row.runs.len(), 2);
    assert!(row.proofs_identical);
    for r in &row.runs {
        assert!(r.verified && r.reps == 2);
        assert!(r.gpu_phase.total >= r.gpu_phase.h + r.gpu_phase.msm_l);
        assert!(r.total >= r.synthesis + r.cpu_tail);
    }
}

/// The baseline on bellperson's CPU prover (a build without `bellperson-gpu`): same key, same
/// witness and `r`, `s` as our first proof, so the same proof bit for bit; other `r`, `s` give
/// a different proof that still verifies.
#[test]
fn bellpersons_proof_equals_ours_bit_for_bit() {
    use gpud_bench::bellperson_prover::{GPU_BUILD, Ran, bellperson};
    for (name, k) in [("synthetic", 8), ("poseidon", 10)] {
        let spec = CircuitSpec::parse(name, k).unwrap();
        let cache = ParamsCache::new(
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpud-bench-params"),
        );
        let (key, _) = cache
            .load_or_generate(&spec, &mut ChaCha20Rng::seed_from_u64(u64::from(k)))
            .unwrap();
        let case = gpud_bench::proofs::EngineCase {
            name: "cpu",
            engine: &CpuEngine,
            device: ("cpu".into(), 0),
            warmup: 0,
            reps: 1,
        };
        let row = gpud_bench::proofs::engines(&spec, &key, &[case]).unwrap();
        let ours = row.first_proof.as_ref().expect("the first proof is kept");
        let (_, rs) = gpud_bench::proofs::first_randomness(&spec);

        let b = bellperson(&spec, &key, rs, Some(ours), 1, 2).unwrap();
        assert_eq!(b.same_proof, Some(true), "{spec}");
        assert!(b.verified && b.reps == 2 && b.total > 0.0, "{spec}: {b:?}");
        if !GPU_BUILD {
            assert_eq!(
                (b.ran, b.gpu_kernels, b.fallbacks),
                (Ran::Cpu, 0, 0),
                "{spec}"
            );
        }
        assert!(!b.gpu_build || GPU_BUILD);

        let swapped = bellperson(&spec, &key, (rs.1, rs.0), Some(ours), 1, 0).unwrap();
        assert_eq!(swapped.same_proof, Some(false), "{spec}");
        assert!(swapped.verified && swapped.reps == 0);
    }
}
