//! A GPU opened once per process: context, main stream and the kernels loaded so far.
//!
//! A CUDA context lives for the process, not for a lease: creating one costs far more than a
//! GPU phase and would drop everything resident on the device. Leases become [`Arena`]s
//! borrowed from the device ([`Device::reserve`]), each with its own memory pool and a ledger
//! that charges every allocation against that lease's VRAM before CUDA is asked.
//!
//! Rules the types enforce: device memory comes only from an arena; device-global operations
//! (context synchronize, pool trim, memory info) take a [`ComputeToken`] of this device, which
//! only a lease holding its compute slot can lend, and is checked at use to still hold it;
//! nothing public hands out the raw cudarc context or stream (through either, anyone could
//! synchronize the context without a token), only typed operations.
//!
//! This module is the bottom of the device layer: it knows kernels and the driver, not
//! arenas or buffers ([`Device::reserve`] is defined in [`crate::arena`], next to the type it
//! makes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use gpud_client::ComputeToken;

use crate::driver::{self, DeviceInfo, normalize_uuid};
use crate::error::{Error, Result};
use crate::kernels::KernelModule;
use crate::nvrtc;

/// A GPU opened for this process. Open it once (by UUID, as gpud names devices) and keep it:
/// per-lease budgets are [`crate::Arena`]s borrowed from it ([`Device::reserve`]).
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

    /// The device's identity and properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The cudarc context, for this crate's engines (streams and events of their own). Never
    /// public: through it anyone could synchronize the context without a token.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device's main stream. Allocations and frees of every arena are ordered on it; work
    /// on other streams that touches a buffer must be joined back into it before the buffer is
    /// dropped. Crate-private like [`Device::context`]: a cudarc stream hands out its context.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits for the work this process queued on the device's main stream (e.g. to time a
    /// phase, or before reading results through the host). Not device-global (other streams and
    /// processes are not waited for), so it needs no token.
    pub fn sync_main_stream(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    /// Makes the device's context current on the calling thread (needed before raw driver calls).
    pub(crate) fn bind(&self) -> Result<()> {
        Ok(self.ctx.bind_to_thread()?)
    }

    /// The main stream itself, for the benchmark binaries that time kernels with their own
    /// events and launch variant kernels directly. Everything reached through it (the context
    /// included) bypasses the compute-token rules, so it exists only in builds with the
    /// `bench-variants` feature, which the product does not enable.
    #[cfg(feature = "bench-variants")]
    pub fn raw_stream_bypassing_tokens(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Checks that `token` proves the compute slot of this device, now (see [`check_token`]).
    pub(crate) fn check_token(&self, token: &ComputeToken<'_>, lease: u64) -> Result<()> {
        check_token(token, &self.info.uuid, lease)
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

/// Checks that `token` proves the compute slot of the device `device_uuid` at this moment: it
/// names that device ([`Error::WrongToken`] otherwise) and its lease was not revoked or lost
/// since it was borrowed ([`Error::LeaseLost`]). The slot is per device, so a token of any
/// lease holding it will do (a VRAM-only lease's arena is trimmed under the compute lease the
/// process holds at that moment); `lease` names the lease the operation is for, in errors.
fn check_token(token: &ComputeToken<'_>, device_uuid: &str, lease: u64) -> Result<()> {
    if normalize_uuid(token.device_uuid()) != normalize_uuid(device_uuid) {
        return Err(Error::WrongToken {
            token_lease: token.lease_id(),
            token_device: token.device_uuid().to_string(),
            lease,
            device: device_uuid.to_string(),
        });
    }
    Ok(token.ensure_held()?)
}

#[cfg(test)]
mod tests {
    use gpud_client::{ExclusiveDevice, Reservation};

    use super::*;

    const UUID: &str = "GPU-8f3c2a10-1111-2222-3333-444455556666";

    #[test]
    fn a_token_of_the_device_is_accepted_whatever_the_uuid_spelling() {
        let claim = ExclusiveDevice::assume_unshared(UUID.to_lowercase(), 0, 0);
        let token = claim
            .compute_token()
            .expect("an unshared claim holds the slot");
        check_token(&token, UUID, 3).expect("the same device");
    }

    #[test]
    fn a_token_of_another_device_is_refused_with_both_leases_named() {
        let claim =
            ExclusiveDevice::assume_unshared("GPU-00000000-0000-0000-0000-000000000000", 0, 0);
        let token = claim
            .compute_token()
            .expect("an unshared claim holds the slot");
        match check_token(&token, UUID, 3) {
            Err(Error::WrongToken {
                token_lease: 0,
                lease: 3,
                ref device,
                ..
            }) if device == UUID => {}
            other => panic!("expected WrongToken, got {other:?}"),
        }
    }
}
