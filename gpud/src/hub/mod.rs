//! The hub: the one task that owns the ledger, through the pure [`core`].
//!
//! Sessions (socket connections, D-Bus callers), the metrics listener and the device poller
//! send it [`Command`]s. This shell turns each into a call on the core with the time read
//! now, carries out the [`Action`]s the core returns (frames to session queues, journal
//! writes, signals, notices to watchers), reads from /proc what the core needs to know, and
//! sleeps until the core's one next deadline. Nothing else touches the ledger.

pub mod access;
mod command;
pub mod core;
pub mod outbox;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpud_proto::{ErrorBody, ErrorCode, Outcome, ServerFrame};
use rand::SeedableRng;
use tokio::sync::{broadcast, mpsc};
use tracing::{debug, error, info, warn};

use crate::backend::ProcessUsage;
use crate::config::Config;
use crate::journal::{Journal, LeaseRecord};
use crate::ledger::{Ledger, SessionId};
use crate::procfs;

pub use self::core::{ADMIN_SESSIONS, Core, EndReason, Notice, ORPHANS, Peer, wire_name};
use self::core::{Action, Facts, JournalEntry, KillReason, Now, ProcessSample, Restorable};
use self::core::{ProcessFacts, ProcessState, Watched};
use self::core::{Settings, Signal};
use self::outbox::{Outbox, Undelivered};
pub use command::{Command, Credentials, Inspect, QueueRoom, Refused, SessionIds, inspect, open};

/// Notices queued for each watcher before it counts as lagging.
const NOTICE_QUEUE: usize = 1024;

/// The ledger's owner. Build with [`Hub::new`], drive with [`Hub::run`].
pub struct Hub {
    core: Core,
    /// Where each admitted session's frames go.
    outbound: HashMap<SessionId, Outbox>,
    journal: Option<Journal>,
    notices: broadcast::Sender<Notice>,
    /// How often holders' processes are checked for being stopped.
    stopped_poll: Duration,
}

impl Hub {
    /// A hub over a ledger whose devices have the given product names.
    pub fn new(ledger: Ledger, names: Vec<String>, config: &Config, backend: &'static str) -> Self {
        let facts = Facts {
            backend,
            pid: std::process::id(),
        };
        // Adoption tokens are secrets: a cryptographic generator, seeded from the OS.
        let rng = Box::new(rand::rngs::StdRng::from_entropy());
        let settings = Settings::new(config, resolve_access(config));
        Self {
            core: Core::new(now(), ledger, names, settings, facts, rng),
            outbound: HashMap::new(),
            journal: None,
            notices: broadcast::channel(NOTICE_QUEUE).0,
            stopped_poll: config.stopped_poll_interval,
        }
    }

    /// Books the host's resources (`layout`'s pools are in the ledger, after the GPUs);
    /// `measure_unmanaged`: what unleased processes use lowers host memory's capacity. Before
    /// [`Hub::with_journal`], so that host parts are restored with their CPUs.
    pub fn with_host(mut self, layout: &crate::host::HostLayout, measure_unmanaged: bool) -> Self {
        self.core.set_host(layout, measure_unmanaged);
        self
    }

    /// Journals every lease from now on, and puts back the leases of `records` whose owners
    /// are still running: they stay reserved for `grace`, for their owners to re-adopt.
    pub fn with_journal(
        mut self,
        journal: Journal,
        records: Vec<LeaseRecord>,
        grace: Duration,
    ) -> Self {
        let journaled = records
            .into_iter()
            .map(|record| Restorable {
                owner_alive: procfs::owner_alive(record.pid, record.pid_start),
                record,
            })
            .collect();
        self.core.journal_skipped(journal.skipped());
        self.journal = Some(journal);
        self.core.restore(now(), journaled, grace);
        self.carry_out();
        self
    }

    /// Notices of grants, releases and device changes, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// Runs until [`Command::Shutdown`] or until every sender is gone.
    pub async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let sleep = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(sleep);
        let mut armed: Option<Instant> = None;
        let mut liveness = tokio::time::interval(self.stopped_poll);
        liveness.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = self.core.next_timeout();
            if next != armed {
                if let Some(at) = next {
                    sleep.as_mut().reset(tokio::time::Instant::from_std(at));
                }
                armed = next;
            }
            tokio::select! {
                command = commands.recv() => match command {
                    None => break,
                    Some(Command::Shutdown) => {
                        self.core.shutdown(now());
                        self.carry_out();
                        self.outbound.clear();
                        break;
                    }
                    Some(command) => self.handle(command),
                },
                () = &mut sleep, if armed.is_some() => {
                    armed = None;
                    self.core.handle_timeout(now());
                }
                _ = liveness.tick() => {
                    self.sample_holders();
                    self.sample_host_memory();
                }
            }
            self.carry_out();
        }
    }

    fn handle(&mut self, command: Command) {
        let now = now();
        match command {
            Command::Open {
                session,
                peer,
                outbound,
                reply,
            } => {
                let verdict = self.core.open(now, session, peer);
                if verdict.is_ok() {
                    self.outbound.insert(session, outbound);
                }
                // The session may have gone already; nothing to do then.
                let _ = reply.send(verdict);
            }
            Command::Request {
                session,
                id,
                op: gpud_proto::Op::Attach(args),
            } => {
                let facts = process_facts(args.pid);
                self.core.attach(now, session, id, args, facts);
            }
            Command::Request { session, id, op } => self.core.request(now, session, id, op),
            Command::Close { session } => self.close(now, session),
            Command::Usage(usage) => self.core.usage(now, samples(usage)),
            Command::Reload(config) => self.core.reload(now, &config, resolve_access(&config)),
            Command::Enforcement(status) => self.core.enforcement(status),
            Command::Inspect(Inspect::Status(reply)) => {
                let _ = reply.send(self.core.status(now));
            }
            Command::Inspect(Inspect::Metrics(reply)) => {
                let _ = reply.send(self.core.metrics(now));
            }
            Command::Shutdown => {}
        }
    }

    /// Reads from /proc whether the processes the core watches are stopped, and tells it.
    fn sample_holders(&mut self) {
        let watched = self.core.watched_processes();
        if watched.is_empty() {
            return;
        }
        let states: Vec<ProcessState> = watched
            .into_iter()
            .filter_map(|process: Watched| {
                procfs::stopped(process.pid, process.start)
                    .map(|stopped| ProcessState { process, stopped })
            })
            .collect();
        self.core.process_states(now(), &states);
    }

    /// Reads the host's used memory and the resident memory of host memory holders (and their
    /// descendants, as for device memory), and tells the core.
    fn sample_host_memory(&mut self) {
        if !self.core.measures_host_memory() {
            return;
        }
        let holders = self.core.host_memory_holders();
        let Some(used) = crate::host::memory_used() else {
            return;
        };
        let mut resident: Vec<(u32, u64)> = holders
            .iter()
            .map(|&(pid, _)| (pid, crate::host::resident_bytes(pid)))
            .collect();
        if !holders.is_empty() {
            for pid in procfs::all_pids() {
                if let Some(owner) = procfs::lineage(pid)
                    .iter()
                    .skip(1)
                    .find(|p| holders.iter().any(|(h, _)| h == *p))
                {
                    if let Some(e) = resident.iter_mut().find(|(h, _)| h == owner) {
                        e.1 = e.1.saturating_add(crate::host::resident_bytes(pid));
                    }
                }
            }
        }
        self.core.host_usage(now(), used, &resident);
    }

    /// Ends a session in the core and drops its queue, which ends its task.
    fn close(&mut self, now: Now, session: SessionId) {
        self.outbound.remove(&session);
        self.core.close(now, session);
    }

    /// Carries out what the core asks, in its order.
    fn carry_out(&mut self) {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Send { session, frame } => self.transmit(session, frame),
                Action::Journal(entry) => {
                    if let Some(j) = &mut self.journal {
                        match entry {
                            JournalEntry::Grant(record) => j.grant(record),
                            JournalEntry::Resize { id, vram_bytes } => j.resize(id, vram_bytes),
                            JournalEntry::Release(id) => j.release(id),
                        }
                    }
                }
                Action::FlushJournal => {
                    let written = match self.journal.as_mut().map(Journal::flush) {
                        Some(Err(e)) => {
                            // Once per stall; the retries that follow stay quiet.
                            if self.core.journal_stalled() {
                                debug!("{e}");
                            } else {
                                error!("{e}");
                            }
                            false
                        }
                        _ => true,
                    };
                    // The core holds back what this write was to record until it succeeds.
                    self.core.journal_flushed(now(), written);
                }
                Action::Signal {
                    pid,
                    start,
                    signal,
                    group,
                    why,
                } => send_signal(pid, start, signal, group, why),
                Action::Notify(notice) => {
                    // No watcher is not an error.
                    let _ = self.notices.send(notice);
                }
            }
        }
    }

    /// Hands a frame to a session's task; a session whose queue is over its frames or bytes
    /// does not read, and is closed.
    fn transmit(&mut self, session: SessionId, frame: ServerFrame) {
        let Some(outbound) = self.outbound.get(&session) else {
            return;
        };
        let (frame, bytes) = framable(frame);
        match outbound.offer(frame, bytes) {
            Ok(()) => {}
            Err(Undelivered::Backlog) => {
                warn!(session, "session does not read what gpud sends; closing it");
                self.close(now(), session);
            }
            Err(Undelivered::Gone) => self.close(now(), session),
        }
    }
}

/// The frame with its encoded length; a reply too large for any frame becomes a refusal of
/// its request, so that the asker learns why and keeps its session (and leases).
fn framable(frame: ServerFrame) -> (ServerFrame, usize) {
    let bytes = outbox::encoded_len(&frame);
    if bytes <= gpud_proto::frame::MAX_SERVER_FRAME {
        return (frame, bytes);
    }
    let ServerFrame::Reply { id, .. } = frame else {
        // Only replies carry what grows with the host (status, metrics); nothing else is near.
        error!(bytes, "a frame too large for the protocol; dropped");
        let refusal = ServerFrame::Error {
            error: ErrorBody::new(ErrorCode::Internal, "a frame too large was dropped"),
        };
        let bytes = outbox::encoded_len(&refusal);
        return (refusal, bytes);
    };
    warn!(
        bytes,
        "a reply is larger than a frame may be; refusing its request"
    );
    let refusal = ServerFrame::Reply {
        id,
        outcome: Outcome::Error(ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "the answer ({bytes} bytes) exceeds the largest frame ({} bytes)",
                gpud_proto::frame::MAX_SERVER_FRAME
            ),
        )),
    };
    let bytes = outbox::encoded_len(&refusal);
    (refusal, bytes)
}

/// The time, as the core takes it.
fn now() -> Now {
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Now {
        at: Instant::now(),
        unix_ms,
    }
}

/// The config's access lists against this host's groups; missing groups are logged.
fn resolve_access(config: &Config) -> self::core::Access {
    let (access, missing) = access::resolve(&config.access);
    for group in missing {
        info!(
            group,
            "access list names a group that does not exist on this host"
        );
    }
    access
}

/// A device poll with what /proc tells about each process.
fn samples(usage: Vec<Vec<ProcessUsage>>) -> Vec<Vec<ProcessSample>> {
    usage
        .into_iter()
        .map(|procs| {
            procs
                .into_iter()
                .map(|p| ProcessSample {
                    pid: p.pid,
                    used_bytes: p.used_bytes,
                    lineage: procfs::lineage(p.pid),
                    name: procfs::process_name(p.pid),
                    start: procfs::process_start(p.pid).unwrap_or(0),
                })
                .collect()
        })
        .collect()
}

/// What /proc says of the process an attach names.
fn process_facts(pid: u32) -> ProcessFacts {
    if pid == 0 {
        return ProcessFacts::default();
    }
    ProcessFacts {
        start: procfs::process_start(pid),
        uids: procfs::uids(pid),
        lineage: procfs::lineage(pid),
    }
}

/// Sends a signal to a process, or to the process group it leads, unless the pid now names
/// another process than the one the core meant.
fn send_signal(pid: u32, start: u64, signal: Signal, group: bool, why: KillReason) {
    // Without the start time recorded when the process was met, the pid cannot be told apart
    // from a process that reused it: such a process is never signalled.
    if start == 0 || procfs::process_start(pid) != Some(start) {
        info!(
            pid,
            "not killing: the process has exited already (or cannot be identified)"
        );
        return;
    }
    let target = nix::unistd::Pid::from_raw(pid as i32);
    let sig = match signal {
        Signal::Term => nix::sys::signal::Signal::SIGTERM,
        Signal::Kill => nix::sys::signal::Signal::SIGKILL,
    };
    // A process that leads no group of its own is signalled alone: its group is someone
    // else's (a shell's job), which the attach never vouched for.
    let leads_group = group && procfs::process_group(pid) == Some(pid);
    let r = if leads_group {
        nix::sys::signal::killpg(target, sig)
    } else {
        nix::sys::signal::kill(target, sig)
    };
    match (why, r) {
        (KillReason::SessionEnded { lease }, Ok(())) => warn!(
            lease,
            pid,
            signal = %sig,
            group = leads_group,
            "signalled a program whose session ended without releasing its lease"
        ),
        (KillReason::SessionEnded { lease }, Err(e)) => warn!(
            lease,
            pid,
            signal = %sig,
            error = %e,
            "cannot signal a program whose session ended without releasing its lease"
        ),
        (KillReason::YieldIgnored { lease }, Ok(())) => warn!(
            lease,
            pid, "killed a compute holder that ignored its yield notice"
        ),
        (KillReason::YieldIgnored { lease }, Err(e)) => {
            warn!(lease, pid, error = %e, "cannot kill a compute holder that ignored its yield notice")
        }
        (KillReason::KeptMemory { owner, device }, Ok(())) => warn!(
            owner,
            device, pid, "killed a process that kept device memory after its leases were revoked"
        ),
        (KillReason::KeptMemory { owner, device }, Err(e)) => {
            warn!(owner, device, pid, error = %e, "cannot kill a process that keeps device memory")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command as Process;

    use gpud_proto::{AcquireArgs, Op, Reply};

    use super::*;
    use crate::ledger::DeviceSpec;

    /// A running hub over one simulated 16 GiB device, and a root session on it with `room`.
    async fn hub_with_session(room: QueueRoom) -> (mpsc::Sender<Command>, outbox::Inbox) {
        let config = Config::default();
        let device = DeviceSpec {
            kind: crate::ledger::PoolKind::Gpu,
            uuid: "GPU-test-0".into(),
            name: "test".into(),
            total_bytes: 16 << 30,
            headroom_bytes: 0,
            unmanaged_bytes: 0,
            compute_slots: 1,
            critical_slots: 0,
            topology: Default::default(),
        };
        let ledger = Ledger::new(config.scheduler.clone(), vec![device]);
        let hub = Hub::new(ledger, vec!["test".into()], &config, "simulated");
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(hub.run(rx));
        let root = Credentials {
            pid: Some(std::process::id() as i32),
            uid: 0,
            gid: Some(0),
            groups: Some(Vec::new()),
        };
        let inbox = open(&tx, 1, root, room).await.expect("root is admitted");
        (tx, inbox)
    }

    async fn ask(hub: &mpsc::Sender<Command>, id: u64, op: Op) {
        let request = Command::Request { session: 1, id, op };
        hub.send(request).await.expect("the hub runs");
    }

    /// Regression: the queue to a session counted frames only, so a session that pipelined
    /// `status` and never read held up to 1024 status reports (~230 MiB each session).
    #[tokio::test]
    async fn a_session_that_asks_and_does_not_read_is_closed_at_its_byte_budget() {
        let room = QueueRoom {
            frames: 1024,
            bytes: 256 << 10,
            total: usize::MAX,
        };
        let (hub, mut inbox) = hub_with_session(room).await;
        // Fifty labelled leases make each status report some 25 KiB.
        for id in 0..50 {
            let args = AcquireArgs {
                vram_bytes: 1 << 20,
                label: Some("x".repeat(200)),
                ..AcquireArgs::default()
            };
            ask(&hub, id, Op::Acquire(args)).await;
        }
        for id in 50..1000 {
            ask(&hub, id, Op::Status).await;
        }
        // The hub stops once it has served these: the queue then ends either way.
        drop(hub);
        let (mut reports, mut bytes) = (0, 0);
        while let Some(frame) = inbox.recv().await {
            bytes += outbox::encoded_len(&frame);
            if let ServerFrame::Reply {
                outcome: Outcome::Ok(Reply::Status(_)),
                ..
            } = frame
            {
                reports += 1;
            }
        }
        assert!(reports > 0, "the first reports went out");
        assert!(
            bytes <= room.bytes + (64 << 10),
            "{reports} reports, {bytes} bytes queued: past the budget"
        );
    }

    #[test]
    fn a_reply_too_large_for_a_frame_becomes_a_refusal_of_its_request() {
        let huge = ServerFrame::Reply {
            id: 9,
            outcome: Outcome::Ok(Reply::Metrics {
                text: "#".repeat(gpud_proto::frame::MAX_SERVER_FRAME),
            }),
        };
        let (frame, bytes) = framable(huge);
        let ServerFrame::Reply {
            id: 9,
            outcome: Outcome::Error(e),
        } = &frame
        else {
            panic!("{frame:?}")
        };
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert_eq!(bytes, outbox::encoded_len(&frame));
        let small = ServerFrame::Reply {
            id: 1,
            outcome: Outcome::Ok(Reply::Pong),
        };
        assert_eq!(framable(small.clone()).0, small);
    }

    #[test]
    fn the_one_kill_path_kills_the_process_meant_and_no_other() {
        let mut meant = Process::new("sleep").arg("30").spawn().unwrap();
        let pid = meant.id();
        let start = procfs::process_start(pid).expect("a start time");
        // A start time that is not this process's: the pid names another process now.
        let kill = |pid, start, why| send_signal(pid, start, Signal::Kill, false, why);
        kill(pid, start + 1, KillReason::YieldIgnored { lease: 1 });
        assert_eq!(meant.try_wait().unwrap(), None, "another process is spared");
        kill(pid, 0, KillReason::YieldIgnored { lease: 1 });
        assert_eq!(
            meant.try_wait().unwrap(),
            None,
            "an unidentified process is spared"
        );
        kill(pid, start, KillReason::YieldIgnored { lease: 1 });
        assert_eq!(meant.wait().unwrap().signal(), Some(9));
    }
}
