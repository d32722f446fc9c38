//! The partition pipeline in one process, with the in-process leaser.

mod common;

use std::sync::Mutex;

use gpud_prover::CpuEngine;
use gpud_prover::lease::LocalLeaser;
use gpud_prover::pipeline::{self, PipelineReport};

use common::config;

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
    calls: Mutex<Vec<(u64, u64)>>,
}

impl gpud_prover::Engine for LeaseCheckingEngine {
    fn name(&self) -> &'static str {
        "checking"
    }

    fn gpu_phase(
        &self,
        lease: &dyn gpud_client::Reservation,
        key: &gpud_prover::ProvingKey,
        input: gpud_prover::engine::PhaseInput<'_>,
    ) -> gpud_prover::Result<gpud_prover::engine::PhaseOutput> {
        assert!(
            lease.compute_token().is_some(),
            "GPU phase without the compute slot"
        );
        self.calls
            .lock()
            .unwrap()
            .push((lease.lease_id(), lease.vram_bytes()));
        CpuEngine.gpu_phase(lease, key, input)
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
    assert_eq!(report.resident_vram_bytes, 0);
    let calls = engine.calls.into_inner().unwrap();
    assert_eq!(calls.len(), 3);
    // Without resident bases, the phase lease is the formula's working memory with the bases.
    let expected_vram =
        gpud_prover::vram::estimate(&key.shape(), spec.log_size()).phase_lease(false);
    assert_eq!(report.vram_bytes, expected_vram);
    // One lease of the formula's size per partition.
    for call in &calls {
        assert_eq!(call.1, expected_vram);
    }
    let mut ids: Vec<u64> = calls.iter().map(|c| c.0).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    // The default `vram_bytes` is the formula.
    assert_eq!(engine_vram(&CpuEngine, &key, 10), expected_vram);
}

/// An engine that keeps "resident" data under the long-lived lease and checks the pipeline's
/// protocol: loaded once under a VRAM-only lease before any phase, every phase lease on that
/// device with the working memory only, unloaded after under a compute lease of that device.
#[derive(Default)]
struct ResidentCheckingEngine {
    events: Mutex<Vec<String>>,
}

impl gpud_prover::Engine for ResidentCheckingEngine {
    fn name(&self) -> &'static str {
        "resident-checking"
    }

    fn gpu_phase(
        &self,
        lease: &dyn gpud_client::Reservation,
        key: &gpud_prover::ProvingKey,
        input: gpud_prover::engine::PhaseInput<'_>,
    ) -> gpud_prover::Result<gpud_prover::engine::PhaseOutput> {
        assert!(lease.compute_token().is_some());
        self.events.lock().unwrap().push(format!(
            "phase {} {}",
            lease.device_uuid(),
            lease.vram_bytes()
        ));
        CpuEngine.gpu_phase(lease, key, input)
    }

    fn vram_bytes(&self, key: &gpud_prover::ProvingKey, log_domain: u32) -> u64 {
        self.vram(key, log_domain).phase_lease(true)
    }

    fn resident_bytes(&self, key: &gpud_prover::ProvingKey) -> u64 {
        self.vram(key, 10).resident
    }

    fn load_resident(
        &self,
        _key: &gpud_prover::ProvingKey,
        lease: &dyn gpud_client::Reservation,
    ) -> gpud_prover::Result<()> {
        assert!(
            lease.compute_token().is_none(),
            "resident lease holds compute"
        );
        self.events.lock().unwrap().push(format!(
            "load {} {}",
            lease.device_uuid(),
            lease.vram_bytes()
        ));
        Ok(())
    }

    fn unload_resident(
        &self,
        _key: &gpud_prover::ProvingKey,
        compute: Option<&dyn gpud_client::Reservation>,
    ) -> gpud_prover::Result<()> {
        let c = compute.expect("a compute lease to trim under");
        assert!(c.compute_token().is_some());
        self.events
            .lock()
            .unwrap()
            .push(format!("unload {}", c.device_uuid()));
        Ok(())
    }
}

#[test]
fn resident_bases_get_one_vram_only_lease_for_the_whole_run() {
    let (spec, key) = common::key("synthetic", 10);
    let engine = ResidentCheckingEngine::default();
    let cfg = config("synthetic", 10, 2, 2, "resident");
    let leaser = LocalLeaser::on_device("GPU-test", 3);
    let report = pipeline::run(&engine, &leaser, &key, &cfg, &|_| {}).unwrap();
    assert!(report.all_verified);
    let e = gpud_prover::vram::estimate(&key.shape(), spec.log_size());
    assert_eq!(report.resident_vram_bytes, e.resident);
    assert_eq!(report.vram_bytes, e.working());
    assert!(e.working() < e.phase_lease(false));
    let events = engine.events.into_inner().unwrap();
    assert_eq!(events.len(), 6, "{events:?}");
    assert_eq!(events[0], format!("load GPU-test {}", e.resident));
    for p in &events[1..5] {
        assert_eq!(p, &format!("phase GPU-test {}", e.working()));
    }
    assert_eq!(events[5], "unload GPU-test");
}

fn engine_vram(e: &impl gpud_prover::Engine, key: &gpud_prover::ProvingKey, k: u32) -> u64 {
    e.vram_bytes(key, k)
}

/// An engine with a measured choice: it records every question the pipeline asks, so the test
/// can check that the calibration comes first, once, under a compute lease of the size asked.
#[derive(Default)]
struct CalibratingEngine {
    events: Mutex<Vec<String>>,
}

impl CalibratingEngine {
    fn note(&self, e: String) {
        self.events.lock().unwrap().push(e);
    }
    fn calibrated(&self) -> bool {
        self.events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.starts_with("calibrate"))
    }
}

impl gpud_prover::Engine for CalibratingEngine {
    fn name(&self) -> &'static str {
        "calibrating"
    }

    fn gpu_phase(
        &self,
        lease: &dyn gpud_client::Reservation,
        key: &gpud_prover::ProvingKey,
        input: gpud_prover::engine::PhaseInput<'_>,
    ) -> gpud_prover::Result<gpud_prover::engine::PhaseOutput> {
        self.note("phase".into());
        CpuEngine.gpu_phase(lease, key, input)
    }

    fn calibration_vram(&self, _key: &gpud_prover::ProvingKey) -> Option<u64> {
        // Asked again once calibrated: nothing left to measure.
        (!self.calibrated()).then_some(3 << 20)
    }

    fn calibrate(
        &self,
        _key: &gpud_prover::ProvingKey,
        lease: &dyn gpud_client::Reservation,
    ) -> gpud_prover::Result<()> {
        self.note(format!(
            "calibrate {} compute={}",
            lease.vram_bytes(),
            lease.compute_token().is_some()
        ));
        Ok(())
    }

    fn vram_bytes(&self, key: &gpud_prover::ProvingKey, log_domain: u32) -> u64 {
        self.note("vram_bytes".into());
        self.vram(key, log_domain).phase_lease(false)
    }

    fn g2_in_tail(&self, _key: &gpud_prover::ProvingKey) -> bool {
        self.note("g2_in_tail".into());
        true
    }
}

#[test]
fn a_measured_choice_is_calibrated_once_under_a_compute_lease_before_anything_is_asked() {
    let (_, key) = common::key("synthetic", 10);
    let engine = CalibratingEngine::default();
    let cfg = config("synthetic", 10, 1, 2, "calibrating");
    let report = pipeline::run(&engine, &LocalLeaser::default(), &key, &cfg, &|_| {}).unwrap();
    assert!(report.all_verified);
    let events = engine.events.into_inner().unwrap();
    assert_eq!(events[0], format!("calibrate {} compute=true", 3 << 20));
    assert_eq!(
        events.iter().filter(|e| e.starts_with("calibrate")).count(),
        1,
        "{events:?}"
    );
    assert_eq!(events.iter().filter(|e| *e == "phase").count(), 2);
}
