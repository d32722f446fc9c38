//! Harness pieces for the operator-surface tests: gpud started with chosen arguments and
//! environment, a private dbus-daemon, metrics scrapes.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use gpud_client::blocking::Client;

use crate::bin;

/// A gpud process with a temporary directory (socket, config, state, log); killed when dropped.
pub struct Gpud {
    /// The process.
    pub child: Child,
    /// Its socket.
    pub socket: PathBuf,
    /// Its directory.
    pub dir: tempfile::TempDir,
    /// How it was started, to start it again.
    launch: Launch,
}

/// What [`Gpud::start`] was given.
struct Launch {
    simulate: String,
    config: String,
    args: Vec<String>,
    env: Vec<(String, OsString)>,
}

/// A fresh temporary directory that other users may traverse.
pub fn tempdir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

impl Gpud {
    /// The command line and config gpud gets in `dir`: simulated devices, no headroom, state
    /// in the directory, `config` appended to the config file.
    pub fn command(dir: &Path, simulate: &str, config: &str) -> Command {
        let config_path = dir.join("gpud.toml");
        let text = format!("state_dir = {:?}\n{config}", dir.join("state"));
        std::fs::write(&config_path, text).unwrap();
        // Appended to: a restarted daemon logs after the one before it.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("gpud.log"))
            .unwrap();
        let mut c = Command::new(bin("gpud"));
        c.arg("--simulate")
            .arg(simulate)
            .arg("--socket")
            .arg(dir.join("gpud.sock"))
            .arg("--config")
            .arg(&config_path)
            .arg("--headroom")
            .arg("0")
            .arg("--log")
            .arg("debug")
            .stdin(Stdio::null())
            .stderr(log);
        c
    }

    /// Starts gpud with `args` (e.g. `--dbus ADDRESS`) and `env`, and waits for its socket.
    pub fn start(simulate: &str, config: &str, args: &[&str], env: &[(&str, OsString)]) -> Self {
        let launch = Launch {
            simulate: simulate.to_string(),
            config: config.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        let dir = tempdir("gpud-ops");
        let child = Self::spawn(dir.path(), &launch);
        let g = Self {
            child,
            socket: dir.path().join("gpud.sock"),
            dir,
            launch,
        };
        g.wait_for_socket();
        g
    }

    /// Kills gpud with SIGKILL and starts it again as before, on the same directory (its
    /// socket, config and journal).
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.dir.path(), &self.launch);
        self.wait_for_socket();
    }

    fn spawn(dir: &Path, launch: &Launch) -> Child {
        let mut c = Self::command(dir, &launch.simulate, &launch.config);
        c.args(&launch.args);
        for (k, v) in &launch.env {
            c.env(k, v);
        }
        c.spawn().expect("spawn gpud")
    }

    fn wait_for_socket(&self) {
        let socket = self.socket.clone();
        if !crate::wait_until(Duration::from_secs(10), || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        }) {
            panic!("gpud did not come up; log:\n{}", self.log());
        }
    }

    /// A blocking client session.
    pub fn client(&self) -> Client {
        Client::connect(&self.socket).expect("connect")
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gpud.log")).unwrap_or_default()
    }

    /// Sends SIGTERM and waits up to `limit` for the exit status.
    pub fn terminate(&mut self, limit: Duration) -> Option<ExitStatus> {
        terminate(&mut self.child, limit)
    }
}

impl Drop for Gpud {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stdout lines of `child` (spawned with a piped stdout), as they come.
pub fn stdout_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let out = child.stdout.take().expect("a piped stdout");
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// SIGTERM, then the exit status within `limit`.
pub fn terminate(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// A private dbus-daemon; killed when dropped.
pub struct Bus {
    child: Child,
    /// Its address (`unix:path=…`).
    pub address: String,
    /// Its directory (config, socket).
    pub dir: tempfile::TempDir,
}

/// The policy of a system bus (Debian's system.conf): nothing may own names or call methods
/// unless a policy file opens it. Only gpud's own policy file is included.
const SYSTEM_LIKE: &str = r#"
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
  </policy>
"#;

/// A bus that lets everyone do everything: gpud's own checks are all that stand.
const PERMISSIVE: &str = r#"
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
"#;

impl Bus {
    /// A bus configured like the system bus, with systemd/org.gpud.Manager1.conf included.
    pub fn system_like() -> Self {
        let policy = repo_root_dir().join("systemd/org.gpud.Manager1.conf");
        assert!(policy.exists(), "{} is missing", policy.display());
        Self::start(&format!(
            "{SYSTEM_LIKE}<include>{}</include>",
            policy.display()
        ))
    }

    /// A bus without any policy of its own.
    pub fn permissive() -> Self {
        Self::start(PERMISSIVE)
    }

    fn start(policy: &str) -> Self {
        let dir = tempdir("gpud-bus");
        let socket = dir.path().join("bus");
        let config = format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <auth>EXTERNAL</auth>
  <listen>unix:path={}</listen>
{policy}
</busconfig>
"#,
            socket.display()
        );
        let config_path = dir.path().join("bus.conf");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("bus.log")).unwrap();
        let child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config_path.display()))
            .arg("--nofork")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("dbus-daemon must be installed (scripts/test.sh installs it)");
        let bus = Self {
            child,
            address: format!("unix:path={}", socket.display()),
            dir,
        };
        assert!(
            crate::wait_until(Duration::from_secs(10), || {
                std::os::unix::net::UnixStream::connect(&socket).is_ok()
            }),
            "dbus-daemon did not come up"
        );
        bus
    }

    /// Waits until gpud owns its name on this bus (it binds its socket first).
    pub fn wait_for_gpud(&self) {
        let owned = crate::wait_until(Duration::from_secs(10), || {
            let out = self
                .busctl(&[
                    "call",
                    "org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus",
                    "NameHasOwner",
                    "s",
                    "org.gpud.Manager1",
                ])
                .output();
            out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "b true")
        });
        assert!(owned, "gpud did not take org.gpud.Manager1 on the bus");
    }

    /// `busctl --address=… ARGS`, not yet run.
    pub fn busctl(&self, args: &[&str]) -> Command {
        let mut c = Command::new("busctl");
        c.arg(format!("--address={}", self.address)).args(args);
        c.stdin(Stdio::null());
        c
    }

    /// Calls a manager method with busctl as `uid` (None: as this process) and returns the
    /// output.
    pub fn call_as(&self, uid: Option<u32>, method: &str, args: &[&str]) -> std::process::Output {
        let mut base = vec![
            "call",
            "org.gpud.Manager1",
            "/org/gpud/Manager1",
            "org.gpud.Manager1",
            method,
        ];
        base.extend_from_slice(args);
        let mut c = match uid {
            None => self.busctl(&base),
            Some(uid) => {
                // setpriv drops the supplementary groups too (root's would linger otherwise).
                let mut c = Command::new("setpriv");
                let id = uid.to_string();
                c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "busctl"]);
                c.arg(format!("--address={}", self.address)).args(&base);
                c
            }
        };
        c.output().expect("run busctl")
    }

    /// Calls a manager method with `dbus-send` as `uid`, which prints the error's name and
    /// message (busctl prints only the errno it maps to). `args` are typed (`uint64:5`).
    pub fn dbus_send_as(&self, uid: u32, method: &str, args: &[&str]) -> std::process::Output {
        let id = uid.to_string();
        Command::new("setpriv")
            .args([
                "--reuid",
                &id,
                "--regid",
                &id,
                "--clear-groups",
                "dbus-send",
            ])
            .arg(format!("--bus={}", self.address))
            .args([
                "--print-reply",
                "--dest=org.gpud.Manager1",
                "/org/gpud/Manager1",
            ])
            .arg(format!("org.gpud.Manager1.{method}"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run dbus-send (package dbus-bin)")
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /metrics` over a Unix socket; the body of a 200 answer.
pub fn scrape_unix(path: &Path) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(path).expect("connect to metrics");
    http_get(&mut s)
}

/// `GET /metrics` over TCP; the body of a 200 answer.
pub fn scrape_tcp(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to metrics");
    http_get(&mut s)
}

fn http_get<S: Read + Write>(s: &mut S) -> String {
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_string()
}

/// Parses the text format with a real Prometheus parser.
pub fn parse_metrics(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text format")
}

/// The value of the sample `name` whose labels include `labels`.
pub fn metric(
    scrape: &prometheus_parse::Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => f64::NAN,
        })
}

/// Reads datagrams from a `NOTIFY_SOCKET` until `limit` passes or `done` says so.
pub fn collect_notify(
    socket: &std::os::unix::net::UnixDatagram,
    limit: Duration,
    mut done: impl FnMut(&[String]) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    let start = Instant::now();
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit && !done(&seen) {
        if let Ok(n) = socket.recv(&mut buf) {
            seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    seen
}

/// The workspace root (where systemd/ and scripts/ are).
pub fn repo_root_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}
