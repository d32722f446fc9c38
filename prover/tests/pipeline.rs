//! The partition pipeline in one process, with the in-process leaser.

mod common;

use std::sync::Mutex;

use gpud_prover::CpuEngine;
use gpud_prover::lease::LocalLeaser;
use gpud_prover::pipeline::{self, PipelineConfig, PipelineReport};

fn config(circuit: &str, k: u32, proofs: usize, partitions: usize, label: &str) -> PipelineConfig {
    let (spec, _) = common::key(circuit, k);
    PipelineConfig {
        spec,
        partitions,
        proofs,
        synthesis_workers: 2,
        class: "normal".into(),
        seed: 11,
        label: label.into(),
    }
}

fn overlaps(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

#[test]
fn every_partition_verifies_and_tails_overlap_the_next_gpu_phase() {
    let (_, key) = common::key("synthetic", 11);
    let cfg = config("synthetic", 11, 2, 3, "single");
    let seen = Mutex::new(0usize);
    let report = pipeline::run(&CpuEngine, &LocalLeaser::default(), &key, &cfg, &|_| {
        *seen.lock().unwrap() += 1
    })
    .unwrap();
    assert!(report.all_verified);
    assert_eq!(report.partitions_detail.len(), 6);
    assert_eq!(*seen.lock().unwrap(), 6);
    assert!(report.vram_bytes > 3 * 32 * (1 << 11));
    let r = &report.partitions_detail;
    for p in r {
        assert!(p.synth_end <= p.lease_requested);
        assert!(p.lease_requested <= p.lease_granted);
        assert!(p.lease_granted < p.lease_released);
        assert!(p.lease_released <= p.tail_start);
    }
    // The GPU phases are serialized, and some CPU tail runs while the next lease is held.
    let mut held: Vec<(f64, f64)> = r
        .iter()
        .map(|p| (p.lease_granted, p.lease_released))
        .collect();
    held.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(held.windows(2).all(|w| w[0].1 <= w[1].0));
    let tail_overlaps = r
        .iter()
        .filter(|p| {
            held.iter()
                .any(|&h| overlaps((p.tail_start, p.tail_end), h))
        })
        .count();
    assert!(
        tail_overlaps >= 1,
        "no CPU tail overlapped a GPU phase: {r:#?}"
    );
}

#[test]
fn two_pipelines_sharing_a_device_never_hold_it_together() {
    let (_, key) = common::key("poseidon", 10);
    let leaser = LocalLeaser::default();
    let run = |label: &str| -> PipelineReport {
        let cfg = config("poseidon", 10, 1, 3, label);
        pipeline::run(&CpuEngine, &leaser, &key, &cfg, &|_| {}).unwrap()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| run("a"));
        let b = s.spawn(|| run("b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.all_verified && b.all_verified);
    let held = |r: &PipelineReport| -> Vec<(u128, u128)> {
        r.partitions_detail
            .iter()
            .map(|p| (p.lease_granted_unix, p.lease_released_unix))
            .collect()
    };
    for x in held(&a) {
        for y in held(&b) {
            assert!(!(x.0 < y.1 && y.0 < x.1), "leases overlap: {x:?} {y:?}");
        }
    }
}

#[test]
fn a_failing_partition_stops_the_pipeline_with_an_error() {
    // Every partition fails synthesis against a key made for another circuit.
    let (_, key) = common::key("synthetic", 10);
    let cfg = config("poseidon", 10, 1, 2, "mismatch");
    let err = pipeline::run(&CpuEngine, &LocalLeaser::default(), &key, &cfg, &|_| {}).unwrap_err();
    assert!(
        matches!(err, gpud_prover::ProverError::ParamsMismatch(_)),
        "{err}"
    );
}

/// An engine that checks it only ever runs under a lease holding the compute slot, and
/// otherwise delegates to the CPU engine: what a GPU engine relies on.
struct LeaseCheckingEngine {
    calls: Mutex<Vec<(&'static str, u64, u64)>>,
}

impl gpud_prover::Engine for LeaseCheckingEngine {
    type H = Vec<blstrs::Scalar>;

    fn name(&self) -> &'static str {
        "checking"
    }

    fn compute_h(
        &self,
        lease: &dyn gpud_client::Reservation,
        key: &gpud_prover::ProvingKey,
        domain: &gpud_prover::fft::Domain,
        a: Vec<blstrs::Scalar>,
        b: Vec<blstrs::Scalar>,
        c: Vec<blstrs::Scalar>,
    ) -> gpud_prover::Result<Self::H> {
        assert!(
            lease.compute_token().is_some(),
            "H computed without the compute slot"
        );
        self.calls
            .lock()
            .unwrap()
            .push(("h", lease.lease_id(), lease.vram_bytes()));
        CpuEngine.compute_h(lease, key, domain, a, b, c)
    }

    fn g1_msms(
        &self,
        lease: &dyn gpud_client::Reservation,
        key: &gpud_prover::ProvingKey,
        h: Self::H,
        scalars: gpud_prover::engine::G1Scalars<'_>,
    ) -> gpud_prover::Result<gpud_prover::engine::G1Sums> {
        assert!(
            lease.compute_token().is_some(),
            "MSMs without the compute slot"
        );
        self.calls
            .lock()
            .unwrap()
            .push(("msm", lease.lease_id(), lease.vram_bytes()));
        CpuEngine.g1_msms(lease, key, h, scalars)
    }
}

#[test]
fn engines_run_only_under_the_partition_lease_with_the_formula_vram() {
    let (spec, key) = common::key("synthetic", 10);
    let engine = LeaseCheckingEngine {
        calls: Mutex::new(Vec::new()),
    };
    let cfg = config("synthetic", 10, 1, 3, "checking");
    let report = pipeline::run(&engine, &LocalLeaser::default(), &key, &cfg, &|_| {}).unwrap();
    assert!(report.all_verified);
    assert_eq!(report.engine, "checking");
    let calls = engine.calls.into_inner().unwrap();
    assert_eq!(calls.len(), 6);
    let expected_vram = gpud_prover::vram::estimate(&key.shape(), spec.log_size()).total();
    assert_eq!(report.vram_bytes, expected_vram);
    // H then MSMs, each pair under one lease of the formula's size; a new lease per partition.
    for pair in calls.chunks(2) {
        assert_eq!(pair[0].0, "h");
        assert_eq!(pair[1].0, "msm");
        assert_eq!(pair[0].1, pair[1].1);
        assert_eq!(pair[0].2, expected_vram);
    }
    let mut ids: Vec<u64> = calls.iter().map(|c| c.1).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    // The default `vram_bytes` is the formula.
    assert_eq!(engine_vram(&CpuEngine, &key, 10), expected_vram);
}

fn engine_vram(e: &impl gpud_prover::Engine, key: &gpud_prover::ProvingKey, k: u32) -> u64 {
    e.vram_bytes(key, k)
}
