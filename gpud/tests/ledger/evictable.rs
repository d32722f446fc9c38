//! Evictable leases: warm state is reclaimed with notice, only for requests that are not
//! evictable and cannot otherwise fit, lowest class then oldest first, and never over capacity.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use gpud::ledger::{
    AcquireSpec, Class, Decision, LeaseId, Ledger, LedgerConfig, LedgerError, Placement,
    ResizeOutcome, RevokeReason, SessionId, Ticket,
};
use proptest::prelude::*;

use crate::{GIB, sim_devices};

const GRACE: Duration = Duration::from_secs(1);

fn ledger(devices: usize) -> Ledger {
    let devices = sim_devices(devices, 1);
    let config = LedgerConfig {
        reclaim_grace: GRACE,
        ..LedgerConfig::default()
    };
    Ledger::new(config, devices)
}

fn spec(
    placement: Placement,
    gib: u64,
    compute: bool,
    class: Class,
    evictable: bool,
) -> AcquireSpec {
    AcquireSpec {
        placement,
        vram_bytes: gib * GIB,
        compute,
        class,
        timeout: None,
        label: None,
        within: None,
        budget: None,
        evictable,
        parts: Vec::new(),
        policy: gpud::ledger::PlacementPolicy::BestFit,
    }
}

fn warm(gib: u64, class: Class) -> AcquireSpec {
    spec(Placement::Index(0), gib, false, class, true)
}

fn plain(gib: u64, class: Class) -> AcquireSpec {
    spec(Placement::Index(0), gib, false, class, false)
}

fn ticket(session: SessionId, request: u64) -> Ticket {
    Ticket { session, request }
}

fn decisions(l: &mut Ledger) -> Vec<Decision> {
    std::iter::from_fn(|| l.poll_decision()).collect()
}

fn reclaimed(ds: &[Decision]) -> Vec<LeaseId> {
    ds.iter()
        .filter_map(|d| match d {
            Decision::ReclaimRequested { lease, .. } => Some(*lease),
            _ => None,
        })
        .collect()
}

/// A device with a 10 GiB warm lease of `class` (session 1) and a critical 10 GiB request
/// (session 2) waiting for its memory; the decisions are still to be polled.
fn warm_then_critical(class: Class) -> (Ledger, Instant, LeaseId, Ticket) {
    let mut l = ledger(1);
    let now = Instant::now();
    let held = l
        .acquire(now, ticket(1, 1), warm(10, class))
        .unwrap()
        .unwrap();
    let critical = ticket(2, 1);
    assert_eq!(
        l.acquire(now, critical, plain(10, Class::Critical)),
        Ok(None)
    );
    (l, now, held, critical)
}

#[test]
fn a_critical_request_reclaims_warm_memory_with_notice_and_gets_it_on_release() {
    let (mut l, now, held, critical) = warm_then_critical(Class::Background);
    let ds = decisions(&mut l);
    assert_eq!(
        ds,
        vec![Decision::ReclaimRequested {
            session: 1,
            lease: held,
            revoke_at: Some(now + GRACE)
        }]
    );
    assert_eq!(
        l.device(0).unwrap().reserved(),
        10 * GIB,
        "nothing is granted before it is free"
    );
    l.release(now, 1, held).unwrap();
    assert!(
        matches!(decisions(&mut l)[..], [Decision::Granted { ticket, .. }] if ticket == critical)
    );
}

#[test]
fn a_holder_that_ignores_the_notice_is_revoked_at_the_deadline() {
    let (mut l, now, held, critical) = warm_then_critical(Class::Normal);
    decisions(&mut l);
    assert_eq!(l.poll_timeout(), Some(now + GRACE));
    l.handle_timeout(now + GRACE);
    let ds = decisions(&mut l);
    assert!(
        ds.contains(&Decision::Revoked {
            session: 1,
            lease: held,
            reason: RevokeReason::Reclaimed
        }),
        "{ds:?}"
    );
    assert!(
        ds.iter()
            .any(|d| matches!(d, Decision::Granted { ticket, .. } if *ticket == critical))
    );
}

#[test]
fn a_shrink_answers_the_notice() {
    let (mut l, now, held, critical) = warm_then_critical(Class::Normal);
    decisions(&mut l);
    assert_eq!(
        l.resize(now, ticket(1, 2), held, 4 * GIB, None),
        Ok(ResizeOutcome::Done {
            vram_bytes: 4 * GIB
        })
    );
    assert!(
        matches!(decisions(&mut l)[..], [Decision::Granted { ticket, .. }] if ticket == critical)
    );
    assert_eq!(l.lease(held).unwrap().reclaim_by, None, "answered");
    assert!(
        l.poll_timeout()
            .is_none_or(|at| at >= now + std::time::Duration::from_secs(3600)),
        "no deadline left but the leases' maximum holds"
    );
    assert_eq!(l.device(0).unwrap().evictable_bytes(), 4 * GIB);
}

#[test]
fn the_lowest_class_then_the_oldest_is_reclaimed_and_no_more_than_needed() {
    let mut l = ledger(1);
    let now = Instant::now();
    let normal = l
        .acquire(now, ticket(1, 1), warm(5, Class::Normal))
        .unwrap()
        .unwrap();
    let old_bg = l
        .acquire(
            now + Duration::from_secs(1),
            ticket(2, 1),
            warm(5, Class::Background),
        )
        .unwrap()
        .unwrap();
    let new_bg = l
        .acquire(
            now + Duration::from_secs(2),
            ticket(3, 1),
            warm(5, Class::Background),
        )
        .unwrap()
        .unwrap();
    // 1 GiB free; 3 more are needed: the older background lease alone covers it.
    assert_eq!(
        l.acquire(now, ticket(4, 1), plain(4, Class::Normal)),
        Ok(None)
    );
    assert_eq!(reclaimed(&decisions(&mut l)), vec![old_bg]);
    // 9 GiB: 1 free + 5 coming; 3 more, the other background lease.
    assert_eq!(
        l.acquire(now, ticket(5, 1), plain(10, Class::High)),
        Ok(None)
    );
    assert_eq!(reclaimed(&decisions(&mut l)), vec![new_bg]);
    assert!(l.lease(normal).unwrap().reclaim_by.is_none());
}

#[test]
fn evictable_requests_and_hopeless_ones_reclaim_nothing() {
    let mut l = ledger(1);
    let now = Instant::now();
    l.acquire(now, ticket(1, 1), warm(10, Class::Background))
        .unwrap()
        .unwrap();
    assert_eq!(
        l.acquire(now, ticket(2, 1), warm(10, Class::Critical)),
        Ok(None)
    );
    l.acquire(now, ticket(3, 1), plain(6, Class::Normal))
        .unwrap()
        .unwrap();
    // 16 GiB full: 10 evictable + 6 plain; 12 would need more than the evictable 10 + 0 free.
    assert_eq!(
        l.acquire(now, ticket(4, 1), plain(12, Class::Critical)),
        Ok(None)
    );
    assert!(reclaimed(&decisions(&mut l)).is_empty());
    let e = l.acquire(
        now,
        ticket(5, 1),
        spec(Placement::Index(0), 1, true, Class::Normal, true),
    );
    assert!(
        matches!(e, Err(LedgerError::Invalid(_))),
        "evictable leases hold memory only"
    );
}

/// Two provers with warm bases share one compute slot: the second one's phase waits for the
/// slot, and short of memory as well, but reclaims nothing while the slot is taken (the first
/// phase's release frees what it needs); a request that lacks only memory does reclaim.
#[test]
fn a_request_that_waits_for_the_compute_slot_reclaims_nothing() {
    let mut l = ledger(1);
    let now = Instant::now();
    let a_warm = l
        .acquire(now, ticket(1, 1), warm(3, Class::Normal))
        .unwrap()
        .unwrap();
    l.acquire(now, ticket(2, 1), warm(3, Class::Normal))
        .unwrap()
        .unwrap();
    let phase = spec(Placement::Index(0), 7, true, Class::Normal, false);
    let a_phase = l
        .acquire(now, ticket(1, 2), phase.clone())
        .unwrap()
        .unwrap();
    // 16 − 3 − 3 − 7 = 3 GiB free: short of memory, and of the slot.
    assert_eq!(l.acquire(now, ticket(2, 2), phase).unwrap(), None);
    assert!(reclaimed(&decisions(&mut l)).is_empty());
    // The first phase ends: the slot and 7 GiB come back, and the second phase fits.
    l.release(now, 1, a_phase).unwrap();
    let ds = decisions(&mut l);
    assert!(
        matches!(ds.as_slice(), [Decision::Granted { ticket: t, .. }] if *t == ticket(2, 2)),
        "{ds:?}"
    );
    // Memory is all a critical request lacks (it asks no compute): it reclaims the oldest
    // warm lease, 3 GiB, which with the 3 GiB free is what it needs.
    assert_eq!(
        l.acquire(now, ticket(3, 1), plain(6, Class::Critical))
            .unwrap(),
        None
    );
    assert_eq!(reclaimed(&decisions(&mut l)), vec![a_warm]);
    l.check_invariants().unwrap();
}

/// A warm request that has been overtaken to its bound does not hold back a request that is
/// not evictable (warm state yields to real work), and is not granted memory that request
/// waits for: granting it would only have it reclaimed at once.
#[test]
fn warm_state_is_not_granted_memory_a_waiting_request_needs() {
    let mut l = Ledger::new(
        LedgerConfig {
            reclaim_grace: GRACE,
            max_overtakes: 1,
            ..LedgerConfig::default()
        },
        sim_devices(1, 1),
    );
    let now = Instant::now();
    let big = l
        .acquire(now, ticket(1, 1), plain(10, Class::Normal))
        .unwrap()
        .unwrap();
    let warm_request = ticket(2, 1);
    assert_eq!(
        l.acquire(now, warm_request, warm(8, Class::Normal)),
        Ok(None)
    );
    // A later request takes memory past the warm one: the warm request is at its bound.
    l.acquire(now, ticket(3, 1), plain(2, Class::Normal))
        .unwrap()
        .unwrap();
    let real = ticket(4, 1);
    assert_eq!(l.acquire(now, real, plain(9, Class::Normal)), Ok(None));
    decisions(&mut l);
    // 14 GiB free: enough for the 9 GiB request, not for both.
    l.release(now, 1, big).unwrap();
    let ds = decisions(&mut l);
    assert!(
        matches!(ds.as_slice(), [Decision::Granted { ticket, .. }] if *ticket == real),
        "{ds:?}"
    );
    assert!(l.waiters().iter().any(|w| w.ticket == warm_request));
    l.check_invariants().unwrap();
}

/// Reclaim deadlines asked in one pass fall due together: what they all free is served in
/// class order, so the critical request that asked for it is granted at the deadline rather
/// than a lower class taking the first revocation's memory and the critical one reclaiming
/// more and waiting another grace.
#[test]
fn memory_freed_by_deadlines_due_together_is_served_in_class_order() {
    let mut l = ledger(1);
    let now = Instant::now();
    for (session, gib) in [(1, 4), (2, 4), (5, 2)] {
        l.acquire(now, ticket(session, 1), warm(gib, Class::Background))
            .unwrap()
            .unwrap();
    }
    l.acquire(now, ticket(6, 1), plain(6, Class::Normal))
        .unwrap()
        .unwrap();
    let critical = ticket(3, 1);
    assert_eq!(
        l.acquire(now, critical, plain(7, Class::Critical)),
        Ok(None)
    );
    assert_eq!(
        reclaimed(&decisions(&mut l)).len(),
        2,
        "the two oldest: 8 GiB"
    );
    let normal = ticket(4, 1);
    assert_eq!(l.acquire(now, normal, plain(3, Class::Normal)), Ok(None));
    assert!(reclaimed(&decisions(&mut l)).is_empty(), "8 GiB are coming");
    l.handle_timeout(now + GRACE);
    let ds = decisions(&mut l);
    assert!(
        ds.iter()
            .any(|d| matches!(d, Decision::Granted { ticket, .. } if *ticket == critical)),
        "{ds:?}"
    );
    assert!(l.waiters().iter().any(|w| w.ticket == normal));
    l.check_invariants().unwrap();
}

#[test]
fn an_any_request_reclaims_on_one_device_only() {
    let mut l = ledger(2);
    let now = Instant::now();
    for d in 0..2 {
        l.acquire(
            now,
            ticket(1, d),
            spec(
                Placement::Index(d as u32),
                12,
                false,
                Class::Background,
                true,
            ),
        )
        .unwrap()
        .unwrap();
    }
    assert_eq!(
        l.acquire(
            now,
            ticket(2, 1),
            spec(Placement::Any, 8, false, Class::Normal, false)
        ),
        Ok(None)
    );
    assert_eq!(reclaimed(&decisions(&mut l)).len(), 1);
}

#[derive(Debug, Clone)]
enum Step {
    Warm {
        device: u32,
        gib: u64,
        class: Class,
        session: SessionId,
    },
    Plain {
        device: Option<u32>,
        gib: u64,
        compute: bool,
        class: Class,
        session: SessionId,
    },
    Release {
        pick: usize,
    },
    Shrink {
        pick: usize,
        gib: u64,
    },
    Advance {
        ms: u64,
    },
    Disconnect {
        session: SessionId,
    },
}

fn class() -> impl Strategy<Value = Class> {
    prop_oneof![
        Just(Class::Critical),
        Just(Class::High),
        Just(Class::Normal),
        Just(Class::Background)
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..2u32, 1..9u64, class(), 1..6u64).prop_map(|(device, gib, class, session)| Step::Warm { device, gib, class, session }),
        3 => (prop::option::of(0..2u32), 0..14u64, any::<bool>(), class(), 1..6u64)
            .prop_map(|(device, gib, compute, class, session)| Step::Plain { device, gib, compute, class, session }),
        2 => any::<usize>().prop_map(|pick| Step::Release { pick }),
        1 => (any::<usize>(), 0..6u64).prop_map(|(pick, gib)| Step::Shrink { pick, gib }),
        2 => (0..1500u64).prop_map(|ms| Step::Advance { ms }),
        1 => (1..6u64).prop_map(|session| Step::Disconnect { session }),
    ]
}

/// The reclaim order: lowest class first, then oldest.
fn order(l: &Ledger, id: LeaseId) -> (std::cmp::Reverse<usize>, Instant, LeaseId) {
    let lease = l.lease(id).unwrap();
    (std::cmp::Reverse(lease.class.rank()), lease.granted_at, id)
}

fn check_reclaims(l: &Ledger, asked: &[LeaseId]) {
    for &id in asked {
        let Some(lease) = l.lease(id) else { continue };
        assert!(lease.evictable, "only evictable leases are reclaimed");
        let d = lease.device;
        let dev = l.device(d).unwrap();
        // Memory is all the waiter lacks there: a compute slot is free for it.
        let slot_free = |w: &gpud::ledger::Waiter| {
            !w.need.compute
                || dev.compute_holders().count() < dev.spec().slots_for(w.class) as usize
        };
        let needy = l.waiters().into_iter().any(|w| {
            !w.evictable
                && w.candidates.contains(&d)
                && w.need.vram_bytes > dev.free()
                && slot_free(w)
        });
        assert!(
            needy,
            "lease {id} reclaimed with no request that lacks only memory on device {d}"
        );
        // Nothing unasked on the device came before it in the reclaim order.
        let key = order(l, id);
        for other in l
            .leases()
            .filter(|o| o.device == d && o.evictable && o.reclaim_by.is_none())
        {
            assert!(
                order(l, other.id) > key,
                "lease {} should have been reclaimed before {id}: {:#?}",
                other.id,
                l.leases().collect::<Vec<_>>()
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Random runs: every reclaim has a request that needs it and follows the order, no device
    /// is ever over capacity, and once holders let go everything is served.
    #[test]
    fn reclaims_are_needed_ordered_and_never_over_commit(steps in prop::collection::vec(step(), 1..80)) {
        let mut l = ledger(2);
        let mut now = Instant::now();
        let mut request = 0;
        let mut waiting: BTreeSet<Ticket> = BTreeSet::new();
        for s in &steps {
            now += Duration::from_millis(5);
            let mut ask = |l: &mut Ledger, session, spec| {
                request += 1;
                let t = ticket(session, request);
                if let Ok(None) = l.acquire(now, t, spec) {
                    waiting.insert(t);
                }
            };
            match *s {
                Step::Warm { device, gib, class, session } => ask(&mut l, session, spec(Placement::Index(device), gib, false, class, true)),
                Step::Plain { device, gib, compute, class, session } => {
                    ask(&mut l, session, spec(device.map_or(Placement::Any, Placement::Index), gib, compute, class, false))
                }
                Step::Release { pick } => {
                    let held: Vec<(LeaseId, SessionId)> = l.leases().map(|x| (x.id, x.session)).collect();
                    if !held.is_empty() {
                        let (id, session) = held[pick % held.len()];
                        l.release(now, session, id).unwrap();
                    }
                }
                Step::Shrink { pick, gib } => {
                    let warm: Vec<(LeaseId, SessionId, u64)> = l.leases().filter(|x| x.evictable).map(|x| (x.id, x.session, x.vram_bytes)).collect();
                    if !warm.is_empty() {
                        let (id, session, bytes) = warm[pick % warm.len()];
                        request += 1;
                        let to = (gib * GIB).min(bytes).max(1);
                        let _ = l.resize(now, ticket(session, request), id, to, None);
                    }
                }
                Step::Advance { ms } => {
                    now += Duration::from_millis(ms);
                    l.handle_timeout(now);
                }
                Step::Disconnect { session } => {
                    l.disconnect(now, session);
                    waiting.retain(|t| t.session != session);
                }
            }
            let ds = decisions(&mut l);
            for d in &ds {
                if let Decision::Granted { ticket, .. } | Decision::TimedOut { ticket } = d {
                    prop_assert!(waiting.remove(ticket), "{ticket:?} answered twice");
                }
            }
            check_reclaims(&l, &reclaimed(&ds));
            l.check_invariants().unwrap();
            for d in l.devices() {
                prop_assert!(d.reserved() <= d.capacity(), "device {} over capacity", d.index());
            }
        }
        // Holders let go of everything, again and again: every request is served.
        for _ in 0..1000 {
            let held: Vec<(LeaseId, SessionId)> = l.leases().map(|x| (x.id, x.session)).collect();
            if held.is_empty() {
                break;
            }
            for (id, session) in held {
                if l.lease(id).is_some() {
                    l.release(now, session, id).unwrap();
                }
            }
            for d in decisions(&mut l) {
                if let Decision::Granted { ticket, .. } = d {
                    waiting.remove(&ticket);
                }
            }
        }
        prop_assert!(waiting.is_empty(), "unserved: {waiting:?}");
        prop_assert!(l.waiters().is_empty());
    }
}
