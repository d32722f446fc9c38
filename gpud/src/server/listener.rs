//! The listening socket: created safely, never stolen from a running daemon.
//!
//! gpud often runs as root, so the socket's directory must not let anyone else swap the new
//! socket for a link between its creation and its chown (a link made `chown` change a root
//! file's group once): the directory must be root's or gpud's user's, and writable by nobody
//! else unless it is sticky (like /tmp, where others cannot rename what is not theirs). The
//! socket's mode and group are set without following a link at its name, and the name is
//! checked to be gpud's socket afterwards. A lock file beside the socket (`gpud.sock.lock`,
//! `flock`ed for the daemon's life) keeps two daemons starting at once from both taking a
//! stale socket's name.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;
use tokio::net::UnixListener;
use tracing::{info, warn};

use crate::pid_lock::{PidLock, Taken};

/// Why the socket could not be set up.
#[derive(Debug, Error)]
pub enum ListenError {
    /// Another daemon answers on the path.
    #[error("another gpud is already answering on {0}")]
    AlreadyRunning(PathBuf),
    /// Another daemon holds the socket's lock.
    #[error(
        "another gpud{} holds the lock of socket {}",
        holder.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        path.display()
    )]
    Locked {
        /// The socket path.
        path: PathBuf,
        /// The holder's pid, as the lock file says.
        holder: Option<u32>,
    },
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// The socket's directory lets others replace what gpud creates there.
    #[error("socket directory {path}: {reason}", path = .path.display())]
    UnsafeDirectory {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The path stopped being gpud's socket right after gpud created it.
    #[error("{0} was replaced while gpud created it; refusing to use it")]
    Replaced(PathBuf),
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

/// The socket's lock, held for as long as this value lives (remove the socket before dropping
/// it).
#[derive(Debug)]
pub struct SocketLock(#[allow(dead_code)] PidLock);

/// Binds the socket at `path` with `mode`, owned by `group` when possible, and holds its lock.
/// A stale socket file (nobody answers) is replaced; a live one is left alone.
pub fn bind(
    path: &Path,
    mode: u32,
    group: Option<&str>,
) -> Result<(UnixListener, SocketLock), ListenError> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.exists() {
        std::fs::create_dir_all(parent).map_err(io_err("cannot create", parent))?;
        // World-traversable but writable by the owner only: the socket's own mode decides
        // who may connect.
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err("cannot set permissions of", parent))?;
    }
    check_directory(parent)?;
    let lock = lock(path)?;
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
    let group = match group {
        Some(name) if nix::unistd::geteuid().is_root() => match nix::unistd::Group::from_name(name)
        {
            Ok(Some(g)) => Some(g.gid),
            _ => {
                info!(
                    group = name,
                    "socket group does not exist; socket stays root-owned"
                );
                None
            }
        },
        _ => None,
    };
    let listener = UnixListener::bind(path).map_err(io_err("cannot bind", path))?;
    set_mode_and_group(path, mode, group)?;
    Ok((listener, lock))
}

/// Takes `<socket>.lock`, writing this process's pid into it.
fn lock(socket: &Path) -> Result<SocketLock, ListenError> {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    match PidLock::take(&path).map_err(io_err("cannot lock", &path))? {
        Taken::Held(lock) => Ok(SocketLock(lock)),
        Taken::Busy(holder) => Err(ListenError::Locked {
            path: socket.to_path_buf(),
            holder,
        }),
    }
}

/// Gives the socket file its mode and group without following a link at its name (were the
/// socket swapped for one, the calls fail or change the link, never what it points to), then
/// checks that the name is still gpud's socket.
fn set_mode_and_group(
    path: &Path,
    mode: u32,
    group: Option<nix::unistd::Gid>,
) -> Result<(), ListenError> {
    use nix::sys::stat::{FchmodatFlags, Mode, fchmodat};
    let errno = |what| move |e: nix::errno::Errno| io_err(what, path)(io::Error::from(e));
    fchmodat(
        nix::fcntl::AT_FDCWD,
        path,
        Mode::from_bits_truncate(mode),
        FchmodatFlags::NoFollowSymlink,
    )
    .map_err(errno("cannot set permissions of"))?;
    if let Some(gid) = group {
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            path,
            None,
            Some(gid),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(errno("cannot chown"))?;
    }
    let meta = std::fs::symlink_metadata(path).map_err(io_err("cannot inspect", path))?;
    if !meta.file_type().is_socket() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(ListenError::Replaced(path.to_path_buf()));
    }
    Ok(())
}

/// Refuses a directory owned by another user than gpud's or root, or that others may write
/// without the sticky bit.
fn check_directory(dir: &Path) -> Result<(), ListenError> {
    let meta = std::fs::metadata(dir).map_err(io_err("cannot inspect", dir))?;
    let unsafe_dir = |reason: String| ListenError::UnsafeDirectory {
        path: dir.to_path_buf(),
        reason,
    };
    if !meta.is_dir() {
        return Err(unsafe_dir("is not a directory".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(unsafe_dir(format!(
            "is owned by uid {}, not by gpud's user (uid {me}) or root",
            meta.uid()
        )));
    }
    let sticky = meta.mode() & 0o1000 != 0;
    if meta.mode() & 0o022 != 0 && !sticky {
        return Err(unsafe_dir(format!(
            "others may write it (mode {:o}) and it is not sticky: they could replace the socket; use a directory only root or gpud's user may write, e.g. /run/gpud",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_sockets_are_replaced_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/gpud.sock");
        let live = bind(&path, 0o660, None).unwrap();
        // Its lock keeps a second daemon out, naming the holder.
        let locked = bind(&path, 0o660, None).unwrap_err();
        assert!(
            matches!(locked, ListenError::Locked { holder: Some(p), .. } if p == std::process::id()),
            "{locked}"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // A live socket whose lock is gone (a daemon from before locks) is kept all the same.
        let (live_listener, live_lock) = live;
        drop(live_lock);
        assert!(matches!(
            bind(&path, 0o660, None),
            Err(ListenError::AlreadyRunning(_))
        ));
        drop(live_listener);
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

    /// Regression: gpud accepted a socket directory others could write, where the new socket
    /// could be swapped for a link before gpud changed its group.
    #[tokio::test]
    async fn a_directory_others_may_write_is_refused_unless_sticky() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = bind(&shared.join("gpud.sock"), 0o660, None).unwrap_err();
        assert!(matches!(err, ListenError::UnsafeDirectory { .. }), "{err}");
        assert!(err.to_string().contains("not sticky"), "{err}");
        assert!(!shared.join("gpud.sock").exists(), "nothing was created");
        // Sticky, as /tmp is: others cannot rename or remove what is gpud's.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        bind(&shared.join("gpud.sock"), 0o660, None).expect("a sticky directory");
        let group = dir.path().join("group");
        std::fs::create_dir(&group).unwrap();
        std::fs::set_permissions(&group, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(bind(&group.join("gpud.sock"), 0o660, None).is_err());
    }

    #[tokio::test]
    async fn the_socket_gets_its_mode_and_group_and_keeps_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpud.sock");
        let root = nix::unistd::geteuid().is_root();
        // A group every host has; gpud changes the group only as root.
        let (listener, _lock) = bind(&path, 0o640, Some("root")).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o640);
        if root {
            assert_eq!(meta.gid(), 0);
        }
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["gpud.sock", "gpud.sock.lock"]);
        // And the socket answers at its name, which is what clients see as its address.
        let client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let _ = listener.accept().await.unwrap();
        let peer = client.peer_addr().unwrap();
        assert_eq!(peer.as_pathname(), Some(path.as_path()));
    }

    /// Were the new socket swapped for a link before its mode and group are set, the link's
    /// target is left alone and gpud refuses the socket.
    #[test]
    fn a_link_at_the_name_is_neither_followed_nor_used() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"root's").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("gpud.sock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err =
            set_mode_and_group(&link, 0o666, Some(nix::unistd::Gid::from_raw(4242))).unwrap_err();
        assert!(
            matches!(err, ListenError::Io { .. } | ListenError::Replaced(_)),
            "{err}"
        );
        let meta = std::fs::metadata(&victim).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_ne!(meta.gid(), 4242);
    }
}
