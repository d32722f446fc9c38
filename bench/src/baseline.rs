//! The two ways of sharing a GPU that gpud replaces, as [`Leaser`]s for the farm
//! ([`crate::farm`]): a per-GPU lock file ([`FlockLeaser`], bellperson style) and no
//! coordination at all ([`UnlockedLeaser`]).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use gpud_prover::error::{ProverError, Result};
use gpud_prover::lease::{FixedDevice, FixedLease, LeaseRequest, Leaser};

/// A lease of a baseline leaser: the prover's lease without a daemon, holding the per-GPU lock
/// file (when it took one) until it drops.
pub type BaselineLease = FixedLease;

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
            return Ok(self.device.claim_holding(request, None));
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
        Ok(self.device.claim_holding(request, Some(Box::new(lock))))
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
        Ok(self.device.claim_holding(request, None))
    }
}
