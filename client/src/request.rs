//! What to ask for: a builder for acquire requests.

use std::time::Duration;

use crate::error::{ClientError, Result};
use crate::proto::{
    AcquireArgs, Class, HostArgs, NumaPlacement, PartArgs, Placement, PlacementPolicy,
};

/// A lease request: VRAM and/or the compute slot of one device, or of several devices at once
/// (granted together or not at all: [`LeaseRequest::devices`], [`LeaseRequest::part`]).
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
///
/// // Two devices of one NVLink island, 40 GiB and a compute slot on each.
/// use gpud_client::PlacementPolicy;
/// let pair = LeaseRequest::new()
///     .vram(40 << 30)
///     .compute()
///     .devices(2)
///     .placement(PlacementPolicy::Near);
/// let wire = pair.wire().unwrap();
/// assert_eq!(wire.parts.len(), 2);
/// assert_eq!(wire.parts[1].vram_bytes, 40 << 30);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeaseRequest {
    args: AcquireArgs,
    /// `devices(n)`: n parts like the request's own device, memory and compute.
    devices: Option<u32>,
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
    /// Asks for `n` devices at once, each with the request's VRAM and compute (and its device
    /// only when `n` is 1): granted on distinct devices together, or not at all. The lease's
    /// [`crate::Lease::parts`] then lists them, and its `CUDA_VISIBLE_DEVICES` names them all.
    pub fn devices(mut self, n: u32) -> Self {
        self.devices = Some(n);
        self
    }
    /// Adds one part (a device of its own with these needs) to a lease of several devices;
    /// the request's own VRAM, compute and device are then not used.
    pub fn part(mut self, device: Placement, vram_bytes: u64, compute: bool) -> Self {
        self.args.parts.push(PartArgs {
            device,
            vram_bytes,
            compute,
        });
        self
    }
    /// How gpud chooses the device(s) among those that can grant (default `best-fit`).
    pub fn placement(mut self, policy: PlacementPolicy) -> Self {
        self.args.placement = Some(policy);
        self
    }
    /// Reserve this many bytes of host memory with the lease (docs/HOST.md). A request with
    /// host resources and no device part is a lease of the host alone.
    pub fn host_memory(mut self, bytes: u64) -> Self {
        self.host_args().mem_bytes = bytes;
        self
    }
    /// Reserve this many bytes of page-locked host memory (counted as host memory too).
    pub fn pinned(mut self, bytes: u64) -> Self {
        self.host_args().pinned_bytes = bytes;
        self
    }
    /// Take `n` CPUs of one NUMA node; the grant names them ([`crate::Lease::host`]).
    pub fn cpus(mut self, n: u32) -> Self {
        self.host_args().cpus = n;
        self
    }
    /// Which NUMA node the CPUs come from (default: any; `near`: the lease's device's node).
    pub fn numa(mut self, numa: NumaPlacement) -> Self {
        self.host_args().numa = numa;
        self
    }
    /// The request's host part, made (empty) by the first host setter.
    fn host_args(&mut self) -> &mut HostArgs {
        self.args.host.get_or_insert_with(HostArgs::default)
    }
    /// The request as built (before [`LeaseRequest::devices`] is expanded into parts).
    pub fn args(&self) -> &AcquireArgs {
        &self.args
    }
    /// The wire form: `devices(n)` expanded into n parts. Refused when it makes no sense
    /// (no device, or both a count and explicit parts).
    pub fn wire(&self) -> Result<AcquireArgs> {
        let mut args = self.args.clone();
        match self.devices {
            None | Some(1) if args.parts.len() != 1 => {}
            None | Some(1) => {
                // One part is a lease of one device.
                let p = args.parts.remove(0);
                (args.device, args.vram_bytes, args.compute) = (p.device, p.vram_bytes, p.compute);
            }
            Some(0) => {
                return Err(ClientError::Invalid(
                    "a lease needs at least one device".into(),
                ));
            }
            Some(_) if !args.parts.is_empty() => {
                return Err(ClientError::Invalid(
                    "ask for a number of devices or for parts, not both".into(),
                ));
            }
            Some(n) => {
                if args.device != Placement::Any {
                    return Err(ClientError::Invalid(format!(
                        "{n} devices cannot all be device {}: name each part's device instead",
                        args.device
                    )));
                }
                let part = PartArgs {
                    device: Placement::Any,
                    vram_bytes: args.vram_bytes,
                    compute: args.compute,
                };
                args.parts = vec![part; n as usize];
                (args.vram_bytes, args.compute) = (0, false);
            }
        }
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_resources_reach_the_wire_alone_or_with_a_device() {
        let alone = LeaseRequest::default()
            .host_memory(64 << 30)
            .cpus(8)
            .numa(NumaPlacement::Node(1))
            .wire()
            .unwrap();
        assert_eq!(
            (alone.vram_bytes, alone.compute, alone.parts.len()),
            (0, false, 0)
        );
        let host = alone.host.unwrap();
        assert_eq!(
            (host.mem_bytes, host.pinned_bytes, host.cpus),
            (64 << 30, 0, 8)
        );
        assert_eq!(host.numa, NumaPlacement::Node(1));
        let json =
            serde_json::to_value(LeaseRequest::default().pinned(4096).wire().unwrap()).unwrap();
        assert_eq!(
            json["host"],
            serde_json::json!({"mem_bytes": 0, "pinned_bytes": 4096, "cpus": 0})
        );
        let with = LeaseRequest::default()
            .vram(8)
            .compute()
            .devices(2)
            .pinned(2)
            .numa(NumaPlacement::Near)
            .wire()
            .unwrap();
        assert_eq!(with.parts.len(), 2);
        assert_eq!(with.host.unwrap().numa, NumaPlacement::Near);
        // Without host methods nothing about the host goes out (older daemons refuse it).
        let plain =
            serde_json::to_string(&LeaseRequest::default().vram(1).wire().unwrap()).unwrap();
        assert!(!plain.contains("host"), "{plain}");
    }

    #[test]
    fn devices_expand_into_parts_and_one_part_is_one_device() {
        let two = LeaseRequest::default()
            .vram(8)
            .compute()
            .devices(2)
            .wire()
            .unwrap();
        assert_eq!(two.parts.len(), 2);
        assert!(two.parts.iter().all(|p| p.vram_bytes == 8 && p.compute));
        assert_eq!((two.vram_bytes, two.compute), (0, false));
        let one = LeaseRequest::default()
            .part(Placement::Index(1), 4, false)
            .wire()
            .unwrap();
        assert!(one.parts.is_empty());
        assert_eq!((one.device, one.vram_bytes), (Placement::Index(1), 4));
        let plain = LeaseRequest::default().vram(4).devices(1).wire().unwrap();
        assert_eq!(plain, LeaseRequest::default().vram(4).wire().unwrap());
    }

    #[test]
    fn nonsense_counts_are_refused_before_sending() {
        let refused = |r: LeaseRequest| assert!(matches!(r.wire(), Err(ClientError::Invalid(_))));
        refused(LeaseRequest::default().vram(1).devices(0));
        refused(
            LeaseRequest::default()
                .devices(2)
                .part(Placement::Any, 1, false)
                .part(Placement::Any, 1, false),
        );
        refused(
            LeaseRequest::default()
                .vram(1)
                .device(Placement::Index(0))
                .devices(2),
        );
    }
}
