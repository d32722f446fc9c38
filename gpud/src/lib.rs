//! gpud: the per-host GPU lease daemon.
//!
//! Layers, each importing only those below it:
//! - [`ledger`]: the sans-IO lease book (devices, leases, queues, time as an argument);
//! - [`config`]: the validated configuration, a leaf that owns its value types;
//! - [`hub`]: [`hub::core`], the pure layer of sessions, requests, adoption, audit and
//!   timers over the ledger, and the one task that feeds it and carries out its actions;
//! - adapters beside each other below the daemon: the socket [`server`], [`dbus`], the
//!   device [`backend`]s, the [`journal`] file, [`procfs`], [`systemd`], the [`mps`] control
//!   daemon's supervision;
//! - [`daemon`]: wires them together (the binary's `main` only parses arguments).
#![deny(missing_docs)]

pub mod backend;
pub mod config;
pub mod daemon;
pub mod dbus;
pub mod host;
pub mod hub;
pub mod journal;
pub mod ledger;
pub mod metrics;
pub mod mps;
pub mod pid_lock;
pub mod procfs;
pub mod server;
pub mod state_dir;
pub mod systemd;

pub use daemon::Daemon;
