//! The two ways of sharing a GPU that gpud replaces, as [`Leaser`]s for the farm
//! ([`crate::farm`]): a per-GPU lock file ([`FlockLeaser`], bellperson style) and no
//! coordination at all ([`UnlockedLeaser`]).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use gpud_client::{ComputeToken, ExclusiveDevice, LeaseId, Reservation};
use gpud_prover::error::{ProverError, Result};
use gpud_prover::lease::{LeaseRequest, Leaser};

/// A lease of a baseline leaser: the device and bytes are claimed without any accounting; the
/// per-GPU lock file (if it holds one) is released when it drops.
#[derive(Debug)]
pub struct BaselineLease {
    device: ExclusiveDevice,
    id: LeaseId,
    compute: bool,
    _lock: Option<Flock<File>>,
}

impl Reservation for BaselineLease {
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

/// The device a baseline hands out (it has nothing to place requests).
#[derive(Debug, Clone)]
struct FixedDevice {
    uuid: String,
    index: u32,
    next_id: Arc<AtomicUsize>,
}

impl FixedDevice {
    fn new(uuid: impl Into<String>, index: u32) -> Self {
        Self {
            uuid: uuid.into(),
            index,
            next_id: Arc::default(),
        }
    }

    fn claim(&self, request: &LeaseRequest, lock: Option<Flock<File>>) -> BaselineLease {
        BaselineLease {
            device: ExclusiveDevice::assume_unshared(
                self.uuid.clone(),
                self.index,
                request.vram_bytes,
            ),
            id: self.next_id.fetch_add(1, Ordering::Relaxed) as LeaseId + 1,
            compute: request.compute,
            _lock: lock,
        }
    }
}

/// bellperson's way of sharing a GPU between processes: an exclusive `flock` on a lock file per
/// GPU, taken around the GPU phase (compute requests only) and released when the lease drops,
/// before the CPU tail. Waiters block in the kernel, in no particular order and with no notion
/// of priority or VRAM; a crashed holder's lock goes with its file descriptor.
#[derive(Debug, Clone)]
pub struct FlockLeaser {
    path: PathBuf,
    device: FixedDevice,
}

impl FlockLeaser {
    /// Leases on device `uuid` (index `index`), serialized by `dir/gpu-{index}.lock`.
    pub fn new(dir: impl AsRef<Path>, uuid: impl Into<String>, index: u32) -> Self {
        Self {
            path: dir.as_ref().join(format!("gpu-{index}.lock")),
            device: FixedDevice::new(uuid, index),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Leaser for FlockLeaser {
    type Lease = BaselineLease;

    fn acquire(&self, request: &LeaseRequest) -> Result<BaselineLease> {
        if !request.compute {
            return Ok(self.device.claim(request, None));
        }
        let lock_err =
            |e: String| ProverError::Lease(format!("lock file {}: {e}", self.path.display()));
        // Opened afresh for every GPU phase, as bellperson does.
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)
            .map_err(|e| lock_err(e.to_string()))?;
        let lock = loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => break lock,
                Err((f, Errno::EINTR)) => file = f,
                Err((_, e)) => return Err(lock_err(e.to_string())),
            }
        };
        Ok(self.device.claim(request, Some(lock)))
    }
}

/// No coordination: every request is "granted" at once, whatever else runs on the device.
/// What processes sharing a GPU do without gpud or a lock; they find out about each other
/// from CUDA's out-of-memory errors and from time-slicing.
#[derive(Debug, Clone)]
pub struct UnlockedLeaser {
    device: FixedDevice,
}

impl UnlockedLeaser {
    /// Leases on device `uuid` (index `index`).
    pub fn new(uuid: impl Into<String>, index: u32) -> Self {
        Self {
            device: FixedDevice::new(uuid, index),
        }
    }
}

impl Leaser for UnlockedLeaser {
    type Lease = BaselineLease;

    fn acquire(&self, request: &LeaseRequest) -> Result<BaselineLease> {
        Ok(self.device.claim(request, None))
    }
}
