//! What the hub tells the outside about its decisions: metrics, and notices for watchers such
//! as the D-Bus service. It only reads the ledger.
//!
//! The core calls it where requests are answered and decisions delivered; after every step,
//! [`Observer::step`] compares each device with the last step to spot changes, and the
//! notices of the step become [`Action::Notify`](super::Action::Notify)s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use gpud_proto::LeaseId;
use gpud_proto::{Class, ErrorCode, RevokeReason, YieldReason};
use serde::Serialize;

use crate::ledger::{Decision, DeviceIdx, Lease, Ledger, SessionId, Ticket};
use crate::metrics::{DeviceSample, Metrics};

/// Something watchers may want to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A lease was granted.
    LeaseGranted {
        /// The lease.
        lease: LeaseId,
        /// Its holder.
        session: SessionId,
        /// The device's index.
        device: u32,
        /// The device's UUID.
        uuid: String,
        /// Bytes reserved.
        vram_bytes: u64,
        /// Holds a compute slot.
        compute: bool,
        /// Its class.
        class: Class,
    },
    /// A lease ended.
    LeaseEnded {
        /// The lease.
        lease: LeaseId,
        /// Its former holder.
        session: SessionId,
        /// The device's index.
        device: u32,
        /// Why.
        reason: EndReason,
    },
    /// A host part of a lease (host memory, page-locked memory, CPUs: docs/HOST.md) was
    /// granted or ended. It has no device, so watchers of devices' leases hear only that the
    /// set of leases changed.
    HostPartChanged {
        /// The part's lease id.
        lease: LeaseId,
    },
    /// A device's reservations, capacity, drain state or compute holders changed.
    DeviceChanged {
        /// The device's index.
        device: u32,
    },
}

/// Why a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Its holder released it.
    Released,
    /// Its holder's session ended.
    Disconnected,
    /// It was taken away.
    Revoked(RevokeReason),
}

impl EndReason {
    /// `released`, `disconnected` or `revoked`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::Disconnected => "disconnected",
            Self::Revoked(_) => "revoked",
        }
    }
}

/// A lease as it was granted: what is needed after it is gone.
#[derive(Debug, Clone, Copy)]
struct Booked {
    session: SessionId,
    class: Class,
    compute: bool,
    device: DeviceIdx,
    granted_at: Instant,
    /// A host part (its `device` is a host pool's ledger index, no device's).
    host: bool,
}

/// What a device looked like after the last step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Print {
    reserved: u64,
    capacity: u64,
    drained: bool,
    holders: usize,
}

/// Turns the hub's decisions into metrics and notices.
#[derive(Debug)]
pub struct Observer {
    metrics: Metrics,
    book: HashMap<LeaseId, Booked>,
    waiting: HashMap<Ticket, (Instant, Class)>,
    prints: Vec<Print>,
    notices: Vec<Notice>,
}

impl Observer {
    /// An observer of a ledger with `devices` devices.
    pub fn new(devices: usize) -> Self {
        Self {
            metrics: Metrics::new(devices),
            book: HashMap::new(),
            waiting: HashMap::new(),
            prints: vec![Print::default(); devices],
            notices: Vec::new(),
        }
    }

    /// Whether `lease` (live, or ending in this step) is known to hold memory only.
    pub fn memory_only(&self, lease: LeaseId) -> bool {
        self.book.get(&lease).is_some_and(|b| !b.compute)
    }

    /// The notices since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    /// An acquire waits (its grant, or its time-out, comes as a decision).
    pub fn waiting(&mut self, now: Instant, ticket: Ticket, class: Class) {
        self.waiting.insert(ticket, (now, class));
    }

    /// An acquire was refused at once.
    pub fn refused(&mut self, class: Class, code: ErrorCode) {
        self.metrics.refused(class, wire_name(&code));
    }

    /// A waiting request was cancelled by its client.
    pub fn cancelled(&mut self, ticket: Ticket) {
        self.waiting.remove(&ticket);
    }

    /// A lease was released by its holder.
    pub fn released(&mut self, now: Instant, lease: LeaseId) {
        self.ended(now, lease, EndReason::Released);
    }

    /// A session ended, freeing `leases` and withdrawing its waiters.
    pub fn closed(&mut self, now: Instant, session: SessionId, leases: &[LeaseId]) {
        for &lease in leases {
            self.ended(now, lease, EndReason::Disconnected);
        }
        self.waiting.retain(|t, _| t.session != session);
    }

    /// A decision is about to be delivered (an acquire granted at once is a decision too). The
    /// ledger is as the decision left it.
    pub fn decision(&mut self, now: Instant, ledger: &Ledger, decision: &Decision) {
        match decision {
            Decision::Granted { ticket, lease } => {
                let waited = self
                    .waiting
                    .remove(ticket)
                    .map_or(Duration::ZERO, |(at, _)| now.saturating_duration_since(at));
                // A group is one grant of several leases.
                if let Some(class) = ledger.lease(*lease).map(|l| l.class) {
                    self.metrics.granted(class.into(), waited);
                }
                for part in ledger.group_of(*lease) {
                    self.granted(ledger, part);
                }
            }
            Decision::ReclaimRequested { lease, .. } => {
                let class = ledger.lease(*lease).map(|l| Class::from(l.class));
                if let Some(class) = class {
                    self.metrics.reclaim_requested(class);
                }
            }
            Decision::BudgetEnded { ticket, .. } => {
                if let Some((_, class)) = self.waiting.remove(ticket) {
                    self.metrics
                        .refused(class, wire_name(&ErrorCode::Cancelled));
                }
            }
            Decision::TimedOut { ticket } => {
                // Only acquires are in `waiting`; a grow that times out leaves its lease as it was.
                if let Some((_, class)) = self.waiting.remove(ticket) {
                    self.metrics.refused(class, wire_name(&ErrorCode::TimedOut));
                }
            }
            Decision::YieldRequested { lease, reason, .. } => {
                let class = ledger.lease(*lease).map(|l| Class::from(l.class));
                if let Some(class) = class.or_else(|| self.book.get(lease).map(|b| b.class)) {
                    self.metrics
                        .yield_requested(class, wire_name(&YieldReason::from(*reason)));
                }
            }
            Decision::Revoked { lease, reason, .. } => {
                self.ended(now, *lease, EndReason::Revoked(RevokeReason::from(*reason)));
            }
            Decision::Grew { .. }
            | Decision::GrowAbandoned { .. }
            | Decision::GrowDeadlocked { .. } => {}
        }
    }

    /// After every hub step: device changes become notices; compute busy time is updated.
    pub fn step(&mut self, now: Instant, ledger: &Ledger) {
        for d in ledger.devices() {
            let print = Print {
                reserved: d.reserved(),
                capacity: d.capacity(),
                drained: d.drained(),
                holders: d.compute_holders().count(),
            };
            self.metrics.compute_busy(now, d.index(), print.holders > 0);
            if let Some(old) = self.prints.get_mut(d.index()) {
                if *old != print {
                    *old = print;
                    self.notify(Notice::DeviceChanged {
                        device: d.index() as u32,
                    });
                }
            }
        }
    }

    /// The metrics exposition.
    pub fn render(
        &self,
        now: Instant,
        ledger: &Ledger,
        names: &[String],
        sessions: usize,
        over_use: &[u64],
    ) -> String {
        let mut leases = vec![0usize; ledger.devices().len()];
        for l in ledger.leases() {
            if let Some(n) = leases.get_mut(l.device) {
                *n += 1;
            }
        }
        let devices: Vec<DeviceSample> = ledger
            .devices()
            .map(|d| {
                let spec = d.spec();
                DeviceSample {
                    index: d.index(),
                    uuid: spec.uuid.clone(),
                    name: names.get(d.index()).cloned().unwrap_or_default(),
                    total_bytes: spec.total_bytes,
                    headroom_bytes: spec.headroom_bytes,
                    capacity_bytes: d.capacity(),
                    reserved_bytes: d.reserved(),
                    evictable_bytes: d.evictable_bytes(),
                    unmanaged_bytes: spec.unmanaged_bytes,
                    over_use_bytes: over_use.get(d.index()).copied().unwrap_or(0),
                    drained: d.drained(),
                    compute_slots: spec.compute_slots,
                    critical_slots: spec.critical_slots,
                    compute_holders: d.compute_holders().count(),
                    leases: leases.get(d.index()).copied().unwrap_or(0),
                    queued: d.queued().into(),
                }
            })
            .collect();
        self.metrics.render(now, &devices, sessions)
    }

    fn granted(&mut self, ledger: &Ledger, id: LeaseId) {
        let Some(lease) = ledger.lease(id) else {
            return;
        };
        self.book.insert(
            id,
            Booked {
                session: lease.session,
                class: lease.class.into(),
                compute: lease.compute,
                device: lease.device,
                granted_at: lease.granted_at,
                host: ledger.device(lease.device).is_none(),
            },
        );
        // `device` shows GPUs only: a host part's pool is no device to name.
        match ledger.device(lease.device) {
            Some(d) => {
                let uuid = d.spec().uuid.clone();
                self.notify(granted_notice(lease, uuid));
            }
            None => self.notify(Notice::HostPartChanged { lease: id }),
        }
    }

    fn ended(&mut self, now: Instant, lease: LeaseId, reason: EndReason) {
        // A lease the observer never saw granted (restored at start) has no hold time to count.
        let Some(b) = self.book.remove(&lease) else {
            return;
        };
        let held = now.saturating_duration_since(b.granted_at);
        match reason {
            EndReason::Revoked(why) => self.metrics.revoked(b.class, wire_name(&why), held),
            EndReason::Released | EndReason::Disconnected => {
                self.metrics.released(b.class, reason.as_str(), held)
            }
        }
        self.notify(if b.host {
            Notice::HostPartChanged { lease }
        } else {
            Notice::LeaseEnded {
                lease,
                session: b.session,
                device: b.device as u32,
                reason,
            }
        });
    }

    fn notify(&mut self, notice: Notice) {
        self.notices.push(notice);
    }
}

fn granted_notice(lease: &Lease, uuid: String) -> Notice {
    Notice::LeaseGranted {
        lease: lease.id,
        session: lease.session,
        device: lease.device as u32,
        uuid,
        vram_bytes: lease.vram_bytes,
        compute: lease.compute,
        class: lease.class.into(),
    }
}

/// A protocol enum's snake_case wire name (`never_fits`, `critical_waiting`).
pub fn wire_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "unknown".into(),
    }
}
