//! Supervision: which program uses a lease (`attach`), and ending that program when its
//! session ends without releasing the lease.
//!
//! The shell reads what /proc says of the program ([`ProcessFacts`]); the core checks it
//! against the caller, records the attachment, and on the session's end decides the signals:
//! SIGTERM to the program's process group at once, SIGKILL after `supervision.kill_grace`.
//! Each signal goes out as an [`Action::Signal`] with the start time recorded here, so that a
//! pid reused by another process is never signalled. A daemon restart forgets attachments (they
//! are not journaled); the client library attaches again after it re-adopts a lease.

use std::collections::HashMap;
use std::time::Instant;

use gpud_proto::{AttachArgs, EnforcedBy, ErrorBody, ErrorCode, LeaseId, Reply, RequestId};
use tracing::{info, warn};

use super::timers::Timer;
use super::{Action, Core, KillReason, Now, Signal};
use crate::ledger::SessionId;

/// What /proc says of the process an attach names, read by the shell when the request came.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessFacts {
    /// Its start time (clock ticks since boot); `None` when no such process runs.
    pub start: Option<u64>,
    /// Its real and effective uids; `None` when unreadable.
    pub uids: Option<(u32, u32)>,
    /// It and its ancestors, nearest first.
    pub lineage: Vec<u32>,
}

/// A program attached to a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Attachment {
    pub session: SessionId,
    pub pid: u32,
    pub start: u64,
    pub enforced_by: EnforcedBy,
    pub end_with_session: bool,
}

/// A SIGKILL due once the grace after a SIGTERM has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DueKill {
    at: Instant,
    pid: u32,
    start: u64,
    lease: LeaseId,
}

/// The attachments, by lease, and the kills that wait for their grace.
#[derive(Debug, Default)]
pub(super) struct Supervision {
    attached: HashMap<LeaseId, Attachment>,
    due: Vec<DueKill>,
}

impl Supervision {
    /// The program attached to a lease (for a part of a group: to the group's first lease).
    pub(super) fn of(&self, lease: LeaseId) -> Option<&Attachment> {
        self.attached.get(&lease)
    }

    /// Attached leases per way of enforcement, among the leases `exists` says are granted.
    pub(super) fn counts(&self, exists: impl Fn(LeaseId) -> bool) -> [(EnforcedBy, usize); 3] {
        EnforcedBy::ALL.map(|by| {
            let n = self
                .attached
                .iter()
                .filter(|(id, a)| a.enforced_by == by && exists(**id))
                .count();
            (by, n)
        })
    }

    fn next_kill(&self) -> Option<Instant> {
        self.due.iter().map(|k| k.at).min()
    }
}

impl Core {
    /// An attach with what /proc said of its process when it came.
    pub fn attach(
        &mut self,
        now: Now,
        session: SessionId,
        id: RequestId,
        args: AttachArgs,
        process: ProcessFacts,
    ) {
        if self.sessions.contains_key(&session) {
            let result = self.check_attach(session, &args, &process);
            if let Ok(start) = result {
                info!(
                    lease = args.lease,
                    pid = args.pid,
                    enforced_by = %args.enforced_by,
                    end_with_session = args.end_with_session,
                    "program attached"
                );
                self.supervision.attached.insert(
                    args.lease,
                    Attachment {
                        session,
                        pid: args.pid,
                        start,
                        enforced_by: args.enforced_by,
                        end_with_session: args.end_with_session,
                    },
                );
            }
            let reply = result.map(|_| Reply::Attached {
                lease: args.lease,
                pid: args.pid,
            });
            self.reply(session, id, reply);
        }
        self.end_step(now);
    }

    /// The checks of an attach; the program's start time when it passes.
    fn check_attach(
        &self,
        session: SessionId,
        args: &AttachArgs,
        process: &ProcessFacts,
    ) -> Result<u64, ErrorBody> {
        let held = self
            .ledger
            .lease(args.lease)
            .is_some_and(|l| l.session == session && l.group.is_none_or(|g| g == l.id));
        if !held {
            return Err(ErrorBody::new(
                ErrorCode::UnknownLease,
                format!(
                    "lease {} is not held by this session (for a lease of several devices, attach its first lease)",
                    args.lease
                ),
            ));
        }
        let Some(peer) = self.peer(session) else {
            return Err(ErrorBody::new(ErrorCode::Internal, "session without peer"));
        };
        let Some(start) = process.start.filter(|_| args.pid != 0) else {
            return Err(ErrorBody::new(
                ErrorCode::NoSuchProcess,
                format!("no process has pid {}", args.pid),
            ));
        };
        if peer.uid != 0 && process.uids != Some((peer.uid, peer.uid)) {
            let whose = process
                .uids
                .map_or("an unknown user".to_string(), |(real, effective)| {
                    format!("uid {real} (effective {effective})")
                });
            return Err(ErrorBody::new(
                ErrorCode::NotProcessOwner,
                format!(
                    "process {} belongs to {whose}, not to uid {}: only root may attach another user's process",
                    args.pid, peer.uid
                ),
            ));
        }
        if peer.pid == 0 || !process.lineage.contains(&peer.pid) {
            return Err(ErrorBody::new(
                ErrorCode::NotDescendant,
                format!(
                    "process {} is neither the caller (pid {}) nor one of its descendants",
                    args.pid, peer.pid
                ),
            ));
        }
        Ok(start)
    }

    /// Whether the session attached a program to any of its leases.
    pub(super) fn supervises(&self, session: SessionId) -> bool {
        self.supervision
            .attached
            .values()
            .any(|a| a.session == session)
    }

    /// SIGKILL to the process group of the program attached to `lease` (a compute holder that
    /// ignored its yield notice until revoked); nothing when none is (a part of a group: its
    /// first lease's revocation, in the same step, kills the group's program).
    pub(super) fn kill_attached_program(&mut self, lease: LeaseId) {
        if let Some(a) = self.supervision.attached.get(&lease) {
            let (pid, start) = (a.pid, a.start);
            self.signal_group(pid, start, Signal::Kill, KillReason::YieldIgnored { lease });
        }
    }

    /// A lease was released: its program is no longer this daemon's business.
    pub(super) fn detach(&mut self, lease: LeaseId) {
        self.supervision.attached.remove(&lease);
    }

    /// A session ended: the programs it attached with `end_with_session` get SIGTERM now and
    /// SIGKILL after the grace; the others are forgotten.
    pub(super) fn end_programs_of(&mut self, now: Now, session: SessionId) {
        let mut ending: Vec<(LeaseId, Attachment)> = Vec::new();
        self.supervision.attached.retain(|&lease, a| {
            if a.session != session {
                return true;
            }
            if a.end_with_session {
                ending.push((lease, a.clone()));
            }
            false
        });
        ending.sort_unstable_by_key(|(lease, _)| *lease);
        let grace = self.settings.kill_grace;
        for (lease, a) in ending {
            warn!(
                lease,
                pid = a.pid,
                session,
                grace_ms = grace.as_millis() as u64,
                "the session ended without releasing its lease: ending the program attached to it"
            );
            let why = KillReason::SessionEnded { lease };
            self.signal_group(a.pid, a.start, Signal::Term, why);
            self.supervision.due.push(DueKill {
                at: now.at + grace,
                pid: a.pid,
                start: a.start,
                lease,
            });
        }
        self.timers
            .set(Timer::Supervision, self.supervision.next_kill());
    }

    /// The grace of ended programs passed: SIGKILL to what is left of them.
    pub(super) fn kill_due_programs(&mut self, now: Now) {
        let (due, later): (Vec<DueKill>, Vec<DueKill>) = std::mem::take(&mut self.supervision.due)
            .into_iter()
            .partition(|k| k.at <= now.at);
        self.supervision.due = later;
        for k in due {
            let why = KillReason::SessionEnded { lease: k.lease };
            self.signal_group(k.pid, k.start, Signal::Kill, why);
        }
        self.timers
            .set(Timer::Supervision, self.supervision.next_kill());
    }

    /// Signals a program's process group (the shell signals the process alone when it leads
    /// no group of its own). Never pid 0 or the daemon.
    fn signal_group(&mut self, pid: u32, start: u64, signal: Signal, why: KillReason) {
        if pid == 0 || pid == self.facts.pid {
            return;
        }
        self.actions.push_back(Action::Signal {
            pid,
            start,
            signal,
            group: true,
            why,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use gpud_proto::{AttachArgs, EnforcedBy, ErrorCode, Op, Outcome, Reply};

    use super::ProcessFacts;
    use crate::config::Config;
    use crate::hub::core::bench::{Bench, GIB, outcome, peer, sent_to};
    use crate::hub::core::{Action, KillReason, Signal};

    /// The caller (pid 10, uid 1000) holds lease 1; its child 11 runs.
    fn holder() -> Bench {
        let mut config = Config::default();
        config.supervision.kill_grace = Duration::from_secs(3);
        let mut b = Bench::new(&config);
        b.open(1, peer(10, 1000)).unwrap();
        b.acquire(1, 0, GIB, false);
        b.actions();
        b
    }

    fn child_facts() -> ProcessFacts {
        ProcessFacts {
            start: Some(111),
            uids: Some((1000, 1000)),
            lineage: vec![11, 10, 1],
        }
    }

    fn attach(b: &mut Bench, id: u64, pid: u32, facts: ProcessFacts, end: bool) -> Outcome {
        let args = AttachArgs {
            lease: 1,
            pid,
            enforced_by: EnforcedBy::Supervised,
            end_with_session: end,
        };
        let now = b.now();
        b.core.attach(now, 1, id, args, facts);
        let frames = sent_to(&b.actions(), 1);
        outcome(&frames, id).cloned().expect("an answer")
    }

    fn refusal(o: Outcome) -> ErrorCode {
        match o {
            Outcome::Error(e) => e.code,
            other => panic!("attached: {other:?}"),
        }
    }

    fn signals(actions: &[Action]) -> Vec<(u32, u64, Signal, bool)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Signal {
                    pid,
                    start,
                    signal,
                    group,
                    why: KillReason::SessionEnded { lease: 1 },
                } => Some((*pid, *start, *signal, *group)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn each_refusal_has_its_code() {
        let mut b = holder();
        let dead = ProcessFacts::default();
        assert_eq!(
            refusal(attach(&mut b, 1, 11, dead, true)),
            ErrorCode::NoSuchProcess
        );
        let foreign = ProcessFacts {
            uids: Some((2000, 2000)),
            ..child_facts()
        };
        assert_eq!(
            refusal(attach(&mut b, 2, 11, foreign, true)),
            ErrorCode::NotProcessOwner
        );
        let setuid = ProcessFacts {
            uids: Some((1000, 0)),
            ..child_facts()
        };
        assert_eq!(
            refusal(attach(&mut b, 3, 11, setuid, true)),
            ErrorCode::NotProcessOwner
        );
        let stranger = ProcessFacts {
            lineage: vec![12, 1],
            ..child_facts()
        };
        assert_eq!(
            refusal(attach(&mut b, 4, 12, stranger, true)),
            ErrorCode::NotDescendant
        );
        let args = AttachArgs {
            lease: 99,
            pid: 11,
            enforced_by: EnforcedBy::Mps,
            end_with_session: false,
        };
        let now = b.now();
        b.core.attach(now, 1, 5, args, child_facts());
        let frames = sent_to(&b.actions(), 1);
        assert_eq!(
            refusal(outcome(&frames, 5).cloned().unwrap()),
            ErrorCode::UnknownLease
        );
        // Another session may not attach to this session's lease.
        b.open(2, peer(20, 1000)).unwrap();
        let args = AttachArgs {
            lease: 1,
            pid: 21,
            enforced_by: EnforcedBy::Supervised,
            end_with_session: true,
        };
        let now = b.now();
        let facts = ProcessFacts {
            lineage: vec![21, 20],
            ..child_facts()
        };
        b.core.attach(now, 2, 6, args, facts);
        let frames = sent_to(&b.actions(), 2);
        assert_eq!(
            refusal(outcome(&frames, 6).cloned().unwrap()),
            ErrorCode::UnknownLease
        );
        assert_eq!(b.core.status(b.now()).leases[0].program_pid, None);
    }

    #[test]
    fn root_may_attach_another_user_s_descendant() {
        let mut b = Bench::new(&Config::default());
        b.open(1, peer(10, 0)).unwrap();
        b.acquire(1, 0, GIB, false);
        b.actions();
        let facts = ProcessFacts {
            uids: Some((1000, 1000)),
            ..child_facts()
        };
        let got = attach(&mut b, 1, 11, facts, false);
        assert_eq!(got, Outcome::Ok(Reply::Attached { lease: 1, pid: 11 }));
    }

    #[test]
    fn an_attached_program_shows_in_status_and_metrics() {
        let mut b = holder();
        let got = attach(&mut b, 1, 11, child_facts(), true);
        assert_eq!(got, Outcome::Ok(Reply::Attached { lease: 1, pid: 11 }));
        let row = &b.core.status(b.now()).leases[0];
        assert_eq!(row.program_pid, Some(11));
        assert_eq!(row.enforced_by, Some(EnforcedBy::Supervised));
        let text = b.core.metrics(b.now());
        assert!(
            text.contains("gpud_leases_enforced{enforced_by=\"supervised\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("gpud_leases_enforced{enforced_by=\"mps\"} 0\n"),
            "{text}"
        );
    }

    #[test]
    fn a_session_that_ends_without_release_ends_its_program_term_then_kill_after_the_grace() {
        let mut b = holder();
        attach(&mut b, 1, 11, child_facts(), true);
        let now = b.now();
        b.core.close(now, 1);
        assert_eq!(signals(&b.actions()), [(11, 111, Signal::Term, true)]);
        b.advance(Duration::from_millis(2900));
        assert_eq!(signals(&b.actions()), [], "not before the grace");
        b.advance(Duration::from_millis(200));
        assert_eq!(signals(&b.actions()), [(11, 111, Signal::Kill, true)]);
        b.advance(Duration::from_secs(60));
        assert_eq!(signals(&b.actions()), [], "once");
    }

    #[test]
    fn kill_ignored_yield_kills_the_attached_program_s_group_not_its_supervisor() {
        use crate::ledger::LedgerConfig;
        let config = Config {
            scheduler: LedgerConfig {
                revoke_after_yield: Some(Duration::from_millis(50)),
                ..LedgerConfig::default()
            },
            kill_ignored_yield: true,
            ..Config::default()
        };
        let mut b = Bench::new(&config);
        b.open(1, peer(10, 0)).unwrap();
        let phase = gpud_proto::AcquireArgs {
            compute: true,
            device: gpud_proto::Placement::Index(0),
            ..Default::default()
        };
        b.request(1, 0, Op::Acquire(phase.clone()));
        b.actions();
        attach(&mut b, 1, 11, child_facts(), true);
        // A critical waiter makes the holder yield; it does not, and is revoked.
        b.open(2, peer(20, 0)).unwrap();
        let critical = gpud_proto::AcquireArgs {
            class: gpud_proto::Class::Critical,
            ..phase
        };
        b.request(2, 0, Op::Acquire(critical));
        b.advance(Duration::from_millis(60));
        let kills: Vec<(u32, bool)> = b
            .actions()
            .into_iter()
            .filter_map(|a| match a {
                Action::Signal {
                    pid,
                    signal: Signal::Kill,
                    group,
                    why: KillReason::YieldIgnored { lease: 1 },
                    ..
                } => Some((pid, group)),
                _ => None,
            })
            .collect();
        assert_eq!(kills, [(11, true)], "the program's group, not pid 10");
    }

    #[test]
    fn a_released_lease_or_one_attached_without_end_with_session_ends_no_program() {
        let mut b = holder();
        attach(&mut b, 1, 11, child_facts(), true);
        b.request(1, 2, Op::Release { lease: 1 });
        b.actions();
        assert_eq!(b.core.status(b.now()).leases.len(), 0);
        let now = b.now();
        b.core.close(now, 1);
        b.advance(Duration::from_secs(10));
        assert_eq!(signals(&b.actions()), []);

        let mut b = holder();
        attach(&mut b, 1, 11, child_facts(), false);
        let now = b.now();
        b.core.close(now, 1);
        b.advance(Duration::from_secs(10));
        assert_eq!(signals(&b.actions()), []);
    }
}
