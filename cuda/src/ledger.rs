//! Bytes charged against a lease's VRAM reservation.
//!
//! Every device allocation is charged here before CUDA is asked, rounded up to the memory
//! pool's mapping granularity so that the charge bounds what the pool really maps.

use std::sync::Mutex;

use crate::error::{Error, Result};

/// The pool maps device memory in 2 MiB pages; an allocation never costs less than what it
/// charges here, so the sum of charges bounds the pool's footprint from above.
pub const CHARGE_GRANULARITY: u64 = 2 << 20;

/// What an allocation of `bytes` charges against the reservation (saturating: a request too
/// large to round up charges `u64::MAX`, which no reservation admits).
pub fn charge_for(bytes: u64) -> u64 {
    bytes
        .max(1)
        .div_ceil(CHARGE_GRANULARITY)
        .saturating_mul(CHARGE_GRANULARITY)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    limit: u64,
    in_use: u64,
    peak: u64,
}

/// A reservation's budget: the limit and the bytes currently charged.
#[derive(Debug)]
pub struct Ledger {
    state: Mutex<State>,
}

/// A snapshot of a ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerUsage {
    /// The reservation in bytes.
    pub limit: u64,
    /// Bytes charged now.
    pub in_use: u64,
    /// Most bytes ever charged at once.
    pub peak: u64,
}

impl Ledger {
    /// A ledger for a reservation of `limit` bytes with nothing charged.
    pub fn new(limit: u64) -> Self {
        Self {
            state: Mutex::new(State {
                limit,
                in_use: 0,
                peak: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is two integers updated together; a panic elsewhere cannot leave it torn.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Charges an allocation of `bytes`; returns the amount charged, to be refunded on free.
    pub fn charge(&self, bytes: u64) -> Result<u64> {
        let amount = charge_for(bytes);
        let mut s = self.lock();
        match s.in_use.checked_add(amount) {
            Some(total) if total <= s.limit => {
                s.in_use = total;
                s.peak = s.peak.max(total);
                Ok(amount)
            }
            _ => Err(Error::OverReservation {
                requested: amount,
                in_use: s.in_use,
                reserved: s.limit,
            }),
        }
    }

    /// Returns a charge made by [`Ledger::charge`].
    pub fn refund(&self, amount: u64) {
        let mut s = self.lock();
        debug_assert!(amount <= s.in_use, "refund of more than was charged");
        s.in_use = s.in_use.saturating_sub(amount);
    }

    /// Moves the limit. Growing always succeeds; shrinking fails while more than `limit` bytes
    /// are charged.
    pub fn set_limit(&self, limit: u64) -> Result<()> {
        let mut s = self.lock();
        if s.in_use > limit {
            return Err(Error::StillAllocated {
                target: limit,
                in_use: s.in_use,
            });
        }
        s.limit = limit;
        Ok(())
    }

    /// The current numbers.
    pub fn usage(&self) -> LedgerUsage {
        let s = *self.lock();
        LedgerUsage {
            limit: s.limit,
            in_use: s.in_use,
            peak: s.peak,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn charges_round_up_to_the_pool_granularity() {
        assert_eq!(charge_for(0), 2 * MIB);
        assert_eq!(charge_for(1), 2 * MIB);
        assert_eq!(charge_for(2 * MIB), 2 * MIB);
        assert_eq!(charge_for(2 * MIB + 1), 4 * MIB);
    }

    #[test]
    fn an_allocation_past_the_reservation_fails_and_charges_nothing() {
        let l = Ledger::new(10 * MIB);
        let a = l.charge(6 * MIB).unwrap();
        assert_eq!(a, 6 * MIB);
        match l.charge(5 * MIB) {
            Err(Error::OverReservation {
                requested,
                in_use,
                reserved,
            }) => {
                assert_eq!((requested, in_use, reserved), (6 * MIB, 6 * MIB, 10 * MIB));
            }
            other => panic!("expected OverReservation, got {other:?}"),
        }
        assert_eq!(l.usage().in_use, 6 * MIB);
        let b = l.charge(4 * MIB).unwrap();
        assert_eq!(l.usage().in_use, 10 * MIB);
        l.refund(a);
        l.refund(b);
        assert_eq!(
            l.usage(),
            LedgerUsage {
                limit: 10 * MIB,
                in_use: 0,
                peak: 10 * MIB
            }
        );
    }

    #[test]
    fn shrinking_below_what_is_charged_is_refused() {
        let l = Ledger::new(10 * MIB);
        let a = l.charge(4 * MIB).unwrap();
        assert!(matches!(
            l.set_limit(2 * MIB),
            Err(Error::StillAllocated { target, in_use }) if target == 2 * MIB && in_use == 4 * MIB
        ));
        l.set_limit(4 * MIB).unwrap();
        assert!(l.charge(1).is_err());
        l.refund(a);
        l.set_limit(0).unwrap();
        assert!(l.charge(1).is_err());
    }

    #[test]
    fn huge_requests_do_not_overflow() {
        let l = Ledger::new(u64::MAX - 1);
        l.charge(1 << 40).unwrap();
        assert!(l.charge(u64::MAX - (1 << 20)).is_err());
    }
}
