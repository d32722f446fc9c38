//! How the core answers: every ledger decision becomes one frame for the session it names.
//!
//! A grant has one encoding and one path: an acquire granted at once is delivered as the same
//! [`Decision::Granted`] a waiting one gets later, and a resize done at once as the same
//! [`Decision::Grew`].

use gpud_proto::ServerFrame;
use gpud_proto::{
    ErrorBody, ErrorCode, Event, LeaseId, LeaseInfo, LeasePart, Outcome, Reply, RequestId,
};

use super::{Action, Core, KillReason, Now, Signal};
use crate::ledger::{Decision, RevokeReason, SessionId};

impl Core {
    /// Delivers every decision the ledger has made.
    pub(super) fn deliver_decisions(&mut self, now: Now) {
        while let Some(decision) = self.ledger.poll_decision() {
            self.deliver(now, decision);
        }
    }

    /// Delivers what the ledger has decided, then `decision`: grants a request caused go out
    /// before the request's own answer (after a release, the next holder is waiting and the
    /// releaser is not).
    pub(super) fn decided(&mut self, now: Now, decision: Decision) {
        self.deliver_decisions(now);
        self.deliver(now, decision);
    }

    /// Turns one decision into its frame.
    fn deliver(&mut self, now: Now, decision: Decision) {
        // Known before the observer forgets an ending lease.
        let memory_only = match &decision {
            Decision::Revoked { lease, .. } => self.observer.memory_only(*lease),
            _ => false,
        };
        // A waiting host-memory resize ends with whichever decision answers its ticket.
        let resized = match &decision {
            Decision::Grew { ticket, .. }
            | Decision::TimedOut { ticket }
            | Decision::GrowDeadlocked { ticket, .. }
            | Decision::GrowAbandoned { ticket, .. } => {
                self.host.as_mut().and_then(|b| b.resizes.remove(ticket))
            }
            _ => None,
        };
        self.observer.decision(now.at, &self.ledger, &decision);
        match decision {
            Decision::Granted { ticket, lease } => {
                if let Some(owner) = self.budgets.pending.remove(&ticket) {
                    // A budget is answered with what its job's processes need: its handle.
                    self.budgets.owners.insert(lease, owner);
                    let info = self.budget_info(lease, true);
                    let reply = Reply::Budgets(info.into_iter().collect());
                    self.reply(ticket.session, ticket.request, Ok(reply));
                } else if let Some(info) = self.lease_info(lease) {
                    self.reply(ticket.session, ticket.request, Ok(Reply::Granted(info)));
                }
            }
            Decision::Grew {
                ticket,
                lease,
                vram_bytes,
            } => {
                // A grow of host memory names the lease its request named.
                let lease = resized.unwrap_or(lease);
                self.reply(
                    ticket.session,
                    ticket.request,
                    Ok(Reply::Resized { lease, vram_bytes }),
                )
            }
            Decision::TimedOut { ticket } => {
                self.budgets.pending.remove(&ticket);
                self.reply(
                    ticket.session,
                    ticket.request,
                    Err(ErrorBody::new(
                        ErrorCode::TimedOut,
                        "gave up waiting: timeout reached",
                    )),
                )
            }
            Decision::ReclaimRequested {
                session,
                lease,
                revoke_at,
            } => {
                let revoke_in_ms =
                    revoke_at.map(|at| at.saturating_duration_since(now.at).as_millis() as u64);
                self.event(
                    session,
                    Event::ReclaimRequested {
                        lease,
                        revoke_in_ms,
                    },
                );
            }
            Decision::BudgetEnded { ticket, budget } => {
                let job = self
                    .budgets
                    .owners
                    .get(&budget)
                    .map_or_else(String::new, |o| format!(" of job {}", o.job));
                self.reply(
                    ticket.session,
                    ticket.request,
                    Err(ErrorBody::new(
                        ErrorCode::Cancelled,
                        format!("budget {budget}{job} ended while the request waited"),
                    )),
                )
            }
            Decision::GrowDeadlocked { ticket, lease } => {
                self.reply(
                ticket.session,
                ticket.request,
                Err(ErrorBody::new(
                    ErrorCode::GrowDeadlock,
                    format!(
                        "lease {lease} cannot grow: it and other leases on its device each wait \
                         to grow into memory only the others hold, and it is the youngest \
                         (it keeps its size)"
                    ),
                )),
            );
            }
            Decision::GrowAbandoned { ticket, lease } => self.reply(
                ticket.session,
                ticket.request,
                Err(ErrorBody::new(
                    ErrorCode::Cancelled,
                    format!("lease {lease} ended while its resize waited"),
                )),
            ),
            Decision::YieldRequested {
                session,
                lease,
                reason,
                revoke_at,
            } => {
                let revoke_in_ms =
                    revoke_at.map(|at| at.saturating_duration_since(now.at).as_millis() as u64);
                let event = Event::YieldRequested {
                    lease,
                    reason: reason.into(),
                    revoke_in_ms,
                };
                self.event(session, event);
            }
            Decision::Revoked {
                session,
                lease,
                reason,
            } => {
                if reason == RevokeReason::YieldIgnored {
                    let (pid, process) = self
                        .peer(session)
                        .map_or((0, String::new()), |p| (p.pid, p.process.clone()));
                    tracing::warn!(
                        lease,
                        session,
                        pid,
                        process = %process,
                        kill = self.settings.kill_ignored_yield,
                        "lease revoked: its holder ignored the yield notice"
                    );
                }
                if reason == RevokeReason::HolderStopped {
                    let (pid, process) = self
                        .peer(session)
                        .map_or((0, String::new()), |p| (p.pid, p.process.clone()));
                    tracing::warn!(
                        lease,
                        session,
                        pid,
                        process = %process,
                        "lease revoked: its holder's process is stopped"
                    );
                }
                // A kernel of a compute holder may still run; a memory lease's holder is only
                // told (its memory is the audit's business).
                // A supervised session's kernels run in its attached program, not in the
                // supervisor: the program's group is killed, and the supervisor lives to report.
                if reason == RevokeReason::YieldIgnored
                    && self.settings.kill_ignored_yield
                    && !memory_only
                {
                    if self.supervises(session) {
                        self.kill_attached_program(lease);
                    } else if let Some(peer) = self.peer(session) {
                        let (pid, start) = (peer.pid, peer.start);
                        self.signal(pid, start, KillReason::YieldIgnored { lease });
                    }
                }
                self.event(
                    session,
                    Event::Revoked {
                        lease,
                        reason: reason.into(),
                    },
                );
            }
        }
    }

    /// Queues the answer to a request.
    pub(super) fn reply(
        &mut self,
        session: SessionId,
        id: RequestId,
        result: Result<Reply, ErrorBody>,
    ) {
        let outcome = match result {
            Ok(r) => Outcome::Ok(r),
            Err(e) => Outcome::Error(e),
        };
        self.outbox
            .push((session, ServerFrame::Reply { id, outcome }));
    }

    /// Queues an event for a session.
    pub(super) fn event(&mut self, session: SessionId, event: Event) {
        self.outbox.push((session, ServerFrame::Event { event }));
    }

    /// Kills a process: the one path for both reasons. Never pid 0 (unknown) or the daemon.
    pub(super) fn signal(&mut self, pid: u32, start: u64, why: KillReason) {
        if pid == 0 || pid == self.facts.pid {
            return;
        }
        self.actions.push_back(Action::Signal {
            pid,
            start,
            signal: Signal::Kill,
            group: false,
            why,
        });
    }

    /// What a holder is told about its lease: for a group (its first lease), every device
    /// part, `CUDA_VISIBLE_DEVICES` listing the parts' devices in the parts' order, and the
    /// host resources granted with them (a lease of the host alone has no device).
    pub(super) fn lease_info(&mut self, id: LeaseId) -> Option<LeaseInfo> {
        let token = self.token(id);
        let host = self.host_grant(id).map(Box::new);
        let lease = self.ledger.lease(id)?;
        let (class, within) = (lease.class, lease.within);
        let group = self.ledger.group_of(id);
        let gpu_parts: Vec<LeasePart> = group
            .iter()
            .filter_map(|&p| {
                let part = self.ledger.lease(p)?;
                Some(LeasePart {
                    lease: p,
                    device_index: part.device as u32,
                    device_uuid: self.ledger.device(part.device)?.spec().uuid.clone(),
                    vram_bytes: part.vram_bytes,
                    compute: part.compute,
                })
            })
            .collect();
        let Some(first) = gpu_parts.first().cloned() else {
            // The host alone.
            return Some(LeaseInfo {
                lease: id,
                device_index: 0,
                device_name: String::new(),
                vram_bytes: 0,
                compute: false,
                class: class.into(),
                cuda_visible_devices: String::new(),
                device_uuid: String::new(),
                token,
                within,
                parts: Vec::new(),
                host,
            });
        };
        let uuids: Vec<&str> = gpu_parts.iter().map(|p| p.device_uuid.as_str()).collect();
        let cuda_visible_devices = uuids.join(",");
        let parts = if gpu_parts.len() > 1 {
            gpu_parts
        } else {
            Vec::new()
        };
        Some(LeaseInfo {
            lease: id,
            device_index: first.device_index,
            device_name: self
                .names
                .get(first.device_index as usize)
                .cloned()
                .unwrap_or_default(),
            vram_bytes: first.vram_bytes,
            compute: first.compute,
            class: class.into(),
            cuda_visible_devices,
            device_uuid: first.device_uuid,
            token,
            within,
            parts,
            host,
        })
    }
}
