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
        // A holder watched after a revocation leaves status once its memory is gone.
        let auditor = &self.host_auditor;
        seen.retain(|f| {
            f.memory_reserved > 0
                || f.pinned_reserved > 0
                || auditor.is_over(f.owner, pools.memory)
                || auditor.is_over(f.owner, pools.pinned)
        });
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use gpud_proto::{
        AcquireArgs, AttachArgs, EnforcedBy, Event, HostArgs, Op, Outcome, Reply, Resource,
        RevokeReason, ServerFrame,
    };

    use super::{HostHolder, HostSample};
    use crate::config::{AuditConfig, Config, Policy};
    use crate::host::{HostLayout, NodeCpus};
    use crate::hub::core::bench::{Bench, GIB, outcome, peer};
    use crate::hub::core::{Action, KillReason, ProcessFacts};

    fn bench(policy: Policy) -> Bench {
        let config = Config {
            audit: AuditConfig {
                policy,
                tolerance_bytes: 0,
                grace: Duration::from_secs(10),
                kill: true,
            },
            ..Config::default()
        };
        let layout = HostLayout {
            memory_total: 8 * GIB,
            memory_headroom: 0,
            pinned_total: 2 * GIB,
            nodes: vec![NodeCpus {
                node: 0,
                cpus: vec![0, 1, 2, 3],
            }],
        };
        let mut b = Bench::with_host(&config, &layout);
        for s in 1..=3 {
            b.open(s, peer(100 + s as u32, 1000)).unwrap();
        }
        b
    }

    fn host(mem_bytes: u64, pinned_bytes: u64, cpus: u32) -> AcquireArgs {
        AcquireArgs {
            host: Some(HostArgs {
                mem_bytes,
                pinned_bytes,
                cpus,
                ..HostArgs::default()
            }),
            ..AcquireArgs::default()
        }
    }

    fn grant(b: &mut Bench, session: u64, args: AcquireArgs) -> u64 {
        b.request(session, 1, Op::Acquire(args));
        match outcome(&b.frames(session), 1) {
            Some(Outcome::Ok(Reply::Granted(info))) => info.lease,
            other => panic!("not granted: {other:?}"),
        }
    }

    fn sample(rss: u64, locked: u64) -> HostSample {
        HostSample {
            owner: 101,
            rss_bytes: rss,
            locked_bytes: locked,
            pids: vec![(101, 1010), (150, 1500)],
        }
    }

    fn over_use_events(frames: &[ServerFrame]) -> Vec<(Resource, u64, u64, Option<u64>)> {
        frames
            .iter()
            .filter_map(|f| match f {
                ServerFrame::Event {
                    event:
                        Event::OverUse {
                            resource,
                            used_bytes,
                            reserved_bytes,
                            revoke_in_ms,
                            ..
                        },
                } => Some((*resource, *used_bytes, *reserved_bytes, *revoke_in_ms)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_holders_of_host_memory_are_measured_with_their_attached_programs() {
        let mut b = bench(Policy::Warn);
        let lease = grant(&mut b, 1, host(GIB, 0, 1));
        // A program attached to the lease is measured with its holder (it may have left the
        // holder's tree since).
        let now = b.now();
        let args = AttachArgs {
            lease,
            pid: 555,
            enforced_by: EnforcedBy::Supervised,
            end_with_session: false,
        };
        let facts = ProcessFacts {
            start: Some(5550),
            uids: Some((1000, 1000)),
            lineage: vec![555, 101],
        };
        b.core.attach(now, 1, 2, args, facts);
        assert!(
            matches!(outcome(&b.frames(1), 2), Some(Outcome::Ok(_))),
            "attached"
        );
        // CPUs alone: its memory is unmanaged, not audited. A GPU lease: not a host holder.
        grant(&mut b, 2, host(0, 0, 1));
        grant(
            &mut b,
            3,
            AcquireArgs {
                vram_bytes: GIB,
                ..AcquireArgs::default()
            },
        );
        assert_eq!(
            b.core.host_holders(),
            vec![HostHolder {
                owner: 101,
                roots: vec![101, 555],
            }]
        );
        // Page-locked memory alone holds host memory too.
        b.open(4, peer(104, 1000)).unwrap();
        grant(&mut b, 4, host(0, GIB, 0));
        let owners: Vec<u32> = b.core.host_holders().iter().map(|h| h.owner).collect();
        assert_eq!(owners, vec![101, 104]);
    }

    #[test]
    fn resident_memory_over_the_host_lease_is_warned_shown_counted_then_revoked_and_killed() {
        let mut b = bench(Policy::Revoke);
        let lease = grant(&mut b, 1, host(GIB, 256 << 20, 2));
        let now = b.now();
        b.core.host_audit(now, &[sample(GIB / 2, 0)]);
        assert!(over_use_events(&b.frames(1)).is_empty(), "within its lease");

        let now = b.now();
        b.core.host_audit(now, &[sample(3 * GIB, 0)]);
        assert_eq!(
            over_use_events(&b.frames(1)),
            vec![(Resource::HostMemory, 3 * GIB, GIB, Some(10_000))]
        );
        let now = b.now();
        let host = b.core.status(now).host.unwrap();
        let row = &host.holders[0];
        assert_eq!((row.pid, row.rss_bytes, row.mem_bytes), (101, 3 * GIB, GIB));
        assert!(row.over_use && !row.pinned_over_use, "{row:?}");
        let text = b.core.metrics(now);
        assert!(
            text.contains(&format!("gpud_host_memory_over_use_bytes {}\n", 2 * GIB)),
            "{text}"
        );
        assert!(
            text.contains("gpud_host_pinned_over_use_bytes 0\n"),
            "{text}"
        );

        // After the grace the lease is revoked, host parts and all.
        b.advance(Duration::from_secs(10));
        let now = b.now();
        b.core.host_audit(now, &[sample(3 * GIB, 0)]);
        let frames = b.frames(1);
        assert!(
            frames.iter().any(|f| matches!(f, ServerFrame::Event {
                event: Event::Revoked { lease: l, reason: RevokeReason::OverUse }
            } if *l == lease)),
            "{frames:?}"
        );
        let now = b.now();
        let status = b.core.status(now);
        assert!(status.leases.is_empty(), "{:?}", status.leases);
        assert_eq!(status.host.as_ref().unwrap().memory.reserved_bytes, 0);
        // Still watched with nothing reserved; a grace later, still holding it: killed.
        assert_eq!(b.core.host_holders().len(), 1);
        b.advance(Duration::from_secs(10));
        let now = b.now();
        b.actions();
        b.core.host_audit(now, &[sample(3 * GIB, 0)]);
        let killed: Vec<u32> = b
            .actions()
            .iter()
            .filter_map(|a| match a {
                Action::Signal {
                    pid,
                    why: KillReason::KeptHostMemory { owner: 101 },
                    ..
                } => Some(*pid),
                _ => None,
            })
            .collect();
        assert_eq!(killed, vec![101, 150]);
        // Gone: resolved, and nobody is measured any more.
        let now = b.now();
        b.core.host_audit(now, &[]);
        assert!(b.core.host_holders().is_empty());
        let now = b.now();
        assert!(b.core.status(now).host.unwrap().holders.is_empty());
    }

    #[test]
    fn locked_memory_over_the_page_locked_lease_is_its_own_over_use() {
        let mut b = bench(Policy::Warn);
        grant(&mut b, 1, host(2 * GIB, 256 << 20, 0));
        let now = b.now();
        b.core.host_audit(now, &[sample(GIB, GIB)]);
        assert_eq!(
            over_use_events(&b.frames(1)),
            vec![(Resource::Pinned, GIB, 256 << 20, None)]
        );
        let now = b.now();
        let host = b.core.status(now).host.unwrap();
        assert!(host.holders[0].pinned_over_use && !host.holders[0].over_use);
        // Back within: resolved, the lease kept (warn policy).
        let now = b.now();
        b.core.host_audit(now, &[sample(GIB, 0)]);
        let now = b.now();
        let status = b.core.status(now);
        assert!(!status.host.unwrap().holders[0].pinned_over_use);
        assert!(!status.leases.is_empty());
    }
}
