//! `resize`: a lease shrinks at once, or grows when the memory is there (waiting like a new
//! request of its class).

use gpud_proto::LeaseId;

use super::{Answered, ledger_error, validate};
use crate::hub::core::{Core, Now};
use crate::ledger::{Decision, ResizeOutcome, Ticket};

impl Core {
    pub(super) fn resize(
        &mut self,
        now: Now,
        ticket: Ticket,
        lease: LeaseId,
        vram_bytes: u64,
        timeout_ms: Option<u64>,
    ) -> Answered {
        let timeout = match validate::timeout(timeout_ms) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        match self
            .ledger
            .resize(now.at, ticket, lease, vram_bytes, timeout)
        {
            Ok(ResizeOutcome::Done { vram_bytes }) => {
                let grew = Decision::Grew {
                    ticket,
                    lease,
                    vram_bytes,
                };
                self.decided(now, grew);
                None
            }
            Ok(ResizeOutcome::Waiting) => None,
            Err(e) => Some(Err(ledger_error(e))),
        }
    }
}
