//! Frames held back while the journal cannot be written (a full disk, an I/O error).
//!
//! A client that hears of a grant or a resize relies on it; if gpud then died before the
//! journal had it, the restarted daemon would grant the same memory again. So while a write
//! fails, a frame that announces a recorded change (a grant, a resize, a re-adoption) waits,
//! and so does everything after it to the same session, in order. Other sessions are served
//! as usual. The write is tried again every [`RETRY`]; once it succeeds, the held frames go
//! out ahead of anything newer.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use gpud_proto::{Outcome, Reply, ServerFrame};
use tracing::{error, info};

use super::timers::Timer;
use super::{Action, Core, Now};
use crate::ledger::SessionId;

/// How often a failed journal write is tried again.
pub(super) const RETRY: Duration = Duration::from_millis(200);

/// Per session, the frames waiting for the journal.
#[derive(Debug, Default)]
pub(super) struct Withheld {
    /// The last write failed; it has not succeeded since.
    stalled: bool,
    queues: BTreeMap<SessionId, VecDeque<ServerFrame>>,
}

impl Withheld {
    fn must_hold(&self, session: SessionId, frame: &ServerFrame) -> bool {
        self.stalled && (self.queues.contains_key(&session) || announces(frame))
    }
}

/// Whether a frame tells its session of a change the journal records.
fn announces(frame: &ServerFrame) -> bool {
    matches!(
        frame,
        ServerFrame::Reply {
            outcome: Outcome::Ok(Reply::Granted(_) | Reply::Resized { .. } | Reply::Adopted(_)),
            ..
        }
    )
}

impl Core {
    /// The shell reports how a [`Action::FlushJournal`] went. After a failure, announcements
    /// still queued (and later ones) are held and the write is retried; after the first
    /// success since, the held frames are queued, ahead of newer actions.
    pub fn journal_flushed(&mut self, now: Now, written: bool) {
        if !written {
            if !self.withheld.stalled {
                error!("grants and resizes are held back until the lease journal can be written");
            }
            self.withheld.stalled = true;
            for action in std::mem::take(&mut self.actions) {
                match action {
                    Action::Send { session, frame } => self.send_now_or_hold(session, frame),
                    other => self.actions.push_back(other),
                }
            }
            self.timers.set(Timer::JournalRetry, Some(now.at + RETRY));
            return;
        }
        if !self.withheld.stalled {
            return;
        }
        self.withheld.stalled = false;
        self.timers.set(Timer::JournalRetry, None);
        let held = std::mem::take(&mut self.withheld.queues);
        info!(
            frames = held.values().map(VecDeque::len).sum::<usize>(),
            "lease journal written again; held frames go out"
        );
        let released = held
            .into_iter()
            .flat_map(|(session, frames)| frames.into_iter().map(move |frame| (session, frame)));
        let newer = std::mem::take(&mut self.actions);
        self.actions = released
            .map(|(session, frame)| Action::Send { session, frame })
            .chain(newer)
            .collect();
    }

    /// Whether frames are held back because the last journal write failed.
    pub fn journal_stalled(&self) -> bool {
        self.withheld.stalled
    }

    /// Queues a frame for its session, unless the journal holds it back.
    pub(super) fn send_now_or_hold(&mut self, session: SessionId, frame: ServerFrame) {
        if self.withheld.must_hold(session, &frame) {
            self.withheld
                .queues
                .entry(session)
                .or_default()
                .push_back(frame);
        } else {
            self.actions.push_back(Action::Send { session, frame });
        }
    }

    /// A closed session's held frames have nobody to go to.
    pub(super) fn forget_withheld(&mut self, session: SessionId) {
        self.withheld.queues.remove(&session);
    }

    /// The retry timer: write again what is pending.
    pub(super) fn retry_journal(&mut self) {
        if self.withheld.stalled {
            self.actions.push_back(Action::FlushJournal);
        }
    }
}
