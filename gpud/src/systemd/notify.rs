//! The notify protocol: `READY=1`, `STATUS=…`, `WATCHDOG=1`, `STOPPING=1` as datagrams to
//! `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use tracing::debug;

/// Sends state changes to the service manager; does nothing when there is none.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`.
    pub fn from_env() -> Self {
        let env = |k| std::env::var(k).ok();
        Self::new(
            env("NOTIFY_SOCKET").as_deref(),
            env("WATCHDOG_USEC").as_deref(),
            env("WATCHDOG_PID").as_deref(),
            std::process::id(),
        )
    }

    /// From the variables' values (`None` when unset).
    pub fn new(
        notify_socket: Option<&str>,
        watchdog_usec: Option<&str>,
        watchdog_pid: Option<&str>,
        my_pid: u32,
    ) -> Self {
        let target = notify_socket.and_then(|path| match open(path) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(socket = path, error = %e, "NOTIFY_SOCKET unusable; not notifying");
                None
            }
        });
        let for_me = watchdog_pid.is_none_or(|p| p.trim().parse() == Ok(my_pid));
        let watchdog = watchdog_usec
            .filter(|_| for_me)
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0)
            .map(Duration::from_micros);
        Self { target, watchdog }
    }

    /// Whether a service manager listens.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// How often to send `WATCHDOG=1`: half the manager's timeout, as sd_watchdog_enabled(3)
    /// advises. `None` when the watchdog is off.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.target.as_ref()?;
        self.watchdog.map(|w| w / 2)
    }

    /// Sends one message of `KEY=value` lines.
    pub fn send(&self, lines: &[String]) -> io::Result<()> {
        let Some((socket, addr)) = &self.target else {
            return Ok(());
        };
        let mut message = lines.join("\n");
        message.push('\n');
        socket.send_to_addr(message.as_bytes(), addr).map(drop)
    }

    /// `READY=1` with a first status line.
    pub fn ready(&self, status: &str) {
        self.log(self.send(&["READY=1".into(), status_line(status)]));
    }

    /// `STATUS=…`: one line for `systemctl status`.
    pub fn status(&self, status: &str) {
        self.log(self.send(&[status_line(status)]));
    }

    /// `WATCHDOG=1`: the daemon is alive.
    pub fn watchdog(&self) {
        self.log(self.send(&["WATCHDOG=1".into()]));
    }

    /// `STOPPING=1`: shutdown has begun.
    pub fn stopping(&self) {
        self.log(self.send(&["STOPPING=1".into(), status_line("stopping")]));
    }

    fn log(&self, result: io::Result<()>) {
        if let Err(e) = result {
            debug!(error = %e, "sd_notify failed");
        }
    }
}

/// `STATUS=` with the text on one line (the protocol is line-based).
fn status_line(status: &str) -> String {
    let one: String = status
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("STATUS={one}")
}

fn open(path: &str) -> io::Result<(UnixDatagram, SocketAddr)> {
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None if path.starts_with('/') => SocketAddr::from_pathname(path)?,
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "neither an absolute path nor @abstract",
            ));
        }
    };
    Ok((UnixDatagram::unbound()?, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_the_listener() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let n = Notifier::new(path.to_str(), Some("4000000"), None, 1);
        assert!(n.enabled());
        assert_eq!(n.watchdog_interval(), Some(Duration::from_secs(2)));
        n.ready("2 devices\nand a newline");
        let mut buf = [0u8; 256];
        let len = listener.recv(&mut buf).unwrap();
        assert_eq!(
            std::str::from_utf8(&buf[..len]).unwrap(),
            "READY=1\nSTATUS=2 devices and a newline\n"
        );
    }

    #[test]
    fn watchdog_for_another_pid_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let _listener = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::new(path.to_str(), Some("4000000"), Some("2"), 1);
        assert_eq!(n.watchdog_interval(), None);
        let off = Notifier::new(None, Some("4000000"), None, 1);
        assert!(!off.enabled());
        assert_eq!(off.watchdog_interval(), None);
        off.ready("nothing happens");
    }
}
