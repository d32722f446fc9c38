//! A plain model of what the ledger must do, written from its documented rules and nothing
//! else: it turns [`Transition`]s into concrete, valid inputs ([`Op`]), predicts each input's
//! immediate answer and the state after it, and judges every decision the ledger emits.
//!
//! The model is deliberately naive (it recomputes free memory and slots from its lease list,
//! scans every waiter on every grant) so that it is easy to believe. It keeps its own count of
//! overtakes, derived only from the grants it observes; the ledger's counter is compared with
//! it, never used by it.
//!
//! The serving rules it checks each grant against (the ledger module's documentation):
//! - a grant fits: the device is not drained, the memory is free, a compute slot of the
//!   request's class is free;
//! - order: class (critical > high > normal > background), then arrival; a waiter that cannot
//!   be granted does not block later ones (backfill), so a grant is out of order only when a
//!   waiter ahead of it on that device could have been granted instead;
//! - overtaking: a grant to a later request that competes (both want memory, or both want a
//!   compute slot) with the oldest waiter of the device overtakes that waiter; once the oldest
//!   waiter has been overtaken `max_overtakes` times, nothing that competes with it is granted
//!   on that device until it is.
//!
//! One deviation of the ledger is modelled, and only as a relaxation: a device is served in
//! passes (after something on it is freed or changed), and a waiter that a pass skipped
//! because the device was pinned against it is not looked at again when a grant in that pass,
//! or on another device, lifts the pin; it waits for the device's next pass. Such a waiter is
//! "held back" on that device until then, and a later grant there does not count as serving
//! out of order around it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use gpud::ledger::{
    AcquireSpec, Class, Decision, DeviceIdx, DeviceSpec, LeaseId, LedgerConfig, LedgerError,
    PerClass, Placement, RequestId, ResizeOutcome, RevokeReason, SessionId, Ticket, YieldReason,
};

use crate::GIB;
use crate::transition::Transition;

/// A concrete input, valid in the reference state it was resolved in.
#[derive(Debug, Clone)]
pub enum Op {
    Acquire {
        ticket: Ticket,
        spec: AcquireSpec,
    },
    Resize {
        ticket: Ticket,
        lease: LeaseId,
        vram_bytes: u64,
        timeout: Option<Duration>,
    },
    Release {
        session: SessionId,
        lease: LeaseId,
    },
    Cancel {
        ticket: Ticket,
    },
    Disconnect {
        session: SessionId,
    },
    Drain {
        device: DeviceIdx,
    },
    Undrain {
        device: DeviceIdx,
    },
    Revoke {
        lease: LeaseId,
    },
    Unmanaged {
        device: DeviceIdx,
        bytes: u64,
    },
    Slots {
        compute: u32,
        critical: u32,
    },
    Advance {
        to: Instant,
    },
}

/// A lease id no session ever holds: releasing it must be refused.
pub const UNHELD: LeaseId = 1_000_000;

/// Why an input was refused, without the ledger's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    UnknownDevice,
    NeverFits { need: u64, capacity: u64 },
    Invalid,
    UnknownLease(LeaseId),
    UnknownRequest(RequestId),
    DuplicateRequest(RequestId),
    ResizePending(LeaseId),
}

impl From<LedgerError> for Refusal {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::UnknownDevice(_) => Refusal::UnknownDevice,
            LedgerError::NeverFits { need, capacity } => Refusal::NeverFits { need, capacity },
            LedgerError::Invalid(_) => Refusal::Invalid,
            LedgerError::UnknownLease(id) | LedgerError::NoSuchLease(id) => {
                Refusal::UnknownLease(id)
            }
            LedgerError::UnknownRequest(id) => Refusal::UnknownRequest(id),
            LedgerError::DuplicateRequest(id) => Refusal::DuplicateRequest(id),
            LedgerError::ResizePending(id) => Refusal::ResizePending(id),
            other => panic!("an error the reference does not know: {other:?}"),
        }
    }
}

/// The immediate answer to an [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Acquire(Result<Option<LeaseId>, Refusal>),
    Resize(Result<ResizeOutcome, Refusal>),
    Release(Result<(), Refusal>),
    Cancel(Result<(), Refusal>),
    Disconnect {
        leases: Vec<LeaseId>,
        waiters: usize,
    },
    Device(Result<DeviceIdx, Refusal>),
    Revoke(Result<SessionId, Refusal>),
    /// Inputs without an answer.
    Done,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Granted,
    Refused,
    Cancelled,
    TimedOut,
    Abandoned,
    Deadlocked,
}

#[derive(Debug, Clone)]
struct Device {
    total: u64,
    headroom: u64,
    unmanaged: u64,
    compute_slots: u32,
    critical_slots: u32,
    drained: bool,
}

impl Device {
    fn capacity(&self) -> u64 {
        self.total
            .saturating_sub(self.headroom)
            .saturating_sub(self.unmanaged)
    }

    fn slots_for(&self, class: Class) -> usize {
        let extra = if class == Class::Critical {
            self.critical_slots
        } else {
            0
        };
        (self.compute_slots + extra) as usize
    }
}

/// A lease as the reference expects the ledger to hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub session: SessionId,
    pub device: DeviceIdx,
    pub vram_bytes: u64,
    pub compute: bool,
    pub class: Class,
    granted_at: Instant,
    /// When a yield notice was sent.
    pub yield_asked: Option<Instant>,
    pending_grow: Option<Ticket>,
}

/// A waiting request.
#[derive(Debug, Clone)]
pub struct Waiter {
    pub ticket: Ticket,
    seq: u64,
    pub class: Class,
    vram_bytes: u64,
    compute: bool,
    grows: Option<LeaseId>,
    candidates: Vec<DeviceIdx>,
    deadline: Option<Instant>,
    /// Competing grants to later requests on a device where this was the oldest waiter.
    pub overtaken: u32,
    /// Competing grants to later requests on its devices that also overtook the oldest waiter
    /// there (itself or an older one): bounded by `max_overtakes × (older + 1)`.
    overtaken_in_all: u32,
    /// Waiters that were waiting when this one arrived.
    older: usize,
}

impl Waiter {
    /// Serving order: class, then arrival.
    fn key(&self) -> (usize, u64) {
        let rank = match self.class {
            Class::Critical => 0,
            Class::High => 1,
            Class::Normal => 2,
            Class::Background => 3,
        };
        (rank, self.seq)
    }

    /// Whether granting `other` takes something this waiter waits for.
    fn competes_with(&self, other: &Waiter) -> bool {
        (self.compute && other.compute) || (self.vram_bytes > 0 && other.vram_bytes > 0)
    }
}

/// The reference state.
#[derive(Debug)]
pub struct Reference {
    max_overtakes: u32,
    max_hold: PerClass<Option<Duration>>,
    revoke_after_yield: Option<Duration>,
    now: Instant,
    devices: Vec<Device>,
    leases: BTreeMap<LeaseId, Lease>,
    /// Waiting requests by arrival.
    waiters: BTreeMap<u64, Waiter>,
    next_seq: u64,
    next_lease: LeaseId,
    next_request: RequestId,
    ends: HashMap<Ticket, End>,
    /// Every request made, in order.
    issued: Vec<Ticket>,
    /// Decisions the current input owes (a release's abandoned grow, an admin revocation).
    owed: Vec<Decision>,
    in_advance: bool,
    /// (waiter, device) pairs where the waiter was seen pinned against since the device's
    /// last pass began.
    held_back: BTreeSet<(u64, DeviceIdx)>,
    /// During a reload of the slot counts, the devices as they were: the ledger serves each
    /// device as it reloads it, so its yield notices may see some devices still unchanged.
    reloaded_from: Option<Vec<Device>>,
}

impl Reference {
    /// The model of a fresh ledger with `config` over `devices`, at `now`.
    pub fn new(config: &LedgerConfig, devices: &[DeviceSpec], now: Instant) -> Self {
        Self {
            max_overtakes: config.max_overtakes,
            max_hold: config.max_hold,
            revoke_after_yield: config.revoke_after_yield,
            now,
            devices: devices
                .iter()
                .map(|d| Device {
                    total: d.total_bytes,
                    headroom: d.headroom_bytes,
                    unmanaged: d.unmanaged_bytes,
                    compute_slots: d.compute_slots,
                    critical_slots: d.critical_slots,
                    drained: false,
                })
                .collect(),
            leases: BTreeMap::new(),
            waiters: BTreeMap::new(),
            next_seq: 0,
            next_lease: 1,
            next_request: 0,
            ends: HashMap::new(),
            issued: Vec::new(),
            owed: Vec::new(),
            in_advance: false,
            held_back: BTreeSet::new(),
            reloaded_from: None,
        }
    }

    // ------------------------------------------------------------ views

    /// Live leases by id.
    pub fn leases(&self) -> &BTreeMap<LeaseId, Lease> {
        &self.leases
    }

    /// Waiting requests in serving order.
    pub fn waiters(&self) -> Vec<&Waiter> {
        let mut all: Vec<&Waiter> = self.waiters.values().collect();
        all.sort_by_key(|w| w.key());
        all
    }

    /// Whether `ticket` is waiting.
    pub fn is_waiting(&self, ticket: Ticket) -> bool {
        self.seq_of(ticket).is_some()
    }

    /// How every request ended so far.
    pub fn ends(&self) -> &HashMap<Ticket, End> {
        &self.ends
    }

    /// Requests made that have not ended.
    pub fn unanswered(&self) -> Vec<Ticket> {
        let waiting: Vec<Ticket> = self.waiters.values().map(|w| w.ticket).collect();
        self.issued
            .iter()
            .copied()
            .filter(|t| !self.ends.contains_key(t) && !waiting.contains(t))
            .collect()
    }

    /// The session's leases, by id.
    pub fn session_leases(&self, session: SessionId) -> Vec<LeaseId> {
        self.leases
            .iter()
            .filter(|(_, l)| l.session == session)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Bytes reserved on `d`.
    pub fn reserved(&self, d: DeviceIdx) -> u64 {
        self.leases
            .values()
            .filter(|l| l.device == d)
            .map(|l| l.vram_bytes)
            .sum()
    }

    /// Compute holders on `d`.
    pub fn holders(&self, d: DeviceIdx) -> usize {
        self.leases
            .values()
            .filter(|l| l.device == d && l.compute)
            .count()
    }

    /// What leases may reserve on `d`.
    pub fn capacity(&self, d: DeviceIdx) -> u64 {
        self.devices[d].capacity()
    }

    /// Whether `d` is drained.
    pub fn drained(&self, d: DeviceIdx) -> bool {
        self.devices[d].drained
    }

    fn free(&self, d: DeviceIdx) -> u64 {
        self.capacity(d).saturating_sub(self.reserved(d))
    }

    fn free_slots(&self, d: DeviceIdx, class: Class) -> usize {
        self.devices[d]
            .slots_for(class)
            .saturating_sub(self.holders(d))
    }

    fn seq_of(&self, ticket: Ticket) -> Option<u64> {
        self.waiters
            .values()
            .find(|w| w.ticket == ticket)
            .map(|w| w.seq)
    }

    // ------------------------------------------------------------ generating inputs

    fn ticket(&mut self, session: SessionId) -> Ticket {
        self.next_request += 1;
        let ticket = Ticket {
            session,
            request: self.next_request,
        };
        self.issued.push(ticket);
        ticket
    }

    /// The concrete input `transition` stands for here, or `None` when it has no target.
    pub fn resolve(&mut self, transition: &Transition, now: Instant) -> Option<Op> {
        let pick = |items: &[LeaseId], pick: usize| items[pick % items.len()];
        Some(match *transition {
            Transition::Acquire {
                session,
                device,
                vram_gib,
                compute,
                class,
                timeout_ms,
            } => Op::Acquire {
                ticket: self.ticket(session),
                spec: AcquireSpec {
                    placement: device.map_or(Placement::Any, |d| Placement::Index(d as u32)),
                    vram_bytes: vram_gib * GIB,
                    compute,
                    class,
                    timeout: timeout_ms.map(Duration::from_millis),
                    label: None,
                    within: None,
                    budget: None,
                    evictable: false,
                    parts: Vec::new(),
                    policy: gpud::ledger::PlacementPolicy::BestFit,
                },
            },
            Transition::Resize {
                session,
                pick: p,
                vram_gib,
                timeout_ms,
            } => {
                let leases = self.session_leases(session);
                if leases.is_empty() {
                    return None;
                }
                Op::Resize {
                    lease: pick(&leases, p),
                    ticket: self.ticket(session),
                    vram_bytes: vram_gib * GIB,
                    timeout: timeout_ms.map(Duration::from_millis),
                }
            }
            Transition::Release { session, pick: p } => {
                let leases = self.session_leases(session);
                let lease = if leases.is_empty() {
                    UNHELD
                } else {
                    pick(&leases, p)
                };
                Op::Release { session, lease }
            }
            Transition::Cancel { session, pick } => {
                let mut mine: Vec<Ticket> = self
                    .waiters
                    .values()
                    .map(|w| w.ticket)
                    .filter(|t| t.session == session)
                    .collect();
                if mine.is_empty() {
                    return None;
                }
                mine.sort();
                Op::Cancel {
                    ticket: mine[pick % mine.len()],
                }
            }
            Transition::Disconnect { session } => Op::Disconnect { session },
            Transition::Drain { device } => Op::Drain { device },
            Transition::Undrain { device } => Op::Undrain { device },
            Transition::Revoke { pick: p } => {
                let all: Vec<LeaseId> = self.leases.keys().copied().collect();
                if all.is_empty() {
                    return None;
                }
                Op::Revoke {
                    lease: pick(&all, p),
                }
            }
            Transition::Unmanaged { device, gib } => Op::Unmanaged {
                device,
                bytes: gib * GIB,
            },
            Transition::Slots { compute, critical } => Op::Slots { compute, critical },
            Transition::Advance { ms } => Op::Advance {
                to: now + Duration::from_millis(ms),
            },
        })
    }

    // ------------------------------------------------------------ predicting answers

    /// Applies `op` to the model and returns the answer the ledger must give.
    pub fn predict(&mut self, op: &Op) -> Outcome {
        self.in_advance = false;
        self.reloaded_from = None;
        match op {
            Op::Acquire { ticket, spec } => Outcome::Acquire(self.acquire(*ticket, spec)),
            Op::Resize {
                ticket,
                lease,
                vram_bytes,
                timeout,
            } => Outcome::Resize(self.resize(*ticket, *lease, *vram_bytes, *timeout)),
            Op::Release { session, lease } => {
                if self.leases.get(lease).is_none_or(|l| l.session != *session) {
                    return Outcome::Release(Err(Refusal::UnknownLease(*lease)));
                }
                self.serve(&[self.leases[lease].device]);
                self.end_lease(*lease);
                Outcome::Release(Ok(()))
            }
            Op::Cancel { ticket } => {
                let Some(seq) = self.seq_of(*ticket) else {
                    return Outcome::Cancel(Err(Refusal::UnknownRequest(ticket.request)));
                };
                let w = self.remove_waiter(seq);
                self.serve(&w.candidates);
                self.end(*ticket, End::Cancelled);
                Outcome::Cancel(Ok(()))
            }
            Op::Disconnect { session } => {
                let waiting: Vec<u64> = self
                    .waiters
                    .values()
                    .filter(|w| w.ticket.session == *session)
                    .map(|w| w.seq)
                    .collect();
                for &seq in &waiting {
                    let w = self.remove_waiter(seq);
                    self.serve(&w.candidates);
                    self.end(w.ticket, End::Cancelled);
                }
                let leases = self.session_leases(*session);
                for &id in &leases {
                    self.serve(&[self.leases[&id].device]);
                    self.end_lease(id);
                }
                Outcome::Disconnect {
                    leases,
                    waiters: waiting.len(),
                }
            }
            Op::Drain { device } => {
                self.devices[*device].drained = true;
                Outcome::Device(Ok(*device))
            }
            Op::Undrain { device } => {
                self.devices[*device].drained = false;
                self.serve(&[*device]);
                Outcome::Device(Ok(*device))
            }
            Op::Revoke { lease } => {
                let session = self.leases[lease].session;
                self.serve(&[self.leases[lease].device]);
                self.end_lease(*lease);
                self.owed.push(Decision::Revoked {
                    session,
                    lease: *lease,
                    reason: RevokeReason::Admin,
                });
                Outcome::Revoke(Ok(session))
            }
            Op::Unmanaged { device, bytes } => {
                if *bytes < self.devices[*device].unmanaged {
                    self.serve(&[*device]);
                }
                self.devices[*device].unmanaged = *bytes;
                Outcome::Done
            }
            Op::Slots { compute, critical } => {
                self.reloaded_from = Some(self.devices.clone());
                for d in &mut self.devices {
                    d.compute_slots = (*compute).max(1);
                    d.critical_slots = *critical;
                }
                self.held_back.clear();
                Outcome::Done
            }
            Op::Advance { to } => {
                self.now = *to;
                self.in_advance = true;
                Outcome::Done
            }
        }
    }

    fn acquire(&mut self, ticket: Ticket, spec: &AcquireSpec) -> Result<Option<LeaseId>, Refusal> {
        let refused = |me: &mut Self, r: Refusal| {
            me.end(ticket, End::Refused);
            Err(r)
        };
        if spec.vram_bytes == 0 && !spec.compute {
            return refused(self, Refusal::Invalid);
        }
        let candidates: Vec<DeviceIdx> = match spec.placement {
            Placement::Any => (0..self.devices.len()).collect(),
            Placement::Index(i) if (i as usize) < self.devices.len() => vec![i as usize],
            _ => return refused(self, Refusal::UnknownDevice),
        };
        let fitting: Vec<DeviceIdx> = candidates
            .iter()
            .copied()
            .filter(|&d| self.capacity(d) >= spec.vram_bytes)
            .collect();
        if fitting.is_empty() {
            let capacity = candidates.iter().map(|&d| self.capacity(d)).max();
            let refusal = Refusal::NeverFits {
                need: spec.vram_bytes,
                capacity: capacity.unwrap_or(0),
            };
            return refused(self, refusal);
        }
        let waiter = self.arrival(ticket, spec.class, spec.vram_bytes, spec.compute, fitting);
        let waiter = Waiter {
            deadline: spec.timeout.map(|t| self.now + t),
            ..waiter
        };
        // At once when some device can grant: the best fit, then fewest holders, then index.
        let best = waiter
            .candidates
            .iter()
            .copied()
            .filter(|&d| self.grantable(&waiter, d))
            .min_by_key(|&d| (self.free(d) - waiter.vram_bytes, self.holders(d), d));
        match best {
            Some(d) => {
                self.hold_back();
                self.check_grant(&waiter, d);
                Ok(Some(self.grant(waiter, d)))
            }
            None => {
                self.waiters.insert(waiter.seq, waiter);
                Ok(None)
            }
        }
    }

    fn resize(
        &mut self,
        ticket: Ticket,
        id: LeaseId,
        vram_bytes: u64,
        timeout: Option<Duration>,
    ) -> Result<ResizeOutcome, Refusal> {
        let lease = self.leases[&id].clone();
        let refusal = if lease.pending_grow.is_some() {
            Some(Refusal::ResizePending(id))
        } else if vram_bytes == 0 && !lease.compute {
            Some(Refusal::Invalid)
        } else if vram_bytes > lease.vram_bytes && vram_bytes > self.capacity(lease.device) {
            Some(Refusal::NeverFits {
                need: vram_bytes,
                capacity: self.capacity(lease.device),
            })
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.end(ticket, End::Refused);
            return Err(refusal);
        }
        if vram_bytes <= lease.vram_bytes {
            self.serve(&[lease.device]);
            self.leases.get_mut(&id).expect("picked").vram_bytes = vram_bytes;
            self.end(ticket, End::Granted);
            return Ok(ResizeOutcome::Done { vram_bytes });
        }
        let extra = vram_bytes - lease.vram_bytes;
        let waiter = Waiter {
            grows: Some(id),
            deadline: timeout.map(|t| self.now + t),
            ..self.arrival(ticket, lease.class, extra, false, vec![lease.device])
        };
        if self.grantable(&waiter, lease.device) {
            self.hold_back();
            self.check_grant(&waiter, lease.device);
            self.grant(waiter, lease.device);
            return Ok(ResizeOutcome::Done { vram_bytes });
        }
        self.leases.get_mut(&id).expect("picked").pending_grow = Some(ticket);
        self.waiters.insert(waiter.seq, waiter);
        Ok(ResizeOutcome::Waiting)
    }

    /// A new request, not yet queued.
    fn arrival(
        &mut self,
        ticket: Ticket,
        class: Class,
        vram_bytes: u64,
        compute: bool,
        candidates: Vec<DeviceIdx>,
    ) -> Waiter {
        self.next_seq += 1;
        Waiter {
            ticket,
            seq: self.next_seq,
            class,
            vram_bytes,
            compute,
            grows: None,
            candidates,
            deadline: None,
            overtaken: 0,
            overtaken_in_all: 0,
            older: self.waiters.len(),
        }
    }

    // ------------------------------------------------------------ the serving rules

    /// The oldest waiter that could be served on `d`.
    fn oldest_on(&self, d: DeviceIdx) -> Option<&Waiter> {
        self.waiters.values().find(|w| w.candidates.contains(&d))
    }

    /// Whether `d` is pinned against `w`: its oldest waiter, older than `w`, has been
    /// overtaken its fill and competes with `w`.
    fn pinned_against(&self, w: &Waiter, d: DeviceIdx) -> bool {
        self.oldest_on(d).is_some_and(|o| {
            o.seq < w.seq && o.overtaken >= self.max_overtakes && o.competes_with(w)
        })
    }

    /// Whether what `w` needs is free on `d`.
    fn fits(&self, w: &Waiter, d: DeviceIdx) -> bool {
        !self.devices[d].drained
            && w.vram_bytes <= self.free(d)
            && (!w.compute || self.free_slots(d, w.class) > 0)
    }

    fn grantable(&self, w: &Waiter, d: DeviceIdx) -> bool {
        self.fits(w, d) && !self.pinned_against(w, d)
    }

    /// Checks a grant of `w` on `d` against the serving rules, in the state just before it
    /// (a waiting `w` still waits, so a pin it holds still holds).
    fn check_grant(&self, w: &Waiter, d: DeviceIdx) {
        assert!(
            w.candidates.contains(&d),
            "{:?} granted on device {d}, not one of its candidates {:?}",
            w.ticket,
            w.candidates
        );
        assert!(
            self.fits(w, d),
            "{:?} granted on device {d} without room: {} bytes free, {} wanted, slots free {}",
            w.ticket,
            self.free(d),
            w.vram_bytes,
            self.free_slots(d, w.class)
        );
        assert!(
            !self.pinned_against(w, d),
            "{:?} granted on device {d} past its oldest waiter {:?}, overtaken {} times already",
            w.ticket,
            self.oldest_on(d).map(|o| o.ticket),
            self.oldest_on(d).map_or(0, |o| o.overtaken)
        );
        if let Some(ahead) = self
            .waiters
            .values()
            .filter(|v| v.key() < w.key() && v.candidates.contains(&d))
            .filter(|v| !self.held_back.contains(&(v.seq, d)))
            .find(|v| self.grantable(v, d))
        {
            panic!(
                "{:?} ({:?}) granted on device {d} while {:?} ({:?}), ahead of it, could be",
                w.ticket, w.class, ahead.ticket, ahead.class
            );
        }
    }

    /// Grants `w` (no longer waiting) on `d`: counts the overtake it is and applies it.
    /// Returns the lease.
    fn grant(&mut self, w: Waiter, d: DeviceIdx) -> LeaseId {
        self.count_overtake(&w, d);
        self.end(w.ticket, End::Granted);
        if let Some(id) = w.grows {
            let lease = self.leases.get_mut(&id).expect("a grow of a live lease");
            lease.vram_bytes += w.vram_bytes;
            lease.pending_grow = None;
            return id;
        }
        let id = self.next_lease;
        self.next_lease += 1;
        self.leases.insert(
            id,
            Lease {
                session: w.ticket.session,
                device: d,
                vram_bytes: w.vram_bytes,
                compute: w.compute,
                class: w.class,
                granted_at: self.now,
                yield_asked: None,
                pending_grow: None,
            },
        );
        id
    }

    /// A grant of `w` on `d` overtakes the oldest waiter there if `w` came later and competes
    /// with it; every later-overtaken waiter that also wants what `w` takes counts it in all.
    fn count_overtake(&mut self, w: &Waiter, d: DeviceIdx) {
        let Some(oldest) = self.oldest_on(d).map(|o| o.seq) else {
            return;
        };
        if oldest > w.seq || !self.waiters[&oldest].competes_with(w) {
            return;
        }
        let max = self.max_overtakes as usize;
        for v in self.waiters.values_mut() {
            if v.seq == oldest {
                v.overtaken += 1;
            }
            if v.seq < w.seq && v.candidates.contains(&d) && v.competes_with(w) {
                v.overtaken_in_all += 1;
                assert!(
                    v.overtaken_in_all as usize <= max * (v.older + 1),
                    "{:?} overtaken {} times with {} older waiters, max_overtakes {max}",
                    v.ticket,
                    v.overtaken_in_all,
                    v.older
                );
            }
        }
    }

    /// Notes every waiter the devices are pinned against now: a pass that skipped it will
    /// not look at it again before the device's next pass.
    fn hold_back(&mut self) {
        let pinned: Vec<(u64, DeviceIdx)> = self
            .waiters
            .values()
            .flat_map(|v| v.candidates.iter().map(move |&d| (v, d)))
            .filter(|&(v, d)| self.pinned_against(v, d))
            .map(|(v, d)| (v.seq, d))
            .collect();
        self.held_back.extend(pinned);
    }

    /// The ledger serves `devices` again after this input: their waiters are looked at anew.
    fn serve(&mut self, devices: &[DeviceIdx]) {
        self.held_back.retain(|(_, d)| !devices.contains(d));
    }

    fn remove_waiter(&mut self, seq: u64) -> Waiter {
        let w = self.waiters.remove(&seq).expect("a waiting request");
        self.held_back.retain(|&(s, _)| s != seq);
        if let Some(lease) = w.grows.and_then(|id| self.leases.get_mut(&id)) {
            lease.pending_grow = None;
        }
        w
    }

    /// Ends a lease; a grow waiting for it is abandoned, which the ledger owes a decision for.
    fn end_lease(&mut self, id: LeaseId) {
        let lease = self.leases.remove(&id).expect("a live lease");
        if let Some(ticket) = lease.pending_grow {
            let seq = self.seq_of(ticket).expect("a pending grow waits");
            self.waiters.remove(&seq);
            self.owed
                .push(Decision::GrowAbandoned { ticket, lease: id });
        }
    }

    fn end(&mut self, ticket: Ticket, end: End) {
        let previous = self.ends.insert(ticket, end);
        assert!(
            previous.is_none(),
            "{ticket:?} ended twice: {previous:?} then {end:?}"
        );
    }

    // ------------------------------------------------------------ judging decisions

    /// Judges one decision of the ledger and applies it. `device` is where the ledger holds
    /// the lease the decision names, if anywhere.
    pub fn observe(&mut self, decision: &Decision, device: Option<DeviceIdx>) {
        if let Some(i) = self.owed.iter().position(|o| o == decision) {
            if let Decision::GrowAbandoned { ticket, .. } = self.owed.remove(i) {
                self.end(ticket, End::Abandoned);
            }
            return;
        }
        match decision {
            Decision::BudgetEnded { .. } => panic!("the reference makes no budgets: {decision:?}"),
            Decision::ReclaimRequested { .. } => {
                panic!("the reference makes no evictable leases: {decision:?}")
            }
            Decision::Granted { ticket, lease } => {
                let seq = self
                    .seq_of(*ticket)
                    .unwrap_or_else(|| panic!("grant for {ticket:?} that was not waiting"));
                assert!(
                    self.waiters[&seq].grows.is_none(),
                    "{ticket:?}: a grow granted as an acquire"
                );
                assert_eq!(*lease, self.next_lease, "lease ids are handed out in order");
                let d = device.unwrap_or_else(|| panic!("granted lease {lease} does not exist"));
                self.hold_back();
                self.check_grant(&self.waiters[&seq], d);
                let w = self.remove_waiter(seq);
                self.grant(w, d);
            }
            Decision::Grew {
                ticket,
                lease,
                vram_bytes,
            } => {
                let seq = self
                    .seq_of(*ticket)
                    .unwrap_or_else(|| panic!("grow for {ticket:?} that was not waiting"));
                let w = &self.waiters[&seq];
                assert_eq!(w.grows, Some(*lease), "{ticket:?} grew another lease");
                let l = &self.leases[lease];
                assert_eq!(*vram_bytes, l.vram_bytes + w.vram_bytes, "grown size");
                let d = l.device;
                self.hold_back();
                self.check_grant(&self.waiters[&seq], d);
                let w = self.remove_waiter(seq);
                self.grant(w, d);
            }
            Decision::TimedOut { ticket } => {
                assert!(self.in_advance, "{ticket:?} timed out without time passing");
                let seq = self
                    .seq_of(*ticket)
                    .unwrap_or_else(|| panic!("timeout for {ticket:?} that was not waiting"));
                let w = self.remove_waiter(seq);
                self.serve(&w.candidates);
                assert!(
                    w.deadline.is_some_and(|at| at <= self.now),
                    "{ticket:?} timed out before its deadline {:?}",
                    w.deadline
                );
                self.end(*ticket, End::TimedOut);
            }
            Decision::GrowDeadlocked { ticket, lease } => {
                let seq = self
                    .seq_of(*ticket)
                    .unwrap_or_else(|| panic!("deadlock of {ticket:?} that was not waiting"));
                assert_eq!(
                    self.waiters[&seq].grows,
                    Some(*lease),
                    "{ticket:?} is that grow"
                );
                let d = self.leases[lease].device;
                // Every grow waiting on the device needs more than all memory but the
                // growers' own could ever give, and this lease is the youngest grower.
                let growers: Vec<(LeaseId, u64)> = self
                    .waiters
                    .values()
                    .filter_map(|w| w.grows.map(|id| (id, w.vram_bytes)))
                    .filter(|(id, _)| self.leases[id].device == d)
                    .collect();
                assert!(
                    growers.len() >= 2,
                    "{ticket:?}: a deadlock needs two growers"
                );
                let held: u64 = growers
                    .iter()
                    .map(|(id, _)| self.leases[id].vram_bytes)
                    .sum();
                let can_come_back = self.capacity(d).saturating_sub(held);
                assert!(
                    growers.iter().all(|(_, need)| *need > can_come_back),
                    "{ticket:?} failed as deadlocked, but a grow on device {d} can still be \
                     served: {growers:?}, {can_come_back} bytes can come back"
                );
                let youngest = growers
                    .iter()
                    .map(|(id, _)| (self.leases[id].granted_at, *id))
                    .max()
                    .map(|(_, id)| id);
                assert_eq!(youngest, Some(*lease), "the youngest grower's grow fails");
                self.remove_waiter(seq);
                self.end(*ticket, End::Deadlocked);
            }
            Decision::GrowAbandoned { ticket, lease } => {
                // Only owed ones come: after the release or revocation of their lease.
                panic!("{ticket:?} abandoned while lease {lease} stays");
            }
            Decision::Revoked {
                session,
                lease,
                reason,
            } => {
                assert_eq!(
                    *reason,
                    RevokeReason::YieldIgnored,
                    "an admin revocation nobody asked for"
                );
                assert!(
                    self.grace_over(*lease),
                    "lease {lease} revoked before its grace ran out"
                );
                let l = self.leases.get(lease).expect("live");
                assert_eq!(l.session, *session, "revocation told to another session");
                let device = l.device;
                // Told first; its grow's abandonment is owed next.
                self.end_lease(*lease);
                self.serve(&[device]);
            }
            Decision::YieldRequested {
                session,
                lease,
                reason,
                revoke_at,
            } => {
                let now = self.now;
                let l = self
                    .leases
                    .get(lease)
                    .unwrap_or_else(|| panic!("yield for lease {lease} that is not live"));
                assert_eq!(l.session, *session, "yield told to another session");
                assert!(l.compute, "yield goes to compute holders only");
                assert!(
                    l.yield_asked.is_none(),
                    "lease {lease} asked to yield twice"
                );
                match reason {
                    YieldReason::MaxHold => {
                        let hold = self.max_hold.get(l.class);
                        assert!(
                            self.in_advance && hold.is_some_and(|h| l.granted_at + h <= now),
                            "lease {lease} asked to yield before its max hold {hold:?}"
                        );
                    }
                    YieldReason::CriticalWaiting => {
                        assert_ne!(l.class, Class::Critical, "critical holders never yield");
                        assert!(
                            self.critical_waits_for(l.device),
                            "yield on device {} with no critical waiter short of a slot",
                            l.device
                        );
                    }
                }
                assert_eq!(*revoke_at, self.revoke_after_yield.map(|g| now + g));
                self.leases.get_mut(lease).expect("live").yield_asked = Some(now);
            }
        }
    }

    fn grace_over(&self, lease: LeaseId) -> bool {
        self.in_advance
            && self.leases.get(&lease).is_some_and(|l| {
                matches!((l.yield_asked, self.revoke_after_yield), (Some(at), Some(g)) if at + g <= self.now)
            })
    }

    /// Whether a critical compute waiter that can use `d` finds no slot on any device it can
    /// use (so compute is what it waits for).
    fn critical_waits_for(&self, d: DeviceIdx) -> bool {
        self.waiters
            .values()
            .filter(|w| w.class == Class::Critical && w.compute)
            .any(|w| {
                let usable: Vec<DeviceIdx> = w
                    .candidates
                    .iter()
                    .copied()
                    .filter(|&c| !self.devices[c].drained)
                    .collect();
                usable.contains(&d) && usable.iter().all(|&c| self.no_slot_for_critical(c))
            })
    }

    /// Whether `d` has no compute slot free for a critical request (with the slots before or
    /// after a reload in progress).
    fn no_slot_for_critical(&self, d: DeviceIdx) -> bool {
        let holders = self.holders(d);
        let none_free = |dev: &Device| dev.slots_for(Class::Critical) <= holders;
        none_free(&self.devices[d])
            || self
                .reloaded_from
                .as_ref()
                .is_some_and(|old| none_free(&old[d]))
    }

    /// Checks what must hold once an input's decisions are all out: every owed decision came,
    /// and after time passed no timer that was due is left unfired.
    pub fn step_done(&mut self) {
        assert!(
            self.owed.is_empty(),
            "decisions never sent: {:?}",
            self.owed
        );
        self.hold_back();
        if !self.in_advance {
            return;
        }
        let now = self.now;
        for w in self.waiters.values() {
            assert!(
                w.deadline.is_none_or(|at| at > now),
                "{:?} still waits past its deadline",
                w.ticket
            );
        }
        for (id, l) in &self.leases {
            let hold = self.max_hold.get(l.class).filter(|_| l.compute);
            assert!(
                l.yield_asked.is_some() || hold.is_none_or(|h| l.granted_at + h > now),
                "lease {id} held past its max hold with no yield notice"
            );
            let grace = self.revoke_after_yield;
            assert!(
                !matches!((l.yield_asked, grace), (Some(at), Some(g)) if at + g <= now),
                "lease {id} not revoked after its grace"
            );
        }
    }
}
