//! A test bench for the core: virtual time, a seeded RNG, two simulated 16 GiB devices, and
//! no processes, sockets or files.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use gpud_proto::{AcquireArgs, Op, Outcome, RequestId, ServerFrame};
use rand::SeedableRng;

use super::{Access, Action, Core, Facts, Now, Peer, Settings};
use crate::config::Config;
use crate::ledger::{DeviceSpec, Ledger, SessionId};

/// The daemon's own pid on the bench: never signalled.
pub(super) const DAEMON_PID: u32 = 1;

pub(super) const GIB: u64 = 1 << 30;

/// A core on virtual time.
pub(super) struct Bench {
    pub(super) core: Core,
    start: Instant,
    elapsed: Duration,
}

/// Root may connect and administer; uids 1000 and 2000 may connect.
pub(super) fn access() -> Access {
    Access {
        allowed_uids: HashSet::from([0, 1000, 2000]),
        allowed_gids: HashSet::from([500]),
        admin_uids: HashSet::from([0]),
        admin_gids: HashSet::new(),
        critical_uids: HashSet::from([0]),
        critical_gids: HashSet::new(),
    }
}

/// A peer with uid `uid` and pid `pid`, started at tick `pid * 10`.
pub(super) fn peer(pid: u32, uid: u32) -> Peer {
    Peer {
        pid,
        uid,
        gid: uid,
        groups: vec![],
        process: format!("p{pid}"),
        start: u64::from(pid) * 10,
        cgroups: Vec::new(),
    }
}

impl Bench {
    /// A core over two 16 GiB devices with `config` and [`access`].
    pub(super) fn new(config: &Config) -> Self {
        Self::with_access(config, access())
    }

    /// A core over two 16 GiB devices (on NUMA nodes 0 and 1) and the host of `layout`.
    pub(super) fn with_host(config: &Config, layout: &crate::host::HostLayout) -> Self {
        let mut bench = Self::build(config, access(), layout.pools());
        bench.core.set_host(layout, false);
        bench
    }

    pub(super) fn with_access(config: &Config, access: Access) -> Self {
        Self::build(config, access, Vec::new())
    }

    fn build(config: &Config, access: Access, host: Vec<DeviceSpec>) -> Self {
        let mut devices: Vec<DeviceSpec> = (0..2)
            .map(|i| DeviceSpec {
                kind: crate::ledger::PoolKind::Gpu,
                uuid: format!("GPU-fuzz-{i}"),
                name: "fuzz".into(),
                total_bytes: 16 * GIB,
                headroom_bytes: 0,
                unmanaged_bytes: 0,
                compute_slots: config.compute_slots,
                critical_slots: config.critical_slots,
                topology: crate::ledger::Topology {
                    numa_node: Some(i),
                    nvlink_island: None,
                },
            })
            .collect();
        devices.extend(host);
        let start = Instant::now();
        let facts = Facts {
            backend: "simulated",
            pid: DAEMON_PID,
        };
        let rng = Box::new(rand::rngs::StdRng::seed_from_u64(7));
        let now = Now {
            at: start,
            unix_ms: 1_700_000_000_000,
        };
        let core = Core::new(
            now,
            Ledger::new(config.scheduler.clone(), devices),
            vec!["fuzz".into(); 2],
            Settings::new(config, access),
            facts,
            rng,
        );
        Self {
            core,
            start,
            elapsed: Duration::ZERO,
        }
    }

    /// The virtual time.
    pub(super) fn now(&self) -> Now {
        Now {
            at: self.start + self.elapsed,
            unix_ms: 1_700_000_000_000 + self.elapsed.as_millis() as u64,
        }
    }

    /// Moves time on by `by`, firing every deadline passed on the way, at its own time.
    pub(super) fn advance(&mut self, by: Duration) {
        let end = self.start + self.elapsed + by;
        while let Some(at) = self.core.next_timeout().filter(|&at| at <= end) {
            self.elapsed = at.max(self.start + self.elapsed) - self.start;
            let now = self.now();
            self.core.handle_timeout(now);
        }
        self.elapsed = end - self.start;
    }

    /// Opens a session for `peer`.
    pub(super) fn open(
        &mut self,
        session: SessionId,
        peer: Peer,
    ) -> Result<(), gpud_proto::ErrorBody> {
        let now = self.now();
        self.core.open(now, session, peer)
    }

    /// Sends a request.
    pub(super) fn request(&mut self, session: SessionId, id: RequestId, op: Op) {
        let now = self.now();
        self.core.request(now, session, id, op);
    }

    /// Asks for `vram_bytes` (and compute if asked) on any device.
    pub(super) fn acquire(
        &mut self,
        session: SessionId,
        id: RequestId,
        vram_bytes: u64,
        compute: bool,
    ) {
        let args = AcquireArgs {
            vram_bytes,
            compute,
            ..AcquireArgs::default()
        };
        self.request(session, id, Op::Acquire(args));
    }

    /// Every action so far.
    pub(super) fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.core.poll_action()).collect()
    }

    /// The frames for `session` among the actions so far (the other actions are dropped).
    pub(super) fn frames(&mut self, session: SessionId) -> Vec<ServerFrame> {
        sent_to(&self.actions(), session)
    }
}

/// The frames for `session` among `actions`.
pub(super) fn sent_to(actions: &[Action], session: SessionId) -> Vec<ServerFrame> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { session: s, frame } if *s == session => Some(frame.clone()),
            _ => None,
        })
        .collect()
}

/// The outcome of the reply to `id` among `frames`.
pub(super) fn outcome(frames: &[ServerFrame], id: RequestId) -> Option<&Outcome> {
    frames.iter().find_map(|f| match f {
        ServerFrame::Reply { id: i, outcome } if *i == id => Some(outcome),
        _ => None,
    })
}
