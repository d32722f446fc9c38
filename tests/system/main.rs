//! Whole-system tests: real daemons on temporary sockets with simulated GPUs, real clients,
//! real `gpudctl`, real processes killed with SIGKILL.

mod budgets;
mod chaos;
mod conformance;
mod dashboard;
mod dbus;
mod dbus_parity;
mod descriptors;
mod evictable;
mod gpudctl;
mod host;
mod hostile;
mod journal;
mod leases;
mod liveness;
mod metrics;
mod mps;
mod multidev;
mod notify;
mod operator;
mod preload;
mod prover;
mod reload;
mod slurm;
mod supervision;
mod systemd;
