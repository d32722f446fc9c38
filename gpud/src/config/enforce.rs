//! How gpud enforces leases on programs that never ask it (`[enforce]`): the MPS control
//! daemon it may run and supervise, whose clients get their lease as a hard memory limit.

use std::path::PathBuf;
use std::time::Duration;

/// The MPS control program's name, looked up in `PATH` unless `enforce.mps_control` names it.
pub const MPS_CONTROL: &str = "nvidia-cuda-mps-control";

/// `[enforce]` in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnforceConfig {
    /// Run one MPS control daemon for the host (`mps = true`).
    pub mps: bool,
    /// The control program; `None`: [`MPS_CONTROL`] in `PATH`.
    pub mps_control: Option<PathBuf>,
    /// The directory of the daemon's `pipe/` and `log/`; `None`: `/run/gpud/mps` as root,
    /// `$XDG_RUNTIME_DIR/gpud/mps` otherwise.
    pub mps_directory: Option<PathBuf>,
    /// How long the daemon has to end after `quit` before gpud kills it.
    pub mps_stop_timeout: Duration,
}

impl Default for EnforceConfig {
    fn default() -> Self {
        Self {
            mps: false,
            mps_control: None,
            mps_directory: None,
            mps_stop_timeout: Duration::from_secs(5),
        }
    }
}
