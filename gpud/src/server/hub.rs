//! The hub: the one task that owns the ledger.
//!
//! Sessions (socket connections, D-Bus callers) and the device poller send it [`Command`]s; it
//! applies them to the ledger, delivers the ledger's decisions to the sessions they name, and
//! sleeps until the ledger's next deadline. Nothing else touches the ledger.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use gpud_proto::LeaseId;
use gpud_proto::{
    AcquireArgs, ComputeHolder, DaemonInfo, DeviceStatus, ErrorBody, ErrorCode, Event, LeaseInfo,
    LeaseStatus, Op, Outcome, ProcessStatus, Reply, RequestId, RevokeReason, ServerFrame,
    StatusReport, WaiterStatus,
};
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{debug, error, info, warn};

use crate::backend::ProcessUsage;
use crate::config::{Config, Limits};
use crate::journal::{Journal, LeaseRecord, owner_alive};
use crate::ledger::{
    AcquireSpec, Decision, LeaseChange, Ledger, LedgerError, ResizeOutcome, RestoredLease,
    SessionId, Ticket,
};

use super::access::Access;
use super::audit::{Action, Auditor, Footprint};
use super::observer::{Notice, Observer};
use super::peer::{Peer, nearest_ancestor, process_name};

/// Longest wait a request may ask for (a year): beyond it, "for ever" is the honest request.
const MAX_TIMEOUT_MS: u64 = 365 * 24 * 3600 * 1000;
/// Longest label kept.
const MAX_LABEL: usize = 256;
/// The placeholder session that holds leases restored from the journal until their owners
/// re-adopt them. Real sessions are numbered from 1.
pub const ORPHANS: SessionId = 0;
/// Longest a journaled release waits to be written when no grant comes to carry it.
const JOURNAL_DELAY: Duration = Duration::from_millis(20);

/// What sessions and pollers ask of the hub.
#[derive(Debug)]
pub enum Command {
    /// A client connected; the hub checks access and limits.
    Open {
        /// The new session's id.
        session: SessionId,
        /// Who it is.
        peer: Peer,
        /// Where its frames go.
        outbound: mpsc::Sender<ServerFrame>,
        /// Admission verdict.
        reply: oneshot::Sender<Result<(), ErrorBody>>,
    },
    /// A request from an admitted session.
    Request {
        /// The session.
        session: SessionId,
        /// The client's request id.
        id: RequestId,
        /// What it asks.
        op: Op,
    },
    /// The session's connection ended (EOF, error, kill): free everything it had.
    Close {
        /// The session.
        session: SessionId,
    },
    /// Fresh per-process memory usage from the backend.
    Usage(Vec<Vec<ProcessUsage>>),
    /// A new configuration (limits, classes, access lists); leases stay.
    Reload(Box<Config>),
    /// Stop: tell every session, then end.
    Shutdown,
    /// A read-only question that needs no session.
    Inspect(Inspect),
}

/// Read-only questions from the D-Bus service, the metrics listener and the watchdog.
#[derive(Debug)]
pub enum Inspect {
    /// The whole state, as `status` reports it.
    Status(oneshot::Sender<StatusReport>),
    /// The metrics exposition (Prometheus text format).
    Metrics(oneshot::Sender<String>),
}

/// Asks the hub a read-only question, e.g. `inspect(hub, Inspect::Status)`; `None` once it
/// has stopped.
pub async fn inspect<T>(
    hub: &mpsc::Sender<Command>,
    question: impl FnOnce(oneshot::Sender<T>) -> Inspect,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    hub.send(Command::Inspect(question(tx))).await.ok()?;
    rx.await.ok()
}

struct SessionEntry {
    peer: Peer,
    outbound: mpsc::Sender<ServerFrame>,
}

/// The ledger's owner. Build with [`Hub::new`], drive with [`Hub::run`].
pub struct Hub {
    ledger: Ledger,
    names: Vec<String>,
    sessions: HashMap<SessionId, SessionEntry>,
    observer: Observer,
    /// Frames to send once the journal has recorded what they announce.
    outbox: Vec<(SessionId, ServerFrame)>,
    journal: Option<Journal>,
    /// Secrets that let an owner re-adopt its lease after a restart.
    tokens: HashMap<LeaseId, String>,
    /// When restored leases that nobody re-adopted are dropped.
    orphan_deadline: Option<Instant>,
    access: Access,
    limits: Limits,
    backend: &'static str,
    started: Instant,
    usage: Vec<Vec<ProcessUsage>>,
    auditor: Auditor,
    /// The last poll's footprints, for metrics.
    footprints: Vec<Footprint>,
    /// Kill the process of a compute holder that ignored its yield notice past the grace.
    kill_ignored_yield: bool,
}

impl Hub {
    /// A hub over a ledger whose devices have the given product names.
    pub fn new(ledger: Ledger, names: Vec<String>, config: &Config, backend: &'static str) -> Self {
        let (access, missing) = Access::resolve(&config.access);
        for group in missing {
            info!(
                group,
                "access list names a group that does not exist on this host"
            );
        }
        Self {
            usage: vec![Vec::new(); names.len()],
            auditor: Auditor::new(config.audit),
            footprints: Vec::new(),
            kill_ignored_yield: config.kill_ignored_yield,
            observer: Observer::new(names.len()),
            ledger,
            names,
            sessions: HashMap::new(),
            outbox: Vec::new(),
            journal: None,
            tokens: HashMap::new(),
            orphan_deadline: None,
            access,
            limits: config.limits,
            backend,
            started: Instant::now(),
        }
    }

    /// Journals every lease from now on, and puts back the leases of `records` whose owners
    /// are still running: they stay reserved for `grace`, for their owners to re-adopt.
    pub fn with_journal(
        mut self,
        journal: Journal,
        records: Vec<LeaseRecord>,
        grace: Duration,
    ) -> Self {
        let now = Instant::now();
        let wall_now = unix_ms();
        self.ledger.record_changes(true);
        self.journal = Some(journal);
        let mut kept = 0;
        for r in records {
            self.ledger.reserve_lease_ids(r.id + 1);
            let device = self
                .ledger
                .devices()
                .position(|d| d.spec().uuid == r.device_uuid);
            let alive = owner_alive(r.pid, r.pid_start);
            let restored = device.filter(|_| alive).map(|device| RestoredLease {
                id: r.id,
                device,
                vram_bytes: r.vram_bytes,
                compute: r.compute,
                class: r.class,
                granted_at: now
                    .checked_sub(Duration::from_millis(
                        wall_now.saturating_sub(r.granted_unix_ms),
                    ))
                    .unwrap_or(now),
                label: r.label.clone(),
            });
            match restored.map(|l| self.ledger.restore(ORPHANS, l)) {
                Some(Ok(())) => {
                    info!(
                        lease = r.id,
                        pid = r.pid,
                        "lease restored; waiting for its owner to re-adopt it"
                    );
                    self.tokens.insert(r.id, r.token.clone());
                    if let Some(j) = &mut self.journal {
                        j.grant(r);
                    }
                    kept += 1;
                }
                _ => {
                    info!(
                        lease = r.id,
                        pid = r.pid,
                        alive,
                        "journaled lease dropped: its owner is gone or its device is missing"
                    );
                    if let Some(j) = &mut self.journal {
                        j.release(r.id);
                    }
                }
            }
        }
        self.write_journal();
        if kept > 0 {
            self.orphan_deadline = Some(now + grace);
        }
        self
    }

    /// Notices of grants, releases and device changes, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.observer.subscribe()
    }

    /// Runs until [`Command::Shutdown`] or until every sender is gone.
    pub async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let sleep = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(sleep);
        let orphans = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(orphans);
        if let Some(at) = self.orphan_deadline {
            orphans.as_mut().reset(tokio::time::Instant::from_std(at));
        }
        let journal_sleep = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(journal_sleep);
        let mut journal_due: Option<Instant> = None;
        let mut armed: Option<Instant> = None;
        loop {
            let next = self.ledger.poll_timeout();
            if next != armed {
                if let Some(at) = next {
                    sleep.as_mut().reset(tokio::time::Instant::from_std(at));
                }
                armed = next;
            }
            tokio::select! {
                command = commands.recv() => {
                    let Some(command) = command else { break };
                    if matches!(command, Command::Shutdown) {
                        self.shutdown();
                        break;
                    }
                    self.handle(command);
                }
                () = &mut sleep, if armed.is_some() => {
                    self.ledger.handle_timeout(Instant::now());
                    armed = None;
                }
                () = &mut orphans, if self.orphan_deadline.is_some() => {
                    self.drop_orphans(Instant::now());
                }
                () = &mut journal_sleep, if journal_due.is_some() => {
                    self.write_journal();
                    journal_due = None;
                }
            }
            self.deliver();
            self.flush();
            self.observer.step(Instant::now(), &self.ledger);
            // Releases wait for the next grant's write, or at most JOURNAL_DELAY.
            if journal_due.is_none() && self.journal.as_ref().is_some_and(Journal::pending) {
                let at = Instant::now() + JOURNAL_DELAY;
                journal_sleep
                    .as_mut()
                    .reset(tokio::time::Instant::from_std(at));
                journal_due = Some(at);
            }
        }
    }

    /// Drops restored leases that were not re-adopted in time.
    fn drop_orphans(&mut self, now: Instant) {
        self.orphan_deadline = None;
        for id in self.ledger.session_leases(ORPHANS) {
            info!(
                lease = id,
                "restored lease not re-adopted within the grace period; dropped"
            );
            let _ = self.ledger.release(now, ORPHANS, id);
        }
    }

    /// Records lease changes in the journal, then sends the frames that announce them.
    fn flush(&mut self) {
        while let Some(change) = self.ledger.poll_change() {
            match change {
                LeaseChange::Granted(id) => self.journal_grant(id),
                LeaseChange::Resized { lease, vram_bytes } => {
                    if let Some(j) = &mut self.journal {
                        j.resize(lease, vram_bytes);
                    }
                }
                LeaseChange::Ended(id) => {
                    self.tokens.remove(&id);
                    if let Some(j) = &mut self.journal {
                        j.release(id);
                    }
                }
            }
        }
        // What grants or grows must be on file before anyone hears of it; a release may wait
        // (a restart that missed it keeps the memory reserved a little longer, never less).
        if self.journal.as_ref().is_some_and(Journal::urgent) {
            self.write_journal();
        }
        for (session, frame) in std::mem::take(&mut self.outbox) {
            self.transmit(session, frame);
        }
    }

    /// Appends what the journal holds.
    fn write_journal(&mut self) {
        if let Some(Err(e)) = self.journal.as_mut().map(Journal::flush) {
            // Clients are still served; a restart would then not know these changes.
            error!("{e}");
        }
    }

    /// Records a lease as its holder now has it.
    fn journal_grant(&mut self, id: LeaseId) {
        if let Some(record) = self.record(id) {
            if let Some(j) = &mut self.journal {
                j.grant(record);
            }
        }
    }

    /// The journal record of a lease, from the ledger and its owner's session.
    fn record(&mut self, id: LeaseId) -> Option<LeaseRecord> {
        let token = self.token(id);
        let lease = self.ledger.lease(id)?;
        let peer = &self.sessions.get(&lease.session)?.peer;
        let device = self.ledger.device(lease.device)?;
        Some(LeaseRecord {
            id,
            token,
            device_uuid: device.spec().uuid.clone(),
            vram_bytes: lease.vram_bytes,
            compute: lease.compute,
            class: lease.class,
            pid: peer.pid,
            pid_start: peer.start,
            uid: peer.uid,
            granted_unix_ms: unix_ms()
                .saturating_sub(lease.granted_at.elapsed().as_millis() as u64),
            label: lease.label.clone(),
        })
    }

    /// The lease's re-adoption secret, made on first use.
    fn token(&mut self, id: LeaseId) -> String {
        self.tokens
            .entry(id)
            .or_insert_with(|| format!("{:032x}", rand::random::<u128>()))
            .clone()
    }

    /// Applies one command as the run loop does, without tasks (fuzzing and tests).
    #[cfg(test)]
    pub(crate) fn apply(&mut self, command: Command) {
        self.handle(command);
        self.deliver();
        self.flush();
    }

    /// The ledger, for checks in tests.
    #[cfg(test)]
    pub(crate) fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn handle(&mut self, command: Command) {
        let now = Instant::now();
        match command {
            Command::Open {
                session,
                peer,
                outbound,
                reply,
            } => {
                let verdict = self.admit(&peer);
                if verdict.is_ok() {
                    debug!(session, pid = peer.pid, uid = peer.uid, process = %peer.process, "session opened");
                    self.sessions
                        .insert(session, SessionEntry { peer, outbound });
                } else {
                    info!(session, pid = peer.pid, uid = peer.uid, process = %peer.process, "session refused");
                }
                // The session may have gone already; nothing to do then.
                let _ = reply.send(verdict);
            }
            Command::Request { session, id, op } => {
                if self.sessions.contains_key(&session) {
                    if let Some(outcome) = self.request(now, session, id, op) {
                        // Grants the request caused go out before its own reply: after a
                        // release, the next holder is waiting and the releaser is not.
                        self.deliver();
                        self.send(session, ServerFrame::Reply { id, outcome });
                    }
                }
            }
            Command::Close { session } => self.close(now, session),
            Command::Usage(usage) => self.apply_usage(now, usage),
            Command::Reload(config) => self.reload(now, &config),
            Command::Inspect(Inspect::Status(reply)) => {
                let _ = reply.send(self.status(now));
            }
            Command::Inspect(Inspect::Metrics(reply)) => {
                let _ = reply.send(self.metrics(now));
            }
            Command::Shutdown => {}
        }
    }

    fn admit(&self, peer: &Peer) -> Result<(), ErrorBody> {
        if !self.access.may_connect(peer) {
            return Err(ErrorBody::new(
                ErrorCode::NotAllowed,
                format!(
                    "uid {} (gid {}) may not use gpud: add it to access.allowed_uids or a group in access.allowed_groups",
                    peer.uid, peer.gid
                ),
            ));
        }
        if self.sessions.len() >= self.limits.max_sessions {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "gpud serves at most {} sessions (limits.max_sessions)",
                    self.limits.max_sessions
                ),
            ));
        }
        let mine = self
            .sessions
            .values()
            .filter(|s| s.peer.uid == peer.uid)
            .count();
        if mine >= self.limits.max_sessions_per_uid {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "uid {} already has {mine} sessions (limits.max_sessions_per_uid)",
                    peer.uid
                ),
            ));
        }
        Ok(())
    }

    /// Applies one request. `None` means the answer comes later, as a decision.
    fn request(
        &mut self,
        now: Instant,
        session: SessionId,
        id: RequestId,
        op: Op,
    ) -> Option<Outcome> {
        let ticket = Ticket {
            session,
            request: id,
        };
        let result = match op {
            Op::Acquire(args) => {
                let class = args.class;
                let outcome = self.acquire(now, ticket, args);
                let seen = match &outcome {
                    None => Ok(None),
                    Some(Outcome::Ok(Reply::Granted(info))) => Ok(Some(info.lease)),
                    Some(Outcome::Error(e)) => Err(e.code),
                    Some(Outcome::Ok(_)) => Err(ErrorCode::Internal),
                };
                self.observer
                    .acquired(now, &self.ledger, ticket, class, seen);
                return outcome;
            }
            Op::Resize {
                lease,
                vram_bytes,
                timeout_ms,
            } => {
                let timeout = match checked_timeout(timeout_ms) {
                    Ok(t) => t,
                    Err(e) => return Some(Outcome::Error(e)),
                };
                match self.ledger.resize(now, ticket, lease, vram_bytes, timeout) {
                    Ok(ResizeOutcome::Done { vram_bytes }) => {
                        Ok(Reply::Resized { lease, vram_bytes })
                    }
                    Ok(ResizeOutcome::Waiting) => return None,
                    Err(e) => Err(ledger_error(e)),
                }
            }
            Op::Release { lease } => self
                .ledger
                .release(now, session, lease)
                .map(|()| {
                    self.observer.released(now, lease);
                    Reply::Released { lease }
                })
                .map_err(ledger_error),
            Op::Cancel { request } => {
                let waiting = Ticket { session, request };
                match self.ledger.cancel(now, waiting) {
                    Ok(()) => {
                        self.observer.cancelled(waiting);
                        let body = ErrorBody::new(ErrorCode::Cancelled, "cancelled by the client");
                        self.send(
                            session,
                            ServerFrame::Reply {
                                id: request,
                                outcome: Outcome::Error(body),
                            },
                        );
                        Ok(Reply::Cancelled { request })
                    }
                    Err(e) => Err(ledger_error(e)),
                }
            }
            Op::Status => Ok(Reply::Status(Box::new(self.status(now)))),
            Op::Drain { device } | Op::Undrain { device } if !self.is_admin(session) => {
                Err(not_admin(&format!("draining {device}")))
            }
            Op::Drain { device } => self
                .ledger
                .drain(now, &device)
                .map(|d| {
                    info!(device = d, "device drained");
                    Reply::Done
                })
                .map_err(ledger_error),
            Op::Undrain { device } => self
                .ledger
                .undrain(now, &device)
                .map(|d| {
                    info!(device = d, "device undrained");
                    Reply::Done
                })
                .map_err(ledger_error),
            Op::Revoke { lease } if !self.is_admin(session) => {
                Err(not_admin(&format!("revoking lease {lease}")))
            }
            Op::Revoke { lease } => self
                .ledger
                .revoke(now, lease)
                .map(|holder| {
                    info!(lease, holder, "lease revoked by an administrator");
                    Reply::Done
                })
                .map_err(ledger_error),
            Op::Adopt { lease, token } => self.adopt(session, lease, &token),
            Op::Ping => Ok(Reply::Pong),
            Op::Metrics => Ok(Reply::Metrics {
                text: self.metrics(now),
            }),
        };
        Some(match result {
            Ok(reply) => Outcome::Ok(reply),
            Err(e) => Outcome::Error(e),
        })
    }

    fn acquire(&mut self, now: Instant, ticket: Ticket, args: AcquireArgs) -> Option<Outcome> {
        let timeout = match checked_timeout(args.timeout_ms) {
            Ok(t) => t,
            Err(e) => return Some(Outcome::Error(e)),
        };
        if let Some(label) = &args.label {
            if label.len() > MAX_LABEL || label.chars().any(char::is_control) {
                return Some(Outcome::Error(ErrorBody::new(
                    ErrorCode::InvalidRequest,
                    format!("label must be at most {MAX_LABEL} bytes of printable text"),
                )));
            }
        }
        let (leases, waiters) = self.ledger.session_counts(ticket.session);
        if leases >= self.limits.max_leases_per_session {
            return Some(Outcome::Error(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "a session may hold at most {} leases (limits.max_leases_per_session)",
                    self.limits.max_leases_per_session
                ),
            )));
        }
        if waiters >= self.limits.max_outstanding_requests {
            return Some(Outcome::Error(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "a session may have at most {} waiting requests (limits.max_outstanding_requests)",
                    self.limits.max_outstanding_requests
                ),
            )));
        }
        let spec = AcquireSpec {
            placement: args.device,
            vram_bytes: args.vram_bytes,
            compute: args.compute,
            class: args.class,
            timeout,
            label: args.label,
        };
        match self.ledger.acquire(now, ticket, spec) {
            Ok(Some(lease)) => self
                .lease_info(lease)
                .map(|i| Outcome::Ok(Reply::Granted(i))),
            Ok(None) => None,
            Err(e) => Some(Outcome::Error(ledger_error(e))),
        }
    }

    /// Hands a restored lease to the session of its owner, who proves it with the token.
    fn adopt(
        &mut self,
        session: SessionId,
        lease: LeaseId,
        token: &str,
    ) -> Result<Reply, ErrorBody> {
        let unknown = || {
            ErrorBody::new(
                ErrorCode::UnknownLease,
                format!("no lease {lease} waiting to be re-adopted with that token"),
            )
        };
        let orphan = self
            .ledger
            .lease(lease)
            .is_some_and(|l| l.session == ORPHANS);
        let owner_uid = self
            .journal
            .as_ref()
            .and_then(|j| j.record(lease))
            .map(|r| r.uid);
        let peer_uid = self.sessions.get(&session).map(|s| s.peer.uid);
        if !orphan
            || self.tokens.get(&lease).map(String::as_str) != Some(token)
            || owner_uid != peer_uid
        {
            return Err(unknown());
        }
        self.ledger.transfer(lease, session).map_err(ledger_error)?;
        // The owner may come back as another process: record who holds it now.
        self.journal_grant(lease);
        info!(lease, session, "lease re-adopted");
        if self.ledger.session_leases(ORPHANS).is_empty() {
            self.orphan_deadline = None;
        }
        self.lease_info(lease)
            .map(Reply::Adopted)
            .ok_or_else(unknown)
    }

    fn is_admin(&self, session: SessionId) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|s| self.access.is_admin(&s.peer))
    }

    fn lease_info(&mut self, id: LeaseId) -> Option<LeaseInfo> {
        let token = self.token(id);
        let lease = self.ledger.lease(id)?;
        let device = self.ledger.device(lease.device)?;
        let uuid = device.spec().uuid.clone();
        Some(LeaseInfo {
            lease: id,
            device_index: lease.device as u32,
            device_name: self.names.get(lease.device).cloned().unwrap_or_default(),
            vram_bytes: lease.vram_bytes,
            compute: lease.compute,
            class: lease.class,
            cuda_visible_devices: uuid.clone(),
            device_uuid: uuid,
            token,
        })
    }

    /// Ends a session and frees what it held.
    fn close(&mut self, now: Instant, session: SessionId) {
        if let Some(entry) = self.sessions.remove(&session) {
            let gone = self.ledger.disconnect(now, session);
            self.observer.closed(now, session, &gone.leases);
            debug!(
                session,
                pid = entry.peer.pid,
                leases = gone.leases.len(),
                waiters = gone.waiters,
                "session closed"
            );
        }
    }

    /// Queues a frame for a session; it leaves at the next flush, after the journal.
    fn send(&mut self, session: SessionId, frame: ServerFrame) {
        self.outbox.push((session, frame));
    }

    /// Hands a frame to a session's task; a session whose queue is full does not read and is
    /// closed.
    fn transmit(&mut self, session: SessionId, frame: ServerFrame) {
        let Some(entry) = self.sessions.get(&session) else {
            return;
        };
        match entry.outbound.try_send(frame) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                warn!(
                    session,
                    pid = entry.peer.pid,
                    "session does not read what gpud sends; closing it"
                );
                self.close(Instant::now(), session);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => self.close(Instant::now(), session),
        }
    }

    /// Delivers every pending decision.
    fn deliver(&mut self) {
        while let Some(decision) = self.ledger.poll_decision() {
            self.observer
                .decision(Instant::now(), &self.ledger, &decision);
            let (session, frame) = match decision {
                Decision::Granted { ticket, lease } => {
                    let Some(info) = self.lease_info(lease) else {
                        continue;
                    };
                    (
                        ticket.session,
                        reply(ticket.request, Ok(Reply::Granted(info))),
                    )
                }
                Decision::Grew {
                    ticket,
                    lease,
                    vram_bytes,
                } => (
                    ticket.session,
                    reply(ticket.request, Ok(Reply::Resized { lease, vram_bytes })),
                ),
                Decision::TimedOut { ticket } => (
                    ticket.session,
                    reply(
                        ticket.request,
                        Err(ErrorBody::new(
                            ErrorCode::TimedOut,
                            "gave up waiting: timeout reached",
                        )),
                    ),
                ),
                Decision::GrowAbandoned { ticket, lease } => (
                    ticket.session,
                    reply(
                        ticket.request,
                        Err(ErrorBody::new(
                            ErrorCode::Cancelled,
                            format!("lease {lease} ended while its resize waited"),
                        )),
                    ),
                ),
                Decision::YieldRequested {
                    session,
                    lease,
                    reason,
                    revoke_at,
                } => {
                    let revoke_in_ms = revoke_at
                        .map(|at| at.saturating_duration_since(Instant::now()).as_millis() as u64);
                    (
                        session,
                        ServerFrame::Event {
                            event: Event::YieldRequested {
                                lease,
                                reason,
                                revoke_in_ms,
                            },
                        },
                    )
                }
                Decision::Revoked {
                    session,
                    lease,
                    reason,
                } => {
                    if reason == RevokeReason::YieldIgnored && self.kill_ignored_yield {
                        self.kill_holder(session, lease);
                    }
                    (
                        session,
                        ServerFrame::Event {
                            event: Event::Revoked { lease, reason },
                        },
                    )
                }
            };
            self.send(session, frame);
        }
    }

    /// Memory used by processes that hold no lease on a device lowers its capacity; memory used
    /// by lease holders is audited against what they reserved. A process belongs to the lease
    /// holder it is, or descends from (as with `gpudctl run`).
    fn apply_usage(&mut self, now: Instant, usage: Vec<Vec<ProcessUsage>>) {
        let mut footprints = Vec::new();
        for (d, procs) in usage.iter().enumerate() {
            let owners = self.owners(d);
            let mut used: BTreeMap<u32, (u64, Vec<u32>)> = BTreeMap::new();
            let mut unmanaged = 0;
            for p in procs {
                match nearest_ancestor(p.pid, |o| owners.contains_key(&o)) {
                    Some(o) => {
                        let e = used.entry(o).or_default();
                        e.0 += p.used_bytes;
                        e.1.push(p.pid);
                    }
                    None => unmanaged += p.used_bytes,
                }
            }
            self.ledger.set_unmanaged(now, d, unmanaged);
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
        for action in self.auditor.review(now, &footprints) {
            self.act(now, action);
        }
        self.usage = usage;
        self.footprints = footprints;
    }

    /// Kills the process of a session whose compute lease was revoked for ignoring a yield: a
    /// kernel still running there would otherwise keep the device from the next holder.
    fn kill_holder(&self, session: SessionId, lease: LeaseId) {
        let Some(peer) = self.sessions.get(&session).map(|s| &s.peer) else {
            return;
        };
        if peer.pid == 0 || peer.pid == std::process::id() {
            return;
        }
        let r = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(peer.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        match r {
            Ok(()) => warn!(
                lease,
                pid = peer.pid,
                "killed a compute holder that ignored its yield notice"
            ),
            Err(e) => {
                warn!(lease, pid = peer.pid, error = %e, "cannot kill a compute holder that ignored its yield notice")
            }
        }
    }

    /// Fires the ledger's due timers as the run loop does (tests).
    #[cfg(test)]
    pub(crate) fn tick(&mut self, now: Instant) {
        self.ledger.handle_timeout(now);
        self.deliver();
        self.flush();
    }

    /// Carries out what the audit decided.
    fn act(&mut self, now: Instant, action: Action) {
        let sessions_of = |hub: &Self, owner: u32| -> Vec<SessionId> {
            hub.sessions
                .iter()
                .filter(|(_, s)| s.peer.pid == owner)
                .map(|(id, _)| *id)
                .collect()
        };
        match action {
            Action::Warn {
                owner,
                device,
                used_bytes,
                reserved_bytes,
                revoke_at,
            } => {
                warn!(
                    owner,
                    device,
                    used_bytes,
                    reserved_bytes,
                    "process uses more device memory than it reserved"
                );
                let revoke_in_ms =
                    revoke_at.map(|at| at.saturating_duration_since(now).as_millis() as u64);
                for session in sessions_of(self, owner) {
                    let event = Event::OverUse {
                        device_index: device as u32,
                        used_bytes,
                        reserved_bytes,
                        revoke_in_ms,
                    };
                    self.send(session, ServerFrame::Event { event });
                }
            }
            Action::Revoke { owner, device } => {
                let sessions = sessions_of(self, owner);
                let leases: Vec<LeaseId> = self
                    .ledger
                    .leases()
                    .filter(|l| l.device == device && sessions.contains(&l.session))
                    .map(|l| l.id)
                    .collect();
                for id in leases {
                    warn!(owner, device, lease = id, "revoking a lease for over-use");
                    let _ = self.ledger.revoke_because(now, id, RevokeReason::OverUse);
                }
            }
            Action::Kill {
                owner,
                device,
                pids,
            } => {
                for pid in pids {
                    let r = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    match r {
                        Ok(()) => warn!(
                            owner,
                            device,
                            pid,
                            "killed a process that kept device memory after its leases were revoked"
                        ),
                        Err(e) => {
                            warn!(owner, device, pid, error = %e, "cannot kill a process that keeps device memory")
                        }
                    }
                }
            }
            Action::Resolved { owner, device } => {
                info!(
                    owner,
                    device, "device memory use back within the reservation"
                );
            }
        }
    }

    fn reload(&mut self, now: Instant, config: &Config) {
        let (access, missing) = Access::resolve(&config.access);
        for group in missing {
            info!(
                group,
                "access list names a group that does not exist on this host"
            );
        }
        self.access = access;
        self.limits = config.limits;
        self.auditor.set_config(config.audit);
        self.kill_ignored_yield = config.kill_ignored_yield;
        self.ledger.set_config(now, config.scheduler.clone());
        self.ledger
            .set_slots(now, config.compute_slots, config.critical_slots);
        info!("configuration reloaded");
    }

    fn shutdown(&mut self) {
        info!(sessions = self.sessions.len(), "shutting down");
        let ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for session in ids {
            self.send(
                session,
                ServerFrame::Event {
                    event: Event::ShuttingDown,
                },
            );
        }
        // Leases stay in the journal: after a restart their owners re-adopt them.
        self.flush();
        self.write_journal();
        self.sessions.clear();
    }

    /// The metrics exposition.
    pub fn metrics(&self, now: Instant) -> String {
        let over_use: Vec<u64> = (0..self.names.len())
            .map(|d| {
                self.footprints
                    .iter()
                    .filter(|f| f.device == d && self.auditor.is_over(f.owner, d))
                    .map(|f| f.used_bytes.saturating_sub(f.reserved_bytes))
                    .sum()
            })
            .collect();
        self.observer.render(
            now,
            &self.ledger,
            &self.names,
            self.sessions.len(),
            &over_use,
        )
    }

    /// The whole state, as `status` reports it.
    pub fn status(&self, now: Instant) -> StatusReport {
        let since = |t: Instant| now.saturating_duration_since(t).as_millis() as u64;
        let peer = |session: SessionId| self.sessions.get(&session).map(|s| &s.peer);
        let devices = self
            .ledger
            .devices()
            .map(|d| {
                let holders: Vec<ComputeHolder> = d
                    .compute_holders()
                    .map(|l| ComputeHolder {
                        lease: l.id,
                        pid: peer(l.session).map_or(0, |p| p.pid),
                        process: peer(l.session).map_or_else(|| "?".into(), |p| p.process.clone()),
                        class: l.class,
                        held_ms: since(l.granted_at),
                    })
                    .collect();
                let spec = d.spec();
                DeviceStatus {
                    index: d.index() as u32,
                    uuid: spec.uuid.clone(),
                    name: self.names.get(d.index()).cloned().unwrap_or_default(),
                    total_bytes: spec.total_bytes,
                    headroom_bytes: spec.headroom_bytes,
                    unmanaged_bytes: spec.unmanaged_bytes,
                    capacity_bytes: d.capacity(),
                    reserved_bytes: d.reserved(),
                    free_bytes: d.free(),
                    drained: d.drained(),
                    compute_slots: spec.compute_slots,
                    critical_slots: spec.critical_slots,
                    compute_holder: holders.first().cloned(),
                    compute_holders: holders,
                    queued: d.queued(),
                    processes: self.process_status(d.index()),
                }
            })
            .collect();
        let leases = self
            .ledger
            .leases()
            .map(|l| {
                let p = peer(l.session);
                LeaseStatus {
                    id: l.id,
                    device: self
                        .ledger
                        .device(l.device)
                        .map(|d| d.spec().uuid.clone())
                        .unwrap_or_default(),
                    device_index: l.device as u32,
                    vram_bytes: l.vram_bytes,
                    compute: l.compute,
                    class: l.class,
                    pid: p.map_or(0, |p| p.pid),
                    uid: p.map_or(0, |p| p.uid),
                    process: p.map_or_else(|| "?".into(), |p| p.process.clone()),
                    session: l.session,
                    held_ms: since(l.granted_at),
                    yield_requested: l.yield_requested.is_some(),
                    label: l.label.clone(),
                }
            })
            .collect();
        let waiters = self
            .ledger
            .waiters()
            .into_iter()
            .map(|w| WaiterStatus {
                session: w.ticket.session,
                request: w.ticket.request,
                pid: peer(w.ticket.session).map_or(0, |p| p.pid),
                class: w.class,
                device: w.placement.clone(),
                vram_bytes: w.need.vram_bytes,
                compute: w.need.compute,
                grows_lease: w.grows,
                waited_ms: since(w.arrived),
                label: w.label.clone(),
            })
            .collect();
        StatusReport {
            daemon: DaemonInfo {
                version: env!("CARGO_PKG_VERSION").into(),
                pid: std::process::id(),
                uptime_ms: since(self.started),
                sessions: self.sessions.len() as u32,
                backend: self.backend.into(),
            },
            devices,
            leases,
            waiters,
        }
    }
}

fn reply(id: RequestId, result: Result<Reply, ErrorBody>) -> ServerFrame {
    ServerFrame::Reply {
        id,
        outcome: match result {
            Ok(r) => Outcome::Ok(r),
            Err(e) => Outcome::Error(e),
        },
    }
}

fn checked_timeout(timeout_ms: Option<u64>) -> Result<Option<Duration>, ErrorBody> {
    match timeout_ms {
        Some(ms) if ms > MAX_TIMEOUT_MS => Err(ErrorBody::new(
            ErrorCode::InvalidRequest,
            format!("timeout_ms {ms} is over a year; omit it to wait without a timeout"),
        )),
        t => Ok(t.map(Duration::from_millis)),
    }
}

fn not_admin(what: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::PermissionDenied,
        format!("{what} needs root or a group in access.admin_groups"),
    )
}

fn ledger_error(e: LedgerError) -> ErrorBody {
    let code = match &e {
        LedgerError::UnknownDevice(_) => ErrorCode::UnknownDevice,
        LedgerError::NeverFits { .. } => ErrorCode::NeverFits,
        LedgerError::Invalid(_) => ErrorCode::InvalidRequest,
        LedgerError::UnknownLease(_) => ErrorCode::UnknownLease,
        LedgerError::UnknownRequest(_) => ErrorCode::UnknownRequest,
        LedgerError::DuplicateRequest(_) => ErrorCode::DuplicateRequest,
        LedgerError::ResizePending(_) => ErrorCode::ResizePending,
    };
    ErrorBody::new(code, e.to_string())
}

impl Hub {
    /// The pids of lease holders on device `d`, with the bytes they reserve there. A process
    /// belongs to the holder it is, or its nearest ancestor among them.
    fn owners(&self, d: usize) -> BTreeMap<u32, u64> {
        let mut owners: BTreeMap<u32, u64> = BTreeMap::new();
        for l in self.ledger.leases().filter(|l| l.device == d) {
            if let Some(s) = self.sessions.get(&l.session) {
                *owners.entry(s.peer.pid).or_default() += l.vram_bytes;
            }
        }
        // Owners whose leases were revoked for over-use stay watched until the memory goes.
        for (owner, _) in self.auditor.revoked_owners().filter(|(_, dev)| *dev == d) {
            owners.entry(owner).or_default();
        }
        owners
    }

    /// Processes using memory on a device at the last poll, with their owners.
    fn process_status(&self, d: usize) -> Vec<ProcessStatus> {
        let owners = self.owners(d);
        self.usage
            .get(d)
            .map(|procs| {
                procs
                    .iter()
                    .map(|p| {
                        let owner_pid = nearest_ancestor(p.pid, |o| owners.contains_key(&o));
                        ProcessStatus {
                            pid: p.pid,
                            process: process_name(p.pid),
                            used_bytes: p.used_bytes,
                            owner_pid,
                            over_use: owner_pid.is_some_and(|o| self.auditor.is_over(o, d)),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
