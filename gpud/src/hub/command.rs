//! How the adapters (the socket server, the D-Bus service, the metrics listener, the device
//! poller) speak to the hub: one [`Command`] type, and [`open`], the one way a session starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gpud_proto::{ErrorBody, Op, RequestId, StatusReport};
use tokio::sync::{mpsc, oneshot};

use super::core::Peer;
use super::outbox::{self, Inbox, Outbox};
use crate::backend::ProcessUsage;
use crate::config::Config;
use crate::ledger::SessionId;
use crate::procfs;

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
        outbound: Outbox,
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
    /// The means of enforcement changed state (the MPS control daemon).
    Enforcement(gpud_proto::EnforcementStatus),
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

/// Session ids, shared by the socket listener and the D-Bus service so that they never collide.
#[derive(Debug, Clone)]
pub struct SessionIds(Arc<AtomicU64>);

impl Default for SessionIds {
    fn default() -> Self {
        // Real sessions are numbered from 1.
        Self(Arc::new(AtomicU64::new(1)))
    }
}

impl SessionIds {
    /// A fresh id.
    pub fn next(&self) -> SessionId {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Who a new client is, as its transport tells: the kernel (SO_PEERCRED) for the socket, the
/// bus's connection credentials for D-Bus — never what the client says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Process id, when known.
    pub pid: Option<i32>,
    /// Effective uid.
    pub uid: u32,
    /// Effective gid, when known (else read from /proc, else the first group).
    pub gid: Option<u32>,
    /// Supplementary groups, when the transport read them (else read from /proc).
    pub groups: Option<Vec<u32>>,
}

/// Why a session did not open.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// The hub refused it (access, limits): tell the client this.
    Denied(ErrorBody),
    /// The hub has stopped.
    Stopping,
}

/// Room for the frames the hub queues to one session (`limits.event_queue`,
/// `limits.session_buffer`, `limits.session_buffer_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRoom {
    /// Frames.
    pub frames: usize,
    /// Bytes of their encoding.
    pub bytes: usize,
    /// Bytes queued to all sessions together.
    pub total: usize,
}

/// Opens a hub session for a new client: completes its peer from /proc, asks the hub to
/// admit it, and returns the queue (with `room`) the hub writes the session's frames to.
pub async fn open(
    hub: &mpsc::Sender<Command>,
    session: SessionId,
    credentials: Credentials,
    room: QueueRoom,
) -> Result<Inbox, Refused> {
    let peer = peer_of(credentials);
    let (outbound, frames) = outbox::outbox(room.frames, room.bytes, room.total);
    let (reply, verdict) = oneshot::channel();
    let open = Command::Open {
        session,
        peer,
        outbound,
        reply,
    };
    hub.send(open).await.map_err(|_| Refused::Stopping)?;
    match verdict.await {
        Ok(Ok(())) => Ok(frames),
        Ok(Err(body)) => Err(Refused::Denied(body)),
        Err(_) => Err(Refused::Stopping),
    }
}

/// The peer behind the credentials, with what /proc adds.
fn peer_of(c: Credentials) -> Peer {
    let pid = c.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
    let groups = c
        .groups
        .unwrap_or_else(|| procfs::supplementary_groups(pid));
    let gid = c
        .gid
        .or_else(|| (pid != 0).then(|| procfs::primary_gid(pid)).flatten())
        .or_else(|| groups.first().copied())
        .unwrap_or(u32::MAX);
    Peer {
        pid,
        uid: c.uid,
        gid,
        groups,
        process: procfs::process_name(pid),
        start: procfs::process_start(pid).unwrap_or(0),
        cgroups: procfs::cgroups(pid),
    }
}
