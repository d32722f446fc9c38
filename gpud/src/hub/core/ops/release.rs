//! `release`: the holder gives a lease back.

use gpud_proto::{ErrorBody, LeaseId, Reply};

use super::ledger_error;
use crate::hub::core::{Core, Now};
use crate::ledger::SessionId;

impl Core {
    pub(super) fn release(
        &mut self,
        now: Now,
        session: SessionId,
        lease: LeaseId,
    ) -> Result<Reply, ErrorBody> {
        self.ledger
            .release(now.at, session, lease)
            .map_err(ledger_error)?;
        self.observer.released(now.at, lease);
        Ok(Reply::Released { lease })
    }
}
