//! Targeted scenarios: each drives a ledger by hand through one rule and checks exactly what
//! the rule promises.

use std::time::{Duration, Instant};

use gpud::ledger::{
    AcquireSpec, Class, Decision, DeviceSpec, LeaseChange, LeaseId, Ledger, LedgerConfig,
    LedgerError, PerClass, Placement, ResizeOutcome, RestoredLease, RevokeReason, Ticket,
    YieldReason,
};

use crate::GIB;

fn device(uuid: &str, gib: u64) -> DeviceSpec {
    DeviceSpec {
        kind: gpud::ledger::PoolKind::Gpu,
        uuid: uuid.into(),
        name: "Simulated GPU".into(),
        total_bytes: gib * GIB,
        headroom_bytes: 0,
        unmanaged_bytes: 0,
        compute_slots: 1,
        critical_slots: 0,
        topology: Default::default(),
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
        within: None,
        budget: None,
        evictable: false,
        parts: Vec::new(),
        policy: gpud::ledger::PlacementPolicy::BestFit,
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
fn revoking_a_lease_nobody_holds_does_not_speak_of_a_session() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let text = l.revoke(now, 999).unwrap_err().to_string();
    assert_eq!(text, "no lease 999 (gpudctl leases lists them)");
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
    // People read sizes in binary units; the bytes stay for the exact figure.
    let text = e.unwrap_err().to_string();
    assert!(
        text.starts_with("25.0 GiB can never fit: the largest matching capacity is 24.0 GiB"),
        "{text}"
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
            // On by default: an ignored notice is revoked after revoke_after_yield.
            revoke_at: Some(now + Duration::from_secs(30))
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

/// A revocation is told before the grow it abandons: a client that reads the grow's answer
/// already knows its lease is gone.
#[test]
fn revoking_a_lease_tells_the_revocation_before_its_abandoned_grow() {
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
    assert_eq!(l.revoke(now, a), Ok(1));
    assert_eq!(
        drain_decisions(&mut l),
        vec![
            Decision::Revoked {
                session: 1,
                lease: a,
                reason: RevokeReason::Admin
            },
            Decision::GrowAbandoned {
                ticket: t(1, 2),
                lease: a
            }
        ]
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
    assert_eq!(l.revoke(now, 99), Err(LedgerError::NoSuchLease(99)));
    assert_eq!(l.revoke(now, a), Ok(1));
    l.check_invariants().unwrap();
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
        within: None,
        budget_compute_slots: None,
        evictable: false,
        group: None,
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

/// Regression: every scheduling pass walked all queued critical waiters (16,000 of them
/// stalled the daemon for seconds). Once every holder has been asked to yield, a pass costs
/// nothing more however many critical waiters queue.
#[test]
fn queued_critical_waiters_do_not_make_every_pass_walk_them_all() {
    let now = Instant::now();
    let devices = vec![device("GPU-a", 16), device("GPU-b", 16)];
    let mut l = Ledger::new(LedgerConfig::default(), devices);
    let holder = granted(
        &mut l,
        now,
        t(1, 1),
        spec(Placement::Index(0), GIB, true, Class::Normal),
    );
    for i in 0..2_000 {
        let queued = l.acquire(
            now,
            t(2, i),
            spec(Placement::Index(0), GIB, true, Class::Critical),
        );
        assert_eq!(queued, Ok(None));
    }
    let yields = drain_decisions(&mut l)
        .iter()
        .filter(|d| matches!(d, Decision::YieldRequested { lease, .. } if *lease == holder))
        .count();
    assert_eq!(yields, 1, "the one holder is asked once");
    let before = l.yield_scans();
    // Work on the other device runs scheduling passes, each of which refreshes yields.
    for i in 0..100 {
        let other = spec(Placement::Index(1), GIB, false, Class::Normal);
        let other = granted(&mut l, now, t(3, i), other);
        l.release(now, 3, other).unwrap();
    }
    let per_op = (l.yield_scans() - before) / 200;
    assert!(
        per_op <= 1,
        "{per_op} critical waiters examined per operation"
    );
    l.check_invariants().unwrap();
}

/// Two leases that each wait to grow into memory only the other holds: the younger one's grow
/// fails at once and it keeps its size; the older one grows once the younger lets go.
#[test]
fn growers_that_wait_for_each_other_fail_the_younger_grow() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let mem = |gib| spec(Placement::Any, gib * GIB, false, Class::Normal);
    let older = granted(&mut l, now, t(1, 1), mem(6));
    let younger = granted(&mut l, now + Duration::from_secs(1), t(2, 1), mem(6));
    // 4 GiB free: each grow of 5 waits; alone, the first can still be served by the second.
    assert_eq!(
        l.resize(now, t(1, 2), older, 11 * GIB, None),
        Ok(ResizeOutcome::Waiting)
    );
    assert!(drain_decisions(&mut l).is_empty());
    assert_eq!(
        l.resize(now, t(2, 2), younger, 11 * GIB, None),
        Ok(ResizeOutcome::Waiting)
    );
    assert_eq!(
        drain_decisions(&mut l),
        vec![Decision::GrowDeadlocked {
            ticket: t(2, 2),
            lease: younger
        }]
    );
    assert_eq!(
        l.lease(younger).unwrap().vram_bytes,
        6 * GIB,
        "keeps its size"
    );
    assert!(l.lease(younger).unwrap().pending_grow.is_none());
    l.check_invariants().unwrap();
    // The younger program, told its allocation failed, frees: the older grows.
    l.release(now, 2, younger).unwrap();
    assert!(matches!(
        drain_decisions(&mut l).as_slice(),
        [Decision::Grew { lease, vram_bytes, .. }] if *lease == older && *vram_bytes == 11 * GIB
    ));
    l.check_invariants().unwrap();
}

/// Memory a lease without a waiting grow holds can still come back: growers wait for it rather
/// than fail.
#[test]
fn growers_wait_while_memory_they_need_is_held_by_leases_that_do_not_grow() {
    let now = Instant::now();
    let mut l = Ledger::new(LedgerConfig::default(), vec![device("GPU-a", 16)]);
    let mem = |gib| spec(Placement::Any, gib * GIB, false, Class::Normal);
    let a = granted(&mut l, now, t(1, 1), mem(5));
    let b = granted(&mut l, now, t(2, 1), mem(5));
    let c = granted(&mut l, now, t(3, 1), mem(4));
    // 2 GiB free; each grows by 4; 16 - 10 = 6 GiB can come back (c's 4 and the free 2).
    for (ticket, lease) in [(t(1, 2), a), (t(2, 2), b)] {
        assert_eq!(
            l.resize(now, ticket, lease, 9 * GIB, None),
            Ok(ResizeOutcome::Waiting)
        );
    }
    assert!(drain_decisions(&mut l).is_empty(), "no deadlock yet");
    // Unleased use takes 3 GiB: now only 3 can come back, less than either grow needs.
    l.set_unmanaged(now, 0, 3 * GIB);
    assert_eq!(
        drain_decisions(&mut l),
        vec![Decision::GrowDeadlocked {
            ticket: t(2, 2),
            lease: b
        }]
    );
    l.set_unmanaged(now, 0, 0);
    l.release(now, 3, c).unwrap();
    assert!(matches!(
        drain_decisions(&mut l).as_slice(),
        [Decision::Grew { lease, .. }] if *lease == a
    ));
    l.check_invariants().unwrap();
}
