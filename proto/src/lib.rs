//! gpud's wire protocol: the vocabulary (classes, placements, sizes, durations), the messages
//! a client and the daemon exchange, and their framing.
//!
//! The daemon and every client depend on this crate and not on each other; `docs/PROTOCOL.md`
//! describes the same protocol for clients written in other languages.
#![deny(missing_docs)]

pub mod class;
pub mod duration;
pub mod frame;
pub mod message;
pub mod report;
pub mod size;

pub use class::{Class, Placement, PlacementPolicy};
pub use duration::parse_duration;
pub use message::*;
pub use size::{Bytes, parse_size};

/// A lease identifier as the daemon assigns it.
pub type LeaseId = u64;

/// Where gpud listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/gpud/gpud.sock";

/// The socket path: `GPUD_SOCKET` when set, else [`DEFAULT_SOCKET`].
pub fn default_socket_path() -> std::path::PathBuf {
    std::env::var_os("GPUD_SOCKET")
        .filter(|v| !v.is_empty())
        .map_or_else(|| DEFAULT_SOCKET.into(), Into::into)
}
