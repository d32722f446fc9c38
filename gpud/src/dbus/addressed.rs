//! Signals addressed to one bus caller: the socket's events for a lease's holder (and for a
//! waiting request that asked for its place), sent as unicast signals with the caller's unique
//! name as destination, so that no other client sees them.

use gpud_proto::{Event, LeaseId, RequestId};
use zbus::names::OwnedUniqueName;

use crate::hub::wire_name;

/// What one caller is told, in the bus's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addressed {
    /// `YieldRequested`: release the compute slot at the next safe point.
    Yield {
        /// The lease.
        lease: LeaseId,
        /// `critical_waiting`, `max_hold`.
        reason: String,
        /// 0 when no revocation follows.
        revoke_in_ms: u64,
    },
    /// `ReclaimRequested`: give an evictable lease's memory back.
    Reclaim {
        /// The lease.
        lease: LeaseId,
        /// 0 when no revocation follows.
        revoke_in_ms: u64,
    },
    /// `LeaseRevoked`: the lease is gone.
    Revoked {
        /// The lease.
        lease: LeaseId,
        /// `admin`, `yield_ignored`, `reclaimed`, ….
        reason: String,
    },
    /// `Queued`: a named waiting acquire's place in the queue.
    Queued {
        /// The caller's name for the request.
        request: String,
        /// 1 for the next to be served.
        position: u32,
    },
}

/// A signal for one caller, for the manager's `signal_callers` to send.
pub type CallerSignal = (OwnedUniqueName, Addressed);

impl Addressed {
    /// The signal for a hub event, if the bus has one; `request_name` gives the caller's name
    /// of one of its waiting requests.
    pub fn from_event(
        event: Event,
        request_name: impl FnOnce(RequestId) -> Option<String>,
    ) -> Option<Self> {
        match event {
            Event::YieldRequested {
                lease,
                reason,
                revoke_in_ms,
            } => Some(Self::Yield {
                lease,
                reason: wire_name(&reason),
                revoke_in_ms: revoke_in_ms.unwrap_or(0),
            }),
            Event::ReclaimRequested {
                lease,
                revoke_in_ms,
            } => Some(Self::Reclaim {
                lease,
                revoke_in_ms: revoke_in_ms.unwrap_or(0),
            }),
            Event::Revoked { lease, reason } => Some(Self::Revoked {
                lease,
                reason: wire_name(&reason),
            }),
            Event::Queued { request, position } => {
                request_name(request).map(|request| Self::Queued { request, position })
            }
            // Bus callers see over-use in Status and the metrics; a stopping daemon's name
            // leaves the bus, which NameOwnerChanged tells.
            Event::OverUse { .. } | Event::ShuttingDown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpud_proto::{RevokeReason, YieldReason};

    #[test]
    fn holder_events_become_their_signals() {
        let none = |_| None;
        let reclaim = Event::ReclaimRequested {
            lease: 5,
            revoke_in_ms: Some(900),
        };
        assert_eq!(
            Addressed::from_event(reclaim, none),
            Some(Addressed::Reclaim {
                lease: 5,
                revoke_in_ms: 900
            })
        );
        let yielded = Event::YieldRequested {
            lease: 2,
            reason: YieldReason::CriticalWaiting,
            revoke_in_ms: None,
        };
        assert_eq!(
            Addressed::from_event(yielded, none),
            Some(Addressed::Yield {
                lease: 2,
                reason: "critical_waiting".into(),
                revoke_in_ms: 0
            })
        );
        let revoked = Event::Revoked {
            lease: 3,
            reason: RevokeReason::Reclaimed,
        };
        assert_eq!(
            Addressed::from_event(revoked, none),
            Some(Addressed::Revoked {
                lease: 3,
                reason: "reclaimed".into()
            })
        );
        let queued = Event::Queued {
            request: 7,
            position: 2,
        };
        assert_eq!(Addressed::from_event(queued.clone(), none), None);
        assert_eq!(
            Addressed::from_event(queued, |id| (id == 7).then(|| "job-1".to_string())),
            Some(Addressed::Queued {
                request: "job-1".into(),
                position: 2
            })
        );
        assert_eq!(Addressed::from_event(Event::ShuttingDown, none), None);
    }
}
