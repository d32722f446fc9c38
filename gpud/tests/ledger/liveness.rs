//! Liveness: no lease is held forever. Under the default policy every lease but a budget is
//! gone by its maximum hold plus its grace when its holder does nothing; a stopped holder
//! loses, after the stopped grace, what a waiter needs, and at once what is past its maximum
//! hold; nothing else loses a lease for being stopped.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpud::ledger::{
    AcquireSpec, BudgetSpec, Class, Decision, Lease, LeaseId, Ledger, LedgerConfig, Liveness,
    PerClass, Placement, RevokeReason, SessionId, Ticket, YieldReason,
};
use proptest::prelude::*;

use crate::{GIB, sim_devices};

/// One input of a run.
#[derive(Debug, Clone)]
enum Step {
    /// A session asks for a lease (memory only unless `compute`; warm state when `evictable`
    /// and memory only; a budget when `budget`).
    Acquire {
        session: SessionId,
        device: Option<usize>,
        gib: u64,
        compute: bool,
        class: Class,
        evictable: bool,
        budget: bool,
    },
    /// A session's process is seen stopped.
    Stop { session: SessionId },
    /// A session's process is seen running again.
    Resume { session: SessionId },
    /// Virtual time passes; every timer fires at its own instant.
    Advance { ms: u64 },
}

fn class() -> impl Strategy<Value = Class> {
    prop_oneof![
        Just(Class::Critical),
        Just(Class::High),
        Just(Class::Normal),
        Just(Class::Background),
    ]
}

fn acquire() -> impl Strategy<Value = Step> {
    (
        1..6u64,
        proptest::option::of(0..2usize),
        0..12u64,
        any::<bool>(),
        class(),
        any::<bool>(),
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            |(session, device, gib, compute, class, evictable, budget)| Step::Acquire {
                session,
                device,
                gib,
                compute,
                class,
                evictable,
                budget,
            },
        )
}

/// A run on virtual time over two 16 GiB devices with one compute slot each.
struct Run {
    l: Ledger,
    now: Instant,
    next_request: u64,
    /// Sessions stopped, since when (as told to the ledger).
    stopped: BTreeMap<SessionId, Instant>,
    /// Every decision, with the instant it came.
    decided: Vec<(Instant, Decision)>,
    /// Every lease ever granted, as it was granted.
    granted: BTreeMap<LeaseId, Lease>,
}

impl Run {
    fn new(config: LedgerConfig) -> Self {
        Self {
            l: Ledger::new(config, sim_devices(2, 1)),
            now: Instant::now(),
            next_request: 0,
            stopped: BTreeMap::new(),
            decided: Vec::new(),
            granted: BTreeMap::new(),
        }
    }

    fn apply(&mut self, step: &Step, check: &mut impl FnMut(&Run)) {
        let now = self.now;
        match *step {
            Step::Acquire {
                session,
                device,
                gib,
                compute,
                class,
                evictable,
                budget,
            } => {
                // A stopped process sends nothing.
                if self.stopped.contains_key(&session) {
                    return;
                }
                self.next_request += 1;
                let budget = budget.then_some(BudgetSpec {
                    compute_slots: 1,
                    holder: session,
                });
                let spec = AcquireSpec {
                    placement: device.map_or(Placement::Any, |d| Placement::Index(d as u32)),
                    vram_bytes: (gib + u64::from(!compute && budget.is_none())) * GIB,
                    compute: compute && budget.is_none(),
                    class,
                    timeout: None,
                    label: None,
                    within: None,
                    budget,
                    evictable: evictable && !compute && budget.is_none(),
                    parts: Vec::new(),
                    policy: gpud::ledger::PlacementPolicy::BestFit,
                };
                let ticket = Ticket {
                    session,
                    request: self.next_request,
                };
                // Refusals (a budget of nothing, a request too large) change nothing.
                if let Ok(Some(id)) = self.l.acquire(now, ticket, spec) {
                    self.note_grant(id);
                }
            }
            Step::Stop { session } => {
                self.stopped.entry(session).or_insert(now);
                self.l.set_stopped(now, session, Some(now));
            }
            Step::Resume { session } => {
                self.stopped.remove(&session);
                self.l.set_stopped(now, session, None);
            }
            Step::Advance { ms } => {
                let end = now + Duration::from_millis(ms);
                while let Some(at) = self.l.poll_timeout().filter(|&at| at <= end) {
                    self.now = at.max(self.now);
                    self.l.handle_timeout(self.now);
                    self.collect();
                    check(self);
                }
                self.now = end;
            }
        }
        self.collect();
        self.l.check_invariants().unwrap();
        check(self);
    }

    /// Keeps the lease as granted (unless it is gone again in the same step).
    fn note_grant(&mut self, id: LeaseId) {
        if let Some(lease) = self.l.lease(id) {
            self.granted.insert(id, lease.clone());
        }
    }

    fn collect(&mut self) {
        while let Some(d) = self.l.poll_decision() {
            if let Decision::Granted { lease, .. } = d {
                self.note_grant(lease);
            }
            self.decided.push((self.now, d));
        }
    }

    /// The revocations so far: lease, reason, holder.
    fn revocations(&self) -> impl Iterator<Item = (LeaseId, RevokeReason, SessionId)> + '_ {
        self.decided.iter().filter_map(|(_, d)| match d {
            Decision::Revoked {
                lease,
                reason,
                session,
            } => Some((*lease, *reason, *session)),
            _ => None,
        })
    }
}

/// The longest a lease may be held by a holder that does nothing: its maximum hold plus the
/// grace after the notice (`None`: unbounded).
fn bound(config: &LedgerConfig, lease: &Lease) -> Option<Duration> {
    if lease.compute {
        Some(config.max_hold.get(lease.class)? + config.revoke_after_yield?)
    } else {
        let live = &config.liveness;
        Some(live.memory_max_hold.get(lease.class)? + live.memory_revoke_after_yield?)
    }
}

/// Whether `waiter`-side demand on the lease's device needs what `lease` holds: memory a
/// waiter (not warm state, not its own session's) does not find free, or a compute slot it
/// finds none of.
fn needed(l: &Ledger, lease: &Lease) -> bool {
    let dev = l.device(lease.device).expect("its device");
    let holders = dev.compute_holders().count() as u32;
    l.waiters().iter().any(|w| {
        w.candidates.contains(&lease.device)
            && !w.evictable
            && w.ticket.session != lease.session
            && ((w.need.vram_bytes > 0 && lease.vram_bytes > 0 && w.need.vram_bytes > dev.free())
                || (w.need.compute && lease.compute && holders >= dev.spec().slots_for(w.class)))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Under the default policy every class and kind has a bound, and no lease but a budget
    /// outlives it when its holders do nothing but ask: each is asked to yield at its maximum
    /// hold (or earlier, for a critical waiter) and revoked a grace later. Budgets are never
    /// touched: their job ends them.
    #[test]
    fn every_lease_kind_has_a_bounded_hold_under_the_defaults(
        steps in proptest::collection::vec(
            prop_oneof![
                3 => acquire(),
                2 => (60_000..6 * 3_600_000u64).prop_map(|ms| Step::Advance { ms }),
            ],
            1..40,
        )
    ) {
        let config = LedgerConfig::default();
        prop_assert!(config.revoke_after_yield.is_some());
        prop_assert!(config.liveness.memory_revoke_after_yield.is_some());
        for class in Class::ALL {
            prop_assert!(config.max_hold.get(class).is_some(), "compute {:?}", class);
            prop_assert!(config.liveness.memory_max_hold.get(class).is_some(), "memory {:?}", class);
        }
        let mut run = Run::new(config.clone());
        let mut check = |run: &Run| {
            for lease in run.l.leases() {
                if lease.budget.is_some() {
                    continue;
                }
                let limit = bound(&config, lease).expect("bounded");
                assert!(
                    run.now - lease.granted_at <= limit,
                    "lease {} held {:?}, past {limit:?}: {lease:?}",
                    lease.id, run.now - lease.granted_at
                );
            }
        };
        for step in &steps {
            run.apply(step, &mut check);
        }
        // Then long enough for every bound, once for each request that may still be granted:
        // only budgets are left.
        for _ in 0..=steps.len() {
            run.apply(&Step::Advance { ms: 26 * 3_600_000 }, &mut check);
        }
        prop_assert!(run.l.leases().all(|l| l.budget.is_some()));
        for (id, reason, _) in run.revocations() {
            prop_assert!(run.granted.get(&id).is_none_or(|l| l.budget.is_none()), "budget {id} revoked");
            prop_assert!(
                matches!(reason, RevokeReason::YieldIgnored | RevokeReason::Reclaimed),
                "{:?}", reason
            );
        }
        // Each maximum-hold notice came exactly at the lease's maximum hold.
        for (at, d) in &run.decided {
            if let Decision::YieldRequested { lease, reason: YieldReason::MaxHold, .. } = d {
                let l = &run.granted[lease];
                prop_assert!(l.budget.is_none(), "budget {} asked to yield", lease);
                let hold = if l.compute {
                    config.max_hold.get(l.class)
                } else {
                    config.liveness.memory_max_hold.get(l.class)
                };
                prop_assert_eq!(Some(*at - l.granted_at), hold);
            }
        }
    }
}

/// Short limits, so that random runs reach every rule.
fn short() -> LedgerConfig {
    let s = |ms| Some(Duration::from_millis(ms));
    LedgerConfig {
        max_hold: PerClass {
            critical: s(8_000),
            high: s(20_000),
            normal: s(20_000),
            background: s(30_000),
        },
        revoke_after_yield: s(5_000),
        liveness: Liveness {
            memory_max_hold: PerClass {
                critical: s(25_000),
                high: s(25_000),
                normal: s(40_000),
                background: s(40_000),
            },
            memory_revoke_after_yield: s(10_000),
            stopped_grace: Duration::from_millis(2_000),
        },
        ..LedgerConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A stopped holder, once stopped for the stopped grace, keeps no lease a waiter needs,
    /// and at no time one past its maximum hold; a holder that is not stopped never loses a
    /// lease for being stopped.
    #[test]
    fn a_stopped_holder_loses_what_waiters_need_and_what_is_past_its_hold(
        steps in proptest::collection::vec(
            prop_oneof![
                6 => acquire().prop_map(|s| match s {
                    Step::Acquire { session, device, gib, compute, class, evictable, .. } =>
                        Step::Acquire { session, device, gib, compute, class, evictable, budget: false },
                    other => other,
                }),
                2 => (1..6u64).prop_map(|session| Step::Stop { session }),
                1 => (1..6u64).prop_map(|session| Step::Resume { session }),
                4 => (100..6_000u64).prop_map(|ms| Step::Advance { ms }),
            ],
            1..80,
        )
    ) {
        let config = short();
        let grace = config.liveness.stopped_grace;
        let mut run = Run::new(config.clone());
        let mut check = |run: &Run| {
            for lease in run.l.leases() {
                let Some(&since) = run.stopped.get(&lease.session) else {
                    continue;
                };
                let hold = run.l.hold_limit(lease).expect("limited");
                assert!(
                    run.now < lease.granted_at + hold,
                    "lease {} of a stopped holder kept past its maximum hold", lease.id
                );
                if run.now >= since + grace {
                    assert!(
                        !needed(&run.l, lease),
                        "lease {} of a holder stopped since {:?} kept while a waiter needs it: {:#?}",
                        lease.id, run.now - since, run.l.waiters()
                    );
                }
            }
        };
        // Revocations for being stopped go to stopped holders only.
        let mut told = 0;
        for step in &steps {
            run.apply(step, &mut check);
            let stopped = run.stopped.clone();
            for (id, reason, holder) in run.revocations().skip(told) {
                if reason == RevokeReason::HolderStopped {
                    prop_assert!(stopped.contains_key(&holder), "lease {id} of running session {holder}");
                }
            }
            told = run.revocations().count();
        }
    }
}
