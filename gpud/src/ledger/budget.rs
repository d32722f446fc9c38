//! Budgets: leases that other leases are granted from (a job's share of a device).
//!
//! A budget reserves its memory on the device like any lease, but holds no compute slot; it
//! gives its members the right to take up to `compute_slots` of the device's slots at once.
//! A member's memory comes out of the budget (the device has counted it already), and its
//! compute slot out of both the budget's allowance and the device. So a member queues against
//! its budget first, then (for compute) against the device, with everyone else.
//!
//! Ending a budget ends what is inside it: members are revoked, waiting members withdrawn.

use std::collections::BTreeSet;

use super::vocab::{LeaseId, SessionId};

/// What a request for a budget asks beyond an ordinary lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetSpec {
    /// How many of the device's compute slots its members may hold at once (0: none).
    pub compute_slots: u32,
    /// The session that holds the budget once granted: budgets outlive the request's session
    /// (a scheduler's prolog asks, the job's processes use it, the epilog ends it).
    pub holder: SessionId,
}

/// A budget's books: its limits and what its members hold and wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Compute slots its members may hold at once.
    pub compute_slots: u32,
    /// Bytes its members reserve (at most the budget's own bytes).
    pub used_bytes: u64,
    /// Members holding a compute slot.
    pub compute_used: u32,
    /// Its granted members.
    pub members: BTreeSet<LeaseId>,
    /// Its waiting members (waiter keys).
    pub waiting: BTreeSet<u64>,
}

impl Budget {
    /// Empty books with `compute_slots` to hand out.
    pub fn new(compute_slots: u32) -> Self {
        Self {
            compute_slots,
            used_bytes: 0,
            compute_used: 0,
            members: BTreeSet::new(),
            waiting: BTreeSet::new(),
        }
    }

    /// Whether a member needing `vram_bytes` (and a compute slot when `compute`) fits next to
    /// what the members hold, in a budget of `limit` bytes.
    pub fn fits(&self, limit: u64, vram_bytes: u64, compute: bool) -> bool {
        self.used_bytes
            .checked_add(vram_bytes)
            .is_some_and(|used| used <= limit)
            && (!compute || self.compute_used < self.compute_slots)
    }

    /// Counts a granted member (or a member's growth, with `new_member == false`).
    pub fn add(&mut self, member: LeaseId, vram_bytes: u64, compute: bool, new_member: bool) {
        self.used_bytes += vram_bytes;
        if new_member {
            self.members.insert(member);
            if compute {
                self.compute_used += 1;
            }
        }
    }

    /// Forgets an ended member.
    pub fn remove(&mut self, member: LeaseId, vram_bytes: u64, compute: bool) {
        self.used_bytes -= vram_bytes;
        if self.members.remove(&member) && compute {
            self.compute_used -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_fit_by_bytes_and_by_compute_allowance() {
        let mut b = Budget::new(1);
        assert!(b.fits(8, 6, true));
        b.add(1, 6, true, true);
        assert!(!b.fits(8, 6, false), "6 + 6 > 8");
        assert!(b.fits(8, 2, false));
        assert!(!b.fits(8, 1, true), "the one compute slot is taken");
        assert!(!b.fits(u64::MAX, u64::MAX, false), "no overflow");
        b.remove(1, 6, true);
        assert_eq!((b.used_bytes, b.compute_used), (0, 0));
        assert!(b.members.is_empty());
    }
}
