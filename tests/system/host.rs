//! Host resources end to end (docs/HOST.md): with a configured host memory capacity, two
//! processes whose host memory does not fit together are served one after the other, never
//! both; `kill -9` of a holder frees its host lease; a device and host lease is all or
//! nothing; concurrent leases get distinct CPUs of their node; a restarted gpud gives a
//! re-adopted host lease its CPUs back; bad requests are refused with what was wrong.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpud_client::proto::{ErrorCode, NumaPlacement, StatusReport};
use gpud_client::LeaseRequest;
use gpud_tests::{Daemon, bin, wait_until};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// 4 GiB of host memory for leases, measured against nothing but the leases.
const HOST: &str = "[host]\nmemory = \"4GiB\"\nmemory_headroom = \"0\"\npinned = \"1GiB\"\n";

fn status(daemon: &Daemon) -> StatusReport {
    daemon.client().status().unwrap()
}

fn host_reserved(daemon: &Daemon) -> u64 {
    status(daemon).host.expect("a host section").memory.reserved_bytes
}

fn granted_cpus(daemon: &Daemon) -> Vec<u32> {
    let host = status(daemon).host.unwrap();
    host.numa.iter().flat_map(|n| n.granted.iter().copied()).collect()
}

/// A `gpud-chaos-client hold-host` holding `mem_mib` MiB and `cpus` CPUs: its pid, lease and
/// CPUs once granted. It re-adopts its lease across a restart of gpud.
struct HostHolder {
    child: Child,
    lease: u64,
    cpus: Vec<u32>,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl HostHolder {
    fn start(daemon: &Daemon, mem_mib: u64, cpus: u32) -> Self {
        let mut child = Command::new(bin("gpud-chaos-client"))
            .arg("hold-host")
            .arg(&daemon.socket)
            .arg(mem_mib.to_string())
            .arg(cpus.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn gpud-chaos-client");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let granted = loop {
            let line = lines.next().expect("the holder ended").unwrap();
            if let Some(rest) = line.strip_prefix("lease ") {
                break rest.to_string();
            }
        };
        let (lease, cpus) = granted.split_once(" cpus ").unwrap();
        let cpus = cpus
            .split(',')
            .filter(|c| !c.is_empty())
            .map(|c| c.parse().unwrap())
            .collect();
        Self {
            child,
            lease: lease.parse().unwrap(),
            cpus,
            lines,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HostHolder {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn host_memory_requests_that_do_not_fit_together_are_serialized_never_both_admitted() {
    let daemon = Daemon::start_with("1x16GiB", HOST);
    let first = daemon.client();
    assert!(first.offers_host(), "the welcome lists the host feature");
    let held = first
        .acquire(&LeaseRequest::new().host_memory(3 * GIB).label("synthesis 1"))
        .unwrap();
    assert_eq!(held.host().unwrap().mem_bytes, 3 * GIB);
    assert_eq!(held.info().cuda_visible_devices, "", "a lease of the host alone");
    std::thread::scope(|s| {
        let second = s.spawn(|| {
            let lease = daemon
                .client()
                .acquire(&LeaseRequest::new().host_memory(3 * GIB).label("synthesis 2"))
                .unwrap();
            (Instant::now(), lease)
        });
        assert!(
            wait_until(Duration::from_secs(10), || status(&daemon).waiters.len() == 1),
            "the second request never queued"
        );
        // Never both: while the second waits only the first's 3 GiB are reserved.
        for _ in 0..5 {
            let now = status(&daemon);
            assert_eq!(now.host.as_ref().unwrap().memory.reserved_bytes, 3 * GIB);
            assert_eq!(now.waiters[0].host.as_ref().unwrap().mem_bytes, 3 * GIB);
            assert_eq!(now.host.as_ref().unwrap().memory.queued.normal, 1);
            std::thread::sleep(Duration::from_millis(20));
        }
        let released = Instant::now();
        held.release().unwrap();
        let (granted, lease) = second.join().unwrap();
        assert!(granted >= released, "granted only after the first released");
        assert_eq!(lease.host().unwrap().mem_bytes, 3 * GIB);
        assert_eq!(host_reserved(&daemon), 3 * GIB);
        let rows = status(&daemon).leases;
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].device, "host");
        assert_eq!(rows[0].resource, gpud_client::proto::Resource::HostMemory);
        lease.release().unwrap();
    });
    assert_eq!(host_reserved(&daemon), 0);
}

#[test]
fn kill_9_of_a_holder_frees_its_host_lease() {
    let daemon = Daemon::start_with("1x16GiB", HOST);
    let mut holder = HostHolder::start(&daemon, 3 * 1024, 1);
    assert_eq!(host_reserved(&daemon), 3 * GIB);
    assert_eq!(granted_cpus(&daemon), holder.cpus);
    holder.kill();
    assert!(
        wait_until(Duration::from_secs(5), || host_reserved(&daemon) == 0
            && granted_cpus(&daemon).is_empty()
            && status(&daemon).leases.is_empty()),
        "the killed holder's host lease stayed: {:#?}",
        status(&daemon)
    );
    // What it held is there for the next one.
    let next = daemon
        .client()
        .acquire(&LeaseRequest::new().host_memory(4 * GIB))
        .unwrap();
    next.release().unwrap();
}

#[test]
fn a_device_and_host_lease_is_all_or_nothing() {
    let daemon = Daemon::start_with("1x16GiB", HOST);
    let filler = daemon
        .client()
        .acquire(&LeaseRequest::new().vram(16 * GIB))
        .unwrap();
    std::thread::scope(|s| {
        let combined = s.spawn(|| {
            daemon
                .client()
                .acquire(
                    &LeaseRequest::new()
                        .vram(8 * GIB)
                        .compute()
                        .host_memory(GIB)
                        .pinned(512 * MIB)
                        .cpus(1),
                )
                .unwrap()
        });
        assert!(
            wait_until(Duration::from_secs(10), || status(&daemon).waiters.len() == 1),
            "the combined request never queued"
        );
        // The device is full: nothing of the host is held for the waiting request either.
        let now = status(&daemon);
        let host = now.host.as_ref().unwrap();
        assert_eq!((host.memory.reserved_bytes, host.pinned.reserved_bytes), (0, 0));
        assert!(host.numa.iter().all(|n| n.granted.is_empty()));
        let waiter = &now.waiters[0];
        assert_eq!((waiter.vram_bytes, waiter.compute), (8 * GIB, true));
        assert_eq!(waiter.host.as_ref().unwrap().pinned_bytes, 512 * MIB);
        filler.release().unwrap();
        let lease = combined.join().unwrap();
        let host = lease.host().unwrap();
        assert_eq!((host.mem_bytes, host.pinned_bytes, host.cpus.len()), (GIB, 512 * MIB, 1));
        assert_eq!(host.parts.len(), 3);
        assert_eq!(lease.info().vram_bytes, 8 * GIB);
        assert!(!lease.cuda_visible_devices().is_empty());
        let now = status(&daemon);
        assert_eq!(now.devices[0].reserved_bytes, 8 * GIB);
        assert_eq!(now.host.as_ref().unwrap().memory.reserved_bytes, GIB);
        assert_eq!(now.leases.len(), 4, "one row per part");
        assert!(now.leases.iter().all(|l| l.group == Some(lease.id())));
        lease.release().unwrap();
        let now = status(&daemon);
        assert_eq!(now.devices[0].reserved_bytes, 0);
        assert_eq!(now.host.unwrap().memory.reserved_bytes, 0);
    });
}

#[test]
fn concurrent_leases_get_distinct_cpus_of_their_node() {
    let daemon = Daemon::start_with("1x16GiB", HOST);
    let host = status(&daemon).host.unwrap();
    let node = &host.numa[0];
    let each = (node.cpus.len() / 2).max(1) as u32;
    let leases: Vec<_> = (0..2.min(node.cpus.len()))
        .map(|_| {
            daemon
                .client()
                .acquire(
                    &LeaseRequest::new()
                        .cpus(each)
                        .numa(NumaPlacement::Node(node.node)),
                )
                .unwrap()
        })
        .collect();
    let mut all = Vec::new();
    for lease in &leases {
        let h = lease.host().unwrap();
        assert_eq!(h.cpus.len(), each as usize);
        assert_eq!(h.numa_node, Some(node.node));
        assert!(h.cpus.iter().all(|c| node.cpus.contains(c)), "{h:?} not of {node:?}");
        all.extend(h.cpus.iter().copied());
    }
    let distinct: std::collections::BTreeSet<u32> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "CPUs granted twice: {all:?}");
    let mut granted = granted_cpus(&daemon);
    granted.sort_unstable();
    assert_eq!(granted, distinct.into_iter().collect::<Vec<_>>());
}

#[test]
fn a_restarted_gpud_gives_a_readopted_host_lease_its_cpus_back() {
    let mut daemon = Daemon::start_with("1x16GiB", HOST);
    let mut holder = HostHolder::start(&daemon, 1024, 1);
    let before = holder.cpus.clone();
    assert_eq!(before.len(), 1);
    daemon.kill_and_restart();
    let pid = holder.child.id();
    assert!(
        wait_until(Duration::from_secs(15), || {
            let now = status(&daemon);
            now.leases
                .iter()
                .filter(|l| l.pid == pid)
                .count()
                == 2
        }),
        "the host lease was not re-adopted: {:#?}",
        status(&daemon)
    );
    assert_eq!(granted_cpus(&daemon), before, "the same CPUs after the restart");
    assert_eq!(host_reserved(&daemon), GIB);
    let rows = status(&daemon).leases;
    let cpu_row = rows
        .iter()
        .find(|l| l.resource == gpud_client::proto::Resource::Cpus)
        .unwrap();
    assert_eq!(cpu_row.host.as_ref().unwrap().cpus, before);
    assert!(rows.iter().any(|l| l.id == holder.lease));
    // The holder never heard of losing it.
    holder.kill();
    let rest: Vec<String> = holder.lines.by_ref().map_while(Result::ok).collect();
    assert!(!rest.iter().any(|l| l.starts_with("lost")), "{rest:?}");
}

#[test]
fn bad_host_requests_are_refused_with_what_was_wrong() {
    let daemon = Daemon::start_with("1x16GiB", HOST);
    let client = daemon.client();
    let refuse = |request: LeaseRequest| {
        let e = client.acquire(&request).unwrap_err();
        (e.code(), e.to_string())
    };
    let (code, m) = refuse(LeaseRequest::new().cpus(1).numa(NumaPlacement::Near));
    assert_eq!(code, Some(ErrorCode::InvalidRequest));
    assert!(m.contains("near"), "{m}");
    let (code, m) = refuse(LeaseRequest::new().cpus(1).numa(NumaPlacement::Node(99)));
    assert_eq!(code, Some(ErrorCode::UnknownDevice));
    assert!(m.contains("NUMA node 99"), "{m}");
    let (code, m) = refuse(LeaseRequest::new().cpus(100_000));
    assert_eq!(code, Some(ErrorCode::NeverFits));
    assert!(m.contains("numa"), "{m}");
    let (code, m) = refuse(LeaseRequest::new().host_memory(5 * GIB));
    assert_eq!(code, Some(ErrorCode::NeverFits));
    assert!(m.contains("host-memory"), "{m}");
    let (code, _) = refuse(LeaseRequest::new().pinned(2 * GIB));
    assert_eq!(code, Some(ErrorCode::NeverFits), "1 GiB page-locked at most");
    assert!(status(&daemon).leases.is_empty());
    // A daemon with host resources off says so, and does not offer them.
    let off = Daemon::start_with("1x16GiB", "[host]\nenabled = false\n");
    let client = off.client();
    assert!(!client.offers_host());
    assert!(off.client().status().unwrap().host.is_none());
    let e = client
        .acquire(&LeaseRequest::new().host_memory(GIB))
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidRequest));
    assert!(e.to_string().contains("enabled = false"), "{e}");
}

#[test]
fn host_memory_of_a_lease_grows_and_shrinks() {
    let daemon = Daemon::start_with("1x16GiB", HOST);
    let client = daemon.client();
    let mut lease = client
        .acquire(&LeaseRequest::new().host_memory(GIB).pinned(256 * MIB))
        .unwrap();
    assert_eq!(lease.resize_host_memory(3 * GIB, None).unwrap(), 3 * GIB);
    assert_eq!(lease.host().unwrap().mem_bytes, 3 * GIB);
    assert_eq!(host_reserved(&daemon), 3 * GIB);
    let other = daemon
        .client()
        .acquire(&LeaseRequest::new().host_memory(GIB))
        .unwrap();
    let e = lease
        .resize_host_memory(4 * GIB, Some(Duration::from_millis(100)))
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::TimedOut));
    assert_eq!(host_reserved(&daemon), 4 * GIB);
    let e = lease.resize_host_memory(128 * MIB, None).unwrap_err();
    assert!(e.to_string().contains("page-locked"), "{e}");
    assert_eq!(lease.resize_host_memory(GIB, None).unwrap(), GIB);
    assert_eq!(host_reserved(&daemon), 2 * GIB);
    other.release().unwrap();
    lease.release().unwrap();
}
