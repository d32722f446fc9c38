//! The pipeline's host leases against a fake leaser that books host memory like gpud: each
//! partition's synthesis waits for its memory lease, runs on the CPU its CPU lease names, and
//! every host lease is given back.

mod common;

use std::sync::{Arc, Condvar, Mutex};

use gpud_client::{ComputeToken, LeaseId, Reservation};
use gpud_prover::CpuEngine;
use gpud_prover::engine::Engine;
use gpud_prover::lease::{LeaseRequest, Leaser, LocalLease, LocalLeaser};
use gpud_prover::pipeline::{self, HostLeasing, PipelineConfig, PipelineReport};

#[derive(Debug, Default)]
struct Books {
    /// Partition memory booked now.
    reserved: u64,
    /// The most booked at once.
    max_reserved: u64,
    /// Host leases granted and released (every kind).
    granted: usize,
    released: usize,
    /// Partition memory requests that had to wait.
    waited: usize,
    /// Resident-footprint leases granted.
    resident: usize,
    /// CPU leases granted.
    cpu_leases: usize,
}

/// Books partitions' host memory against `capacity` (their requests wait until they fit);
/// grants host CPUs as `cpu`; device leases come from the in-process leaser.
struct HostGate {
    inner: LocalLeaser,
    capacity: u64,
    cpu: u32,
    books: Arc<(Mutex<Books>, Condvar)>,
}

struct GateLease {
    inner: LocalLease,
    host: bool,
    partition_bytes: u64,
    cpus: Vec<u32>,
    books: Arc<(Mutex<Books>, Condvar)>,
}

impl Drop for GateLease {
    fn drop(&mut self) {
        if !self.host {
            return;
        }
        let (lock, cv) = &*self.books;
        let mut b = lock.lock().unwrap();
        b.reserved -= self.partition_bytes;
        b.released += 1;
        cv.notify_all();
    }
}

impl Reservation for GateLease {
    fn lease_id(&self) -> LeaseId {
        self.inner.lease_id()
    }
    fn device_uuid(&self) -> &str {
        self.inner.device_uuid()
    }
    fn device_index(&self) -> u32 {
        self.inner.device_index()
    }
    fn vram_bytes(&self) -> u64 {
        self.inner.vram_bytes()
    }
    fn compute_token(&self) -> Option<ComputeToken<'_>> {
        self.inner.compute_token()
    }
}

impl Leaser for HostGate {
    type Lease = GateLease;

    fn acquire(&self, request: &LeaseRequest) -> gpud_prover::Result<GateLease> {
        let inner = self.inner.acquire(request)?;
        let host = !request.host.is_empty();
        // A partition's memory (the resident footprint is the process's: not capped here).
        let partition = request.host.mem_bytes > 0 && request.label.contains("partition");
        let partition_bytes = if partition { request.host.mem_bytes } else { 0 };
        let (lock, cv) = &*self.books;
        let mut b = lock.lock().unwrap();
        if partition && b.reserved + partition_bytes > self.capacity {
            b.waited += 1;
            while b.reserved + partition_bytes > self.capacity {
                b = cv.wait(b).unwrap();
            }
        }
        if host {
            b.reserved += partition_bytes;
            b.max_reserved = b.max_reserved.max(b.reserved);
            b.granted += 1;
            b.resident += usize::from(request.label.contains("resident"));
            b.cpu_leases += usize::from(request.host.cpus > 0);
        }
        Ok(GateLease {
            inner,
            host,
            partition_bytes,
            cpus: (0..request.host.cpus).map(|_| self.cpu).collect(),
            books: self.books.clone(),
        })
    }

    fn granted_cpus(&self, lease: &GateLease) -> Vec<u32> {
        // One CPU may be named once per lease: the same one for each asked.
        let mut cpus = lease.cpus.clone();
        cpus.dedup();
        cpus
    }
}

fn gate(capacity: u64) -> HostGate {
    HostGate {
        inner: LocalLeaser::default(),
        capacity,
        cpu: gpud_prover::affinity::current_cpus().unwrap()[0],
        books: Arc::default(),
    }
}

fn run(host: HostLeasing, leaser: &HostGate) -> PipelineReport {
    let (_, key) = common::key("synthetic", 10);
    let cfg = PipelineConfig {
        synthesis_workers: 3,
        seed: 21,
        host,
        ..common::config("synthetic", 10, 2, 3, "host test")
    };
    pipeline::run(&CpuEngine, leaser, &key, &cfg, &|_| {}).unwrap()
}

fn partition_bytes() -> u64 {
    let (spec, key) = common::key("synthetic", 10);
    // The CPU engine reads C: synthesis keeps it.
    gpud_prover::host::estimate(
        &key.shape(),
        key.vk().ic.len(),
        spec.log_size(),
        true,
        CpuEngine.needs_c(),
    )
    .partition()
}

#[test]
fn synthesis_waits_for_its_host_lease_and_every_lease_is_released() {
    let one = partition_bytes();
    // Room for one partition's memory: three synthesis workers take turns.
    let leaser = gate(one);
    let report = run(HostLeasing::on(), &leaser);
    assert!(report.all_verified);
    assert!(report.host_leases);
    let estimate = report.host.expect("the estimate the leases were sized by");
    assert_eq!(estimate.partition(), one);
    let r = &report.partitions_detail;
    assert_eq!(r.len(), 6);
    // A partition holds its memory from synthesis to the end of its tail: with room for one,
    // those spans never overlap, and synthesis started only once the lease was granted.
    let mut held: Vec<(f64, f64)> = r.iter().map(|p| (p.synth_start, p.tail_end)).collect();
    held.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(held.windows(2).all(|w| w[0].1 <= w[1].0), "{held:?}");
    for p in r {
        assert_eq!(p.host_bytes, one);
        assert!(p.host_requested <= p.synth_start);
        // Synthesis ran on the CPU its lease named; so did the tail.
        assert_eq!(p.synthesis_cpus, vec![leaser.cpu]);
        assert_eq!(p.tail_cpus, vec![leaser.cpu]);
        assert!(p.tail_requested <= p.tail_start);
    }
    assert!(r.iter().any(|p| p.host_wait() > 0.0), "no synthesis waited");
    assert!(report.host_wait.max > 0.0);
    let b = leaser.books.0.lock().unwrap();
    assert!(b.waited > 0, "{b:?}");
    assert_eq!(b.max_reserved, one, "{b:?}");
    // Everything given back: per partition its memory, its synthesis CPU and its tail CPUs,
    // plus the resident footprint once for the run.
    assert_eq!(b.reserved, 0, "{b:?}");
    assert_eq!(b.resident, 1, "{b:?}");
    assert_eq!(b.cpu_leases, 12, "{b:?}");
    assert_eq!(b.granted, 6 * 3 + 1, "{b:?}");
    assert_eq!(b.released, b.granted, "{b:?}");
    assert!(
        report.host_resident.0 >= estimate.key,
        "{:?}",
        report.host_resident
    );
}

#[test]
fn two_partitions_of_room_admit_two_at_once_and_never_more() {
    let one = partition_bytes();
    let leaser = gate(2 * one);
    let report = run(HostLeasing::on(), &leaser);
    assert!(report.all_verified);
    let b = leaser.books.0.lock().unwrap();
    assert!(b.max_reserved <= 2 * one, "{b:?}");
    assert_eq!((b.reserved, b.released), (0, b.granted), "{b:?}");
}

#[test]
fn without_host_leases_nothing_is_asked_of_the_host() {
    // No room at all: a host request would wait forever.
    let leaser = gate(0);
    let report = run(HostLeasing::default(), &leaser);
    assert!(report.all_verified);
    assert!(!report.host_leases && report.host.is_none());
    let b = leaser.books.0.lock().unwrap();
    assert_eq!((b.granted, b.released), (0, 0), "{b:?}");
    for p in &report.partitions_detail {
        assert!(p.synthesis_cpus.is_empty() && p.host_bytes == 0);
        assert_eq!(p.host_wait(), 0.0);
    }
}
