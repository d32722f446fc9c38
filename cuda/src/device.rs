//! A GPU opened once per process: context, main stream and the kernels loaded so far.
//!
//! A CUDA context lives for the process, not for a lease: creating one costs far more than a
//! GPU phase and would drop everything resident on the device. Leases become [`Arena`]s
//! borrowed from the device ([`Device::reserve`]), each with its own memory pool and a ledger
//! that charges every allocation against that lease's VRAM before CUDA is asked.
//!
//! Rules the types enforce: device memory comes only from an arena; device-global operations
//! (context synchronize, pool trim, memory info) take a [`ComputeToken`] of this device, which
//! only a lease holding its compute slot can lend; [`Arena::close`] consumes the arena, so every
//! buffer (which borrows it) is gone first, then synchronizes, trims and checks that the pool
//! returned its memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use gpud_client::{ComputeToken, Reservation};

use crate::arena::Arena;
use crate::driver::{self, DeviceInfo, normalize_uuid};
use crate::error::{Error, Result};
use crate::kernels::KernelModule;
use crate::nvrtc;

/// A GPU opened for this process. Open it once (by UUID, as gpud names devices) and keep it:
/// per-lease budgets are [`Arena`]s borrowed from it.
#[derive(Debug)]
pub struct Device {
    info: DeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
}

impl Device {
    /// Opens the device with this UUID (`GPU-…`, as NVML and gpud write it). Without a driver
    /// this is [`Error::NoDriver`], never a panic.
    pub fn open(uuid: &str) -> Result<Self> {
        let info = driver::find_device(uuid)?;
        let ctx = CudaContext::new(info.ordinal)?;
        // cudarc's event tracking makes the first new stream synchronize the whole context (a
        // device-global wait, which needs the compute slot). We order all work ourselves
        // (allocations and frees on the main stream, explicit joins), so it is off.
        // SAFETY: no CudaSlice is created through this crate; our buffers are ordered on the
        // main stream and other streams join it before touching them.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        Ok(Self {
            info,
            ctx,
            stream,
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// A budget for one lease on this device: its own memory pool, charged against the lease's
    /// VRAM bytes. The lease must name this device ([`Error::WrongDevice`] otherwise).
    pub fn reserve<R: Reservation + ?Sized>(&self, lease: &R) -> Result<Arena<'_>> {
        if normalize_uuid(lease.device_uuid()) != normalize_uuid(&self.info.uuid) {
            return Err(Error::WrongDevice {
                lease: lease.lease_id(),
                lease_device: lease.device_uuid().to_string(),
                device: self.info.uuid.clone(),
            });
        }
        Arena::new(self, lease.lease_id(), lease.vram_bytes())
    }

    /// The device's identity and properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The cudarc context (for launching kernels through cudarc).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device's main stream. Allocations and frees of every arena are ordered on it; work
    /// on other streams that touches a buffer must be joined back into it before the buffer is
    /// dropped.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Makes the device's context current on the calling thread (needed before raw driver calls).
    pub fn bind(&self) -> Result<()> {
        Ok(self.ctx.bind_to_thread()?)
    }

    /// Checks that `token` proves the compute slot of this device. The slot is per device, so
    /// a token of any lease holding it will do (a VRAM-only lease's arena is trimmed under the
    /// compute lease the process holds at that moment).
    pub(crate) fn check_token(&self, token: &ComputeToken<'_>, lease: u64) -> Result<()> {
        if normalize_uuid(token.device_uuid()) == normalize_uuid(&self.info.uuid) {
            Ok(())
        } else {
            Err(Error::WrongToken {
                token_lease: token.lease_id(),
                token_device: token.device_uuid().to_string(),
                lease,
                device: self.info.uuid.clone(),
            })
        }
    }

    /// Waits for all work in the context (every stream). Device-global: needs the compute slot.
    pub fn synchronize(&self, token: &ComputeToken<'_>) -> Result<()> {
        self.check_token(token, token.lease_id())?;
        Ok(self.ctx.synchronize()?)
    }

    /// Free and total device memory as the driver sees it. Device-global: needs the compute slot.
    pub fn mem_info(&self, token: &ComputeToken<'_>) -> Result<(u64, u64)> {
        self.check_token(token, token.lease_id())?;
        let (free, total) = self.ctx.mem_get_info()?;
        Ok((free as u64, total as u64))
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
