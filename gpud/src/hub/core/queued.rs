//! Places in the queue, for waiting acquires that asked to hear them
//! ([`AcquireArgs::queued_events`](gpud_proto::AcquireArgs::queued_events)).
//!
//! A waiter's place is one more than the waiters served before it (by class, then arrival)
//! that want one of its devices: what stands between it and a grant, as far as order goes
//! (whether it fits is the devices' business). After every step the places of the waiters
//! that asked are computed in one pass over the queue and each changed place is sent as an
//! [`Event::Queued`]; a request that no longer waits is forgotten.

use std::collections::HashMap;

use gpud_proto::Event;

use super::Core;
use crate::ledger::{DeviceIdx, Ticket};

/// The waiters that asked, with the place each was last told (0: not told yet).
#[derive(Debug, Default)]
pub(super) struct Places {
    told: HashMap<Ticket, u32>,
}

impl Places {
    /// `ticket` waits and wants to hear its place.
    pub(super) fn watch(&mut self, ticket: Ticket) {
        self.told.insert(ticket, 0);
    }
}

impl Core {
    /// Tells every watching waiter its place when it changed; forgets those that stopped
    /// waiting. One pass over the queue, counting earlier waiters by their set of devices
    /// (there are few distinct sets: one per device, and "any").
    pub(super) fn report_places(&mut self) {
        if self.places.told.is_empty() {
            return;
        }
        let mut earlier: HashMap<&[DeviceIdx], u32> = HashMap::new();
        let mut now: HashMap<Ticket, u32> = HashMap::new();
        for waiter in self.ledger.waiters() {
            if self.places.told.contains_key(&waiter.ticket) {
                let ahead: u32 = earlier
                    .iter()
                    .filter(|(set, _)| set.iter().any(|d| waiter.candidates.contains(d)))
                    .map(|(_, n)| n)
                    .sum();
                now.insert(waiter.ticket, ahead + 1);
            }
            *earlier.entry(waiter.candidates.as_slice()).or_default() += 1;
        }
        let mut changed: Vec<(Ticket, u32)> = Vec::new();
        self.places
            .told
            .retain(|ticket, told| match now.get(ticket) {
                Some(&place) => {
                    if place != *told {
                        *told = place;
                        changed.push((*ticket, place));
                    }
                    true
                }
                None => false,
            });
        // In a stable order, so that a session hears its requests in the order they came.
        changed.sort_unstable_by_key(|(t, _)| (t.session, t.request));
        for (ticket, position) in changed {
            self.event(
                ticket.session,
                Event::Queued {
                    request: ticket.request,
                    position,
                },
            );
        }
    }
}
