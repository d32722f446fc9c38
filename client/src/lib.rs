//! Client side of gpud: the wire protocol, async and blocking clients with RAII lease guards,
//! and the types GPU code uses to prove what it holds.
#![deny(missing_docs)]

pub mod reservation;

pub use reservation::{ComputeToken, ExclusiveDevice, LeaseId, Reservation};
