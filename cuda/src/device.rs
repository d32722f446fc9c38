//! A device opened under a lease: context, stream, our memory pool, the VRAM ledger and the
//! kernels loaded so far.
//!
//! Rules the types enforce: every allocation is charged against the lease's reservation before
//! CUDA is asked ([`Device::alloc`]); device-global operations (context synchronize, pool trim,
//! memory info) take a [`ComputeToken`], which only a lease holding the compute slot can lend;
//! [`Device::close`] consumes the device, so every buffer (which borrows it) is gone first, then
//! synchronizes, trims and checks that the pool returned its memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use gpud_client::{ComputeToken, LeaseId, Reservation};

use crate::buffer::{DeviceBuffer, DeviceCopy};
use crate::driver::{self, DeviceInfo, normalize_uuid};
use crate::error::{Error, Result};
use crate::kernels::KernelModule;
use crate::ledger::{Ledger, LedgerUsage};
use crate::nvrtc;
use crate::pool::{MemPool, PoolUsage};

/// A GPU opened for one lease.
#[derive(Debug)]
pub struct Device {
    info: DeviceInfo,
    lease_id: LeaseId,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    pool: MemPool,
    ledger: Ledger,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
}

impl Device {
    /// Opens the device the lease names (by UUID) with a budget of the lease's VRAM bytes.
    /// Without a driver this is [`Error::NoDriver`], never a panic.
    pub fn open<R: Reservation + ?Sized>(lease: &R) -> Result<Self> {
        let info = driver::find_device(lease.device_uuid())?;
        let ctx = CudaContext::new(info.ordinal)?;
        // cudarc's event tracking makes the first new stream synchronize the whole context (a
        // device-global wait, which needs the compute slot). We order all work ourselves
        // (allocations and frees on the main stream, explicit joins), so it is off.
        // SAFETY: no CudaSlice is created through this crate; our buffers are ordered on the
        // main stream and other streams join it before touching them.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let reserved = lease.vram_bytes();
        let pool = MemPool::create(info.ordinal, reserved)?;
        Ok(Self {
            info,
            lease_id: lease.lease_id(),
            ctx,
            stream,
            pool,
            ledger: Ledger::new(reserved),
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// The device's identity and properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The lease this device was opened for.
    pub fn lease_id(&self) -> LeaseId {
        self.lease_id
    }

    /// The cudarc context (for launching kernels through cudarc).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device's main stream. Allocations and frees are ordered on it; work on other
    /// streams that touches a buffer must be joined back into it before the buffer is dropped.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Makes the device's context current on the calling thread (needed before raw driver calls).
    pub fn bind(&self) -> Result<()> {
        Ok(self.ctx.bind_to_thread()?)
    }

    /// The ledger's numbers: reservation, bytes charged, peak.
    pub fn ledger(&self) -> LedgerUsage {
        self.ledger.usage()
    }

    /// What our pool holds on the device (reading pool attributes does not synchronize).
    pub fn pool_usage(&self) -> Result<PoolUsage> {
        self.bind()?;
        self.pool.usage()
    }

    /// Allocates `len` elements on the main stream, charged against the reservation first: an
    /// allocation past it fails with [`Error::OverReservation`] and CUDA is not called.
    pub fn alloc<T: DeviceCopy>(&self, len: usize) -> Result<DeviceBuffer<'_, T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("{len} elements overflow usize")))?;
        let charged = self.ledger.charge(bytes as u64)?;
        let ptr = self
            .bind()
            .and_then(|()| self.pool.alloc(bytes, self.stream.cu_stream()));
        match ptr {
            // SAFETY: `ptr` is a fresh allocation of `bytes` bytes from this device's pool on
            // its main stream, charged `charged` bytes.
            Ok(ptr) => Ok(unsafe { DeviceBuffer::from_raw(self, ptr, len, charged) }),
            Err(e) => {
                self.ledger.refund(charged);
                Err(e)
            }
        }
    }

    pub(crate) fn refund(&self, charged: u64) {
        self.ledger.refund(charged);
    }

    fn check_token(&self, token: &ComputeToken<'_>) -> Result<()> {
        if token.lease_id() == self.lease_id
            && normalize_uuid(token.device_uuid()) == normalize_uuid(&self.info.uuid)
        {
            Ok(())
        } else {
            Err(Error::WrongToken {
                token_lease: token.lease_id(),
                token_device: token.device_uuid().to_string(),
                lease: self.lease_id,
                device: self.info.uuid.clone(),
            })
        }
    }

    /// Waits for all work in the context (every stream). Device-global: needs the compute slot.
    pub fn synchronize(&self, token: &ComputeToken<'_>) -> Result<()> {
        self.check_token(token)?;
        Ok(self.ctx.synchronize()?)
    }

    /// Free and total device memory as the driver sees it. Device-global: needs the compute slot.
    pub fn mem_info(&self, token: &ComputeToken<'_>) -> Result<(u64, u64)> {
        self.check_token(token)?;
        let (free, total) = self.ctx.mem_get_info()?;
        Ok((free as u64, total as u64))
    }

    /// Synchronizes, then returns the pool's cached memory beyond `keep` bytes to the device.
    /// Device-global: needs the compute slot.
    pub fn trim(&self, keep: u64, token: &ComputeToken<'_>) -> Result<PoolUsage> {
        self.synchronize(token)?;
        self.pool.trim_to(keep)?;
        self.pool.usage()
    }

    /// Moves the reservation to `bytes` (after gpud granted the change). Growing only raises
    /// the budget. Shrinking first checks that no more than `bytes` is allocated, then
    /// synchronizes, trims the pool and checks that it holds no more than `bytes`, so the lease
    /// can be shrunk safely once this returns.
    pub fn resize(&self, bytes: u64, token: &ComputeToken<'_>) -> Result<PoolUsage> {
        self.check_token(token)?;
        let before = self.ledger.usage().limit;
        if bytes >= before {
            self.ledger.set_limit(bytes)?;
            self.bind()?;
            self.pool.set_release_threshold(bytes)?;
            return self.pool.usage();
        }
        self.ledger.set_limit(bytes)?;
        self.bind()?;
        self.pool.set_release_threshold(bytes)?;
        let usage = self.trim(bytes, token)?;
        if usage.reserved > bytes {
            return Err(Error::PoolNotReturned {
                held: usage.reserved,
                limit: bytes,
            });
        }
        Ok(usage)
    }

    /// Ends the device's use under the lease: every buffer is already dropped (they borrow the
    /// device), so this synchronizes, trims the pool to nothing and checks that it returned all
    /// its memory, before the lease may be released.
    pub fn close(self, token: &ComputeToken<'_>) -> Result<PoolUsage> {
        let usage = self.trim(0, token)?;
        if usage.reserved != 0 {
            return Err(Error::PoolNotReturned {
                held: usage.reserved,
                limit: 0,
            });
        }
        Ok(usage)
    }

    /// The module, compiled (or read from the disk cache) and loaded on first use.
    pub fn module(&self, module: &'static KernelModule) -> Result<Arc<CudaModule>> {
        let mut map = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = map.get(module.name) {
            return Ok(m.clone());
        }
        let compiled = nvrtc::load_or_compile(module, &self.info.arch())?;
        let loaded = self.ctx.load_module(Ptx::from_binary(compiled.cubin))?;
        map.insert(module.name, loaded.clone());
        Ok(loaded)
    }

    /// A kernel of a module (see [`Device::module`]).
    pub fn function(
        &self,
        module: &'static KernelModule,
        kernel: &'static str,
    ) -> Result<CudaFunction> {
        self.module(module)?
            .load_function(kernel)
            .map_err(|_| Error::MissingKernel {
                module: module.name,
                kernel,
            })
    }
}
