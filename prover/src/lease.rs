//! How the pipeline gets its leases: the [`Leaser`] seam, gpud's blocking client
//! ([`GpudLeaser`]) and an in-process stand-in ([`LocalLeaser`]). (The benchmark baselines,
//! a per-GPU lock file and no coordination, are leasers of the `gpud-bench` crate.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use gpud_client::{ComputeToken, ExclusiveDevice, LeaseId, Reservation};
use serde::Serialize;

use crate::error::{ProverError, Result};

/// Host resources a lease asks for beside (or instead of) the device's (docs/HOST.md): the
/// pipeline's synthesis and CPU-tail leases, and a process's resident footprint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HostNeeds {
    /// Bytes of host memory (page-locked bytes are counted here too by gpud).
    pub mem_bytes: u64,
    /// Bytes of page-locked memory.
    pub pinned_bytes: u64,
    /// CPUs, all on one NUMA node; the grant names them ([`Leaser::granted_cpus`]).
    pub cpus: u32,
}

impl HostNeeds {
    /// Host memory alone.
    pub fn memory(bytes: u64) -> Self {
        Self {
            mem_bytes: bytes,
            ..Self::default()
        }
    }

    /// CPUs alone.
    pub fn cpus(n: u32) -> Self {
        Self {
            cpus: n,
            ..Self::default()
        }
    }

    /// Nothing asked.
    pub fn is_empty(&self) -> bool {
        self.mem_bytes == 0 && self.pinned_bytes == 0 && self.cpus == 0
    }
}

/// What the GPU phase of one partition (or a prover's resident bases, or its host work) asks
/// for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseRequest {
    /// Device memory, from [`crate::vram::estimate`].
    pub vram_bytes: u64,
    /// Whether the compute slot is needed (always, for a GPU phase; never for resident data).
    pub compute: bool,
    /// The device (UUID) the lease must be on, e.g. where the resident bases are; `None`: any.
    pub device: Option<String>,
    /// Priority class name (`critical`, `high`, `normal`, `background`).
    pub class: String,
    /// A label for `gpudctl leases`.
    pub label: String,
    /// Warm state (resident bases): gpud may ask for the memory back with a reclaim notice.
    pub evictable: bool,
    /// Host resources granted with the lease, atomically (none by default).
    pub host: HostNeeds,
}

impl LeaseRequest {
    /// A request that is not evictable (a GPU phase's, or data that must stay).
    pub fn new(vram_bytes: u64, compute: bool, class: &str, label: String) -> Self {
        Self {
            vram_bytes,
            compute,
            device: None,
            class: class.to_owned(),
            label,
            evictable: false,
            host: HostNeeds::default(),
        }
    }

    /// A lease of host resources alone (no device memory, no compute slot).
    pub fn host_only(host: HostNeeds, class: &str, label: String) -> Self {
        Self {
            host,
            ..Self::new(0, false, class, label)
        }
    }
}

/// Acquires leases for GPU phases; a lease is released when dropped.
pub trait Leaser {
    /// The lease guard.
    type Lease: Reservation;
    /// Blocks until the lease is granted (or fails).
    fn acquire(&self, request: &LeaseRequest) -> Result<Self::Lease>;
    /// Waits at most `wait` for the lease: `None` when it was not granted in time. Leasers
    /// without a daemon grant at once.
    fn try_acquire(&self, request: &LeaseRequest, _wait: Duration) -> Result<Option<Self::Lease>> {
        self.acquire(request).map(Some)
    }
    /// Whether the lease was revoked or its connection lost while held.
    fn lost(&self, _lease: &Self::Lease) -> bool {
        false
    }
    /// Whether the daemon asked the lease to give its compute slot back (a critical request
    /// waits for it). Leasers without a daemon are never asked.
    fn yield_requested(&self, _lease: &Self::Lease) -> bool {
        false
    }
    /// Whether the daemon asked an evictable lease for its memory back (a request that is not
    /// evictable needs it). Leasers without a daemon never reclaim.
    fn reclaim_requested(&self, _lease: &Self::Lease) -> bool {
        false
    }
    /// Runs `hook` when a notice about the lease (a yield request, a revocation) arrives; it
    /// must be quick and must not block. Leasers without a daemon have no notices.
    fn on_notice(&self, _lease: &Self::Lease, _hook: Box<dyn Fn() + Send + Sync>) {}
    /// The CPUs a lease with [`HostNeeds::cpus`] was granted (kernel numbers), to pin the work
    /// to. Leasers without a daemon name none: the work runs where the scheduler puts it.
    fn granted_cpus(&self, _lease: &Self::Lease) -> Vec<u32> {
        Vec::new()
    }
}

/// An in-process stand-in for gpud: one compute slot shared by this process's pipelines, and
/// no VRAM accounting. For runs without a daemon; it cannot coordinate processes.
#[derive(Debug, Clone)]
pub struct LocalLeaser {
    slot: Arc<(Mutex<bool>, Condvar)>,
    device: FixedDevice,
}

impl Default for LocalLeaser {
    /// Leases on a device named `local` (the CPU engine ignores the device).
    fn default() -> Self {
        Self::on_device("local", 0)
    }
}

impl LocalLeaser {
    /// Leases on the device with this UUID (as the CUDA engine needs: it opens the device a
    /// lease names).
    pub fn on_device(uuid: impl Into<String>, index: u32) -> Self {
        Self {
            slot: Arc::default(),
            device: FixedDevice::new(uuid, index),
        }
    }
}

/// A lease from [`LocalLeaser`]; frees the compute slot (if it holds it) when dropped.
pub type LocalLease = FixedLease;

impl Leaser for LocalLeaser {
    type Lease = LocalLease;

    fn acquire(&self, request: &LeaseRequest) -> Result<LocalLease> {
        let hold = if request.compute {
            let (lock, cv) = &*self.slot;
            let mut busy = lock.lock().unwrap_or_else(|e| e.into_inner());
            while *busy {
                busy = cv.wait(busy).unwrap_or_else(|e| e.into_inner());
            }
            *busy = true;
            Hold::Slot(self.slot.clone())
        } else {
            Hold::Nothing
        };
        Ok(self.device.claim(request, hold))
    }
}

/// Leases from gpud through its blocking client: one session per prover process, so every
/// lease dies with the process (a killed prover frees its device).
pub struct GpudLeaser {
    client: gpud_client::blocking::Client,
}

impl std::fmt::Debug for GpudLeaser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpudLeaser")
            .field("session", &self.client.session())
            .finish()
    }
}

impl GpudLeaser {
    /// Connects to gpud at `socket`.
    pub fn connect(socket: impl AsRef<std::path::Path>) -> Result<Self> {
        let client = gpud_client::blocking::Client::connect(socket)
            .map_err(|e| ProverError::Lease(e.to_string()))?;
        Ok(Self { client })
    }

    /// The client, for status queries.
    pub fn client(&self) -> &gpud_client::blocking::Client {
        &self.client
    }

    /// Whether the daemon books host resources (its welcome lists the feature `host`).
    pub fn offers_host(&self) -> bool {
        self.client.offers_host()
    }

    fn client_request(request: &LeaseRequest) -> Result<gpud_client::LeaseRequest> {
        let class = request
            .class
            .parse::<gpud_client::Class>()
            .map_err(|e| ProverError::Lease(e.to_string()))?;
        let mut req = gpud_client::LeaseRequest::new()
            .vram(request.vram_bytes)
            .with_compute(request.compute)
            .class(class)
            .label(request.label.clone());
        if request.evictable {
            req = req.evictable();
        }
        if let Some(uuid) = &request.device {
            req = req.device(gpud_client::Placement::Uuid(uuid.clone()));
        }
        let host = request.host;
        if host.mem_bytes > 0 {
            req = req.host_memory(host.mem_bytes);
        }
        if host.pinned_bytes > 0 {
            req = req.pinned(host.pinned_bytes);
        }
        if host.cpus > 0 {
            req = req.cpus(host.cpus);
        }
        Ok(req)
    }
}

impl Leaser for GpudLeaser {
    type Lease = gpud_client::blocking::Lease;

    fn acquire(&self, request: &LeaseRequest) -> Result<Self::Lease> {
        self.client
            .acquire(&Self::client_request(request)?)
            .map_err(|e| ProverError::Lease(e.to_string()))
    }

    fn try_acquire(&self, request: &LeaseRequest, wait: Duration) -> Result<Option<Self::Lease>> {
        match self
            .client
            .acquire(&Self::client_request(request)?.timeout(wait))
        {
            Ok(lease) => Ok(Some(lease)),
            Err(e) if e.code() == Some(gpud_client::proto::ErrorCode::TimedOut) => Ok(None),
            Err(e) => Err(ProverError::Lease(e.to_string())),
        }
    }

    fn lost(&self, lease: &Self::Lease) -> bool {
        lease.is_lost()
    }

    fn yield_requested(&self, lease: &Self::Lease) -> bool {
        lease.yield_requested()
    }

    fn reclaim_requested(&self, lease: &Self::Lease) -> bool {
        lease.reclaim_requested()
    }

    fn on_notice(&self, lease: &Self::Lease, hook: Box<dyn Fn() + Send + Sync>) {
        lease.watch().on_notice(hook);
    }

    fn granted_cpus(&self, lease: &Self::Lease) -> Vec<u32> {
        lease.host().map(|h| h.cpus.clone()).unwrap_or_default()
    }
}

/// A lease of a leaser without a daemon ([`LocalLeaser`], or a baseline's): the device and bytes
/// are claimed without any accounting; what it holds (the in-process compute slot, a lock) is
/// freed when it drops.
#[derive(Debug)]
pub struct FixedLease {
    device: ExclusiveDevice,
    id: LeaseId,
    compute: bool,
    _hold: Hold,
}

/// What a [`FixedLease`] holds until it drops.
enum Hold {
    Nothing,
    /// [`LocalLeaser`]'s compute slot, freed on drop.
    Slot(Arc<(Mutex<bool>, Condvar)>),
    /// Another leaser's guard (a lock file, say), released when dropped: it is held, not read.
    Guard(#[allow(dead_code)] Box<dyn Send + Sync>),
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hold::Nothing => "Nothing",
            Hold::Slot(_) => "Slot",
            Hold::Guard(_) => "Guard",
        })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Hold::Slot(slot) = self {
            let (lock, cv) = &**slot;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = false;
            cv.notify_one();
        }
    }
}

impl Reservation for FixedLease {
    fn lease_id(&self) -> LeaseId {
        self.id
    }
    fn device_uuid(&self) -> &str {
        self.device.device_uuid()
    }
    fn device_index(&self) -> u32 {
        self.device.device_index()
    }
    fn vram_bytes(&self) -> u64 {
        self.device.vram_bytes()
    }
    fn compute_token(&self) -> Option<ComputeToken<'_>> {
        if self.compute {
            self.device.compute_token()
        } else {
            None
        }
    }
}

/// The device a leaser without a daemon hands out (it has nothing to place requests): for
/// [`LocalLeaser`] here, and for the baselines gpud is measured against.
#[derive(Debug, Clone)]
pub struct FixedDevice {
    uuid: String,
    index: u32,
    next_id: Arc<AtomicUsize>,
}

impl FixedDevice {
    /// Device `uuid`, index `index`; lease ids count from 1.
    pub fn new(uuid: impl Into<String>, index: u32) -> Self {
        Self {
            uuid: uuid.into(),
            index,
            next_id: Arc::default(),
        }
    }

    /// A lease of `request` that holds `guard` (a lock, say) until it drops; no accounting.
    pub fn claim_holding(
        &self,
        request: &LeaseRequest,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> FixedLease {
        self.claim(request, guard.map_or(Hold::Nothing, Hold::Guard))
    }

    fn claim(&self, request: &LeaseRequest, hold: Hold) -> FixedLease {
        FixedLease {
            device: ExclusiveDevice::assume_unshared(
                self.uuid.clone(),
                self.index,
                request.vram_bytes,
            ),
            id: self.next_id.fetch_add(1, Ordering::Relaxed) as LeaseId + 1,
            compute: request.compute,
            _hold: hold,
        }
    }
}
