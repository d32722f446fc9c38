//! Sessions and admission: who is connected, who may connect, who may administer.

use std::collections::HashSet;

use gpud_proto::{ErrorBody, ErrorCode};
use tracing::{debug, info};

use super::{Core, Now};
use crate::ledger::SessionId;

/// A connected client process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Process id (0 when the kernel did not say).
    pub pid: u32,
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary groups (empty when unknown).
    pub groups: Vec<u32>,
    /// Process name (`comm`), or `?`.
    pub process: String,
    /// Process start time (clock ticks since boot), to tell the process from a later one that
    /// reuses its pid.
    pub start: u64,
    /// The process's cgroup paths (one per hierarchy, as /proc/PID/cgroup lists them), which
    /// place it inside a job's budget.
    pub cgroups: Vec<String>,
}

/// Sessions beyond `limits.max_sessions` that admins (root, the admin group) may open, so that
/// an operator can always look and act when users have taken every ordinary session.
pub const ADMIN_SESSIONS: usize = 16;

impl Peer {
    /// Whether the peer is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The allow lists, with group names resolved to gids (by the shell, which reads the group
/// database).
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Uids that may connect.
    pub allowed_uids: HashSet<u32>,
    /// Gids whose members may connect.
    pub allowed_gids: HashSet<u32>,
    /// Uids that may drain, undrain and revoke.
    pub admin_uids: HashSet<u32>,
    /// Gids whose members may drain, undrain and revoke.
    pub admin_gids: HashSet<u32>,
    /// Uids that may ask for the critical class.
    pub critical_uids: HashSet<u32>,
    /// Gids whose members may ask for the critical class.
    pub critical_gids: HashSet<u32>,
}

impl Access {
    /// Whether the peer may open a session.
    pub fn may_connect(&self, peer: &Peer) -> bool {
        self.allowed_uids.contains(&peer.uid)
            || self.allowed_gids.iter().any(|&g| peer.in_group(g))
            || self.is_admin(peer)
    }

    /// Whether the peer may ask for `class`: every class but `critical` is open to all who
    /// may connect.
    pub fn may_use(&self, peer: &Peer, class: gpud_proto::Class) -> bool {
        class != gpud_proto::Class::Critical
            || self.critical_uids.contains(&peer.uid)
            || self.critical_gids.iter().any(|&g| peer.in_group(g))
    }

    /// Whether the peer may drain, undrain and revoke.
    pub fn is_admin(&self, peer: &Peer) -> bool {
        self.admin_uids.contains(&peer.uid) || self.admin_gids.iter().any(|&g| peer.in_group(g))
    }
}

impl Core {
    /// A client connected: admitted (its requests are served from now on) or refused with
    /// the error to send it.
    pub fn open(&mut self, now: Now, session: SessionId, peer: Peer) -> Result<(), ErrorBody> {
        let verdict = self.admit(&peer);
        match &verdict {
            Ok(()) => {
                debug!(session, pid = peer.pid, uid = peer.uid, process = %peer.process, "session opened");
                self.sessions.insert(session, peer);
            }
            Err(why) => {
                info!(session, pid = peer.pid, uid = peer.uid, process = %peer.process, reason = %why.message, "session refused");
            }
        }
        self.end_step(now);
        verdict
    }

    /// A session ended (EOF, error, or it did not read what it was sent): everything it held
    /// is freed.
    pub fn close(&mut self, now: Now, session: SessionId) {
        self.forget_withheld(session);
        self.budgets.session_closed(session);
        if let Some(peer) = self.sessions.remove(&session) {
            let gone = self.ledger.disconnect(now.at, session);
            self.end_programs_of(now, session);
            self.observer.closed(now.at, session, &gone.leases);
            debug!(
                session,
                pid = peer.pid,
                leases = gone.leases.len(),
                waiters = gone.waiters,
                "session closed"
            );
        }
        self.end_step(now);
    }

    /// Sessions connected now.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    fn admit(&self, peer: &Peer) -> Result<(), ErrorBody> {
        let limits = &self.settings.limits;
        if !self.settings.access.may_connect(peer) {
            return Err(ErrorBody::new(
                ErrorCode::NotAllowed,
                format!(
                    "uid {} (gid {}) may not use gpud: add it to access.allowed_uids or a group in access.allowed_groups",
                    peer.uid, peer.gid
                ),
            ));
        }
        // Admins may pass the cap a little, so that an operator can always look and act.
        let cap = if self.settings.access.is_admin(peer) {
            limits.max_sessions.saturating_add(ADMIN_SESSIONS)
        } else {
            limits.max_sessions
        };
        if self.sessions.len() >= cap {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "gpud serves at most {} sessions (limits.max_sessions)",
                    limits.max_sessions
                ),
            ));
        }
        let mine = self.sessions.values().filter(|p| p.uid == peer.uid).count();
        if mine >= limits.max_sessions_per_uid {
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

    /// Whether the session's peer may administer.
    pub(super) fn is_admin(&self, session: SessionId) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|p| self.settings.access.is_admin(p))
    }

    /// The pid and start time of a session's peer.
    pub(super) fn peer(&self, session: SessionId) -> Option<&Peer> {
        self.sessions.get(&session)
    }
}
