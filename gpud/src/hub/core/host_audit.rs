//! The host audit: what holders of host memory keep resident and locked (/proc) against what
//! their host leases reserve. The shell asks [`Core::host_holders`] whom to measure, reads
//! /proc, and hands the sums to [`Core::host_audit`]; the host [`super::audit::Auditor`]
//! decides, and its verdicts are carried out as the device audit's are (log, `over_use`
//! event, status, metrics; revoke and kill under the `revoke` policy).

use std::collections::{BTreeMap, HashMap};

use gpud_proto::{HostUseStatus, Resource};

use super::audit::{Footprint, HostFootprint, HostPools, over_use_bytes};
use super::{Core, Now};
use crate::ledger::DeviceIdx;
use crate::metrics::HostOverUse;

/// A holder of host memory to measure: its pid, and where its processes start (it, and the
/// programs attached to its leases); their descendants count too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostHolder {
    /// The holder (its sessions' peer).
    pub owner: u32,
    /// The processes whose trees are its: the owner first.
    pub roots: Vec<u32>,
}

/// What the shell read of a holder's processes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostSample {
    /// The holder.
    pub owner: u32,
    /// Resident bytes (`VmRSS`) of its processes, summed.
    pub rss_bytes: u64,
    /// Locked bytes (`VmLck` + `VmPin`), summed.
    pub locked_bytes: u64,
    /// Its processes, with their start times (0 when unknown), for the kill verdict.
    pub pids: Vec<(u32, u64)>,
}

impl Core {
    /// The ledger's host memory and page-locked pools, when host resources are booked.
    pub(super) fn host_pools(&self) -> Option<HostPools> {
        self.host.as_ref().map(|b| HostPools {
            memory: b.memory,
            pinned: b.pinned,
        })
    }

    /// Whether ledger index `d` is a host pool the audit covers, and which.
    pub(super) fn audited_host_pool(&self, d: DeviceIdx) -> Option<Resource> {
        let pools = self.host_pools()?;
        if d == pools.memory {
            Some(Resource::HostMemory)
        } else if d == pools.pinned {
            Some(Resource::Pinned)
        } else {
            None
        }
    }

    /// The holders of host memory (a lease of page-locked memory holds host memory too), with
    /// the bytes they reserve: (host memory, page-locked). Holders whose leases the host audit
    /// revoked stay, with nothing reserved, until their memory goes.
    fn host_reservations(&self) -> BTreeMap<u32, (u64, u64)> {
        let Some(pools) = self.host_pools() else {
            return BTreeMap::new();
        };
        let mut owners: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for l in self.ledger.leases() {
            let Some(p) = self.sessions.get(&l.session) else {
                continue;
            };
            if l.device == pools.memory {
                owners.entry(p.pid).or_default().0 += l.vram_bytes;
            } else if l.device == pools.pinned {
                owners.entry(p.pid).or_default().1 += l.vram_bytes;
            }
        }
        for (owner, _) in self.host_auditor.revoked_owners() {
            owners.entry(owner).or_default();
        }
        owners
    }

    /// Whom the host audit measures: every holder of host memory, with the programs attached
    /// to its leases (`gpudctl run`'s program descends from it anyway; an attached program
    /// need not). Empty when host resources are not booked.
    pub fn host_holders(&self) -> Vec<HostHolder> {
        self.host_reservations()
            .into_keys()
            .filter(|&owner| owner != 0)
            .map(|owner| {
                let mut roots = vec![owner];
                for l in self.ledger.leases() {
                    let is_owners = self
                        .sessions
                        .get(&l.session)
                        .is_some_and(|p| p.pid == owner);
                    if let Some(a) = self.supervision.of(l.id).filter(|_| is_owners) {
                        if !roots.contains(&a.pid) {
                            roots.push(a.pid);
                        }
                    }
                }
                HostHolder { owner, roots }
            })
            .collect()
    }

    /// A host audit poll: each holder's measured use (a holder left out measured nothing).
    pub fn host_audit(&mut self, now: Now, samples: &[HostSample]) {
        let Some(pools) = self.host_pools() else {
            return;
        };
        let measured: HashMap<u32, &HostSample> = samples.iter().map(|s| (s.owner, s)).collect();
        let mut starts: HashMap<u32, u64> = HashMap::new();
        let mut seen = Vec::new();
        let mut footprints: Vec<Footprint> = Vec::new();
        for (owner, (memory, pinned)) in self.host_reservations() {
            let sample = measured.get(&owner);
            let pids: Vec<u32> = sample.map_or_else(Vec::new, |s| {
                s.pids
                    .iter()
                    .map(|&(pid, start)| {
                        starts.insert(pid, start);
                        pid
                    })
                    .collect()
            });
            let footprint = HostFootprint {
                owner,
                rss_bytes: sample.map_or(0, |s| s.rss_bytes),
                locked_bytes: sample.map_or(0, |s| s.locked_bytes),
                memory_reserved: memory,
                pinned_reserved: pinned,
                pids,
            };
            footprints.extend(footprint.per_pool(pools));
            seen.push(footprint);
        }
        for verdict in self.host_auditor.review(now.at, &footprints) {
            self.carry_out(now, verdict, &starts);
        }
        self.host_seen = seen;
        self.host_footprints = footprints;
        self.end_step(now);
    }

    /// Status's rows of what host-memory holders use (the last audit's).
    pub(super) fn host_use_rows(&self) -> Vec<HostUseStatus> {
        let Some(pools) = self.host_pools() else {
            return Vec::new();
        };
        self.host_seen
            .iter()
            .map(|f| {
                let process = self
                    .sessions
                    .values()
                    .find(|p| p.pid == f.owner)
                    .map_or_else(|| "?".into(), |p| p.process.clone());
                HostUseStatus {
                    pid: f.owner,
                    process,
                    rss_bytes: f.rss_bytes,
                    locked_bytes: f.locked_bytes,
                    mem_bytes: f.memory_reserved.max(f.pinned_reserved),
                    pinned_bytes: f.pinned_reserved,
                    over_use: self.host_auditor.is_over(f.owner, pools.memory),
                    pinned_over_use: self.host_auditor.is_over(f.owner, pools.pinned),
                }
            })
            .collect()
    }

    /// The host audit's over-use, for the metrics.
    pub(super) fn host_over_use(&self) -> HostOverUse {
        let Some(pools) = self.host_pools() else {
            return HostOverUse::default();
        };
        HostOverUse {
            memory_bytes: over_use_bytes(&self.host_auditor, &self.host_footprints, pools.memory),
            pinned_bytes: over_use_bytes(&self.host_auditor, &self.host_footprints, pools.pinned),
        }
    }
}
