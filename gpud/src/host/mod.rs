//! The host's own resources: what the machine has (`/proc/meminfo`, the NUMA nodes' CPUs in
//! `/sys`, gpud's allowed CPUs), what `[host]` makes of it, and the ledger's host pools
//! (docs/HOST.md).
//!
//! The reading is a thin shell ([`discover`]); everything else is pure and unit-tested.

use std::collections::BTreeSet;
use std::path::Path;

use crate::config::HostConfig;
use crate::ledger::{DeviceSpec, PoolKind};

/// The host memory pool's name (its ledger UUID and journal device).
pub const MEMORY_POOL: &str = "host-memory";
/// The page-locked memory pool's name.
pub const PINNED_POOL: &str = "host-pinned";

/// The CPU pool of NUMA node `node`.
pub fn cpu_pool(node: u32) -> String {
    format!("numa{node}")
}

/// What the machine has, as read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostFacts {
    /// `MemTotal`, bytes.
    pub mem_total: u64,
    /// `MemAvailable`, bytes.
    pub mem_available: u64,
    /// The NUMA nodes and their CPUs that gpud may run on, by node.
    pub nodes: Vec<NodeCpus>,
}

/// One NUMA node's CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeCpus {
    /// The node.
    pub node: u32,
    /// Its CPUs (kernel numbers, ascending).
    pub cpus: Vec<u32>,
}

/// The host as gpud books it: the pools' sizes and each node's CPUs handed out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostLayout {
    /// Host memory: what it has (`MemTotal` or `[host] memory`).
    pub memory_total: u64,
    /// Host memory never handed out.
    pub memory_headroom: u64,
    /// Page-locked memory booked.
    pub pinned_total: u64,
    /// Each node's CPUs that leases get (after `[host] cpu_headroom`).
    pub nodes: Vec<NodeCpus>,
}

impl HostLayout {
    /// The layout `config` makes of `facts`.
    pub fn new(facts: &HostFacts, config: &HostConfig) -> Self {
        let memory_total = config.memory_bytes.unwrap_or(facts.mem_total);
        let memory_headroom = config.memory_headroom.of(memory_total);
        let capacity = memory_total - memory_headroom;
        let pinned_total = config.pinned_bytes.unwrap_or(capacity / 2).min(capacity);
        let headroom = config.cpu_headroom as usize;
        let nodes = facts
            .nodes
            .iter()
            .map(|n| NodeCpus {
                node: n.node,
                // The highest-numbered are kept out: CPU 0 is where most interrupts go, but
                // the system's own threads are spread; the lowest stay predictable for leases.
                cpus: n.cpus[..n.cpus.len().saturating_sub(headroom)].to_vec(),
            })
            .filter(|n| !n.cpus.is_empty())
            .collect();
        Self {
            memory_total,
            memory_headroom,
            pinned_total,
            nodes,
        }
    }

    /// The ledger's host pools: memory, page-locked memory, then each node's CPUs.
    pub fn pools(&self) -> Vec<DeviceSpec> {
        let mut pools = vec![
            DeviceSpec::host_pool(
                PoolKind::HostMemory,
                MEMORY_POOL,
                self.memory_total,
                self.memory_headroom,
                None,
            ),
            DeviceSpec::host_pool(PoolKind::Pinned, PINNED_POOL, self.pinned_total, 0, None),
        ];
        for n in &self.nodes {
            pools.push(DeviceSpec::host_pool(
                PoolKind::Cpus,
                cpu_pool(n.node),
                n.cpus.len() as u64,
                0,
                Some(n.node),
            ));
        }
        pools
    }

    /// Node `node`'s CPUs, if gpud hands out any.
    pub fn node(&self, node: u32) -> Option<&NodeCpus> {
        self.nodes.iter().find(|n| n.node == node)
    }
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`'s text, in bytes.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            kib.checked_mul(1024)
        })
    };
    Some((field("MemTotal")?, field("MemAvailable")?))
}

/// A kernel CPU list (`0-3,8,10-11`), ascending and without repeats.
pub fn parse_cpulist(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = BTreeSet::new();
    for item in text.trim().split(',').filter(|s| !s.trim().is_empty()) {
        let bad = || format!("{item:?} in CPU list {text:?} is not a CPU or a range");
        let (a, b) = match item.trim().split_once('-') {
            Some((a, b)) => (a, b),
            None => (item.trim(), item.trim()),
        };
        let a: u32 = a.trim().parse().map_err(|_| bad())?;
        let b: u32 = b.trim().parse().map_err(|_| bad())?;
        if a > b || b - a > 65_536 {
            return Err(bad());
        }
        cpus.extend(a..=b);
    }
    Ok(cpus.into_iter().collect())
}

/// The nodes as `/sys` lists them, each with the CPUs gpud may use (`allowed`); without node
/// information, one node 0 of all allowed CPUs.
pub fn nodes_of(listed: Vec<NodeCpus>, allowed: &[u32]) -> Vec<NodeCpus> {
    let allowed: BTreeSet<u32> = allowed.iter().copied().collect();
    if listed.is_empty() {
        return vec![NodeCpus {
            node: 0,
            cpus: allowed.into_iter().collect(),
        }];
    }
    let mut nodes: Vec<NodeCpus> = listed
        .into_iter()
        .map(|n| NodeCpus {
            node: n.node,
            cpus: n.cpus.into_iter().filter(|c| allowed.contains(c)).collect(),
        })
        .collect();
    nodes.sort_by_key(|n| n.node);
    nodes
}

/// Host memory used by processes that hold no host lease: what is used
/// (`MemTotal − MemAvailable`) less what the host-leased processes use, each counted up to
/// its lease (`holders`: resident bytes and leased bytes).
pub fn unmanaged_memory(used: u64, holders: &[(u64, u64)]) -> u64 {
    let managed = holders
        .iter()
        .map(|&(resident, leased)| resident.min(leased))
        .fold(0u64, u64::saturating_add);
    used.saturating_sub(managed)
}

/// Reads what the machine has: memory, NUMA nodes and their CPUs, and the CPUs gpud may run
/// on. Fails when `/proc/meminfo` cannot be read.
pub fn discover() -> Result<HostFacts, String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| format!("cannot read /proc/meminfo: {e}"))?;
    let (mem_total, mem_available) = parse_meminfo(&meminfo)
        .ok_or("/proc/meminfo has no MemTotal or MemAvailable".to_string())?;
    let allowed = allowed_cpus();
    Ok(HostFacts {
        mem_total,
        mem_available,
        nodes: nodes_of(
            listed_nodes(Path::new("/sys/devices/system/node")),
            &allowed,
        ),
    })
}

/// `MemTotal − MemAvailable` now, bytes; `None` when it cannot be read.
pub fn memory_used() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text).map(|(total, available)| total.saturating_sub(available))
}

/// The NUMA nodes `dir` lists (`node<N>/cpulist`); empty when it lists none.
fn listed_nodes(dir: &Path) -> Vec<NodeCpus> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut nodes = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(node) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cpus = std::fs::read_to_string(entry.path().join("cpulist"))
            .ok()
            .and_then(|t| parse_cpulist(&t).ok())
            .unwrap_or_default();
        nodes.push(NodeCpus { node, cpus });
    }
    nodes
}

/// The CPUs gpud may run on (`Cpus_allowed_list` of /proc/self/status: its affinity mask);
/// all online CPUs when it cannot be read.
fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let listed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|l| parse_cpulist(l).ok());
    match listed {
        Some(cpus) if !cpus.is_empty() => cpus,
        _ => {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n as u32).collect()
        }
    }
}

/// The resident bytes of process `pid` (`VmRSS`), 0 when it cannot be read.
pub fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |kib| kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Headroom;

    const GIB: u64 = 1 << 30;

    #[test]
    fn meminfo_gives_total_and_available_in_bytes() {
        let text = "MemTotal:       131072000 kB\nMemFree:  1 kB\nMemAvailable:   65536000 kB\n";
        assert_eq!(
            parse_meminfo(text),
            Some((131_072_000 * 1024, 65_536_000 * 1024))
        );
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: x kB\nMemAvailable: 1 kB\n"), None);
    }

    #[test]
    fn cpu_lists_are_ranges_and_single_cpus() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Ok(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist(""), Ok(vec![]));
        assert_eq!(parse_cpulist("3,1-2,2"), Ok(vec![1, 2, 3]));
        assert!(parse_cpulist("4-2").is_err());
        assert!(parse_cpulist("a").is_err());
    }

    #[test]
    fn nodes_keep_only_allowed_cpus_and_a_host_without_nodes_is_one_node() {
        let listed = vec![
            NodeCpus {
                node: 1,
                cpus: vec![4, 5, 6, 7],
            },
            NodeCpus {
                node: 0,
                cpus: vec![0, 1, 2, 3],
            },
        ];
        let nodes = nodes_of(listed, &[1, 2, 5]);
        assert_eq!(
            nodes,
            vec![
                NodeCpus {
                    node: 0,
                    cpus: vec![1, 2]
                },
                NodeCpus {
                    node: 1,
                    cpus: vec![5]
                }
            ]
        );
        assert_eq!(
            nodes_of(Vec::new(), &[0, 1]),
            vec![NodeCpus {
                node: 0,
                cpus: vec![0, 1]
            }]
        );
    }

    #[test]
    fn the_layout_applies_the_config_and_pinned_defaults_to_half_the_capacity() {
        let facts = HostFacts {
            mem_total: 128 * GIB,
            mem_available: 100 * GIB,
            nodes: vec![
                NodeCpus {
                    node: 0,
                    cpus: vec![0, 1, 2, 3],
                },
                NodeCpus {
                    node: 1,
                    cpus: vec![4],
                },
            ],
        };
        let config = HostConfig {
            memory_headroom: Headroom::Bytes(8 * GIB),
            cpu_headroom: 1,
            ..HostConfig::default()
        };
        let layout = HostLayout::new(&facts, &config);
        assert_eq!(layout.memory_total, 128 * GIB);
        assert_eq!(layout.memory_headroom, 8 * GIB);
        assert_eq!(layout.pinned_total, 60 * GIB);
        // Node 1 keeps none of its one CPU and is left out.
        assert_eq!(
            layout.nodes,
            vec![NodeCpus {
                node: 0,
                cpus: vec![0, 1, 2]
            }]
        );
        let pools = layout.pools();
        assert_eq!(pools.len(), 3);
        assert_eq!(pools[0].kind, PoolKind::HostMemory);
        assert_eq!(pools[0].capacity(), 120 * GIB);
        assert_eq!(pools[1].kind, PoolKind::Pinned);
        assert_eq!((pools[2].kind, pools[2].total_bytes), (PoolKind::Cpus, 3));
        assert_eq!(pools[2].topology.numa_node, Some(0));
        assert_eq!(pools[2].uuid, "numa0");
        let configured = HostConfig {
            memory_bytes: Some(4 * GIB),
            memory_headroom: Headroom::Bytes(0),
            pinned_bytes: Some(16 * GIB),
            ..HostConfig::default()
        };
        let layout = HostLayout::new(&facts, &configured);
        assert_eq!(layout.memory_total, 4 * GIB);
        // Page-locked memory is host memory too: never more than its capacity.
        assert_eq!(layout.pinned_total, 4 * GIB);
    }

    #[test]
    fn unmanaged_memory_is_the_used_memory_less_what_lease_holders_use_within_their_leases() {
        // 10 GiB used; a holder of a 4 GiB lease uses 3 GiB; one of a 2 GiB lease uses 5 GiB
        // (3 GiB beyond it count as unmanaged: the lease does not cover them).
        assert_eq!(
            unmanaged_memory(10 * GIB, &[(3 * GIB, 4 * GIB), (5 * GIB, 2 * GIB)]),
            5 * GIB
        );
        assert_eq!(unmanaged_memory(GIB, &[(4 * GIB, 8 * GIB)]), 0);
        assert_eq!(unmanaged_memory(7, &[]), 7);
    }
}
