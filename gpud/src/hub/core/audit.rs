//! The memory audit: what processes really use on each device (NVML) against what their
//! owners reserved.
//!
//! Pure logic: the hub core hands it each poll's footprints and the time, and carries out the
//! actions it returns. An owner is a process holding leases (the peer of its sessions); its footprint
//! on a device is the memory used there by it and its descendants (a prover's helpers, the
//! program under `gpudctl run`). An owner over its reservation (beyond the tolerance) is
//! warned at once; under the `revoke` policy its leases on that device are revoked after the
//! grace period, and with `kill` set its processes are killed after one more grace period if
//! they still hold the memory.
//!
//! Host memory is audited the same way, by a second [`Auditor`] over the host pools: an
//! owner's footprint there is what /proc says its processes keep resident (`VmRSS`) against
//! its host memory, and what they keep locked (`VmLck` + `VmPin`) against its page-locked
//! memory ([`HostFootprint::per_pool`]).

use std::collections::HashMap;
use std::time::Instant;

use crate::config::{AuditConfig, Policy};
use crate::ledger::DeviceIdx;

/// One owner's use of one device, as measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footprint {
    /// The owner's pid.
    pub owner: u32,
    /// The device.
    pub device: DeviceIdx,
    /// Bytes its processes use there.
    pub used_bytes: u64,
    /// Bytes its leases reserve there.
    pub reserved_bytes: u64,
    /// The processes using memory there (the owner and its descendants).
    pub pids: Vec<u32>,
}

impl Footprint {
    fn over(&self, tolerance: u64) -> bool {
        self.used_bytes > self.reserved_bytes.saturating_add(tolerance)
    }
}

/// One host-lease holder's use of host memory, as measured, and what its leases reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFootprint {
    /// The owner's pid.
    pub owner: u32,
    /// Resident bytes of its processes (`VmRSS`, summed).
    pub rss_bytes: u64,
    /// Locked bytes of its processes (`VmLck` + `VmPin`, summed).
    pub locked_bytes: u64,
    /// Host memory its leases reserve (page-locked reservations included).
    pub memory_reserved: u64,
    /// Page-locked memory its leases reserve.
    pub pinned_reserved: u64,
    /// Its processes (the owner, its descendants, attached programs).
    pub pids: Vec<u32>,
}

/// The ledger's host pools that host footprints are audited against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPools {
    /// Host memory.
    pub memory: DeviceIdx,
    /// Page-locked memory.
    pub pinned: DeviceIdx,
}

impl HostFootprint {
    /// As footprints of the host memory and page-locked pools, for the host [`Auditor`]: the
    /// same policy then warns, revokes and kills as for device memory.
    pub fn per_pool(&self, pools: HostPools) -> [Footprint; 2] {
        [
            Footprint {
                owner: self.owner,
                device: pools.memory,
                used_bytes: self.rss_bytes,
                // Page-locked memory is host memory too: at least that much is reserved.
                reserved_bytes: self.memory_reserved.max(self.pinned_reserved),
                pids: self.pids.clone(),
            },
            Footprint {
                owner: self.owner,
                device: pools.pinned,
                used_bytes: self.locked_bytes,
                reserved_bytes: self.pinned_reserved,
                pids: self.pids.clone(),
            },
        ]
    }
}

/// Bytes used beyond the reservation by the footprints the auditor holds over, per pool.
pub fn over_use_bytes(auditor: &Auditor, footprints: &[Footprint], pool: DeviceIdx) -> u64 {
    footprints
        .iter()
        .filter(|f| f.device == pool && auditor.is_over(f.owner, pool))
        .map(|f| f.used_bytes.saturating_sub(f.reserved_bytes))
        .sum()
}

/// What the hub must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// An owner started using more than it reserved: tell it and the operator.
    Warn {
        /// The owner.
        owner: u32,
        /// The device.
        device: DeviceIdx,
        /// Bytes used.
        used_bytes: u64,
        /// Bytes reserved.
        reserved_bytes: u64,
        /// When its leases will be revoked, under the revoke policy.
        revoke_at: Option<Instant>,
    },
    /// Revoke the owner's leases on the device.
    Revoke {
        /// The owner.
        owner: u32,
        /// The device.
        device: DeviceIdx,
    },
    /// Kill these processes (they kept the memory after their leases were revoked).
    Kill {
        /// The owner.
        owner: u32,
        /// The device.
        device: DeviceIdx,
        /// The processes.
        pids: Vec<u32>,
    },
    /// An owner is back within its reservation.
    Resolved {
        /// The owner.
        owner: u32,
        /// The device.
        device: DeviceIdx,
    },
}

#[derive(Debug, Clone, Copy)]
struct OverUse {
    since: Instant,
    revoked_at: Option<Instant>,
    killed: bool,
}

/// Tracks over-use across polls.
#[derive(Debug, Default)]
pub struct Auditor {
    config: AuditConfig,
    over: HashMap<(u32, DeviceIdx), OverUse>,
}

impl Auditor {
    /// An auditor with `config`.
    pub fn new(config: AuditConfig) -> Self {
        Self {
            config,
            over: HashMap::new(),
        }
    }

    /// New settings; ongoing over-use keeps its history.
    pub fn set_config(&mut self, config: AuditConfig) {
        self.config = config;
    }

    /// Whether the owner is over its reservation on the device right now.
    pub fn is_over(&self, owner: u32, device: DeviceIdx) -> bool {
        self.over.contains_key(&(owner, device))
    }

    /// Reviews one poll's footprints (every owner holding leases, with or without usage, and
    /// owners whose leases were revoked for over-use but still use memory).
    pub fn review(&mut self, now: Instant, footprints: &[Footprint]) -> Vec<Action> {
        let c = self.config;
        let mut actions = Vec::new();
        let mut seen = Vec::new();
        for f in footprints {
            let key = (f.owner, f.device);
            let over = match self.over.get(&key) {
                // After a revocation the reservation is gone: any use counts.
                Some(o) if o.revoked_at.is_some() => f.used_bytes > 0,
                _ => f.over(c.tolerance_bytes),
            };
            if !over {
                continue;
            }
            seen.push(key);
            let entry = self.over.entry(key).or_insert_with(|| {
                actions.push(Action::Warn {
                    owner: f.owner,
                    device: f.device,
                    used_bytes: f.used_bytes,
                    reserved_bytes: f.reserved_bytes,
                    revoke_at: (c.policy == Policy::Revoke).then(|| now + c.grace),
                });
                OverUse {
                    since: now,
                    revoked_at: None,
                    killed: false,
                }
            });
            if c.policy != Policy::Revoke {
                continue;
            }
            match entry.revoked_at {
                None if now >= entry.since + c.grace => {
                    entry.revoked_at = Some(now);
                    actions.push(Action::Revoke {
                        owner: f.owner,
                        device: f.device,
                    });
                }
                Some(at) if c.kill && !entry.killed && now >= at + c.grace => {
                    entry.killed = true;
                    actions.push(Action::Kill {
                        owner: f.owner,
                        device: f.device,
                        pids: f.pids.clone(),
                    });
                }
                _ => {}
            }
        }
        self.over.retain(|key, _| {
            let keep = seen.contains(key);
            if !keep {
                actions.push(Action::Resolved {
                    owner: key.0,
                    device: key.1,
                });
            }
            keep
        });
        actions
    }

    /// Owners whose leases were revoked for over-use and are still watched (to kill them, or
    /// to see the memory go).
    pub fn revoked_owners(&self) -> impl Iterator<Item = (u32, DeviceIdx)> + '_ {
        self.over
            .iter()
            .filter(|(_, o)| o.revoked_at.is_some())
            .map(|(k, _)| *k)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn fp(used: u64, reserved: u64) -> Footprint {
        Footprint {
            owner: 42,
            device: 0,
            used_bytes: used * MIB,
            reserved_bytes: reserved * MIB,
            pids: vec![42, 43],
        }
    }

    #[test]
    fn within_tolerance_is_not_over_use() {
        let mut a = Auditor::new(AuditConfig::default());
        assert!(a.review(Instant::now(), &[fp(1200, 1000)]).is_empty());
        assert!(!a.is_over(42, 0));
    }

    #[test]
    fn warn_policy_warns_once_and_resolves() {
        let t = Instant::now();
        let mut a = Auditor::new(AuditConfig::default());
        let first = a.review(t, &[fp(2000, 1000)]);
        assert!(matches!(
            first.as_slice(),
            [Action::Warn {
                revoke_at: None,
                ..
            }]
        ));
        assert!(a.is_over(42, 0));
        assert!(
            a.review(t + Duration::from_secs(600), &[fp(2000, 1000)])
                .is_empty(),
            "no repeat, no revoke"
        );
        let back = a.review(t + Duration::from_secs(601), &[fp(900, 1000)]);
        assert_eq!(
            back,
            vec![Action::Resolved {
                owner: 42,
                device: 0
            }]
        );
        assert!(!a.is_over(42, 0));
    }

    #[test]
    fn revoke_policy_revokes_after_grace_then_kills() {
        let t = Instant::now();
        let config = AuditConfig {
            policy: Policy::Revoke,
            grace: Duration::from_secs(10),
            kill: true,
            ..AuditConfig::default()
        };
        let mut a = Auditor::new(config);
        let w = a.review(t, &[fp(3000, 1000)]);
        assert!(
            matches!(w.as_slice(), [Action::Warn { revoke_at: Some(at), .. }] if *at == t + Duration::from_secs(10))
        );
        assert!(
            a.review(t + Duration::from_secs(9), &[fp(3000, 1000)])
                .is_empty()
        );
        let r = a.review(t + Duration::from_secs(10), &[fp(3000, 1000)]);
        assert_eq!(
            r,
            vec![Action::Revoke {
                owner: 42,
                device: 0
            }]
        );
        // Revoked: the reservation is 0 now, and any memory still held counts.
        assert!(
            a.review(t + Duration::from_secs(15), &[fp(100, 0)])
                .is_empty()
        );
        let k = a.review(t + Duration::from_secs(20), &[fp(100, 0)]);
        assert_eq!(
            k,
            vec![Action::Kill {
                owner: 42,
                device: 0,
                pids: vec![42, 43]
            }]
        );
        assert!(
            a.review(t + Duration::from_secs(30), &[fp(100, 0)])
                .is_empty(),
            "killed once"
        );
        assert_eq!(
            a.review(t + Duration::from_secs(31), &[fp(0, 0)]),
            vec![Action::Resolved {
                owner: 42,
                device: 0
            }]
        );
    }

    const POOLS: HostPools = HostPools {
        memory: 4,
        pinned: 5,
    };

    fn host(rss: u64, locked: u64, memory: u64, pinned: u64) -> HostFootprint {
        HostFootprint {
            owner: 42,
            rss_bytes: rss * MIB,
            locked_bytes: locked * MIB,
            memory_reserved: memory * MIB,
            pinned_reserved: pinned * MIB,
            pids: vec![42, 43],
        }
    }

    #[test]
    fn host_use_is_compared_with_each_host_reservation() {
        let [memory, pinned] = host(3000, 10, 1000, 0).per_pool(POOLS);
        assert_eq!(
            (memory.device, memory.used_bytes, memory.reserved_bytes),
            (4, 3000 * MIB, 1000 * MIB)
        );
        assert_eq!((pinned.device, pinned.used_bytes), (5, 10 * MIB));
        // Pinned bytes count as host memory: 2 GiB pinned and no memory reserves 2 GiB there.
        let [memory, _] = host(1500, 0, 0, 2048).per_pool(POOLS);
        assert_eq!(memory.reserved_bytes, 2048 * MIB);
        let mut a = Auditor::new(AuditConfig::default());
        let t = Instant::now();
        // Within tolerance on both: nothing.
        let fine = host(1200, 200, 1000, 0).per_pool(POOLS);
        assert!(a.review(t, &fine).is_empty());
        // Over on memory only: one warning, about the memory pool.
        let over = host(3000, 0, 1000, 0).per_pool(POOLS);
        let w = a.review(t, &over);
        assert!(
            matches!(w.as_slice(), [Action::Warn { device: 4, used_bytes, reserved_bytes, .. }]
                if *used_bytes == 3000 * MIB && *reserved_bytes == 1000 * MIB),
            "{w:?}"
        );
        assert!(a.is_over(42, 4) && !a.is_over(42, 5));
        assert_eq!(over_use_bytes(&a, &over, 4), 2000 * MIB);
        assert_eq!(over_use_bytes(&a, &over, 5), 0);
        // Locked memory beyond the page-locked lease is over-use of its own.
        let locked = host(900, 600, 1000, 100).per_pool(POOLS);
        let w = a.review(t, &locked);
        assert!(
            w.contains(&Action::Resolved {
                owner: 42,
                device: 4
            }),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|v| matches!(v, Action::Warn { device: 5, .. })),
            "{w:?}"
        );
        assert_eq!(over_use_bytes(&a, &locked, 5), 500 * MIB);
    }

    #[test]
    fn without_kill_the_revoked_owner_is_only_watched() {
        let t = Instant::now();
        let config = AuditConfig {
            policy: Policy::Revoke,
            grace: Duration::from_secs(1),
            ..AuditConfig::default()
        };
        let mut a = Auditor::new(config);
        a.review(t, &[fp(3000, 1000)]);
        assert_eq!(
            a.review(t + Duration::from_secs(1), &[fp(3000, 1000)])
                .len(),
            1
        );
        assert!(
            a.review(t + Duration::from_secs(100), &[fp(3000, 0)])
                .is_empty()
        );
        assert_eq!(a.revoked_owners().collect::<Vec<_>>(), vec![(42, 0)]);
    }
}
