//! Device backends: where the daemon learns which GPUs exist and who uses their memory.
//!
//! NVML on real hosts, a simulation everywhere else. Both are polled by a thread of their own
//! (NVML calls block) and report to the hub, which owns the ledger.

pub mod nvml;
pub mod simulated;
pub mod topology;

use thiserror::Error;

use crate::ledger::Topology;

/// A device as a backend sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbedDevice {
    /// UUID (`GPU-…`).
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory in bytes.
    pub total_bytes: u64,
    /// Its NUMA node and NVLink island, as far as known.
    pub topology: Topology,
}

/// Memory one process uses on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessUsage {
    /// The process (as the driver sees it).
    pub pid: u32,
    /// Bytes of device memory it uses.
    pub used_bytes: u64,
}

/// A backend failure.
#[derive(Debug, Error)]
pub enum BackendError {
    /// NVML could not be loaded or initialised.
    #[error(
        "NVML is not available ({0}); no NVIDIA driver on this host? Use --simulate 2x16GiB to run without GPUs"
    )]
    NoNvml(String),
    /// An NVML call failed.
    #[error("NVML call {call} failed: {message}")]
    Nvml {
        /// Which call.
        call: &'static str,
        /// NVML's message.
        message: String,
    },
    /// The simulation spec is wrong.
    #[error(transparent)]
    BadSimulation(#[from] crate::config::simulate::SimulationError),
}

/// A source of devices and their usage.
pub trait Backend: Send {
    /// `nvml` or `simulated`.
    fn kind(&self) -> &'static str;
    /// The devices, in index order.
    fn devices(&self) -> Vec<ProbedDevice>;
    /// Per device (in index order), the processes using memory.
    fn usage(&mut self) -> Result<Vec<Vec<ProcessUsage>>, BackendError>;
}
