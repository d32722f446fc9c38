//! `cancel`: a waiting request is withdrawn; it gets its answer (`cancelled`) before the
//! cancel gets its own.

use gpud_proto::{ErrorBody, ErrorCode, Reply, RequestId};

use super::ledger_error;
use crate::hub::core::{Core, Now};
use crate::ledger::{SessionId, Ticket};

impl Core {
    pub(super) fn cancel(
        &mut self,
        now: Now,
        session: SessionId,
        request: RequestId,
    ) -> Result<Reply, ErrorBody> {
        let waiting = Ticket { session, request };
        self.ledger.cancel(now.at, waiting).map_err(ledger_error)?;
        self.observer.cancelled(waiting);
        self.budgets.pending.remove(&waiting);
        let body = ErrorBody::new(ErrorCode::Cancelled, "cancelled by the client");
        self.reply(session, request, Err(body));
        Ok(Reply::Cancelled { request })
    }
}
