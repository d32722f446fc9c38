//! The core's part in liveness, on virtual time: which processes the shell samples, and what
//! a sample that says "stopped" or "running again" does to the holder's leases.

use std::time::Duration;

use gpud_proto::{AcquireArgs, Class, Event, Op, Outcome, Reply, RevokeReason, ServerFrame};

use super::bench::{Bench, GIB, outcome, peer, sent_to};
use super::{ProcessState, Watched};
use crate::config::Config;
use crate::ledger::{LedgerConfig, Liveness, PerClass};

const GRACE: Duration = Duration::from_secs(2);

/// Two devices with one slot; memory leases held at most a minute; stopped grace 2 s.
fn bench() -> Bench {
    let config = Config {
        scheduler: LedgerConfig {
            liveness: Liveness {
                memory_max_hold: PerClass {
                    normal: Some(Duration::from_secs(60)),
                    ..Liveness::default().memory_max_hold
                },
                stopped_grace: GRACE,
                ..Liveness::default()
            },
            ..LedgerConfig::default()
        },
        ..Config::default()
    };
    Bench::new(&config)
}

fn process(pid: u32) -> Watched {
    // As bench::peer starts them.
    Watched {
        pid,
        start: u64::from(pid) * 10,
    }
}

fn sample(b: &mut Bench, pid: u32, stopped: bool) {
    let now = b.now();
    let state = ProcessState {
        process: process(pid),
        stopped,
    };
    b.core.process_states(now, &[state]);
}

fn revoked(frames: &[ServerFrame]) -> Vec<(u64, RevokeReason)> {
    frames
        .iter()
        .filter_map(|f| match f {
            ServerFrame::Event {
                event: Event::Revoked { lease, reason },
            } => Some((*lease, *reason)),
            _ => None,
        })
        .collect()
}

fn critical_compute_on(device: u32) -> Op {
    Op::Acquire(AcquireArgs {
        compute: true,
        class: Class::Critical,
        device: gpud_proto::Placement::Index(device),
        ..AcquireArgs::default()
    })
}

#[test]
fn the_shell_samples_each_holder_process_once_and_no_one_else() {
    let mut b = bench();
    b.open(1, peer(100, 0)).unwrap();
    b.open(2, peer(100, 0)).unwrap();
    b.open(3, peer(200, 0)).unwrap();
    let mut unknown = peer(300, 0);
    unknown.pid = 0;
    b.open(4, unknown).unwrap();
    assert!(
        b.core.watched_processes().is_empty(),
        "nobody holds a lease"
    );
    b.acquire(1, 1, GIB, false);
    b.acquire(2, 1, GIB, true);
    b.acquire(4, 1, GIB, false);
    assert_eq!(b.core.watched_processes(), vec![process(100)]);
    // A stopped process stays watched when it holds nothing, so that it is seen to run again.
    sample(&mut b, 100, true);
    let now = b.now();
    b.core.close(now, 1);
    b.core.close(now, 2);
    b.open(5, peer(200, 0)).unwrap();
    assert!(b.core.watched_processes().is_empty());
    b.acquire(3, 1, GIB, false);
    assert_eq!(b.core.watched_processes(), vec![process(200)]);
}

#[test]
fn a_stopped_compute_holder_loses_its_slot_to_a_critical_waiter_after_the_stopped_grace() {
    let mut b = bench();
    b.open(1, peer(100, 1000)).unwrap();
    b.open(2, peer(7, 0)).unwrap();
    b.request(
        1,
        1,
        Op::Acquire(AcquireArgs {
            compute: true,
            device: gpud_proto::Placement::Index(0),
            ..AcquireArgs::default()
        }),
    );
    let Some(Outcome::Ok(Reply::Granted(held))) = outcome(&b.frames(1), 1).cloned() else {
        panic!("not granted")
    };
    sample(&mut b, 100, true);
    b.request(2, 1, critical_compute_on(0));
    assert!(b.frames(2).is_empty(), "the critical request waits");
    b.advance(GRACE - Duration::from_millis(1));
    assert!(revoked(&b.frames(1)).is_empty(), "within the stopped grace");
    b.advance(Duration::from_millis(1));
    let actions = b.actions();
    assert_eq!(
        revoked(&sent_to(&actions, 1)),
        vec![(held.lease, RevokeReason::HolderStopped)]
    );
    assert!(matches!(
        outcome(&sent_to(&actions, 2), 1),
        Some(Outcome::Ok(Reply::Granted(_)))
    ));
    let metrics = b.core.metrics(b.now());
    assert!(metrics.contains("reason=\"holder_stopped\""), "{metrics}");
}

#[test]
fn a_holder_that_runs_again_within_the_grace_keeps_its_lease() {
    let mut b = bench();
    b.open(1, peer(100, 1000)).unwrap();
    b.open(2, peer(7, 0)).unwrap();
    b.request(
        1,
        1,
        Op::Acquire(AcquireArgs {
            compute: true,
            device: gpud_proto::Placement::Index(0),
            ..AcquireArgs::default()
        }),
    );
    b.frames(1);
    sample(&mut b, 100, true);
    b.request(2, 1, critical_compute_on(0));
    b.advance(GRACE / 2);
    sample(&mut b, 100, false);
    // Another process that reuses nothing: a sample of another start changes nothing.
    let now = b.now();
    b.core.process_states(
        now,
        &[ProcessState {
            process: Watched { pid: 100, start: 1 },
            stopped: true,
        }],
    );
    b.advance(GRACE * 2);
    let frames = b.frames(1);
    assert!(revoked(&frames).is_empty(), "{frames:?}");
    assert!(
        frames.iter().any(|f| matches!(
            f,
            ServerFrame::Event {
                event: Event::YieldRequested { .. }
            }
        )),
        "it is asked to yield as any holder: {frames:?}"
    );
}

#[test]
fn a_stopped_memory_holder_loses_its_lease_at_its_maximum_hold_with_no_notice() {
    let mut b = bench();
    b.open(1, peer(100, 1000)).unwrap();
    b.acquire(1, 1, GIB, false);
    let Some(Outcome::Ok(Reply::Granted(held))) = outcome(&b.frames(1), 1).cloned() else {
        panic!("not granted")
    };
    sample(&mut b, 100, true);
    // Nothing waits for it: it is kept until its maximum hold.
    b.advance(Duration::from_secs(59));
    assert!(b.frames(1).is_empty());
    b.advance(Duration::from_secs(1));
    let frames = b.frames(1);
    assert_eq!(
        frames,
        vec![ServerFrame::Event {
            event: Event::Revoked {
                lease: held.lease,
                reason: RevokeReason::HolderStopped
            }
        }]
    );
    assert_eq!(b.core.ledger().leases().count(), 0);
}
