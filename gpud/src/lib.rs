//! gpud: the per-host GPU lease daemon.
//!
//! The [`ledger`] is the sans-IO core (devices, leases, queues, time as an argument); the
//! rest of the crate is the shell around it: device [`backend`]s, the socket [`server`] and
//! its hub, and the [`config`].
#![deny(missing_docs)]

pub mod backend;
pub mod config;
pub mod dbus;
pub mod journal;
pub mod ledger;
pub mod metrics;
pub mod server;
pub mod state_dir;
pub mod systemd;
