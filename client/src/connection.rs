//! The connection driver: one task owns the socket, writes requests, routes replies to their
//! callers and events to their leases.
//!
//! Async and blocking clients share it; they differ only in where the driver runs (the
//! caller's runtime, or a thread of its own) and in how they wait for answers.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures_util::{SinkExt, StreamExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use crate::error::{ClientError, Result};
use crate::proto::frame::{MAX_REQUEST_FRAME, MAX_SERVER_FRAME, codec, from_payload, to_payload};
use crate::proto::{
    ClientFrame, ErrorCode, Event, LeaseInfo, Op, Outcome, PROTOCOL_VERSION, Reply, RequestId,
    ServerFrame,
};
use crate::reservation::LeaseId;

/// What a lease learns from the daemon after its grant.
#[derive(Debug, Default)]
pub(crate) struct LeaseFlags {
    pub yield_requested: AtomicBool,
    /// Revoked by the daemon, or the connection is gone: the lease no longer protects anything.
    pub lost: AtomicBool,
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
    /// A request whose answer someone waits for.
    Call {
        id: RequestId,
        op: Op,
        answer: oneshot::Sender<Result<Answer>>,
    },
    /// A request whose answer nobody needs (release on drop, cancel on drop).
    Fire { id: RequestId, op: Op },
}

/// A cheap, cloneable handle to a running driver.
#[derive(Clone)]
pub(crate) struct Handle {
    tx: mpsc::UnboundedSender<ToDriver>,
    next_id: Arc<AtomicU64>,
    pub session: u64,
}

impl Handle {
    pub fn next_id(&self) -> RequestId {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request; the receiver yields its answer.
    pub fn call(&self, id: RequestId, op: Op) -> Result<oneshot::Receiver<Result<Answer>>> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .send(ToDriver::Call { id, op, answer })
            .map_err(|_| ClientError::Disconnected)?;
        Ok(rx)
    }

    /// Sends a request and forgets it.
    pub fn fire(&self, op: Op) {
        let id = self.next_id();
        // If the driver is gone, so is the connection, and the daemon has freed everything.
        let _ = self.tx.send(ToDriver::Fire { id, op });
    }
}

type Reader = FramedRead<tokio::net::unix::OwnedReadHalf, LengthDelimitedCodec>;
type Writer = FramedWrite<tokio::net::unix::OwnedWriteHalf, LengthDelimitedCodec>;

/// Connects and says hello. Returns the handle and the driver future to run.
pub(crate) async fn connect(
    path: &Path,
    client_name: Option<String>,
) -> Result<(
    Handle,
    impl std::future::Future<Output = ()> + Send + 'static,
)> {
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
        client: client_name,
    };
    writer
        .send(to_payload(&hello))
        .await
        .map_err(|_| ClientError::Disconnected)?;
    let session = match reader.next().await {
        Some(Ok(bytes)) => match from_payload::<ServerFrame>(&bytes) {
            Ok(ServerFrame::Welcome { session, .. }) => session,
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
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = Handle {
        tx,
        next_id: Arc::new(AtomicU64::new(1)),
        session,
    };
    // The driver shares only the id counter: it must not keep itself alive through a sender.
    let ids = handle.next_id.clone();
    Ok((handle, drive(reader, writer, rx, ids)))
}

struct Driver {
    pending: HashMap<RequestId, Option<oneshot::Sender<Result<Answer>>>>,
    leases: HashMap<LeaseId, (mpsc::UnboundedSender<Event>, Arc<LeaseFlags>)>,
    ids: Arc<AtomicU64>,
}

async fn drive(
    mut reader: Reader,
    mut writer: Writer,
    mut rx: mpsc::UnboundedReceiver<ToDriver>,
    ids: Arc<AtomicU64>,
) {
    let mut d = Driver {
        pending: HashMap::new(),
        leases: HashMap::new(),
        ids,
    };
    loop {
        tokio::select! {
            command = rx.recv() => {
                // Every handle is gone: closing the socket releases whatever is left.
                let Some(command) = command else { break };
                let (id, op, answer) = match command {
                    ToDriver::Call { id, op, answer } => (id, op, Some(answer)),
                    ToDriver::Fire { id, op } => (id, op, None),
                };
                d.pending.insert(id, answer);
                if writer.feed(to_payload(&ClientFrame::Request { id, op })).await.is_err() {
                    break;
                }
                // Write everything queued in one flush.
                let mut broken = false;
                while let Ok(more) = rx.try_recv() {
                    let (id, op, answer) = match more {
                        ToDriver::Call { id, op, answer } => (id, op, Some(answer)),
                        ToDriver::Fire { id, op } => (id, op, None),
                    };
                    d.pending.insert(id, answer);
                    if writer.feed(to_payload(&ClientFrame::Request { id, op })).await.is_err() {
                        broken = true;
                        break;
                    }
                }
                if broken || SinkExt::<bytes::Bytes>::flush(&mut writer).await.is_err() {
                    break;
                }
            }
            frame = reader.next() => {
                let Some(Ok(bytes)) = frame else { break };
                let Ok(frame) = from_payload::<ServerFrame>(&bytes) else { break };
                let mut releases = Vec::new();
                d.dispatch(frame, &mut releases);
                for lease in releases {
                    let id = d.ids.fetch_add(1, Ordering::Relaxed);
                    d.pending.insert(id, None);
                    if writer.send(to_payload(&ClientFrame::Request { id, op: Op::Release { lease } })).await.is_err() {
                        break;
                    }
                }
            }
        }
    }
    for (_, answer) in d.pending.drain() {
        if let Some(a) = answer {
            let _ = a.send(Err(ClientError::Disconnected));
        }
    }
    for (_, (_, flags)) in d.leases.drain() {
        flags.lost.store(true, Ordering::Release);
    }
}

impl Driver {
    /// Routes one frame. Grants that nobody waits for any more are queued for release.
    fn dispatch(&mut self, frame: ServerFrame, releases: &mut Vec<LeaseId>) {
        match frame {
            ServerFrame::Reply { id, outcome } => {
                let Some(answer) = self.pending.remove(&id) else {
                    return;
                };
                let result = match outcome {
                    Outcome::Ok(Reply::Granted(info)) => {
                        let (tx, events) = mpsc::unbounded_channel();
                        let flags = Arc::new(LeaseFlags::default());
                        self.leases.insert(info.lease, (tx, flags.clone()));
                        Ok(Answer::Granted(info, LeaseChannel { events, flags }))
                    }
                    Outcome::Ok(reply) => {
                        if let Reply::Released { lease } = &reply {
                            self.leases.remove(lease);
                        }
                        Ok(Answer::Reply(reply))
                    }
                    Outcome::Error(body) => Err(ClientError::Daemon(body)),
                };
                match answer {
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
            ServerFrame::Event { event } => {
                let lease = match &event {
                    Event::YieldRequested { lease, .. } => Some(*lease),
                    Event::Revoked { lease, .. } => Some(*lease),
                    Event::ShuttingDown => None,
                };
                match lease {
                    Some(lease) => {
                        let revoked = matches!(event, Event::Revoked { .. });
                        if let Some((tx, flags)) = self.leases.get(&lease) {
                            if revoked {
                                flags.lost.store(true, Ordering::Release);
                            } else {
                                flags.yield_requested.store(true, Ordering::Release);
                            }
                            let _ = tx.send(event);
                        }
                        if revoked {
                            self.leases.remove(&lease);
                        }
                    }
                    None => {
                        for (tx, _) in self.leases.values() {
                            let _ = tx.send(event.clone());
                        }
                    }
                }
            }
            ServerFrame::Error { .. } | ServerFrame::Welcome { .. } => {}
        }
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
