//! Simulated GPUs: `2x16GiB`, `16GiB,24GiB`, for hosts without NVIDIA hardware.

use super::{Backend, BackendError, ProbedDevice, ProcessUsage};
use crate::config::simulate::parse_spec;
use crate::ledger::Topology;

/// Devices that exist only in the daemon's memory; nobody outside gpud uses them.
#[derive(Debug)]
pub struct Simulated {
    devices: Vec<ProbedDevice>,
}

impl Simulated {
    /// Simulated devices from a spec.
    pub fn new(spec: &str) -> Result<Self, BackendError> {
        let devices = parse_spec(spec)?
            .into_iter()
            .enumerate()
            .map(|(i, total_bytes)| ProbedDevice {
                uuid: format!("GPU-5e1a0000-0000-4000-8000-{i:012x}"),
                name: "Simulated GPU".into(),
                total_bytes,
                topology: Topology::default(),
            })
            .collect();
        Ok(Self { devices })
    }

    /// Gives device `i` the topology `topology(i)` (the config's `devices.nvlink_islands` and
    /// `devices.numa_nodes`).
    pub fn with_topology(mut self, topology: impl Fn(usize) -> Topology) -> Self {
        for (i, d) in self.devices.iter_mut().enumerate() {
            d.topology = topology(i);
        }
        self
    }
}

impl Backend for Simulated {
    fn kind(&self) -> &'static str {
        "simulated"
    }
    fn devices(&self) -> Vec<ProbedDevice> {
        self.devices.clone()
    }
    fn usage(&mut self) -> Result<Vec<Vec<ProcessUsage>>, BackendError> {
        Ok(vec![Vec::new(); self.devices.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_devices_have_distinct_uuids() {
        let s = Simulated::new("3x1GiB").unwrap();
        let d = s.devices();
        assert_eq!(d.len(), 3);
        assert_ne!(d[0].uuid, d[1].uuid);
    }
}
