//! The crate's error type.

use cudarc::driver::DriverError;

/// What went wrong in the CUDA layer. Every failure of the driver, of NVRTC, of the lease rules
/// or of an argument is one of these; nothing here panics on bad input or a missing driver.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `libcuda.so.1` could not be loaded: no NVIDIA driver on this machine.
    #[error("no CUDA driver: libcuda.so.1 could not be loaded")]
    NoDriver,
    /// `libnvrtc.so.13` could not be loaded, so kernels cannot be compiled.
    #[error("NVRTC not found: libnvrtc.so.13 could not be loaded (see cuda/README.md)")]
    NoNvrtc,
    /// No visible device has the UUID the lease names.
    #[error("no visible CUDA device has UUID {uuid}")]
    DeviceNotFound {
        /// The UUID looked for.
        uuid: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    /// An allocation would take the lease past its VRAM reservation; CUDA was not asked.
    #[error(
        "allocation of {requested} bytes exceeds the reservation: {in_use} of {reserved} bytes in use"
    )]
    OverReservation {
        /// Bytes the allocation would charge.
        requested: u64,
        /// Bytes charged before it.
        in_use: u64,
        /// The reservation.
        reserved: u64,
    },
    /// A reservation cannot shrink below what is still allocated.
    #[error("cannot shrink the reservation to {target} bytes: {in_use} bytes are still allocated")]
    StillAllocated {
        /// The size asked for.
        target: u64,
        /// Bytes still charged.
        in_use: u64,
    },
    /// After trimming, the memory pool still holds more than the reservation allows.
    #[error("memory pool still holds {held} bytes after trimming, over the limit of {limit}")]
    PoolNotReturned {
        /// Bytes the pool still reserves from the device.
        held: u64,
        /// What it may hold.
        limit: u64,
    },
    /// A compute token of another device was presented.
    #[error(
        "compute token of lease {token_lease} on {token_device} does not hold the compute slot of {device} (lease {lease})"
    )]
    WrongToken {
        /// The token's lease.
        token_lease: u64,
        /// The token's device.
        token_device: String,
        /// The lease of the arena (or the token's, for device-level calls).
        lease: u64,
        /// This device's UUID.
        device: String,
    },
    /// The compute token's lease was revoked or lost while the token was borrowed: the slot
    /// may belong to someone else now, so the device-global operation was not run.
    #[error(transparent)]
    LeaseLost(#[from] gpud_client::LeaseLost),
    /// A lease was presented to a device it does not name.
    #[error("lease {lease} is for device {lease_device}, not {device}")]
    WrongDevice {
        /// The lease.
        lease: u64,
        /// The device the lease names.
        lease_device: String,
        /// The device it was presented to.
        device: String,
    },
    /// NVRTC rejected a kernel module.
    #[error("NVRTC failed to compile {module}: {log}")]
    Compile {
        /// The module's name.
        module: &'static str,
        /// NVRTC's log.
        log: String,
    },
    /// An NVRTC call failed outside compilation proper.
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    /// A compiled module has no kernel of this name.
    #[error("module {module} has no kernel {kernel}")]
    MissingKernel {
        /// The module's name.
        module: &'static str,
        /// The kernel asked for.
        kernel: &'static str,
    },
    /// The kernel cache directory could not be used.
    #[error("kernel cache {path}: {source}")]
    Cache {
        /// The path involved.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An argument is outside what the call supports (sizes, lengths, devices).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Host memory handed to a transfer is not page-locked and no staging was asked for.
    #[error("host memory is not page-locked")]
    NotPinned,
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
