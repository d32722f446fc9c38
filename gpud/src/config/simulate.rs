//! Simulated devices (`--simulate`, `[devices] simulate`): `2x16GiB`, `16GiB,24GiB`, and
//! their topology (`[devices] nvlink_islands`, `numa_nodes`).

use gpud_proto::parse_size;
use thiserror::Error;

use crate::ledger::Topology;

/// The topology the config gives simulated devices (NVML reports real devices' own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimulatedTopology {
    /// Device indexes joined by NVLink, one list per island.
    pub nvlink_islands: Vec<Vec<u32>>,
    /// Each device's NUMA node, by index (devices past the end have none).
    pub numa_nodes: Vec<u32>,
}

impl SimulatedTopology {
    /// Checks that islands name devices that can exist, each in one island at most.
    pub fn new(nvlink_islands: Vec<Vec<u32>>, numa_nodes: Vec<u32>) -> Result<Self, String> {
        let mut seen = std::collections::BTreeSet::new();
        for &d in nvlink_islands.iter().flatten() {
            if d as usize >= MAX_DEVICES {
                return Err(format!("device {d} is not in 0..{MAX_DEVICES}"));
            }
            if !seen.insert(d) {
                return Err(format!("device {d} is in two islands"));
            }
        }
        if numa_nodes.len() > MAX_DEVICES {
            return Err(format!("more than {MAX_DEVICES} devices"));
        }
        Ok(Self {
            nvlink_islands,
            numa_nodes,
        })
    }

    /// Device `i`'s topology. An island's number is the position of its list.
    pub fn of(&self, i: usize) -> Topology {
        Topology {
            numa_node: self.numa_nodes.get(i).copied(),
            nvlink_island: self
                .nvlink_islands
                .iter()
                .position(|island| island.contains(&(i as u32)))
                .map(|n| n as u32),
        }
    }
}

/// A simulation spec that names no devices.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid simulation spec {spec:?}: {why} (examples: 2x16GiB, 16GiB,24GiB)")]
pub struct SimulationError {
    /// The spec.
    pub spec: String,
    /// Why.
    pub why: String,
}

/// At most this many simulated devices.
const MAX_DEVICES: usize = 64;

/// Parses a simulation spec into device sizes: comma-separated groups of `[Nx]SIZE`.
pub fn parse_spec(spec: &str) -> Result<Vec<u64>, SimulationError> {
    let bad = |why: String| SimulationError {
        spec: spec.to_string(),
        why,
    };
    let mut sizes = Vec::new();
    for group in spec.split(',') {
        let group = group.trim();
        if group.is_empty() {
            return Err(bad("empty device group".into()));
        }
        let (count, size) = match group.split_once(['x', 'X']) {
            Some((n, size)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                let n: usize = n.parse().map_err(|_| bad(format!("bad count {n:?}")))?;
                (n, size)
            }
            _ => (1, group),
        };
        let bytes = parse_size(size).map_err(|e| bad(e.to_string()))?;
        if bytes < (1 << 20) {
            return Err(bad(format!("device size {size:?} is under 1 MiB")));
        }
        if count == 0 || sizes.len() + count > MAX_DEVICES {
            return Err(bad(format!("between 1 and {MAX_DEVICES} devices")));
        }
        sizes.extend(std::iter::repeat_n(bytes, count));
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_name_islands_by_position() {
        let t = SimulatedTopology::new(vec![vec![0, 1], vec![3, 2]], vec![0, 0, 1]).unwrap();
        assert_eq!(t.of(1).nvlink_island, Some(0));
        assert_eq!(t.of(2).nvlink_island, Some(1));
        assert_eq!(t.of(2).numa_node, Some(1));
        assert_eq!(t.of(3).numa_node, None);
        assert_eq!(t.of(4), Topology::default());
        assert!(SimulatedTopology::new(vec![vec![0, 1], vec![1]], vec![]).is_err());
        assert!(SimulatedTopology::new(vec![vec![64]], vec![]).is_err());
    }

    #[test]
    fn specs_parse() {
        assert_eq!(parse_spec("2x16GiB").unwrap(), vec![16 << 30, 16 << 30]);
        assert_eq!(parse_spec("16GiB,24GiB").unwrap(), vec![16 << 30, 24 << 30]);
        assert_eq!(parse_spec("1x8GiB, 2X1GiB").unwrap().len(), 3);
        for bad in [
            "",
            "2x",
            "0x16GiB",
            "16GiB,",
            "100x1GiB",
            "2x16 parsecs",
            "512",
        ] {
            assert!(parse_spec(bad).is_err(), "{bad:?} accepted");
        }
    }
}
