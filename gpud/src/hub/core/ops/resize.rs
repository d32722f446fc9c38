//! `resize`: a lease shrinks at once, or grows when the memory is there (waiting like a new
//! request of its class).

use gpud_proto::{ErrorBody, ErrorCode, LeaseId};

use super::{Answered, ledger_error, validate};
use crate::hub::core::{Core, Now};
use crate::ledger::{Decision, PoolKind, ResizeOutcome, Ticket};

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
        if self
            .ledger
            .lease(lease)
            .is_some_and(|l| l.session == ticket.session && !self.pool_kind(l.device).is_gpu())
        {
            return Some(Err(ErrorBody::new(
                ErrorCode::InvalidRequest,
                format!(
                    "lease {lease} holds no device memory here: resize its host memory with \
                     host_mem_bytes"
                ),
            )));
        }
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

    /// A resize of lease `lease`'s host memory (its group's host memory part) to `bytes`: a
    /// shrink at once, a grow when the memory is there, as for device memory. Never below the
    /// lease's page-locked memory, which is host memory too.
    pub(super) fn resize_host(
        &mut self,
        now: Now,
        ticket: Ticket,
        lease: LeaseId,
        vram_bytes: u64,
        bytes: u64,
        timeout_ms: Option<u64>,
    ) -> Answered {
        let invalid = |m: String| Some(Err(ErrorBody::new(ErrorCode::InvalidRequest, m)));
        let timeout = match validate::timeout(timeout_ms) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        if self.host.is_none() {
            return invalid(
                "this gpud does not book host resources ([host] enabled = false)".into(),
            );
        }
        if vram_bytes != 0 {
            return invalid(
                "a resize changes device memory (vram_bytes) or host memory (host_mem_bytes), \
                 one at a time"
                    .into(),
            );
        }
        if !self
            .ledger
            .lease(lease)
            .is_some_and(|l| l.session == ticket.session)
        {
            return Some(Err(ledger_error(crate::ledger::LedgerError::UnknownLease(
                lease,
            ))));
        }
        let group = self.ledger.group_of(lease);
        let part_of = |kind: PoolKind| {
            group.iter().copied().find(|&p| {
                self.ledger
                    .lease(p)
                    .is_some_and(|l| self.pool_kind(l.device) == kind)
            })
        };
        let Some(part) = part_of(PoolKind::HostMemory) else {
            return invalid(format!(
                "lease {lease} holds no host memory: acquire it with host.mem_bytes"
            ));
        };
        let pinned = part_of(PoolKind::Pinned)
            .and_then(|p| self.ledger.lease(p))
            .map_or(0, |l| l.vram_bytes);
        if bytes == 0 || bytes < pinned {
            return invalid(format!(
                "host memory cannot shrink below the lease's page-locked memory ({}) nor to 0: \
                 release the lease instead",
                gpud_proto::Bytes(pinned)
            ));
        }
        match self.ledger.resize(now.at, ticket, part, bytes, timeout) {
            Ok(ResizeOutcome::Done { vram_bytes }) => {
                Some(Ok(gpud_proto::Reply::Resized { lease, vram_bytes }))
            }
            Ok(ResizeOutcome::Waiting) => {
                if let Some(book) = self.host.as_mut() {
                    book.resizes.insert(ticket, lease);
                }
                None
            }
            Err(e) => Some(Err(ledger_error(e))),
        }
    }
}
