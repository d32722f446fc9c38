//! Liveness: no lease is held forever.
//!
//! Every lease but a budget has a maximum hold for its kind (compute: it holds a compute slot;
//! memory: it holds memory only) and class. When it passes, the holder is asked to yield, and
//! is revoked if it still holds the lease a grace later (`revoke_after_yield` for compute,
//! `memory_revoke_after_yield` for memory). Budgets have none: their job ends them.
//!
//! A holder is alive while its session is open and its process runnable. The daemon samples
//! holders' processes and tells the ledger when one is stopped ([`Ledger::set_stopped`]): a
//! stopped process cannot answer a notice, so
//! - a lease of a stopped holder that reaches its maximum hold (or has reached it when the
//!   holder stops) is revoked at once, and
//! - once the holder has been stopped for `stopped_grace`, every lease of it that a waiter
//!   needs (memory the waiter lacks, or a compute slot it waits for) is revoked,
//!
//! both as [`RevokeReason::HolderStopped`].

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::Ledger;
use super::timers::Timer;
use super::types::{Lease, Need, Waiter};
use super::vocab::{LeaseId, RevokeReason, SessionId, YieldReason};

/// The liveness books: deadlines armed for leases, and stopped sessions.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// When each lease reaches its maximum hold (as armed).
    holds: HashMap<LeaseId, Instant>,
    /// When each lease that was asked to yield is revoked (as armed).
    revokes: HashMap<LeaseId, Instant>,
    /// Sessions whose process is stopped: since when, and when the stopped grace ends.
    stopped: BTreeMap<SessionId, Stopped>,
    /// A pass over stopped holders is running (revoking schedules, which would start another).
    refreshing: bool,
}

#[derive(Debug, Clone, Copy)]
struct Stopped {
    since: Instant,
    grace_over: Option<Instant>,
}

impl Ledger {
    /// The holder process of `session` is stopped since `since` (`Some`: SIGSTOP, a debugger,
    /// a suspended job), or runnable again (`None`). A session already known stopped keeps its
    /// first instant.
    pub fn set_stopped(&mut self, now: Instant, session: SessionId, since: Option<Instant>) {
        let Some(since) = since else {
            self.unwatch(session);
            return;
        };
        if self.watch.stopped.contains_key(&session) {
            return;
        }
        let grace_over = since.checked_add(self.config.liveness.stopped_grace);
        if let Some(at) = grace_over {
            self.timers.arm(at, Timer::Stopped(session));
        }
        self.watch
            .stopped
            .insert(session, Stopped { since, grace_over });
        // Leases past their maximum hold wait for an answer it cannot give.
        let past: Vec<LeaseId> = self
            .session_leases(session)
            .into_iter()
            .filter(|id| {
                self.leases.get(id).is_some_and(|l| {
                    self.hold_limit(l)
                        .is_some_and(|h| l.granted_at.checked_add(h).is_some_and(|at| at <= now))
                })
            })
            .collect();
        for id in past {
            if self.leases.contains_key(&id) {
                self.revoke_lease(now, id, RevokeReason::HolderStopped);
            }
        }
        self.refresh_stopped(now);
    }

    /// Since when the holder process of `session` is known to be stopped.
    pub fn stopped_since(&self, session: SessionId) -> Option<Instant> {
        self.watch.stopped.get(&session).map(|s| s.since)
    }

    /// The sessions known to be stopped, with the instant each was first seen so.
    pub fn stopped_sessions(&self) -> impl Iterator<Item = (SessionId, Instant)> + '_ {
        self.watch.stopped.iter().map(|(&s, st)| (s, st.since))
    }

    /// The maximum hold of `lease`, by kind and class; none for a budget.
    pub fn hold_limit(&self, lease: &Lease) -> Option<Duration> {
        if lease.budget.is_some() {
            None
        } else if lease.compute {
            self.config.max_hold.get(lease.class)
        } else {
            self.config.liveness.memory_max_hold.get(lease.class)
        }
    }

    /// How long after a yield notice `lease` is revoked, by kind.
    pub(super) fn yield_grace(&self, lease: &Lease) -> Option<Duration> {
        if lease.compute {
            self.config.revoke_after_yield
        } else {
            self.config.liveness.memory_revoke_after_yield
        }
    }

    /// A lease was granted or restored: its maximum hold counts from its grant.
    pub(super) fn hold_started(&mut self, id: LeaseId) {
        let Some(lease) = self.leases.get(&id) else {
            return;
        };
        let at = self
            .hold_limit(lease)
            .and_then(|h| lease.granted_at.checked_add(h));
        if let Some(at) = at {
            self.timers.arm(at, Timer::MaxHold(id));
            self.watch.holds.insert(id, at);
        }
    }

    /// A yield notice went to `id`: it is revoked at `at` if still held.
    pub(super) fn revoke_armed(&mut self, id: LeaseId, at: Instant) {
        self.timers.arm(at, Timer::RevokeGrace(id));
        self.watch.revokes.insert(id, at);
    }

    /// A lease ended: its deadlines go with it.
    pub(super) fn hold_ended(&mut self, id: LeaseId) {
        if let Some(at) = self.watch.holds.remove(&id) {
            self.timers.disarm(at, Timer::MaxHold(id));
        }
        if let Some(at) = self.watch.revokes.remove(&id) {
            self.timers.disarm(at, Timer::RevokeGrace(id));
        }
    }

    /// A session runs again, or ended: it is no longer watched.
    pub(super) fn unwatch(&mut self, session: SessionId) {
        if let Some(s) = self.watch.stopped.remove(&session) {
            if let Some(at) = s.grace_over {
                self.timers.disarm(at, Timer::Stopped(session));
            }
        }
    }

    /// A new policy: maximum holds and stopped graces count again from the grants and stops,
    /// with the new limits.
    pub(super) fn rearm_liveness(&mut self) {
        let ids: Vec<LeaseId> = self.leases.keys().copied().collect();
        for id in ids {
            if let Some(at) = self.watch.holds.remove(&id) {
                self.timers.disarm(at, Timer::MaxHold(id));
                self.hold_started(id);
            } else if self.leases[&id].yield_requested.is_none() {
                // A lease without a limit before may have one now (one past it has fired).
                self.hold_started(id);
            }
        }
        let grace = self.config.liveness.stopped_grace;
        for (&session, s) in &mut self.watch.stopped {
            if let Some(at) = s.grace_over {
                self.timers.disarm(at, Timer::Stopped(session));
            }
            s.grace_over = s.since.checked_add(grace);
            if let Some(at) = s.grace_over {
                self.timers.arm(at, Timer::Stopped(session));
            }
        }
    }

    /// Timer: `id` reached its maximum hold. A stopped holder loses it at once; any other is
    /// asked to yield (unless a notice is out already).
    pub(super) fn max_hold_reached(&mut self, now: Instant, id: LeaseId) {
        self.watch.holds.remove(&id);
        let Some(lease) = self.leases.get(&id) else {
            return;
        };
        if self.watch.stopped.contains_key(&lease.session) {
            self.revoke_lease(now, id, RevokeReason::HolderStopped);
        } else if lease.yield_requested.is_none() {
            self.request_yield(now, id, YieldReason::MaxHold);
        }
    }

    /// Timer: the grace after a yield notice to `id` ran out.
    pub(super) fn yield_grace_over(&mut self, now: Instant, id: LeaseId) {
        self.watch.revokes.remove(&id);
        if self.leases.contains_key(&id) {
            self.revoke_lease(now, id, RevokeReason::YieldIgnored);
        }
    }

    /// Timer: `session` has been stopped for the stopped grace.
    pub(super) fn stopped_grace_over(&mut self, now: Instant, session: SessionId) {
        if let Some(s) = self.watch.stopped.get_mut(&session) {
            s.grace_over = s.grace_over.filter(|&at| at > now);
        }
        self.refresh_stopped(now);
    }

    /// Revokes every lease of a holder stopped past its grace that a waiter needs.
    pub(super) fn refresh_stopped(&mut self, now: Instant) {
        if self.watch.stopped.is_empty() || self.watch.refreshing {
            return;
        }
        self.watch.refreshing = true;
        while let Some(id) = self.needed_stopped_lease(now) {
            self.revoke_lease(now, id, RevokeReason::HolderStopped);
        }
        self.watch.refreshing = false;
    }

    /// The first lease of a holder stopped for its whole grace that some waiter needs.
    fn needed_stopped_lease(&self, now: Instant) -> Option<LeaseId> {
        let grace = self.config.liveness.stopped_grace;
        self.watch
            .stopped
            .iter()
            .filter(|(_, s)| s.since.checked_add(grace).is_some_and(|at| at <= now))
            .filter_map(|(session, _)| self.sessions.get(session))
            .flat_map(|h| h.leases.iter())
            .filter_map(|id| self.leases.get(id))
            .find(|l| self.needed(l))
            .map(|l| l.id)
    }

    /// Whether a waiter on the lease's device needs what the lease holds.
    fn needed(&self, lease: &Lease) -> bool {
        if lease.budget.is_some() || self.devices[lease.device].drained {
            return false;
        }
        self.devices[lease.device]
            .queue
            .iter()
            .take(self.config.max_scan)
            .filter_map(|(_, seq)| self.waiters.get(seq))
            .any(|w| self.waits_for(w, lease))
    }

    /// Whether `waiter` lacks what `lease` holds: memory it does not find free (on the device,
    /// or in the budget both are in), or a compute slot it finds none of. Warm state never
    /// takes from a stopped holder (as it never causes a reclaim), and a session never takes
    /// from itself.
    fn waits_for(&self, waiter: &Waiter, lease: &Lease) -> bool {
        if waiter.evictable || waiter.ticket.session == lease.session {
            return false;
        }
        let dev = &self.devices[lease.device];
        // A group competes on this pool with what its parts need here.
        let need = if waiter.parts.is_empty() {
            waiter.need
        } else {
            waiter.need_on(lease.device)
        };
        let same_budget = waiter.within.is_some() && waiter.within == lease.within;
        let budget_lacks = |need: Need| {
            waiter
                .within
                .is_some_and(|b| same_budget && !self.budget_fits(b, &need))
        };
        let memory = lease.vram_bytes > 0
            && need.vram_bytes > 0
            && match (waiter.within, lease.within) {
                (None, None) => need.vram_bytes > dev.free(),
                _ => budget_lacks(Need {
                    vram_bytes: need.vram_bytes,
                    compute: false,
                }),
            };
        let compute = need.compute
            && lease.compute
            && (dev.free_slots(waiter.class) == 0
                || budget_lacks(Need {
                    vram_bytes: 0,
                    compute: true,
                }));
        memory || compute
    }
}
