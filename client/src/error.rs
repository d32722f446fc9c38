//! Client errors.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::proto::{ErrorBody, ErrorCode};

/// What can go wrong talking to gpud.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The socket cannot be reached: no daemon answers there, or this user may not open it.
    #[error("cannot connect to gpud at {}: {source}{}", path.display(), connect_hint(path, source))]
    Connect {
        /// The socket path tried.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The daemon refused the session (not allowed, limits, version).
    #[error("gpud at {} refused the session: {}", path.display(), body.message)]
    Refused {
        /// The socket path.
        path: PathBuf,
        /// The daemon's reason.
        body: ErrorBody,
    },
    /// The daemon answered a request with an error.
    #[error("{}", .0.message)]
    Daemon(ErrorBody),
    /// The connection ended.
    #[error("the connection to gpud was lost")]
    Disconnected,
    /// The daemon sent something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The request makes no sense, or asks what this daemon does not speak; nothing was sent.
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// What to do about a failed connect: a permission problem names the socket's group, anything
/// else asks whether gpud runs there.
fn connect_hint(path: &Path, error: &io::Error) -> String {
    use std::os::unix::fs::MetadataExt;
    if error.kind() != io::ErrorKind::PermissionDenied {
        return " (is gpud running? the socket is chosen with --socket or GPUD_SOCKET)".into();
    }
    let owner = std::fs::metadata(path).ok().map(|m| {
        let group = nix::unistd::Group::from_gid(m.gid().into())
            .ok()
            .flatten()
            .map_or_else(|| format!("gid {}", m.gid()), |g| g.name);
        (group, m.mode() & 0o777)
    });
    match owner {
        Some((group, mode)) => format!(
            " (a permission problem, not a missing daemon: the socket is mode {mode:o}, group `{group}`; \
             ask an administrator to add this user to `{group}` (usermod -aG {group} USER), then log in again)"
        ),
        None => " (a permission problem, not a missing daemon: this user may not reach the socket or \
             its directory; ask an administrator for access, usually membership of the `gpud` group)"
            .into(),
    }
}

impl ClientError {
    /// Whether the error is a refusal of this user (the socket's permissions, or the daemon's
    /// access lists and admin rights) rather than a failure to reach gpud.
    pub fn is_permission(&self) -> bool {
        match self {
            ClientError::Connect { source, .. } => source.kind() == io::ErrorKind::PermissionDenied,
            _ => matches!(
                self.code(),
                Some(ErrorCode::NotAllowed | ErrorCode::PermissionDenied)
            ),
        }
    }

    /// The daemon's error code, when the daemon gave one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Daemon(b) | ClientError::Refused { body: b, .. } => Some(b.code),
            _ => None,
        }
    }
}

/// Results of client calls.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permission_error_says_so_and_names_the_group_instead_of_asking_if_gpud_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpud.sock");
        std::fs::write(&path, "").unwrap();
        let gid = nix::unistd::getegid();
        let group = nix::unistd::Group::from_gid(gid)
            .unwrap()
            .map_or_else(|| format!("gid {gid}"), |g| g.name);
        let e = ClientError::Connect {
            path: path.clone(),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        let text = e.to_string();
        assert!(e.is_permission());
        assert!(!text.contains("is gpud running"), "{text}");
        assert!(text.contains("permission problem"), "{text}");
        assert!(text.contains(&format!("group `{group}`")), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        let e = ClientError::Connect {
            path,
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert!(!e.is_permission());
        assert!(e.to_string().contains("is gpud running"), "{e}");
    }
}
