//! The hub core: everything the hub decides, with no I/O — sessions and admission, requests,
//! adoption tokens, the audit's rules, the journal's ordering, and one timer table.
//!
//! It sits on the [`Ledger`] as the ledger sits on nothing: inputs are method calls that carry
//! [`Now`] (the monotonic and the wall clock, read by the caller) and facts the shell gathered
//! (peers, process usage and lineage, whether a journaled owner still runs); randomness comes
//! from the RNG it was given. Outputs are [`Action`]s, drained with [`Core::poll_action`] in the
//! order they must be carried out: journal entries before the frames that announce them.
//! [`Core::next_timeout`] is the one deadline the shell sleeps until, and
//! [`Core::handle_timeout`] fires what is due.
//!
//! The shell (`hub/mod.rs`) reads clocks, owns sockets and the journal file, sends signals
//! and reads /proc; nothing here does.

mod answer;
mod audit;
#[cfg(test)]
mod bench;
mod budgets;
mod host;
mod journaling;
mod liveness;
mod observer;
mod ops;
mod queued;
mod sessions;
mod status;
mod supervision;
mod timers;
mod usage;
mod wire;
mod withheld;

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod host_tests;
#[cfg(test)]
mod liveness_tests;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use gpud_proto::{LeaseId, ServerFrame};
use rand::RngCore;

use crate::config::{Config, Limits};
use crate::ledger::{Ledger, SessionId};

use audit::{Auditor, Footprint};
use timers::{Timer, TimerTable};

pub use budgets::{BUDGETS, BudgetOwner};
pub use journaling::{LeaseRecord, Restorable};
pub use liveness::{ProcessState, Watched};
pub use observer::{EndReason, Notice, wire_name};
pub use sessions::{ADMIN_SESSIONS, Access, Peer};
pub use supervision::ProcessFacts;
pub use usage::ProcessSample;

/// The placeholder session that holds leases restored from the journal until their owners
/// re-adopt them. Real sessions are numbered from 1.
pub const ORPHANS: SessionId = 0;

/// Longest a journaled release waits to be written when no grant comes to carry it.
const JOURNAL_DELAY: Duration = Duration::from_millis(20);

/// When an input happens: the monotonic clock for deadlines, the wall clock for the journal
/// (which outlives the process and so the monotonic clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time.
    pub at: Instant,
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

/// What the shell must do, in order.
#[must_use = "an action must be carried out"]
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Queue a frame to a session; a session that cannot take it is closed with
    /// [`Core::close`].
    Send {
        /// The session.
        session: SessionId,
        /// The frame.
        frame: ServerFrame,
    },
    /// Record a lease change in the journal (in memory, until [`Action::FlushJournal`]).
    Journal(JournalEntry),
    /// Write what the journal recorded.
    FlushJournal,
    /// Send a signal to a process, unless its pid now belongs to another process.
    Signal {
        /// The process.
        pid: u32,
        /// Its start time (clock ticks since boot; 0 when unknown, then it is not checked).
        start: u64,
        /// Which signal.
        signal: Signal,
        /// Signal the process group it leads (the process alone when it leads none).
        group: bool,
        /// Why, for the log.
        why: KillReason,
    },
    /// Tell the watchers (D-Bus) something changed.
    Notify(Notice),
}

/// A change for the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalEntry {
    /// A lease granted, or handed to a new owner.
    Grant(LeaseRecord),
    /// A lease's new size.
    Resize {
        /// The lease.
        id: LeaseId,
        /// Bytes it reserves now.
        vram_bytes: u64,
    },
    /// A lease ended.
    Release(LeaseId),
}

/// Signals the hub sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM.
    Term,
    /// SIGKILL.
    Kill,
}

/// Why a process is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// It held a compute lease, ignored the yield notice, and the lease was revoked: a kernel
    /// still running there would keep the device from the next holder.
    YieldIgnored {
        /// The revoked lease.
        lease: LeaseId,
    },
    /// It kept device memory a grace period after its leases were revoked for over-use.
    KeptMemory {
        /// The owner it belongs to.
        owner: u32,
        /// The device.
        device: usize,
    },
    /// It was attached to a lease with `end_with_session`, and the session ended without
    /// releasing the lease.
    SessionEnded {
        /// The lease.
        lease: LeaseId,
    },
}

/// What the core knows of the daemon it runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// `nvml` or `simulated`.
    pub backend: &'static str,
    /// The daemon's own pid: reported in status, and never signalled.
    pub pid: u32,
}

/// The settings the core takes from the config (with the access lists resolved by the shell).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Who may connect and administer.
    pub access: Access,
    /// Abuse limits.
    pub limits: Limits,
    /// Audit policy.
    pub audit: crate::config::AuditConfig,
    /// Kill a compute holder that ignored its yield notice until revoked.
    pub kill_ignored_yield: bool,
    /// From SIGTERM to SIGKILL when an attached program's session ends.
    pub kill_grace: Duration,
}

impl Settings {
    /// The settings of `config`, with `access` resolved from its access lists.
    pub fn new(config: &Config, access: Access) -> Self {
        Self {
            access,
            limits: config.limits,
            audit: config.audit,
            kill_ignored_yield: config.kill_ignored_yield,
            kill_grace: config.supervision.kill_grace,
        }
    }
}

/// The hub's decisions over a ledger. See the module documentation.
pub struct Core {
    ledger: Ledger,
    names: Vec<String>,
    sessions: HashMap<SessionId, Peer>,
    settings: Settings,
    facts: Facts,
    started: Instant,
    observer: observer::Observer,
    timers: TimerTable,
    /// Frames of the current step; they follow the journal entries of the step.
    outbox: Vec<(SessionId, ServerFrame)>,
    actions: VecDeque<Action>,
    journal: journaling::JournalState,
    /// Secrets that let an owner re-adopt its lease after a restart.
    tokens: HashMap<LeaseId, String>,
    rng: Box<dyn RngCore + Send>,
    auditor: Auditor,
    /// The last poll, for status.
    usage: Vec<Vec<ProcessSample>>,
    /// The last poll's footprints, for metrics.
    footprints: Vec<Footprint>,
    /// Frames waiting for a journal write that failed.
    withheld: withheld::Withheld,
    /// Whose each budget is.
    budgets: budgets::Budgets,
    /// Waiters that hear their place in the queue.
    places: queued::Places,
    /// The means of enforcement the daemon runs (the MPS control daemon), as last reported.
    enforcement: gpud_proto::EnforcementStatus,
    /// Programs attached to leases.
    supervision: supervision::Supervision,
    /// The host's pools and the CPUs granted; `None` when host resources are off.
    host: Option<host::HostBook>,
}

impl Core {
    /// A core over `ledger`, whose devices have the product names `names`. `rng` makes the
    /// adoption tokens: a cryptographic one in the daemon, a seeded one in tests.
    pub fn new(
        now: Now,
        ledger: Ledger,
        names: Vec<String>,
        settings: Settings,
        facts: Facts,
        rng: Box<dyn RngCore + Send>,
    ) -> Self {
        Self {
            usage: vec![Vec::new(); names.len()],
            auditor: Auditor::new(settings.audit),
            observer: observer::Observer::new(names.len()),
            footprints: Vec::new(),
            ledger,
            names,
            sessions: HashMap::new(),
            settings,
            facts,
            started: now.at,
            timers: TimerTable::default(),
            outbox: Vec::new(),
            actions: VecDeque::new(),
            journal: journaling::JournalState::default(),
            tokens: HashMap::new(),
            rng,
            withheld: withheld::Withheld::default(),
            budgets: budgets::Budgets::default(),
            places: queued::Places::default(),
            enforcement: gpud_proto::EnforcementStatus::default(),
            supervision: supervision::Supervision::default(),
            host: None,
        }
    }

    /// The state of the means of enforcement changed (the MPS control daemon came up, ended,
    /// or cannot run); status reports it from now on.
    pub fn enforcement(&mut self, status: gpud_proto::EnforcementStatus) {
        self.enforcement = status;
    }

    /// The next thing the shell must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The one deadline: the earliest of the ledger's, the orphans' and the journal's.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Now) {
        for timer in self.timers.take_due(now.at) {
            match timer {
                Timer::Ledger => self.ledger.handle_timeout(now.at),
                Timer::Orphans => self.drop_orphans(now),
                Timer::Journal => self.flush_journal(),
                Timer::JournalRetry => self.retry_journal(),
                Timer::Supervision => self.kill_due_programs(now),
            }
        }
        self.end_step(now);
    }

    /// A new configuration: limits, classes, access lists, audit; leases stay.
    pub fn reload(&mut self, now: Now, config: &Config, access: Access) {
        self.settings = Settings::new(config, access);
        self.auditor.set_config(config.audit);
        self.ledger.set_config(now.at, config.scheduler.clone());
        self.ledger
            .set_slots(now.at, config.compute_slots, config.critical_slots);
        tracing::info!("configuration reloaded");
        self.end_step(now);
    }

    /// Stop: every session hears it, the journal is written, and the sessions are forgotten
    /// (their leases stay in the journal, for their owners to re-adopt after a restart).
    pub fn shutdown(&mut self, now: Now) {
        tracing::info!(sessions = self.sessions.len(), "shutting down");
        let mut ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        ids.sort_unstable();
        for session in ids {
            self.event(session, gpud_proto::Event::ShuttingDown);
        }
        self.end_step(now);
        self.flush_journal();
        self.sessions.clear();
    }

    /// The ledger, for checks.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Ends every input: decisions become frames, lease changes journal entries (written
    /// first when they grant), device changes notices, and the timers are re-armed.
    fn end_step(&mut self, now: Now) {
        self.deliver_decisions(now);
        // Budgets end by release, revocation or an admin's revoke alike: forget their owners.
        if !self.budgets.owners.is_empty() {
            let ledger = &self.ledger;
            self.budgets
                .owners
                .retain(|&id, _| ledger.lease(id).is_some());
        }
        self.report_places();
        self.journal_changes(now);
        if self.journal.urgent {
            self.flush_journal();
        }
        self.observer.step(now.at, &self.ledger);
        for notice in self.observer.take_notices() {
            self.actions.push_back(Action::Notify(notice));
        }
        for (session, frame) in std::mem::take(&mut self.outbox) {
            self.send_now_or_hold(session, frame);
        }
        // Releases wait for the next grant's write, or at most JOURNAL_DELAY.
        if self.journal.unwritten && self.timers.get(Timer::Journal).is_none() {
            self.timers
                .set(Timer::Journal, Some(now.at + JOURNAL_DELAY));
        }
        self.timers.set(Timer::Ledger, self.ledger.poll_timeout());
    }
}
