//! Ledger tests: targeted scenarios, then property tests over random event sequences.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

const GIB: u64 = 1 << 30;

fn device(uuid: &str, gib: u64) -> DeviceSpec {
    DeviceSpec {
        uuid: uuid.into(),
        name: "Simulated GPU".into(),
        total_bytes: gib * GIB,
        headroom_bytes: 0,
        unmanaged_bytes: 0,
        compute_slots: 1,
        critical_slots: 0,
    }
}

fn spec(placement: Placement, vram: u64, compute: bool, class: Class) -> AcquireSpec {
    AcquireSpec {
        placement,
        vram_bytes: vram,
        compute,
        class,
        timeout: None,
        label: None,
    }
}

fn t(session: u64, request: u64) -> Ticket {
    Ticket { session, request }
}

/// Acquires and expects the grant at once.
fn granted(l: &mut Ledger, now: Instant, ticket: Ticket, spec: AcquireSpec) -> LeaseId {
    match l.acquire(now, ticket, spec) {
        Ok(Some(id)) => id,
        other => panic!("{ticket:?} not granted at once: {other:?}"),
    }
}

fn drain_decisions(l: &mut Ledger) -> Vec<Decision> {
    std::iter::from_fn(|| l.poll_decision()).collect()
}

#[test]
fn two_large_requests_are_serialized() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let a = l.acquire(
        now,
        t(1, 1),
        spec(Placement::Any, 10 * GIB, false, Class::Normal),
    );
    let lease_a = a.unwrap().expect("first fits");
    let b = l.acquire(
        now,
        t(2, 1),
        spec(Placement::Any, 10 * GIB, false, Class::Normal),
    );
    assert_eq!(b, Ok(None), "second must wait");
    assert_eq!(l.device(0).unwrap().reserved(), 10 * GIB);
    l.release(now, 1, lease_a).unwrap();
    let d = drain_decisions(&mut l);
    assert!(matches!(d.as_slice(), [Decision::Granted { ticket, .. }] if *ticket == t(2, 1)));
    assert_eq!(l.device(0).unwrap().reserved(), 10 * GIB);
    l.check_invariants().unwrap();
}

#[test]
fn never_fitting_requests_are_refused_at_once() {
    let now = Instant::now();
    let mut l = Ledger::new(
        LedgerConfig::default(),
        vec![device("GPU-a", 16), device("GPU-b", 24)],
    );
    let e = l.acquire(
        now,
        t(1, 1),
        spec(Placement::Any, 25 * GIB, false, Class::Normal),
    );
    assert_eq!(
        e,
        Err(LedgerError::NeverFits {
            need: 25 * GIB,
            capacity: 24 * GIB
        })
    );
    let e = l.acquire(
        now,
        t(1, 2),
        spec(Placement::Index(0), 20 * GIB, false, Class::Normal),
    );
    assert!(matches!(e, Err(LedgerError::NeverFits { .. })));
    let e = l.acquire(
        now,
        t(1, 3),
        spec(Placement::Index(7), GIB, false, Class::Normal),
    );
    assert!(matches!(e, Err(LedgerError::UnknownDevice(_))));
    let e = l.acquire(now, t(1, 4), spec(Placement::Any, 0, false, Class::Normal));
    assert!(matches!(e, Err(LedgerError::Invalid(_))));
    // 20 GiB on "any" can only go to the 24 GiB device.
    let id = granted(
        &mut l,
        now,
        t(1, 5),
        spec(Placement::Any, 20 * GIB, false, Class::Normal),
    );
    assert_eq!(l.lease(id).unwrap().device, 1);
}

#[test]
fn any_placement_takes_the_best_fit() {
    let now = Instant::now();
    let mut l = Ledger::new(
        LedgerConfig::default(),
        vec![device("GPU-a", 24), device("GPU-b", 16)],
    );
    let id = granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Any, 12 * GIB, false, Class::Normal),
    );
    assert_eq!(
        l.lease(id).unwrap().device,
        1,
        "16 GiB leaves less over than 24"
    );
    let id = l
        .acquire(
            now,
            t(1, 2),
            spec(Placement::Uuid("gpu-A".into()), GIB, false, Class::Normal),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        l.lease(id).unwrap().device,
        0,
        "UUIDs match case-insensitively"
    );
}

#[test]
fn critical_overtakes_normal_and_asks_the_holder_to_yield() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let holder = granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Any, GIB, true, Class::Normal),
    );
    for s in 2..5 {
        assert_eq!(
            l.acquire(now, t(s, 1), spec(Placement::Any, GIB, true, Class::Normal)),
            Ok(None)
        );
    }
    assert!(
        drain_decisions(&mut l).is_empty(),
        "no yield for normal waiters"
    );
    assert_eq!(
        l.acquire(
            now,
            t(9, 1),
            spec(Placement::Any, GIB, true, Class::Critical)
        ),
        Ok(None)
    );
    let d = drain_decisions(&mut l);
    assert_eq!(
        d,
        vec![Decision::YieldRequested {
            session: 1,
            lease: holder,
            reason: YieldReason::CriticalWaiting,
            revoke_at: None
        }]
    );
    // A second critical waiter does not re-send the notice to the same holder.
    assert_eq!(
        l.acquire(
            now,
            t(10, 1),
            spec(Placement::Any, GIB, true, Class::Critical)
        ),
        Ok(None)
    );
    assert!(drain_decisions(&mut l).is_empty());
    l.release(now, 1, holder).unwrap();
    let d = drain_decisions(&mut l);
    assert!(
        matches!(d.as_slice(), [Decision::Granted { ticket, .. }] if *ticket == t(9, 1)),
        "{d:?}"
    );
    assert_eq!(
        l.waiters()[0].ticket,
        t(10, 1),
        "the other critical is next in line"
    );
}

/// A 16 GiB device with one compute slot and one critical slot.
fn one_slot_and_a_critical_slot() -> Ledger {
    let mut dev = device("GPU-a", 16);
    dev.critical_slots = 1;
    Ledger::new(LedgerConfig::default(), vec![dev])
}

#[test]
fn a_critical_slot_serves_critical_work_beside_the_running_phase() {
    let now = Instant::now();
    let mut l = one_slot_and_a_critical_slot();
    let phase = granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Any, 6 * GIB, true, Class::Normal),
    );
    // A normal request may not take the critical slot; a high one neither.
    for (s, class) in [(2, Class::Normal), (3, Class::High)] {
        assert_eq!(
            l.acquire(now, t(s, 1), spec(Placement::Any, GIB, true, class)),
            Ok(None)
        );
    }
    // The critical request is granted beside the phase, and nobody is asked to yield.
    let critical = granted(
        &mut l,
        now,
        t(9, 1),
        spec(Placement::Any, 6 * GIB, true, Class::Critical),
    );
    assert!(drain_decisions(&mut l).is_empty(), "no yield notice");
    assert_eq!(l.device(0).unwrap().compute_holders().count(), 2);
    // A second critical request finds the critical slot taken: it waits and asks for a yield.
    assert_eq!(
        l.acquire(
            now,
            t(10, 1),
            spec(Placement::Any, GIB, true, Class::Critical)
        ),
        Ok(None)
    );
    assert!(matches!(
        drain_decisions(&mut l).as_slice(),
        [Decision::YieldRequested { lease, .. }] if *lease == phase
    ));
    // The phase ends: the waiting critical comes first, and the ordinary slot stays counted
    // while critical work holds the device, so the normal and high waiters keep waiting.
    l.release(now, 1, phase).unwrap();
    let d = drain_decisions(&mut l);
    assert!(
        matches!(d.as_slice(), [Decision::Granted { ticket, .. }] if *ticket == t(10, 1)),
        "{d:?}"
    );
    l.release(now, 9, critical).unwrap();
    assert!(
        drain_decisions(&mut l).is_empty(),
        "critical work still holds the ordinary slot"
    );
    let second = l.leases().find(|x| x.session == 10).map(|x| x.id).unwrap();
    l.release(now, 10, second).unwrap();
    let d = drain_decisions(&mut l);
    assert!(
        matches!(d.as_slice(), [Decision::Granted { ticket, .. }] if *ticket == t(3, 1)),
        "the high waiter is next: {d:?}"
    );
    l.check_invariants().unwrap();
}

#[test]
fn reloaded_slots_serve_waiters_at_once_and_lowered_slots_keep_their_holders() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let ask = |class| spec(Placement::Any, GIB, true, class);
    let first = granted(&mut l, now, t(1, 1), ask(Class::Normal));
    assert_eq!(l.acquire(now, t(2, 1), ask(Class::Normal)), Ok(None));
    // A second slot serves the waiter at once.
    l.set_slots(now, 2, 0);
    let d = drain_decisions(&mut l);
    assert!(
        matches!(d.as_slice(), [Decision::Granted { ticket, .. }] if *ticket == t(2, 1)),
        "{d:?}"
    );
    let second = l.leases().find(|x| x.session == 2).map(|x| x.id).unwrap();
    // Back to one slot: both holders keep theirs, and nothing more is granted until the
    // holders are below the new count.
    l.set_slots(now, 1, 0);
    assert_eq!(l.device(0).unwrap().compute_holders().count(), 2);
    assert_eq!(l.acquire(now, t(3, 1), ask(Class::Normal)), Ok(None));
    l.release(now, 1, first).unwrap();
    assert!(drain_decisions(&mut l).is_empty(), "one holder, one slot");
    l.release(now, 2, second).unwrap();
    assert!(matches!(
        drain_decisions(&mut l).as_slice(),
        [Decision::Granted { ticket, .. }] if *ticket == t(3, 1)
    ));
    // A critical slot added by a reload serves a critical waiter beside the holder.
    assert_eq!(l.acquire(now, t(4, 1), ask(Class::Critical)), Ok(None));
    drain_decisions(&mut l);
    l.set_slots(now, 1, 1);
    assert!(matches!(
        drain_decisions(&mut l).as_slice(),
        [Decision::Granted { ticket, .. }] if *ticket == t(4, 1)
    ));
    assert_eq!(l.device(0).unwrap().spec().critical_slots, 1);
    l.check_invariants().unwrap();
}

#[test]
fn a_critical_slot_still_needs_the_vram() {
    let now = Instant::now();
    let mut l = one_slot_and_a_critical_slot();
    let phase = granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Any, 12 * GIB, true, Class::Normal),
    );
    // 12 + 6 > 16: the slot is free but the memory is not, so the critical request waits
    // (no yield notice: compute is not what it waits for).
    assert_eq!(
        l.acquire(
            now,
            t(9, 1),
            spec(Placement::Any, 6 * GIB, true, Class::Critical)
        ),
        Ok(None)
    );
    assert!(drain_decisions(&mut l).is_empty());
    l.release(now, 1, phase).unwrap();
    assert!(matches!(
        drain_decisions(&mut l).as_slice(),
        [Decision::Granted { ticket, .. }] if *ticket == t(9, 1)
    ));
}

#[test]
fn the_oldest_waiter_pins_the_device_after_max_overtakes() {
    let now = Instant::now();
    let config = LedgerConfig {
        max_overtakes: 2,
        ..LedgerConfig::default()
    };
    let mut l = Ledger::new(config, vec![device("GPU-a", 16)]);
    let big = l.acquire(
        now,
        t(1, 1),
        spec(Placement::Any, 8 * GIB, false, Class::Normal),
    );
    let big = big.unwrap().unwrap();
    // Wants 12 GiB: waits while 8 are held.
    assert_eq!(
        l.acquire(
            now,
            t(2, 1),
            spec(Placement::Any, 12 * GIB, false, Class::Background)
        ),
        Ok(None)
    );
    // Two later small requests fit and overtake it.
    for s in 3..5 {
        assert!(
            l.acquire(now, t(s, 1), spec(Placement::Any, GIB, false, Class::High))
                .unwrap()
                .is_some()
        );
    }
    assert_eq!(l.waiters()[0].overtaken, 2);
    // The third is held back although it fits.
    assert_eq!(
        l.acquire(
            now,
            t(5, 1),
            spec(Placement::Any, GIB, false, Class::Critical)
        ),
        Ok(None)
    );
    // A compute-only request does not compete for memory and still goes through.
    assert!(
        l.acquire(now, t(6, 1), spec(Placement::Any, 0, true, Class::Normal))
            .unwrap()
            .is_some()
    );
    l.release(now, 1, big).unwrap();
    let d = drain_decisions(&mut l);
    let granted: Vec<Ticket> = d
        .iter()
        .filter_map(|d| match d {
            Decision::Granted { ticket, .. } => Some(*ticket),
            _ => None,
        })
        .collect();
    assert_eq!(
        granted.first(),
        Some(&t(2, 1)),
        "the pinned waiter goes first: {d:?}"
    );
    l.check_invariants().unwrap();
}

#[test]
fn grow_waits_and_times_out_without_losing_the_lease() {
    let start = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let a = granted(
        &mut l,
        start,
        t(1, 1),
        spec(Placement::Any, 4 * GIB, false, Class::Normal),
    );
    let b = granted(
        &mut l,
        start,
        t(2, 1),
        spec(Placement::Any, 10 * GIB, false, Class::Normal),
    );
    // Shrink is immediate.
    assert_eq!(
        l.resize(start, t(1, 2), a, 2 * GIB, None),
        Ok(ResizeOutcome::Done {
            vram_bytes: 2 * GIB
        })
    );
    // Grow to 8 GiB needs 6 more; only 4 are free.
    let r = l.resize(start, t(1, 3), a, 8 * GIB, Some(Duration::from_millis(50)));
    assert_eq!(r, Ok(ResizeOutcome::Waiting));
    assert_eq!(
        l.resize(start, t(1, 4), a, 9 * GIB, None),
        Err(LedgerError::ResizePending(a))
    );
    assert_eq!(l.poll_timeout(), Some(start + Duration::from_millis(50)));
    l.handle_timeout(start + Duration::from_millis(50));
    assert_eq!(
        drain_decisions(&mut l),
        vec![Decision::TimedOut { ticket: t(1, 3) }]
    );
    assert_eq!(l.lease(a).unwrap().vram_bytes, 2 * GIB);
    // Grow again, then free room: it is granted.
    assert_eq!(
        l.resize(start, t(1, 5), a, 8 * GIB, None),
        Ok(ResizeOutcome::Waiting)
    );
    l.release(start, 2, b).unwrap();
    assert_eq!(
        drain_decisions(&mut l),
        vec![Decision::Grew {
            ticket: t(1, 5),
            lease: a,
            vram_bytes: 8 * GIB
        }]
    );
    assert_eq!(l.device(0).unwrap().reserved(), 8 * GIB);
    // A grow past capacity is refused.
    assert!(matches!(
        l.resize(start, t(1, 6), a, 17 * GIB, None),
        Err(LedgerError::NeverFits { .. })
    ));
    l.check_invariants().unwrap();
}

#[test]
fn releasing_a_lease_abandons_its_pending_grow() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let a = granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Any, 8 * GIB, false, Class::Normal),
    );
    let _b = granted(
        &mut l,
        now,
        t(2, 1),
        spec(Placement::Any, 8 * GIB, false, Class::Normal),
    );
    assert_eq!(
        l.resize(now, t(1, 2), a, 12 * GIB, None),
        Ok(ResizeOutcome::Waiting)
    );
    l.release(now, 1, a).unwrap();
    assert_eq!(
        drain_decisions(&mut l),
        vec![Decision::GrowAbandoned {
            ticket: t(1, 2),
            lease: a
        }]
    );
    l.check_invariants().unwrap();
}

#[test]
fn disconnect_frees_everything_in_one_step() {
    let now = Instant::now();
    let mut l = Ledger::new(
        LedgerConfig::default(),
        vec![device("GPU-a", 16), device("GPU-b", 16)],
    );
    granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Index(0), 8 * GIB, true, Class::Normal),
    );
    granted(
        &mut l,
        now,
        t(1, 2),
        spec(Placement::Index(1), 8 * GIB, false, Class::Normal),
    );
    assert_eq!(
        l.acquire(
            now,
            t(1, 3),
            spec(Placement::Index(0), 0, true, Class::High)
        ),
        Ok(None)
    );
    assert_eq!(
        l.acquire(
            now,
            t(2, 1),
            spec(Placement::Index(0), 10 * GIB, true, Class::Normal)
        ),
        Ok(None)
    );
    let gone = l.disconnect(now, 1);
    assert_eq!(gone.leases.len(), 2);
    assert_eq!(gone.waiters, 1);
    let d = drain_decisions(&mut l);
    assert!(
        matches!(d.as_slice(), [Decision::Granted { ticket, .. }] if *ticket == t(2, 1)),
        "{d:?}"
    );
    assert_eq!(l.device(1).unwrap().reserved(), 0);
    l.check_invariants().unwrap();
}

#[test]
fn drained_devices_grant_nothing_until_undrained() {
    let now = Instant::now();
    let mut l = Ledger::new(
        LedgerConfig::default(),
        vec![device("GPU-a", 16), device("GPU-b", 16)],
    );
    let held = granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Index(0), GIB, false, Class::Normal),
    );
    l.drain(now, &Placement::Index(0)).unwrap();
    assert_eq!(
        l.acquire(
            now,
            t(2, 1),
            spec(Placement::Index(0), GIB, false, Class::Normal)
        ),
        Ok(None)
    );
    let other = granted(
        &mut l,
        now,
        t(2, 2),
        spec(Placement::Any, GIB, false, Class::Normal),
    );
    assert_eq!(
        l.lease(other).unwrap().device,
        1,
        "any goes around the drained device"
    );
    assert!(l.lease(held).is_some(), "existing leases run on");
    l.undrain(now, &Placement::Uuid("GPU-a".into())).unwrap();
    assert!(matches!(
        drain_decisions(&mut l).as_slice(),
        [Decision::Granted { .. }]
    ));
}

#[test]
fn max_hold_asks_to_yield_then_revokes_after_grace() {
    let start = Instant::now();
    let config = LedgerConfig {
        max_hold: PerClass {
            normal: Some(Duration::from_secs(10)),
            ..PerClass::default()
        },
        revoke_after_yield: Some(Duration::from_secs(2)),
        ..LedgerConfig::default()
    };
    let mut l = Ledger::new(config, vec![device("GPU-a", 16)]);
    let a = granted(
        &mut l,
        start,
        t(1, 1),
        spec(Placement::Any, GIB, true, Class::Normal),
    );
    let bg = l
        .acquire(
            start,
            t(2, 1),
            spec(Placement::Any, GIB, true, Class::Background),
        )
        .unwrap();
    assert_eq!(bg, None);
    l.handle_timeout(start + Duration::from_secs(9));
    assert!(drain_decisions(&mut l).is_empty());
    l.handle_timeout(start + Duration::from_secs(10));
    assert_eq!(
        drain_decisions(&mut l),
        vec![Decision::YieldRequested {
            session: 1,
            lease: a,
            reason: YieldReason::MaxHold,
            revoke_at: Some(start + Duration::from_secs(12))
        }]
    );
    l.handle_timeout(start + Duration::from_secs(12));
    let d = drain_decisions(&mut l);
    assert_eq!(
        d[0],
        Decision::Revoked {
            session: 1,
            lease: a,
            reason: RevokeReason::YieldIgnored
        }
    );
    assert!(matches!(d[1], Decision::Granted { ticket, .. } if ticket == t(2, 1)));
    assert_eq!(
        l.poll_timeout(),
        None,
        "background has no max hold: nothing armed"
    );
    l.check_invariants().unwrap();
}

#[test]
fn a_released_lease_disarms_its_timers() {
    let start = Instant::now();
    let config = LedgerConfig {
        max_hold: PerClass {
            normal: Some(Duration::from_secs(10)),
            ..PerClass::default()
        },
        ..LedgerConfig::default()
    };
    let mut l = Ledger::new(config, vec![device("GPU-a", 16)]);
    let a = granted(
        &mut l,
        start,
        t(1, 1),
        spec(Placement::Any, GIB, true, Class::Normal),
    );
    assert!(l.poll_timeout().is_some());
    l.release(start, 1, a).unwrap();
    assert_eq!(l.poll_timeout(), None);
}

#[test]
fn unmanaged_usage_lowers_capacity_and_waiters_wait() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    l.set_unmanaged(now, 0, 10 * GIB);
    assert_eq!(l.device(0).unwrap().capacity(), 6 * GIB);
    assert!(matches!(
        l.acquire(
            now,
            t(1, 1),
            spec(Placement::Any, 8 * GIB, false, Class::Normal)
        ),
        Err(LedgerError::NeverFits { .. })
    ));
    let a = granted(
        &mut l,
        now,
        t(1, 2),
        spec(Placement::Any, 4 * GIB, false, Class::Normal),
    );
    assert_eq!(
        l.acquire(
            now,
            t(1, 3),
            spec(Placement::Any, 4 * GIB, false, Class::Normal)
        ),
        Ok(None)
    );
    l.set_unmanaged(now, 0, 0);
    assert!(matches!(
        drain_decisions(&mut l).as_slice(),
        [Decision::Granted { .. }]
    ));
    l.release(now, 1, a).unwrap();
    l.check_invariants().unwrap();
}

#[test]
fn requests_are_checked_for_ownership_and_duplicates() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let a = granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Any, 12 * GIB, false, Class::Normal),
    );
    assert_eq!(l.release(now, 2, a), Err(LedgerError::UnknownLease(a)));
    assert_eq!(
        l.resize(now, t(2, 1), a, GIB, None),
        Err(LedgerError::UnknownLease(a))
    );
    assert_eq!(
        l.acquire(
            now,
            t(2, 5),
            spec(Placement::Any, 8 * GIB, false, Class::Normal)
        ),
        Ok(None)
    );
    assert_eq!(
        l.acquire(
            now,
            t(2, 5),
            spec(Placement::Any, GIB, false, Class::Normal)
        ),
        Err(LedgerError::DuplicateRequest(5))
    );
    assert_eq!(l.cancel(now, t(2, 6)), Err(LedgerError::UnknownRequest(6)));
    assert_eq!(l.cancel(now, t(2, 5)), Ok(()));
    assert_eq!(l.revoke(now, 99), Err(LedgerError::UnknownLease(99)));
    assert_eq!(l.revoke(now, a), Ok(1));
    l.check_invariants().unwrap();
}

// ------------------------------------------------------------------------ property tests

/// One step of a random run.
#[derive(Debug, Clone)]
enum Step {
    Acquire {
        session: u64,
        device: Option<usize>,
        vram_gib: u64,
        compute: bool,
        class: Class,
        timeout_ms: Option<u64>,
    },
    Resize {
        session: u64,
        pick: usize,
        vram_gib: u64,
        timeout_ms: Option<u64>,
    },
    Release {
        session: u64,
        pick: usize,
    },
    Cancel {
        session: u64,
        pick: usize,
    },
    Disconnect {
        session: u64,
    },
    Drain {
        device: usize,
    },
    Undrain {
        device: usize,
    },
    Revoke {
        pick: usize,
    },
    Unmanaged {
        device: usize,
        gib: u64,
    },
    /// A configuration reload that changes every device's slots.
    Slots {
        compute: u32,
        critical: u32,
    },
    Advance {
        ms: u64,
    },
}

/// What a device held before a step: a step may add holders only within the slots.
#[derive(Debug, Clone, Copy)]
struct Before {
    reserved: u64,
    holders: usize,
    ordinary: usize,
}

fn class() -> impl Strategy<Value = Class> {
    prop_oneof![
        1 => Just(Class::Critical),
        2 => Just(Class::High),
        4 => Just(Class::Normal),
        2 => Just(Class::Background),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let session = 1..6u64;
    let timeout = proptest::option::weighted(0.4, 1..400u64);
    prop_oneof![
        8 => (session.clone(), proptest::option::weighted(0.6, 0..3usize), 0..20u64, any::<bool>(), class(), timeout.clone())
            .prop_map(|(session, device, vram_gib, compute, class, timeout_ms)| Step::Acquire {
                session, device, vram_gib, compute, class, timeout_ms
            }),
        2 => (session.clone(), any::<usize>(), 0..20u64, timeout).prop_map(|(session, pick, vram_gib, timeout_ms)| {
            Step::Resize { session, pick, vram_gib, timeout_ms }
        }),
        6 => (session.clone(), any::<usize>()).prop_map(|(session, pick)| Step::Release { session, pick }),
        1 => (session.clone(), any::<usize>()).prop_map(|(session, pick)| Step::Cancel { session, pick }),
        1 => session.prop_map(|session| Step::Disconnect { session }),
        1 => (0..3usize).prop_map(|device| Step::Drain { device }),
        2 => (0..3usize).prop_map(|device| Step::Undrain { device }),
        1 => any::<usize>().prop_map(|pick| Step::Revoke { pick }),
        1 => (0..3usize, 0..8u64).prop_map(|(device, gib)| Step::Unmanaged { device, gib }),
        1 => (1..3u32, 0..2u32).prop_map(|(compute, critical)| Step::Slots { compute, critical }),
        4 => (1..300u64).prop_map(|ms| Step::Advance { ms }),
    ]
}

/// How each request ended, as the harness saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Granted,
    Refused,
    Cancelled,
    TimedOut,
    Abandoned,
}

/// Drives a ledger with random steps and checks what must always hold.
struct Harness {
    ledger: Ledger,
    now: Instant,
    next_request: u64,
    /// Requests that are waiting, per session.
    waiting: BTreeMap<Ticket, u64>,
    /// Terminal outcome of every request ever made.
    ends: HashMap<Ticket, End>,
    /// Leases the harness believes are live, with their device and size.
    live: BTreeMap<LeaseId, (SessionId, usize, u64, bool)>,
    /// Arrival order and device set of acquire waiters, to check the overtaking bound.
    arrivals: HashMap<Ticket, u64>,
    max_overtakes: u32,
    /// The lease set as a journal replaying the ledger's change stream sees it.
    journal: BTreeMap<LeaseId, u64>,
}

impl Harness {
    fn new(max_overtakes: u32, slots: u32, critical_slots: u32) -> Self {
        let devices = (0..3)
            .map(|i| DeviceSpec {
                uuid: format!("GPU-{i}"),
                name: "sim".into(),
                total_bytes: [16, 24, 16][i] * GIB,
                headroom_bytes: GIB / 2,
                unmanaged_bytes: 0,
                compute_slots: slots,
                critical_slots,
            })
            .collect();
        let config = LedgerConfig {
            max_overtakes,
            max_hold: PerClass {
                normal: Some(Duration::from_millis(500)),
                background: Some(Duration::from_millis(300)),
                ..PerClass::default()
            },
            revoke_after_yield: Some(Duration::from_millis(200)),
            ..LedgerConfig::default()
        };
        let mut ledger = Ledger::new(config, devices);
        ledger.record_changes(true);
        Self {
            ledger,
            now: Instant::now(),
            next_request: 0,
            waiting: BTreeMap::new(),
            ends: HashMap::new(),
            live: BTreeMap::new(),
            arrivals: HashMap::new(),
            max_overtakes,
            journal: BTreeMap::new(),
        }
    }

    fn ticket(&mut self, session: u64) -> Ticket {
        self.next_request += 1;
        t(session, self.next_request)
    }

    fn end(&mut self, ticket: Ticket, end: End) {
        let previous = self.ends.insert(ticket, end);
        assert!(
            previous.is_none(),
            "{ticket:?} ended twice: {previous:?} then {end:?}"
        );
        self.waiting.remove(&ticket);
    }

    fn session_leases(&self, session: u64) -> Vec<LeaseId> {
        self.live
            .iter()
            .filter(|(_, v)| v.0 == session)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Per device: reserved bytes, compute holders, and those of them not critical.
    fn before(&self) -> Vec<Before> {
        self.ledger
            .devices()
            .map(|d| Before {
                reserved: d.reserved(),
                holders: d.compute_holders().count(),
                ordinary: d
                    .compute_holders()
                    .filter(|l| l.class != Class::Critical)
                    .count(),
            })
            .collect()
    }

    fn apply(&mut self, step: &Step) {
        let now = self.now;
        let before = self.before();
        match step.clone() {
            Step::Acquire {
                session,
                device,
                vram_gib,
                compute,
                class,
                timeout_ms,
            } => {
                let ticket = self.ticket(session);
                let placement = device.map_or(Placement::Any, |d| Placement::Index(d as u32));
                let s = AcquireSpec {
                    placement,
                    vram_bytes: vram_gib * GIB,
                    compute,
                    class,
                    timeout: timeout_ms.map(Duration::from_millis),
                    label: None,
                };
                match self.ledger.acquire(now, ticket, s) {
                    Ok(Some(id)) => {
                        let l = self.ledger.lease(id).unwrap();
                        self.live
                            .insert(id, (session, l.device, l.vram_bytes, l.compute));
                        self.end(ticket, End::Granted);
                    }
                    Ok(None) => {
                        self.waiting.insert(ticket, 0);
                        self.arrivals.insert(ticket, self.next_request);
                    }
                    Err(_) => self.end(ticket, End::Refused),
                }
            }
            Step::Resize {
                session,
                pick,
                vram_gib,
                timeout_ms,
            } => {
                let leases = self.session_leases(session);
                if leases.is_empty() {
                    return;
                }
                let id = leases[pick % leases.len()];
                let ticket = self.ticket(session);
                match self.ledger.resize(
                    now,
                    ticket,
                    id,
                    vram_gib * GIB,
                    timeout_ms.map(Duration::from_millis),
                ) {
                    Ok(ResizeOutcome::Done { vram_bytes }) => {
                        self.live.get_mut(&id).unwrap().2 = vram_bytes;
                        self.end(ticket, End::Granted);
                    }
                    Ok(ResizeOutcome::Waiting) => {
                        self.waiting.insert(ticket, id);
                    }
                    Err(_) => self.end(ticket, End::Refused),
                }
            }
            Step::Release { session, pick } => {
                let leases = self.session_leases(session);
                if leases.is_empty() {
                    assert!(self.ledger.release(now, session, 1_000_000).is_err());
                    return;
                }
                let id = leases[pick % leases.len()];
                self.ledger.release(now, session, id).unwrap();
                self.live.remove(&id);
            }
            Step::Cancel { session, pick } => {
                let mine: Vec<Ticket> = self
                    .waiting
                    .keys()
                    .filter(|k| k.session == session)
                    .copied()
                    .collect();
                if mine.is_empty() {
                    return;
                }
                let ticket = mine[pick % mine.len()];
                self.ledger.cancel(now, ticket).unwrap();
                self.end(ticket, End::Cancelled);
            }
            Step::Disconnect { session } => {
                let gone = self.ledger.disconnect(now, session);
                let mut expected = self.session_leases(session);
                expected.sort();
                let mut got = gone.leases.clone();
                got.sort();
                assert_eq!(
                    got, expected,
                    "disconnect frees exactly the session's leases"
                );
                for id in got {
                    self.live.remove(&id);
                }
                let mine: Vec<Ticket> = self
                    .waiting
                    .keys()
                    .filter(|k| k.session == session)
                    .copied()
                    .collect();
                assert_eq!(gone.waiters, mine.len());
                for ticket in mine {
                    self.end(ticket, End::Cancelled);
                }
            }
            Step::Drain { device } => {
                self.ledger
                    .drain(now, &Placement::Index(device as u32))
                    .unwrap();
            }
            Step::Undrain { device } => {
                self.ledger
                    .undrain(now, &Placement::Index(device as u32))
                    .unwrap();
            }
            Step::Revoke { pick } => {
                if self.live.is_empty() {
                    return;
                }
                let id = *self.live.keys().nth(pick % self.live.len()).unwrap();
                self.ledger.revoke(now, id).unwrap();
            }
            Step::Unmanaged { device, gib } => {
                self.ledger.set_unmanaged(now, device, gib * GIB);
            }
            Step::Slots { compute, critical } => {
                self.ledger.set_slots(now, compute, critical);
            }
            Step::Advance { ms } => {
                self.now += Duration::from_millis(ms);
                self.ledger.handle_timeout(self.now);
            }
        }
        self.collect();
        self.check(&before);
    }

    fn collect(&mut self) {
        while let Some(d) = self.ledger.poll_decision() {
            match d {
                Decision::Granted { ticket, lease } => {
                    assert!(
                        self.waiting.contains_key(&ticket),
                        "grant for {ticket:?} that was not waiting"
                    );
                    let l = self.ledger.lease(lease).unwrap();
                    assert_eq!(l.session, ticket.session);
                    self.live
                        .insert(lease, (ticket.session, l.device, l.vram_bytes, l.compute));
                    self.end(ticket, End::Granted);
                }
                Decision::Grew {
                    ticket,
                    lease,
                    vram_bytes,
                } => {
                    assert_eq!(self.waiting.get(&ticket), Some(&lease));
                    self.live.get_mut(&lease).unwrap().2 = vram_bytes;
                    self.end(ticket, End::Granted);
                }
                Decision::TimedOut { ticket } => self.end(ticket, End::TimedOut),
                Decision::GrowAbandoned { ticket, lease } => {
                    assert!(!self.live.contains_key(&lease) || self.ledger.lease(lease).is_none());
                    self.end(ticket, End::Abandoned);
                }
                Decision::YieldRequested { session, lease, .. } => {
                    let l = self.ledger.lease(lease).expect("yield for a live lease");
                    assert_eq!(l.session, session);
                    assert!(l.compute, "yield goes to compute holders only");
                }
                Decision::Revoked { session, lease, .. } => {
                    let (owner, ..) = self.live.remove(&lease).expect("revoked a live lease");
                    assert_eq!(owner, session);
                }
            }
        }
    }

    fn check(&mut self, before: &[Before]) {
        self.ledger.check_invariants().unwrap();
        while let Some(change) = self.ledger.poll_change() {
            match change {
                LeaseChange::Granted(id) => {
                    let l = self.ledger.lease(id).map_or(0, |l| l.vram_bytes);
                    assert!(
                        self.journal.insert(id, l).is_none(),
                        "lease {id} granted twice"
                    );
                }
                LeaseChange::Resized { lease, vram_bytes } => {
                    *self
                        .journal
                        .get_mut(&lease)
                        .expect("resize of a journaled lease") = vram_bytes;
                }
                LeaseChange::Ended(id) => {
                    assert!(
                        self.journal.remove(&id).is_some(),
                        "end of unknown lease {id}"
                    );
                }
            }
        }
        let actual: BTreeMap<LeaseId, u64> =
            self.ledger.leases().map(|l| (l.id, l.vram_bytes)).collect();
        assert_eq!(
            self.journal, actual,
            "the change stream replays to the ledger's leases"
        );
        for dev in self.ledger.devices() {
            let d = dev.index();
            let sum: u64 = self.live.values().filter(|v| v.1 == d).map(|v| v.2).sum();
            assert_eq!(
                dev.reserved(),
                sum,
                "device {d}: reserved equals the live leases"
            );
            if dev.reserved() > before[d].reserved {
                assert!(
                    dev.reserved() <= dev.capacity(),
                    "device {d}: a grant over-committed it"
                );
            }
            // Holders may outnumber slots a reload lowered; a grant may never exceed them.
            let holders = dev.compute_holders().count();
            if holders > before[d].holders {
                assert!(
                    holders <= dev.spec().slots_for(Class::Critical) as usize,
                    "device {d}: a grant beyond the slots"
                );
            }
            let ordinary = dev
                .compute_holders()
                .filter(|l| l.class != Class::Critical)
                .count();
            if ordinary > before[d].ordinary {
                assert!(
                    ordinary <= dev.spec().compute_slots as usize,
                    "device {d}: a non-critical lease took a critical slot"
                );
            }
            let compute_live = self.live.values().filter(|v| v.1 == d && v.3).count();
            assert_eq!(holders, compute_live);
        }
        for w in self.ledger.waiters() {
            assert!(
                self.waiting.contains_key(&w.ticket),
                "ledger waits on {:?} the harness ended",
                w.ticket
            );
            // Overtaking bound: max_overtakes for each older waiter there was, plus its own.
            let older = self
                .arrivals
                .get(&w.ticket)
                .map_or(0, |&a| self.arrivals.values().filter(|&&b| b < a).count());
            let bound = self.max_overtakes as usize * (older + 1);
            assert!(w.overtaken as usize <= bound.max(self.max_overtakes as usize));
        }
        assert_eq!(self.ledger.waiters().len(), self.waiting.len());
    }

    /// Frees everything and lets time pass: every request must have ended.
    fn settle(&mut self) {
        for d in 0..3 {
            self.ledger
                .undrain(self.now, &Placement::Index(d as u32))
                .unwrap();
            self.ledger.set_unmanaged(self.now, d, 0);
        }
        self.collect();
        for _ in 0..10_000 {
            if self.waiting.is_empty() {
                break;
            }
            let before = self.before();
            let ids: Vec<(LeaseId, SessionId)> = self.live.iter().map(|(k, v)| (*k, v.0)).collect();
            for (id, session) in ids {
                self.ledger.release(self.now, session, id).unwrap();
                self.live.remove(&id);
                self.collect();
            }
            self.check(&before);
        }
        assert!(
            self.waiting.is_empty(),
            "waiters never served: {:?}",
            self.ledger.waiters()
        );
        for (ticket, _) in self.arrivals.iter() {
            assert!(self.ends.contains_key(ticket), "{ticket:?} never ended");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Thousands of random event sequences; invariants after every step, liveness at the end.
    #[test]
    fn random_runs_keep_the_books_straight(
        steps in proptest::collection::vec(step(), 1..120),
        max_overtakes in 0..5u32,
        slots in 1..3u32,
        critical_slots in 0..2u32,
    ) {
        let mut h = Harness::new(max_overtakes, slots, critical_slots);
        for s in &steps {
            h.apply(s);
        }
        h.settle();
    }

    /// The same inputs give the same decisions: the ledger has no hidden clock or randomness.
    #[test]
    fn runs_are_deterministic(steps in proptest::collection::vec(step(), 1..60)) {
        let run = |steps: &[Step]| {
            let mut h = Harness::new(2, 1, 1);
            let start = h.now;
            let mut trace = Vec::new();
            for s in steps {
                h.apply(s);
                trace.push((h.ledger.leases().map(|l| (l.id, l.device, l.vram_bytes)).collect::<Vec<_>>(),
                            h.ledger.poll_timeout().map(|t| t - start)));
            }
            trace
        };
        prop_assert_eq!(run(&steps), run(&steps));
    }
}

#[test]
fn every_request_gets_one_answer_in_a_long_random_run() {
    // A fixed long run complements the proptest cases: many sessions, all kinds of steps.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = proptest::collection::vec(step(), 2000);
    let steps = proptest::strategy::ValueTree::current(&strategy.new_tree(&mut runner).unwrap());
    let mut h = Harness::new(3, 1, 0);
    let mut seen = HashSet::new();
    for s in &steps {
        h.apply(s);
        seen.insert(std::mem::discriminant(s));
    }
    h.settle();
    assert_eq!(seen.len(), 11, "every kind of step occurred");
}

#[test]
fn restored_leases_hold_their_resources_until_adopted_or_dropped() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    l.record_changes(true);
    let orphans = u64::MAX;
    let restored = RestoredLease {
        id: 41,
        device: 0,
        vram_bytes: 12 * GIB,
        compute: true,
        class: Class::Normal,
        granted_at: now,
        label: None,
    };
    l.restore(orphans, restored.clone()).unwrap();
    assert_eq!(
        l.restore(orphans, restored),
        Err(LedgerError::Invalid(
            "a restored lease id is already in use"
        ))
    );
    // Nothing that would over-commit is granted while the owner has not come back.
    assert_eq!(
        l.acquire(
            now,
            t(1, 1),
            spec(Placement::Any, 8 * GIB, false, Class::Normal)
        ),
        Ok(None)
    );
    assert_eq!(
        l.acquire(now, t(1, 2), spec(Placement::Any, 0, true, Class::Critical)),
        Ok(None)
    );
    // The owner re-adopts: the lease moves to its new session; new ids do not collide.
    l.transfer(41, 7).unwrap();
    assert_eq!(l.session_leases(7), vec![41]);
    assert_eq!(l.session_counts(orphans), (0, 0));
    assert!(l.next_lease_id() > 41);
    l.release(now, 7, 41).unwrap();
    let d = drain_decisions(&mut l);
    let grants = d
        .iter()
        .filter(|d| matches!(d, Decision::Granted { .. }))
        .count();
    assert_eq!(grants, 2, "both waiters granted after the release: {d:?}");
    assert_eq!(l.poll_change(), Some(LeaseChange::Ended(41)));
    l.check_invariants().unwrap();
}
