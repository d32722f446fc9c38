//! The state directory: where the lease journal lives, checked and locked for one daemon.
//!
//! Two daemons on one directory would each believe their journal is the host's truth (the
//! second renames a fresh journal over the first's, which keeps appending to a deleted file),
//! and a directory that another user can write lets that user plant links that gpud follows as
//! root. So the directory must be gpud's own: a real directory (not a symlink), owned by the
//! daemon's user or root, writable by nobody else; and it is locked (`flock` on a lock file
//! inside it) for the daemon's lifetime, the lock file naming the holder's pid.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::pid_lock::{PidLock, Taken};

/// The lock file's name inside the state directory.
pub const LOCK_FILE: &str = "gpud.lock";

/// The host's state directory, for a gpud run by root (the packaged service).
pub const SYSTEM_STATE_DIR: &str = "/var/lib/gpud";

/// Where the lease journal lives when neither `--state-dir` nor `state_dir` says: the host's
/// directory for root; for anyone else their own, `$XDG_STATE_HOME/gpud` or
/// `~/.local/state/gpud` (a user cannot write /var/lib, and should not share the host's
/// journal). `None` when a non-root user has neither variable (the caller asks for the flag).
pub fn default_path(
    euid: u32,
    xdg_state_home: Option<&str>,
    home: Option<&str>,
) -> Option<PathBuf> {
    if euid == 0 {
        return Some(PathBuf::from(SYSTEM_STATE_DIR));
    }
    // The XDG base directory rules: a relative value is invalid and ignored.
    let absolute = |v: Option<&str>| v.filter(|v| v.starts_with('/')).map(PathBuf::from);
    absolute(xdg_state_home)
        .map(|dir| dir.join("gpud"))
        .or_else(|| absolute(home).map(|home| home.join(".local/state/gpud")))
}

/// Why a state directory cannot be used.
#[derive(Debug, Error)]
pub enum StateDirError {
    /// Another daemon holds the directory's lock.
    #[error(
        "state directory {} is in use by another gpud{}: stop it, or give this one its own --state-dir",
        path.display(),
        holder.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    InUse {
        /// The directory.
        path: PathBuf,
        /// The holder's pid, as its lock file says.
        holder: Option<u32>,
    },
    /// The directory is not one gpud can trust.
    #[error("state directory {}: {reason}", path.display())]
    Unsafe {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A system call failed.
    #[error("state directory {}: {what}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// What gpud was doing.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// A checked state directory, locked for as long as this value lives.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    _lock: PidLock,
}

impl StateDir {
    /// Creates the directory (mode 0700) when missing, checks that it is safe, and takes its
    /// lock, writing this process's pid into the lock file.
    pub fn lock(path: &Path) -> Result<Self, StateDirError> {
        let io_err = |what| {
            move |source| StateDirError::Io {
                path: path.to_path_buf(),
                what,
                source,
            }
        };
        match fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
        {
            Ok(()) => {}
            Err(e) => return Err(io_err("cannot create")(e)),
        }
        check_safe(path)?;
        let lock = match PidLock::take(&path.join(LOCK_FILE))
            .map_err(io_err("cannot lock the lock file"))?
        {
            Taken::Held(lock) => lock,
            Taken::Busy(holder) => {
                return Err(StateDirError::InUse {
                    path: path.to_path_buf(),
                    holder,
                });
            }
        };
        Ok(Self {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Refuses a directory that is a symlink, not a directory, owned by another user (other than
/// root), or writable by group or others.
fn check_safe(path: &Path) -> Result<(), StateDirError> {
    let unsafe_dir = |reason: String| StateDirError::Unsafe {
        path: path.to_path_buf(),
        reason,
    };
    let meta = fs::symlink_metadata(path).map_err(|source| StateDirError::Io {
        path: path.to_path_buf(),
        what: "cannot stat",
        source,
    })?;
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir(
            "is a symbolic link; name the real directory".into(),
        ));
    }
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
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "is writable by {} (mode {:o}); make it 0700 (chmod go-w)",
            if meta.mode() & 0o002 != 0 {
                "everyone"
            } else {
                "its group"
            },
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn root_keeps_the_host_directory_and_users_get_their_own() {
        let host = Some(PathBuf::from(SYSTEM_STATE_DIR));
        assert_eq!(default_path(0, Some("/x"), Some("/root")), host);
        assert_eq!(
            default_path(1000, Some("/home/a/.state"), Some("/home/a")),
            Some(PathBuf::from("/home/a/.state/gpud"))
        );
        assert_eq!(
            default_path(1000, None, Some("/home/a")),
            Some(PathBuf::from("/home/a/.local/state/gpud"))
        );
        assert_eq!(
            default_path(1000, Some("relative"), Some("/home/a")),
            Some(PathBuf::from("/home/a/.local/state/gpud"))
        );
        assert_eq!(default_path(1000, None, None), None);
    }

    #[test]
    fn a_second_lock_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let first = StateDir::lock(&path).unwrap();
        let err = StateDir::lock(&path).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, StateDirError::InUse { holder: Some(p), .. } if p == std::process::id()),
            "{text}"
        );
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(first);
        StateDir::lock(&path).expect("free again once the first is gone");
    }

    #[test]
    fn a_new_directory_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b");
        StateDir::lock(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn a_writable_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = StateDir::lock(dir.path()).unwrap_err().to_string();
        assert!(err.contains("writable by everyone"), "{err}");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o770)).unwrap();
        let err = StateDir::lock(dir.path()).unwrap_err().to_string();
        assert!(err.contains("writable by its group"), "{err}");
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = StateDir::lock(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
    }

    #[test]
    fn a_planted_lock_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let state = dir.path().join("state");
        fs::create_dir(&state).unwrap();
        fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&victim, state.join(LOCK_FILE)).unwrap();
        assert!(StateDir::lock(&state).is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    }
}
