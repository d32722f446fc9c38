//! Host resources in the core: the grant names distinct CPUs (lowest free first, reused once
//! freed), bad requests are refused with what was wrong, host memory resizes, and a restart
//! restores host parts with their CPUs.

use gpud_proto::{
    AcquireArgs, ErrorCode, HostArgs, LeaseInfo, NumaPlacement, Op, Outcome, Reply, Resource,
};

use super::bench::{Bench, GIB, outcome, peer, sent_to};
use super::{Action, JournalEntry, Notice, Restorable};
use crate::config::Config;
use crate::host::{HostLayout, NodeCpus};
use crate::ledger::SessionId;

/// 8 GiB of host memory, 2 GiB page-locked, CPUs 0-3 on node 0 and 4-5 on node 1.
fn layout() -> HostLayout {
    HostLayout {
        memory_total: 8 * GIB,
        memory_headroom: 0,
        pinned_total: 2 * GIB,
        nodes: vec![
            NodeCpus {
                node: 0,
                cpus: vec![0, 1, 2, 3],
            },
            NodeCpus {
                node: 1,
                cpus: vec![4, 5],
            },
        ],
    }
}

fn bench() -> Bench {
    let mut b = Bench::with_host(&Config::default(), &layout());
    for s in 1..=3 {
        b.open(s, peer(100 + s as u32, 1000)).unwrap();
    }
    b
}

fn host(mem_bytes: u64, cpus: u32, numa: NumaPlacement) -> AcquireArgs {
    AcquireArgs {
        host: Some(HostArgs {
            mem_bytes,
            pinned_bytes: 0,
            cpus,
            numa,
        }),
        ..AcquireArgs::default()
    }
}

fn ask(b: &mut Bench, session: SessionId, id: u64, args: AcquireArgs) -> Option<Outcome> {
    b.request(session, id, Op::Acquire(args));
    let frames = b.frames(session);
    outcome(&frames, id).cloned()
}

fn granted(o: Option<Outcome>) -> LeaseInfo {
    match o {
        Some(Outcome::Ok(Reply::Granted(info))) => info,
        other => panic!("not granted: {other:?}"),
    }
}

fn refused(o: Option<Outcome>) -> (ErrorCode, String) {
    match o {
        Some(Outcome::Error(e)) => (e.code, e.message),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn concurrent_leases_get_distinct_cpus_lowest_first_and_freed_cpus_are_reused() {
    let mut b = bench();
    let a = granted(ask(&mut b, 1, 1, host(GIB, 2, NumaPlacement::Node(0))));
    let h = a.host.clone().unwrap();
    assert_eq!(
        (h.cpus.clone(), h.numa_node, h.mem_bytes),
        (vec![0, 1], Some(0), GIB)
    );
    assert_eq!(h.parts.len(), 2);
    assert_eq!(
        a.cuda_visible_devices, "",
        "a lease of the host alone has no device"
    );
    let c = granted(ask(&mut b, 2, 1, host(0, 2, NumaPlacement::Node(0))));
    assert_eq!(c.host.unwrap().cpus, vec![2, 3]);
    let status = b.core.status(b.now());
    let section = status.host.unwrap();
    assert_eq!(section.numa[0].granted, vec![0, 1, 2, 3]);
    assert_eq!(section.memory.reserved_bytes, GIB);
    assert_eq!(section.memory.capacity_bytes, 8 * GIB);
    let rows: Vec<Resource> = status.leases.iter().map(|l| l.resource).collect();
    assert!(rows.contains(&Resource::HostMemory) && rows.contains(&Resource::Cpus));
    assert!(status.leases.iter().any(|l| l.device == "numa0"));
    assert!(status.devices.len() == 2, "host pools are no devices");
    // Node 0 is full: a third waits, and gets the CPUs the first gives back.
    b.request(3, 1, Op::Acquire(host(0, 1, NumaPlacement::Node(0))));
    let waiting = b.core.status(b.now());
    assert_eq!(
        waiting.waiters[0].host.as_ref().unwrap().numa,
        NumaPlacement::Node(0)
    );
    b.request(1, 2, Op::Release { lease: a.lease });
    let third = granted(outcome(&b.frames(3), 1).cloned());
    assert_eq!(third.host.unwrap().cpus, vec![0]);
}

#[test]
fn a_device_lease_with_cpus_near_gets_them_on_its_device_s_node() {
    let mut b = bench();
    let args = AcquireArgs {
        vram_bytes: GIB,
        compute: true,
        device: gpud_proto::Placement::Index(1),
        ..host(2 * GIB, 1, NumaPlacement::Near)
    };
    let info = granted(ask(&mut b, 1, 1, args));
    assert_eq!(
        (info.device_index, info.vram_bytes, info.compute),
        (1, GIB, true)
    );
    assert!(info.parts.is_empty(), "one device: no parts");
    let h = info.host.unwrap();
    assert_eq!((h.cpus, h.numa_node), (vec![4], Some(1)));
    assert!(!info.cuda_visible_devices.is_empty());
}

#[test]
fn bad_host_requests_are_refused_with_what_was_wrong() {
    let mut b = bench();
    let (code, m) = refused(ask(&mut b, 1, 1, host(0, 1, NumaPlacement::Near)));
    assert_eq!(code, ErrorCode::InvalidRequest);
    assert!(m.contains("near") && m.contains("device"), "{m}");
    let (code, m) = refused(ask(&mut b, 1, 2, host(0, 1, NumaPlacement::Node(7))));
    assert_eq!(code, ErrorCode::UnknownDevice);
    assert!(m.contains("NUMA node 7") && m.contains("0, 1"), "{m}");
    let (code, m) = refused(ask(&mut b, 1, 3, host(0, 5, NumaPlacement::Any)));
    assert_eq!(code, ErrorCode::NeverFits);
    assert!(m.contains("numa0") && m.contains("5 CPUs"), "{m}");
    let (code, m) = refused(ask(&mut b, 1, 4, host(9 * GIB, 0, NumaPlacement::Any)));
    assert_eq!(code, ErrorCode::NeverFits);
    assert!(m.contains("host-memory"), "{m}");
    let (_, m) = refused(ask(&mut b, 1, 5, host(0, 0, NumaPlacement::Node(0))));
    assert!(m.contains("host.cpus"), "{m}");
    let evictable = AcquireArgs {
        evictable: true,
        vram_bytes: GIB,
        ..host(GIB, 0, NumaPlacement::Any)
    };
    let (_, m) = refused(ask(&mut b, 1, 6, evictable));
    assert!(m.contains("evictable"), "{m}");
    // A daemon that books no host resources says so.
    let mut off = Bench::new(&Config::default());
    off.open(1, peer(101, 1000)).unwrap();
    let (code, m) = refused(ask(&mut off, 1, 1, host(GIB, 0, NumaPlacement::Any)));
    assert_eq!(code, ErrorCode::InvalidRequest);
    assert!(m.contains("[host] enabled = false"), "{m}");
    assert!(b.core.ledger().leases().next().is_none());
}

#[test]
fn host_memory_grows_when_there_is_room_shrinks_at_once_and_never_below_pinned() {
    let mut b = bench();
    let args = AcquireArgs {
        host: Some(HostArgs {
            mem_bytes: 0,
            pinned_bytes: GIB,
            cpus: 0,
            numa: NumaPlacement::Any,
        }),
        ..AcquireArgs::default()
    };
    let a = granted(ask(&mut b, 1, 1, args));
    let h = a.host.unwrap();
    assert_eq!(
        (h.mem_bytes, h.pinned_bytes),
        (GIB, GIB),
        "pinned is host memory too"
    );
    let other = granted(ask(&mut b, 2, 1, host(6 * GIB, 0, NumaPlacement::Any)));
    let resize = |lease, bytes| Op::Resize {
        lease,
        vram_bytes: 0,
        timeout_ms: None,
        host_mem_bytes: Some(bytes),
    };
    b.request(1, 2, resize(a.lease, GIB / 2));
    let (_, m) = refused(outcome(&b.frames(1), 2).cloned());
    assert!(m.contains("page-locked"), "{m}");
    // 1 + 6 of 8 GiB: growing to 4 waits for the other to shrink.
    b.request(1, 3, resize(a.lease, 4 * GIB));
    assert!(outcome(&b.frames(1), 3).is_none(), "the grow waits");
    assert_eq!(
        b.core.status(b.now()).waiters[0]
            .host
            .as_ref()
            .unwrap()
            .mem_bytes,
        3 * GIB
    );
    b.request(2, 2, resize(other.lease, 2 * GIB));
    let acts = b.actions();
    assert!(matches!(
        outcome(&sent_to(&acts, 2), 2),
        Some(Outcome::Ok(Reply::Resized { vram_bytes, .. })) if *vram_bytes == 2 * GIB
    ));
    assert!(matches!(
        outcome(&sent_to(&acts, 1), 3),
        Some(Outcome::Ok(Reply::Resized { lease, vram_bytes })) if *lease == a.lease && *vram_bytes == 4 * GIB
    ));
    // Device memory of a lease of the host alone is refused with where to go instead.
    b.request(
        1,
        4,
        Op::Resize {
            lease: a.lease,
            vram_bytes: GIB,
            timeout_ms: None,
            host_mem_bytes: None,
        },
    );
    let (_, m) = refused(outcome(&b.frames(1), 4).cloned());
    assert!(m.contains("host_mem_bytes"), "{m}");
}

#[test]
fn a_restart_restores_a_host_lease_with_its_cpus() {
    let mut b = bench();
    let now = b.now();
    b.core
        .restore(now, Vec::new(), std::time::Duration::from_secs(10));
    let _ = b.actions();
    b.request(1, 1, Op::Acquire(host(GIB, 2, NumaPlacement::Node(0))));
    let acts = b.actions();
    let a = granted(outcome(&sent_to(&acts, 1), 1).cloned());
    let records: Vec<_> = acts
        .into_iter()
        .filter_map(|x| match x {
            Action::Journal(JournalEntry::Grant(r))
                if a.host.as_ref().unwrap().parts.contains(&r.id) =>
            {
                Some(r)
            }
            _ => None,
        })
        .collect();
    assert_eq!(records.len(), 2);
    let cpu = records.iter().find(|r| r.device_uuid == "numa0").unwrap();
    assert_eq!(cpu.cpus, vec![0, 1]);
    // A new daemon: the lease is back with its CPUs, and a new lease does not get them.
    let mut again = bench();
    let now = again.now();
    let journaled = records
        .into_iter()
        .map(|record| Restorable {
            record,
            owner_alive: true,
        })
        .collect();
    again
        .core
        .restore(now, journaled, std::time::Duration::from_secs(10));
    let token = a.token.clone();
    again.request(
        1,
        1,
        Op::Adopt {
            lease: a.lease,
            token,
        },
    );
    let adopted = match outcome(&again.frames(1), 1) {
        Some(Outcome::Ok(Reply::Adopted(info))) => info.clone(),
        other => panic!("not adopted: {other:?}"),
    };
    assert_eq!(adopted.host.unwrap().cpus, vec![0, 1]);
    let fresh = granted(ask(&mut again, 2, 1, host(0, 2, NumaPlacement::Node(0))));
    assert_eq!(fresh.host.unwrap().cpus, vec![2, 3]);
}

#[test]
fn every_host_part_counts_against_the_session_s_lease_limit() {
    let mut config = Config::default();
    config.limits.max_leases_per_session = 3;
    let mut b = Bench::with_host(&config, &layout());
    b.open(1, peer(101, 1000)).unwrap();
    let three = AcquireArgs {
        vram_bytes: GIB,
        ..host(GIB, 1, NumaPlacement::Any)
    };
    let info = granted(ask(&mut b, 1, 1, three.clone()));
    assert_eq!(info.host.unwrap().parts.len(), 2);
    b.request(1, 2, Op::Release { lease: info.lease });
    let mut four = three;
    four.host.as_mut().unwrap().pinned_bytes = GIB;
    let (code, m) = refused(ask(&mut b, 1, 3, four));
    assert_eq!(code, ErrorCode::LimitExceeded);
    assert!(m.contains("max_leases_per_session"), "{m}");
}

/// The watchers' notices among `actions`: (devices of `LeaseGranted`, devices of
/// `LeaseEnded`, host part changes).
fn notices(actions: &[Action]) -> (Vec<u32>, Vec<u32>, usize) {
    let mut seen = (Vec::new(), Vec::new(), 0);
    for action in actions {
        match action {
            Action::Notify(Notice::LeaseGranted { device, .. }) => seen.0.push(*device),
            Action::Notify(Notice::LeaseEnded { device, .. }) => seen.1.push(*device),
            Action::Notify(Notice::HostPartChanged { .. }) => seen.2 += 1,
            _ => {}
        }
    }
    seen
}

/// `op` from `session`: its answer, and the watchers' notices it caused.
fn seen(
    b: &mut Bench,
    session: SessionId,
    id: u64,
    op: Op,
) -> (Option<Outcome>, (Vec<u32>, Vec<u32>, usize)) {
    b.request(session, id, op);
    let actions = b.actions();
    (
        outcome(&sent_to(&actions, session), id).cloned(),
        notices(&actions),
    )
}

#[test]
fn watchers_hear_of_a_device_part_as_a_device_lease_and_of_host_parts_only_as_changes() {
    let mut b = bench();
    b.actions();
    let args = AcquireArgs {
        vram_bytes: GIB,
        ..host(GIB, 1, NumaPlacement::Any)
    };
    let (answer, (granted_on, ended_on, host_parts)) = seen(&mut b, 1, 1, Op::Acquire(args));
    let lease = granted(answer);
    // The bench has two devices; a host pool's ledger index (2 and up) is no device to name.
    assert_eq!(granted_on, vec![lease.device_index]);
    assert!(ended_on.is_empty());
    assert_eq!(host_parts, 2, "host memory and the CPU part");
    let release = Op::Release { lease: lease.lease };
    let (_, (granted_on, ended_on, host_parts)) = seen(&mut b, 1, 2, release);
    assert!(granted_on.is_empty());
    assert_eq!(ended_on, vec![lease.device_index]);
    assert_eq!(host_parts, 2);
    // A lease of the host alone names no device at all.
    let only = Op::Acquire(host(GIB, 0, NumaPlacement::Any));
    let (answer, (granted_on, ended_on, host_parts)) = seen(&mut b, 2, 1, only);
    assert!(granted(answer).host.is_some());
    assert!(granted_on.is_empty() && ended_on.is_empty());
    assert_eq!(host_parts, 1);
}

#[test]
fn a_waiting_host_memory_grow_is_forgotten_whichever_way_it_ends() {
    let mut b = bench();
    let a = granted(ask(&mut b, 1, 1, host(GIB, 0, NumaPlacement::Any)));
    granted(ask(&mut b, 2, 1, host(6 * GIB, 0, NumaPlacement::Any)));
    let resizes = |b: &Bench| b.core.host.as_ref().unwrap().resizes.len();
    b.request(
        1,
        2,
        Op::Resize {
            lease: a.lease,
            vram_bytes: 0,
            timeout_ms: None,
            host_mem_bytes: Some(4 * GIB),
        },
    );
    assert!(outcome(&b.frames(1), 2).is_none(), "the grow waits");
    assert_eq!(resizes(&b), 1);
    // The lease ends while its grow waits: the grow is abandoned, and forgotten.
    b.request(1, 3, Op::Release { lease: a.lease });
    let frames = b.frames(1);
    assert!(
        matches!(outcome(&frames, 2), Some(Outcome::Error(e)) if e.code == ErrorCode::Cancelled),
        "{frames:?}"
    );
    assert_eq!(resizes(&b), 0);
}

#[test]
fn a_numa_placement_without_cpus_is_refused_with_or_without_other_host_resources() {
    let mut b = bench();
    for (id, mem_bytes) in [(1, 0), (2, GIB)] {
        let (code, m) = refused(ask(
            &mut b,
            1,
            id,
            host(mem_bytes, 0, NumaPlacement::Node(0)),
        ));
        assert_eq!(code, ErrorCode::InvalidRequest);
        assert!(m.contains("places CPUs"), "{m}");
    }
}
