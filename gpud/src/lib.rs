//! gpud: the per-host GPU lease daemon.
