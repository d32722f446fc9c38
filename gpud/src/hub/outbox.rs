//! The frames on their way to one session: a queue bounded in frames and in bytes.
//!
//! A client that asks and does not read would otherwise make gpud hold its answers: a status
//! report is megabytes, and a frame count alone let one session grow the daemon by hundreds
//! of MiB. The hub counts each frame's encoded size when it queues it, the session's task
//! uncounts it when it takes it off; past the byte budget the hub closes the session, as it
//! does past the frame count. One frame may exceed the budget when nothing else waits, so
//! that a large (but framable) answer still goes out.
//!
//! The sessions' backlogs together have a cap too: many sessions that do not read would
//! otherwise each hold a full budget. Past it, a session with a backlog is closed when the
//! hub queues its next frame; a session that reads (nothing queued) is never refused.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use gpud_proto::ServerFrame;
use tokio::sync::{mpsc, watch};

/// The hub's end: where it queues a session's frames.
#[derive(Debug)]
pub struct Outbox {
    frames: mpsc::Sender<Queued>,
    /// Dropped with the outbox: tells a session blocked writing that it was closed.
    _open: watch::Sender<()>,
    queued_bytes: Arc<AtomicUsize>,
    byte_budget: usize,
    total_budget: usize,
}

/// Bytes queued to every session of this process. One daemon runs per process, so one count
/// serves both of its adapters (the socket and D-Bus).
static QUEUED_TOTAL: AtomicUsize = AtomicUsize::new(0);

/// Bytes queued to all sessions now.
pub fn queued_total() -> usize {
    QUEUED_TOTAL.load(Ordering::Acquire)
}

/// The session's end: the frames, in order.
#[derive(Debug)]
pub struct Inbox {
    frames: mpsc::Receiver<Queued>,
    open: watch::Receiver<()>,
    queued_bytes: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct Queued {
    frame: ServerFrame,
    bytes: usize,
}

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undelivered {
    /// The session does not read: its frames or bytes are over the limits.
    Backlog,
    /// The session's task has ended.
    Gone,
}

/// A queue of at most `frames` frames and (but for one frame alone) `bytes` bytes, among
/// sessions that together hold at most `total` bytes.
pub fn outbox(frames: usize, bytes: usize, total: usize) -> (Outbox, Inbox) {
    let (tx, rx) = mpsc::channel(frames.max(1));
    let (open_tx, open_rx) = watch::channel(());
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    let out = Outbox {
        frames: tx,
        _open: open_tx,
        queued_bytes: queued_bytes.clone(),
        byte_budget: bytes,
        total_budget: total,
    };
    let inbox = Inbox {
        frames: rx,
        open: open_rx,
        queued_bytes,
    };
    (out, inbox)
}

impl Outbox {
    /// Queues `frame`, whose encoding is `bytes` long ([`encoded_len`]).
    pub fn offer(&self, frame: ServerFrame, bytes: usize) -> Result<(), Undelivered> {
        let waiting = self.queued_bytes.load(Ordering::Acquire);
        let over_own = waiting.saturating_add(bytes) > self.byte_budget;
        let over_all = queued_total().saturating_add(bytes) > self.total_budget;
        if waiting > 0 && (over_own || over_all) {
            return Err(Undelivered::Backlog);
        }
        // Counted before it is sent, so that the session never uncounts what is not counted.
        self.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        QUEUED_TOTAL.fetch_add(bytes, Ordering::AcqRel);
        match self.frames.try_send(Queued { frame, bytes }) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
                QUEUED_TOTAL.fetch_sub(bytes, Ordering::AcqRel);
                Err(match e {
                    mpsc::error::TrySendError::Full(_) => Undelivered::Backlog,
                    mpsc::error::TrySendError::Closed(_) => Undelivered::Gone,
                })
            }
        }
    }
}

impl Inbox {
    /// The next frame; `None` once the hub has dropped the outbox.
    pub async fn recv(&mut self) -> Option<ServerFrame> {
        let queued = self.frames.recv().await?;
        Some(self.taken(queued))
    }

    /// Resolves once the hub has closed the session (dropped the outbox), even with frames
    /// still queued: a session blocked writing to a client that does not read then ends,
    /// instead of holding its socket until the client goes.
    pub async fn closed(&mut self) {
        while self.open.changed().await.is_ok() {}
    }

    /// The next frame if one is queued now.
    pub fn try_recv(&mut self) -> Option<ServerFrame> {
        let queued = self.frames.try_recv().ok()?;
        Some(self.taken(queued))
    }

    fn taken(&self, queued: Queued) -> ServerFrame {
        self.queued_bytes.fetch_sub(queued.bytes, Ordering::AcqRel);
        QUEUED_TOTAL.fetch_sub(queued.bytes, Ordering::AcqRel);
        queued.frame
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // Frames never taken leave the count with the queue.
        self.frames.close();
        while let Ok(queued) = self.frames.try_recv() {
            QUEUED_TOTAL.fetch_sub(queued.bytes, Ordering::AcqRel);
        }
    }
}

/// The length of a frame's encoding, without keeping the encoding.
pub fn encoded_len(frame: &ServerFrame) -> usize {
    let mut counter = Counter(0);
    // Our frames always serialize (gpud_proto::frame::to_payload); the count is then exact.
    let _ = serde_json::to_writer(&mut counter, frame);
    counter.0
}

struct Counter(usize);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use gpud_proto::frame::to_payload;
    use gpud_proto::{Outcome, Reply};

    use super::*;

    fn pong(id: u64) -> ServerFrame {
        ServerFrame::Reply {
            id,
            outcome: Outcome::Ok(Reply::Pong),
        }
    }

    #[test]
    fn the_length_is_the_encodings() {
        let frame = pong(12345);
        assert_eq!(encoded_len(&frame), to_payload(&frame).len());
    }

    #[tokio::test]
    async fn bytes_bound_the_backlog_and_taking_frames_makes_room() {
        let one = encoded_len(&pong(1));
        let (out, mut inbox) = outbox(1000, 3 * one, usize::MAX);
        for id in 0..3 {
            out.offer(pong(id), one).unwrap();
        }
        assert_eq!(out.offer(pong(3), one), Err(Undelivered::Backlog));
        assert_eq!(inbox.recv().await, Some(pong(0)));
        out.offer(pong(3), one).expect("room again");
        for id in 1..4 {
            assert_eq!(inbox.try_recv(), Some(pong(id)));
        }
        assert_eq!(inbox.try_recv(), None);
        // Alone, a frame larger than the budget still goes; behind it, nothing more.
        out.offer(pong(4), 10 * one).expect("a large frame alone");
        assert_eq!(out.offer(pong(5), 1), Err(Undelivered::Backlog));
        assert_eq!(inbox.recv().await, Some(pong(4)));
        out.offer(pong(5), one).unwrap();
    }

    #[tokio::test]
    async fn past_the_total_only_sessions_with_a_backlog_are_refused() {
        let one = encoded_len(&pong(1));
        // A total smaller than one frame: every queue's first frame goes, no second does.
        let (slow, _slow_inbox) = outbox(1000, usize::MAX, 1);
        let (reader, mut reader_inbox) = outbox(1000, usize::MAX, 1);
        slow.offer(pong(0), one).unwrap();
        assert_eq!(slow.offer(pong(1), one), Err(Undelivered::Backlog));
        for id in 0..3 {
            reader.offer(pong(id), one).expect("a session that reads");
            assert_eq!(reader_inbox.recv().await, Some(pong(id)));
        }
    }

    #[tokio::test]
    async fn a_closed_session_is_told_while_frames_still_wait() {
        let (out, mut inbox) = outbox(8, usize::MAX, usize::MAX);
        out.offer(pong(0), 1).unwrap();
        let waiting = tokio::spawn(async move {
            inbox.closed().await;
            inbox
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "open while the hub keeps the outbox"
        );
        drop(out);
        let mut inbox = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("told")
            .unwrap();
        // What was queued can still be read.
        assert_eq!(inbox.try_recv(), Some(pong(0)));
    }

    #[tokio::test]
    async fn frames_bound_it_too_and_a_gone_session_is_told_apart() {
        let (out, inbox) = outbox(2, usize::MAX, usize::MAX);
        out.offer(pong(0), 1).unwrap();
        out.offer(pong(1), 1).unwrap();
        assert_eq!(out.offer(pong(2), 1), Err(Undelivered::Backlog));
        drop(inbox);
        assert_eq!(out.offer(pong(3), 1), Err(Undelivered::Gone));
    }
}
