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
        if !self.is_admin(session) {
            return Err(not_admin(&format!("draining {device}")));
        }
        let d = self
            .ledger
            .drain(now.at, &device.clone().into())
            .map_err(ledger_error)?;
        info!(device = d, "device drained");
        Ok(Reply::Done)
    }

    pub(super) fn undrain(
        &mut self,
        now: Now,
        session: SessionId,
        device: &Placement,
    ) -> Result<Reply, ErrorBody> {
        if !self.is_admin(session) {
            return Err(not_admin(&format!("draining {device}")));
        }
        let d = self
            .ledger
            .undrain(now.at, &device.clone().into())
            .map_err(ledger_error)?;
        info!(device = d, "device undrained");
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
        let holder = self.ledger.revoke(now.at, lease).map_err(ledger_error)?;
        info!(lease, holder, "lease revoked by an administrator");
        Ok(Reply::Done)
    }
}

fn not_admin(what: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::PermissionDenied,
        format!("{what} needs root or a group in access.admin_groups"),
    )
}
