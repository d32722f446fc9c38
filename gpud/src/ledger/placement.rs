//! Placement policies: which of the devices that can grant a request at once gets it, and how
//! the parts of a group are assigned to distinct devices.
//!
//! A policy only orders devices that can grant *now*; it never makes a request wait for a
//! better device. docs/PROTOCOL.md ("Placement policies") is the reference for each order.

use std::collections::BTreeMap;

use super::Ledger;
use super::types::{DeviceIdx, Island, Need, Waiter, WaitingPart};
use super::vocab::PlacementPolicy;

/// How many devices the search for a group's assignment may try in all before it reports that
/// the group cannot be placed now (it is tried again on the next scheduling pass). Groups of
/// similar parts are placed on the first try; the bound only guards against pathological mixes
/// of part sizes on large hosts.
const MAX_ASSIGN_STEPS: usize = 4096;

impl Ledger {
    /// The order in which `policy` prefers device `d` for `need` (smaller first), from what is
    /// reserved and held there now.
    pub(super) fn preference(
        &self,
        policy: PlacementPolicy,
        need: &Need,
        d: DeviceIdx,
    ) -> (u64, u64, u64, usize) {
        let dev = &self.devices[d];
        let holders = dev.holders.len() as u64;
        match policy {
            PlacementPolicy::BestFit | PlacementPolicy::Near => {
                (dev.free().saturating_sub(need.vram_bytes), holders, 0, d)
            }
            PlacementPolicy::Spread => (u64::MAX - dev.free(), holders, 0, d),
            PlacementPolicy::Pack => (u64::MAX - dev.reserved, u64::MAX - holders, dev.free(), d),
        }
    }

    /// Among the devices that can grant `waiter` (one device) now, the one its policy prefers.
    pub(super) fn best_grantable(&self, waiter: &Waiter) -> Option<DeviceIdx> {
        let need = waiter.device_need();
        waiter
            .candidates
            .iter()
            .copied()
            .filter(|&d| self.can_grant(waiter, d))
            .min_by_key(|&d| self.preference(waiter.policy, &need, d))
    }

    /// Whether a part of group `waiter` needing `need` can be granted on `d` now.
    fn part_grantable(&self, waiter: &Waiter, need: &Need, d: DeviceIdx) -> bool {
        let dev = &self.devices[d];
        !dev.drained
            && need.vram_bytes <= dev.free()
            && (!need.compute || dev.free_slots(waiter.class) > 0)
            && !self.blocked_by_oldest(waiter, d)
    }

    /// Distinct devices, one per part of group `waiter` (in the parts' order), on which every
    /// part can be granted now, as its policy prefers them; `None` while some part cannot be.
    pub(super) fn group_grantable(&self, waiter: &Waiter) -> Option<Vec<DeviceIdx>> {
        let fits = |part: &WaitingPart, d: DeviceIdx| self.part_grantable(waiter, &part.need, d);
        // The tightest scope that can take every part: least free memory on its island, then
        // first (islands in order, then NUMA nodes).
        let mut best: Option<((u64, usize), Vec<DeviceIdx>)> = None;
        for (i, scope) in self
            .scopes(&waiter.parts, waiter.policy, &waiter.candidates)
            .iter()
            .enumerate()
        {
            let Some(found) = self.assign(&waiter.parts, waiter.policy, |p, d| {
                scope.allows(self, p, d) && fits(p, d)
            }) else {
                continue;
            };
            let free: u64 = match &scope.island {
                Some(island) => island.iter().map(|&d| self.devices[d].free()).sum(),
                None => 0,
            };
            if best.as_ref().is_none_or(|(key, _)| (free, i) < *key) {
                best = Some(((free, i), found));
            }
            if scope.is_everything() {
                break;
            }
        }
        best.map(|(_, found)| found)
    }

    /// Whether `parts` could ever be granted together under `policy`: on distinct devices
    /// large enough for each (and for `near`, on one island; for a part on the GPUs' NUMA
    /// node, on theirs), were the devices empty.
    pub(super) fn group_ever_fits(&self, parts: &[WaitingPart], policy: PlacementPolicy) -> bool {
        let all: Vec<DeviceIdx> = (0..self.devices.len()).collect();
        self.scopes(parts, policy, &all).iter().any(|scope| {
            self.assign(parts, policy, |p, d| {
                scope.allows(self, p, d) && self.devices[d].capacity() >= p.need.vram_bytes
            })
            .is_some()
        })
    }

    /// Where a group may be placed at once: everywhere, or (policy `near`) one NVLink island or
    /// NUMA node of GPUs, and (a host part on the GPUs' node) one NUMA node for them all.
    fn scopes(
        &self,
        parts: &[WaitingPart],
        policy: PlacementPolicy,
        candidates: &[DeviceIdx],
    ) -> Vec<Scope> {
        let gpus: Vec<DeviceIdx> = candidates
            .iter()
            .copied()
            .filter(|&d| self.devices[d].spec.kind.is_gpu())
            .collect();
        let islands: Vec<Option<Vec<DeviceIdx>>> = if policy == PlacementPolicy::Near {
            self.islands(&gpus).into_values().map(Some).collect()
        } else {
            vec![None]
        };
        let nodes: Vec<Option<u32>> = if parts.iter().any(|p| p.same_node) {
            let nodes: std::collections::BTreeSet<u32> = parts
                .iter()
                .filter(|p| p.same_node)
                .flat_map(|p| p.candidates.iter())
                .filter_map(|&d| self.devices[d].spec.topology.numa_node)
                .collect();
            nodes.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let mut scopes = Vec::with_capacity(islands.len() * nodes.len());
        for island in &islands {
            for &node in &nodes {
                scopes.push(Scope {
                    island: island.clone(),
                    node,
                });
            }
        }
        scopes
    }

    /// The GPUs among `candidates` by island; GPUs whose island is unknown (and host pools)
    /// are in none.
    pub(super) fn islands(&self, candidates: &[DeviceIdx]) -> BTreeMap<Island, Vec<DeviceIdx>> {
        let mut islands: BTreeMap<Island, Vec<DeviceIdx>> = BTreeMap::new();
        for &d in candidates {
            if !self.devices[d].spec.kind.is_gpu() {
                continue;
            }
            if let Some(island) = self.devices[d].spec.topology.island() {
                islands.entry(island).or_default().push(d);
            }
        }
        islands
    }

    /// Assigns each part a distinct device among its candidates that `fits` accepts, trying
    /// devices in `policy`'s order. Parts with fewer candidates (named devices) and larger
    /// needs are placed first; a dead end backtracks. The result is in the parts' order.
    fn assign(
        &self,
        parts: &[WaitingPart],
        policy: PlacementPolicy,
        fits: impl Fn(&WaitingPart, DeviceIdx) -> bool,
    ) -> Option<Vec<DeviceIdx>> {
        let options: Vec<Vec<DeviceIdx>> = parts
            .iter()
            .map(|part| {
                let mut devices: Vec<DeviceIdx> = part
                    .candidates
                    .iter()
                    .copied()
                    .filter(|&d| fits(part, d))
                    .collect();
                devices.sort_by_key(|&d| self.preference(policy, &part.need, d));
                devices
            })
            .collect();
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_by_key(|&p| {
            (
                options[p].len(),
                u64::MAX - parts[p].need.vram_bytes,
                !parts[p].need.compute,
                p,
            )
        });
        let mut chosen: Vec<Option<DeviceIdx>> = vec![None; parts.len()];
        let mut steps = 0;
        if place(&order, &options, &mut chosen, &mut steps) {
            chosen.into_iter().collect()
        } else {
            None
        }
    }
}

/// Where a group's parts may go together.
struct Scope {
    /// The GPU parts' island (`None`: any GPUs).
    island: Option<Vec<DeviceIdx>>,
    /// The NUMA node of the GPU parts and of the host parts that must be on it.
    node: Option<u32>,
}

impl Scope {
    /// No restriction.
    fn is_everything(&self) -> bool {
        self.island.is_none() && self.node.is_none()
    }

    /// Whether `part` may go on pool `d` in this scope.
    fn allows(&self, ledger: &Ledger, part: &WaitingPart, d: DeviceIdx) -> bool {
        let on_node = || {
            self.node
                .is_none_or(|n| ledger.devices[d].spec.topology.numa_node == Some(n))
        };
        if part.kind.is_gpu() {
            self.island.as_ref().is_none_or(|i| i.contains(&d)) && on_node()
        } else {
            !part.same_node || on_node()
        }
    }
}

/// Depth-first search: places `order[0]`, then the rest, on devices not yet taken.
fn place(
    order: &[usize],
    options: &[Vec<DeviceIdx>],
    chosen: &mut [Option<DeviceIdx>],
    steps: &mut usize,
) -> bool {
    let Some((&part, rest)) = order.split_first() else {
        return true;
    };
    for &d in &options[part] {
        if chosen.contains(&Some(d)) {
            continue;
        }
        *steps += 1;
        if *steps > MAX_ASSIGN_STEPS {
            return false;
        }
        chosen[part] = Some(d);
        if place(rest, options, chosen, steps) {
            return true;
        }
        chosen[part] = None;
    }
    false
}
