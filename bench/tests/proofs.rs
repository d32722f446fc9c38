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
