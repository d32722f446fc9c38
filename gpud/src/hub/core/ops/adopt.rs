//! `adopt`: after a restart, the owner of a restored lease takes it back with its token.

use gpud_proto::{ErrorBody, ErrorCode, LeaseId, Reply};
use tracing::info;

use super::ledger_error;
use crate::hub::core::timers::Timer;
use crate::hub::core::{Core, Now, ORPHANS};
use crate::ledger::SessionId;

impl Core {
    /// Hands a restored lease to the session of its owner (same uid), who proves it with the
    /// token.
    pub(super) fn adopt(
        &mut self,
        now: Now,
        session: SessionId,
        lease: LeaseId,
        token: &str,
    ) -> Result<Reply, ErrorBody> {
        let unknown = || {
            ErrorBody::new(
                ErrorCode::UnknownLease,
                format!("no lease {lease} waiting to be re-adopted with that token"),
            )
        };
        let orphan = self
            .ledger
            .lease(lease)
            .is_some_and(|l| l.session == ORPHANS);
        let owner_uid = self.journal.orphan_uids.get(&lease).copied();
        let peer_uid = self.peer(session).map(|p| p.uid);
        if !orphan
            || self.tokens.get(&lease).map(String::as_str) != Some(token)
            || owner_uid != peer_uid
        {
            return Err(unknown());
        }
        // A group is adopted whole, by its first lease's id and token.
        let parts = self.ledger.group_of(lease);
        self.ledger.transfer(lease, session).map_err(ledger_error)?;
        for part in parts {
            self.journal.orphan_uids.remove(&part);
            // The owner may come back as another process: record who holds it now.
            self.journal_grant(now, part);
        }
        info!(lease, session, "lease re-adopted");
        if self.ledger.session_leases(ORPHANS).is_empty() {
            self.timers.set(Timer::Orphans, None);
        }
        self.lease_info(lease)
            .map(Reply::Adopted)
            .ok_or_else(unknown)
    }
}
