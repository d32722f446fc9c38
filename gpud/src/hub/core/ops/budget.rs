//! `create_budget`, `end_budget`, `budgets`: a job's share of a device, which the job's
//! processes lease from (see [`crate::hub::core::budgets`]).

use gpud_proto::{BudgetArgs, EndBudgetArgs, ErrorBody, ErrorCode, LeaseId, Reply};
use tracing::info;

use super::{Answered, ledger_error, validate};
use crate::hub::core::budgets::{BUDGETS, BudgetOwner};
use crate::hub::core::{Core, Now};
use crate::ledger::{AcquireSpec, BudgetSpec, Decision, SessionId, Ticket};

impl Core {
    pub(super) fn create_budget(&mut self, now: Now, ticket: Ticket, args: BudgetArgs) -> Answered {
        let spec = match self.checked_budget(ticket.session, &args) {
            Ok(spec) => spec,
            Err(e) => return Some(Err(e)),
        };
        let owner = BudgetOwner {
            job: args.job,
            uid: args.uid,
            cgroup: args.cgroup,
        };
        // Known before the grant, which may come at once, so that it records its owner.
        self.budgets.pending.insert(ticket, owner);
        match self.ledger.acquire(now.at, ticket, spec) {
            Ok(Some(lease)) => {
                self.decided(now, Decision::Granted { ticket, lease });
                None
            }
            Ok(None) => {
                self.observer.waiting(now.at, ticket, args.class);
                None
            }
            Err(e) => {
                self.budgets.pending.remove(&ticket);
                Some(Err(ledger_error(e)))
            }
        }
    }

    fn checked_budget(
        &self,
        session: SessionId,
        args: &BudgetArgs,
    ) -> Result<AcquireSpec, ErrorBody> {
        if !self.is_admin(session) {
            return Err(super::admin::not_admin("creating a budget"));
        }
        let timeout = validate::timeout(args.timeout_ms)?;
        validate::name("job", &args.job)?;
        if let Some(cgroup) = &args.cgroup {
            validate::name("cgroup", cgroup)?;
            if !cgroup.starts_with('/') {
                return Err(ErrorBody::new(
                    ErrorCode::InvalidRequest,
                    format!("cgroup {cgroup:?} must be a path as /proc/PID/cgroup shows it"),
                ));
            }
        }
        if self.budgets.owners.len() + self.budgets.pending.len()
            >= self.settings.limits.max_entries_per_uid
        {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "at most {} budgets may exist or wait (limits.max_entries_per_uid)",
                    self.settings.limits.max_entries_per_uid
                ),
            ));
        }
        Ok(AcquireSpec {
            placement: args.device.clone().into(),
            vram_bytes: args.vram_bytes,
            compute: false,
            class: args.class.into(),
            timeout,
            label: Some(format!("job {}", args.job)),
            within: None,
            budget: Some(BudgetSpec {
                compute_slots: args.compute_slots,
                holder: BUDGETS,
            }),
            evictable: false,
            parts: Vec::new(),
            policy: crate::ledger::PlacementPolicy::BestFit,
        })
    }

    pub(super) fn end_budget(
        &mut self,
        now: Now,
        session: SessionId,
        args: EndBudgetArgs,
    ) -> Result<Reply, ErrorBody> {
        if !self.is_admin(session) {
            return Err(super::admin::not_admin("ending a budget"));
        }
        let ids: Vec<LeaseId> = match (&args.budget, &args.job) {
            (Some(id), None) if self.budgets.owners.contains_key(id) => vec![*id],
            (Some(id), None) => {
                return Err(ErrorBody::new(
                    ErrorCode::UnknownLease,
                    format!("no budget {id}"),
                ));
            }
            (None, Some(job)) => self.budgets.of_job(job),
            _ => {
                return Err(ErrorBody::new(
                    ErrorCode::InvalidRequest,
                    "name a budget or a job, not both",
                ));
            }
        };
        let by = self.peer(session).map_or(0, |p| p.uid);
        for id in ids {
            let job = self.budgets.owners.get(&id).map(|o| o.job.clone());
            self.ledger
                .release(now.at, BUDGETS, id)
                .map_err(ledger_error)?;
            info!(budget = id, job, by_uid = by, "budget ended");
        }
        Ok(Reply::Done)
    }

    pub(super) fn list_budgets(&mut self, session: SessionId, job: Option<&str>) -> Reply {
        let peer = self.peer(session).cloned();
        let admin = self.is_admin(session);
        let mut ids: Vec<LeaseId> = self
            .budgets
            .owners
            .iter()
            .filter(|(_, o)| job.is_none_or(|j| o.job == j))
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        let rows = ids
            .into_iter()
            .filter_map(|id| {
                let mine = peer
                    .as_ref()
                    .zip(self.budgets.owners.get(&id))
                    .is_some_and(|(p, o)| p.uid == o.uid);
                self.budget_info(id, mine || admin)
            })
            .collect();
        Reply::Budgets(rows)
    }
}
