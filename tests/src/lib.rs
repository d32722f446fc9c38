//! Harness for whole-system tests: real `gpud` daemons on temporary sockets, real clients,
//! real `gpudctl`.
//!
//! Binaries are taken from the cargo target directory this test runs from; the README's test
//! command builds them first (`cargo build --workspace --bins`).

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpud_client::blocking::Client;

pub mod ops;

/// The directory holding the workspace's binaries (`target/debug` or `target/release`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// The path of a workspace binary, which must have been built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// A gpud daemon running on a temporary socket; killed when dropped.
pub struct Daemon {
    child: Child,
    /// Its socket.
    pub socket: PathBuf,
    /// Its temporary directory (config, socket, logs).
    pub dir: tempfile::TempDir,
    args: Vec<std::ffi::OsString>,
    /// The open-file limit gpud runs under, when a test sets one.
    nofile: Option<u64>,
}

impl Daemon {
    /// Starts gpud on simulated devices (`2x16GiB`, …) with default config and no headroom.
    pub fn start(simulate: &str) -> Self {
        Self::start_with(simulate, "")
    }

    /// Starts gpud with extra config text (TOML).
    pub fn start_with(simulate: &str, config: &str) -> Self {
        Self::start_logging(simulate, config, "debug")
    }

    /// Starts gpud with extra config text and a log level.
    pub fn start_logging(simulate: &str, config: &str, log: &str) -> Self {
        Self::start_prepared(simulate, config, log, |_| {})
    }

    /// Starts gpud after `prepare` has been given its state directory's path (not created yet):
    /// a test can mount a file system there, or plant files.
    pub fn start_prepared(
        simulate: &str,
        config: &str,
        log: &str,
        prepare: impl FnOnce(&std::path::Path),
    ) -> Self {
        Self::launch(simulate, config, log, prepare, None)
    }

    /// Starts gpud under an open-file limit of `nofile` (soft and hard), through util-linux's
    /// `prlimit`.
    pub fn start_with_nofile(simulate: &str, config: &str, nofile: u64) -> Self {
        Self::launch(simulate, config, "debug", |_| {}, Some(nofile))
    }

    fn launch(
        simulate: &str,
        config: &str,
        log: &str,
        prepare: impl FnOnce(&std::path::Path),
        nofile: Option<u64>,
    ) -> Self {
        // Let other uids reach the socket, so that access control is gpud's to decide.
        let dir = ops::tempdir("gpud-test");
        prepare(&dir.path().join("state"));
        let socket = dir.path().join("gpud.sock");
        let config_path = dir.path().join("gpud.toml");
        std::fs::write(&config_path, config).unwrap();
        let args: Vec<std::ffi::OsString> = vec![
            "--simulate".into(),
            simulate.into(),
            "--socket".into(),
            socket.clone().into(),
            "--config".into(),
            config_path.into(),
            "--headroom".into(),
            "0".into(),
            "--state-dir".into(),
            dir.path().join("state").into(),
            "--dbus".into(),
            "none".into(),
            "--log".into(),
            log.into(),
        ];
        let child = Self::spawn(&args, &dir, nofile);
        let daemon = Self {
            child,
            socket,
            dir,
            args,
            nofile,
        };
        daemon.wait_ready(Duration::from_secs(10));
        daemon
    }

    fn spawn(args: &[std::ffi::OsString], dir: &tempfile::TempDir, nofile: Option<u64>) -> Child {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("gpud.log"))
            .unwrap();
        let mut command = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}"))
                    .arg("--")
                    .arg(bin("gpud"));
                c
            }
            None => Command::new(bin("gpud")),
        };
        command
            .args(args)
            .stderr(log_file)
            .spawn()
            .expect("spawn gpud")
    }

    /// Kills the daemon with SIGKILL and starts it again on the same socket, config and state
    /// directory (its journal).
    pub fn kill_and_restart(&mut self) {
        self.kill_and_restart_with(|| {});
    }

    /// Like [`Daemon::kill_and_restart`], running `while_down` between the kill and the start.
    pub fn kill_and_restart_with(&mut self, while_down: impl FnOnce()) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        while_down();
        self.child = Self::spawn(&self.args, &self.dir, self.nofile);
        self.wait_ready(Duration::from_secs(10));
    }

    fn wait_ready(&self, limit: Duration) {
        let start = Instant::now();
        while start.elapsed() < limit {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "gpud did not come up within {limit:?}; log:\n{}",
            self.log()
        );
    }

    /// A blocking client session.
    pub fn client(&self) -> Client {
        Client::connect(&self.socket).expect("connect")
    }

    /// Runs `gpudctl` with this daemon's socket.
    pub fn gpudctl(&self, args: &[&str]) -> Output {
        self.gpudctl_command(args).output().expect("run gpudctl")
    }

    /// A `gpudctl` command with this daemon's socket, not yet started.
    pub fn gpudctl_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin("gpudctl"));
        c.arg("--socket").arg(&self.socket).args(args);
        c.stdin(Stdio::null());
        c
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gpud.log")).unwrap_or_default()
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the daemon process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        ops::terminate(&mut self.child, limit)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 5 ms until it returns true or `limit` passes.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    check()
}

/// Reads a whole stream until EOF or `limit`, returning what came.
pub fn read_until_eof(stream: &mut std::os::unix::net::UnixStream, limit: Duration) -> Vec<u8> {
    use std::io::Read;
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf);
    buf
}

/// Splits length-prefixed frames and parses each as JSON.
pub fn frames(bytes: &[u8]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if rest.len() < 4 + len {
            break;
        }
        if let Ok(v) = serde_json::from_slice(&rest[4..4 + len]) {
            out.push(v);
        }
        rest = &rest[4 + len..];
    }
    out
}

/// Encodes one frame.
pub fn frame(json: &serde_json::Value) -> Vec<u8> {
    let body = serde_json::to_vec(json).unwrap();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

/// Serializes tests that load the machine or measure timing: hold the guard for the test.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
