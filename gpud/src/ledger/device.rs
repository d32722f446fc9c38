//! One device's books: reservations, compute holders, and the queue of waiters it could serve.

use std::collections::BTreeSet;

use super::vocab::{Class, LeaseId};

use super::types::DeviceSpec;

/// A device as the ledger tracks it.
#[derive(Debug)]
pub(super) struct Device {
    pub spec: DeviceSpec,
    /// Sum of the VRAM of leases on this device.
    pub reserved: u64,
    /// Leases holding a compute slot, in grant order.
    pub holders: Vec<LeaseId>,
    pub drained: bool,
    /// Waiters that could be granted here, in the order they are served: (class rank, seq).
    pub queue: BTreeSet<(usize, u64)>,
    /// The same waiters by arrival: the first is the one protected from overtaking.
    pub by_age: BTreeSet<u64>,
    /// Queued waiters that lease from a budget: they may be grantable when the device's own
    /// memory is all reserved (the budget's is not).
    pub budget_queued: usize,
    /// Evictable leases here, and their bytes.
    pub evictable: BTreeSet<LeaseId>,
    pub evictable_bytes: u64,
}

impl Device {
    pub fn new(spec: DeviceSpec) -> Self {
        Self {
            spec,
            reserved: 0,
            holders: Vec::new(),
            drained: false,
            queue: BTreeSet::new(),
            by_age: BTreeSet::new(),
            budget_queued: 0,
            evictable: BTreeSet::new(),
            evictable_bytes: 0,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.spec.capacity()
    }

    /// Bytes that may still be reserved (0 when over-committed by unmanaged usage).
    pub fn free(&self) -> u64 {
        self.capacity().saturating_sub(self.reserved)
    }

    /// Compute slots a request of `class` could take now. Holders of any class count against
    /// both budgets, so a non-critical request waits while critical work fills the device's
    /// ordinary slots.
    pub fn free_slots(&self, class: Class) -> usize {
        (self.spec.slots_for(class) as usize).saturating_sub(self.holders.len())
    }

    /// Nothing more can be granted here until something is released.
    pub fn exhausted(&self) -> bool {
        self.drained
            || (self.free() == 0
                && self.free_slots(Class::Critical) == 0
                && self.budget_queued == 0)
    }
}
