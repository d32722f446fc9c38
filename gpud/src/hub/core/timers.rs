//! The hub's one timer table: the ledger's next deadline, the end of the re-adoption grace,
//! the latest time a journaled release may stay unwritten, and the next SIGKILL of an ended
//! session's program. The shell sleeps until the
//! earliest of them.

use std::time::Instant;

/// A deadline the core keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// The ledger's own next deadline (timeouts, yields, revocations).
    Ledger,
    /// Restored leases nobody re-adopted are dropped.
    Orphans,
    /// Unwritten journal entries are written.
    Journal,
    /// A journal write that failed is tried again.
    JournalRetry,
    /// Programs whose session ended get SIGKILL once their grace passed.
    Supervision,
}

const ALL: [Timer; 5] = [
    Timer::Ledger,
    Timer::Orphans,
    Timer::Journal,
    Timer::JournalRetry,
    Timer::Supervision,
];

/// When each timer fires, if armed.
#[derive(Debug, Default)]
pub(super) struct TimerTable {
    at: [Option<Instant>; ALL.len()],
}

impl TimerTable {
    /// Arms (`Some`) or disarms (`None`) a timer.
    pub(super) fn set(&mut self, timer: Timer, at: Option<Instant>) {
        self.at[timer as usize] = at;
    }

    /// When a timer fires.
    pub(super) fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer as usize]
    }

    /// The earliest armed deadline.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// Disarms and returns the timers due at `now`, in table order.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<Timer> {
        ALL.into_iter()
            .filter(|&t| {
                let due = self.get(t).is_some_and(|at| at <= now);
                if due {
                    self.set(t, None);
                }
                due
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_next_timeout_is_the_earliest_and_fires_once() {
        let t = Instant::now();
        let mut table = TimerTable::default();
        assert_eq!(table.next_timeout(), None);
        table.set(Timer::Journal, Some(t + Duration::from_millis(20)));
        table.set(Timer::Orphans, Some(t + Duration::from_secs(10)));
        assert_eq!(table.next_timeout(), Some(t + Duration::from_millis(20)));
        assert!(table.take_due(t).is_empty());
        assert_eq!(
            table.take_due(t + Duration::from_millis(20)),
            vec![Timer::Journal]
        );
        assert_eq!(table.next_timeout(), Some(t + Duration::from_secs(10)));
        table.set(Timer::Ledger, Some(t));
        assert_eq!(
            table.take_due(t + Duration::from_secs(11)),
            vec![Timer::Ledger, Timer::Orphans]
        );
        assert_eq!(table.next_timeout(), None);
    }
}
