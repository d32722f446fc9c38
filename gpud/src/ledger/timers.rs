//! The ledger's deadlines as a table: one ordered set of (instant, timer) pairs.

use std::collections::BTreeSet;
use std::time::Instant;

use super::vocab::{LeaseId, SessionId};

/// Something that happens at a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timer {
    /// A waiter (by sequence number) gives up.
    WaitDeadline(u64),
    /// A lease has been held for its kind's and class's maximum.
    MaxHold(LeaseId),
    /// A yield notice went unanswered for the grace period.
    RevokeGrace(LeaseId),
    /// A reclaim notice went unanswered until its deadline.
    ReclaimDeadline(LeaseId),
    /// A session's process has been stopped for the stopped grace.
    Stopped(SessionId),
}

/// Pending deadlines, earliest first.
#[derive(Debug, Default)]
pub struct Timers {
    set: BTreeSet<(Instant, Timer)>,
}

impl Timers {
    /// Arms `timer` at `at`.
    pub fn arm(&mut self, at: Instant, timer: Timer) {
        self.set.insert((at, timer));
    }

    /// Disarms `timer` that was armed at `at`.
    pub fn disarm(&mut self, at: Instant, timer: Timer) {
        self.set.remove(&(at, timer));
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.set.first().map(|(at, _)| *at)
    }

    /// Removes and returns the earliest timer due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        match self.set.first() {
            Some((at, _)) if *at <= now => self.set.pop_first().map(|(_, t)| t),
            _ => None,
        }
    }
}
