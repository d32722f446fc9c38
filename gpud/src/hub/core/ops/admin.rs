//! `drain`, `undrain`, `revoke`: for root and the admin groups only.

use gpud_proto::{ErrorBody, ErrorCode, LeaseId, Placement, Reply};
use tracing::info;

use super::ledger_error;
use crate::hub::core::{Core, Now};
use crate::ledger::SessionId;

impl Core {
    pub(super) fn drain(
        &mut self,
        now: Now,
        session: SessionId,
        device: &Placement,
    ) -> Result<Reply, ErrorBody> {
        self.set_drained(now, session, device, true)
    }

    pub(super) fn undrain(
        &mut self,
        now: Now,
        session: SessionId,
        device: &Placement,
    ) -> Result<Reply, ErrorBody> {
        self.set_drained(now, session, device, false)
    }

    /// Drains (no new grants) or undrains a device, for an admin.
    fn set_drained(
        &mut self,
        now: Now,
        session: SessionId,
        device: &Placement,
        drained: bool,
    ) -> Result<Reply, ErrorBody> {
        let what = if drained { "draining" } else { "undraining" };
        if !self.is_admin(session) {
            return Err(not_admin(&format!("{what} {device}")));
        }
        let device = device.clone().into();
        let d = if drained {
            self.ledger.drain(now.at, &device)
        } else {
            self.ledger.undrain(now.at, &device)
        }
        .map_err(ledger_error)?;
        info!(
            device = d,
            "device {}",
            if drained { "drained" } else { "undrained" }
        );
        Ok(Reply::Done)
    }

    pub(super) fn revoke(
        &mut self,
        now: Now,
        session: SessionId,
        lease: LeaseId,
    ) -> Result<Reply, ErrorBody> {
        if !self.is_admin(session) {
            return Err(not_admin(&format!("revoking lease {lease}")));
        }
        let label = self
            .ledger
            .lease(lease)
            .and_then(|l| l.label.clone())
            .unwrap_or_default();
        let holder = self.ledger.revoke(now.at, lease).map_err(ledger_error)?;
        let holder_pid = self.peer(holder).map_or(0, |p| p.pid);
        // Who did it: the administrator's uid, pid and process, for the audit trail.
        let (by_uid, by_pid, by_process) = self
            .peer(session)
            .map_or((0, 0, String::new()), |p| (p.uid, p.pid, p.process.clone()));
        info!(
            lease,
            holder,
            holder_pid,
            label = %label,
            by_uid,
            by_pid,
            by_process = %by_process,
            by_session = session,
            "lease revoked by an administrator"
        );
        Ok(Reply::Done)
    }
}

pub(super) fn not_admin(what: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::PermissionDenied,
        format!("{what} needs root or a group in access.admin_groups"),
    )
}
