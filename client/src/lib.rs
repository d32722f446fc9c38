//! Client side of gpud: async and blocking clients with RAII lease guards (the wire protocol is
//! the `gpud-proto` crate, re-exported as [`proto`]),
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
mod request;
pub mod reservation;

/// The wire protocol, from the `gpud-proto` crate that the daemon shares.
pub use gpud_proto as proto;

pub use client::Client;
pub use connection::ClientOptions;
pub use error::{ClientError, Result};
pub use lease::{Lease, LeaseWatch};
pub use proto::{Class, HostGrant, LeasePart, NumaPlacement, Placement, PlacementPolicy};
pub use request::{BUDGET_ENV, LeaseRequest};
pub use reservation::{ComputeToken, ExclusiveDevice, LeaseId, LeaseLost, Reservation};

pub use gpud_proto::{DEFAULT_SOCKET, default_socket_path};
