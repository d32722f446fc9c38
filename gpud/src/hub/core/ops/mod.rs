//! Requests, one file per operation: each checks its arguments (the daemon's only request
//! validation, in [`validate`]), asks the ledger, and answers.

mod acquire;
mod admin;
mod adopt;
mod budget;
mod cancel;
mod release;
mod resize;
mod validate;

use gpud_proto::{ErrorBody, Op, Reply, RequestId};

use super::{Core, Now};
use crate::ledger::{SessionId, Ticket};

/// What an operation did: answered now, or answered (or to be answered) as a decision.
pub(super) type Answered = Option<Result<Reply, ErrorBody>>;

impl Core {
    /// A request from an admitted session. Every request gets exactly one answer: now, or as
    /// a decision when it waits.
    pub fn request(&mut self, now: Now, session: SessionId, id: RequestId, op: Op) {
        if self.sessions.contains_key(&session) {
            let ticket = Ticket {
                session,
                request: id,
            };
            if let Some(result) = self.dispatch(now, ticket, op) {
                // Grants the request caused go out before its own reply.
                self.deliver_decisions(now);
                self.reply(session, id, result);
            }
        }
        self.end_step(now);
    }

    fn dispatch(&mut self, now: Now, ticket: Ticket, op: Op) -> Answered {
        match op {
            Op::Acquire(args) => self.acquire(now, ticket, args),
            Op::Resize {
                lease,
                vram_bytes,
                timeout_ms,
                host_mem_bytes,
            } => match host_mem_bytes {
                Some(bytes) => self.resize_host(now, ticket, lease, vram_bytes, bytes, timeout_ms),
                None => self.resize(now, ticket, lease, vram_bytes, timeout_ms),
            },
            Op::Release { lease } => Some(self.release(now, ticket.session, lease)),
            Op::Cancel { request } => Some(self.cancel(now, ticket.session, request)),
            Op::Drain { device } => Some(self.drain(now, ticket.session, &device)),
            Op::Undrain { device } => Some(self.undrain(now, ticket.session, &device)),
            Op::Revoke { lease } => Some(self.revoke(now, ticket.session, lease)),
            Op::Adopt { lease, token } => Some(self.adopt(now, ticket.session, lease, &token)),
            Op::Status => Some(Ok(self.status_reply(now, None))),
            Op::StatusPage(cursor) => Some(Ok(self.status_reply(now, Some(cursor)))),
            Op::Ping => Some(Ok(Reply::Pong)),
            Op::Metrics => Some(Ok(Reply::Metrics {
                text: self.metrics(now),
            })),
            Op::CreateBudget(args) => self.create_budget(now, ticket, args),
            Op::EndBudget(args) => Some(self.end_budget(now, ticket.session, args)),
            Op::Budgets { job } => Some(Ok(self.list_budgets(ticket.session, job.as_deref()))),
            // The shell reads the process's facts and calls `Core::attach`; an attach that
            // reaches here came through a path that read nothing.
            Op::Attach(args) => {
                tracing::error!(lease = args.lease, "attach without the process's facts");
                Some(Err(ErrorBody::new(
                    gpud_proto::ErrorCode::Internal,
                    "attach reached the hub without what /proc says of the process",
                )))
            }
        }
    }
}

impl Core {
    fn status_reply(&self, now: Now, from: Option<gpud_proto::StatusCursor>) -> Reply {
        let page = self.status_page(now, from, gpud_proto::STATUS_PAGE_ENTRIES);
        Reply::Status(Box::new(page))
    }
}

/// The error body of a ledger refusal.
pub(super) fn ledger_error(e: crate::ledger::LedgerError) -> ErrorBody {
    use crate::ledger::LedgerError;
    use gpud_proto::ErrorCode;
    let code = match &e {
        LedgerError::UnknownDevice(_) => ErrorCode::UnknownDevice,
        LedgerError::NeverFits { .. } | LedgerError::HostNeverFits { .. } => ErrorCode::NeverFits,
        LedgerError::Invalid(_) => ErrorCode::InvalidRequest,
        LedgerError::UnknownLease(_) | LedgerError::NoSuchLease(_) => ErrorCode::UnknownLease,
        LedgerError::UnknownRequest(_) => ErrorCode::UnknownRequest,
        LedgerError::DuplicateRequest(_) => ErrorCode::DuplicateRequest,
        LedgerError::ResizePending(_) => ErrorCode::ResizePending,
        LedgerError::ExceedsBudget { .. } | LedgerError::BudgetWithoutCompute(_) => {
            ErrorCode::NeverFits
        }
        LedgerError::UnknownBudget(_) => ErrorCode::UnknownLease,
    };
    ErrorBody::new(code, e.to_string())
}
