//! `acquire`: a lease of memory, compute, or both — within the session's limits.

use gpud_proto::{AcquireArgs, ErrorBody, ErrorCode};

use super::{Answered, ledger_error, validate};
use crate::hub::core::{Core, Now};
use crate::ledger::{AcquireSpec, Decision, Ticket};

impl Core {
    pub(super) fn acquire(&mut self, now: Now, ticket: Ticket, args: AcquireArgs) -> Answered {
        let class = args.class;
        let watch = args.queued_events;
        let asked = self.checked_acquire(ticket, args).and_then(|spec| {
            let within = spec.within;
            self.ledger
                .acquire(now.at, ticket, spec)
                .map_err(|e| self.budget_error(within, ledger_error(e)))
        });
        match asked {
            Ok(Some(lease)) => {
                self.decided(now, Decision::Granted { ticket, lease });
                None
            }
            Ok(None) => {
                self.observer.waiting(now.at, ticket, class);
                if watch {
                    self.places.watch(ticket);
                }
                None
            }
            Err(e) => {
                self.observer.refused(class, e.code);
                Some(Err(e))
            }
        }
    }

    /// The request as the ledger takes it, if its arguments and the session's limits allow.
    fn checked_acquire(&self, ticket: Ticket, args: AcquireArgs) -> Result<AcquireSpec, ErrorBody> {
        let timeout = validate::timeout(args.timeout_ms)?;
        validate::label(args.label.as_deref())?;
        let peer = self.peer(ticket.session);
        let within = match peer {
            Some(p) => self.budget_of_request(p, args.budget.as_deref())?,
            None => None,
        };
        // Inside a budget the budget's class applies, which an admin chose.
        if within.is_none() && !peer.is_some_and(|p| self.settings.access.may_use(p, args.class)) {
            return Err(ErrorBody::new(
                ErrorCode::NotAllowed,
                format!(
                    "uid {} may not ask for the {} class: add it to access.critical_uids or a group in access.critical_groups",
                    peer.map_or(0, |p| p.uid),
                    args.class.as_str()
                ),
            ));
        }
        let limits = &self.settings.limits;
        let (leases, waiters) = self.ledger.session_counts(ticket.session);
        if leases >= limits.max_leases_per_session {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "a session may hold at most {} leases (limits.max_leases_per_session)",
                    limits.max_leases_per_session
                ),
            ));
        }
        if waiters >= limits.max_outstanding_requests {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "a session may have at most {} waiting requests (limits.max_outstanding_requests)",
                    limits.max_outstanding_requests
                ),
            ));
        }
        if let Some(p) = peer {
            let mine = self.uid_entries(p.uid);
            if mine >= limits.max_entries_per_uid {
                return Err(ErrorBody::new(
                    ErrorCode::LimitExceeded,
                    format!(
                        "uid {} already holds or waits for {mine} leases (limits.max_entries_per_uid)",
                        p.uid
                    ),
                ));
            }
        }
        Ok(AcquireSpec {
            placement: args.device.into(),
            vram_bytes: args.vram_bytes,
            compute: args.compute,
            class: args.class.into(),
            timeout,
            label: args.label,
            within,
            budget: None,
            evictable: args.evictable,
        })
    }

    /// A refusal of a request inside a budget names the budget's job too.
    pub(in crate::hub::core) fn budget_error(
        &self,
        within: Option<gpud_proto::LeaseId>,
        mut e: ErrorBody,
    ) -> ErrorBody {
        if let Some(owner) = within.and_then(|b| self.budgets.owners.get(&b)) {
            e.message = format!("{} (the budget of job {})", e.message, owner.job);
        }
        e
    }

    /// Leases and waiting requests of all of `uid`'s sessions.
    fn uid_entries(&self, uid: u32) -> usize {
        self.sessions
            .iter()
            .filter(|(_, p)| p.uid == uid)
            .map(|(&s, _)| {
                let (leases, waiters) = self.ledger.session_counts(s);
                leases + waiters
            })
            .sum()
    }
}
