//! A small synchronous gpud client: one Unix socket, frames as docs/PROTOCOL.md describes
//! (4-byte big-endian length, JSON), callers that block on their own reply, and one reader
//! thread that delivers replies and hands events to a callback. No async runtime: the
//! interposer lives inside foreign programs and must stay small and predictable.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gpud_proto::frame::MAX_SERVER_FRAME;
use gpud_proto::{
    AcquireArgs, ClientFrame, ErrorBody, Event, LeaseId, LeaseInfo, Op, PROTOCOL_VERSION,
    Placement, ServerFrame,
};
use serde_json::Value;
use thiserror::Error;

/// What went wrong talking to gpud.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The socket could not be reached or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// gpud closed the session, or answered something that is not the protocol.
    #[error("{0}")]
    Protocol(String),
    /// The connection ended before the answer came.
    #[error("the connection to gpud ended")]
    Lost,
    /// gpud refused the request.
    #[error("{}: {}", code_name(.0), .0.message)]
    Refused(ErrorBody),
}

fn code_name(e: &ErrorBody) -> String {
    serde_json::to_value(e.code)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| format!("{:?}", e.code))
}

/// What the reader thread tells the owner.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// An event about a lease of this session.
    Event(Event),
    /// The connection ended (EOF, a read error, a session error frame).
    Lost(String),
}

/// The answer to one request: the `ok` payload, or gpud's error.
type Answer = Result<Value, ErrorBody>;

#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, Sender<Answer>>,
    closed: bool,
}

/// A session with gpud.
pub struct Connection {
    writer: Mutex<UnixStream>,
    pending: Arc<Mutex<Pending>>,
    next_id: Mutex<u64>,
    features: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind, still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn write_frame(stream: &mut UnixStream, value: &impl serde::Serialize) -> std::io::Result<()> {
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame)
}

fn read_frame(stream: &mut UnixStream) -> Result<Value, ClientError> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_SERVER_FRAME {
        return Err(ClientError::Protocol(format!(
            "a frame of {len} bytes, over the limit"
        )));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(format!("bad frame: {e}")))
}

impl Connection {
    /// Connects, says hello and starts the reader thread, which calls `on_notice` for every
    /// event and once when the connection ends.
    pub fn connect(
        socket: &Path,
        client: &str,
        on_notice: impl Fn(Notice) + Send + 'static,
    ) -> Result<Self, ClientError> {
        let mut stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let hello = ClientFrame::Hello {
            version: PROTOCOL_VERSION,
            client: Some(client.to_string()),
        };
        write_frame(&mut stream, &hello)?;
        let welcome = read_frame(&mut stream)?;
        let features = match serde_json::from_value::<ServerFrame>(welcome) {
            Ok(ServerFrame::Welcome { features, .. }) => features,
            Ok(ServerFrame::Error { error }) => return Err(ClientError::Refused(error)),
            Ok(other) => {
                return Err(ClientError::Protocol(format!(
                    "expected a welcome, got {other:?}"
                )));
            }
            Err(e) => return Err(ClientError::Protocol(format!("bad welcome: {e}"))),
        };
        stream.set_read_timeout(None)?;
        let mut reader = stream.try_clone()?;
        let pending = Arc::new(Mutex::new(Pending::default()));
        let theirs = pending.clone();
        std::thread::Builder::new()
            .name("gpud-preload".into())
            .spawn(move || read_loop(&mut reader, &theirs, &on_notice))?;
        Ok(Self {
            writer: Mutex::new(stream),
            pending,
            next_id: Mutex::new(1),
            features,
        })
    }

    /// Whether the welcome listed `feature`.
    pub fn has_feature(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }

    /// Sends `op` (the request's `op` object); the receiver gets the answer. Dropping the
    /// receiver leaves the answer to the reader thread, which logs a refusal.
    pub fn send(&self, op: Value) -> Result<Receiver<Answer>, ClientError> {
        let (tx, rx) = channel();
        let id = {
            let mut next = lock(&self.next_id);
            let id = *next;
            *next += 1;
            id
        };
        {
            let mut p = lock(&self.pending);
            if p.closed {
                return Err(ClientError::Lost);
            }
            p.waiting.insert(id, tx);
        }
        let frame = serde_json::json!({"type": "request", "id": id, "op": op});
        let sent = write_frame(&mut lock(&self.writer), &frame);
        if let Err(e) = sent {
            lock(&self.pending).waiting.remove(&id);
            return Err(e.into());
        }
        Ok(rx)
    }

    /// Sends `op` and waits for its answer (as long as gpud takes: a waiting acquire or grow
    /// carries its own timeout, and a lost connection ends the wait).
    pub fn call(&self, op: Value) -> Result<Value, ClientError> {
        let rx = self.send(op)?;
        match rx.recv() {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ClientError::Refused(e)),
            Err(_) => Err(ClientError::Lost),
        }
    }

    /// Acquires a lease on the device with `uuid`: memory, or the compute slot.
    pub fn acquire(
        &self,
        uuid: &str,
        vram_bytes: u64,
        compute: bool,
        class: gpud_proto::Class,
        label: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<LeaseInfo, ClientError> {
        let op = Op::Acquire(AcquireArgs {
            device: Placement::Uuid(uuid.to_string()),
            vram_bytes,
            compute,
            class,
            label,
            timeout_ms: timeout.map(|t| t.as_millis() as u64),
            ..AcquireArgs::default()
        });
        let answer = self.call(to_value(&op)?)?;
        match answer.get("granted") {
            Some(g) => serde_json::from_value(g.clone())
                .map_err(|e| ClientError::Protocol(format!("bad grant: {e}"))),
            None => Err(ClientError::Protocol(format!("expected a grant: {answer}"))),
        }
    }

    /// The `resize` op for `lease` to `vram_bytes` (to send with [`Connection::send`] when the
    /// answer does not matter: a shrink is immediate).
    pub fn resize_op(lease: LeaseId, vram_bytes: u64, timeout: Option<Duration>) -> Value {
        let op = Op::Resize {
            lease,
            vram_bytes,
            timeout_ms: timeout.map(|t| t.as_millis() as u64),
            host_mem_bytes: None,
        };
        to_value(&op).unwrap_or(Value::Null)
    }

    /// Resizes `lease` and waits: its size now.
    pub fn resize(
        &self,
        lease: LeaseId,
        vram_bytes: u64,
        timeout: Option<Duration>,
    ) -> Result<u64, ClientError> {
        let answer = self.call(Self::resize_op(lease, vram_bytes, timeout))?;
        answer
            .get("resized")
            .and_then(|r| r.get("vram_bytes"))
            .and_then(Value::as_u64)
            .ok_or_else(|| ClientError::Protocol(format!("expected resized: {answer}")))
    }

    /// The `release` op for `lease`.
    pub fn release_op(lease: LeaseId) -> Value {
        to_value(&Op::Release { lease }).unwrap_or(Value::Null)
    }

    /// Tells gpud that this process uses `lease`, enforced by the interposer (only when the
    /// welcome lists `attach`). The answer is not awaited; a refusal is logged.
    pub fn attach(&self, lease: LeaseId) -> Result<(), ClientError> {
        let op = serde_json::json!({"attach": {
            "lease": lease,
            "pid": std::process::id(),
            "enforced_by": "preload",
            "end_with_session": false,
        }});
        self.send(op).map(drop)
    }
}

fn to_value(op: &Op) -> Result<Value, ClientError> {
    serde_json::to_value(op).map_err(|e| ClientError::Protocol(e.to_string()))
}

fn read_loop(stream: &mut UnixStream, pending: &Mutex<Pending>, on_notice: &dyn Fn(Notice)) {
    let why = loop {
        let frame = match read_frame(stream) {
            Ok(v) => v,
            Err(ClientError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break "gpud closed the connection".to_string();
            }
            Err(e) => break e.to_string(),
        };
        match frame.get("type").and_then(Value::as_str) {
            Some("reply") => deliver(pending, &frame),
            // An event this build does not know needs nothing done about it.
            Some("event") => {
                if let Ok(ServerFrame::Event { event }) = serde_json::from_value(frame.clone()) {
                    on_notice(Notice::Event(event));
                }
            }
            Some("error") => break format!("gpud ended the session: {}", frame["error"]),
            _ => {}
        }
    };
    let waiting = {
        let mut p = lock(pending);
        p.closed = true;
        std::mem::take(&mut p.waiting)
    };
    // Dropping the senders wakes every caller with `Lost`.
    drop(waiting);
    on_notice(Notice::Lost(why));
}

fn deliver(pending: &Mutex<Pending>, frame: &Value) {
    let Some(id) = frame.get("id").and_then(Value::as_u64) else {
        return;
    };
    let outcome = &frame["outcome"];
    let answer: Answer = match outcome.get("error") {
        Some(e) => Err(serde_json::from_value(e.clone()).unwrap_or_else(|_| {
            ErrorBody::new(
                gpud_proto::ErrorCode::Internal,
                format!("unreadable error {e}"),
            )
        })),
        None => Ok(outcome.get("ok").cloned().unwrap_or(Value::Null)),
    };
    let waiter = lock(pending).waiting.remove(&id);
    let unheard = match waiter {
        Some(tx) => tx.send(answer).err().map(|e| e.0),
        None => Some(answer),
    };
    if let Some(Err(e)) = unheard {
        crate::log::error(&format!(
            "gpud refused request {id}: {}",
            ClientError::Refused(e)
        ));
    }
}
