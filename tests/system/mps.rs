//! `[enforce] mps`: gpud runs a fake `nvidia-cuda-mps-control` (a shell script that records its
//! environment, stays up in the foreground, and answers `quit` through the pipe directory as
//! the real one does), and `gpudctl run --enforce mps` starts programs as its clients.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpud_client::LeaseRequest;
use gpud_client::proto::MpsStatus;
use gpud_tests::{Daemon, wait_until};

/// The fake control program: `-f` stays up until a `quit` reaches it through the pipe
/// directory (or SIGTERM); any other run reads a command from stdin, as the real client mode
/// does. Everything is recorded under `record`.
fn fake_control(dir: &Path, record: &Path) -> PathBuf {
    std::fs::create_dir_all(record).unwrap();
    let script = format!(
        r#"#!/bin/sh
rec={rec}
if [ "$1" = "-f" ]; then
    echo $$ >> "$rec/starts"
    env | sort > "$rec/env.$$"
    umask > "$rec/umask.$$"
    echo "fake MPS control daemon $$ up"
    trap 'echo "$$" >> "$rec/terminated"; exit 0' TERM
    while :; do
        if [ -e "$CUDA_MPS_PIPE_DIRECTORY/quit.request" ]; then
            rm -f "$CUDA_MPS_PIPE_DIRECTORY/quit.request"
            echo $$ >> "$rec/quit"
            exit 0
        fi
        sleep 0.05
    done
fi
read command
echo "$command $CUDA_MPS_PIPE_DIRECTORY" >> "$rec/commands"
[ "$command" = quit ] && touch "$CUDA_MPS_PIPE_DIRECTORY/quit.request"
exit 0
"#,
        rec = record.display()
    );
    let path = dir.join("nvidia-cuda-mps-control");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A fake that cannot run here, as the real one fails on a host without a GPU.
fn failing_control(dir: &Path) -> PathBuf {
    let path = dir.join("failing-mps-control");
    std::fs::write(
        &path,
        "#!/bin/sh\necho 'no CUDA-capable device is detected' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A directory for the fake and its records, outside the daemon's.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Self {
            dir: gpud_tests::ops::tempdir("gpud-mps"),
        }
    }
    fn record(&self) -> PathBuf {
        self.dir.path().join("record")
    }
    fn mps_dir(&self) -> PathBuf {
        self.dir.path().join("run/mps")
    }
    fn config(&self, control: &Path) -> String {
        format!(
            "[enforce]\nmps = true\nmps_control = \"{}\"\nmps_directory = \"{}\"\nmps_stop_timeout = \"2s\"\n",
            control.display(),
            self.mps_dir().display()
        )
    }
    fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.record().join(name))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

fn mps_status(daemon: &Daemon) -> MpsStatus {
    daemon
        .client()
        .status()
        .expect("status")
        .enforcement
        .expect("status has enforcement")
        .mps
}

fn wait_for(daemon: &Daemon, what: &str, check: impl Fn(&MpsStatus) -> bool) -> MpsStatus {
    let ok = wait_until(Duration::from_secs(10), || check(&mps_status(daemon)));
    let now = mps_status(daemon);
    assert!(ok, "{what}: {now:?}\nlog:\n{}", daemon.log());
    now
}

fn pid_alive(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

#[test]
fn the_daemon_runs_with_its_directories_is_restarted_when_killed_and_quits_at_stop() {
    let f = Fixture::new();
    let control = fake_control(f.dir.path(), &f.record());
    let mut daemon = Daemon::start_with("1x16GiB", &f.config(&control));
    let up = wait_for(&daemon, "MPS comes up", |m| m.available);
    let pipe = f.mps_dir().join("pipe");
    let log = f.mps_dir().join("log");
    assert!(up.enabled && up.reason.is_none(), "{up:?}");
    assert_eq!(up.pipe_directory.as_deref(), pipe.to_str());
    assert_eq!(up.log_directory.as_deref(), log.to_str());
    let first = up.pid.expect("a pid while up");
    assert_eq!(f.lines("starts"), [first.to_string()]);
    let env = std::fs::read_to_string(f.record().join(format!("env.{first}"))).unwrap();
    assert!(
        env.contains(&format!("CUDA_MPS_PIPE_DIRECTORY={}\n", pipe.display())),
        "{env}"
    );
    assert!(
        env.contains(&format!("CUDA_MPS_LOG_DIRECTORY={}\n", log.display())),
        "{env}"
    );
    assert!(!env.contains("CUDA_VISIBLE_DEVICES="), "{env}");
    assert_eq!(f.lines(&format!("umask.{first}")), ["0022"]);
    for d in [&pipe, &log] {
        let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "{}", d.display());
    }
    assert!(daemon.client().offers_mps(), "the welcome lists mps");
    assert!(
        daemon.log().contains("fake MPS control daemon"),
        "its output is in gpud's log:\n{}",
        daemon.log()
    );

    // Killed: started again (a new process, a restart counted).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let again = wait_for(&daemon, "MPS restarted", |m| {
        m.available && m.pid.is_some_and(|p| p != first)
    });
    assert_eq!(again.restarts, 1, "{again:?}");
    assert_eq!(f.lines("starts").len(), 2);
    assert!(
        daemon.log().contains("exited: killed by SIGKILL"),
        "{}",
        daemon.log()
    );

    // Leases are served as ever.
    let c = daemon.client();
    let lease = c.acquire(&LeaseRequest::new().vram(1 << 30)).unwrap();
    lease.release().unwrap();
    drop(c);

    // Stop: `quit` through the control program with the same pipe directory, and no kill.
    let second = again.pid.unwrap();
    let status = daemon
        .terminate(Duration::from_secs(10))
        .expect("gpud ends");
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    assert_eq!(f.lines("commands"), [format!("quit {}", pipe.display())]);
    assert_eq!(f.lines("quit"), [second.to_string()]);
    assert!(!pid_alive(second), "the control daemon is gone");
    assert!(
        f.lines("terminated").is_empty(),
        "it quit, it was not signalled"
    );
}

#[test]
fn a_daemon_that_does_not_quit_is_killed_after_the_stop_timeout() {
    let f = Fixture::new();
    let record = f.record();
    std::fs::create_dir_all(&record).unwrap();
    // Up in the foreground, deaf to `quit` and to SIGTERM.
    let stubborn = f.dir.path().join("stubborn-mps-control");
    std::fs::write(
        &stubborn,
        format!(
            "#!/bin/sh\n[ \"$1\" = -f ] || exit 0\ntrap '' TERM\necho $$ > {}/pid\nwhile :; do sleep 0.05; done\n",
            record.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stubborn, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut daemon = Daemon::start_with("1x16GiB", &f.config(&stubborn));
    let up = wait_for(&daemon, "MPS comes up", |m| m.available);
    let pid = up.pid.unwrap();
    let started = std::time::Instant::now();
    let status = daemon
        .terminate(Duration::from_secs(15))
        .expect("gpud ends");
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "killed only after mps_stop_timeout"
    );
    assert!(!pid_alive(pid), "killed");
    assert!(
        daemon.log().contains("did not quit in time"),
        "{}",
        daemon.log()
    );
}

#[test]
fn without_a_usable_control_program_leases_are_served_and_status_says_why() {
    let f = Fixture::new();
    let missing = f.dir.path().join("no-such-mps-control");
    let daemon = Daemon::start_with("1x16GiB", &f.config(&missing));
    let m = wait_for(&daemon, "the failure is reported", |m| {
        m.reason.is_some()
            && m.reason
                .as_deref()
                .is_some_and(|r| r.contains("does not exist"))
    });
    assert!(m.enabled && !m.available, "{m:?}");
    assert!(
        !daemon.client().offers_mps(),
        "the welcome does not list mps"
    );
    assert!(
        daemon.log().contains("MPS is not available"),
        "{}",
        daemon.log()
    );
    let lease = daemon
        .client()
        .acquire(&LeaseRequest::new().vram(1 << 30))
        .expect("leases are served without MPS");
    drop(lease);

    let out = daemon.gpudctl(&["run", "--enforce", "mps", "--vram", "1GiB", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(10), "{stderr}");
    assert!(
        stderr.contains("MPS is not available on this host") && stderr.contains("does not exist"),
        "{stderr}"
    );
}

#[test]
fn a_daemon_that_exits_at_once_is_reported_with_its_last_words() {
    let f = Fixture::new();
    let failing = failing_control(f.dir.path());
    let daemon = Daemon::start_with("1x16GiB", &f.config(&failing));
    let m = wait_for(&daemon, "the failure is reported", |m| {
        m.reason
            .as_deref()
            .is_some_and(|r| r.contains("exited at once"))
    });
    let out = daemon.gpudctl(&["status"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("MPS: not available: exited at once: status 1"),
        "{table}"
    );
    let reason = m.reason.unwrap();
    assert!(
        reason.starts_with("exited at once: status 1; its last words: no CUDA-capable device"),
        "{reason}"
    );
    assert!(!m.available);
}

#[test]
fn mps_is_off_by_default_and_run_enforce_mps_says_so() {
    let daemon = Daemon::start("1x16GiB");
    let m = mps_status(&daemon);
    assert!(!m.enabled && !m.available, "{m:?}");
    let out = daemon.gpudctl(&["run", "--enforce", "mps", "--vram", "1GiB", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(10), "{stderr}");
    assert!(stderr.contains("[enforce] mps = false"), "{stderr}");
}

#[test]
fn run_enforce_mps_gives_the_program_the_client_environment() {
    let f = Fixture::new();
    let control = fake_control(f.dir.path(), &f.record());
    let daemon = Daemon::start_with("2x16GiB", &f.config(&control));
    let up = wait_for(&daemon, "MPS comes up", |m| m.available);
    let out = daemon.gpudctl(&["status"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&format!(
            "MPS: up (pid {}, pipe directory {})",
            up.pid.unwrap(),
            f.mps_dir().join("pipe").display()
        )),
        "{table}"
    );
    let status = daemon.client().status().unwrap();
    let uuids: Vec<String> = status.devices.iter().map(|d| d.uuid.clone()).collect();
    let env_of = |args: &[&str]| {
        let mut all = vec!["run", "--enforce", "mps"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "env"]);
        let out = daemon.gpudctl(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let pipe = f.mps_dir().join("pipe");
    let log = f.mps_dir().join("log");

    let env = env_of(&["--vram", "3GiB", "--device", "1"]);
    for line in [
        format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display()),
        format!("CUDA_MPS_LOG_DIRECTORY={}", log.display()),
        format!("CUDA_VISIBLE_DEVICES={}", uuids[1]),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=3G".to_string(),
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing:\n{env}");
    }

    // Two devices: each one's limit by its ordinal inside the program.
    let env = env_of(&["--vram", "1536MiB", "--devices", "2"]);
    let visible = env
        .lines()
        .find_map(|l| l.strip_prefix("CUDA_VISIBLE_DEVICES="))
        .expect("CUDA_VISIBLE_DEVICES");
    let listed: Vec<&str> = visible.split(',').collect();
    assert_eq!(listed.len(), 2, "{visible}");
    assert!(
        listed.iter().all(|u| uuids.iter().any(|x| x == u)),
        "{visible}"
    );
    assert!(
        env.lines()
            .any(|l| l == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1536M,1=1536M"),
        "{env}"
    );

    // While it runs, status says the program's lease is enforced by MPS (the attach follows
    // the start: the program asks until the lease says how it is enforced).
    let gpudctl = gpud_tests::bin("gpudctl");
    let ask = format!(
        "for i in $(seq 50); do out=$('{}' --socket '{}' leases --json); \
         case \"$out\" in *enforced_by*) break;; esac; sleep 0.1; done; echo \"$out\"",
        gpudctl.display(),
        daemon.socket.display()
    );
    let out = daemon.gpudctl(&[
        "run",
        "--enforce",
        "mps",
        "--vram",
        "1GiB",
        "--",
        "sh",
        "-c",
        &ask,
    ]);
    let leases = String::from_utf8_lossy(&out.stdout).replace(' ', "");
    assert!(leases.contains(r#""enforced_by":"mps""#), "{leases}");

    // A lease without memory has no limit to give.
    let out = daemon.gpudctl(&["run", "--enforce", "mps", "--compute", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `systemd-analyze security --offline=yes` of the unit in `dir`: its lines.
fn security(dir: &Path) -> String {
    let out = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(dir.join("gpud.service"))
        .output()
        .expect("systemd-analyze must be installed (scripts/test.sh installs systemd)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `security` marks the check `name` as allowed (✗: the unit permits it).
fn permits(security: &str, name: &str) -> bool {
    security
        .lines()
        .any(|l| l.contains(name) && l.trim_start().starts_with('✗'))
}

#[test]
fn the_mps_drop_in_passes_verify_and_allows_what_the_control_daemon_needs() {
    let root = gpud_tests::ops::repo_root_dir();
    let dir = gpud_tests::ops::tempdir("gpud-mps-unit");
    let gpud = gpud_tests::bin("gpud");
    for unit in ["gpud.service", "gpud.socket"] {
        let text = std::fs::read_to_string(root.join("systemd").join(unit)).unwrap();
        let text = text.replace("/usr/local/bin/gpud", gpud.to_str().unwrap());
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    let shipped = security(dir.path());
    assert!(!permits(&shipped, "CAP_SET(UID|GID"), "{shipped}");
    assert!(!permits(&shipped, "MemoryDenyWriteExecute"), "{shipped}");
    // Installed as a drop-in beside the unit, where systemd reads drop-ins of that unit.
    let drop_ins = dir.path().join("gpud.service.d");
    std::fs::create_dir(&drop_ins).unwrap();
    std::fs::copy(
        root.join("systemd/gpud-mps.conf"),
        drop_ins.join("mps.conf"),
    )
    .unwrap();
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("gpud.service"))
        .arg(dir.path().join("gpud.socket"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success(), "{said}");
    let findings: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("gpud") || l.contains("mps.conf"))
        .collect();
    assert!(findings.is_empty(), "systemd-analyze verify:\n{said}");
    let with_mps = security(dir.path());
    for allowed in [
        "CAP_SET(UID|GID",
        "SystemCallFilter=~@privileged",
        "MemoryDenyWriteExecute",
    ] {
        assert!(permits(&with_mps, allowed), "{allowed}:\n{with_mps}");
    }
    assert!(with_mps.contains("char-nvidia-uvm:rw"), "{with_mps}");
    // What the drop-in leaves alone.
    for kept in [
        "NoNewPrivileges",
        "RestrictAddressFamilies=~AF_(INET|INET6)",
        "ProtectSystem",
    ] {
        assert!(!permits(&with_mps, kept), "{kept}:\n{with_mps}");
    }
    let exposure = with_mps
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_default();
    println!("with the MPS drop-in: {}", exposure.trim());
}
