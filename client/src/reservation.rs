//! What a lease proves to code that uses the GPU: which device, how many bytes, and whether the
//! holder owns the device's compute slot.
//!
//! Crates that touch the GPU (gpud-cuda) take a [`Reservation`] for the byte budget and a
//! [`ComputeToken`] for device-global operations. A token can only be made by this crate, and
//! only from a lease that holds the compute slot (or an [`ExclusiveDevice`] claimed under its
//! explicit name), so "synchronize without the compute lease" is a compile error in callers,
//! not a runtime check. A token borrows its lease, so it cannot outlive it; a revocation
//! while it is borrowed is caught where the token is used ([`ComputeToken::ensure_held`]).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

pub use gpud_proto::LeaseId;

/// A grant of device memory (and possibly the compute slot) on one GPU.
pub trait Reservation {
    /// The lease this reservation belongs to.
    fn lease_id(&self) -> LeaseId;
    /// The device's UUID as NVML reports it (`GPU-…`).
    fn device_uuid(&self) -> &str;
    /// The device's index as gpud numbers it (a hint; the UUID is authoritative).
    fn device_index(&self) -> u32;
    /// Bytes of device memory reserved.
    fn vram_bytes(&self) -> u64;
    /// Proof of holding the compute slot, when the lease has it.
    fn compute_token(&self) -> Option<ComputeToken<'_>>;
}

/// Proof that the holder owns the compute slot of one device for as long as the borrow lives.
///
/// Only this crate constructs tokens, in two ways: from a granted compute lease
/// ([`crate::Lease`], [`crate::blocking::Lease`]), or from an [`ExclusiveDevice`] that a
/// program claims by saying, in its name, that nobody else uses the GPU
/// ([`ExclusiveDevice::assume_unshared`]). The borrow ties the token to its lease, so a token
/// cannot outlive it; a lease can still be revoked (or lost with its connection) while the
/// token is borrowed, so code that acts on the token asks [`ComputeToken::ensure_held`] at the
/// moment of use.
#[derive(Debug, Clone, Copy)]
pub struct ComputeToken<'a> {
    lease_id: LeaseId,
    device_uuid: &'a str,
    /// The lease's "lost" flag (revoked, or gone with its connection), which the client's
    /// connection task sets; `None` for an unshared claim, which nothing can revoke.
    lost: Option<&'a AtomicBool>,
    // Tokens stay on the thread that borrowed them; they are proofs, not capabilities to ship.
    _not_send: PhantomData<*const ()>,
}

impl<'a> ComputeToken<'a> {
    pub(crate) fn new(
        lease_id: LeaseId,
        device_uuid: &'a str,
        lost: Option<&'a AtomicBool>,
    ) -> Self {
        Self {
            lease_id,
            device_uuid,
            lost,
            _not_send: PhantomData,
        }
    }

    /// The lease that holds the compute slot.
    pub fn lease_id(&self) -> LeaseId {
        self.lease_id
    }

    /// The device the slot belongs to.
    pub fn device_uuid(&self) -> &'a str {
        self.device_uuid
    }

    /// Whether the lease behind the token was revoked or lost since the token was borrowed.
    pub fn is_lost(&self) -> bool {
        self.lost.is_some_and(|lost| lost.load(Ordering::Acquire))
    }

    /// Checks, now, that the lease still holds the compute slot: [`LeaseLost`] once it was
    /// revoked or lost (the daemon may already have given the slot to someone else).
    pub fn ensure_held(&self) -> Result<(), LeaseLost> {
        if self.is_lost() {
            Err(LeaseLost {
                lease: self.lease_id,
            })
        } else {
            Ok(())
        }
    }
}

/// A compute token whose lease was revoked or lost: it proves nothing any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("lease {lease} was revoked or lost: its compute token no longer holds the compute slot")]
pub struct LeaseLost {
    /// The lease the token was borrowed from.
    pub lease: LeaseId,
}

/// A device used by one program alone, without a daemon: benchmarks, GPU tests, and the
/// prover's daemonless mode on a single-tenant host.
///
/// This is the one way to hold a compute token that no daemon granted, so it has one
/// constructor whose name is the caller's promise, [`ExclusiveDevice::assume_unshared`] (an
/// unchecked assumption, like `MaybeUninit::assume_init`): it is greppable, and no code gets a
/// token from it without writing that name. It is not behind a cargo feature on purpose: the
/// prover's daemonless `prove` (an operator command) needs it, so the feature would be on in
/// every workspace build and, through feature unification, reachable by accident everywhere.
#[derive(Debug, Clone)]
pub struct ExclusiveDevice {
    device_uuid: String,
    device_index: u32,
    vram_bytes: u64,
}

impl ExclusiveDevice {
    /// Claims `vram_bytes` of the device `device_uuid` (index `device_index`) with its compute
    /// slot, without asking gpud. The caller asserts that nothing else uses the device: no
    /// daemon arbitrates, and nothing revokes the claim.
    pub fn assume_unshared(
        device_uuid: impl Into<String>,
        device_index: u32,
        vram_bytes: u64,
    ) -> Self {
        Self {
            device_uuid: device_uuid.into(),
            device_index,
            vram_bytes,
        }
    }
}

impl Reservation for ExclusiveDevice {
    fn lease_id(&self) -> LeaseId {
        0
    }
    fn device_uuid(&self) -> &str {
        &self.device_uuid
    }
    fn device_index(&self) -> u32 {
        self.device_index
    }
    fn vram_bytes(&self) -> u64 {
        self.vram_bytes
    }
    fn compute_token(&self) -> Option<ComputeToken<'_>> {
        Some(ComputeToken::new(0, &self.device_uuid, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease as the client holds one: the grant, and the flag its connection task sets when
    /// the daemon revokes it.
    struct FakeLease {
        lost: AtomicBool,
    }

    impl Reservation for FakeLease {
        fn lease_id(&self) -> LeaseId {
            7
        }
        fn device_uuid(&self) -> &str {
            "GPU-1"
        }
        fn device_index(&self) -> u32 {
            0
        }
        fn vram_bytes(&self) -> u64 {
            1 << 20
        }
        fn compute_token(&self) -> Option<ComputeToken<'_>> {
            Some(ComputeToken::new(7, "GPU-1", Some(&self.lost)))
        }
    }

    #[test]
    fn a_token_borrowed_before_its_lease_is_revoked_is_refused_at_use() {
        let lease = FakeLease {
            lost: AtomicBool::new(false),
        };
        let token = lease
            .compute_token()
            .expect("a compute lease lends a token");
        assert_eq!(token.ensure_held(), Ok(()));
        assert!(!token.is_lost());
        // The daemon revokes the lease while the token is still borrowed.
        lease.lost.store(true, Ordering::Release);
        assert!(token.is_lost());
        assert_eq!(token.ensure_held(), Err(LeaseLost { lease: 7 }));
    }

    #[test]
    fn an_unshared_claim_lends_a_token_that_is_never_lost() {
        let device = ExclusiveDevice::assume_unshared("GPU-2", 1, 64);
        let token = device
            .compute_token()
            .expect("an unshared claim holds the slot");
        assert_eq!(token.lease_id(), 0);
        assert_eq!(token.device_uuid(), "GPU-2");
        assert_eq!(token.ensure_held(), Ok(()));
    }
}
