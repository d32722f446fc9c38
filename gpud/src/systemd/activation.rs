//! Socket activation: the listening socket systemd (or `systemd-socket-activate`) passed in.
//!
//! The protocol: file descriptors 3.. are inherited, `LISTEN_PID` names the process they are
//! for, `LISTEN_FDS` counts them and `LISTEN_FDNAMES` (optional) names them, colon-separated.

use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::socket::{
    AddressFamily, SockType, SockaddrLike, UnixAddr, getsockname, getsockopt, sockopt,
};
use thiserror::Error;
use tracing::{debug, warn};

/// The first inherited descriptor (`SD_LISTEN_FDS_START`).
const FIRST_FD: RawFd = 3;
/// Names under which the gpud socket may be passed: the socket unit's default name, or an
/// explicit `FileDescriptorName=gpud`.
const NAMES: [&str; 2] = ["gpud.socket", "gpud"];

/// Passed descriptors are taken at most once: a second owner of the same fd would close it
/// under the first.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Why the passed sockets cannot be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ActivationError {
    /// An environment variable is not a number.
    #[error("{var}={value:?} is not a number")]
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// Several sockets were passed and none carries gpud's name.
    #[error(
        "{count} sockets passed and none is named gpud.socket or gpud (LISTEN_FDNAMES={names:?})"
    )]
    Ambiguous {
        /// How many.
        count: usize,
        /// The names passed.
        names: String,
    },
    /// The descriptor is not what gpud serves on.
    #[error("passed descriptor {fd} is not a listening Unix stream socket ({why})")]
    WrongKind {
        /// The descriptor.
        fd: RawFd,
        /// What is wrong.
        why: String,
    },
}

/// What the environment says was passed to this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    /// The descriptor gpud serves on.
    pub fd: RawFd,
    /// Every passed descriptor (including `fd`).
    pub all: Vec<RawFd>,
}

/// Reads the activation variables. `None` when nothing was passed to this process (no
/// `LISTEN_PID`, or one naming another process, or zero descriptors).
pub fn parse(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    listen_fdnames: Option<&str>,
    my_pid: u32,
) -> Result<Option<Passed>, ActivationError> {
    let number = |var: &'static str, value: &str| {
        value
            .trim()
            .parse::<u32>()
            .map_err(|_| ActivationError::NotANumber {
                var,
                value: value.to_string(),
            })
    };
    let Some(pid) = listen_pid else {
        return Ok(None);
    };
    if number("LISTEN_PID", pid)? != my_pid {
        // Meant for a parent that exec'd us without clearing its environment.
        return Ok(None);
    }
    let count = match listen_fds {
        Some(n) => number("LISTEN_FDS", n)? as usize,
        None => 0,
    };
    if count == 0 {
        return Ok(None);
    }
    let all: Vec<RawFd> = (0..count).map(|i| FIRST_FD + i as RawFd).collect();
    let names: Vec<&str> = listen_fdnames.map_or_else(Vec::new, |n| n.split(':').collect());
    let named = names.iter().position(|n| NAMES.contains(n));
    let index = match named {
        Some(i) if i < count => i,
        _ if count == 1 => 0,
        _ => {
            return Err(ActivationError::Ambiguous {
                count,
                names: listen_fdnames.unwrap_or_default().to_string(),
            });
        }
    };
    Ok(Some(Passed {
        fd: all[index],
        all,
    }))
}

/// Takes the passed gpud socket, if this process was socket-activated. Other passed
/// descriptors are closed. Returns `None` when not activated, or when called a second time.
pub fn take_listener() -> Result<Option<UnixListener>, ActivationError> {
    let env = |k| std::env::var(k).ok();
    let Some(passed) = parse(
        env("LISTEN_PID").as_deref(),
        env("LISTEN_FDS").as_deref(),
        env("LISTEN_FDNAMES").as_deref(),
        std::process::id(),
    )?
    else {
        return Ok(None);
    };
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Ok(None);
    }
    let mut chosen = None;
    for fd in passed.all {
        // SAFETY: LISTEN_PID names this process, so descriptors 3..3+LISTEN_FDS were passed to
        // it by its activator and nothing else in gpud owns them; TAKEN makes this the only
        // place that ever wraps them.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // Inherited without close-on-exec; nothing gpud starts should inherit them.
        let _ = fcntl(&owned, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
        if fd == passed.fd {
            chosen = Some(owned);
        } else {
            warn!(fd, "closing a passed socket gpud does not use");
        }
    }
    let Some(owned) = chosen else {
        return Ok(None);
    };
    check_listening_unix_stream(&owned, passed.fd)?;
    let listener = UnixListener::from(owned);
    listener
        .set_nonblocking(true)
        .map_err(|e| ActivationError::WrongKind {
            fd: passed.fd,
            why: e.to_string(),
        })?;
    debug!(fd = passed.fd, "serving on the passed socket");
    Ok(Some(listener))
}

fn check_listening_unix_stream(fd: &OwnedFd, raw: RawFd) -> Result<(), ActivationError> {
    let wrong = |why: String| ActivationError::WrongKind { fd: raw, why };
    let kind = getsockopt(&fd.as_fd(), sockopt::SockType).map_err(|e| wrong(e.to_string()))?;
    if kind != SockType::Stream {
        return Err(wrong(format!("type {kind:?}")));
    }
    let listening =
        getsockopt(&fd.as_fd(), sockopt::AcceptConn).map_err(|e| wrong(e.to_string()))?;
    if !listening {
        return Err(wrong("not listening".into()));
    }
    let addr: UnixAddr = getsockname(std::os::fd::AsRawFd::as_raw_fd(fd))
        .map_err(|e| wrong(format!("not a Unix socket: {e}")))?;
    if addr.family() != Some(AddressFamily::Unix) {
        return Err(wrong("not a Unix socket".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_passed_is_none() {
        assert_eq!(parse(None, None, None, 7), Ok(None));
        assert_eq!(
            parse(Some("8"), Some("1"), None, 7),
            Ok(None),
            "another pid's"
        );
        assert_eq!(parse(Some("7"), Some("0"), None, 7), Ok(None));
    }

    #[test]
    fn one_socket_is_taken_whatever_its_name() {
        let p = parse(Some("7"), Some("1"), Some("unknown"), 7)
            .unwrap()
            .unwrap();
        assert_eq!(p.fd, 3);
        assert_eq!(p.all, vec![3]);
    }

    #[test]
    fn among_several_the_named_one_is_taken() {
        let p = parse(Some("7"), Some("3"), Some("metrics:gpud.socket:x"), 7)
            .unwrap()
            .unwrap();
        assert_eq!(p.fd, 4);
        assert_eq!(p.all, vec![3, 4, 5]);
        assert!(matches!(
            parse(Some("7"), Some("2"), Some("a:b"), 7),
            Err(ActivationError::Ambiguous { count: 2, .. })
        ));
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            parse(Some("seven"), Some("1"), None, 7),
            Err(ActivationError::NotANumber {
                var: "LISTEN_PID",
                ..
            })
        ));
        assert!(matches!(
            parse(Some("7"), Some("-1"), None, 7),
            Err(ActivationError::NotANumber {
                var: "LISTEN_FDS",
                ..
            })
        ));
    }
}
