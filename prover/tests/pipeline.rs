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
