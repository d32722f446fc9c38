//! The listening socket: created safely, never stolen from a running daemon.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;
use tokio::net::UnixListener;
use tracing::{info, warn};

/// Why the socket could not be set up.
#[derive(Debug, Error)]
pub enum ListenError {
    /// Another daemon answers on the path.
    #[error("another gpud is already answering on {0}")]
    AlreadyRunning(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// A filesystem or socket call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why it failed.
        source: io::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ListenError + 'a {
    move |source| ListenError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Binds the socket at `path` with `mode`, owned by `group` when possible. A stale socket file
/// (nobody answers) is replaced; a live one is left alone.
pub fn bind(path: &Path, mode: u32, group: Option<&str>) -> Result<UnixListener, ListenError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            std::fs::create_dir_all(parent).map_err(io_err("cannot create", parent))?;
            // World-traversable but writable by the owner only: the socket's own mode decides
            // who may connect.
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))
                .map_err(io_err("cannot set permissions of", parent))?;
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ListenError::AlreadyRunning(path.to_path_buf()));
            }
            warn!(path = %path.display(), "replacing a stale socket file");
            std::fs::remove_file(path).map_err(io_err("cannot remove stale socket", path))?;
        }
        Ok(_) => return Err(ListenError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("cannot inspect", path)(e)),
    }
    let listener = UnixListener::bind(path).map_err(io_err("cannot bind", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io_err("cannot set permissions of", path))?;
    if let Some(name) = group {
        if nix::unistd::geteuid().is_root() {
            match nix::unistd::Group::from_name(name) {
                Ok(Some(g)) => {
                    nix::unistd::chown(path, None, Some(g.gid))
                        .map_err(|e| io_err("cannot chown", path)(io::Error::from(e)))?;
                }
                _ => info!(
                    group = name,
                    "socket group does not exist; socket stays root-owned"
                ),
            }
        }
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_sockets_are_replaced_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/gpud.sock");
        let live = bind(&path, 0o660, None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        assert!(matches!(
            bind(&path, 0o660, None),
            Err(ListenError::AlreadyRunning(_))
        ));
        drop(live);
        // The file stays behind after the listener is gone: stale, so it is replaced.
        assert!(path.exists());
        bind(&path, 0o600, None).unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            bind(&file, 0o660, None),
            Err(ListenError::NotASocket(_))
        ));
    }
}
