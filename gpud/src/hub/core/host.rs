//! Host resources in the hub (docs/HOST.md): the request's `host` becomes host parts of a
//! ledger group, the grant names its CPUs, status shows the pools.
//!
//! The ledger counts CPUs; the hub names them. A CPU part's CPUs are assigned when the grant
//! is first described (lowest free numbers of its node first), kept in [`HostBook::cpus`] and
//! journaled with the part, so a re-adopted lease keeps them. A part's CPUs are free again once
//! the ledger no longer has the part: an ended part's entry is ignored before it is forgotten.

use std::collections::{BTreeMap, BTreeSet};

use gpud_proto::{
    ErrorBody, ErrorCode, HostArgs, HostGrant, HostPoolStatus, HostStatus, LeaseId, NumaPlacement,
    NumaStatus, Resource,
};

use super::Core;
use crate::host::{self, HostLayout};
use crate::ledger::{DeviceIdx, Ledger, Part, Placement, PoolKind};

/// The host's pools as the hub knows them.
#[derive(Debug, Clone)]
pub(super) struct HostBook {
    /// The host memory pool's ledger index.
    pub memory: DeviceIdx,
    /// The page-locked memory pool's.
    pub pinned: DeviceIdx,
    /// Each NUMA node's CPU pool, and the CPUs it hands out, by node.
    pub nodes: BTreeMap<u32, (DeviceIdx, Vec<u32>)>,
    /// The CPUs of each CPU part (by its lease id).
    pub cpus: BTreeMap<LeaseId, Vec<u32>>,
    /// Measure unmanaged host memory (off when `[host] memory` sets the capacity).
    pub measure_unmanaged: bool,
    /// Waiting grows of host memory, with the lease id their request named (the answer
    /// names it, not the part's).
    pub resizes: std::collections::HashMap<crate::ledger::Ticket, LeaseId>,
}

impl HostBook {
    /// The book of `layout`'s pools in `ledger` (`None` when the ledger lacks them).
    pub fn new(ledger: &Ledger, layout: &HostLayout, measure_unmanaged: bool) -> Option<Self> {
        let memory = ledger.host_pool(PoolKind::HostMemory, Some(host::MEMORY_POOL))?;
        let pinned = ledger.host_pool(PoolKind::Pinned, Some(host::PINNED_POOL))?;
        let mut nodes = BTreeMap::new();
        for n in &layout.nodes {
            let pool = ledger.host_pool(PoolKind::Cpus, Some(&host::cpu_pool(n.node)))?;
            nodes.insert(n.node, (pool, n.cpus.clone()));
        }
        Some(Self {
            memory,
            pinned,
            nodes,
            cpus: BTreeMap::new(),
            measure_unmanaged,
            resizes: std::collections::HashMap::new(),
        })
    }

    /// The node whose CPU pool is `pool`.
    pub fn node_of(&self, pool: DeviceIdx) -> Option<u32> {
        self.nodes
            .iter()
            .find(|(_, (p, _))| *p == pool)
            .map(|(&n, _)| n)
    }

    /// CPUs of `pool` held by parts the ledger still has.
    fn taken(&self, ledger: &Ledger, pool: DeviceIdx) -> BTreeSet<u32> {
        self.cpus
            .iter()
            .filter(|(id, _)| ledger.lease(**id).is_some_and(|l| l.device == pool))
            .flat_map(|(_, cpus)| cpus.iter().copied())
            .collect()
    }

    /// The lowest `count` free CPUs of `pool` (fewer when fewer are free: the ledger's count
    /// says they are).
    pub fn assign(&self, ledger: &Ledger, pool: DeviceIdx, count: usize) -> Vec<u32> {
        let Some(node) = self.node_of(pool) else {
            return Vec::new();
        };
        let taken = self.taken(ledger, pool);
        self.nodes[&node]
            .1
            .iter()
            .copied()
            .filter(|c| !taken.contains(c))
            .take(count)
            .collect()
    }

    /// Whether journaled CPUs `cpus` of a part on `pool` can be restored: as many as the part
    /// counts, all the node's, none held already.
    pub fn restorable(&self, ledger: &Ledger, pool: DeviceIdx, count: u64, cpus: &[u32]) -> bool {
        let Some(node) = self.node_of(pool) else {
            return false;
        };
        let own = &self.nodes[&node].1;
        let taken = self.taken(ledger, pool);
        let distinct: BTreeSet<u32> = cpus.iter().copied().collect();
        distinct.len() == cpus.len()
            && cpus.len() as u64 == count
            && cpus.iter().all(|c| own.contains(c) && !taken.contains(c))
    }
}

/// What `host` asks, as the ledger's parts, after the checks (`devices`: whether the request
/// has a device part).
pub(super) fn host_parts(
    book: Option<&HostBook>,
    host: &HostArgs,
    devices: bool,
) -> Result<Vec<Part>, ErrorBody> {
    let invalid = |m: String| Err(ErrorBody::new(ErrorCode::InvalidRequest, m));
    let Some(book) = book else {
        return invalid(
            "this gpud does not book host resources ([host] enabled = false in its config); \
             ask without host"
                .into(),
        );
    };
    if host.cpus == 0 && host.numa != NumaPlacement::Any {
        return invalid(format!(
            "host.numa {} places CPUs, and host.cpus is 0",
            host.numa
        ));
    }
    let cpus_at = match host.numa {
        NumaPlacement::Any => Placement::Any,
        NumaPlacement::Near if !devices => {
            return invalid(
                "host.numa near means the NUMA node of the lease's device, and the request has \
                 no device part (ask vram_bytes, compute or parts too, or a node)"
                    .into(),
            );
        }
        NumaPlacement::Near => Placement::Any,
        NumaPlacement::Node(n) => match book.nodes.get(&n) {
            Some((pool, _)) => Placement::Index(*pool as u32),
            None => {
                let known: Vec<String> = book.nodes.keys().map(u32::to_string).collect();
                return Err(ErrorBody::new(
                    ErrorCode::UnknownDevice,
                    format!(
                        "no NUMA node {n} with CPUs gpud hands out (nodes: {})",
                        known.join(", ")
                    ),
                ));
            }
        },
    };
    let mut parts = Vec::new();
    // Page-locked memory is host memory too.
    let memory = host.mem_bytes.max(host.pinned_bytes);
    if memory > 0 {
        parts.push(Part::host(PoolKind::HostMemory, Placement::Any, memory));
    }
    if host.pinned_bytes > 0 {
        parts.push(Part::host(
            PoolKind::Pinned,
            Placement::Any,
            host.pinned_bytes,
        ));
    }
    if host.cpus > 0 {
        let mut part = Part::host(PoolKind::Cpus, cpus_at, u64::from(host.cpus));
        part.same_node = host.numa == NumaPlacement::Near;
        parts.push(part);
    }
    Ok(parts)
}

impl Core {
    /// Books the host's pools (they are in the ledger already, after the GPUs): acquire's
    /// `host` is served from now on. `measure_unmanaged`: whether what unleased processes use
    /// lowers host memory's capacity ([`Core::host_usage`]).
    pub fn set_host(&mut self, layout: &HostLayout, measure_unmanaged: bool) {
        self.host = HostBook::new(&self.ledger, layout, measure_unmanaged);
        if self.host.is_none() {
            tracing::error!("the ledger lacks the host pools; host resources are off");
        }
    }

    /// Whether host resources are booked (the welcome's `host` feature).
    pub fn host_enabled(&self) -> bool {
        self.host.is_some()
    }

    /// Whether what unleased processes use is measured against host memory
    /// ([`Core::host_usage`]): host resources are on and `[host] memory` is not set.
    pub fn measures_host_memory(&self) -> bool {
        self.host.as_ref().is_some_and(|b| b.measure_unmanaged)
    }

    /// The kind of pool of ledger index `d`.
    pub(super) fn pool_kind(&self, d: DeviceIdx) -> PoolKind {
        self.ledger.pool(d).map_or(PoolKind::Gpu, |p| p.spec().kind)
    }

    /// The CPUs of CPU part `id` on `pool`, assigned now if they are not yet.
    pub(super) fn cpus_of(&mut self, id: LeaseId) -> Vec<u32> {
        let Some(lease) = self.ledger.lease(id) else {
            return Vec::new();
        };
        let (pool, count) = (lease.device, lease.vram_bytes as usize);
        let Some(book) = self.host.as_mut() else {
            return Vec::new();
        };
        if let Some(cpus) = book.cpus.get(&id) {
            return cpus.clone();
        }
        let cpus = book.assign(&self.ledger, pool, count);
        if cpus.len() != count {
            tracing::error!(
                lease = id,
                count,
                assigned = cpus.len(),
                "fewer free CPUs than the ledger counts"
            );
        }
        book.cpus.insert(id, cpus.clone());
        cpus
    }

    /// The host resources of lease `id`'s group (`None` when it has none); CPUs are assigned
    /// on first use. This is what the grant's `host` says, and what `gpudctl run --cpus` pins
    /// to.
    pub fn host_grant(&mut self, id: LeaseId) -> Option<HostGrant> {
        let mut grant = HostGrant::default();
        for part in self.ledger.group_of(id) {
            let Some(lease) = self.ledger.lease(part) else {
                continue;
            };
            let (pool, amount) = (lease.device, lease.vram_bytes);
            match self.pool_kind(pool) {
                PoolKind::Gpu => continue,
                PoolKind::HostMemory => grant.mem_bytes = amount,
                PoolKind::Pinned => grant.pinned_bytes = amount,
                PoolKind::Cpus => {
                    grant.cpus = self.cpus_of(part);
                    grant.numa_node = self.host.as_ref().and_then(|b| b.node_of(pool));
                }
            }
            grant.parts.push(part);
        }
        (!grant.parts.is_empty()).then_some(grant)
    }

    /// A host part's row: its `device` name, resource and amount (`None` for a GPU lease).
    pub(super) fn host_row(&self, id: LeaseId) -> Option<(String, Resource, HostGrant)> {
        let lease = self.ledger.lease(id)?;
        let book = self.host.as_ref();
        let amount = lease.vram_bytes;
        match self.pool_kind(lease.device) {
            PoolKind::Gpu => None,
            PoolKind::HostMemory => Some((
                "host".into(),
                Resource::HostMemory,
                HostGrant {
                    mem_bytes: amount,
                    ..HostGrant::default()
                },
            )),
            PoolKind::Pinned => Some((
                "host".into(),
                Resource::Pinned,
                HostGrant {
                    pinned_bytes: amount,
                    ..HostGrant::default()
                },
            )),
            PoolKind::Cpus => {
                let node = book.and_then(|b| b.node_of(lease.device));
                Some((
                    node.map_or_else(|| "numa".into(), |n| format!("numa{n}")),
                    Resource::Cpus,
                    HostGrant {
                        cpus: book
                            .and_then(|b| b.cpus.get(&id).cloned())
                            .unwrap_or_default(),
                        numa_node: node,
                        ..HostGrant::default()
                    },
                ))
            }
        }
    }

    /// What a waiting group asks of the host, as the request said it.
    pub(super) fn waiter_host(&self, w: &crate::ledger::Waiter) -> Option<HostArgs> {
        let mut args = HostArgs::default();
        let mut any = false;
        if let Some(grows) = w.grows {
            // A grow of a host memory part: the extra bytes.
            let pool = self.ledger.lease(grows)?.device;
            if self.pool_kind(pool) != PoolKind::HostMemory {
                return None;
            }
            args.mem_bytes = w.need.vram_bytes;
            return Some(args);
        }
        for p in &w.parts {
            match p.kind {
                PoolKind::Gpu => continue,
                PoolKind::HostMemory => args.mem_bytes = p.need.vram_bytes,
                PoolKind::Pinned => args.pinned_bytes = p.need.vram_bytes,
                PoolKind::Cpus => {
                    args.cpus = p.need.vram_bytes as u32;
                    args.numa = if p.same_node {
                        NumaPlacement::Near
                    } else {
                        match p.placement {
                            Placement::Index(i) => self
                                .host
                                .as_ref()
                                .and_then(|b| b.node_of(i as usize))
                                .map_or(NumaPlacement::Any, NumaPlacement::Node),
                            _ => NumaPlacement::Any,
                        }
                    };
                }
            }
            any = true;
        }
        any.then_some(args)
    }

    /// Status's `host` section.
    pub(super) fn host_status(&self) -> Option<HostStatus> {
        let book = self.host.as_ref()?;
        let pool = |d: DeviceIdx| {
            let p = self.ledger.pool(d)?;
            let spec = p.spec();
            Some(HostPoolStatus {
                total_bytes: spec.total_bytes,
                headroom_bytes: spec.headroom_bytes,
                unmanaged_bytes: spec.unmanaged_bytes,
                capacity_bytes: p.capacity(),
                reserved_bytes: p.reserved(),
                queued: p.queued().into(),
            })
        };
        let numa = book
            .nodes
            .iter()
            .map(|(&node, &(d, ref cpus))| {
                let mut granted: Vec<u32> = book.taken(&self.ledger, d).into_iter().collect();
                granted.sort_unstable();
                NumaStatus {
                    node,
                    cpus: cpus.clone(),
                    granted,
                    queued: self
                        .ledger
                        .pool(d)
                        .map(|p| p.queued().into())
                        .unwrap_or_default(),
                }
            })
            .collect();
        Some(HostStatus {
            memory: pool(book.memory)?,
            pinned: pool(book.pinned)?,
            numa,
            holders: self.host_use_rows(),
        })
    }

    /// A host memory poll: `used` is `MemTotal − MemAvailable`, `resident` each holder's
    /// resident bytes (theirs and their descendants', by holder pid). What is used beyond
    /// what the holders use within their leases lowers host memory's capacity, like VRAM's
    /// unmanaged use.
    pub fn host_usage(&mut self, now: super::Now, used: u64, resident: &[(u32, u64)]) {
        let Some(memory) = self
            .host
            .as_ref()
            .filter(|b| b.measure_unmanaged)
            .map(|b| b.memory)
        else {
            return;
        };
        // The holders of host memory with what their leases reserve there (the device audit
        // never watches a host pool, so no revoked owner joins them).
        let leased = self.owners(memory);
        let holders: Vec<(u64, u64)> = resident
            .iter()
            .filter_map(|(pid, rss)| leased.get(pid).map(|&l| (*rss, l)))
            .collect();
        let unmanaged = host::unmanaged_memory(used, &holders);
        self.ledger.set_unmanaged(now.at, memory, unmanaged);
        self.end_step(now);
    }
}
