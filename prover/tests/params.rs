//! The parameter cache: generate, store, load, detect damage.

use std::fs;

use gpud_prover::{CircuitSpec, ParamsCache, ProverError};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

#[test]
fn generate_store_load_and_detect_damage() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ParamsCache::new(dir.path().join("nested"));
    let spec = CircuitSpec::parse("synthetic", 8).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(1);

    assert!(matches!(
        cache.load(&spec),
        Err(ProverError::ParamsMissing { .. })
    ));
    assert!(!cache.contains(&spec));

    let (generated, fresh) = cache.load_or_generate(&spec, &mut rng).unwrap();
    assert!(fresh);
    assert!(cache.contains(&spec));
    let (loaded, fresh) = cache.load_or_generate(&spec, &mut rng).unwrap();
    assert!(!fresh);
    assert!(generated.params() == loaded.params());
    // The memory-mapped reader (used for large files) gives the same parameters.
    let mapped = cache.clone().with_mmap_threshold(0).load(&spec).unwrap();
    assert!(generated.params() == mapped.params());
    assert_eq!(generated.shape().h, (1 << 8) - 1);
    let meta = cache.meta(&spec).unwrap();
    assert_eq!(
        meta.bytes,
        fs::metadata(cache.params_path(&spec)).unwrap().len()
    );
    // No temporary files are left behind.
    let names: Vec<_> = fs::read_dir(cache.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // Flip one byte in the middle: the digest catches it.
    let path = cache.params_path(&spec);
    let mut bytes = fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        cache.load(&spec),
        Err(ProverError::ParamsCorrupt { .. })
    ));
    // Truncation too.
    fs::write(&path, &bytes[..mid]).unwrap();
    assert!(matches!(
        cache.load(&spec),
        Err(ProverError::ParamsCorrupt { .. })
    ));
    // load_or_generate repairs it.
    let (_, fresh) = cache.load_or_generate(&spec, &mut rng).unwrap();
    assert!(fresh);
    cache.load(&spec).unwrap();
}

#[test]
fn keys_name_circuit_size_and_version() {
    let spec = CircuitSpec::parse("poseidon", 12).unwrap();
    assert_eq!(
        ParamsCache::key(&spec),
        format!("poseidon-k12-v{}", gpud_prover::params::PARAMS_VERSION)
    );
}
