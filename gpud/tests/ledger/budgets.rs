//! Budgets: random runs of budgets, their members and ordinary leases on two devices, judged
//! by the rules a budget promises (nothing inside a budget exceeds it, nothing across budgets
//! exceeds the device, ending a budget frees everything inside it), and scenarios by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gpud::ledger::{
    AcquireSpec, BudgetSpec, Class, Decision, LeaseId, Ledger, LedgerConfig, LedgerError,
    Placement, RestoredLease, RevokeReason, SessionId, Ticket,
};
use proptest::prelude::*;

use crate::{GIB, sim_devices};

/// The session that holds the budgets (the daemon's, never closed).
const HOLDER: SessionId = 1000;

fn ledger(compute_slots: u32) -> Ledger {
    Ledger::new(LedgerConfig::default(), sim_devices(2, compute_slots))
}

fn spec(placement: Placement, vram_gib: u64, compute: bool, class: Class) -> AcquireSpec {
    AcquireSpec {
        placement,
        vram_bytes: vram_gib * GIB,
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

fn budget_spec(device: u32, vram_gib: u64, compute_slots: u32, class: Class) -> AcquireSpec {
    AcquireSpec {
        budget: Some(BudgetSpec {
            compute_slots,
            holder: HOLDER,
        }),
        ..spec(Placement::Index(device), vram_gib, false, class)
    }
}

fn member(budget: LeaseId, vram_gib: u64, compute: bool) -> AcquireSpec {
    AcquireSpec {
        within: Some(budget),
        ..spec(Placement::Any, vram_gib, compute, Class::Normal)
    }
}

#[derive(Debug, Clone)]
enum Step {
    Budget {
        device: u32,
        gib: u64,
        slots: u32,
        class: Class,
    },
    Member {
        pick: usize,
        session: SessionId,
        gib: u64,
        compute: bool,
    },
    Plain {
        device: Option<u32>,
        session: SessionId,
        gib: u64,
        compute: bool,
        class: Class,
    },
    Grow {
        pick: usize,
        gib: u64,
    },
    Release {
        pick: usize,
    },
    EndBudget {
        pick: usize,
    },
    Disconnect {
        session: SessionId,
    },
}

fn class() -> impl Strategy<Value = Class> {
    prop_oneof![
        Just(Class::Critical),
        Just(Class::Normal),
        Just(Class::Background)
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0..2u32, 0..12u64, 0..3u32, class())
            .prop_map(|(device, gib, slots, class)| Step::Budget { device, gib, slots, class }),
        4 => (any::<usize>(), 1..5u64, 0..10u64, any::<bool>())
            .prop_map(|(pick, session, gib, compute)| Step::Member { pick, session, gib, compute }),
        2 => (prop::option::of(0..2u32), 1..5u64, 0..12u64, any::<bool>(), class())
            .prop_map(|(device, session, gib, compute, class)| Step::Plain { device, session, gib, compute, class }),
        1 => (any::<usize>(), 0..10u64).prop_map(|(pick, gib)| Step::Grow { pick, gib }),
        3 => any::<usize>().prop_map(|pick| Step::Release { pick }),
        1 => any::<usize>().prop_map(|pick| Step::EndBudget { pick }),
        1 => (1..5u64).prop_map(|session| Step::Disconnect { session }),
    ]
}

/// A run: the ledger, what each request was answered, and the checks after every step.
struct Run {
    ledger: Ledger,
    now: Instant,
    next_request: u64,
    /// Requests without an answer yet.
    waiting: BTreeSet<Ticket>,
    /// Budgets that ended; nothing may be inside them again.
    ended: BTreeSet<LeaseId>,
}

impl Run {
    fn new(compute_slots: u32) -> Self {
        Self {
            ledger: ledger(compute_slots),
            now: Instant::now(),
            next_request: 0,
            waiting: BTreeSet::new(),
            ended: BTreeSet::new(),
        }
    }

    fn ticket(&mut self, session: SessionId) -> Ticket {
        self.next_request += 1;
        Ticket {
            session,
            request: self.next_request,
        }
    }

    fn budgets(&self) -> Vec<LeaseId> {
        self.ledger
            .leases()
            .filter(|l| l.budget.is_some())
            .map(|l| l.id)
            .collect()
    }

    fn pick<T: Copy>(items: &[T], pick: usize) -> Option<T> {
        (!items.is_empty()).then(|| items[pick % items.len()])
    }

    fn acquire(&mut self, session: SessionId, spec: AcquireSpec) {
        let ticket = self.ticket(session);
        if let Ok(None) = self.ledger.acquire(self.now, ticket, spec) {
            self.waiting.insert(ticket);
        }
    }

    fn apply(&mut self, step: &Step) {
        self.now += Duration::from_millis(10);
        match *step {
            Step::Budget {
                device,
                gib,
                slots,
                class,
            } => self.acquire(HOLDER, budget_spec(device, gib, slots, class)),
            Step::Member {
                pick,
                session,
                gib,
                compute,
            } => {
                if let Some(b) = Self::pick(&self.budgets(), pick) {
                    self.acquire(session, member(b, gib, compute));
                }
            }
            Step::Plain {
                device,
                session,
                gib,
                compute,
                class,
            } => {
                let placement = device.map_or(Placement::Any, Placement::Index);
                self.acquire(session, spec(placement, gib, compute, class));
            }
            Step::Grow { pick, gib } => {
                let members: Vec<(LeaseId, SessionId, u64)> = self
                    .ledger
                    .leases()
                    .filter(|l| l.within.is_some())
                    .map(|l| (l.id, l.session, l.vram_bytes))
                    .collect();
                if let Some((id, session, vram)) = Self::pick(&members, pick) {
                    let ticket = self.ticket(session);
                    let grown = vram + gib * GIB;
                    if let Ok(gpud::ledger::ResizeOutcome::Waiting) =
                        self.ledger.resize(self.now, ticket, id, grown, None)
                    {
                        self.waiting.insert(ticket);
                    }
                }
            }
            Step::Release { pick } => {
                let leases: Vec<(LeaseId, SessionId)> = self
                    .ledger
                    .leases()
                    .filter(|l| l.budget.is_none())
                    .map(|l| (l.id, l.session))
                    .collect();
                if let Some((id, session)) = Self::pick(&leases, pick) {
                    self.ledger.release(self.now, session, id).unwrap();
                }
            }
            Step::EndBudget { pick } => {
                if let Some(b) = Self::pick(&self.budgets(), pick) {
                    self.ledger.release(self.now, HOLDER, b).unwrap();
                    self.ended.insert(b);
                }
            }
            Step::Disconnect { session } => {
                self.ledger.disconnect(self.now, session);
                self.waiting.retain(|t| t.session != session);
            }
        }
        self.collect();
        self.check();
    }

    /// Takes the decisions: each answers a waiting request at most once.
    fn collect(&mut self) {
        while let Some(d) = self.ledger.poll_decision() {
            match d {
                Decision::Granted { ticket, .. }
                | Decision::Grew { ticket, .. }
                | Decision::TimedOut { ticket }
                | Decision::GrowAbandoned { ticket, .. }
                | Decision::GrowDeadlocked { ticket, .. }
                | Decision::BudgetEnded { ticket, .. } => {
                    assert!(
                        self.waiting.remove(&ticket),
                        "{ticket:?} answered twice or unasked"
                    );
                }
                Decision::Revoked { reason, lease, .. } => {
                    assert_eq!(reason, RevokeReason::BudgetEnded, "lease {lease}");
                }
                Decision::YieldRequested { .. } => {}
                Decision::ReclaimRequested { .. } => panic!("no evictable leases here"),
            }
        }
    }

    /// The promises, after every step.
    fn check(&self) {
        self.ledger.check_invariants().unwrap();
        let mut device_reserved: BTreeMap<usize, u64> = BTreeMap::new();
        for l in self.ledger.leases() {
            if l.within.is_none() {
                *device_reserved.entry(l.device).or_default() += l.vram_bytes;
            }
            if let Some(b) = l.within {
                assert!(
                    !self.ended.contains(&b),
                    "lease {} inside ended budget {b}",
                    l.id
                );
                let parent = self.ledger.lease(b).expect("its budget exists");
                assert_eq!(
                    parent.device, l.device,
                    "a member is on its budget's device"
                );
            }
            if let Some(books) = &l.budget {
                let inside: Vec<_> = self
                    .ledger
                    .leases()
                    .filter(|m| m.within == Some(l.id))
                    .collect();
                let bytes: u64 = inside.iter().map(|m| m.vram_bytes).sum();
                let compute = inside.iter().filter(|m| m.compute).count() as u32;
                assert!(bytes <= l.vram_bytes, "budget {} over its bytes", l.id);
                assert!(
                    compute <= books.compute_slots,
                    "budget {} over its slots",
                    l.id
                );
                assert!(
                    inside.iter().all(|m| m.class == l.class),
                    "members take its class"
                );
            }
        }
        for d in self.ledger.devices() {
            let reserved = device_reserved.get(&d.index()).copied().unwrap_or(0);
            assert!(
                reserved <= d.capacity(),
                "device {} over-committed",
                d.index()
            );
            assert_eq!(reserved, d.reserved());
            assert!(d.compute_holders().count() <= d.spec().compute_slots as usize);
        }
        for w in self.ledger.waiters() {
            if let Some(b) = w.within {
                assert!(!self.ended.contains(&b), "a waiter inside ended budget {b}");
            }
        }
    }

    /// Liveness: with every member and lease released as soon as it is granted, every member
    /// is served; once the budgets end too, every request is.
    fn drain(&mut self) {
        for phase in [false, true] {
            if phase {
                for b in self.budgets() {
                    self.ledger.release(self.now, HOLDER, b).unwrap();
                    self.ended.insert(b);
                }
                self.collect();
            }
            for _ in 0..10_000 {
                // Budgets granted while others end are ended in turn, in the second phase.
                let held: Vec<(LeaseId, SessionId, bool)> = self
                    .ledger
                    .leases()
                    .filter(|l| phase || l.budget.is_none())
                    .map(|l| (l.id, l.session, l.budget.is_some()))
                    .collect();
                if held.is_empty() {
                    break;
                }
                for (id, session, budget) in held {
                    if self.ledger.lease(id).is_some() {
                        self.ledger.release(self.now, session, id).unwrap();
                        if budget {
                            self.ended.insert(id);
                        }
                    }
                }
                self.collect();
                self.check();
            }
            let members_waiting = self.ledger.waiters().iter().any(|w| w.within.is_some());
            assert!(
                !members_waiting,
                "a member waits with nothing held in its budget"
            );
        }
        assert!(
            self.ledger.waiters().is_empty(),
            "requests still wait once everything is free: {:?}",
            self.ledger.waiters()
        );
        assert!(self.waiting.is_empty(), "unanswered: {:?}", self.waiting);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Random runs keep every budget's promise after every step, answer every request at most
    /// once, and serve everything once what is held is released.
    #[test]
    fn budgets_keep_their_promises(steps in prop::collection::vec(step(), 1..80), slots in 1..3u32) {
        let mut run = Run::new(slots);
        for s in &steps {
            run.apply(s);
        }
        run.drain();
    }
}

#[test]
fn two_members_that_do_not_fit_the_budget_together_are_serialized() {
    let mut r = Run::new(1);
    r.acquire(HOLDER, budget_spec(0, 8, 1, Class::Normal));
    let b = r.budgets()[0];
    let first = r.ticket(1);
    let lease = r.ledger.acquire(r.now, first, member(b, 6, false)).unwrap();
    let second = r.ticket(2);
    assert_eq!(
        r.ledger.acquire(r.now, second, member(b, 6, false)),
        Ok(None),
        "6 + 6 > 8"
    );
    // The device has room (16 - 8): the member waits for its budget, not the device.
    let outside = r.ticket(3);
    assert!(
        r.ledger
            .acquire(
                r.now,
                outside,
                spec(Placement::Index(0), 8, false, Class::Normal)
            )
            .unwrap()
            .is_some()
    );
    r.ledger.release(r.now, 1, lease.unwrap()).unwrap();
    assert!(
        matches!(r.ledger.poll_decision(), Some(Decision::Granted { ticket, .. }) if ticket == second)
    );
}

#[test]
fn a_member_larger_than_its_budget_is_refused_naming_the_budget() {
    let mut r = Run::new(1);
    r.acquire(HOLDER, budget_spec(0, 8, 0, Class::Normal));
    let b = r.budgets()[0];
    let t = r.ticket(1);
    let e = r.ledger.acquire(r.now, t, member(b, 9, false)).unwrap_err();
    assert_eq!(
        e,
        LedgerError::ExceedsBudget {
            budget: b,
            need: 9 * GIB,
            limit: 8 * GIB
        }
    );
    assert!(e.to_string().contains(&format!("budget {b}")), "{e}");
    let t = r.ticket(1);
    assert_eq!(
        r.ledger.acquire(r.now, t, member(b, 1, true)),
        Err(LedgerError::BudgetWithoutCompute(b))
    );
    let t = r.ticket(1);
    assert_eq!(
        r.ledger.acquire(r.now, t, member(99, 1, false)),
        Err(LedgerError::UnknownBudget(99))
    );
}

#[test]
fn budgets_do_not_over_commit_the_device_and_wait_like_leases() {
    let mut r = Run::new(1);
    r.acquire(HOLDER, budget_spec(0, 10, 1, Class::Normal));
    let t = r.ticket(HOLDER);
    assert_eq!(
        r.ledger
            .acquire(r.now, t, budget_spec(0, 10, 1, Class::Normal)),
        Ok(None),
        "10 + 10 > 16"
    );
    let first = r.budgets()[0];
    r.ledger.release(r.now, HOLDER, first).unwrap();
    assert!(
        matches!(r.ledger.poll_decision(), Some(Decision::Granted { ticket, .. }) if ticket == t)
    );
}

#[test]
fn ending_a_budget_revokes_its_members_and_withdraws_its_waiters() {
    let mut r = Run::new(1);
    r.acquire(HOLDER, budget_spec(0, 8, 1, Class::Normal));
    let b = r.budgets()[0];
    let t1 = r.ticket(1);
    let held = r
        .ledger
        .acquire(r.now, t1, member(b, 4, true))
        .unwrap()
        .unwrap();
    let t2 = r.ticket(2);
    assert_eq!(
        r.ledger.acquire(r.now, t2, member(b, 2, true)),
        Ok(None),
        "one compute slot"
    );
    r.ledger.release(r.now, HOLDER, b).unwrap();
    let decisions: Vec<Decision> = std::iter::from_fn(|| r.ledger.poll_decision()).collect();
    assert!(
        decisions.contains(&Decision::BudgetEnded {
            ticket: t2,
            budget: b
        }),
        "{decisions:?}"
    );
    assert!(decisions.contains(&Decision::Revoked {
        session: 1,
        lease: held,
        reason: RevokeReason::BudgetEnded
    }));
    assert_eq!(r.ledger.leases().count(), 0);
    assert_eq!(r.ledger.device(0).unwrap().reserved(), 0);
    r.ledger.check_invariants().unwrap();
}

#[test]
fn a_members_compute_waits_for_the_device_with_everyone_else_in_class_order() {
    let mut r = Run::new(1);
    r.acquire(HOLDER, budget_spec(0, 4, 1, Class::Critical));
    let critical = r.budgets()[0];
    let holder = r.ticket(1);
    let plain = r
        .ledger
        .acquire(
            r.now,
            holder,
            spec(Placement::Index(0), 1, true, Class::Normal),
        )
        .unwrap()
        .unwrap();
    let normal = r.ticket(2);
    assert_eq!(
        r.ledger.acquire(
            r.now,
            normal,
            spec(Placement::Index(0), 1, true, Class::Normal)
        ),
        Ok(None)
    );
    let inside = r.ticket(3);
    assert_eq!(
        r.ledger.acquire(r.now, inside, member(critical, 1, true)),
        Ok(None)
    );
    let _ = std::iter::from_fn(|| r.ledger.poll_decision()).count();
    r.ledger.release(r.now, 1, plain).unwrap();
    assert!(
        matches!(r.ledger.poll_decision(), Some(Decision::Granted { ticket, .. }) if ticket == inside),
        "the critical job's member overtakes the normal waiter"
    );
    assert_eq!(
        r.ledger
            .lease(r.ledger.leases().map(|l| l.id).max().unwrap())
            .unwrap()
            .class,
        Class::Critical
    );
}

#[test]
fn restored_members_go_back_into_their_restored_budget() {
    let mut l = ledger(1);
    let now = Instant::now();
    let restored = |id, vram_gib, within, slots| RestoredLease {
        id,
        device: 0,
        vram_bytes: vram_gib * GIB,
        compute: false,
        class: Class::Normal,
        granted_at: now,
        label: None,
        within,
        budget_compute_slots: slots,
        evictable: false,
        group: None,
    };
    l.restore(HOLDER, restored(1, 8, None, Some(1))).unwrap();
    l.restore(0, restored(2, 6, Some(1), None)).unwrap();
    assert!(
        l.restore(0, restored(3, 6, Some(1), None)).is_err(),
        "6 + 6 > 8"
    );
    assert!(
        l.restore(0, restored(4, 1, Some(9), None)).is_err(),
        "no budget 9"
    );
    l.check_invariants().unwrap();
    assert_eq!(
        l.device(0).unwrap().reserved(),
        8 * GIB,
        "members are inside the budget's bytes"
    );
    assert_eq!(
        l.lease(1).unwrap().budget.as_ref().unwrap().used_bytes,
        6 * GIB
    );
}

/// A ledger whose oldest waiter pins its device at once (no overtaking at all).
fn pinning_ledger() -> Ledger {
    let config = LedgerConfig {
        max_overtakes: 0,
        ..LedgerConfig::default()
    };
    Ledger::new(config, sim_devices(1, 1))
}

#[test]
fn a_waiter_short_of_memory_does_not_hold_compute_back_from_a_budgets_members() {
    // The memory it waits for is the budget's own, which comes back only when the job ends,
    // and the job needs compute to end.
    let mut l = pinning_ledger();
    let now = Instant::now();
    let b = l
        .acquire(
            now,
            Ticket {
                session: HOLDER,
                request: 1,
            },
            budget_spec(0, 10, 1, Class::Normal),
        )
        .unwrap()
        .unwrap();
    let pinned = Ticket {
        session: 1,
        request: 1,
    };
    assert_eq!(
        l.acquire(
            now,
            pinned,
            spec(Placement::Index(0), 8, true, Class::Normal)
        ),
        Ok(None),
        "8 GiB > 16 - 10"
    );
    let inside = Ticket {
        session: 2,
        request: 1,
    };
    assert!(
        l.acquire(now, inside, member(b, 1, true))
            .unwrap()
            .is_some(),
        "the member takes the free slot beside the pinned waiter"
    );
}

#[test]
fn a_member_waiting_for_its_full_budget_does_not_pin_the_device() {
    let mut l = pinning_ledger();
    let now = Instant::now();
    let b = l
        .acquire(
            now,
            Ticket {
                session: HOLDER,
                request: 1,
            },
            budget_spec(0, 8, 1, Class::Normal),
        )
        .unwrap()
        .unwrap();
    let t = |session, request| Ticket { session, request };
    assert!(
        l.acquire(now, t(1, 1), member(b, 6, false))
            .unwrap()
            .is_some()
    );
    assert_eq!(
        l.acquire(now, t(2, 1), member(b, 6, true)),
        Ok(None),
        "6 + 6 > 8"
    );
    assert!(
        l.acquire(
            now,
            t(3, 1),
            spec(Placement::Index(0), 4, true, Class::Normal)
        )
        .unwrap()
        .is_some(),
        "the member waits for its siblings, not the device: the device grants on"
    );
}
