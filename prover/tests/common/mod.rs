//! Shared test fixtures: parameters generated once per process (and cached across runs in
//! Cargo's per-target temporary directory).
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use gpud_prover::pipeline::PipelineConfig;
use gpud_prover::{CircuitSpec, ParamsCache, ProvingKey};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// `$GPUD_PROVER_TEST_PARAMS` (the GPU suite sets it: the build machine's target directory
/// does not exist there), else Cargo's per-target temporary directory.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("GPUD_PROVER_TEST_PARAMS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpud-prover-params"))
}

/// The proving key for `circuit` at `2^log_size`, generated at most once per process.
pub fn key(circuit: &str, log_size: u32) -> (CircuitSpec, Arc<ProvingKey>) {
    static KEYS: OnceLock<Mutex<HashMap<CircuitSpec, Arc<ProvingKey>>>> = OnceLock::new();
    let spec = CircuitSpec::parse(circuit, log_size).expect("valid spec");
    let keys = KEYS.get_or_init(Default::default);
    // Holding the lock while generating makes concurrent tests wait instead of duplicating
    // the (slow) generation.
    let mut map = keys.lock().unwrap_or_else(|e| e.into_inner());
    let key = map
        .entry(spec)
        .or_insert_with(|| {
            let cache = ParamsCache::new(cache_dir());
            let mut rng = ChaCha20Rng::seed_from_u64(u64::from(log_size));
            Arc::new(
                cache
                    .load_or_generate(&spec, &mut rng)
                    .expect("parameters")
                    .0,
            )
        })
        .clone();
    (spec, key)
}

/// A pipeline of `proofs` proofs of `partitions` partitions each of `circuit` at `2^k`: two
/// synthesis workers, seed 11, no warm state, no host leases.
pub fn config(
    circuit: &str,
    k: u32,
    proofs: usize,
    partitions: usize,
    label: &str,
) -> PipelineConfig {
    let (spec, _) = key(circuit, k);
    PipelineConfig {
        spec,
        partitions,
        proofs,
        synthesis_workers: 2,
        class: "normal".into(),
        seed: 11,
        label: label.into(),
        min_phase_vram: 0,
        warm: Default::default(),
        host: Default::default(),
    }
}
