//! One client connection: credentials, handshake, then frames in and out until it ends.
//!
//! A session task owns its socket and nothing else. It parses and checks frames, forwards
//! requests to the hub, and writes what the hub queues for it. A bad frame gets an error
//! frame and closes this session only.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use gpud_proto::frame::{codec, from_payload, to_payload};
use gpud_proto::{ClientFrame, ErrorBody, ErrorCode, PROTOCOL_VERSION, ServerFrame};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodecError};
use tracing::debug;

use crate::config::Limits;
use crate::hub::outbox::Inbox;
use crate::hub::{self, Command, Credentials, QueueRoom, Refused};
use crate::ledger::SessionId;

/// Frames written before one flush.
const WRITE_BATCH: usize = 64;

/// How long a client has to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one connection until it closes.
pub async fn serve(
    stream: UnixStream,
    session: SessionId,
    hub: mpsc::Sender<Command>,
    limits: Limits,
    mps: crate::mps::Offer,
    host: bool,
) {
    let credentials = match stream.peer_cred() {
        Ok(c) => Credentials {
            pid: c.pid(),
            uid: c.uid(),
            gid: Some(c.gid()),
            groups: super::peer_groups::peer_groups(stream.as_fd()),
        },
        Err(e) => {
            debug!(session, error = %e, "no peer credentials; dropping connection");
            return;
        }
    };
    let (read, write) = stream.into_split();
    let mut reader = FramedRead::new(read, codec(limits.max_frame_bytes));
    let mut writer = FramedWrite::new(write, codec(gpud_proto::frame::MAX_SERVER_FRAME));

    let room = QueueRoom {
        frames: limits.event_queue,
        bytes: limits.session_buffer_bytes,
        total: limits.session_buffer_total_bytes,
    };
    let mut queue = match hub::open(&hub, session, credentials, room).await {
        Ok(queue) => queue,
        Err(Refused::Denied(body)) => {
            let _ = writer
                .send(to_payload(&ServerFrame::Error { error: body }))
                .await;
            return;
        }
        Err(Refused::Stopping) => return,
    };

    let mut bucket = TokenBucket::new(limits.requests_per_second);
    let end = run(
        session,
        &hub,
        &mps,
        &mut reader,
        &mut writer,
        &mut queue,
        &mut bucket,
        host,
    )
    .await;
    if let Err(body) = end {
        debug!(session, code = ?body.code, "closing session: {}", body.message);
        let _ = writer
            .send(to_payload(&ServerFrame::Error { error: body }))
            .await;
    }
    let _ = hub.send(Command::Close { session }).await;
}

type Reader = FramedRead<tokio::net::unix::OwnedReadHalf, tokio_util::codec::LengthDelimitedCodec>;
type Writer =
    FramedWrite<tokio::net::unix::OwnedWriteHalf, tokio_util::codec::LengthDelimitedCodec>;

/// The session after admission. Returns the error to send before closing, if any.
async fn run(
    session: SessionId,
    hub: &mpsc::Sender<Command>,
    mps: &crate::mps::Offer,
    reader: &mut Reader,
    writer: &mut Writer,
    queue: &mut Inbox,
    bucket: &mut TokenBucket,
    host: bool,
) -> Result<(), ErrorBody> {
    // Handshake.
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, reader.next()).await {
        Err(_) => {
            return Err(ErrorBody::new(
                ErrorCode::HelloRequired,
                "no hello within 10 s",
            ));
        }
        Ok(None) => return Ok(()),
        Ok(Some(frame)) => parse(frame)?,
    };
    match hello {
        ClientFrame::Hello { version, .. } if version == PROTOCOL_VERSION => {}
        ClientFrame::Hello { version, .. } => {
            return Err(ErrorBody::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "protocol version {version} is not supported; this gpud speaks {PROTOCOL_VERSION}"
                ),
            ));
        }
        ClientFrame::Request { .. } => {
            return Err(ErrorBody::new(
                ErrorCode::HelloRequired,
                "the first frame must be a hello",
            ));
        }
    }
    let welcome = ServerFrame::Welcome {
        version: PROTOCOL_VERSION,
        session,
        daemon: format!("gpud {}", env!("CARGO_PKG_VERSION")),
        features: features(mps.up(), host),
    };
    writer.send(to_payload(&welcome)).await.map_err(io_closed)?;

    loop {
        tokio::select! {
            biased;
            out = queue.recv() => {
                // None: the hub dropped us (shutdown, or we did not read fast enough).
                let Some(frame) = out else { return Ok(()) };
                let mut batch = vec![frame];
                while batch.len() < WRITE_BATCH {
                    let Some(more) = queue.try_recv() else { break };
                    batch.push(more);
                }
                let write = async {
                    for frame in &batch {
                        writer.feed(to_payload(frame)).await?;
                    }
                    SinkExt::<bytes::Bytes>::flush(writer).await
                };
                tokio::select! {
                    // What can be written goes first (a shutdown's last frames, too).
                    biased;
                    written = write => written.map_err(io_closed)?,
                    // A client that does not read blocks the write; once the hub has closed
                    // the session for it, the session ends here, socket and all.
                    () = queue.closed() => return Ok(()),
                }
            }
            frame = reader.next() => {
                let Some(frame) = frame else { return Ok(()) };
                match parse(frame)? {
                    ClientFrame::Request { id, op } => {
                        // Over its rate, the session waits here: it stops reading, and only
                        // the flooding client feels it.
                        if let Some(pause) = bucket.take(std::time::Instant::now()) {
                            tokio::time::sleep(pause).await;
                        }
                        if hub.send(Command::Request { session, id, op }).await.is_err() {
                            return Err(ErrorBody::new(ErrorCode::ShuttingDown, "gpud is stopping"));
                        }
                    }
                    ClientFrame::Hello { .. } => {
                        return Err(ErrorBody::new(ErrorCode::BadFrame, "hello sent twice"));
                    }
                }
            }
        }
    }
}

/// The welcome's features: MPS only while its daemon is up, so that a client never starts a
/// program as an MPS client of a daemon that is not there (CUDA would run it without limits);
/// host resources when they are booked.
fn features(mps_up: bool, host: bool) -> Vec<String> {
    let mut features = vec![
        gpud_proto::FEATURE_QUEUED.into(),
        gpud_proto::FEATURE_MULTI_DEVICE.into(),
        gpud_proto::FEATURE_ATTACH.into(),
    ];
    if mps_up {
        features.push(gpud_proto::FEATURE_MPS.into());
    }
    if host {
        features.push(gpud_proto::FEATURE_HOST.into());
    }
    features
}

/// Turns a raw frame into a client message, or the error that closes the session.
fn parse(frame: Result<bytes::BytesMut, io::Error>) -> Result<ClientFrame, ErrorBody> {
    let payload = frame.map_err(|e| {
        if e.get_ref()
            .is_some_and(|inner| inner.is::<LengthDelimitedCodecError>())
        {
            ErrorBody::new(
                ErrorCode::FrameTooLarge,
                "frame length exceeds limits.max_frame_bytes",
            )
        } else {
            ErrorBody::new(ErrorCode::BadFrame, format!("read failed: {e}"))
        }
    })?;
    from_payload(&payload)
        .map_err(|e| ErrorBody::new(ErrorCode::BadFrame, format!("not a valid message: {e}")))
}

fn io_closed(e: io::Error) -> ErrorBody {
    ErrorBody::new(ErrorCode::BadFrame, format!("write failed: {e}"))
}

/// The shortest pause of a session over its request rate.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// Requests per second with a burst of as many: a token per request, refilled continuously.
struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: std::time::Instant,
}

impl TokenBucket {
    fn new(per_second: usize) -> Self {
        let rate = per_second.max(1) as f64;
        Self {
            rate,
            tokens: rate,
            last: std::time::Instant::now(),
        }
    }

    /// Takes a token; returns how long to wait first when there is none.
    fn take(&mut self, now: std::time::Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.tokens -= 1.0;
        // Pause at least 10 ms at a time: a flooding session then wakes the daemon a hundred
        // times a second, with the requests it earned meanwhile, not once per request.
        (self.tokens < 0.0)
            .then(|| Duration::from_secs_f64(-self.tokens / self.rate).max(MIN_PAUSE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_the_rate() {
        let start = std::time::Instant::now();
        let mut b = TokenBucket::new(100);
        b.last = start;
        for _ in 0..100 {
            assert_eq!(b.take(start), None);
        }
        let wait = b.take(start).expect("empty after the burst");
        assert!((wait.as_secs_f64() - 0.01).abs() < 1e-6, "{wait:?}");
        // A second later the bucket is full again (and no fuller).
        let later = start + Duration::from_secs(1);
        for _ in 0..99 {
            assert_eq!(b.take(later), None);
        }
        assert!(b.take(later).is_some());
    }
}
