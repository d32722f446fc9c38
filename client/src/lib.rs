//! Client side of gpud: the wire protocol, async and blocking clients with RAII lease guards,
//! and the types GPU code uses to prove what it holds.
//!
//! ```no_run
//! use gpud_client::{LeaseRequest, blocking::Client};
//! let client = Client::connect_default()?;
//! let lease = client.acquire(&LeaseRequest::new().vram(8 << 30).compute())?;
//! // The GPU phase, here in a child process that sees only the leased device.
//! std::process::Command::new("my-cuda-program")
//!     .env("CUDA_VISIBLE_DEVICES", lease.cuda_visible_devices())
//!     .status()
//!     .expect("run the GPU phase");
//! drop(lease); // released
//! # Ok::<(), gpud_client::ClientError>(())
//! ```
#![deny(missing_docs)]

pub mod blocking;
mod client;
mod connection;
mod error;
mod lease;
pub mod proto;
mod request;
pub mod reservation;

pub use client::Client;
pub use connection::ClientOptions;
pub use error::{ClientError, Result};
pub use lease::Lease;
pub use proto::{Class, Placement};
pub use request::LeaseRequest;
pub use reservation::{ComputeToken, ExclusiveDevice, LeaseId, Reservation};

/// Where gpud listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/gpud/gpud.sock";

/// The socket path: `GPUD_SOCKET` when set, else [`DEFAULT_SOCKET`].
pub fn default_socket_path() -> std::path::PathBuf {
    std::env::var_os("GPUD_SOCKET")
        .filter(|v| !v.is_empty())
        .map_or_else(|| DEFAULT_SOCKET.into(), Into::into)
}
