//! The lease ledger and scheduler: a pure, synchronous state machine.
//!
//! The ledger knows devices, leases and waiting requests. It has no clock, no sockets and no
//! tasks: every input carries the current time, and every outcome that is not an immediate
//! answer comes out as a [`Decision`]. It speaks its own vocabulary ([`Class`], [`Placement`],
//! the reasons, [`QueueCounts`]), not the wire's: the hub core converts.
//!
//! Three kinds of methods drive it:
//! - inputs: [`Ledger::acquire`], [`Ledger::resize`], [`Ledger::release`], [`Ledger::cancel`],
//!   [`Ledger::disconnect`], [`Ledger::drain`], [`Ledger::undrain`], [`Ledger::revoke`],
//!   [`Ledger::set_unmanaged`] and [`Ledger::handle_timeout`];
//! - outputs, polled after every input: [`Ledger::poll_decision`] until it returns `None`, then
//!   [`Ledger::poll_timeout`] for the instant at which to call `handle_timeout` next;
//! - views for status: [`Ledger::devices`] (GPUs), [`Ledger::host_pools`], [`Ledger::leases`],
//!   [`Ledger::waiters`].
//!
//! The ledger books *pools*: GPUs, and the host's memory, page-locked memory and CPUs of each
//! NUMA node ([`PoolKind`], docs/HOST.md), after the GPUs. A request with host parts is a group
//! (see the `group` module), so it is granted with its device parts or not at all.
//!
//! ```
//! use std::time::Instant;
//! use gpud::ledger::{AcquireSpec, Decision, DeviceSpec, Ledger, LedgerConfig, Ticket};
//! use gpud::ledger::{Class, Placement, PlacementPolicy, PoolKind, Topology};
//!
//! let gib = 1u64 << 30;
//! let device = DeviceSpec {
//!     kind: PoolKind::Gpu, uuid: "GPU-sim-0".into(), name: "sim".into(), total_bytes: 16 * gib,
//!     headroom_bytes: 0, unmanaged_bytes: 0, compute_slots: 1, critical_slots: 0,
//!     topology: Topology::default(),
//! };
//! let mut ledger = Ledger::new(LedgerConfig::default(), vec![device]);
//! let now = Instant::now();
//! let ask = |request| (Ticket { session: request, request }, AcquireSpec {
//!     placement: Placement::Any, vram_bytes: 10 * gib, compute: true,
//!     class: Class::Normal, timeout: None, label: None,
//!     within: None, budget: None, evictable: false,
//!     parts: vec![], policy: PlacementPolicy::BestFit,
//! });
//! let (first, spec) = ask(1);
//! let lease = ledger.acquire(now, first, spec).unwrap().expect("granted at once");
//! let (second, spec) = ask(2);
//! assert!(ledger.acquire(now, second, spec).unwrap().is_none(), "10 + 10 > 16: it waits");
//! ledger.release(now, 1, lease).unwrap();
//! assert!(matches!(ledger.poll_decision(), Some(Decision::Granted { ticket, .. }) if ticket == second));
//! ```
//!
//! # Scheduling
//! Waiters are served by class (critical first), FIFO within a class. A waiter that does not
//! fit does not block later ones that do (backfill), but the oldest waiter of each device
//! counts the competing grants that overtake it there; after `max_overtakes` of them nothing
//! that competes with it is granted on that device until it is. A waiter is therefore
//! overtaken at most `max_overtakes` times once it is the oldest, and at most
//! `max_overtakes × (older waiters at its arrival + 1)` times in all.
//!
//! A request for several devices (a group, see the `group` module) waits as one waiter on every
//! device its parts may use and is granted on all of them at once, or not at all; a placement
//! policy ([`PlacementPolicy`]) chooses among the devices that can grant.

mod budget;
mod deadlock;
mod device;
mod group;
mod liveness;
mod placement;
mod reclaim;
mod timers;
mod types;
mod vocab;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Instant;

pub use budget::{Budget, BudgetSpec};
use device::Device;
use timers::{Timer, Timers};
pub use types::{
    AcquireSpec, Decision, DeviceIdx, DeviceSpec, Island, Lease, LeaseChange, LedgerConfig,
    LedgerError, Liveness, Need, Part, PerClass, PoolKind, ResizeOutcome, RestoredLease, SessionId,
    Ticket, Topology, Waiter, WaitingPart,
};
// The vocabulary the ledger's inputs and outputs are written in.
pub use vocab::{
    Class, LeaseId, Placement, PlacementPolicy, QueueCounts, RequestId, RevokeReason, YieldReason,
};

/// What a session holds and waits for.
#[derive(Debug, Default)]
struct Holdings {
    leases: BTreeSet<LeaseId>,
    waiters: BTreeSet<u64>,
}

/// What [`Ledger::disconnect`] freed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Disconnected {
    /// Leases released.
    pub leases: Vec<LeaseId>,
    /// Waiting requests withdrawn.
    pub waiters: usize,
}

/// The lease ledger. See the module documentation for how to drive it.
#[derive(Debug)]
pub struct Ledger {
    config: LedgerConfig,
    /// The pools: the GPUs first (`gpus` of them, by gpud index), then the host pools.
    devices: Vec<Device>,
    gpus: usize,
    leases: BTreeMap<LeaseId, Lease>,
    /// Groups by id (their first lease's): their parts' leases, in the parts' order.
    groups: BTreeMap<LeaseId, Vec<LeaseId>>,
    waiters: BTreeMap<u64, Waiter>,
    tickets: HashMap<Ticket, u64>,
    sessions: HashMap<SessionId, Holdings>,
    /// Waiting critical requests that need a compute slot: they may ask holders to yield.
    critical: BTreeSet<u64>,
    timers: Timers,
    decisions: VecDeque<Decision>,
    /// Lease changes for a journal, when recording is on.
    changes: Option<VecDeque<LeaseChange>>,
    next_lease: LeaseId,
    next_seq: u64,
    /// Critical waiters examined by yield passes (see [`Ledger::yield_scans`]).
    yield_scans: u64,
    /// Maximum holds, revocation graces and stopped holders.
    watch: liveness::Watch,
    /// While due timers are handled: the devices whose scheduling waits until all of them are,
    /// so that one scheduling round sees everything they freed.
    deferred: Option<BTreeSet<DeviceIdx>>,
}

impl Ledger {
    /// A ledger over `devices`, indexed in the given order; host pools (docs/HOST.md) are
    /// moved after the GPUs, so that a GPU's index stays its gpud index.
    pub fn new(config: LedgerConfig, devices: Vec<DeviceSpec>) -> Self {
        let (mut gpus, host): (Vec<DeviceSpec>, Vec<DeviceSpec>) =
            devices.into_iter().partition(|d| d.kind.is_gpu());
        let gpu_count = gpus.len();
        gpus.extend(host);
        Self {
            config,
            devices: gpus.into_iter().map(Device::new).collect(),
            gpus: gpu_count,
            leases: BTreeMap::new(),
            groups: BTreeMap::new(),
            waiters: BTreeMap::new(),
            tickets: HashMap::new(),
            sessions: HashMap::new(),
            critical: BTreeSet::new(),
            timers: Timers::default(),
            decisions: VecDeque::new(),
            changes: None,
            next_lease: 1,
            next_seq: 0,
            yield_scans: 0,
            watch: liveness::Watch::default(),
            deferred: None,
        }
    }

    /// The scheduling policy in force.
    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// Replaces the scheduling policy. Leases and waiters stay; new limits apply from now on.
    pub fn set_config(&mut self, now: Instant, config: LedgerConfig) {
        self.config = config;
        self.rearm_liveness();
        for d in 0..self.devices.len() {
            self.schedule(now, d);
        }
    }

    /// Records every lease change for [`Ledger::poll_change`] (a journal's feed). Off by default,
    /// so that callers who do not drain changes do not accumulate them.
    pub fn record_changes(&mut self, on: bool) {
        self.changes = on.then(VecDeque::new);
    }

    /// Puts back a lease that existed before a restart, held by `session` (the daemon's
    /// placeholder for owners that have not reconnected yet). It is taken as it was, even when
    /// the device's capacity or slots have shrunk since: the memory is in use either way. A
    /// lease that would make the device's leases exceed its total memory is refused. A lease
    /// gets its maximum hold again, counted from its original grant.
    pub fn restore(&mut self, session: SessionId, lease: RestoredLease) -> Result<(), LedgerError> {
        if lease.device >= self.devices.len() {
            return Err(LedgerError::UnknownDevice(Placement::Index(
                lease.device as u32,
            )));
        }
        if !self.devices[lease.device].spec.kind.is_gpu()
            && (lease.compute
                || lease.evictable
                || lease.within.is_some()
                || lease.budget_compute_slots.is_some())
        {
            return Err(LedgerError::Invalid(
                "a restored host part holds no compute, is not evictable, and is no budget",
            ));
        }
        if self.leases.contains_key(&lease.id) {
            return Err(LedgerError::Invalid(
                "a restored lease id is already in use",
            ));
        }
        let next = lease.id.checked_add(1).ok_or(LedgerError::Invalid(
            "a restored lease id is the largest there is",
        ))?;
        if lease.within.is_some() && lease.budget_compute_slots.is_some() {
            return Err(LedgerError::Invalid(
                "a restored budget cannot be inside another budget",
            ));
        }
        if let Some(b) = lease.within {
            // A member is restored into its budget (restored before it): its memory is the
            // budget's, and it must fit there as it did.
            let parent = self
                .leases
                .get_mut(&b)
                .filter(|p| p.device == lease.device)
                .ok_or(LedgerError::UnknownBudget(b))?;
            let limit = parent.vram_bytes;
            let books = parent
                .budget
                .as_mut()
                .ok_or(LedgerError::UnknownBudget(b))?;
            if !books.fits(limit, lease.vram_bytes, lease.compute) {
                return Err(LedgerError::Invalid(
                    "restored members would hold more than their budget",
                ));
            }
            books.add(lease.id, lease.vram_bytes, lease.compute, true);
        } else {
            let dev = &mut self.devices[lease.device];
            // More than the device's memory cannot be in use: such a record is not to be
            // trusted, and adding it would overflow or over-commit the books.
            dev.reserved = dev
                .reserved
                .checked_add(lease.vram_bytes)
                .filter(|&reserved| reserved <= dev.spec.total_bytes)
                .ok_or(LedgerError::Invalid(
                    "restored leases would hold more than the device's memory",
                ))?;
        }
        if lease.evictable && (lease.compute || lease.within.is_some()) {
            return Err(LedgerError::Invalid(
                "a restored evictable lease holds memory only, outside budgets",
            ));
        }
        if let Some(g) = lease.group {
            if lease.within.is_some() || lease.evictable || lease.budget_compute_slots.is_some() {
                return Err(LedgerError::Invalid(
                    "a restored part of a group is an ordinary lease",
                ));
            }
            self.restore_part(g, lease.id, lease.device)?;
        }
        let dev = &mut self.devices[lease.device];
        if lease.evictable {
            dev.evictable.insert(lease.id);
            dev.evictable_bytes += lease.vram_bytes;
        }
        if lease.compute {
            dev.holders.push(lease.id);
        }
        self.next_lease = self.next_lease.max(next);
        self.sessions
            .entry(session)
            .or_default()
            .leases
            .insert(lease.id);
        self.leases.insert(
            lease.id,
            Lease {
                id: lease.id,
                session,
                device: lease.device,
                vram_bytes: lease.vram_bytes,
                compute: lease.compute,
                class: lease.class,
                granted_at: lease.granted_at,
                yield_requested: None,
                pending_grow: None,
                label: lease.label,
                within: lease.within,
                budget: lease.budget_compute_slots.map(Budget::new),
                evictable: lease.evictable,
                reclaim_by: None,
                group: lease.group,
            },
        );
        // The hold limit counts from the original grant, across the restart.
        self.hold_started(lease.id);
        Ok(())
    }

    /// Hands a lease, with the rest of its group, to another session (a client re-adopting its
    /// lease after a restart).
    pub fn transfer(&mut self, lease_id: LeaseId, to: SessionId) -> Result<(), LedgerError> {
        self.transfer_group(lease_id, to)
    }

    fn transfer_one(&mut self, lease_id: LeaseId, to: SessionId) {
        let Some(lease) = self.leases.get_mut(&lease_id) else {
            return;
        };
        let from = std::mem::replace(&mut lease.session, to);
        if let Some(h) = self.sessions.get_mut(&from) {
            h.leases.remove(&lease_id);
            if h.leases.is_empty() && h.waiters.is_empty() {
                self.sessions.remove(&from);
            }
        }
        self.sessions.entry(to).or_default().leases.insert(lease_id);
    }

    /// The next lease change to journal.
    #[must_use]
    pub fn poll_change(&mut self) -> Option<LeaseChange> {
        self.changes.as_mut().and_then(VecDeque::pop_front)
    }

    fn changed(&mut self, change: LeaseChange) {
        if let Some(c) = &mut self.changes {
            c.push_back(change);
        }
    }

    /// The next lease id the ledger will hand out (ids are never reused).
    pub fn next_lease_id(&self) -> LeaseId {
        self.next_lease
    }

    /// Makes lease ids start at `id` or later (after a restart, so that old ids stay unique).
    pub fn reserve_lease_ids(&mut self, id: LeaseId) {
        self.next_lease = self.next_lease.max(id);
    }

    // ---------------------------------------------------------------- inputs

    /// Asks for a lease. Returns the lease when it is granted at once, `None` when the request
    /// waits (a [`Decision`] follows), or an error when it is refused.
    pub fn acquire(
        &mut self,
        now: Instant,
        ticket: Ticket,
        spec: AcquireSpec,
    ) -> Result<Option<LeaseId>, LedgerError> {
        if self.tickets.contains_key(&ticket) {
            return Err(LedgerError::DuplicateRequest(ticket.request));
        }
        let mut spec = spec;
        if spec.parts.iter().any(|p| !p.kind.is_gpu() || p.same_node) {
            // Host parts, even one alone, make a group: they are granted, ended and journaled
            // together (docs/HOST.md).
            return self.acquire_group(now, ticket, spec);
        }
        if let [part] = spec.parts.as_slice() {
            // One part is a lease of one device.
            if spec.vram_bytes != 0 || spec.compute || spec.placement != Placement::Any {
                return Err(LedgerError::Invalid(
                    "a request of parts says what each part needs, not the request",
                ));
            }
            spec.placement = part.placement.clone();
            spec.vram_bytes = part.vram_bytes;
            spec.compute = part.compute;
            spec.parts.clear();
        }
        if !spec.parts.is_empty() {
            return self.acquire_group(now, ticket, spec);
        }
        if spec.evictable && (spec.compute || spec.within.is_some() || spec.budget.is_some()) {
            return Err(LedgerError::Invalid(
                "an evictable lease holds memory only, outside budgets",
            ));
        }
        let mut class = spec.class;
        let candidates = match (spec.within, spec.budget) {
            (Some(_), Some(_)) => {
                return Err(LedgerError::Invalid(
                    "a budget cannot be inside another budget",
                ));
            }
            (None, Some(b)) => {
                if spec.compute {
                    return Err(LedgerError::Invalid(
                        "a budget grants compute slots to its members; it does not hold one",
                    ));
                }
                if spec.vram_bytes == 0 && b.compute_slots == 0 {
                    return Err(LedgerError::Invalid(
                        "a budget must hold memory, grant compute slots, or both",
                    ));
                }
                self.resolve(&spec.placement)?
            }
            (Some(b), None) => {
                let d = self.budget_for(b, &spec)?;
                class = self.leases[&b].class;
                vec![d]
            }
            (None, None) => {
                if spec.vram_bytes == 0 && !spec.compute {
                    return Err(LedgerError::Invalid(
                        "a lease must reserve memory, the compute slot, or both",
                    ));
                }
                self.resolve(&spec.placement)?
            }
        };
        let fitting: Vec<DeviceIdx> = candidates
            .iter()
            .copied()
            .filter(|&d| spec.within.is_some() || self.devices[d].capacity() >= spec.vram_bytes)
            .collect();
        if fitting.is_empty() {
            let capacity = candidates
                .iter()
                .map(|&d| self.devices[d].capacity())
                .max()
                .unwrap_or(0);
            return Err(LedgerError::NeverFits {
                need: spec.vram_bytes,
                capacity,
            });
        }
        let waiter = Waiter {
            ticket,
            seq: self.take_seq(),
            class,
            need: Need {
                vram_bytes: spec.vram_bytes,
                compute: spec.compute,
            },
            grows: None,
            placement: spec.placement,
            candidates: fitting,
            arrived: now,
            deadline: spec.timeout.and_then(|t| now.checked_add(t)),
            overtaken: 0,
            label: spec.label,
            within: spec.within,
            budget: spec.budget,
            evictable: spec.evictable,
            policy: spec.policy,
            parts: Vec::new(),
        };
        if let Some(d) = self.best_grantable(&waiter) {
            let id = self.grant(now, waiter, d, false);
            // What it took may be what a waiter now lacks, held elsewhere by a stopped holder.
            self.refresh_stopped(now);
            return Ok(Some(id));
        }
        let candidates = waiter.candidates.clone();
        self.enqueue(waiter);
        self.refresh_yields(now);
        for d in candidates {
            self.refresh_reclaims(now, d);
        }
        self.refresh_stopped(now);
        Ok(None)
    }

    /// Resizes a granted lease. Shrinking (and keeping the size) is immediate; growing waits
    /// like a new request of the lease's class and, if it times out, leaves the lease as it was.
    pub fn resize(
        &mut self,
        now: Instant,
        ticket: Ticket,
        lease_id: LeaseId,
        vram_bytes: u64,
        timeout: Option<std::time::Duration>,
    ) -> Result<ResizeOutcome, LedgerError> {
        let lease = self.owned_lease(ticket.session, lease_id)?;
        if lease.pending_grow.is_some() {
            return Err(LedgerError::ResizePending(lease_id));
        }
        if self.tickets.contains_key(&ticket) {
            return Err(LedgerError::DuplicateRequest(ticket.request));
        }
        let (old, d, class, compute, within, evictable) = (
            lease.vram_bytes,
            lease.device,
            lease.class,
            lease.compute,
            lease.within,
            lease.evictable,
        );
        if lease.budget.is_some() {
            return Err(LedgerError::Invalid(
                "a budget keeps its size; end it and create another",
            ));
        }
        if vram_bytes == 0 && !compute {
            return Err(LedgerError::Invalid(
                "a lease without the compute slot must keep some memory; release it instead",
            ));
        }
        if vram_bytes <= old {
            if let Some(lease) = self.leases.get_mut(&lease_id) {
                lease.vram_bytes = vram_bytes;
            }
            match within.and_then(|b| self.leases.get_mut(&b)?.budget.as_mut()) {
                Some(books) => books.used_bytes -= old - vram_bytes,
                None => self.devices[d].reserved -= old - vram_bytes,
            }
            if evictable {
                self.devices[d].evictable_bytes -= old - vram_bytes;
                if vram_bytes < old {
                    self.reclaim_answered(lease_id);
                }
            }
            if vram_bytes != old {
                self.changed(LeaseChange::Resized {
                    lease: lease_id,
                    vram_bytes,
                });
            }
            self.schedule(now, d);
            return Ok(ResizeOutcome::Done { vram_bytes });
        }
        if let Some(b) = within {
            let limit = self.leases.get(&b).map_or(0, |p| p.vram_bytes);
            if vram_bytes > limit {
                return Err(LedgerError::ExceedsBudget {
                    budget: b,
                    need: vram_bytes,
                    limit,
                });
            }
        } else {
            let capacity = self.devices[d].capacity();
            if vram_bytes > capacity {
                return Err(LedgerError::NeverFits {
                    need: vram_bytes,
                    capacity,
                });
            }
        }
        let waiter = Waiter {
            ticket,
            seq: self.take_seq(),
            class,
            need: Need {
                vram_bytes: vram_bytes - old,
                compute: false,
            },
            grows: Some(lease_id),
            placement: Placement::Index(d as u32),
            candidates: vec![d],
            arrived: now,
            deadline: timeout.and_then(|t| now.checked_add(t)),
            overtaken: 0,
            label: None,
            within,
            budget: None,
            evictable,
            policy: PlacementPolicy::BestFit,
            parts: Vec::new(),
        };
        if self.can_grant(&waiter, d) {
            self.grant(now, waiter, d, false);
            self.refresh_stopped(now);
            return Ok(ResizeOutcome::Done { vram_bytes });
        }
        if let Some(lease) = self.leases.get_mut(&lease_id) {
            lease.pending_grow = Some(ticket);
        }
        self.enqueue(waiter);
        self.break_grow_deadlocks(d);
        self.refresh_stopped(now);
        Ok(ResizeOutcome::Waiting)
    }

    /// Releases a lease the session holds. A grow waiting for it ends with
    /// [`Decision::GrowAbandoned`].
    pub fn release(
        &mut self,
        now: Instant,
        session: SessionId,
        lease_id: LeaseId,
    ) -> Result<(), LedgerError> {
        self.owned_lease(session, lease_id)?;
        let devices: Vec<DeviceIdx> = self
            .end_with_group(lease_id)
            .iter()
            .map(|l| l.device)
            .collect();
        self.schedule_all(now, &devices);
        Ok(())
    }

    /// Withdraws a waiting acquire or grow of the session.
    pub fn cancel(&mut self, now: Instant, ticket: Ticket) -> Result<(), LedgerError> {
        let seq = *self
            .tickets
            .get(&ticket)
            .ok_or(LedgerError::UnknownRequest(ticket.request))?;
        let waiter = self.remove_waiter(seq);
        self.schedule_all(now, &waiter.candidates);
        Ok(())
    }

    /// Ends a session: every lease it holds is released and every request it waits for is
    /// withdrawn, in one step. No decisions are produced for the session itself.
    pub fn disconnect(&mut self, now: Instant, session: SessionId) -> Disconnected {
        self.unwatch(session);
        let Some(holdings) = self.sessions.remove(&session) else {
            return Disconnected::default();
        };
        let mut touched = BTreeSet::new();
        for seq in &holdings.waiters {
            if self.waiters.contains_key(seq) {
                let waiter = self.remove_waiter(*seq);
                touched.extend(waiter.candidates);
            }
        }
        let mut leases = Vec::new();
        for id in holdings.leases {
            if self.leases.contains_key(&id) {
                touched.insert(self.end_lease(id).device);
                leases.push(id);
            }
        }
        // end_lease and remove_waiter re-create an empty entry for the session; drop it.
        self.sessions.remove(&session);
        let touched: Vec<_> = touched.into_iter().collect();
        self.schedule_all(now, &touched);
        Disconnected {
            leases,
            waiters: holdings.waiters.len(),
        }
    }

    /// Takes a lease away from its holder (an administrator's decision).
    pub fn revoke(&mut self, now: Instant, lease_id: LeaseId) -> Result<SessionId, LedgerError> {
        self.revoke_because(now, lease_id, RevokeReason::Admin)
    }

    /// Takes a lease away from its holder for `reason` (the holder hears it as a decision).
    pub fn revoke_because(
        &mut self,
        now: Instant,
        lease_id: LeaseId,
        reason: RevokeReason,
    ) -> Result<SessionId, LedgerError> {
        if !self.leases.contains_key(&lease_id) {
            return Err(LedgerError::NoSuchLease(lease_id));
        }
        Ok(self.revoke_lease(now, lease_id, reason))
    }

    /// Stops granting on a device; existing leases run on.
    pub fn drain(&mut self, now: Instant, device: &Placement) -> Result<DeviceIdx, LedgerError> {
        let d = self.resolve_one(device)?;
        self.devices[d].drained = true;
        self.refresh_yields(now);
        Ok(d)
    }

    /// Grants on a drained device again.
    pub fn undrain(&mut self, now: Instant, device: &Placement) -> Result<DeviceIdx, LedgerError> {
        let d = self.resolve_one(device)?;
        self.devices[d].drained = false;
        self.schedule(now, d);
        Ok(d)
    }

    /// Sets every device's compute slots (at least 1) and critical slots (a configuration
    /// reload). Holders keep their slots when the counts drop: a device grants no more compute
    /// until its holders are below the new count. More slots serve waiters at once.
    pub fn set_slots(&mut self, now: Instant, compute_slots: u32, critical_slots: u32) {
        for d in 0..self.gpus {
            let spec = &mut self.devices[d].spec;
            spec.compute_slots = compute_slots.max(1);
            spec.critical_slots = critical_slots;
            self.schedule(now, d);
        }
    }

    /// Records how much memory processes without a lease use on a device; it lowers capacity.
    /// Waiters that no longer fit keep waiting (the usage may drop again).
    pub fn set_unmanaged(&mut self, now: Instant, device: DeviceIdx, bytes: u64) {
        let Some(dev) = self.devices.get_mut(device) else {
            return;
        };
        let grew = bytes < dev.spec.unmanaged_bytes;
        dev.spec.unmanaged_bytes = bytes;
        if grew {
            self.schedule(now, device);
        } else {
            // Less memory can come back to growers that wait there.
            self.break_grow_deadlocks(device);
            self.refresh_stopped(now);
        }
    }

    /// Fires every timer due at `now`: request timeouts, maximum holds, revocations.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Timers due together (reclaim deadlines asked in one pass share theirs) free what
        // they free first; then one scheduling round grants and decides on all of it, instead
        // of a round per timer that reclaims or grants for memory the next timer frees anyway.
        let outer = self.deferred.is_none();
        if outer {
            self.deferred = Some(BTreeSet::new());
        }
        self.handle_due_timers(now);
        if outer {
            let touched: Vec<DeviceIdx> = self
                .deferred
                .take()
                .unwrap_or_default()
                .into_iter()
                .collect();
            self.schedule_all(now, &touched);
        }
    }

    fn handle_due_timers(&mut self, now: Instant) {
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::WaitDeadline(seq) => {
                    if let Some(waiter) = self.waiters.get(&seq) {
                        let ticket = waiter.ticket;
                        // The timer is already popped; remove_waiter's disarm is a no-op.
                        let waiter = self.remove_waiter(seq);
                        self.decisions.push_back(Decision::TimedOut { ticket });
                        self.schedule_all(now, &waiter.candidates);
                    }
                }
                Timer::MaxHold(id) => self.max_hold_reached(now, id),
                Timer::RevokeGrace(id) => self.yield_grace_over(now, id),
                Timer::ReclaimDeadline(id) => self.reclaim_deadline(now, id),
                Timer::Stopped(session) => self.stopped_grace_over(now, session),
            }
        }
    }

    // ---------------------------------------------------------------- outputs

    /// The next decision to deliver.
    #[must_use]
    pub fn poll_decision(&mut self) -> Option<Decision> {
        self.decisions.pop_front()
    }

    /// When [`Ledger::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    // ---------------------------------------------------------------- views

    /// Every device (GPU), by index; host pools are [`Ledger::host_pools`].
    pub fn devices(&self) -> impl ExactSizeIterator<Item = DeviceView<'_>> + '_ {
        self.devices[..self.gpus]
            .iter()
            .enumerate()
            .map(move |(index, device)| DeviceView {
                index,
                device,
                ledger: self,
            })
    }

    /// One device (GPU); `None` for a host pool's index.
    pub fn device(&self, index: DeviceIdx) -> Option<DeviceView<'_>> {
        self.devices[..self.gpus]
            .get(index)
            .map(|device| DeviceView {
                index,
                device,
                ledger: self,
            })
    }

    /// The host pools (memory, page-locked memory, CPUs by NUMA node), by ledger index: they
    /// come after the GPUs.
    pub fn host_pools(&self) -> impl ExactSizeIterator<Item = DeviceView<'_>> + '_ {
        let gpus = self.gpus;
        self.devices[gpus..]
            .iter()
            .enumerate()
            .map(move |(i, device)| DeviceView {
                index: gpus + i,
                device,
                ledger: self,
            })
    }

    /// Any pool, a GPU or a host pool, by ledger index.
    pub fn pool(&self, index: DeviceIdx) -> Option<DeviceView<'_>> {
        self.devices.get(index).map(|device| DeviceView {
            index,
            device,
            ledger: self,
        })
    }

    /// The first host pool of `kind` named `uuid` (or, for `None`, the first of `kind`).
    pub fn host_pool(&self, kind: PoolKind, uuid: Option<&str>) -> Option<DeviceIdx> {
        self.host_pools()
            .find(|p| p.spec().kind == kind && uuid.is_none_or(|u| p.spec().uuid == u))
            .map(|p| p.index())
    }

    /// Every granted lease, by id.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> + '_ {
        self.leases.values()
    }

    /// Granted leases with ids greater than `after`, by id.
    pub fn leases_after(&self, after: LeaseId) -> impl Iterator<Item = &Lease> + '_ {
        self.leases
            .range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
            .map(|(_, lease)| lease)
    }

    /// One lease.
    pub fn lease(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(&id)
    }

    /// Every waiting request, in the order they are served.
    pub fn waiters(&self) -> Vec<&Waiter> {
        let mut all: Vec<&Waiter> = self.waiters.values().collect();
        all.sort_by_key(|w| (w.class.rank(), w.seq));
        all
    }

    /// The waiter behind a ticket.
    pub fn waiter(&self, ticket: Ticket) -> Option<&Waiter> {
        self.tickets.get(&ticket).and_then(|s| self.waiters.get(s))
    }

    /// Leases held by a session.
    pub fn session_leases(&self, session: SessionId) -> Vec<LeaseId> {
        self.sessions
            .get(&session)
            .map(|h| h.leases.iter().copied().collect())
            .unwrap_or_default()
    }

    /// How many leases a session holds and how many requests it has waiting.
    pub fn session_counts(&self, session: SessionId) -> (usize, usize) {
        self.sessions
            .get(&session)
            .map_or((0, 0), |h| (h.leases.len(), h.waiters.len()))
    }

    /// Finds the device a placement names (`any` names none).
    pub fn resolve_one(&self, placement: &Placement) -> Result<DeviceIdx, LedgerError> {
        match placement {
            Placement::Any => Err(LedgerError::UnknownDevice(Placement::Any)),
            _ => self.resolve(placement).map(|v| v[0]),
        }
    }

    /// Checks the ledger's internal consistency; used by tests and debug builds.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (d, dev) in self.devices.iter().enumerate() {
            let on_device: Vec<&Lease> = self.leases.values().filter(|l| l.device == d).collect();
            let sum: u64 = on_device
                .iter()
                .filter(|l| l.within.is_none())
                .map(|l| l.vram_bytes)
                .sum();
            if sum != dev.reserved {
                return Err(format!(
                    "device {d}: reserved {} != leases {sum}",
                    dev.reserved
                ));
            }
            let compute: BTreeSet<LeaseId> = on_device
                .iter()
                .filter(|l| l.compute)
                .map(|l| l.id)
                .collect();
            let holders: BTreeSet<LeaseId> = dev.holders.iter().copied().collect();
            if compute != holders || holders.len() != dev.holders.len() {
                return Err(format!(
                    "device {d}: holders {holders:?} != compute leases {compute:?}"
                ));
            }
            if !dev.spec.kind.is_gpu()
                && on_device.iter().any(|l| {
                    l.compute
                        || l.evictable
                        || l.within.is_some()
                        || l.budget.is_some()
                        || l.group.is_none()
                })
            {
                return Err(format!(
                    "host pool {d}: a lease computes, is evictable, is in a budget or is no group's"
                ));
            }
            // Holders may outnumber the slots after a reload lowered them ([`Ledger::set_slots`]);
            // that no grant exceeds them is what the property tests check, grant by grant.
            let evictable: BTreeSet<LeaseId> = on_device
                .iter()
                .filter(|l| l.evictable)
                .map(|l| l.id)
                .collect();
            let evictable_bytes: u64 = on_device
                .iter()
                .filter(|l| l.evictable)
                .map(|l| l.vram_bytes)
                .sum();
            if evictable != dev.evictable || evictable_bytes != dev.evictable_bytes {
                return Err(format!("device {d}: evictable books differ"));
            }
            if on_device
                .iter()
                .any(|l| l.evictable && (l.compute || l.within.is_some()))
            {
                return Err(format!(
                    "device {d}: an evictable lease holds compute or is a member"
                ));
            }
            let budget_queued = self
                .waiters
                .values()
                .filter(|w| w.within.is_some() && w.candidates.contains(&d))
                .count();
            if budget_queued != dev.budget_queued {
                return Err(format!(
                    "device {d}: {} budget waiters counted, {budget_queued} queued",
                    dev.budget_queued
                ));
            }
            if dev.queue.len() != dev.by_age.len() {
                return Err(format!("device {d}: queue and age index differ"));
            }
            for (rank, seq) in &dev.queue {
                let Some(w) = self.waiters.get(seq) else {
                    return Err(format!("device {d}: queued waiter {seq} is gone"));
                };
                if w.class.rank() != *rank
                    || !w.candidates.contains(&d)
                    || !dev.by_age.contains(seq)
                {
                    return Err(format!("device {d}: waiter {seq} misfiled"));
                }
            }
        }
        for w in self.waiters.values() {
            if self.tickets.get(&w.ticket) != Some(&w.seq) {
                return Err(format!("waiter {} has no ticket", w.seq));
            }
            for &d in &w.candidates {
                if !self.devices[d].queue.contains(&(w.class.rank(), w.seq)) {
                    return Err(format!("waiter {} missing from device {d}", w.seq));
                }
            }
            if !self
                .sessions
                .get(&w.ticket.session)
                .is_some_and(|h| h.waiters.contains(&w.seq))
            {
                return Err(format!("waiter {} not in its session", w.seq));
            }
        }
        if self.tickets.len() != self.waiters.len() {
            return Err("stale tickets".into());
        }
        self.check_groups()?;
        for l in self.leases.values() {
            if let Some(books) = &l.budget {
                self.check_budget(l, books)?;
            }
            if let Some(b) = l.within {
                let parent = self.leases.get(&b).filter(|p| p.device == l.device);
                if !parent
                    .is_some_and(|p| p.budget.as_ref().is_some_and(|x| x.members.contains(&l.id)))
                {
                    return Err(format!("lease {} is not a member of budget {b}", l.id));
                }
            }
            if !self
                .sessions
                .get(&l.session)
                .is_some_and(|h| h.leases.contains(&l.id))
            {
                return Err(format!("lease {} not in its session", l.id));
            }
        }
        Ok(())
    }

    /// A budget's books agree with its members and waiters, and stay within its limits.
    fn check_budget(&self, budget: &Lease, books: &Budget) -> Result<(), String> {
        let b = budget.id;
        if budget.within.is_some() || budget.compute {
            return Err(format!("budget {b} is nested or holds a compute slot"));
        }
        let members: BTreeSet<LeaseId> = self
            .leases
            .values()
            .filter(|l| l.within == Some(b))
            .map(|l| l.id)
            .collect();
        if members != books.members {
            return Err(format!(
                "budget {b}: members {:?} != {members:?}",
                books.members
            ));
        }
        let used: u64 = members.iter().map(|m| self.leases[m].vram_bytes).sum();
        let compute = members.iter().filter(|m| self.leases[m].compute).count() as u32;
        if used != books.used_bytes || compute != books.compute_used {
            return Err(format!("budget {b}: books {used}/{compute} differ"));
        }
        if used > budget.vram_bytes || compute > books.compute_slots {
            return Err(format!("budget {b}: members hold more than it"));
        }
        let waiting: BTreeSet<u64> = self
            .waiters
            .values()
            .filter(|w| w.within == Some(b))
            .map(|w| w.seq)
            .collect();
        if waiting != books.waiting {
            return Err(format!("budget {b}: waiting members differ"));
        }
        Ok(())
    }

    // ---------------------------------------------------------------- internals

    pub(super) fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// The GPUs a placement names.
    pub(super) fn resolve(&self, placement: &Placement) -> Result<Vec<DeviceIdx>, LedgerError> {
        self.resolve_kind(PoolKind::Gpu, placement)
    }

    /// The pools of `kind` a placement names (an index is the ledger's).
    pub(super) fn resolve_kind(
        &self,
        kind: PoolKind,
        placement: &Placement,
    ) -> Result<Vec<DeviceIdx>, LedgerError> {
        let unknown = || LedgerError::UnknownDevice(placement.clone());
        let of_kind = |d: &DeviceIdx| self.devices[*d].spec.kind == kind;
        let all: Vec<DeviceIdx> = (0..self.devices.len()).filter(of_kind).collect();
        match placement {
            Placement::Any if all.is_empty() => Err(unknown()),
            Placement::Any => Ok(all),
            Placement::Index(i) => {
                let i = *i as usize;
                if all.contains(&i) {
                    Ok(vec![i])
                } else {
                    Err(unknown())
                }
            }
            Placement::Uuid(uuid) => all
                .into_iter()
                .find(|&d| self.devices[d].spec.uuid.eq_ignore_ascii_case(uuid))
                .map(|d| vec![d])
                .ok_or_else(unknown),
        }
    }

    fn owned_lease(&self, session: SessionId, id: LeaseId) -> Result<&Lease, LedgerError> {
        self.leases
            .get(&id)
            .filter(|l| l.session == session)
            .ok_or(LedgerError::UnknownLease(id))
    }

    /// Whether the oldest waiter on `d` is protected against `waiter` and blocks it.
    pub(super) fn blocked_by_oldest(&self, waiter: &Waiter, d: DeviceIdx) -> bool {
        let Some(&oldest) = self.devices[d].by_age.first() else {
            return false;
        };
        if oldest >= waiter.seq {
            return false;
        }
        self.waiters.get(&oldest).is_some_and(|o| {
            o.overtaken >= self.config.max_overtakes && self.pin_applies(o, waiter, d)
        })
    }

    /// Whether granting `waiter` on `d` takes what the oldest waiter `o` waits for there.
    ///
    /// A budget's member takes no device memory, only (maybe) a compute slot; while `o` waits
    /// for memory, that slot is not what keeps it waiting, and holding the slot back would stall
    /// the budget's job, whose budget holds the very memory `o` waits for.
    fn pin_applies(&self, o: &Waiter, waiter: &Waiter, d: DeviceIdx) -> bool {
        let o_need = o.need_on(d);
        // Warm state yields to real work: an evictable waiter is protected against other
        // evictable requests only (it is not granted while they wait for memory anyway).
        (!o.evictable || waiter.evictable)
            && self.waits_for_device(o)
            && o_need.competes_with(&waiter.need_on(d))
            && !(waiter.within.is_some() && o_need.vram_bytes > self.devices[d].free())
    }

    /// Whether a waiter waits for the device rather than for its budget: a member whose budget
    /// is full waits for its siblings, and nothing granted elsewhere on the device overtakes it.
    fn waits_for_device(&self, waiter: &Waiter) -> bool {
        waiter
            .within
            .is_none_or(|b| self.budget_fits(b, &waiter.need))
    }

    /// Whether `need` fits next to what budget `b`'s members hold.
    fn budget_fits(&self, b: LeaseId, need: &Need) -> bool {
        self.leases.get(&b).is_some_and(|parent| {
            parent
                .budget
                .as_ref()
                .is_some_and(|books| books.fits(parent.vram_bytes, need.vram_bytes, need.compute))
        })
    }

    /// The device of budget `b` for a member asking `spec`, if the member could ever fit.
    fn budget_for(&self, b: LeaseId, spec: &AcquireSpec) -> Result<DeviceIdx, LedgerError> {
        let parent = self
            .leases
            .get(&b)
            .filter(|p| p.budget.is_some())
            .ok_or(LedgerError::UnknownBudget(b))?;
        let d = parent.device;
        if !matches!(spec.placement, Placement::Any) && !self.resolve(&spec.placement)?.contains(&d)
        {
            return Err(LedgerError::Invalid(
                "a lease from a budget is on the budget's device; ask for any device",
            ));
        }
        if spec.vram_bytes == 0 && !spec.compute {
            return Err(LedgerError::Invalid(
                "a lease must reserve memory, the compute slot, or both",
            ));
        }
        if spec.vram_bytes > parent.vram_bytes {
            return Err(LedgerError::ExceedsBudget {
                budget: b,
                need: spec.vram_bytes,
                limit: parent.vram_bytes,
            });
        }
        if spec.compute && parent.budget.as_ref().is_some_and(|x| x.compute_slots == 0) {
            return Err(LedgerError::BudgetWithoutCompute(b));
        }
        Ok(d)
    }

    pub(super) fn can_grant(&self, waiter: &Waiter, d: DeviceIdx) -> bool {
        let dev = &self.devices[d];
        let fits = match waiter.within {
            Some(b) => self.budget_fits(b, &waiter.need),
            None => waiter.need.vram_bytes <= dev.free(),
        };
        !dev.drained
            && fits
            && (!waiter.need.compute || dev.free_slots(waiter.class) > 0)
            && (!waiter.evictable || !self.memory_wanted(d, waiter.need.vram_bytes))
            && !self.blocked_by_oldest(waiter, d)
    }

    pub(super) fn enqueue(&mut self, waiter: Waiter) {
        let key = (waiter.class.rank(), waiter.seq);
        for &d in &waiter.candidates {
            self.devices[d].queue.insert(key);
            self.devices[d].by_age.insert(waiter.seq);
        }
        if let Some(deadline) = waiter.deadline {
            self.timers.arm(deadline, Timer::WaitDeadline(waiter.seq));
        }
        // A group's waiting asks no holder to yield (one yield cannot free several devices).
        if waiter.class == Class::Critical && waiter.need.compute && waiter.parts.is_empty() {
            self.critical.insert(waiter.seq);
        }
        if let Some(b) = waiter.within {
            for &d in &waiter.candidates {
                self.devices[d].budget_queued += 1;
            }
            if let Some(books) = self.leases.get_mut(&b).and_then(|p| p.budget.as_mut()) {
                books.waiting.insert(waiter.seq);
            }
        }
        self.tickets.insert(waiter.ticket, waiter.seq);
        self.sessions
            .entry(waiter.ticket.session)
            .or_default()
            .waiters
            .insert(waiter.seq);
        self.waiters.insert(waiter.seq, waiter);
    }

    fn remove_waiter(&mut self, seq: u64) -> Waiter {
        let Some(waiter) = self.waiters.remove(&seq) else {
            unreachable!("remove_waiter({seq}) on a waiter that is not queued")
        };
        let key = (waiter.class.rank(), seq);
        for &d in &waiter.candidates {
            self.devices[d].queue.remove(&key);
            self.devices[d].by_age.remove(&seq);
        }
        if let Some(deadline) = waiter.deadline {
            self.timers.disarm(deadline, Timer::WaitDeadline(seq));
        }
        self.critical.remove(&seq);
        if let Some(b) = waiter.within {
            for &d in &waiter.candidates {
                self.devices[d].budget_queued -= 1;
            }
            if let Some(books) = self.leases.get_mut(&b).and_then(|p| p.budget.as_mut()) {
                books.waiting.remove(&seq);
            }
        }
        self.tickets.remove(&waiter.ticket);
        if let Some(h) = self.sessions.get_mut(&waiter.ticket.session) {
            h.waiters.remove(&seq);
        }
        if let Some(lease) = waiter.grows.and_then(|id| self.leases.get_mut(&id)) {
            lease.pending_grow = None;
        }
        waiter
    }

    /// Grants `waiter` (no longer queued) on `d`. Deferred grants become decisions; immediate
    /// ones (`immediate == false` means the caller answers itself) do not.
    pub(super) fn grant(
        &mut self,
        now: Instant,
        waiter: Waiter,
        d: DeviceIdx,
        deferred: bool,
    ) -> LeaseId {
        // The oldest waiter still waiting here is overtaken if this grant competes with it.
        if let Some(&oldest) = self.devices[d].by_age.first() {
            if oldest < waiter.seq {
                let overtaken = self
                    .waiters
                    .get(&oldest)
                    .is_some_and(|o| self.pin_applies(o, &waiter, d));
                if let Some(o) = self.waiters.get_mut(&oldest).filter(|_| overtaken) {
                    o.overtaken += 1;
                }
            }
        }
        let dev = &mut self.devices[d];
        dev.reserved += waiter.device_need().vram_bytes;
        if let Some(b) = waiter.within {
            let member = waiter.grows.unwrap_or(self.next_lease);
            if let Some(books) = self.leases.get_mut(&b).and_then(|p| p.budget.as_mut()) {
                books.add(
                    member,
                    waiter.need.vram_bytes,
                    waiter.need.compute,
                    waiter.grows.is_none(),
                );
            }
        }
        let dev = &mut self.devices[d];
        if waiter.evictable {
            dev.evictable_bytes += waiter.need.vram_bytes;
            if waiter.grows.is_none() {
                dev.evictable.insert(self.next_lease);
            }
        }
        if let Some(id) = waiter.grows {
            let lease = self
                .leases
                .get_mut(&id)
                .unwrap_or_else(|| unreachable!("grow waiter for missing lease {id}"));
            lease.vram_bytes += waiter.need.vram_bytes;
            lease.pending_grow = None;
            let vram_bytes = lease.vram_bytes;
            if deferred {
                self.decisions.push_back(Decision::Grew {
                    ticket: waiter.ticket,
                    lease: id,
                    vram_bytes,
                });
            }
            self.changed(LeaseChange::Resized {
                lease: id,
                vram_bytes,
            });
            return id;
        }
        let id = self.next_lease;
        self.next_lease += 1;
        if waiter.need.compute {
            dev.holders.push(id);
        }
        let session = waiter.budget.map_or(waiter.ticket.session, |b| b.holder);
        self.leases.insert(
            id,
            Lease {
                id,
                session,
                device: d,
                vram_bytes: waiter.need.vram_bytes,
                compute: waiter.need.compute,
                class: waiter.class,
                granted_at: now,
                yield_requested: None,
                pending_grow: None,
                label: waiter.label,
                within: waiter.within,
                budget: waiter.budget.map(|b| Budget::new(b.compute_slots)),
                evictable: waiter.evictable,
                reclaim_by: None,
                group: None,
            },
        );
        self.sessions.entry(session).or_default().leases.insert(id);
        self.hold_started(id);
        if deferred {
            self.decisions.push_back(Decision::Granted {
                ticket: waiter.ticket,
                lease: id,
            });
        }
        self.changed(LeaseChange::Granted(id));
        id
    }

    /// Removes a lease and frees what it held; a grow waiting for it is abandoned.
    pub(super) fn end_lease(&mut self, id: LeaseId) -> Lease {
        self.end_members(id);
        let Some(lease) = self.leases.remove(&id) else {
            unreachable!("end_lease({id}) on a lease that does not exist")
        };
        self.leave_group(&lease);
        if let Some(books) = lease
            .within
            .and_then(|b| self.leases.get_mut(&b)?.budget.as_mut())
        {
            books.remove(id, lease.vram_bytes, lease.compute);
        }
        if let Some(ticket) = lease.pending_grow {
            if let Some(&seq) = self.tickets.get(&ticket) {
                self.remove_waiter(seq);
                self.decisions
                    .push_back(Decision::GrowAbandoned { ticket, lease: id });
            }
        }
        if let Some(at) = lease.reclaim_by {
            self.timers.disarm(at, Timer::ReclaimDeadline(id));
        }
        let dev = &mut self.devices[lease.device];
        if lease.within.is_none() {
            dev.reserved -= lease.vram_bytes;
        }
        if lease.evictable {
            dev.evictable.remove(&id);
            dev.evictable_bytes -= lease.vram_bytes;
        }
        dev.holders.retain(|&h| h != id);
        self.hold_ended(id);
        if let Some(h) = self.sessions.get_mut(&lease.session) {
            h.leases.remove(&id);
        }
        self.changed(LeaseChange::Ended(id));
        lease
    }

    /// Before budget `id` ends: its waiting members are withdrawn and its members revoked
    /// (all on the budget's device, which the caller schedules). Nothing for other leases.
    fn end_members(&mut self, id: LeaseId) {
        let Some(books) = self.leases.get(&id).and_then(|l| l.budget.as_ref()) else {
            return;
        };
        let (waiting, members) = (books.waiting.clone(), books.members.clone());
        for seq in waiting {
            // A member's grow ends with its member, as GrowAbandoned.
            if self.waiters.get(&seq).is_none_or(|w| w.grows.is_some()) {
                continue;
            }
            let waiter = self.remove_waiter(seq);
            self.decisions.push_back(Decision::BudgetEnded {
                ticket: waiter.ticket,
                budget: id,
            });
        }
        for member in members {
            if self.leases.contains_key(&member) {
                // Told before the member's abandoned grow, as in `revoke_lease`.
                let mark = self.decisions.len();
                let lease = self.end_lease(member);
                self.decisions.insert(
                    mark,
                    Decision::Revoked {
                        session: lease.session,
                        lease: member,
                        reason: RevokeReason::BudgetEnded,
                    },
                );
            }
        }
    }

    /// Takes lease `id` away, with the rest of its group (each part hears it as a decision).
    fn revoke_lease(&mut self, now: Instant, id: LeaseId, reason: RevokeReason) -> SessionId {
        // The revocation is told before what follows from it (an abandoned grow), so a holder
        // that reads the grow's answer already knows its lease is gone.
        let mark = self.decisions.len();
        let ended = self.end_with_group(id);
        let mut session = None;
        for (i, lease) in ended.iter().enumerate() {
            session.get_or_insert(lease.session);
            self.decisions.insert(
                mark + i,
                Decision::Revoked {
                    session: lease.session,
                    lease: lease.id,
                    reason,
                },
            );
        }
        let devices: Vec<DeviceIdx> = ended.iter().map(|l| l.device).collect();
        self.schedule_all(now, &devices);
        session.unwrap_or_default()
    }

    /// The first `max_scan` waiters of `d`, in the order they are served.
    fn serving_order(&self, d: DeviceIdx) -> Vec<u64> {
        self.devices[d]
            .queue
            .iter()
            .take(self.config.max_scan)
            .map(|&(_, seq)| seq)
            .collect()
    }

    fn schedule(&mut self, now: Instant, d: DeviceIdx) {
        self.schedule_all(now, &[d]);
    }

    /// One scheduling round over `devices`: grants what can be granted on each, in serving
    /// order, examining at most `max_scan` waiters per device; then stopped holders that
    /// waiters need, yield notices and reclaims, last, so that a reclaim is asked in the state
    /// that the round leaves (no grant of the round comes after it).
    ///
    /// A group granted in a pass was queued on other devices too: its pin there is gone, so
    /// those devices (and `d`, where what came before the group met its pin) get a pass of
    /// their own, until a round of passes grants no group.
    fn schedule_all(&mut self, now: Instant, devices: &[DeviceIdx]) {
        if let Some(deferred) = self.deferred.as_mut() {
            deferred.extend(devices.iter().copied());
            return;
        }
        // Popped from the back: the first device is served first.
        let mut pending: Vec<DeviceIdx> = Vec::with_capacity(devices.len());
        for &d in devices.iter().rev() {
            if !pending.contains(&d) {
                pending.push(d);
            }
        }
        let mut passed = BTreeSet::new();
        while let Some(d) = pending.pop() {
            passed.insert(d);
            for e in self.grant_pass(now, d) {
                if !pending.contains(&e) {
                    pending.push(e);
                }
            }
        }
        self.refresh_stopped(now);
        self.refresh_yields(now);
        for &d in &passed {
            // What unleased processes use can shrink a device under waiting grows.
            self.break_grow_deadlocks(d);
        }
        for d in passed {
            self.refresh_reclaims(now, d);
        }
    }

    /// One pass over `d`'s waiters. Returns the devices the groups it granted were queued on.
    fn grant_pass(&mut self, now: Instant, d: DeviceIdx) -> BTreeSet<DeviceIdx> {
        let mut unpinned = BTreeSet::new();
        let dev = &self.devices[d];
        if dev.queue.is_empty() || dev.exhausted() {
            return unpinned;
        }
        for seq in self.serving_order(d) {
            if self.devices[d].exhausted() {
                break;
            }
            let Some(w) = self.waiters.get(&seq) else {
                continue;
            };
            if w.parts.is_empty() {
                if self.can_grant(w, d) {
                    let waiter = self.remove_waiter(seq);
                    self.grant(now, waiter, d, true);
                }
            } else if let Some(devices) = self.group_grantable(w) {
                let waiter = self.remove_waiter(seq);
                unpinned.extend(waiter.candidates.iter().copied());
                self.grant_group(now, waiter, &devices, true);
            }
        }
        unpinned
    }

    /// Asks compute holders to yield for critical waiters: one holder per critical waiter, on
    /// the candidate device whose non-critical holder has held longest.
    ///
    /// Only a device with no free slot, not drained, with a holder not yet asked, can be asked
    /// again; once none is left no later waiter changes anything, and the pass stops. So a pass
    /// costs the devices' holders plus the waiters walked until then, not every queued critical
    /// waiter on every scheduling pass (thousands of them stalled the daemon).
    fn refresh_yields(&mut self, now: Instant) {
        if self.critical.is_empty() {
            return;
        }
        let mut unasked: Vec<usize> = (0..self.devices.len())
            .map(|d| {
                let dev = &self.devices[d];
                if dev.drained || dev.free_slots(Class::Critical) > 0 {
                    return 0;
                }
                self.yieldable(d)
                    .iter()
                    .filter(|l| l.yield_requested.is_none())
                    .count()
            })
            .collect();
        let mut remaining: usize = unasked.iter().sum();
        let mut wanted: HashMap<DeviceIdx, usize> = HashMap::new();
        let mut after = None;
        while remaining > 0 {
            let next = match after {
                None => self.critical.first(),
                Some(seq) => self
                    .critical
                    .range((std::ops::Bound::Excluded(seq), std::ops::Bound::Unbounded))
                    .next(),
            };
            let Some(&seq) = next else { break };
            after = Some(seq);
            self.yield_scans += 1;
            let Some(waiter) = self.waiters.get(&seq) else {
                continue;
            };
            let usable: Vec<DeviceIdx> = waiter
                .candidates
                .iter()
                .copied()
                .filter(|&d| !self.devices[d].drained)
                .collect();
            // A free slot somewhere means compute is not what it waits for.
            if usable.is_empty()
                || usable
                    .iter()
                    .any(|&d| self.devices[d].free_slots(Class::Critical) > 0)
            {
                continue;
            }
            let target = usable
                .iter()
                .copied()
                .min_by_key(|&d| self.yieldable(d).first().map(|l| (l.granted_at, l.id)));
            let Some(d) = target else { continue };
            let count = wanted.entry(d).or_default();
            *count += 1;
            let asked = self.devices[d]
                .holders
                .iter()
                .filter(|id| {
                    self.leases
                        .get(id)
                        .is_some_and(|l| l.yield_requested.is_some())
                })
                .count();
            if asked < *count {
                if let Some(id) = self
                    .yieldable(d)
                    .into_iter()
                    .find(|l| l.yield_requested.is_none())
                    .map(|l| l.id)
                {
                    self.request_yield(now, id, YieldReason::CriticalWaiting);
                    unasked[d] -= 1;
                    remaining -= 1;
                }
            }
        }
    }

    /// Critical waiters examined by yield passes so far: a measure of the passes' cost that
    /// tests and benchmarks can read without a clock.
    pub fn yield_scans(&self) -> u64 {
        self.yield_scans
    }

    /// Non-critical compute holders of `d`, longest-held first.
    fn yieldable(&self, d: DeviceIdx) -> Vec<&Lease> {
        let mut v: Vec<&Lease> = self.devices[d]
            .holders
            .iter()
            .filter_map(|id| self.leases.get(id))
            .filter(|l| l.class != Class::Critical)
            .collect();
        v.sort_by_key(|l| (l.granted_at, l.id));
        v
    }

    fn request_yield(&mut self, now: Instant, id: LeaseId, reason: YieldReason) {
        let Some(grace) = self.leases.get(&id).map(|l| self.yield_grace(l)) else {
            return;
        };
        let revoke_at = grace.and_then(|g| now.checked_add(g));
        if let Some(at) = revoke_at {
            self.revoke_armed(id, at);
        }
        let Some(lease) = self.leases.get_mut(&id) else {
            return;
        };
        lease.yield_requested = Some((reason, now));
        self.decisions.push_back(Decision::YieldRequested {
            session: lease.session,
            lease: id,
            reason,
            revoke_at,
        });
    }
}

/// A read-only view of one device.
#[derive(Clone, Copy)]
pub struct DeviceView<'a> {
    index: DeviceIdx,
    device: &'a Device,
    ledger: &'a Ledger,
}

impl<'a> DeviceView<'a> {
    /// The device's index.
    pub fn index(&self) -> DeviceIdx {
        self.index
    }
    /// What the ledger knows of it.
    pub fn spec(&self) -> &'a DeviceSpec {
        &self.device.spec
    }
    /// total − headroom − unmanaged.
    pub fn capacity(&self) -> u64 {
        self.device.capacity()
    }
    /// Bytes reserved by leases.
    pub fn reserved(&self) -> u64 {
        self.device.reserved
    }
    /// Bytes still free to reserve.
    pub fn free(&self) -> u64 {
        self.device.free()
    }
    /// Bytes reserved by evictable leases.
    pub fn evictable_bytes(&self) -> u64 {
        self.device.evictable_bytes
    }
    /// Whether grants are stopped.
    pub fn drained(&self) -> bool {
        self.device.drained
    }
    /// Leases holding compute, in grant order.
    pub fn compute_holders(&self) -> impl Iterator<Item = &'a Lease> + 'a {
        let ledger = self.ledger;
        self.device
            .holders
            .iter()
            .filter_map(move |id| ledger.leases.get(id))
    }
    /// Waiting requests per class that this device could serve.
    pub fn queued(&self) -> QueueCounts {
        let mut counts = QueueCounts::default();
        for (_, seq) in &self.device.queue {
            if let Some(w) = self.ledger.waiters.get(seq) {
                counts.add(w.class);
            }
        }
        counts
    }
}
