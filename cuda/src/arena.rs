//! One lease's budget on a [`Device`]: an [`Arena`] charges every allocation against the
//! lease's VRAM reservation before CUDA is asked, from a memory pool of its own.
//!
//! An arena is borrowed from the process-wide device, and buffers borrow the arena, so
//! [`Arena::close`] (which consumes it) runs only once every buffer is gone. Closing and
//! shrinking are device-global (they synchronize the context and trim the pool), so they take
//! a [`ComputeToken`] of the device: for a VRAM-only lease (resident data), the token of the
//! compute lease the process holds at that moment.
//!
//! In the device layer this module sits above [`crate::device`] and [`crate::buffer`]: it
//! makes buffers, and [`Device::reserve`] is defined here, next to the arena it makes, so that
//! neither module below needs to know arenas.

use std::ops::Deref;

use gpud_client::{ComputeToken, LeaseId, Reservation};

use crate::buffer::{DeviceBuffer, DeviceCopy};
use crate::device::Device;
use crate::driver::normalize_uuid;
use crate::error::{Error, Result};
use crate::ledger::{Ledger, LedgerUsage};
use crate::pool::{MemPool, PoolUsage};

impl Device {
    /// A budget for one lease on this device: its own memory pool, charged against the lease's
    /// VRAM bytes. The lease must name this device ([`Error::WrongDevice`] otherwise).
    pub fn reserve<R: Reservation + ?Sized>(&self, lease: &R) -> Result<Arena<'_>> {
        if normalize_uuid(lease.device_uuid()) != normalize_uuid(&self.info().uuid) {
            return Err(Error::WrongDevice {
                lease: lease.lease_id(),
                lease_device: lease.device_uuid().to_string(),
                device: self.info().uuid.clone(),
            });
        }
        Arena::new(self, lease.lease_id(), lease.vram_bytes())
    }
}

/// A lease's VRAM on a device. Dereferences to the [`Device`] (stream, kernels, device-global
/// operations); allocates only through [`Arena::alloc`].
#[derive(Debug)]
pub struct Arena<'d> {
    dev: &'d Device,
    lease_id: LeaseId,
    pool: MemPool,
    ledger: Ledger,
    closed: bool,
}

impl<'d> Arena<'d> {
    fn new(dev: &'d Device, lease_id: LeaseId, reserved: u64) -> Result<Self> {
        dev.bind()?;
        let pool = MemPool::create(dev.info().ordinal, reserved)?;
        Ok(Self {
            dev,
            lease_id,
            pool,
            ledger: Ledger::new(reserved),
            closed: false,
        })
    }

    /// The device the arena lives on.
    pub fn device(&self) -> &'d Device {
        self.dev
    }

    /// The lease whose VRAM this arena spends.
    pub fn lease_id(&self) -> LeaseId {
        self.lease_id
    }

    /// The ledger's numbers: reservation, bytes charged, peak.
    pub fn ledger(&self) -> LedgerUsage {
        self.ledger.usage()
    }

    /// What the arena's pool holds on the device (reading pool attributes does not synchronize).
    pub fn pool_usage(&self) -> Result<PoolUsage> {
        self.dev.bind()?;
        self.pool.usage()
    }

    /// Allocates `len` elements on the device's main stream, charged against the reservation
    /// first: an allocation past it fails with [`Error::OverReservation`] and CUDA is not called.
    /// Each allocation charges [`crate::ledger::charge_for`] its bytes (whole 2 MiB pages).
    pub fn alloc<T: DeviceCopy>(&self, len: usize) -> Result<DeviceBuffer<'_, T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("{len} elements overflow usize")))?;
        let charged = self.ledger.charge(bytes as u64)?;
        let ptr = self
            .dev
            .bind()
            .and_then(|()| self.pool.alloc(bytes, self.dev.stream().cu_stream()));
        match ptr {
            // SAFETY: `ptr` is a fresh allocation of `bytes` bytes from this arena's pool on
            // the device's main stream, charged `charged` bytes.
            Ok(ptr) => {
                Ok(unsafe { DeviceBuffer::from_raw(self.dev, &self.ledger, ptr, len, charged) })
            }
            Err(e) => {
                self.ledger.refund(charged);
                Err(e)
            }
        }
    }

    /// Synchronizes the context, then returns the pool's cached memory beyond `keep` bytes to
    /// the device. Device-global: needs the compute slot.
    pub fn trim(&self, keep: u64, token: &ComputeToken<'_>) -> Result<PoolUsage> {
        self.dev.check_token(token, self.lease_id)?;
        self.dev.synchronize(token)?;
        self.dev.bind()?;
        self.pool.trim_to(keep)?;
        self.pool.usage()
    }

    /// Moves the reservation to `bytes` (after gpud granted the change). Growing only raises
    /// the budget. Shrinking first checks that no more than `bytes` is allocated, then
    /// synchronizes, trims the pool and checks that it holds no more than `bytes`, so the lease
    /// can be shrunk safely once this returns.
    pub fn resize(&self, bytes: u64, token: &ComputeToken<'_>) -> Result<PoolUsage> {
        self.dev.check_token(token, self.lease_id)?;
        let before = self.ledger.usage().limit;
        self.ledger.set_limit(bytes)?;
        self.dev.bind()?;
        self.pool.set_release_threshold(bytes)?;
        if bytes >= before {
            return self.pool.usage();
        }
        let usage = self.trim(bytes, token)?;
        if usage.reserved > bytes {
            return Err(Error::PoolNotReturned {
                held: usage.reserved,
                limit: bytes,
            });
        }
        Ok(usage)
    }

    /// Ends the arena: every buffer is already dropped (they borrow the arena), so this
    /// synchronizes, trims the pool to nothing and checks that it returned all its memory;
    /// then the lease may be released.
    pub fn close(mut self, token: &ComputeToken<'_>) -> Result<PoolUsage> {
        let usage = self.trim(0, token)?;
        if usage.reserved != 0 {
            return Err(Error::PoolNotReturned {
                held: usage.reserved,
                limit: 0,
            });
        }
        self.closed = true;
        Ok(usage)
    }
}

impl Deref for Arena<'_> {
    type Target = Device;
    fn deref(&self) -> &Device {
        self.dev
    }
}

impl Drop for Arena<'_> {
    fn drop(&mut self) {
        if !self.closed {
            // Not closed under a token (an error path): wait for this process's frees on the
            // main stream (not device-global), so that destroying the pool right after returns
            // the memory before the caller releases the lease.
            let _ = self.dev.bind().map(|()| self.dev.stream().synchronize());
        }
    }
}
