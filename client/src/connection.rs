//! The connection driver: one task owns the socket, writes requests, routes replies to their
//! callers and events to their leases, and survives a daemon restart.
//!
//! Async and blocking clients share it; they differ only in where the driver runs (the
//! caller's runtime, or a thread of its own) and in how they wait for answers.
//!
//! When the connection drops while leases or requests are outstanding, the driver reconnects
//! with backoff, re-adopts every lease with its token, and sends again every request that had
//! no answer yet. The application sees a stall, not an error. Only when the daemon does not
//! come back within the reconnect window, or refuses a re-adoption, are leases reported lost.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use crate::error::{ClientError, Result};
use crate::proto::frame::{MAX_REQUEST_FRAME, MAX_SERVER_FRAME, codec, from_payload, to_payload};
use crate::proto::{
    AttachArgs, ClientFrame, ErrorBody, ErrorCode, Event, FEATURE_ATTACH, FEATURE_HOST,
    FEATURE_MPS, FEATURE_MULTI_DEVICE, FEATURE_QUEUED, LeaseInfo, Op, Outcome, PROTOCOL_VERSION,
    Reply, RequestId, RevokeReason, ServerFrame,
};
use crate::reservation::LeaseId;

/// How a client behaves when its connection drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Keep trying to reconnect (and re-adopt leases) for this long; `None` gives up at once.
    pub reconnect_for: Option<Duration>,
    /// The name this client gives in its hello (default: the program's name).
    pub name: Option<String>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            reconnect_for: Some(Duration::from_secs(30)),
            name: None,
        }
    }
}

/// What a lease learns from the daemon after its grant.
#[derive(Default)]
pub(crate) struct LeaseFlags {
    pub yield_requested: AtomicBool,
    /// An evictable lease was asked to give its memory back, and has not shrunk since.
    pub reclaim_requested: AtomicBool,
    /// Revoked, or lost with the connection: the lease no longer protects anything.
    pub lost: AtomicBool,
    /// Called on the connection's thread after either flag is raised ([`crate::LeaseWatch`]).
    on_notice: Mutex<Option<NoticeHook>>,
}

/// A callback run when a lease's flags change.
pub(crate) type NoticeHook = Arc<dyn Fn() + Send + Sync>;

impl LeaseFlags {
    /// Raises `yield_requested` (or `lost`, when `lost`) without running the hook.
    pub fn mark(&self, lost: bool) {
        let flag = if lost {
            &self.lost
        } else {
            &self.yield_requested
        };
        flag.store(true, Ordering::Release);
    }

    /// Runs the notice hook, if one is installed.
    pub fn run_hook(&self) {
        // Cloned out of the lock, so that a hook that registers another cannot deadlock.
        let hook = self.hook().clone();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// Raises `reclaim_requested` without running the hook.
    pub fn mark_reclaim(&self) {
        self.reclaim_requested.store(true, Ordering::Release);
    }

    /// Installs `hook`, replacing any earlier one, and runs it at once when a flag is already
    /// raised (a notice that arrived before the hook). `run_hook` takes the same lock after
    /// `mark`, so a notice is never missed: either `run_hook` sees the hook or this sees the flag.
    pub fn set_hook(&self, hook: NoticeHook) {
        *self.hook() = Some(hook.clone());
        if self.yield_requested.load(Ordering::Acquire)
            || self.reclaim_requested.load(Ordering::Acquire)
            || self.lost.load(Ordering::Acquire)
        {
            hook();
        }
    }

    fn hook(&self) -> std::sync::MutexGuard<'_, Option<NoticeHook>> {
        self.on_notice
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for LeaseFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseFlags")
            .field("yield_requested", &self.yield_requested)
            .field("lost", &self.lost)
            .finish_non_exhaustive()
    }
}

/// The channel a granted lease receives its events on.
pub(crate) struct LeaseChannel {
    pub events: mpsc::UnboundedReceiver<Event>,
    pub flags: Arc<LeaseFlags>,
}

/// An answer as the driver hands it to a caller.
pub(crate) enum Answer {
    Reply(Reply),
    Granted(LeaseInfo, LeaseChannel),
}

pub(crate) enum ToDriver {
    /// A request whose answer someone waits for; `places` hears its place in the queue while
    /// it waits ([`Event::Queued`]).
    Call {
        id: RequestId,
        op: Op,
        answer: oneshot::Sender<Result<Answer>>,
        places: Option<mpsc::UnboundedSender<u32>>,
    },
    /// A request whose answer nobody needs (release on drop, cancel on drop).
    Fire { id: RequestId, op: Op },
    /// Close the connection now ([`crate::Client::close`]).
    Close,
}

/// A cheap, cloneable handle to a running driver.
#[derive(Clone)]
pub(crate) struct Handle {
    tx: mpsc::UnboundedSender<ToDriver>,
    next_id: Arc<AtomicU64>,
    session: Arc<AtomicU64>,
    /// The daemon's welcome listed [`FEATURE_QUEUED`].
    queued: Arc<AtomicBool>,
    /// The daemon's welcome listed [`FEATURE_MULTI_DEVICE`].
    multi_device: Arc<AtomicBool>,
    /// The daemon's last welcome listed [`FEATURE_MPS`].
    mps: Arc<AtomicBool>,
    /// The daemon's welcome listed [`FEATURE_ATTACH`].
    attach: Arc<AtomicBool>,
    /// The daemon's welcome listed [`FEATURE_HOST`].
    host: Arc<AtomicBool>,
}

impl Handle {
    pub fn next_id(&self) -> RequestId {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The daemon's id for the current session (it changes after a reconnect).
    pub fn session(&self) -> u64 {
        self.session.load(Ordering::Relaxed)
    }

    /// Sends a request; the receiver yields its answer.
    pub fn call(&self, id: RequestId, op: Op) -> Result<oneshot::Receiver<Result<Answer>>> {
        self.call_hearing_places(id, op, None)
    }

    /// Sends a request whose place in the queue `places` hears while it waits.
    pub fn call_hearing_places(
        &self,
        id: RequestId,
        op: Op,
        places: Option<mpsc::UnboundedSender<u32>>,
    ) -> Result<oneshot::Receiver<Result<Answer>>> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .send(ToDriver::Call {
                id,
                op,
                answer,
                places,
            })
            .map_err(|_| ClientError::Disconnected)?;
        Ok(rx)
    }

    /// Whether the daemon tells waiting acquires their place in the queue.
    pub fn speaks_queued(&self) -> bool {
        self.queued.load(Ordering::Relaxed)
    }

    /// Whether the daemon grants leases of several devices and placement policies.
    pub fn speaks_multi_device(&self) -> bool {
        self.multi_device.load(Ordering::Relaxed)
    }

    /// Whether the daemon's MPS control daemon was up at the last welcome.
    pub fn offers_mps(&self) -> bool {
        self.mps.load(Ordering::Relaxed)
    }

    /// Whether the daemon records which program uses a lease ([`Op::Attach`]).
    pub fn speaks_attach(&self) -> bool {
        self.attach.load(Ordering::Relaxed)
    }

    /// Whether the daemon books host resources ([`FEATURE_HOST`]).
    pub fn offers_host(&self) -> bool {
        self.host.load(Ordering::Relaxed)
    }

    /// Sends a request and forgets it.
    pub fn fire(&self, op: Op) {
        let id = self.next_id();
        // If the driver is gone, so is the connection, and the daemon has freed everything.
        let _ = self.tx.send(ToDriver::Fire { id, op });
    }

    /// Asks the driver to close the connection now.
    pub fn close(&self) {
        // A driver that is gone has closed it already.
        let _ = self.tx.send(ToDriver::Close);
    }
}

type Reader = FramedRead<tokio::net::unix::OwnedReadHalf, LengthDelimitedCodec>;
type Writer = FramedWrite<tokio::net::unix::OwnedWriteHalf, LengthDelimitedCodec>;

/// What a welcome says.
struct Welcomed {
    session: u64,
    /// The daemon tells waiters their place ([`FEATURE_QUEUED`]).
    queued: bool,
    /// The daemon grants leases of several devices ([`FEATURE_MULTI_DEVICE`]).
    multi_device: bool,
    /// The daemon's MPS control daemon is up ([`FEATURE_MPS`]).
    mps: bool,
    /// The daemon records which program uses a lease ([`FEATURE_ATTACH`]).
    attach: bool,
    /// The daemon books host resources ([`FEATURE_HOST`]).
    host: bool,
}

/// Connects and says hello: the stream halves and what the welcome said.
async fn open(path: &Path, name: Option<String>) -> Result<(Reader, Writer, Welcomed)> {
    let stream = UnixStream::connect(path)
        .await
        .map_err(|source| ClientError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
    let (read, write) = stream.into_split();
    let mut reader = FramedRead::new(read, codec(MAX_SERVER_FRAME));
    let mut writer = FramedWrite::new(write, codec(MAX_REQUEST_FRAME));
    let hello = ClientFrame::Hello {
        version: PROTOCOL_VERSION,
        client: name,
    };
    // A daemon that refuses the session answers (and closes) without reading the hello, so a
    // failed send is not the end: the refusal may be waiting to be read.
    let sent = writer.send(to_payload(&hello)).await;
    let welcomed = match reader.next().await {
        Some(Ok(bytes)) => match from_payload::<ServerFrame>(&bytes) {
            Ok(ServerFrame::Welcome {
                session, features, ..
            }) => Welcomed {
                session,
                queued: features.iter().any(|f| f == FEATURE_QUEUED),
                multi_device: features.iter().any(|f| f == FEATURE_MULTI_DEVICE),
                mps: features.iter().any(|f| f == FEATURE_MPS),
                attach: features.iter().any(|f| f == FEATURE_ATTACH),
                host: features.iter().any(|f| f == FEATURE_HOST),
            },
            Ok(ServerFrame::Error { error }) => {
                return Err(ClientError::Refused {
                    path: path.to_path_buf(),
                    body: error,
                });
            }
            Ok(other) => {
                return Err(ClientError::Protocol(format!(
                    "expected welcome, got {other:?}"
                )));
            }
            Err(e) => return Err(ClientError::Protocol(e.to_string())),
        },
        _ => return Err(ClientError::Disconnected),
    };
    sent.map_err(|_| ClientError::Disconnected)?;
    Ok((reader, writer, welcomed))
}

/// Connects and says hello. Returns the handle and the driver future to run.
pub(crate) async fn connect(
    path: &Path,
    options: ClientOptions,
) -> Result<(
    Handle,
    impl std::future::Future<Output = ()> + Send + 'static,
)> {
    let name = options.name.clone().or_else(program_name);
    let (reader, writer, welcomed) = open(path, name.clone()).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = Handle {
        tx,
        next_id: Arc::new(AtomicU64::new(1)),
        session: Arc::new(AtomicU64::new(welcomed.session)),
        queued: Arc::new(AtomicBool::new(welcomed.queued)),
        multi_device: Arc::new(AtomicBool::new(welcomed.multi_device)),
        mps: Arc::new(AtomicBool::new(welcomed.mps)),
        attach: Arc::new(AtomicBool::new(welcomed.attach)),
        host: Arc::new(AtomicBool::new(welcomed.host)),
    };
    let driver = Driver {
        path: path.to_path_buf(),
        name,
        reconnect_for: options.reconnect_for,
        pending: BTreeMap::new(),
        leases: HashMap::new(),
        // The driver shares only the counters: it must not keep itself alive through a sender.
        ids: handle.next_id.clone(),
        session: handle.session.clone(),
        queued: handle.queued.clone(),
        multi_device: handle.multi_device.clone(),
        mps: handle.mps.clone(),
        attach: handle.attach.clone(),
        host: handle.host.clone(),
        part_of: HashMap::new(),
    };
    Ok((handle, driver.run(reader, writer, rx)))
}

fn program_name() -> Option<String> {
    std::env::args().next().map(|a| {
        Path::new(&a)
            .file_name()
            .map_or(a.clone(), |f| f.to_string_lossy().into_owned())
    })
}

/// A request without its answer yet.
struct Pending {
    op: Op,
    answer: Option<oneshot::Sender<Result<Answer>>>,
    /// Hears the request's place in the queue.
    places: Option<mpsc::UnboundedSender<u32>>,
    /// Sent again after a reconnect: a release that fails as unknown was applied before.
    resent: bool,
}

struct LeaseEntry {
    events: mpsc::UnboundedSender<Event>,
    flags: Arc<LeaseFlags>,
    token: String,
    /// The program attached to it: attached again after a re-adoption (a restarted daemon
    /// forgets attachments).
    attached: Option<AttachArgs>,
}

impl LeaseEntry {
    /// The lease did not survive the connection: tell its holder.
    fn lose(self, lease: LeaseId) {
        self.flags.mark(true);
        let _ = self.events.send(Event::Revoked {
            lease,
            reason: RevokeReason::Lost,
        });
        self.flags.run_hook();
    }
}

struct Driver {
    path: PathBuf,
    name: Option<String>,
    reconnect_for: Option<Duration>,
    /// In id order, so that a reconnect sends them again in the order they were made.
    pending: BTreeMap<RequestId, Pending>,
    leases: HashMap<LeaseId, LeaseEntry>,
    ids: Arc<AtomicU64>,
    session: Arc<AtomicU64>,
    queued: Arc<AtomicBool>,
    multi_device: Arc<AtomicBool>,
    mps: Arc<AtomicBool>,
    attach: Arc<AtomicBool>,
    host: Arc<AtomicBool>,
    /// The parts of leases of several devices, other than the first: the lease (group) each
    /// belongs to, so that a notice about a part reaches its lease.
    part_of: HashMap<LeaseId, LeaseId>,
}

/// Why one connection ended.
enum End {
    /// Every handle is gone: close for good (the daemon frees what is left).
    Closed,
    /// A client asked to close: the daemon frees what is left, and the leases are lost.
    Abandoned,
    /// The socket failed or the daemon went away.
    Lost,
    /// The daemon closed the session for what this client sent (a session error): sending
    /// the same requests again would only be refused again.
    Refused(ErrorBody),
}

impl Driver {
    async fn run(
        mut self,
        mut reader: Reader,
        mut writer: Writer,
        mut rx: mpsc::UnboundedReceiver<ToDriver>,
    ) {
        loop {
            match self.serve(&mut reader, &mut writer, &mut rx).await {
                End::Closed => return,
                End::Refused(body) => {
                    self.give_up(Some(body));
                    return;
                }
                End::Abandoned => break,
                End::Lost => {}
            }
            let worth_it = !self.leases.is_empty() || !self.pending.is_empty();
            match self.reconnect_for.filter(|_| worth_it) {
                Some(window) => match self.reconnect(window, &mut rx).await {
                    Some((r, w)) => {
                        reader = r;
                        writer = w;
                    }
                    None => break,
                },
                None => break,
            }
        }
        self.give_up(None);
    }

    /// Serves one connection until it ends.
    async fn serve(
        &mut self,
        reader: &mut Reader,
        writer: &mut Writer,
        rx: &mut mpsc::UnboundedReceiver<ToDriver>,
    ) -> End {
        loop {
            tokio::select! {
                command = rx.recv() => {
                    let Some(command) = command else { return End::Closed };
                    let Some(id) = self.queue(command) else { return End::Abandoned };
                    if self.write(writer, id).await.is_err() {
                        return End::Lost;
                    }
                    // Write everything queued in one flush.
                    while let Ok(more) = rx.try_recv() {
                        let Some(id) = self.queue(more) else { return End::Abandoned };
                        if self.write(writer, id).await.is_err() {
                            return End::Lost;
                        }
                    }
                    if SinkExt::<bytes::Bytes>::flush(writer).await.is_err() {
                        return End::Lost;
                    }
                }
                frame = reader.next() => {
                    let Some(Ok(bytes)) = frame else { return End::Lost };
                    let Ok(frame) = from_payload::<ServerFrame>(&bytes) else { return End::Lost };
                    if let ServerFrame::Error { error } = frame {
                        // A daemon that stops says so too; it may come back, this may not.
                        if error.code == ErrorCode::ShuttingDown {
                            return End::Lost;
                        }
                        return End::Refused(error);
                    }
                    for lease in self.dispatch(frame) {
                        let id = self.own(Op::Release { lease });
                        if self.write(writer, id).await.is_err()
                            || SinkExt::<bytes::Bytes>::flush(writer).await.is_err()
                        {
                            return End::Lost;
                        }
                    }
                }
            }
        }
    }

    /// Queues a request of the driver's own, whose answer nobody waits for.
    fn own(&mut self, op: Op) -> RequestId {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        self.pending.insert(
            id,
            Pending {
                op,
                answer: None,
                places: None,
                resent: false,
            },
        );
        id
    }

    /// Records a request to send; `None` for [`ToDriver::Close`].
    fn queue(&mut self, command: ToDriver) -> Option<RequestId> {
        let (id, op, answer, places) = match command {
            ToDriver::Call {
                id,
                op,
                answer,
                places,
            } => (id, op, Some(answer), places),
            ToDriver::Fire { id, op } => (id, op, None, None),
            ToDriver::Close => return None,
        };
        self.pending.insert(
            id,
            Pending {
                op,
                answer,
                places,
                resent: false,
            },
        );
        Some(id)
    }

    /// Encodes pending request `id` into the writer's buffer (flushed by the caller).
    async fn write(&self, writer: &mut Writer, id: RequestId) -> std::io::Result<()> {
        let Some(p) = self.pending.get(&id) else {
            return Ok(());
        };
        let frame = ClientFrame::Request {
            id,
            op: p.op.clone(),
        };
        writer.feed(to_payload(&frame)).await
    }

    /// Reconnects with backoff; re-adopts leases and re-sends pending requests. `None` when
    /// the window passed or every handle went away meanwhile.
    async fn reconnect(
        &mut self,
        window: Duration,
        rx: &mut mpsc::UnboundedReceiver<ToDriver>,
    ) -> Option<(Reader, Writer)> {
        let deadline = Instant::now() + window;
        let mut backoff = Duration::from_millis(10);
        let mut handles_gone = false;
        loop {
            if let Ok((reader, mut writer, welcomed)) = open(&self.path, self.name.clone()).await {
                self.session.store(welcomed.session, Ordering::Relaxed);
                self.queued.store(welcomed.queued, Ordering::Relaxed);
                self.multi_device
                    .store(welcomed.multi_device, Ordering::Relaxed);
                self.mps.store(welcomed.mps, Ordering::Relaxed);
                self.attach.store(welcomed.attach, Ordering::Relaxed);
                self.host.store(welcomed.host, Ordering::Relaxed);
                if self.resume(&mut writer).await.is_ok() {
                    return Some((reader, writer));
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            // Requests made meanwhile wait in `pending` and go out after the reconnect.
            let pause = tokio::time::sleep(backoff.min(deadline - Instant::now()));
            tokio::pin!(pause);
            loop {
                tokio::select! {
                    () = &mut pause => break,
                    command = rx.recv(), if !handles_gone => match command {
                        Some(c) => {
                            // A close while reconnecting: give up now.
                            self.queue(c)?;
                        }
                        None => handles_gone = true,
                    },
                }
            }
            if handles_gone && self.leases.is_empty() {
                return None;
            }
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// On a fresh connection: adopt every lease, then send every pending request again.
    async fn resume(&mut self, writer: &mut Writer) -> std::io::Result<()> {
        // Taken before the adoptions join `pending`.
        let rest: Vec<RequestId> = self.pending.keys().copied().collect();
        let adoptions: Vec<Op> = self
            .leases
            .iter()
            .map(|(&lease, e)| Op::Adopt {
                lease,
                token: e.token.clone(),
            })
            .collect();
        // Each attach follows its adoption, which the daemon serves first.
        let attachments: Vec<Op> = if self.attach.load(Ordering::Relaxed) {
            self.leases
                .values()
                .filter_map(|e| e.attached.clone().map(Op::Attach))
                .collect()
        } else {
            Vec::new()
        };
        let first: Vec<RequestId> = adoptions
            .into_iter()
            .chain(attachments)
            .map(|op| self.own(op))
            .collect();
        for id in first {
            self.write(writer, id).await?;
        }
        let queued = self.queued.load(Ordering::Relaxed);
        for id in rest {
            if let Some(p) = self.pending.get_mut(&id) {
                p.resent = true;
                // A daemon that came back older would refuse the field.
                if let Op::Acquire(args) = &mut p.op {
                    args.queued_events &= queued;
                }
            }
            self.write(writer, id).await?;
        }
        SinkExt::<bytes::Bytes>::flush(writer).await
    }

    /// The connection is gone for good: fail what waits (with the daemon's session error, if
    /// it gave one), and tell every lease.
    fn give_up(&mut self, why: Option<ErrorBody>) {
        for (_, p) in std::mem::take(&mut self.pending) {
            if let Some(a) = p.answer {
                let error = why
                    .clone()
                    .map_or(ClientError::Disconnected, ClientError::Daemon);
                let _ = a.send(Err(error));
            }
        }
        for (lease, e) in self.leases.drain() {
            e.lose(lease);
        }
    }

    /// Routes one frame. Returns grants that nobody waits for any more, to release.
    fn dispatch(&mut self, frame: ServerFrame) -> Vec<LeaseId> {
        let mut releases = Vec::new();
        match frame {
            ServerFrame::Reply { id, outcome } => {
                let Some(p) = self.pending.remove(&id) else {
                    return releases;
                };
                let result = match (outcome, &p.op) {
                    (Outcome::Ok(Reply::Granted(info)), _) => {
                        for part in info.parts.iter().filter(|p| p.lease != info.lease) {
                            self.part_of.insert(part.lease, info.lease);
                        }
                        // The host parts too: a notice about one is about the lease.
                        let host_parts = info.host.iter().flat_map(|h| h.parts.iter());
                        for &part in host_parts.filter(|&&p| p != info.lease) {
                            self.part_of.insert(part, info.lease);
                        }
                        let (events, rx) = mpsc::unbounded_channel();
                        let flags = Arc::new(LeaseFlags::default());
                        self.leases.insert(
                            info.lease,
                            LeaseEntry {
                                events,
                                flags: flags.clone(),
                                token: info.token.clone(),
                                attached: None,
                            },
                        );
                        Ok(Answer::Granted(info, LeaseChannel { events: rx, flags }))
                    }
                    (Outcome::Ok(reply), op) => {
                        if let (Reply::Attached { lease, .. }, Op::Attach(args)) = (&reply, op)
                            && let Some(e) = self.leases.get_mut(lease)
                        {
                            e.attached = Some(args.clone());
                        }
                        if let Reply::Released { lease } = &reply {
                            self.leases.remove(lease);
                            self.part_of.retain(|_, group| group != lease);
                        }
                        Ok(Answer::Reply(reply))
                    }
                    (Outcome::Error(body), Op::Adopt { lease, .. }) => {
                        // The restarted daemon did not keep this lease: it is lost.
                        if let Some(e) = self.leases.remove(lease) {
                            e.lose(*lease);
                        }
                        Err(ClientError::Daemon(body))
                    }
                    (Outcome::Error(body), Op::Release { lease })
                        if p.resent && body.code == ErrorCode::UnknownLease =>
                    {
                        // Applied before the restart: released all the same.
                        self.leases.remove(lease);
                        Ok(Answer::Reply(Reply::Released { lease: *lease }))
                    }
                    (Outcome::Error(body), _) => Err(ClientError::Daemon(body)),
                };
                match p.answer {
                    Some(sender) => {
                        if let Err(Ok(Answer::Granted(info, _))) = sender.send(result) {
                            // The caller stopped waiting (dropped future, timeout): give it back.
                            self.leases.remove(&info.lease);
                            releases.push(info.lease);
                        }
                    }
                    None => {
                        if let Ok(Answer::Granted(info, _)) = result {
                            self.leases.remove(&info.lease);
                            releases.push(info.lease);
                        }
                    }
                }
            }
            ServerFrame::Event {
                event: Event::Queued { request, position },
            } => {
                if let Some(places) = self.pending.get(&request).and_then(|p| p.places.as_ref()) {
                    let _ = places.send(position);
                }
            }
            ServerFrame::Event { event } => {
                let lease = match &event {
                    Event::YieldRequested { lease, .. }
                    | Event::Revoked { lease, .. }
                    | Event::ReclaimRequested { lease, .. } => Some(*lease),
                    Event::ShuttingDown | Event::OverUse { .. } | Event::Queued { .. } => None,
                };
                // A notice about a part goes to its lease (the group's first part).
                let lease = lease.map(|l| self.part_of.get(&l).copied().unwrap_or(l));
                match lease {
                    Some(lease) => {
                        let revoked = matches!(event, Event::Revoked { .. });
                        let reclaim = matches!(event, Event::ReclaimRequested { .. });
                        if let Some(e) = self.leases.get(&lease) {
                            // The flag is up before the event can be read (a reader of the
                            // event sees the flag), and the event is queued before the hook
                            // runs (a hook's reader finds it).
                            if reclaim {
                                e.flags.mark_reclaim();
                            } else {
                                e.flags.mark(revoked);
                            }
                            let _ = e.events.send(event);
                            e.flags.run_hook();
                        }
                        if revoked {
                            // The parts of a group end together.
                            self.leases.remove(&lease);
                            self.part_of.retain(|_, group| *group != lease);
                        }
                    }
                    None => {
                        for e in self.leases.values() {
                            let _ = e.events.send(event.clone());
                        }
                    }
                }
            }
            ServerFrame::Error { .. } | ServerFrame::Welcome { .. } => {}
        }
        releases
    }
}

/// Maps a daemon error with code `TimedOut` to `None`.
pub(crate) fn timed_out_is_none<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code() == Some(ErrorCode::TimedOut) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tokio::net::UnixListener;

    use super::*;
    use crate::Client;

    /// A daemon that welcomes each connection and answers its first request with a session
    /// error, then closes it; it counts the connections it got.
    async fn refusing_daemon(listener: UnixListener, connections: Arc<AtomicUsize>) {
        while let Ok((stream, _)) = listener.accept().await {
            connections.fetch_add(1, Ordering::SeqCst);
            let (read, write) = stream.into_split();
            let mut reader = FramedRead::new(read, codec(MAX_REQUEST_FRAME));
            let mut writer = FramedWrite::new(write, codec(MAX_SERVER_FRAME));
            let _hello = reader.next().await;
            let welcome = ServerFrame::Welcome {
                version: PROTOCOL_VERSION,
                session: 1,
                daemon: "test".into(),
                features: vec![],
            };
            let _ = writer.send(to_payload(&welcome)).await;
            let _request = reader.next().await;
            let error = ServerFrame::Error {
                error: ErrorBody::new(ErrorCode::BadFrame, "not for this daemon"),
            };
            let _ = writer.send(to_payload(&error)).await;
        }
    }

    /// Regression: a session the daemon closed for what the client sent (a status too large
    /// to frame, once) was taken for a lost connection: the client reconnected and sent the
    /// same request again, for ever (`gpudctl status` hung).
    #[tokio::test]
    async fn a_session_error_fails_the_call_and_is_not_sent_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpud.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        tokio::spawn(refusing_daemon(listener, connections.clone()));
        let client = Client::connect(&path).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), client.ping())
            .await
            .expect("the call ends");
        let error = answer.expect_err("the session error");
        assert_eq!(error.code(), Some(ErrorCode::BadFrame), "{error}");
        assert_eq!(connections.load(Ordering::SeqCst), 1, "no reconnect");
    }

    /// A daemon that grants the first acquire a lease of the host alone with three host parts
    /// (10, 11, 12), then revokes part 12: an event that names a part, not the lease.
    async fn revoking_a_host_part(listener: UnixListener) {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let (read, write) = stream.into_split();
        let mut reader = FramedRead::new(read, codec(MAX_REQUEST_FRAME));
        let mut writer = FramedWrite::new(write, codec(MAX_SERVER_FRAME));
        let _hello = reader.next().await;
        let welcome = ServerFrame::Welcome {
            version: PROTOCOL_VERSION,
            session: 1,
            daemon: "test".into(),
            features: vec![gpud_proto::FEATURE_HOST.into()],
        };
        let _ = writer.send(to_payload(&welcome)).await;
        while let Some(Ok(bytes)) = reader.next().await {
            let Ok(ClientFrame::Request {
                id,
                op: Op::Acquire(_),
            }) = serde_json::from_slice::<ClientFrame>(&bytes)
            else {
                continue;
            };
            let info = LeaseInfo {
                lease: 10,
                device_uuid: String::new(),
                device_index: 0,
                device_name: String::new(),
                vram_bytes: 0,
                compute: false,
                class: gpud_proto::Class::Normal,
                cuda_visible_devices: String::new(),
                token: "t".into(),
                within: None,
                parts: Vec::new(),
                host: Some(Box::new(gpud_proto::HostGrant {
                    mem_bytes: 1 << 30,
                    pinned_bytes: 1 << 29,
                    cpus: vec![0],
                    numa_node: Some(0),
                    parts: vec![10, 11, 12],
                })),
            };
            let granted = ServerFrame::Reply {
                id,
                outcome: Outcome::Ok(Reply::Granted(info)),
            };
            let _ = writer.send(to_payload(&granted)).await;
            let revoked = ServerFrame::Event {
                event: gpud_proto::Event::Revoked {
                    lease: 12,
                    reason: gpud_proto::RevokeReason::Admin,
                },
            };
            let _ = writer.send(to_payload(&revoked)).await;
            // Keep the connection open: only the event may make the lease lost.
            let _ = reader.next().await;
        }
    }

    /// An event about a host part reaches the lease the part belongs to.
    #[tokio::test]
    async fn an_event_naming_a_host_part_reaches_its_lease() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpud.sock");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(revoking_a_host_part(listener));
        let client = Client::connect(&path).await.unwrap();
        let lease = client
            .acquire(&crate::LeaseRequest::new().host_memory(1 << 30).cpus(1))
            .await
            .unwrap();
        assert_eq!(
            lease.host().map(|h| h.parts.clone()),
            Some(vec![10, 11, 12])
        );
        let lost = tokio::time::timeout(Duration::from_secs(5), async {
            while !lease.is_lost() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(lost.is_ok(), "the revoke of part 12 did not reach lease 10");
    }
}
