//! The steps the group property tests take besides asking: release or revoke a random lease,
//! cancel a random waiter, disconnect a session, keeping the test's books of what waits.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use gpud::ledger::{LeaseId, Ledger, SessionId, Ticket};

/// Its holder releases the `pick`-th lease (modulo how many there are).
pub fn release_one(l: &mut Ledger, now: Instant, pick: usize) {
    let held: Vec<(LeaseId, SessionId)> = l.leases().map(|x| (x.id, x.session)).collect();
    if !held.is_empty() {
        let (id, session) = held[pick % held.len()];
        l.release(now, session, id).unwrap();
    }
}

/// An admin revokes the `pick`-th lease.
pub fn revoke_one(l: &mut Ledger, now: Instant, pick: usize) {
    let held: Vec<LeaseId> = l.leases().map(|x| x.id).collect();
    if !held.is_empty() {
        l.revoke(now, held[pick % held.len()]).unwrap();
    }
}

/// The `pick`-th waiting request of the books is cancelled and leaves them.
pub fn cancel_one<V>(
    l: &mut Ledger,
    now: Instant,
    pick: usize,
    waiting: &mut BTreeSet<Ticket>,
    asked: &mut BTreeMap<Ticket, V>,
) {
    let tickets: Vec<Ticket> = waiting.iter().copied().collect();
    if !tickets.is_empty() {
        let t = tickets[pick % tickets.len()];
        l.cancel(now, t).unwrap();
        waiting.remove(&t);
        asked.remove(&t);
    }
}

/// `session` disconnects: its leases end and its waiting requests leave the books.
pub fn disconnect<V>(
    l: &mut Ledger,
    now: Instant,
    session: SessionId,
    waiting: &mut BTreeSet<Ticket>,
    asked: &mut BTreeMap<Ticket, V>,
) {
    l.disconnect(now, session);
    waiting.retain(|t| t.session != session);
    asked.retain(|t, _| t.session != session);
}
