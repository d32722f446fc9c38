//! What a lease proves to code that uses the GPU: which device, how many bytes, and whether the
//! holder owns the device's compute slot.
//!
//! Crates that touch the GPU (gpud-cuda) take a [`Reservation`] for the byte budget and a
//! [`ComputeToken`] for device-global operations. A token can only be made by this crate, and
//! only from a lease that holds the compute slot, so "synchronize without the compute lease" is
//! a compile error in callers, not a runtime check.

use std::marker::PhantomData;

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
/// Only this crate constructs tokens: from a granted compute lease, or from an
/// [`ExclusiveDevice`] that a single-tenant program claims explicitly.
#[derive(Debug, Clone, Copy)]
pub struct ComputeToken<'a> {
    lease_id: LeaseId,
    device_uuid: &'a str,
    // Tokens stay on the thread that borrowed them; they are proofs, not capabilities to ship.
    _not_send: PhantomData<*const ()>,
}

impl<'a> ComputeToken<'a> {
    pub(crate) fn new(lease_id: LeaseId, device_uuid: &'a str) -> Self {
        Self {
            lease_id,
            device_uuid,
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
}

/// A device used by one program alone, without a daemon: benchmarks, single-tenant hosts,
/// GPU tests. Claiming it is the explicit, greppable statement "nobody else uses this GPU".
#[derive(Debug, Clone)]
pub struct ExclusiveDevice {
    device_uuid: String,
    device_index: u32,
    vram_bytes: u64,
}

impl ExclusiveDevice {
    /// Claims `vram_bytes` of the device `device_uuid` (index `device_index`) with its compute
    /// slot, without asking gpud.
    pub fn claim(device_uuid: impl Into<String>, device_index: u32, vram_bytes: u64) -> Self {
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
        Some(ComputeToken::new(0, &self.device_uuid))
    }
}
