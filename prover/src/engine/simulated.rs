//! Resident bases on a simulated device: an engine that leases device memory for bases it
//! keeps in host memory, as the CUDA engine leases for the bases it keeps on the GPU.
//!
//! On a host without a GPU (gpud's simulated devices, CI, the demo) the CPU engine runs the
//! phase, but the leases should be the ones a GPU prover takes, so that the sharing (warm
//! state, reclaim notices, cold phases that carry the bases) is the real protocol. This
//! wrapper makes any engine keep "resident bases" of a given size: [`Engine::resident_bytes`]
//! is that size, and a phase's lease includes it while the bases are not loaded, exactly as
//! the CUDA engine sizes its leases.

use std::sync::atomic::{AtomicBool, Ordering};

use gpud_client::Reservation;

use super::{Engine, PhaseInput, PhaseLease, PhaseOutput};
use crate::error::{ProverError, Result};
use crate::params::ProvingKey;
use crate::vram::VramEstimate;

/// `inner` with resident bases of `bytes` that exist only as a lease.
#[derive(Debug)]
pub struct SimulatedResident<E> {
    inner: E,
    bytes: u64,
    loaded: AtomicBool,
}

impl<E> SimulatedResident<E> {
    /// `inner`, keeping `bytes` resident (0: nothing, like `inner`).
    pub fn new(inner: E, bytes: u64) -> Self {
        Self {
            inner,
            bytes,
            loaded: AtomicBool::new(false),
        }
    }

    /// Whether the bases are "on the device" now.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }
}

impl<E: Engine> Engine for SimulatedResident<E> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn gpu_phase(
        &self,
        lease: &dyn Reservation,
        key: &ProvingKey,
        input: PhaseInput<'_>,
    ) -> Result<PhaseOutput> {
        self.inner.gpu_phase(lease, key, input)
    }

    fn gpu_phase_with_safe_points(
        &self,
        lease: &mut dyn PhaseLease,
        key: &ProvingKey,
        input: PhaseInput<'_>,
    ) -> Result<PhaseOutput> {
        self.inner.gpu_phase_with_safe_points(lease, key, input)
    }

    fn vram(&self, key: &ProvingKey, log_domain: u32) -> VramEstimate {
        self.inner.vram(key, log_domain)
    }

    fn vram_bytes(&self, key: &ProvingKey, log_domain: u32) -> u64 {
        let working = self.inner.vram_bytes(key, log_domain);
        if self.is_loaded() {
            working
        } else {
            working.saturating_add(self.bytes)
        }
    }

    fn host_pinned(&self, key: &ProvingKey) -> crate::host::PinnedHost {
        self.inner.host_pinned(key)
    }

    fn g2_in_tail(&self, key: &ProvingKey) -> bool {
        self.inner.g2_in_tail(key)
    }

    fn needs_c(&self) -> bool {
        self.inner.needs_c()
    }

    fn resident_bytes(&self, _key: &ProvingKey) -> u64 {
        self.bytes
    }

    fn load_resident(&self, key: &ProvingKey, lease: &dyn Reservation) -> Result<()> {
        if lease.vram_bytes() < self.bytes {
            return Err(ProverError::Lease(format!(
                "lease {} holds {} bytes, the resident bases of {} need {}",
                lease.lease_id(),
                lease.vram_bytes(),
                key.name(),
                self.bytes
            )));
        }
        if self.loaded.swap(true, Ordering::AcqRel) {
            return Err(ProverError::Lease(format!(
                "the bases of {} are already resident",
                key.name()
            )));
        }
        Ok(())
    }

    fn unload_resident(&self, _key: &ProvingKey, _compute: Option<&dyn Reservation>) -> Result<()> {
        self.loaded.store(false, Ordering::Release);
        Ok(())
    }
}
