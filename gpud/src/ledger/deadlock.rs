//! Grow deadlocks: leases that each wait to grow into memory only the others hold.
//!
//! A holder whose grow waits is usually blocked inside an allocation (the CUDA interposer
//! turns an allocation past the lease into a grow), so it gives nothing back until the grow is
//! answered. On a device, memory that can still come back is everything except what the leases
//! with a waiting grow hold: `capacity − Σ held by growing leases` (leases without a waiting
//! grow end or shrink some day; evictable ones can be reclaimed). When every waiting grow there
//! needs more than that, none can ever be granted: the growers are deadlocked. The rule that
//! resolves it: the grow of the youngest growing lease (latest granted, then highest id) fails
//! at once ([`Decision::GrowDeadlocked`]; its lease keeps its size), and the test is made again
//! with that lease counted as one that can give back.
//!
//! Like the other queue scans, it looks at the first `max_scan` waiters of the device only: it
//! runs in every scheduling round.
//!
//! Grows inside a budget are left alone: a budget's memory is its job's, and its members'
//! grows wait on each other by the job's own design.

use super::Ledger;
use super::types::{Decision, DeviceIdx};

impl Ledger {
    /// Fails grows on `d` until the growers there are not deadlocked.
    pub(super) fn break_grow_deadlocks(&mut self, d: DeviceIdx) {
        loop {
            let growers: Vec<(u64, u64)> = self.devices[d]
                .queue
                .iter()
                .take(self.config.max_scan)
                .filter_map(|(_, seq)| self.waiters.get(seq))
                .filter(|w| w.within.is_none())
                .filter_map(|w| w.grows.map(|id| (w.seq, id)))
                .collect();
            if growers.len() < 2 {
                return;
            }
            let held: u64 = growers
                .iter()
                .filter_map(|(_, id)| self.leases.get(id))
                .map(|l| l.vram_bytes)
                .sum();
            let can_come_back = self.devices[d].capacity().saturating_sub(held);
            let deadlocked = growers.iter().all(|(seq, _)| {
                self.waiters
                    .get(seq)
                    .is_some_and(|w| w.need.vram_bytes > can_come_back)
            });
            if !deadlocked {
                return;
            }
            let Some(&(seq, lease)) = growers.iter().max_by_key(|(_, id)| {
                let granted_at = self.leases.get(id).map(|l| l.granted_at);
                (granted_at, *id)
            }) else {
                return;
            };
            let waiter = self.remove_waiter(seq);
            if let Some(l) = self.leases.get_mut(&lease) {
                l.pending_grow = None;
            }
            self.decisions.push_back(Decision::GrowDeadlocked {
                ticket: waiter.ticket,
                lease,
            });
        }
    }
}
