//! The messages exchanged over the Unix socket, one JSON document per frame.
//!
//! docs/PROTOCOL.md is the reference; the types here are the source of truth for field names.

use serde::{Deserialize, Serialize};

use super::class::{Class, Placement, PlacementPolicy};
use crate::LeaseId;

/// The protocol version this crate speaks. A hello with another version is refused.
pub const PROTOCOL_VERSION: u32 = 1;

/// A client's identifier for one request, unique among its outstanding requests.
pub type RequestId = u64;

/// Frames a client sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    /// First frame of every session.
    Hello {
        /// Must equal [`PROTOCOL_VERSION`].
        version: u32,
        /// Free-form client name for logs and status.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<String>,
    },
    /// Any later frame.
    Request {
        /// Echoed in the reply.
        id: RequestId,
        /// What to do.
        op: Op,
    },
}

/// Operations a client can ask for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Ask for a lease; the reply comes when it is granted, refused, cancelled or timed out.
    Acquire(AcquireArgs),
    /// Change the VRAM of a granted lease. Shrinking is immediate; growing waits like a new
    /// request and, on timeout, leaves the lease as it was.
    Resize {
        /// The lease to resize.
        lease: LeaseId,
        /// The new size in bytes (of device memory; of host memory with `host_mem_bytes`).
        #[serde(default)]
        vram_bytes: u64,
        /// Give up growing after this long (milliseconds); no timeout when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
        /// Resize the lease's host memory instead, to this many bytes (`vram_bytes` is then
        /// left out or 0). Only for daemons whose welcome lists [`FEATURE_HOST`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host_mem_bytes: Option<u64>,
    },
    /// Give a lease back.
    Release {
        /// The lease to release.
        lease: LeaseId,
    },
    /// Withdraw a waiting acquire or resize.
    Cancel {
        /// The id of the waiting request.
        request: RequestId,
    },
    /// The daemon's devices, leases and queues: the first page (at most
    /// [`STATUS_PAGE_ENTRIES`] leases and waiters in all; the report's `more` says where the
    /// next page starts).
    Status,
    /// A later page of the status, from the cursor the previous page gave in `more`.
    StatusPage(StatusCursor),
    /// Stop granting on a device (admin).
    Drain {
        /// The device.
        device: Placement,
    },
    /// Grant on a drained device again (admin).
    Undrain {
        /// The device.
        device: Placement,
    },
    /// Take a lease away from its holder (admin).
    Revoke {
        /// The lease.
        lease: LeaseId,
    },
    /// Take back a lease after the daemon restarted (its token proves ownership).
    Adopt {
        /// The lease.
        lease: LeaseId,
        /// The token given with the grant.
        token: String,
    },
    /// Liveness check.
    Ping,
    /// The daemon's metrics in the Prometheus text format.
    Metrics,
    /// Reserve a job's share of a device that the job's processes lease from (admin; a
    /// scheduler's prolog). Waits like an acquire; the reply is [`Reply::Budgets`] with the one
    /// budget, whose `handle` the job's processes present.
    CreateBudget(BudgetArgs),
    /// End a budget, or every budget of a job (admin): what is inside is revoked. Ending the
    /// budgets of a job that has none is not an error (an epilog after a failed prolog).
    EndBudget(EndBudgetArgs),
    /// The budgets, or a job's; handles only for their owner and admins.
    Budgets {
        /// Only this job's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<String>,
    },
    /// Tell the daemon which program uses a lease of this session and how its use is
    /// enforced; with `end_with_session`, the daemon ends that program's process group when
    /// the session ends without releasing the lease. Only for daemons whose welcome lists
    /// [`FEATURE_ATTACH`]. The reply is [`Reply::Attached`].
    Attach(AttachArgs),
}

/// What an attach says: the program, the lease it uses, how its use is enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachArgs {
    /// A lease this session holds (for a lease of several devices: its first lease).
    pub lease: LeaseId,
    /// The program: the caller itself or one of its descendants, of the caller's uid.
    pub pid: u32,
    /// What keeps the program within the lease.
    pub enforced_by: EnforcedBy,
    /// End the program (SIGTERM to its process group, SIGKILL after the daemon's
    /// `supervision.kill_grace`) when the session ends without releasing the lease.
    #[serde(default)]
    pub end_with_session: bool,
}

/// What keeps a program within its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnforcedBy {
    /// A supervisor (`gpudctl run`) stops it when the lease ends; its memory use is not capped.
    Supervised,
    /// An MPS client whose pinned device memory limit is the lease.
    Mps,
    /// The LD_PRELOAD interposer, which accounts its allocations against the lease.
    Preload,
}

impl EnforcedBy {
    /// Every value, in the order metrics list them.
    pub const ALL: [EnforcedBy; 3] = [EnforcedBy::Supervised, EnforcedBy::Mps, EnforcedBy::Preload];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EnforcedBy::Supervised => "supervised",
            EnforcedBy::Mps => "mps",
            EnforcedBy::Preload => "preload",
        }
    }
}

impl std::fmt::Display for EnforcedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a budget is for and whom.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetArgs {
    /// Which device.
    #[serde(default)]
    pub device: Placement,
    /// Bytes of device memory it reserves for its members.
    #[serde(default)]
    pub vram_bytes: u64,
    /// Compute slots of the device its members may hold at once.
    #[serde(default)]
    pub compute_slots: u32,
    /// The class of every lease inside it (the job's priority).
    #[serde(default)]
    pub class: Class,
    /// The job it belongs to (the scheduler's job id).
    pub job: String,
    /// The uid whose processes may lease from it.
    pub uid: u32,
    /// A cgroup (path as in /proc/PID/cgroup): processes inside it lease from the budget
    /// without naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// Give up waiting after this long (milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// Which budgets to end: one by id, or a job's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndBudgetArgs {
    /// The budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<LeaseId>,
    /// Every budget of this job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// What an acquire asks for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireArgs {
    /// Which device.
    #[serde(default)]
    pub device: Placement,
    /// Bytes of device memory to reserve.
    #[serde(default)]
    pub vram_bytes: u64,
    /// Whether to take the device's compute slot.
    #[serde(default)]
    pub compute: bool,
    /// Priority class.
    #[serde(default)]
    pub class: Class,
    /// Give up after this long (milliseconds); wait for ever when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Free-form note shown in status (a job name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Lease from this budget (its handle, `ID:SECRET`, as `GPUD_BUDGET` carries it): on its
    /// device, in its class, within its bytes and compute slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// Warm state (memory only): counted like any lease, but given back on a `reclaim_requested`
    /// notice when a request that is not evictable needs the memory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evictable: bool,
    /// Send [`Event::Queued`] while the request waits. Only for daemons whose welcome lists
    /// [`FEATURE_QUEUED`]: older ones refuse the field (`bad_frame`), so it is left out when
    /// false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued_events: bool,
    /// A lease of several devices: one part per device, granted together or not at all. The
    /// request's own `device`, `vram_bytes` and `compute` are then left out. Only for daemons
    /// whose welcome lists [`FEATURE_MULTI_DEVICE`] (left out when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartArgs>,
    /// How the device (or the parts' devices) is chosen among those that can grant; best fit
    /// when absent. Only for daemons whose welcome lists [`FEATURE_MULTI_DEVICE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementPolicy>,
    /// Host resources granted with the device part(s), atomically: all or nothing. With no
    /// device part (`vram_bytes` 0, no `compute`, no `parts`) the lease is of the host alone.
    /// Only for daemons whose welcome lists [`FEATURE_HOST`] (left out when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostArgs>,
}

/// Host resources a lease asks for: memory, page-locked memory, CPUs of one NUMA node.
/// docs/HOST.md describes how they are counted.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostArgs {
    /// Bytes of host memory (what the lease's processes keep resident, page-locked memory
    /// included: gpud counts at least `pinned_bytes` here).
    #[serde(default)]
    pub mem_bytes: u64,
    /// Bytes of page-locked (pinned) host memory: CUDA staging buffers, registered bases.
    #[serde(default)]
    pub pinned_bytes: u64,
    /// CPUs (logical CPUs as the kernel numbers them), all on one NUMA node.
    #[serde(default)]
    pub cpus: u32,
    /// Which NUMA node the CPUs come from.
    #[serde(default, skip_serializing_if = "NumaPlacement::is_any")]
    pub numa: NumaPlacement,
}

impl HostArgs {
    /// Nothing asked.
    pub fn is_empty(&self) -> bool {
        self.mem_bytes == 0 && self.pinned_bytes == 0 && self.cpus == 0
    }
}

/// Where a lease's CPUs come from: JSON `"any"`, `"near"` or `{"node": N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NumaPlacement {
    /// Any node with enough free CPUs.
    #[default]
    Any,
    /// The node of the lease's device(s) (all of them on that node); needs a device part.
    Near,
    /// This node.
    Node(u32),
}

impl NumaPlacement {
    /// The default (left out of the wire form).
    pub fn is_any(&self) -> bool {
        *self == NumaPlacement::Any
    }
}

impl std::fmt::Display for NumaPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NumaPlacement::Any => f.write_str("any"),
            NumaPlacement::Near => f.write_str("near"),
            NumaPlacement::Node(n) => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for NumaPlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "any" => Ok(NumaPlacement::Any),
            "near" => Ok(NumaPlacement::Near),
            n => n
                .parse()
                .map(NumaPlacement::Node)
                .map_err(|_| format!("NUMA placement {s:?}: give any, near, or a node number")),
        }
    }
}

/// The host resources a lease holds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostGrant {
    /// Bytes of host memory.
    #[serde(default)]
    pub mem_bytes: u64,
    /// Bytes of page-locked memory.
    #[serde(default)]
    pub pinned_bytes: u64,
    /// The CPUs granted (kernel numbers, ascending): what `sched_setaffinity` pins to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
    /// Their NUMA node (absent without CPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// The lease ids of the host parts (events about a part name its id; ending one ends the
    /// whole lease).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<LeaseId>,
}

/// One part of a lease of several devices: what it needs on its own device.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartArgs {
    /// Which device (`any`: the placement policy chooses).
    #[serde(default)]
    pub device: Placement,
    /// Bytes of device memory to reserve there.
    #[serde(default)]
    pub vram_bytes: u64,
    /// Whether to take a compute slot there.
    #[serde(default)]
    pub compute: bool,
}

/// The welcome's feature name for [`AcquireArgs::queued_events`] and [`Event::Queued`].
pub const FEATURE_QUEUED: &str = "queued_events";

/// The welcome's feature name for [`AcquireArgs::parts`] and [`AcquireArgs::placement`].
pub const FEATURE_MULTI_DEVICE: &str = "multi_device";

/// The welcome's feature name that says gpud's MPS control daemon is up at this moment: a
/// program started as an MPS client (with [`MpsStatus::pipe_directory`] from status) gets its
/// lease as a hard per-device memory limit. Listed only while the daemon runs.
pub const FEATURE_MPS: &str = "mps";
/// The welcome's feature name for [`Op::Attach`].
pub const FEATURE_ATTACH: &str = "attach";
/// The welcome's feature name for host resources: [`AcquireArgs::host`], [`Op::Resize`]'s
/// `host_mem_bytes`, [`LeaseInfo::host`] and [`StatusReport::host`].
pub const FEATURE_HOST: &str = "host";

/// Frames the daemon sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// Answer to a hello.
    Welcome {
        /// The daemon's protocol version.
        version: u32,
        /// This session's id, as status shows it.
        session: u64,
        /// Daemon name and version.
        daemon: String,
        /// Optional protocol additions this daemon speaks (such as [`FEATURE_QUEUED`]); absent
        /// from older daemons, and ignored by older clients.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        features: Vec<String>,
    },
    /// The answer to one request.
    Reply {
        /// The request's id.
        id: RequestId,
        /// Success or error.
        outcome: Outcome,
    },
    /// Something happened to a lease the session holds.
    Event {
        /// What happened.
        event: Event,
    },
    /// A session-level error; the daemon closes the connection after it.
    Error {
        /// What was wrong.
        error: ErrorBody,
    },
}

/// The result of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It worked.
    Ok(Reply),
    /// It did not.
    Error(ErrorBody),
}

/// Successful answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// An acquire was granted.
    Granted(LeaseInfo),
    /// A resize took effect.
    Resized {
        /// The lease.
        lease: LeaseId,
        /// Its size now.
        vram_bytes: u64,
    },
    /// A lease was released.
    Released {
        /// The lease.
        lease: LeaseId,
    },
    /// A waiting request was withdrawn.
    Cancelled {
        /// The request.
        request: RequestId,
    },
    /// The daemon's state.
    Status(Box<StatusReport>),
    /// A lease was re-adopted after a restart.
    Adopted(LeaseInfo),
    /// An admin operation took effect.
    Done,
    /// Answer to ping.
    Pong,
    /// The metrics exposition (Prometheus text format, docs/METRICS.md).
    Metrics {
        /// The exposition.
        text: String,
    },
    /// Budgets.
    Budgets(Vec<BudgetInfo>),
    /// An attach was recorded.
    Attached {
        /// The lease.
        lease: LeaseId,
        /// The program.
        pid: u32,
    },
}

/// A budget: a job's share of a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetInfo {
    /// Its id (a lease id).
    pub budget: LeaseId,
    /// The job.
    pub job: String,
    /// The uid whose processes lease from it.
    pub uid: u32,
    /// Its cgroup, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// Device index.
    pub device_index: u32,
    /// Device UUID.
    pub device_uuid: String,
    /// Class of its leases.
    pub class: Class,
    /// Bytes it reserves.
    pub vram_bytes: u64,
    /// Bytes its leases hold.
    pub used_bytes: u64,
    /// Compute slots its leases may hold at once.
    pub compute_slots: u32,
    /// Compute slots its leases hold.
    pub compute_used: u32,
    /// Its granted leases.
    pub leases: Vec<LeaseId>,
    /// Its waiting requests.
    pub waiting: u32,
    /// The handle its processes present (`GPUD_BUDGET`); only for its uid and admins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
}

/// A granted lease as its holder sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// The lease's id.
    pub lease: LeaseId,
    /// The device's UUID.
    pub device_uuid: String,
    /// The device's gpud index.
    pub device_index: u32,
    /// The device's name.
    pub device_name: String,
    /// Bytes reserved.
    pub vram_bytes: u64,
    /// Whether the lease holds the compute slot.
    pub compute: bool,
    /// The class it was granted in.
    pub class: Class,
    /// The value to give `CUDA_VISIBLE_DEVICES` so CUDA sees only this device.
    pub cuda_visible_devices: String,
    /// Secret to re-adopt the lease if the daemon restarts.
    #[serde(default)]
    pub token: String,
    /// The budget it was granted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<LeaseId>,
    /// For a lease of several devices: every part, in the order asked (the first is this
    /// lease, whose id names the group); `cuda_visible_devices` then lists their devices in
    /// this order. Absent for a lease of one device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<LeasePart>,
    /// The host resources granted with it. A lease of the host alone has them and no device:
    /// its `device_uuid`, `device_name` and `cuda_visible_devices` are empty. (Boxed: most
    /// grants have none, and replies stay small.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Box<HostGrant>>,
}

/// One granted part of a lease of several devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasePart {
    /// The part's own lease id (events about the part name it).
    pub lease: LeaseId,
    /// The device's gpud index.
    pub device_index: u32,
    /// The device's UUID.
    pub device_uuid: String,
    /// Bytes reserved there.
    pub vram_bytes: u64,
    /// Whether the part holds a compute slot there.
    pub compute: bool,
}

/// Why a holder is asked to yield its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum YieldReason {
    /// A critical request waits for the slot.
    CriticalWaiting,
    /// The lease has been held longer than its class and kind allow.
    MaxHold,
}

/// Why a lease was taken away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevokeReason {
    /// An administrator revoked it.
    Admin,
    /// The holder did not yield within the grace period.
    YieldIgnored,
    /// The holder's processes used more device memory than it reserved (audit policy).
    OverUse,
    /// Client side only: the connection was lost and the lease could not be re-adopted.
    Lost,
    /// The budget it was granted from ended (the job ended).
    BudgetEnded,
    /// An evictable lease kept the memory it was asked to give back past the deadline.
    Reclaimed,
    /// The holder's process was stopped (SIGSTOP, a debugger, a suspended job): a waiter
    /// needed the lease, or the lease reached its maximum hold, and a stopped process cannot
    /// answer a notice.
    HolderStopped,
}

/// Notices the daemon pushes to a lease holder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// Release the lease at the next safe point: a compute lease's slot (a critical request
    /// waits, or its maximum hold passed), or a memory lease past its maximum hold (release it,
    /// and acquire again if still needed).
    YieldRequested {
        /// The lease.
        lease: LeaseId,
        /// Why.
        reason: YieldReason,
        /// When the daemon revokes the lease if it is still held (milliseconds from now).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revoke_in_ms: Option<u64>,
    },
    /// The lease is gone: stop using the device.
    Revoked {
        /// The lease.
        lease: LeaseId,
        /// Why.
        reason: RevokeReason,
    },
    /// Give an evictable lease's memory back (shrink or release it): a request that is not
    /// evictable needs it. Revoked (`reclaimed`) if still held after `revoke_in_ms`.
    ReclaimRequested {
        /// The lease.
        lease: LeaseId,
        /// Milliseconds until it is revoked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revoke_in_ms: Option<u64>,
    },
    /// Your processes use more memory on a device than your leases there reserve.
    OverUse {
        /// The device.
        device_index: u32,
        /// Bytes your processes use there.
        used_bytes: u64,
        /// Bytes your leases reserve there.
        reserved_bytes: u64,
        /// When your leases there will be revoked if the use does not drop (milliseconds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revoke_in_ms: Option<u64>,
    },
    /// The daemon is stopping; leases end with the connection.
    ShuttingDown,
    /// A waiting acquire's place in the queue, sent when it starts to wait and whenever its
    /// place changes; only to requests that asked for it ([`AcquireArgs::queued_events`]).
    Queued {
        /// The waiting request.
        request: RequestId,
        /// 1 for the next to be served: one more than the waiting requests served before it
        /// that want one of its devices.
        position: u32,
    },
}

/// Error codes, stable across versions. docs/PROTOCOL.md explains each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// A frame is not valid JSON of a known message.
    BadFrame,
    /// A frame's length prefix exceeds the daemon's limit.
    FrameTooLarge,
    /// The hello's version is not spoken here.
    UnsupportedVersion,
    /// A request came before the hello.
    HelloRequired,
    /// The peer's uid/gid is not in the allow list.
    NotAllowed,
    /// The operation needs root or the admin group.
    PermissionDenied,
    /// A field has a value that makes no sense (zero-sized lease, …).
    InvalidRequest,
    /// No such device.
    UnknownDevice,
    /// The request is larger than any matching device could ever grant.
    NeverFits,
    /// No such lease held by this session.
    UnknownLease,
    /// No such waiting request in this session.
    UnknownRequest,
    /// The request id is already in use by an outstanding request.
    DuplicateRequest,
    /// The lease already has a resize waiting.
    ResizePending,
    /// The request waited longer than its timeout.
    TimedOut,
    /// The request was cancelled (by the client, or because its lease went away).
    Cancelled,
    /// A per-session or per-uid limit was reached.
    LimitExceeded,
    /// The daemon is stopping.
    ShuttingDown,
    /// A bug in the daemon.
    Internal,
    /// A waiting grow failed: its lease and others were each waiting to grow into memory only
    /// the others hold, and this lease was the youngest of them.
    GrowDeadlock,
    /// Attach: no process has that pid (it exited, or never was).
    NoSuchProcess,
    /// Attach: the process belongs to another user than the caller (only root may attach
    /// another user's process).
    NotProcessOwner,
    /// Attach: the process is neither the caller nor one of its descendants.
    NotDescendant,
}

/// An error code with a human explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable code.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
}

impl ErrorBody {
    /// An error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Queue lengths per class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounts {
    /// Waiting critical requests.
    pub critical: u32,
    /// Waiting high requests.
    pub high: u32,
    /// Waiting normal requests.
    pub normal: u32,
    /// Waiting background requests.
    pub background: u32,
}

impl QueueCounts {
    /// Counts one more waiter of `class`.
    pub fn add(&mut self, class: Class) {
        match class {
            Class::Critical => self.critical += 1,
            Class::High => self.high += 1,
            Class::Normal => self.normal += 1,
            Class::Background => self.background += 1,
        }
    }

    /// All waiters.
    pub fn total(&self) -> u32 {
        self.critical + self.high + self.normal + self.background
    }
}

/// Leases and waiters in one status page, in all. A page then stays a few MiB however many
/// sessions a host has (a lease or waiter is at most about 700 bytes of JSON).
pub const STATUS_PAGE_ENTRIES: usize = 4096;

/// The daemon's state, as `status` returns it: every device, and one page of the leases and
/// then the waiters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The daemon itself.
    pub daemon: DaemonInfo,
    /// Every device, by index.
    pub devices: Vec<DeviceStatus>,
    /// Granted leases, by id (this page's).
    pub leases: Vec<LeaseStatus>,
    /// Waiting requests, in the order they would be served (this page's).
    pub waiters: Vec<WaiterStatus>,
    /// Budgets (jobs' shares of devices), on the first page; without their handles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetInfo>,
    /// How leases can be enforced on this host; absent from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<EnforcementStatus>,
    /// The host's own resources (memory, page-locked memory, CPUs by NUMA node); absent from
    /// daemons whose welcome does not list [`FEATURE_HOST`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostStatus>,
    /// Where the next page starts (ask with [`Op::StatusPage`]); absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more: Option<StatusCursor>,
}

impl StatusReport {
    /// Adds a later page's leases and waiters to this report, and takes its cursor. Pages are
    /// read at different moments: a lease released or a waiter served between two pages is
    /// shown as it was, one granted meanwhile may be missing.
    pub fn append(&mut self, page: StatusReport) {
        self.leases.extend(page.leases);
        self.waiters.extend(page.waiters);
        self.more = page.more;
    }
}

/// Where a status page starts: after a lease, or (once the leases are done) after a waiter's
/// place in the queue. Clients send it back as it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum StatusCursor {
    /// Leases with a greater id, then every waiter.
    Leases {
        /// The last lease shown.
        after: LeaseId,
    },
    /// Waiters served after this place (class rank, then arrival).
    Waiters {
        /// The last waiter's class rank (0 = critical).
        rank: u32,
        /// The last waiter's arrival number.
        seq: u64,
    },
}

/// The means of enforcing leases that the daemon provides.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EnforcementStatus {
    /// The MPS control daemon that gpud runs (`[enforce] mps`).
    pub mps: MpsStatus,
}

/// gpud's MPS control daemon, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MpsStatus {
    /// `[enforce] mps = true` in the config.
    pub enabled: bool,
    /// The control daemon is up now: the welcome lists [`FEATURE_MPS`].
    pub available: bool,
    /// Why it is not available (off in the config, binary missing, exited at once and how).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `CUDA_MPS_PIPE_DIRECTORY` for clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipe_directory: Option<String>,
    /// `CUDA_MPS_LOG_DIRECTORY`: the control daemon's and servers' logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_directory: Option<String>,
    /// The control daemon's pid, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// How many times gpud started it again after it ended.
    #[serde(default)]
    pub restarts: u32,
}

/// Facts about the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonInfo {
    /// Daemon version.
    pub version: String,
    /// Daemon pid.
    pub pid: u32,
    /// Milliseconds since start.
    pub uptime_ms: u64,
    /// Connected sessions.
    pub sessions: u32,
    /// `nvml` or `simulated`.
    pub backend: String,
    /// Journal entries the start-up replay skipped as harmless (a release of a lease it did
    /// not hold).
    #[serde(default)]
    pub journal_skipped: u64,
    /// Journaled leases that were not restored because they did not fit (the journal said
    /// more than the devices hold): dropped, never over-committed.
    #[serde(default)]
    pub journal_refused: u64,
}

/// One device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// gpud's index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory.
    pub total_bytes: u64,
    /// Memory kept back from leases.
    pub headroom_bytes: u64,
    /// Memory used by processes that hold no lease.
    pub unmanaged_bytes: u64,
    /// What leases may reserve: total − headroom − unmanaged.
    pub capacity_bytes: u64,
    /// Reserved by leases.
    pub reserved_bytes: u64,
    /// Bytes of it held by evictable leases (warm state that a reclaim gives back).
    #[serde(default)]
    pub evictable_bytes: u64,
    /// capacity − reserved (0 when over-committed).
    pub free_bytes: u64,
    /// No new grants while true.
    pub drained: bool,
    /// How many leases may hold compute at once.
    pub compute_slots: u32,
    /// Further compute slots only critical-class leases may take.
    #[serde(default)]
    pub critical_slots: u32,
    /// The (first) compute holder, if any.
    pub compute_holder: Option<ComputeHolder>,
    /// All compute holders.
    pub compute_holders: Vec<ComputeHolder>,
    /// Waiting requests per class that could be granted here.
    pub queued: QueueCounts,
    /// Processes using memory on the device, as the last NVML poll saw them.
    #[serde(default)]
    pub processes: Vec<ProcessStatus>,
    /// The NUMA node it is attached to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// Its NVLink island (devices with the same number are joined by NVLink), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_island: Option<u32>,
}

/// A process using device memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStatus {
    /// Its pid.
    pub pid: u32,
    /// Its name.
    pub process: String,
    /// Bytes it uses on the device.
    pub used_bytes: u64,
    /// The lease holder it belongs to (itself or an ancestor); none for unmanaged processes.
    pub owner_pid: Option<u32>,
    /// Its owner is over its reservation on this device.
    pub over_use: bool,
}

/// A lease holding a compute slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeHolder {
    /// The lease.
    pub lease: LeaseId,
    /// Holder's pid.
    pub pid: u32,
    /// Holder's process name.
    pub process: String,
    /// Class.
    pub class: Class,
    /// Milliseconds held so far.
    pub held_ms: u64,
}

/// One granted lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStatus {
    /// Lease id.
    pub id: LeaseId,
    /// Device UUID.
    pub device: String,
    /// Device index.
    pub device_index: u32,
    /// Bytes reserved.
    pub vram_bytes: u64,
    /// Holds the compute slot.
    pub compute: bool,
    /// Class.
    pub class: Class,
    /// Holder's pid.
    pub pid: u32,
    /// Holder's uid.
    pub uid: u32,
    /// Holder's process name.
    pub process: String,
    /// Holder's session.
    pub session: u64,
    /// Milliseconds since grant.
    pub held_ms: u64,
    /// A yield notice is outstanding.
    pub yield_requested: bool,
    /// The client's label.
    pub label: Option<String>,
    /// The budget it was granted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<LeaseId>,
    /// Warm state that gives its memory back on notice.
    #[serde(default)]
    pub evictable: bool,
    /// A reclaim notice is outstanding.
    #[serde(default)]
    pub reclaim_requested: bool,
    /// How long the holder's process has been seen stopped (absent while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_stopped_ms: Option<u64>,
    /// The group (lease of several devices) it is a part of: the group's first lease id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<LeaseId>,
    /// The program attached to the lease ([`Op::Attach`]), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_pid: Option<u32>,
    /// How the attached program's use of the lease is enforced; absent when none is attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforced_by: Option<EnforcedBy>,
    /// What this row reserves: a device (absent), or a host part. A host part's row has
    /// `device` `"host"` (memory, page-locked memory) or `"numa<N>"` (CPUs), `device_index`
    /// 0, `vram_bytes` 0 and no compute; its amount is in `host`.
    #[serde(default, skip_serializing_if = "Resource::is_device")]
    pub resource: Resource,
    /// A host part's amount: `mem_bytes`, `pinned_bytes` or `cpus` (with `numa_node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostGrant>,
}

/// What a ledger entry reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// Device memory and/or a compute slot.
    #[default]
    Device,
    /// Host memory.
    HostMemory,
    /// Page-locked host memory.
    Pinned,
    /// CPUs of one NUMA node.
    Cpus,
}

impl Resource {
    /// A device (the default, left out of the wire form).
    pub fn is_device(&self) -> bool {
        *self == Resource::Device
    }
}

/// The host's resources as gpud books them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostStatus {
    /// Host memory.
    pub memory: HostPoolStatus,
    /// Page-locked memory.
    pub pinned: HostPoolStatus,
    /// CPUs, by NUMA node.
    pub numa: Vec<NumaStatus>,
}

/// A host pool of bytes, counted like a device's memory.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostPoolStatus {
    /// What the host has (memory: MemTotal, or the configured size).
    pub total_bytes: u64,
    /// Never handed out.
    pub headroom_bytes: u64,
    /// Used by processes that hold no host lease (memory only).
    pub unmanaged_bytes: u64,
    /// What leases may reserve: total − headroom − unmanaged.
    pub capacity_bytes: u64,
    /// Reserved by leases.
    pub reserved_bytes: u64,
    /// Waiting requests for it, by class.
    #[serde(default)]
    pub queued: QueueCounts,
}

/// One NUMA node's CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NumaStatus {
    /// The node.
    pub node: u32,
    /// Its CPUs that gpud hands out (kernel numbers, ascending).
    pub cpus: Vec<u32>,
    /// Those granted now.
    pub granted: Vec<u32>,
    /// Waiting requests for its CPUs, by class.
    #[serde(default)]
    pub queued: QueueCounts,
}

/// One waiting request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterStatus {
    /// Waiter's session.
    pub session: u64,
    /// The client's request id.
    pub request: RequestId,
    /// Waiter's pid.
    pub pid: u32,
    /// Class.
    pub class: Class,
    /// Requested device.
    pub device: Placement,
    /// Bytes asked for (for a resize: the extra bytes).
    pub vram_bytes: u64,
    /// Wants the compute slot.
    pub compute: bool,
    /// For a resize, the lease growing.
    pub grows_lease: Option<LeaseId>,
    /// Milliseconds waited.
    pub waited_ms: u64,
    /// The client's label.
    pub label: Option<String>,
    /// For a lease of several devices: its parts (`device`, `vram_bytes` and `compute` are
    /// then the largest part's memory and whether any part computes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartArgs>,
    /// The host resources it asks for (for a resize of host memory: the extra bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostArgs>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_args_round_trip_and_default_away() {
        let text = r#"{"type":"request","id":3,"op":{"acquire":{"host":{"mem_bytes":1024,"cpus":4,"numa":"near"}}}}"#;
        let frame: ClientFrame = serde_json::from_str(text).unwrap();
        let ClientFrame::Request {
            op: Op::Acquire(args),
            ..
        } = &frame
        else {
            panic!("not an acquire: {frame:?}")
        };
        let host = args.host.as_ref().unwrap();
        assert_eq!((host.mem_bytes, host.pinned_bytes, host.cpus), (1024, 0, 4));
        assert_eq!(host.numa, NumaPlacement::Near);
        let node: HostArgs = serde_json::from_str(r#"{"numa":{"node":1},"cpus":2}"#).unwrap();
        assert_eq!(node.numa, NumaPlacement::Node(1));
        // Absent host args stay off the wire (older daemons refuse unknown fields).
        let plain = serde_json::to_string(&AcquireArgs::default()).unwrap();
        assert!(!plain.contains("host"), "{plain}");
        assert!(serde_json::from_str::<HostArgs>(r#"{"cpu":2}"#).is_err());
        assert_eq!("near".parse::<NumaPlacement>(), Ok(NumaPlacement::Near));
        assert_eq!("3".parse::<NumaPlacement>(), Ok(NumaPlacement::Node(3)));
        assert!("far".parse::<NumaPlacement>().is_err());
    }

    #[test]
    fn acquire_round_trips_with_defaults() {
        let text =
            r#"{"type":"request","id":7,"op":{"acquire":{"vram_bytes":1024,"compute":true}}}"#;
        let frame: ClientFrame = serde_json::from_str(text).unwrap();
        let ClientFrame::Request {
            id,
            op: Op::Acquire(args),
        } = &frame
        else {
            panic!("not an acquire: {frame:?}")
        };
        assert_eq!(*id, 7);
        assert_eq!(args.device, Placement::Any);
        assert_eq!(args.class, Class::Normal);
        let again: ClientFrame =
            serde_json::from_str(&serde_json::to_string(&frame).unwrap()).unwrap();
        assert_eq!(again, frame);
    }

    #[test]
    fn single_device_acquires_and_grants_keep_their_shape() {
        // What an older daemon or client reads: no parts, no placement policy.
        let args = AcquireArgs {
            vram_bytes: 1,
            ..AcquireArgs::default()
        };
        let text = serde_json::to_string(&args).unwrap();
        assert!(
            !text.contains("parts") && !text.contains("placement"),
            "{text}"
        );
        let info = LeaseInfo {
            lease: 1,
            device_uuid: "GPU-a".into(),
            device_index: 0,
            device_name: "sim".into(),
            vram_bytes: 1,
            compute: false,
            class: Class::Normal,
            cuda_visible_devices: "GPU-a".into(),
            token: String::new(),
            within: None,
            parts: Vec::new(),
            host: None,
        };
        let text = serde_json::to_string(&info).unwrap();
        assert!(!text.contains("parts") && !text.contains("host"), "{text}");
    }

    #[test]
    fn multi_device_acquires_round_trip() {
        let text = r#"{"type":"request","id":2,"op":{"acquire":{"parts":[{"vram_bytes":8},{"device":"1","compute":true}],"placement":"spread"}}}"#;
        let frame: ClientFrame = serde_json::from_str(text).unwrap();
        let ClientFrame::Request {
            op: Op::Acquire(args),
            ..
        } = &frame
        else {
            panic!("not an acquire: {frame:?}")
        };
        assert_eq!(args.parts.len(), 2);
        assert_eq!(args.parts[1].device, Placement::Index(1));
        assert_eq!(args.placement, Some(PlacementPolicy::Spread));
        let bad = r#"{"type":"request","id":2,"op":{"acquire":{"parts":[{"vram":8}]}}}"#;
        assert!(serde_json::from_str::<ClientFrame>(bad).is_err());
    }

    #[test]
    fn attach_round_trips_and_end_with_session_defaults_to_false() {
        let text = r#"{"type":"request","id":3,"op":{"attach":{"lease":5,"pid":42,"enforced_by":"supervised"}}}"#;
        let frame: ClientFrame = serde_json::from_str(text).unwrap();
        let ClientFrame::Request {
            op: Op::Attach(args),
            ..
        } = &frame
        else {
            panic!("not an attach: {frame:?}")
        };
        assert_eq!((args.lease, args.pid), (5, 42));
        assert_eq!(args.enforced_by, EnforcedBy::Supervised);
        assert!(!args.end_with_session);
        let again: ClientFrame =
            serde_json::from_str(&serde_json::to_string(&frame).unwrap()).unwrap();
        assert_eq!(again, frame);
        for by in EnforcedBy::ALL {
            let wire = serde_json::to_string(&by).unwrap();
            assert_eq!(wire, format!("\"{by}\""));
        }
        let bad = r#"{"type":"request","id":3,"op":{"attach":{"lease":5,"pid":42,"enforced_by":"hope"}}}"#;
        assert!(serde_json::from_str::<ClientFrame>(bad).is_err());
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let text = r#"{"type":"request","id":1,"op":{"acquire":{"vram":1}}}"#;
        assert!(serde_json::from_str::<ClientFrame>(text).is_err());
        let text = r#"{"type":"request","id":1,"op":"status"}"#;
        assert!(serde_json::from_str::<ClientFrame>(text).is_ok());
    }

    #[test]
    fn a_stopped_holder_s_revocation_reads_as_holder_stopped() {
        let text = r#"{"type":"event","event":{"revoked":{"lease":4,"reason":"holder_stopped"}}}"#;
        let frame: ServerFrame = serde_json::from_str(text).unwrap();
        assert_eq!(
            frame,
            ServerFrame::Event {
                event: Event::Revoked {
                    lease: 4,
                    reason: RevokeReason::HolderStopped,
                },
            }
        );
        assert_eq!(serde_json::to_string(&frame).unwrap(), text);
    }

    #[test]
    fn errors_serialize_with_snake_case_codes() {
        let frame = ServerFrame::Reply {
            id: 3,
            outcome: Outcome::Error(ErrorBody::new(ErrorCode::NeverFits, "too big")),
        };
        let text = serde_json::to_string(&frame).unwrap();
        assert!(text.contains("\"never_fits\""), "{text}");
    }
}
