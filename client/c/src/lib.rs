//! libgpud: the C ABI of the gpud client, declared in `include/gpud.h` (generated from this
//! crate by cbindgen) and wrapped for C++17 by the header-only `include/gpud.hpp`.
//!
//! Every function is a thin layer over the Rust client (`gpud-client`, its blocking face): the
//! protocol, reconnection and lease re-adoption are the Rust client's. What this crate adds is
//! the boundary:
//! - every entry point catches panics ([`error::boundary`]) and returns a [`GpudCode`]; the
//!   message of the last failure is kept per thread (`gpud_last_error`);
//! - every pointer is checked before use (NULL is an error code, never a crash) and every
//!   string must be UTF-8 ([`ptr`], one of the two modules with `unsafe` code);
//! - a lease's yield notice and revocation also arrive on an eventfd ([`notice`], the other).
//!
//! The library's major version (its soname, `libgpud.so.1`) is the protocol version it speaks
//! ([`gpud_client::proto::PROTOCOL_VERSION`]); `gpud_protocol_version()` returns it.
#![deny(missing_docs)]

mod api;
mod code;
mod error;
mod notice;
mod ptr;

pub use api::client::GpudClient;
pub use api::lease::GpudLease;
pub use api::misc::{GPUD_NO_NUMA_NODE, GPUD_NO_TIMEOUT};
pub use api::request::GpudRequest;
pub use code::{GpudClass, GpudCode};
