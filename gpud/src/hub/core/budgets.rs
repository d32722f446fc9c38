//! Budgets as the hub knows them: whose job each is, the handle its processes present, and
//! which requests leased from which budget.
//!
//! The ledger keeps a budget's books; the hub keeps its owner (job, uid, cgroup), because
//! those decide who may lease from it, and the journal records both. A budget is held by the
//! [`BUDGETS`] session, which never closes: it lives until it is ended (the job's epilog, an
//! admin) or revoked, not while the session that asked for it does.

use std::collections::HashMap;

use gpud_proto::{BudgetInfo, ErrorBody, ErrorCode, LeaseId};

use super::Core;
use super::sessions::Peer;
use crate::ledger::{SessionId, Ticket};

/// The session that holds every budget. Real sessions are numbered from 1.
pub const BUDGETS: SessionId = SessionId::MAX;

/// Whose a budget is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetOwner {
    /// The scheduler's job id.
    pub job: String,
    /// The uid whose processes may lease from it.
    pub uid: u32,
    /// Processes in this cgroup (or below) lease from it without naming it.
    pub cgroup: Option<String>,
}

/// The hub's budget state.
#[derive(Debug, Default)]
pub(super) struct Budgets {
    /// Granted budgets.
    pub(super) owners: HashMap<LeaseId, BudgetOwner>,
    /// Budget requests still waiting, by request.
    pub(super) pending: HashMap<Ticket, BudgetOwner>,
}

impl Budgets {
    /// Forgets the waiting budget requests of a closed session.
    pub(super) fn session_closed(&mut self, session: SessionId) {
        self.pending.retain(|t, _| t.session != session);
    }

    /// The budgets of `job`, by id.
    pub(super) fn of_job(&self, job: &str) -> Vec<LeaseId> {
        let mut ids: Vec<LeaseId> = self
            .owners
            .iter()
            .filter(|(_, o)| o.job == job)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// Whether cgroup path `path` is `parent` or below it.
fn within_cgroup(path: &str, parent: &str) -> bool {
    let parent = parent.trim_end_matches('/');
    path == parent
        || path
            .strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl Core {
    /// The budget a member's acquire leases from: the one its handle names, or else the one
    /// whose cgroup holds the process. A handle that does not match is refused, never ignored:
    /// the job would otherwise lease outside its budget.
    pub(super) fn budget_of_request(
        &self,
        peer: &Peer,
        handle: Option<&str>,
    ) -> Result<Option<LeaseId>, ErrorBody> {
        let Some(handle) = handle else {
            let mut by_cgroup: Vec<LeaseId> = self
                .budgets
                .owners
                .iter()
                .filter(|(_, o)| o.uid == peer.uid || peer.uid == 0)
                .filter(|(_, o)| {
                    o.cgroup
                        .as_deref()
                        .is_some_and(|c| peer.cgroups.iter().any(|path| within_cgroup(path, c)))
                })
                .map(|(&id, _)| id)
                .collect();
            by_cgroup.sort_unstable();
            return Ok(by_cgroup.first().copied());
        };
        let bad = |why: &str| {
            ErrorBody::new(
                ErrorCode::UnknownLease,
                format!(
                    "budget handle {handle:?}: {why} (GPUD_BUDGET must be ID:SECRET as gpudctl budget env prints it)"
                ),
            )
        };
        let (id, secret) = handle
            .split_once(':')
            .ok_or_else(|| bad("no ':' between the id and the secret"))?;
        let id: LeaseId = id.parse().map_err(|_| bad("the id is not a number"))?;
        let owner = self
            .budgets
            .owners
            .get(&id)
            .ok_or_else(|| bad("no such budget (has its job ended?)"))?;
        if self.tokens.get(&id).map(String::as_str) != Some(secret) {
            return Err(bad("the secret does not match"));
        }
        if owner.uid != peer.uid && !self.settings.access.is_admin(peer) {
            return Err(ErrorBody::new(
                ErrorCode::PermissionDenied,
                format!(
                    "budget {id} belongs to uid {} (job {}), not uid {}",
                    owner.uid, owner.job, peer.uid
                ),
            ));
        }
        Ok(Some(id))
    }

    /// What `budgets` says of budget `id`: its row, with the handle when `with_handle`.
    pub(super) fn budget_info(&mut self, id: LeaseId, with_handle: bool) -> Option<BudgetInfo> {
        let handle = with_handle.then(|| format!("{id}:{}", self.token(id)));
        let mut row = self.budget_row(id)?;
        row.handle = handle;
        Some(row)
    }

    /// Every budget, by id, without handles (status).
    pub(super) fn budget_rows(&self) -> Vec<BudgetInfo> {
        let mut ids: Vec<LeaseId> = self.budgets.owners.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.budget_row(id))
            .collect()
    }

    fn budget_row(&self, id: LeaseId) -> Option<BudgetInfo> {
        let owner = self.budgets.owners.get(&id)?;
        let lease = self.ledger.lease(id)?;
        let books = lease.budget.as_ref()?;
        let device = self.ledger.device(lease.device)?;
        Some(BudgetInfo {
            budget: id,
            job: owner.job.clone(),
            uid: owner.uid,
            cgroup: owner.cgroup.clone(),
            device_index: lease.device as u32,
            device_uuid: device.spec().uuid.clone(),
            class: lease.class.into(),
            vram_bytes: lease.vram_bytes,
            used_bytes: books.used_bytes,
            compute_slots: books.compute_slots,
            compute_used: books.compute_used,
            leases: books.members.iter().copied().collect(),
            waiting: books.waiting.len() as u32,
            handle: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::within_cgroup;

    #[test]
    fn cgroups_match_by_whole_path_components() {
        assert!(within_cgroup("/slurm/job_5", "/slurm/job_5"));
        assert!(within_cgroup("/slurm/job_5/step_0/task_1", "/slurm/job_5/"));
        assert!(!within_cgroup("/slurm/job_51", "/slurm/job_5"));
        assert!(!within_cgroup("/slurm", "/slurm/job_5"));
    }
}
