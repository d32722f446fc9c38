//! Stopped holders: the shell samples the processes the core names and reports what it read;
//! the core turns that into the ledger's "session stopped since t / running again".
//!
//! A holder is alive while its session is open and its process runnable. A process in state
//! `T` (stopped by a signal: SIGSTOP, a suspended Slurm job) or `t` (stopped by a tracer) is
//! not; the ledger decides what it loses ([`crate::ledger::Ledger::set_stopped`]).

use std::collections::BTreeSet;

use tracing::{info, warn};

use super::{Core, Now};
use crate::ledger::SessionId;

/// A process the shell is to sample: its pid and start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Watched {
    /// The process.
    pub pid: u32,
    /// Its start time, which tells it from a later process that reuses the pid.
    pub start: u64,
}

/// What the shell read of a watched process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessState {
    /// The process.
    pub process: Watched,
    /// In state `T` or `t`.
    pub stopped: bool,
}

impl Core {
    /// The processes to sample: each lease holder's, and each process known stopped (so that
    /// one that runs again is seen to, even without a lease), once each.
    pub fn watched_processes(&self) -> Vec<Watched> {
        let mut watched = BTreeSet::new();
        for (&session, peer) in &self.sessions {
            let holds = self.ledger.session_counts(session).0 > 0;
            if peer.pid != 0 && (holds || self.ledger.stopped_since(session).is_some()) {
                watched.insert(Watched {
                    pid: peer.pid,
                    start: peer.start,
                });
            }
        }
        watched.into_iter().collect()
    }

    /// A sample of watched processes. A process not in it (gone, or unreadable) keeps what the
    /// ledger knows: its session's end frees its leases anyway.
    pub fn process_states(&mut self, now: Now, states: &[ProcessState]) {
        let mut changed = false;
        for state in states {
            for session in self.sessions_of_process(state.process) {
                let known = self.ledger.stopped_since(session).is_some();
                if state.stopped && !known {
                    let leases = self.ledger.session_counts(session).0;
                    warn!(
                        session,
                        pid = state.process.pid,
                        leases,
                        "lease holder stopped: it loses leases that are waited for or past their maximum hold"
                    );
                    self.ledger.set_stopped(now.at, session, Some(now.at));
                    changed = true;
                } else if !state.stopped && known {
                    info!(session, pid = state.process.pid, "lease holder runs again");
                    self.ledger.set_stopped(now.at, session, None);
                    changed = true;
                }
            }
        }
        // Most samples change nothing: no step to end.
        if changed {
            self.end_step(now);
        }
    }

    /// The sessions whose peer is `process`, in id order.
    fn sessions_of_process(&self, process: Watched) -> Vec<SessionId> {
        let mut ids: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, p)| p.pid == process.pid && p.start == process.start)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }
}
