//! Client side of gpud: the wire protocol, async and blocking clients with RAII lease guards,
//! and the types GPU code uses to prove what it holds.
#![deny(missing_docs)]

pub mod proto;
pub mod reservation;

pub use proto::{Class, Placement};
pub use reservation::{ComputeToken, ExclusiveDevice, LeaseId, Reservation};
