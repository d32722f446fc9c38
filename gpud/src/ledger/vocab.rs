//! The ledger's vocabulary: priority classes, device selectors, placement policies, why a holder is asked to yield
//! or loses its lease, and queue lengths.
//!
//! The wire has types of the same names (`gpud_proto`); the hub core converts at its
//! boundary, so the ledger neither knows the protocol nor changes with it.

use std::fmt;

/// A lease's number, unique for the life of the daemon (and kept across restarts).
pub type LeaseId = u64;

/// A session's number for one of its requests.
pub type RequestId = u64;

/// Priority class of a request. Higher classes are served first; FIFO within a class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Batch work that may wait for everything else.
    Background,
    /// The default.
    #[default]
    Normal,
    /// Time-bound work.
    High,
    /// Deadline-critical work: its waiting asks compute holders to yield, and it may use the
    /// critical slots.
    Critical,
}

impl Class {
    /// Every class, highest first.
    pub const ALL: [Class; 4] = [
        Class::Critical,
        Class::High,
        Class::Normal,
        Class::Background,
    ];

    /// 0 for `Critical` up to 3 for `Background`: the order in which queues are served.
    pub fn rank(self) -> usize {
        match self {
            Class::Critical => 0,
            Class::High => 1,
            Class::Normal => 2,
            Class::Background => 3,
        }
    }
}

/// Which device a request wants: one by index or UUID, or any (the ledger chooses).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Placement {
    /// The device that can grant soonest, then the best fit.
    #[default]
    Any,
    /// The device with this index.
    Index(u32),
    /// The device with this UUID.
    Uuid(String),
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Any => f.write_str("any"),
            Placement::Index(i) => write!(f, "{i}"),
            Placement::Uuid(u) => f.write_str(u),
        }
    }
}

/// How the ledger chooses among the devices that can grant a request at once (docs/PROTOCOL.md,
/// "Placement policies"). A request that waits is granted on the first device (or set of
/// devices) that can grant it: soonest wins over the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PlacementPolicy {
    /// Least memory left over after the grant, then fewest compute holders, then lowest index.
    #[default]
    BestFit,
    /// Most free memory, then fewest compute holders, then lowest index: load is spread.
    Spread,
    /// Most reserved memory, then most compute holders, then least free memory, then lowest
    /// index: the most loaded devices fill first, so whole devices stay free.
    Pack,
    /// Every part on one NVLink island (or, for devices without one, one NUMA node), best fit
    /// within it; the island with the least free memory that can grant is chosen.
    Near,
}

impl PlacementPolicy {
    /// Every policy.
    pub const ALL: [PlacementPolicy; 4] = [
        PlacementPolicy::BestFit,
        PlacementPolicy::Spread,
        PlacementPolicy::Pack,
        PlacementPolicy::Near,
    ];

    /// Its name on the wire and the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementPolicy::BestFit => "best-fit",
            PlacementPolicy::Spread => "spread",
            PlacementPolicy::Pack => "pack",
            PlacementPolicy::Near => "near",
        }
    }
}

impl fmt::Display for PlacementPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a holder is asked to yield its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum YieldReason {
    /// A critical request waits for the slot.
    CriticalWaiting,
    /// The lease has been held longer than its class and kind allow.
    MaxHold,
}

/// A client session (one socket connection or one D-Bus name), numbered by the daemon.
pub type SessionId = u64;

/// Why a lease was taken away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RevokeReason {
    /// An administrator revoked it.
    Admin,
    /// The holder did not yield within the grace period.
    YieldIgnored,
    /// The holder's processes used more device memory than it reserved.
    OverUse,
    /// The budget it was granted from ended.
    BudgetEnded,
    /// An evictable lease kept memory it was asked to give back past the deadline.
    Reclaimed,
    /// The holder's process was stopped when a waiter needed the lease, or when the lease
    /// reached its maximum hold.
    HolderStopped,
}

/// Waiting requests of a device, per class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
}
