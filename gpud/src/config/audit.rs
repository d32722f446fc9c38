//! What the memory audit does about over-use (`[audit]`).

use std::time::Duration;

/// What to do about over-use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Report it (status, event, log, metrics) and nothing else.
    #[default]
    Warn,
    /// Report it, then revoke the owner's leases on the device after the grace period.
    Revoke,
}

/// Audit settings (`[audit]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditConfig {
    /// Warn, or revoke.
    pub policy: Policy,
    /// Use above the reservation by at most this much is not over-use (allocator slack).
    pub tolerance_bytes: u64,
    /// Time between the warning and the revocation, and between revocation and kill.
    pub grace: Duration,
    /// Kill the owner's processes when the memory is still used a grace period after revoking.
    pub kill: bool,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            policy: Policy::Warn,
            tolerance_bytes: 256 << 20,
            grace: Duration::from_secs(30),
            kill: false,
        }
    }
}
