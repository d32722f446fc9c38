//! What the device poll says: memory of processes without a lease lowers a device's
//! capacity; memory of lease holders is audited against what they reserved, and the audit's
//! verdicts (the host audit's too, [`super::host_audit`]) are carried out here.

use std::collections::{BTreeMap, HashMap};

use gpud_proto::{Event, LeaseId, Resource};
use tracing::{info, warn};

use super::audit::{Action as Verdict, Footprint};
use super::{Core, KillReason, Now};
use crate::ledger::{RevokeReason, SessionId};

/// One process using memory on a device, with what the shell read about it from /proc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSample {
    /// The process.
    pub pid: u32,
    /// Bytes of device memory it uses.
    pub used_bytes: u64,
    /// The process and its ancestors, nearest first (within 32 generations).
    pub lineage: Vec<u32>,
    /// Its name (`comm`), or `?`.
    pub name: String,
    /// Its start time (clock ticks since boot), 0 when unknown.
    pub start: u64,
}

impl ProcessSample {
    /// The lease holder it belongs to: itself, or its nearest ancestor among `owners`.
    pub(super) fn owner<V>(&self, owners: &BTreeMap<u32, V>) -> Option<u32> {
        self.lineage
            .iter()
            .copied()
            .find(|p| owners.contains_key(p))
    }
}

impl Core {
    /// A device poll: per device (in index order), the processes using memory there. A
    /// process belongs to the lease holder it is, or descends from (as with `gpudctl run`).
    pub fn usage(&mut self, now: Now, usage: Vec<Vec<ProcessSample>>) {
        let mut footprints = Vec::new();
        let mut starts = HashMap::new();
        for (d, procs) in usage.iter().enumerate() {
            let owners = self.owners(d);
            let mut used: BTreeMap<u32, (u64, Vec<u32>)> = BTreeMap::new();
            let mut unmanaged = 0;
            for p in procs {
                starts.insert(p.pid, p.start);
                match p.owner(&owners) {
                    Some(o) => {
                        let e = used.entry(o).or_default();
                        e.0 += p.used_bytes;
                        e.1.push(p.pid);
                    }
                    None => unmanaged += p.used_bytes,
                }
            }
            self.ledger.set_unmanaged(now.at, d, unmanaged);
            for (owner, reserved_bytes) in owners {
                let (used_bytes, pids) = used.remove(&owner).unwrap_or_default();
                footprints.push(Footprint {
                    owner,
                    device: d,
                    used_bytes,
                    reserved_bytes,
                    pids,
                });
            }
        }
        for verdict in self.auditor.review(now.at, &footprints) {
            self.carry_out(now, verdict, &starts);
        }
        self.usage = usage;
        self.footprints = footprints;
        self.end_step(now);
    }

    /// The pids of lease holders on device `d`, with the bytes they reserve there.
    pub(super) fn owners(&self, d: usize) -> BTreeMap<u32, u64> {
        let mut owners: BTreeMap<u32, u64> = BTreeMap::new();
        for l in self.ledger.leases().filter(|l| l.device == d) {
            if let Some(p) = self.sessions.get(&l.session) {
                *owners.entry(p.pid).or_default() += l.vram_bytes;
            }
        }
        // Owners whose leases were revoked for over-use stay watched until the memory goes.
        for (owner, _) in self.auditor.revoked_owners().filter(|(_, dev)| *dev == d) {
            owners.entry(owner).or_default();
        }
        owners
    }

    /// Carries out what the audit decided.
    pub(super) fn carry_out(&mut self, now: Now, verdict: Verdict, starts: &HashMap<u32, u64>) {
        match verdict {
            Verdict::Warn {
                owner,
                device,
                used_bytes,
                reserved_bytes,
                revoke_at,
            } => {
                let resource = self.audited_host_pool(device).unwrap_or_default();
                match resource {
                    Resource::Device => warn!(
                        owner,
                        device,
                        used_bytes,
                        reserved_bytes,
                        "process uses more device memory than it reserved"
                    ),
                    Resource::Pinned => warn!(
                        owner,
                        used_bytes,
                        reserved_bytes,
                        "process locks more memory (VmLck + VmPin) than its page-locked leases reserve"
                    ),
                    Resource::HostMemory | Resource::Cpus => warn!(
                        owner,
                        used_bytes,
                        reserved_bytes,
                        "process keeps more memory resident (VmRSS) than its host leases reserve"
                    ),
                }
                let revoke_in_ms =
                    revoke_at.map(|at| at.saturating_duration_since(now.at).as_millis() as u64);
                for session in self.sessions_of(owner) {
                    let event = Event::OverUse {
                        // Host memory is no device: its over-use names the resource instead.
                        device_index: if resource.is_device() {
                            device as u32
                        } else {
                            0
                        },
                        used_bytes,
                        reserved_bytes,
                        revoke_in_ms,
                        resource,
                    };
                    self.event(session, event);
                }
            }
            Verdict::Revoke { owner, device } => {
                let sessions = self.sessions_of(owner);
                let leases: Vec<LeaseId> = self
                    .ledger
                    .leases()
                    .filter(|l| l.device == device && sessions.contains(&l.session))
                    .map(|l| l.id)
                    .collect();
                for id in leases {
                    warn!(owner, device, lease = id, "revoking a lease for over-use");
                    let _ = self
                        .ledger
                        .revoke_because(now.at, id, RevokeReason::OverUse);
                }
            }
            Verdict::Kill {
                owner,
                device,
                pids,
            } => {
                for pid in pids {
                    let start = starts.get(&pid).copied().unwrap_or(0);
                    let why = match self.audited_host_pool(device) {
                        Some(_) => KillReason::KeptHostMemory { owner },
                        None => KillReason::KeptMemory { owner, device },
                    };
                    self.signal(pid, start, why);
                }
            }
            Verdict::Resolved { owner, device } => match self.audited_host_pool(device) {
                None => info!(
                    owner,
                    device, "device memory use back within the reservation"
                ),
                Some(resource) => info!(
                    owner,
                    resource = super::wire_name(&resource),
                    "host memory use back within the reservation"
                ),
            },
        }
    }

    /// The sessions whose peer is `pid`, in id order.
    fn sessions_of(&self, pid: u32) -> Vec<SessionId> {
        let mut ids: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, p)| p.pid == pid)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }
}
