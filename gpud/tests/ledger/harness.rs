//! The virtual-time driver: applies each transition to the ledger and to the reference model,
//! drains the ledger's decisions into the model, and checks after every step that the two
//! agree and that the books are straight.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpud::ledger::{
    Class, Decision, DeviceSpec, LeaseChange, LeaseId, Ledger, LedgerConfig, PerClass, Placement,
};

use crate::GIB;
use crate::reference::{Op, Outcome, Reference, Refusal};
use crate::transition::{DEVICES, Transition};

/// The knobs a random run varies.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub max_overtakes: u32,
    pub compute_slots: u32,
    pub critical_slots: u32,
}

/// What a device held before a step: a step may add holders only within the slots.
#[derive(Debug, Clone, Copy)]
struct Before {
    reserved: u64,
    holders: usize,
    ordinary: usize,
}

/// One thing the ledger said, with instants as offsets from the run's start, so that two runs
/// started at different instants can be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    Answer(Outcome),
    Decision(Decision, Option<Duration>),
    /// After each step: the leases (id, device, bytes, held since) and the next deadline.
    State(Vec<(LeaseId, usize, u64, Duration)>, Option<Duration>),
}

/// Drives a ledger and its reference model with the same transitions.
pub struct Harness {
    pub ledger: Ledger,
    reference: Reference,
    start: Instant,
    now: Instant,
    max_overtakes: u32,
    /// Arrival order of acquires that had to wait, for the ledger's own overtaking bound.
    arrivals: BTreeMap<gpud::ledger::Ticket, u64>,
    /// The lease set as a journal replaying the ledger's change stream sees it.
    journal: BTreeMap<LeaseId, u64>,
    /// Everything the ledger said, in order.
    pub said: Vec<Said>,
}

impl Harness {
    /// Three devices (16, 24 and 16 GiB, half a GiB of headroom), max holds for normal and
    /// background work, and revocation 200 ms after an ignored yield; virtual time starts now.
    pub fn new(setup: Setup) -> Self {
        Self::starting_at(setup, Instant::now())
    }

    /// The same, with virtual time starting at `start`.
    pub fn starting_at(setup: Setup, start: Instant) -> Self {
        let devices: Vec<DeviceSpec> = (0..DEVICES)
            .map(|i| DeviceSpec {
                kind: gpud::ledger::PoolKind::Gpu,
                uuid: format!("GPU-{i}"),
                name: "sim".into(),
                total_bytes: [16, 24, 16][i] * GIB,
                headroom_bytes: GIB / 2,
                unmanaged_bytes: 0,
                compute_slots: setup.compute_slots,
                critical_slots: setup.critical_slots,
                topology: Default::default(),
            })
            .collect();
        let config = LedgerConfig {
            max_overtakes: setup.max_overtakes,
            max_hold: PerClass {
                normal: Some(Duration::from_millis(500)),
                background: Some(Duration::from_millis(300)),
                ..PerClass::default()
            },
            revoke_after_yield: Some(Duration::from_millis(200)),
            // The model knows compute holds; memory holds and stopped holders are liveness.rs's.
            liveness: gpud::ledger::Liveness {
                memory_max_hold: PerClass::default(),
                ..gpud::ledger::Liveness::default()
            },
            ..LedgerConfig::default()
        };
        let reference = Reference::new(&config, &devices, start);
        let mut ledger = Ledger::new(config, devices);
        ledger.record_changes(true);
        Self {
            ledger,
            reference,
            start,
            now: start,
            max_overtakes: setup.max_overtakes,
            arrivals: BTreeMap::new(),
            journal: BTreeMap::new(),
            said: Vec::new(),
        }
    }

    /// Applies one transition: the reference resolves it, both sides take it, the decisions
    /// are judged, and everything is checked.
    pub fn apply(&mut self, transition: &Transition) {
        if let Some(op) = self.reference.resolve(transition, self.now) {
            self.step(&op);
        } else {
            let before = self.before();
            self.check(&before);
        }
    }

    /// Applies one concrete input to both sides and checks the result.
    pub fn step(&mut self, op: &Op) {
        let before = self.before();
        let answer = self.perform(op);
        let predicted = self.reference.predict(op);
        assert_eq!(answer, predicted, "the answer to {op:?}");
        if let (Op::Acquire { ticket, .. }, Outcome::Acquire(Ok(None))) = (op, &answer) {
            self.arrivals.insert(*ticket, ticket.request);
        }
        self.said.push(Said::Answer(answer));
        self.collect();
        self.reference.step_done();
        self.check(&before);
        let leases = self
            .ledger
            .leases()
            .map(|l| (l.id, l.device, l.vram_bytes, l.granted_at - self.start))
            .collect();
        let timeout = self.ledger.poll_timeout().map(|t| t - self.start);
        self.said.push(Said::State(leases, timeout));
    }

    /// The ledger's answer to `op`.
    fn perform(&mut self, op: &Op) -> Outcome {
        let now = self.now;
        let l = &mut self.ledger;
        match op.clone() {
            Op::Acquire { ticket, spec } => {
                Outcome::Acquire(l.acquire(now, ticket, spec).map_err(Refusal::from))
            }
            Op::Resize {
                ticket,
                lease,
                vram_bytes,
                timeout,
            } => Outcome::Resize(
                l.resize(now, ticket, lease, vram_bytes, timeout)
                    .map_err(Refusal::from),
            ),
            Op::Release { session, lease } => {
                Outcome::Release(l.release(now, session, lease).map_err(Refusal::from))
            }
            Op::Cancel { ticket } => Outcome::Cancel(l.cancel(now, ticket).map_err(Refusal::from)),
            Op::Disconnect { session } => {
                let gone = l.disconnect(now, session);
                Outcome::Disconnect {
                    leases: gone.leases,
                    waiters: gone.waiters,
                }
            }
            Op::Drain { device } => Outcome::Device(
                l.drain(now, &Placement::Index(device as u32))
                    .map_err(Refusal::from),
            ),
            Op::Undrain { device } => Outcome::Device(
                l.undrain(now, &Placement::Index(device as u32))
                    .map_err(Refusal::from),
            ),
            Op::Revoke { lease } => Outcome::Revoke(l.revoke(now, lease).map_err(Refusal::from)),
            Op::Unmanaged { device, bytes } => {
                l.set_unmanaged(now, device, bytes);
                Outcome::Done
            }
            Op::Slots { compute, critical } => {
                l.set_slots(now, compute, critical);
                Outcome::Done
            }
            Op::Advance { to } => {
                self.now = to;
                l.handle_timeout(to);
                Outcome::Done
            }
        }
    }

    /// Drains the ledger's decisions into the reference, which judges each one.
    fn collect(&mut self) {
        while let Some(d) = self.ledger.poll_decision() {
            let lease = match &d {
                Decision::Granted { lease, .. }
                | Decision::Grew { lease, .. }
                | Decision::GrowAbandoned { lease, .. }
                | Decision::GrowDeadlocked { lease, .. }
                | Decision::YieldRequested { lease, .. }
                | Decision::ReclaimRequested { lease, .. }
                | Decision::Revoked { lease, .. } => Some(*lease),
                Decision::TimedOut { .. } | Decision::BudgetEnded { .. } => None,
            };
            let device = lease.and_then(|id| self.ledger.lease(id)).map(|l| l.device);
            self.reference.observe(&d, device);
            let at = match &d {
                Decision::YieldRequested { revoke_at, .. } => revoke_at.map(|t| t - self.start),
                _ => None,
            };
            let d = match d {
                Decision::YieldRequested {
                    session,
                    lease,
                    reason,
                    ..
                } => Decision::YieldRequested {
                    session,
                    lease,
                    reason,
                    revoke_at: None,
                },
                other => other,
            };
            self.said.push(Said::Decision(d, at));
        }
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

    /// What must hold after every step.
    fn check(&mut self, before: &[Before]) {
        self.ledger.check_invariants().unwrap();
        self.check_journal();
        self.check_agreement();
        let live = self.reference.leases();
        for dev in self.ledger.devices() {
            let d = dev.index();
            let sum: u64 = live
                .values()
                .filter(|l| l.device == d)
                .map(|l| l.vram_bytes)
                .sum();
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
            let compute_live = live.values().filter(|l| l.device == d && l.compute).count();
            assert_eq!(holders, compute_live);
        }
        for w in self.ledger.waiters() {
            assert!(
                self.reference.is_waiting(w.ticket),
                "ledger waits on {:?} the reference ended",
                w.ticket
            );
            // The ledger's own count against the documented bound: max_overtakes for each
            // older waiter there was, plus its own.
            let older = self
                .arrivals
                .get(&w.ticket)
                .map_or(0, |&a| self.arrivals.values().filter(|&&b| b < a).count());
            let bound = self.max_overtakes as usize * (older + 1);
            assert!(w.overtaken as usize <= bound.max(self.max_overtakes as usize));
        }
        assert_eq!(self.ledger.waiters().len(), self.reference.waiters().len());
    }

    /// The change stream replays to the ledger's leases.
    fn check_journal(&mut self) {
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
    }

    /// The ledger's state is the one the reference predicts.
    fn check_agreement(&self) {
        let r = &self.reference;
        let expected: Vec<_> = r
            .leases()
            .iter()
            .map(|(id, l)| {
                let asked = l.yield_asked.is_some();
                (
                    *id,
                    l.session,
                    l.device,
                    l.vram_bytes,
                    l.compute,
                    l.class,
                    asked,
                )
            })
            .collect();
        let actual: Vec<_> = self
            .ledger
            .leases()
            .map(|l| {
                let asked = l.yield_requested.is_some();
                (
                    l.id,
                    l.session,
                    l.device,
                    l.vram_bytes,
                    l.compute,
                    l.class,
                    asked,
                )
            })
            .collect();
        assert_eq!(
            actual, expected,
            "leases (id, session, device, bytes, compute, class, yield asked)"
        );
        // The same waiters in the same serving order, each overtaken as often as the
        // reference counted from the grants it saw.
        let expected: Vec<_> = r
            .waiters()
            .iter()
            .map(|w| (w.ticket, w.class, w.overtaken))
            .collect();
        let actual: Vec<_> = self
            .ledger
            .waiters()
            .iter()
            .map(|w| (w.ticket, w.class, w.overtaken))
            .collect();
        assert_eq!(
            actual, expected,
            "waiters (ticket, class, overtaken) in serving order"
        );
        for dev in self.ledger.devices() {
            let d = dev.index();
            assert_eq!(dev.capacity(), r.capacity(d), "device {d}: capacity");
            assert_eq!(dev.drained(), r.drained(d), "device {d}: drained");
            assert_eq!(dev.reserved(), r.reserved(d), "device {d}: reserved");
            assert_eq!(
                dev.compute_holders().count(),
                r.holders(d),
                "device {d}: holders"
            );
        }
    }

    /// Frees everything and lets time pass: every request must have ended.
    pub fn settle(&mut self) {
        for device in 0..DEVICES {
            self.step(&Op::Undrain { device });
            self.step(&Op::Unmanaged { device, bytes: 0 });
        }
        for _ in 0..10_000 {
            if self.reference.waiters().is_empty() {
                break;
            }
            let live: Vec<_> = self
                .reference
                .leases()
                .iter()
                .map(|(id, l)| (*id, l.session))
                .collect();
            for (lease, session) in live {
                self.step(&Op::Release { session, lease });
            }
        }
        assert!(
            self.reference.waiters().is_empty(),
            "waiters never served: {:?}",
            self.ledger.waiters()
        );
        let unanswered = self.reference.unanswered();
        assert!(
            unanswered.is_empty(),
            "requests never answered: {unanswered:?}"
        );
        for ticket in self.arrivals.keys() {
            assert!(
                self.reference.ends().contains_key(ticket),
                "{ticket:?} never ended"
            );
        }
    }

    /// Runs `transitions` and settles.
    pub fn run(setup: Setup, transitions: &[Transition]) -> Self {
        let mut h = Self::new(setup);
        for t in transitions {
            h.apply(t);
        }
        h.settle();
        h
    }
}
