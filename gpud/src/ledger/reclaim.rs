//! Evictable leases and their reclaim: warm state that gives its memory back with notice.
//!
//! An evictable lease (memory only: a prover's resident parameters and context) counts against
//! its device's capacity like any lease. When a request that is *not* evictable cannot fit on
//! any device it may use, and reclaiming evictable memory on one of them would make it fit,
//! the holders of just enough of that memory are asked to give it back (only where memory is
//! all it lacks: a request that also waits for a compute slot there reclaims nothing until the
//! slot is free): a
//! [`Decision::ReclaimRequested`] with a deadline, lowest class first, then oldest. A holder
//! shrinks or releases (keeping what is cheap to keep), or is revoked at the deadline. Nothing
//! is granted until the memory is actually free, so capacity is never exceeded; evictable
//! requests never cause a reclaim.

use std::time::Instant;

use super::Ledger;
use super::timers::Timer;
use super::types::{Decision, DeviceIdx, Waiter};
use super::vocab::{LeaseId, RevokeReason};

impl Ledger {
    /// Asks evictable holders on `d` for memory that a waiter there needs and cannot otherwise
    /// get. At most one waiter per pass, the first in serving order that eviction can help.
    pub(super) fn refresh_reclaims(&mut self, now: Instant, d: DeviceIdx) {
        if self.devices[d].drained || self.devices[d].evictable_bytes == 0 {
            return;
        }
        for seq in self.serving_order(d) {
            let Some(waiter) = self.waiters.get(&seq) else {
                continue;
            };
            // A group is not served by reclaims (docs/PROTOCOL.md, "Leases of several
            // devices"): what one device gives back does not place its other parts.
            if waiter.evictable
                || waiter.within.is_some()
                || waiter.need.vram_bytes == 0
                || !waiter.parts.is_empty()
            {
                continue;
            }
            match self.reclaim_target(waiter) {
                // Memory is not what it waits for.
                Target::Fits => {}
                // Memory it can use is already on its way back.
                Target::Coming => return,
                Target::Device(target, shortfall) if target == d => {
                    self.reclaim(now, d, shortfall);
                    return;
                }
                // Another device serves it better; that device's pass asks there.
                Target::Device(..) => return,
                Target::Hopeless => {}
            }
        }
    }

    /// Whether warm state of `taking` bytes on `d` would take memory that requests waiting
    /// there (not evictable) ask: warm state is granted only from memory beyond what they ask
    /// in all, or it would be reclaimed again at once (and memory freed for a waiter would go
    /// to warm state instead).
    pub(super) fn memory_wanted(&self, d: DeviceIdx, taking: u64) -> bool {
        let dev = &self.devices[d];
        let wanted = dev
            .queue
            .iter()
            .take(self.config.max_scan)
            .filter_map(|(_, seq)| self.waiters.get(seq))
            .filter(|w| !w.evictable)
            .map(|w| w.need_on(d).vram_bytes)
            .fold(0u64, u64::saturating_add);
        wanted > 0 && wanted.saturating_add(taking) > dev.free()
    }

    /// Where reclaiming would let `waiter` fit, and how much is missing there.
    fn reclaim_target(&self, waiter: &Waiter) -> Target {
        let mut best: Option<(u64, DeviceIdx)> = None;
        for &c in &waiter.candidates {
            let dev = &self.devices[c];
            if dev.drained {
                continue;
            }
            if waiter.need.vram_bytes <= dev.free() {
                return Target::Fits;
            }
            // It waits for a compute slot here too: memory freed now would only sit unused
            // (or go to someone else) until the slot frees, and the slot's release may free
            // enough memory by itself. Asked again then, if still short.
            if waiter.need.compute && dev.free_slots(waiter.class) == 0 {
                continue;
            }
            let reclaiming = self.reclaiming_bytes(c);
            let have = dev.free().saturating_add(reclaiming);
            let Some(shortfall) = waiter.need.vram_bytes.checked_sub(have).filter(|&s| s > 0)
            else {
                return Target::Coming;
            };
            let askable = dev.evictable_bytes - reclaiming;
            if askable >= shortfall && best.is_none_or(|(s, _)| shortfall < s) {
                best = Some((shortfall, c));
            }
        }
        best.map_or(Target::Hopeless, |(s, c)| Target::Device(c, s))
    }

    /// Bytes of evictable leases on `d` already asked to give their memory back.
    fn reclaiming_bytes(&self, d: DeviceIdx) -> u64 {
        self.devices[d]
            .evictable
            .iter()
            .filter_map(|id| self.leases.get(id))
            .filter(|l| l.reclaim_by.is_some())
            .map(|l| l.vram_bytes)
            .sum()
    }

    /// Asks the evictable holders of `d` for at least `shortfall` bytes: lowest class first,
    /// then oldest.
    fn reclaim(&mut self, now: Instant, d: DeviceIdx, shortfall: u64) {
        let mut victims: Vec<(usize, Instant, LeaseId, u64)> = self.devices[d]
            .evictable
            .iter()
            .filter_map(|id| self.leases.get(id))
            .filter(|l| l.reclaim_by.is_none())
            .map(|l| {
                (
                    usize::MAX - l.class.rank(),
                    l.granted_at,
                    l.id,
                    l.vram_bytes,
                )
            })
            .collect();
        victims.sort_unstable();
        let deadline = now.checked_add(self.config.reclaim_grace);
        let mut asked = 0u64;
        for (_, _, id, bytes) in victims {
            if asked >= shortfall {
                break;
            }
            asked += bytes;
            let Some(lease) = self.leases.get_mut(&id) else {
                continue;
            };
            lease.reclaim_by = Some(deadline.unwrap_or(now));
            if let Some(at) = deadline {
                self.timers.arm(at, Timer::ReclaimDeadline(id));
            }
            self.decisions.push_back(Decision::ReclaimRequested {
                session: lease.session,
                lease: id,
                revoke_at: deadline,
            });
        }
    }

    /// A reclaim's deadline: a lease that still holds memory it was asked for is revoked.
    pub(super) fn reclaim_deadline(&mut self, now: Instant, id: LeaseId) {
        if self.leases.get(&id).is_some_and(|l| l.reclaim_by.is_some()) {
            self.revoke_lease(now, id, RevokeReason::Reclaimed);
        }
    }

    /// A reclaimed lease shrank or went: the notice is answered.
    pub(super) fn reclaim_answered(&mut self, id: LeaseId) {
        if let Some(at) = self.leases.get_mut(&id).and_then(|l| l.reclaim_by.take()) {
            self.timers.disarm(at, Timer::ReclaimDeadline(id));
        }
    }
}

/// Where reclaim could help a waiter.
enum Target {
    /// Its memory fits on a device now.
    Fits,
    /// Freed memory is on its way: no more reclaim.
    Coming,
    /// Reclaim this many bytes on this device.
    Device(DeviceIdx, u64),
    /// Eviction alone cannot make it fit anywhere.
    Hopeless,
}
