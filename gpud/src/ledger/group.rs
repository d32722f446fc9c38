//! Groups: one request for several devices, granted on all of them at once or not at all.
//!
//! A group waits as one waiter queued on every device one of its parts may use; it is granted
//! only when every part fits at once on distinct devices (no part is reserved while another
//! waits, so nothing is held while waiting for the rest). Granted, it is N ordinary leases,
//! one per part, in the parts' order, whose `group` is the first one's id: status, resize,
//! journal and metrics see each part as a lease. The parts end together: releasing or revoking
//! any of them, or the holder's disconnect, ends them all.
//!
//! Fairness is the single-device rule's: the group is overtaken on each of its devices while
//! it is the oldest waiter there, and once overtaken `max_overtakes` times it pins every such
//! device, so the oldest waiter anywhere (single or group) is never blocked by a pin and
//! is granted once enough is released.

use std::collections::BTreeSet;
use std::time::Instant;

use super::Ledger;
use super::types::{
    AcquireSpec, Decision, DeviceIdx, Lease, LedgerError, Need, Part, Ticket, Waiter, WaitingPart,
};
use super::vocab::{LeaseId, Placement, PlacementPolicy, SessionId};

impl Ledger {
    /// Asks for the parts of `spec` on distinct devices (`spec.parts` has at least two).
    pub(super) fn acquire_group(
        &mut self,
        now: Instant,
        ticket: Ticket,
        spec: AcquireSpec,
    ) -> Result<Option<LeaseId>, LedgerError> {
        let parts = self.group_parts(&spec)?;
        let waiter = Waiter {
            ticket,
            seq: self.take_seq(),
            class: spec.class,
            need: Need {
                vram_bytes: parts.iter().map(|p| p.need.vram_bytes).max().unwrap_or(0),
                compute: parts.iter().any(|p| p.need.compute),
            },
            grows: None,
            placement: Placement::Any,
            candidates: parts
                .iter()
                .flat_map(|p| p.candidates.iter().copied())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            arrived: now,
            deadline: spec.timeout.and_then(|t| now.checked_add(t)),
            overtaken: 0,
            label: spec.label,
            within: None,
            budget: None,
            evictable: false,
            policy: spec.policy,
            parts,
        };
        if let Some(devices) = self.group_grantable(&waiter) {
            return Ok(Some(self.grant_group(now, waiter, &devices, false)));
        }
        self.enqueue(waiter);
        Ok(None)
    }

    /// The parts of a group request as they wait, or why the request is refused.
    fn group_parts(&self, spec: &AcquireSpec) -> Result<Vec<WaitingPart>, LedgerError> {
        if spec.within.is_some() || spec.budget.is_some() {
            return Err(LedgerError::Invalid(
                "a lease of several devices is neither a budget nor inside one",
            ));
        }
        if spec.evictable {
            return Err(LedgerError::Invalid(
                "an evictable lease is on one device: ask for each part on its own",
            ));
        }
        if spec.vram_bytes != 0 || spec.compute || spec.placement != Placement::Any {
            return Err(LedgerError::Invalid(
                "a request of several parts says what each part needs, not the request",
            ));
        }
        if spec.parts.len() > self.devices.len() {
            return Err(LedgerError::Invalid(
                "more parts than devices: every part needs a device of its own",
            ));
        }
        let gpu_parts = spec.parts.iter().filter(|p| p.kind.is_gpu()).count();
        if spec.policy == PlacementPolicy::Near
            && gpu_parts > 1
            && self
                .islands(&(0..self.devices.len()).collect::<Vec<_>>())
                .is_empty()
        {
            return Err(LedgerError::Invalid(
                "placement near needs the devices' NVLink islands or NUMA nodes, and none is known",
            ));
        }
        if gpu_parts == 0 && spec.parts.iter().any(|p| p.same_node) {
            return Err(LedgerError::Invalid(
                "a host part near the lease's devices needs a device part",
            ));
        }
        let mut named = BTreeSet::new();
        let mut parts = Vec::with_capacity(spec.parts.len());
        for part in &spec.parts {
            parts.push(self.waiting_part(part, &mut named)?);
        }
        if !self.group_ever_fits(&parts, spec.policy) {
            return Err(LedgerError::Invalid(if parts.iter().any(|p| p.same_node) {
                "no NUMA node has both the lease's devices and the host resources asked \
                     near them, even with all free"
            } else if spec.policy == PlacementPolicy::Near {
                "no NVLink island or NUMA node has a device for every part, even with all free"
            } else {
                "the parts cannot be placed on distinct devices, even with all free"
            }));
        }
        Ok(parts)
    }

    /// One part as it waits: the devices it may use (`named` collects those named explicitly,
    /// which two parts cannot share).
    fn waiting_part(
        &self,
        part: &Part,
        named: &mut BTreeSet<DeviceIdx>,
    ) -> Result<WaitingPart, LedgerError> {
        if part.vram_bytes == 0 && !part.compute {
            return Err(LedgerError::Invalid(
                "every part must reserve memory, a compute slot, or both",
            ));
        }
        if !part.kind.is_gpu() && part.compute {
            return Err(LedgerError::Invalid(
                "only a device part takes a compute slot",
            ));
        }
        if part.kind.is_gpu() && part.same_node {
            return Err(LedgerError::Invalid(
                "a device part goes by the placement policy, not by NUMA node",
            ));
        }
        let candidates = self.resolve_kind(part.kind, &part.placement)?;
        if part.placement != Placement::Any && !named.insert(candidates[0]) {
            return Err(LedgerError::Invalid("two parts name the same device"));
        }
        let fitting: Vec<DeviceIdx> = candidates
            .iter()
            .copied()
            .filter(|&d| self.devices[d].capacity() >= part.vram_bytes)
            .collect();
        if fitting.is_empty() && !part.kind.is_gpu() {
            let largest = candidates
                .iter()
                .copied()
                .max_by_key(|&d| (self.devices[d].capacity(), std::cmp::Reverse(d)));
            let (pool, capacity) = largest.map_or((String::new(), 0), |d| {
                (
                    self.devices[d].spec.uuid.clone(),
                    self.devices[d].capacity(),
                )
            });
            return Err(LedgerError::HostNeverFits {
                kind: part.kind,
                pool,
                need: part.vram_bytes,
                capacity,
            });
        }
        if fitting.is_empty() {
            return Err(LedgerError::NeverFits {
                need: part.vram_bytes,
                capacity: candidates
                    .iter()
                    .map(|&d| self.devices[d].capacity())
                    .max()
                    .unwrap_or(0),
            });
        }
        Ok(WaitingPart {
            kind: part.kind,
            same_node: part.same_node,
            placement: part.placement.clone(),
            need: Need {
                vram_bytes: part.vram_bytes,
                compute: part.compute,
            },
            candidates: fitting,
        })
    }

    /// Grants group `waiter` (no longer queued): part `i` on `devices[i]`. Returns the group's
    /// id, its first lease's.
    pub(super) fn grant_group(
        &mut self,
        now: Instant,
        waiter: Waiter,
        devices: &[DeviceIdx],
        deferred: bool,
    ) -> LeaseId {
        let mut ids = Vec::with_capacity(devices.len());
        for (part, &d) in waiter.parts.iter().zip(devices) {
            let single = Waiter {
                need: part.need,
                placement: Placement::Index(d as u32),
                candidates: vec![d],
                parts: Vec::new(),
                ..waiter.clone()
            };
            ids.push(self.grant(now, single, d, false));
        }
        let group = ids[0];
        for id in &ids {
            if let Some(lease) = self.leases.get_mut(id) {
                lease.group = Some(group);
            }
        }
        self.groups.insert(group, ids);
        if deferred {
            self.decisions.push_back(Decision::Granted {
                ticket: waiter.ticket,
                lease: group,
            });
        }
        group
    }

    /// Ends lease `id` and, when it is part of a group, every other part: what a release, a
    /// revocation or a disconnect frees. The ended leases, in the group's order.
    pub(super) fn end_with_group(&mut self, id: LeaseId) -> Vec<Lease> {
        let ids = self
            .leases
            .get(&id)
            .and_then(|l| l.group)
            .and_then(|g| self.groups.remove(&g))
            .unwrap_or_else(|| vec![id]);
        let mut ended = Vec::with_capacity(ids.len());
        for i in ids {
            if self.leases.contains_key(&i) {
                ended.push(self.end_lease(i));
            }
        }
        ended
    }

    /// Forgets a part that ends (its group's other parts end with it, see
    /// [`Ledger::end_with_group`]).
    pub(super) fn leave_group(&mut self, lease: &Lease) {
        if let Some(g) = lease.group {
            if let Some(parts) = self.groups.get_mut(&g) {
                parts.retain(|&p| p != lease.id);
                if parts.is_empty() {
                    self.groups.remove(&g);
                }
            }
        }
    }

    /// Records a restored part of group `group`: the group's parts stay in id order (the
    /// order they were granted in).
    pub(super) fn restore_part(
        &mut self,
        group: LeaseId,
        id: LeaseId,
        device: DeviceIdx,
    ) -> Result<(), LedgerError> {
        let parts = self.groups.entry(group).or_default();
        if parts
            .iter()
            .any(|p| self.leases.get(p).is_some_and(|l| l.device == device))
        {
            return Err(LedgerError::Invalid(
                "two restored parts of a group are on one device",
            ));
        }
        parts.push(id);
        parts.sort_unstable();
        Ok(())
    }

    /// The leases of lease `id`'s group in the parts' order (just `id` for a single lease);
    /// empty when there is no such lease.
    pub fn group_of(&self, id: LeaseId) -> Vec<LeaseId> {
        match self.leases.get(&id) {
            None => Vec::new(),
            Some(l) => l
                .group
                .and_then(|g| self.groups.get(&g).cloned())
                .unwrap_or_else(|| vec![id]),
        }
    }

    /// Moves lease `id` and the rest of its group to session `to`.
    pub(super) fn transfer_group(&mut self, id: LeaseId, to: SessionId) -> Result<(), LedgerError> {
        let parts = self.group_of(id);
        if parts.is_empty() {
            return Err(LedgerError::UnknownLease(id));
        }
        if let Some(&busy) = parts
            .iter()
            .find(|p| self.leases.get(p).is_some_and(|l| l.pending_grow.is_some()))
        {
            return Err(LedgerError::ResizePending(busy));
        }
        for p in parts {
            self.transfer_one(p, to);
        }
        Ok(())
    }

    /// Groups agree with their leases: every part exists and names its group, parts are on
    /// distinct devices and held by one session, and every lease of a group is listed in it.
    pub(super) fn check_groups(&self) -> Result<(), String> {
        for (&g, parts) in &self.groups {
            if parts.first() != Some(&g) {
                return Err(format!("group {g} does not start with its own lease"));
            }
            let mut devices = BTreeSet::new();
            let mut sessions = BTreeSet::new();
            for p in parts {
                let Some(l) = self.leases.get(p) else {
                    return Err(format!("group {g}: part {p} is gone"));
                };
                if l.group != Some(g) || !devices.insert(l.device) {
                    return Err(format!(
                        "group {g}: part {p} misfiled or on a shared device"
                    ));
                }
                sessions.insert(l.session);
            }
            if sessions.len() != 1 {
                return Err(format!("group {g} is held by several sessions"));
            }
        }
        for l in self.leases.values() {
            if let Some(g) = l.group {
                if !self.groups.get(&g).is_some_and(|p| p.contains(&l.id)) {
                    return Err(format!("lease {} is not in its group {g}", l.id));
                }
            }
        }
        for w in self.waiters.values().filter(|w| !w.parts.is_empty()) {
            if self.critical.contains(&w.seq) || w.within.is_some() || w.evictable {
                return Err(format!("group waiter {} is filed as a single one", w.seq));
            }
        }
        Ok(())
    }
}
