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
        // The parts of a group end together.
        let ended = self.ledger.group_of(lease);
        self.ledger
            .release(now.at, session, lease)
            .map_err(ledger_error)?;
        for part in ended {
            self.observer.released(now.at, part);
        }
        self.detach(lease);
        Ok(Reply::Released { lease })
    }
}
