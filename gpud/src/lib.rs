//! gpud: the per-host GPU lease daemon.
//!
//! The [`ledger`] is the sans-IO core (devices, leases, queues, time as an argument); the
//! rest of the crate is the shell around it: device backends, the socket server, config.
#![deny(missing_docs)]

pub mod ledger;
