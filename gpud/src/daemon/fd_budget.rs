//! File descriptors: every session is one, and running out locks everybody out (accept fails
//! for root too). So gpud raises its soft limit to the hard one at start, and caps sessions
//! below it, keeping room for the daemon's own descriptors and for admin sessions, which may
//! pass `limits.max_sessions` by [`ADMIN_SESSIONS`].

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tracing::{info, warn};

use crate::config::Limits;
use crate::hub::ADMIN_SESSIONS;

/// Descriptors kept for everything that is not a session (journal, listeners, NVML, D-Bus,
/// a session being refused).
const OWN_FDS: u64 = 64;

/// Raises the soft descriptor limit to the hard one; returns the limit now in force.
pub fn raise_limit() -> u64 {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                info!(from = soft, to = hard, "raised the open-file limit");
                hard
            }
            Err(e) => {
                warn!(error = %e, soft, hard, "cannot raise the open-file limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(e) => {
            warn!(error = %e, "cannot read the open-file limit");
            1024
        }
    }
}

/// Lowers `limits.max_sessions` (and the per-uid cap) so that every session, the admin
/// sessions and gpud's own descriptors fit in `nofile`.
pub fn fit(limits: &mut Limits, nofile: u64) {
    let room = nofile.saturating_sub(OWN_FDS + ADMIN_SESSIONS as u64);
    let room = usize::try_from(room).unwrap_or(usize::MAX).max(1);
    if limits.max_sessions > room {
        warn!(
            configured = limits.max_sessions,
            allowed = room,
            nofile,
            "limits.max_sessions lowered to fit the open-file limit (raise LimitNOFILE)"
        );
        limits.max_sessions = room;
    }
    limits.max_sessions_per_uid = limits.max_sessions_per_uid.min(limits.max_sessions);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_fit_under_the_descriptor_limit_with_room_for_admins() {
        let mut limits = Limits {
            max_sessions: 4096,
            max_sessions_per_uid: 1024,
            ..Limits::default()
        };
        fit(&mut limits, 1024);
        assert_eq!(limits.max_sessions, 1024 - 64 - ADMIN_SESSIONS);
        assert_eq!(limits.max_sessions_per_uid, 1024 - 64 - ADMIN_SESSIONS);
        let mut roomy = Limits::default();
        let before = roomy.max_sessions;
        fit(&mut roomy, 1 << 20);
        assert_eq!(roomy.max_sessions, before);
        let mut tiny = Limits::default();
        fit(&mut tiny, 10);
        assert_eq!(tiny.max_sessions, 1);
    }
}
