//! What to ask for: a builder for acquire requests.

use std::time::Duration;

use crate::proto::{AcquireArgs, Class, Placement};

/// A lease request: VRAM and/or the compute slot of one device.
///
/// ```
/// use gpud_client::{Class, LeaseRequest, Placement};
/// let request = LeaseRequest::new()
///     .vram(12 << 30)
///     .compute()
///     .class(Class::High)
///     .device(Placement::Index(0))
///     .label("proof 42");
/// assert_eq!(request.args().vram_bytes, 12 << 30);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeaseRequest {
    args: AcquireArgs,
}

/// The environment variable that names the job's budget.
pub const BUDGET_ENV: &str = "GPUD_BUDGET";

impl LeaseRequest {
    /// Nothing yet: add `vram` and/or `compute`. Inside a job that a scheduler gave a gpud
    /// budget (`GPUD_BUDGET` in the environment, as the job's task prolog sets it), the
    /// request leases from that budget: see [`LeaseRequest::budget`].
    pub fn new() -> Self {
        let mut request = Self::default();
        request.args.budget = std::env::var(BUDGET_ENV).ok().filter(|h| !h.is_empty());
        request
    }
    /// Warm state: memory (no compute) that gpud may ask back with a reclaim notice when a
    /// request that is not evictable needs it; see [`crate::Lease::reclaim_requested`].
    pub fn evictable(mut self) -> Self {
        self.args.evictable = true;
        self
    }
    /// Lease from this budget (its handle, `ID:SECRET`), or from the device with `None`.
    pub fn budget(mut self, handle: Option<String>) -> Self {
        self.args.budget = handle;
        self
    }
    /// Reserve this many bytes of device memory.
    pub fn vram(mut self, bytes: u64) -> Self {
        self.args.vram_bytes = bytes;
        self
    }
    /// Take the device's compute slot.
    pub fn compute(mut self) -> Self {
        self.args.compute = true;
        self
    }
    /// Take the compute slot or not.
    pub fn with_compute(mut self, compute: bool) -> Self {
        self.args.compute = compute;
        self
    }
    /// Priority class (default `normal`).
    pub fn class(mut self, class: Class) -> Self {
        self.args.class = class;
        self
    }
    /// Which device (default: any).
    pub fn device(mut self, device: Placement) -> Self {
        self.args.device = device;
        self
    }
    /// Give up after this long.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.args.timeout_ms = Some(timeout.as_millis().min(u128::from(u64::MAX)) as u64);
        self
    }
    /// A note shown in `gpudctl status`.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.args.label = Some(label.into());
        self
    }
    /// The wire form.
    pub fn args(&self) -> &AcquireArgs {
        &self.args
    }
}
