//! Identifiers, inputs, outputs and errors of the ledger.

use std::time::{Duration, Instant};

use super::budget::{Budget, BudgetSpec};
use super::vocab::{
    Class, LeaseId, Placement, PlacementPolicy, RequestId, RevokeReason, YieldReason,
};
use thiserror::Error;

pub use super::vocab::SessionId;

/// A device's position in the ledger, equal to its gpud index.
pub type DeviceIdx = usize;

/// One request of one session: where a deferred answer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket {
    /// The session that asked.
    pub session: SessionId,
    /// The session's id for the request.
    pub request: RequestId,
}

/// What a pool of the ledger books: a GPU, or one of the host's resources (docs/HOST.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// A GPU: memory (bytes) and compute slots. GPUs come first; their index is gpud's
    /// device index.
    #[default]
    Gpu,
    /// The host's memory, in bytes.
    HostMemory,
    /// The host's page-locked memory, in bytes.
    Pinned,
    /// The CPUs of one NUMA node, counted (`total_bytes` etc. are CPUs).
    Cpus,
}

impl PoolKind {
    /// Whether it is a GPU.
    pub fn is_gpu(self) -> bool {
        self == PoolKind::Gpu
    }

    /// `n` of this pool's unit, for messages.
    pub fn amount(self, n: u64) -> String {
        match self {
            PoolKind::Cpus if n == 1 => "1 CPU".into(),
            PoolKind::Cpus => format!("{n} CPUs"),
            _ => gpud_proto::Bytes(n).to_string(),
        }
    }
}

impl std::fmt::Display for PoolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PoolKind::Gpu => "device",
            PoolKind::HostMemory => "host memory",
            PoolKind::Pinned => "page-locked memory",
            PoolKind::Cpus => "CPUs",
        })
    }
}

/// A pool as the ledger needs to know it: a device (a GPU), or a host pool. For a host pool
/// `total_bytes`, `headroom_bytes` and `unmanaged_bytes` are in the pool's unit (bytes, or
/// CPUs for a [`PoolKind::Cpus`] pool), and it has no compute slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// What it books.
    pub kind: PoolKind,
    /// UUID (`GPU-…`; a host pool's name: `host-memory`, `host-pinned`, `numa0`, …).
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory.
    pub total_bytes: u64,
    /// Memory never handed out.
    pub headroom_bytes: u64,
    /// Memory used by processes that hold no lease.
    pub unmanaged_bytes: u64,
    /// Leases that may hold compute at once (at least 1).
    pub compute_slots: u32,
    /// Further compute slots only the critical class may take: a critical request is granted
    /// beside the running phases instead of waiting for one to end (its VRAM must still fit).
    pub critical_slots: u32,
    /// Where the device sits: what the `near` policy keeps parts of a request together by.
    pub topology: Topology,
}

/// A device's place in the host: its NUMA node and NVLink island, when known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Topology {
    /// The NUMA node the device is attached to.
    pub numa_node: Option<u32>,
    /// Devices with the same island number are joined by NVLink (directly or through
    /// NVSwitch).
    pub nvlink_island: Option<u32>,
}

/// Which devices `near` treats as close to each other: one NVLink island, or (for a device
/// that has none) one NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Island {
    /// Devices joined by NVLink.
    NvLink(u32),
    /// Devices on one NUMA node without NVLink.
    Numa(u32),
}

impl Topology {
    /// The island `near` places the device in; `None` when neither is known.
    pub fn island(&self) -> Option<Island> {
        self.nvlink_island
            .map(Island::NvLink)
            .or(self.numa_node.map(Island::Numa))
    }
}

impl DeviceSpec {
    /// A host pool of `kind` (not a GPU) with `total` units, `headroom` of them never handed
    /// out, on NUMA node `numa_node` (CPUs: their node).
    pub fn host_pool(
        kind: PoolKind,
        uuid: impl Into<String>,
        total: u64,
        headroom: u64,
        numa_node: Option<u32>,
    ) -> Self {
        Self {
            kind,
            uuid: uuid.into(),
            name: kind.to_string(),
            total_bytes: total,
            headroom_bytes: headroom,
            unmanaged_bytes: 0,
            compute_slots: 0,
            critical_slots: 0,
            topology: Topology {
                numa_node,
                nvlink_island: None,
            },
        }
    }

    /// What leases may reserve: total − headroom − unmanaged.
    pub fn capacity(&self) -> u64 {
        self.total_bytes
            .saturating_sub(self.headroom_bytes)
            .saturating_sub(self.unmanaged_bytes)
    }

    /// Compute slots a request of `class` may count on: every class has `compute_slots`; the
    /// critical class also has the `critical_slots`. A host pool has none.
    pub fn slots_for(&self, class: Class) -> u32 {
        if !self.kind.is_gpu() {
            0
        } else if class == Class::Critical {
            self.compute_slots.saturating_add(self.critical_slots)
        } else {
            self.compute_slots
        }
    }
}

/// One value per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PerClass<T> {
    /// For `critical`.
    pub critical: T,
    /// For `high`.
    pub high: T,
    /// For `normal`.
    pub normal: T,
    /// For `background`.
    pub background: T,
}

impl<T: Copy> PerClass<T> {
    /// The value for `class`.
    pub fn get(&self, class: Class) -> T {
        match class {
            Class::Critical => self.critical,
            Class::High => self.high,
            Class::Normal => self.normal,
            Class::Background => self.background,
        }
    }
}

/// Scheduling policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerConfig {
    /// How many times the oldest waiter of a device may be overtaken by later requests before
    /// it pins the device (nothing that competes with it is granted there until it is).
    pub max_overtakes: u32,
    /// How many waiters one scheduling pass over a device examines at most.
    pub max_scan: usize,
    /// Longest a compute lease of each class may hold before it is asked to yield; no limit
    /// when `None`.
    pub max_hold: PerClass<Option<Duration>>,
    /// After a yield notice to a compute lease (a critical request waits, or its maximum hold
    /// passed), how long before the lease is revoked; never when `None`.
    pub revoke_after_yield: Option<Duration>,
    /// After a reclaim notice, how long an evictable holder has to give its memory back.
    pub reclaim_grace: Duration,
    /// Bounds on memory leases and on stopped holders.
    pub liveness: Liveness,
}

/// 60 s × `minutes`.
const fn minutes(minutes: u64) -> Duration {
    Duration::from_secs(60 * minutes)
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            max_overtakes: 4,
            max_scan: 1024,
            // A whole Groth16 proof (a PoRep C2 is minutes on a current GPU, under an hour on
            // an old one) stays well inside these; critical work (PoSt) has deadlines of
            // seconds to 30 minutes, so an hour of it is a wedged holder.
            max_hold: PerClass {
                critical: Some(minutes(60)),
                high: Some(minutes(240)),
                normal: Some(minutes(240)),
                background: Some(minutes(240)),
            },
            revoke_after_yield: Some(Duration::from_secs(30)),
            reclaim_grace: Duration::from_secs(10),
            liveness: Liveness::default(),
        }
    }
}

/// What keeps a lease from being held forever besides the compute bounds of [`LedgerConfig`]:
/// a maximum hold for memory leases (memory only; budgets have none: they end with their
/// job), and how long a stopped holder keeps a lease that a waiter needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// Longest a memory lease of each class may be held before it is asked to yield (to
    /// release it, and acquire again if still needed); no limit when `None`.
    pub memory_max_hold: PerClass<Option<Duration>>,
    /// After a yield notice to a memory lease, how long before it is revoked; never when
    /// `None`.
    pub memory_revoke_after_yield: Option<Duration>,
    /// How long a holder whose process is stopped keeps a lease that a waiter needs.
    pub stopped_grace: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        // A day: warm state (resident parameters, a CUDA context) is uploaded again in
        // seconds, so a prover that keeps it for days pays that once a day at most. The hour
        // after the notice lets a proof in flight finish before its memory is taken.
        let day = Some(minutes(24 * 60));
        Self {
            memory_max_hold: PerClass {
                critical: day,
                high: day,
                normal: day,
                background: day,
            },
            memory_revoke_after_yield: Some(minutes(60)),
            stopped_grace: Duration::from_secs(5),
        }
    }
}

/// One part of a request for several pools: what it needs on its own pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The kind of pool it is granted on.
    pub kind: PoolKind,
    /// Which pool of that kind (`Any`: the policy chooses; an index is the ledger's).
    pub placement: Placement,
    /// Units to reserve there: bytes (CPUs on a [`PoolKind::Cpus`] pool).
    pub vram_bytes: u64,
    /// Take a compute slot there (GPU parts only).
    pub compute: bool,
    /// Only on a pool of the NUMA node of the group's GPU parts (all of them on that node):
    /// `numa: near`. Host parts only; the group needs a GPU part.
    pub same_node: bool,
}

impl Part {
    /// A part on a GPU.
    pub fn gpu(placement: Placement, vram_bytes: u64, compute: bool) -> Self {
        Self {
            kind: PoolKind::Gpu,
            placement,
            vram_bytes,
            compute,
            same_node: false,
        }
    }

    /// A part on a host pool of `kind`, of `amount` units.
    pub fn host(kind: PoolKind, placement: Placement, amount: u64) -> Self {
        Self {
            kind,
            placement,
            vram_bytes: amount,
            compute: false,
            same_node: false,
        }
    }
}

/// What an acquire asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireSpec {
    /// Which device (with `parts`: must be `Any`).
    pub placement: Placement,
    /// Bytes to reserve (with `parts`: must be 0).
    pub vram_bytes: u64,
    /// Take the compute slot (with `parts`: must be false).
    pub compute: bool,
    /// For several devices at once: one part per device, all granted together or not at all
    /// (a group). Empty for a lease of one device, as `placement`, `vram_bytes` and `compute`
    /// say.
    pub parts: Vec<Part>,
    /// How the devices are chosen among those that can grant.
    pub policy: PlacementPolicy,
    /// Priority class.
    pub class: Class,
    /// Give up waiting after this long.
    pub timeout: Option<Duration>,
    /// A note for status.
    pub label: Option<String>,
    /// The budget to lease from (its device, its class); `None` leases from the device.
    pub within: Option<LeaseId>,
    /// Makes the lease a budget that other leases are granted from.
    pub budget: Option<BudgetSpec>,
    /// Warm state: memory that is given back on a reclaim notice (memory only).
    pub evictable: bool,
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Its id.
    pub id: LeaseId,
    /// The session that holds it.
    pub session: SessionId,
    /// The device.
    pub device: DeviceIdx,
    /// Bytes reserved.
    pub vram_bytes: u64,
    /// Holds a compute slot.
    pub compute: bool,
    /// Its class.
    pub class: Class,
    /// When it was granted.
    pub granted_at: Instant,
    /// The outstanding yield notice, if any: why and when it was sent.
    pub yield_requested: Option<(YieldReason, Instant)>,
    /// A grow waiting for this lease.
    pub pending_grow: Option<Ticket>,
    /// The client's note.
    pub label: Option<String>,
    /// The budget it was granted from.
    pub within: Option<LeaseId>,
    /// Its books, when it is a budget.
    pub budget: Option<Budget>,
    /// Warm state that gives its memory back on notice.
    pub evictable: bool,
    /// The deadline of an outstanding reclaim notice.
    pub reclaim_by: Option<Instant>,
    /// The group it is a part of: the id of the group's first lease.
    pub group: Option<LeaseId>,
}

/// What a waiter needs from a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Bytes (for a grow: the extra bytes).
    pub vram_bytes: u64,
    /// A compute slot.
    pub compute: bool,
}

impl Need {
    /// Whether granting `other` takes something this need is waiting for.
    pub fn competes_with(&self, other: &Need) -> bool {
        (self.compute && other.compute) || (self.vram_bytes > 0 && other.vram_bytes > 0)
    }
}

/// A waiting request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// Where the answer goes.
    pub ticket: Ticket,
    /// Arrival order; also the waiter's key.
    pub seq: u64,
    /// Priority class.
    pub class: Class,
    /// What it needs.
    pub need: Need,
    /// For a resize, the lease that grows.
    pub grows: Option<LeaseId>,
    /// What the client asked for.
    pub placement: Placement,
    /// Devices it may be granted on.
    pub candidates: Vec<DeviceIdx>,
    /// When it arrived.
    pub arrived: Instant,
    /// When it gives up.
    pub deadline: Option<Instant>,
    /// Grants to later competing requests on its devices while it was the oldest waiter there.
    pub overtaken: u32,
    /// The client's note.
    pub label: Option<String>,
    /// The budget it leases from.
    pub within: Option<LeaseId>,
    /// What it asks beyond a lease, when it asks for a budget.
    pub budget: Option<BudgetSpec>,
    /// It asks for (or grows) an evictable lease: it never causes a reclaim.
    pub evictable: bool,
    /// How its device is chosen among those that can grant.
    pub policy: PlacementPolicy,
    /// For a group: its parts, each granted on its own device. `need` is then the largest
    /// part's memory and whether any part computes (what it competes for on any device), and
    /// `candidates` every device some part may use.
    pub parts: Vec<WaitingPart>,
}

/// A part of a waiting group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingPart {
    /// The kind of pool it is granted on.
    pub kind: PoolKind,
    /// Only on the NUMA node of the group's GPU parts.
    pub same_node: bool,
    /// What the client asked for.
    pub placement: Placement,
    /// What it needs on its device.
    pub need: Need,
    /// Devices it may be granted on (large enough for it).
    pub candidates: Vec<DeviceIdx>,
}

impl Waiter {
    /// What granting it takes from the device itself: a member's memory is the budget's.
    pub fn device_need(&self) -> Need {
        Need {
            vram_bytes: if self.within.is_some() {
                0
            } else {
                self.need.vram_bytes
            },
            compute: self.need.compute,
        }
    }

    /// What granting it takes from pool `d`: for a group, what its parts that may use `d`
    /// need there (the largest, and whether any computes); for a single request,
    /// [`Waiter::device_need`].
    pub fn need_on(&self, d: DeviceIdx) -> Need {
        if self.parts.is_empty() {
            return self.device_need();
        }
        let mut need = Need {
            vram_bytes: 0,
            compute: false,
        };
        for p in self.parts.iter().filter(|p| p.candidates.contains(&d)) {
            need.vram_bytes = need.vram_bytes.max(p.need.vram_bytes);
            need.compute |= p.need.compute;
        }
        need
    }
}

/// What the ledger decided; the daemon delivers each one to the session it names.
#[must_use = "a decision must be delivered to its session"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// An acquire was granted: the lease exists now.
    Granted {
        /// The acquire.
        ticket: Ticket,
        /// The new lease.
        lease: LeaseId,
    },
    /// A grow was granted.
    Grew {
        /// The resize request.
        ticket: Ticket,
        /// The lease.
        lease: LeaseId,
        /// Its size now.
        vram_bytes: u64,
    },
    /// A waiting request ran out of time (a grow leaves its lease as it was).
    TimedOut {
        /// The request.
        ticket: Ticket,
    },
    /// A waiting grow ended because its lease was released or revoked.
    GrowAbandoned {
        /// The resize request.
        ticket: Ticket,
        /// The lease that went away.
        lease: LeaseId,
    },
    /// A waiting grow failed at once: its lease and other leases were each waiting to grow
    /// into memory only the others hold (the `deadlock` module's rule). The lease keeps its
    /// size.
    GrowDeadlocked {
        /// The resize request.
        ticket: Ticket,
        /// The lease that did not grow.
        lease: LeaseId,
    },
    /// Ask a holder to release at its next safe point.
    YieldRequested {
        /// The holder.
        session: SessionId,
        /// The lease.
        lease: LeaseId,
        /// Why.
        reason: YieldReason,
        /// When the lease will be revoked if still held.
        revoke_at: Option<Instant>,
    },
    /// A lease was taken away; its resources are free.
    Revoked {
        /// The former holder.
        session: SessionId,
        /// The lease.
        lease: LeaseId,
        /// Why.
        reason: RevokeReason,
    },
    /// Ask an evictable holder to give its memory back (shrink or release) by a deadline.
    ReclaimRequested {
        /// The holder.
        session: SessionId,
        /// The lease.
        lease: LeaseId,
        /// When it is revoked if it still holds the memory.
        revoke_at: Option<Instant>,
    },
    /// A waiting request was withdrawn because the budget it leases from ended.
    BudgetEnded {
        /// The request.
        ticket: Ticket,
        /// The budget.
        budget: LeaseId,
    },
}

/// Why the ledger refused a request at once.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The placement names no device.
    #[error("no device {0}")]
    UnknownDevice(Placement),
    /// The request is larger than any matching device's capacity.
    #[error(
        "{} can never fit: the largest matching capacity is {} ({need} > {capacity} bytes)",
        gpud_proto::Bytes(*need),
        gpud_proto::Bytes(*capacity)
    )]
    NeverFits {
        /// Bytes asked.
        need: u64,
        /// The largest capacity among the candidates.
        capacity: u64,
    },
    /// A host part is larger than any pool of its kind can ever grant.
    #[error(
        "{kind} can never fit: {need} asked, and {pool} has at most {capacity}",
        need = kind.amount(*need),
        capacity = kind.amount(*capacity)
    )]
    HostNeverFits {
        /// The kind of pool.
        kind: PoolKind,
        /// The largest matching pool (its name: `host-memory`, `numa0`).
        pool: String,
        /// Units asked.
        need: u64,
        /// That pool's capacity.
        capacity: u64,
    },
    /// The request makes no sense.
    #[error("invalid request: {0}")]
    Invalid(&'static str),
    /// The session holds no such lease.
    #[error("no lease {0} in this session")]
    UnknownLease(LeaseId),
    /// No session holds such a lease (for operations on any session's lease: revoke).
    #[error("no lease {0} (gpudctl leases lists them)")]
    NoSuchLease(LeaseId),
    /// The session has no such waiting request.
    #[error("no waiting request {0} in this session")]
    UnknownRequest(RequestId),
    /// The request id is already in use.
    #[error("request id {0} is already in use by a waiting request")]
    DuplicateRequest(RequestId),
    /// The request is larger than its budget.
    #[error("{} can never fit in budget {budget}, which holds {}", gpud_proto::Bytes(*need), gpud_proto::Bytes(*limit))]
    ExceedsBudget {
        /// The budget.
        budget: LeaseId,
        /// Bytes asked.
        need: u64,
        /// The budget's bytes.
        limit: u64,
    },
    /// A compute lease asked from a budget that grants no compute.
    #[error("budget {0} grants no compute slot")]
    BudgetWithoutCompute(LeaseId),
    /// The lease named as a budget is not one.
    #[error("no budget {0}")]
    UnknownBudget(LeaseId),
    /// The lease already has a grow waiting.
    #[error("lease {0} already has a resize waiting")]
    ResizePending(LeaseId),
}

/// What a resize did at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeOutcome {
    /// The lease has its new size.
    Done {
        /// Its size now.
        vram_bytes: u64,
    },
    /// The grow waits; a [`Decision::Grew`], [`Decision::TimedOut`] or
    /// [`Decision::GrowAbandoned`] follows.
    Waiting,
}

/// A change to the set of leases, in the order it happened: what a journal records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseChange {
    /// A lease was granted (read its details from the ledger).
    Granted(LeaseId),
    /// A lease's VRAM changed.
    Resized {
        /// The lease.
        lease: LeaseId,
        /// Its size now.
        vram_bytes: u64,
    },
    /// A lease ended (released, revoked, or its session closed).
    Ended(LeaseId),
}

/// A lease as it existed before a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredLease {
    /// Its id, kept so the owner can re-adopt it.
    pub id: LeaseId,
    /// The device.
    pub device: DeviceIdx,
    /// Bytes reserved.
    pub vram_bytes: u64,
    /// Holds a compute slot.
    pub compute: bool,
    /// Class.
    pub class: Class,
    /// When it was granted (approximately, across the restart).
    pub granted_at: Instant,
    /// The client's note.
    pub label: Option<String>,
    /// The budget it was granted from.
    pub within: Option<LeaseId>,
    /// When it is a budget: the compute slots it grants its members.
    pub budget_compute_slots: Option<u32>,
    /// Warm state that gives its memory back on notice.
    pub evictable: bool,
    /// The group it is a part of (its first lease's id); restored parts of one group are a
    /// group again.
    pub group: Option<LeaseId>,
}
