//! systemd integration without libsystemd: socket activation and the notify protocol.
//!
//! Both protocols are a handful of environment variables and one datagram format, so gpud
//! speaks them itself. Outside systemd (no `LISTEN_PID`, no `NOTIFY_SOCKET`) both are no-ops.

pub mod activation;
pub mod notify;
