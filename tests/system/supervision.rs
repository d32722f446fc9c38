//! `gpudctl run` supervision on a real gpud: the program never outlives its lease. A gpudctl
//! killed with SIGKILL takes its program (and the program's group) with it, a revoked program
//! that ignores SIGTERM is killed after the grace, yield notices become the signal the user
//! chose, and gpud's `attach` checks refuse what the caller has no business attaching.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpud_client::LeaseRequest;
use gpud_client::proto::{Class, EnforcedBy, ErrorCode, LeaseStatus};
use gpud_tests::{Daemon, bin, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const GIB: u64 = 1 << 30;

/// Field `n` (1-based as proc(5) numbers them, 3 or more) of /proc/PID/stat: the fields
/// start after the command name's last ')'.
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(n.checked_sub(3)?)
        .map(str::to_owned)
}

/// Whether a process has ended: no such pid, or a zombie waiting for its parent.
fn gone(pid: u32) -> bool {
    stat_field(pid, 3).is_none_or(|state| state == "Z" || state == "X")
}

/// Field 5 of /proc/PID/stat.
fn process_group(pid: u32) -> Option<u32> {
    stat_field(pid, 5)?.parse().ok()
}

/// A pid a program wrote to `path`, once it has.
fn read_pid(path: &Path) -> u32 {
    let mut pid = None;
    assert!(
        wait_until(Duration::from_secs(10), || {
            pid = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse().ok());
            pid.is_some()
        }),
        "{} was never written",
        path.display()
    );
    pid.unwrap_or_default()
}

/// The lease labelled `label`, once it is granted.
fn lease_labelled(daemon: &Daemon, label: &str) -> LeaseStatus {
    let c = daemon.client();
    let mut found = None;
    wait_until(Duration::from_secs(10), || {
        found = c
            .status()
            .unwrap()
            .leases
            .into_iter()
            .find(|l| l.label.as_deref() == Some(label));
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no lease labelled {label}; log:\n{}", daemon.log()))
}

/// The lease labelled `label` once a program is attached to it.
fn attached_lease(daemon: &Daemon, label: &str) -> LeaseStatus {
    let mut lease = lease_labelled(daemon, label);
    wait_until(Duration::from_secs(10), || {
        lease = lease_labelled(daemon, label);
        lease.program_pid.is_some()
    });
    lease
}

/// Lines of a child's stderr as they come.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line of `lines` that contains `want`; the lines seen until then.
fn wait_line(lines: &mpsc::Receiver<String>, want: &str, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut seen = String::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(want) => return Ok(()),
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
            }
            Err(_) => break,
        }
    }
    Err(seen)
}

#[test]
fn kill_9_of_gpudctl_ends_the_program_and_its_group_and_frees_the_lease() {
    let daemon = Daemon::start_with("16GiB", "[supervision]\nkill_grace = \"1s\"\n");
    let dir = daemon.dir.path();
    let (program_file, child_file) = (dir.join("program.pid"), dir.join("child.pid"));
    // The program starts a child in its group and waits: the parent-death signal reaches the
    // program only, so the child is gpud's to end.
    let script = format!(
        "echo $$ > {}; sleep 300 & echo $! > {}; wait",
        program_file.display(),
        child_file.display()
    );
    let mut gpudctl = daemon
        .gpudctl_command(&[
            "run", "--vram", "1GiB", "--label", "orphan", "--", "sh", "-c", &script,
        ])
        .spawn()
        .unwrap();
    let program = read_pid(&program_file);
    let child = read_pid(&child_file);
    assert_eq!(
        process_group(program),
        Some(program),
        "the program leads a group"
    );
    assert_eq!(process_group(child), Some(program), "its child is in it");
    let lease = attached_lease(&daemon, "orphan");
    assert_eq!(lease.program_pid, Some(program));
    assert_eq!(lease.enforced_by, Some(EnforcedBy::Supervised));
    let table = String::from_utf8(daemon.gpudctl(&["leases"]).stdout).unwrap();
    assert!(
        table.contains("PROGRAM") && table.contains(&format!("{program} (supervised)")),
        "{table}"
    );
    let metrics = String::from_utf8(daemon.gpudctl(&["metrics"]).stdout).unwrap();
    assert!(
        metrics.contains("gpud_leases_enforced{enforced_by=\"supervised\"} 1"),
        "{metrics}"
    );

    gpudctl.kill().unwrap();
    gpudctl.wait().unwrap();
    let c = daemon.client();
    assert!(
        wait_until(Duration::from_secs(5), || c
            .status()
            .unwrap()
            .leases
            .is_empty()),
        "the lease is freed"
    );
    assert!(
        wait_until(Duration::from_secs(5), || gone(program) && gone(child)),
        "the program {program} and its child {child} still run; log:\n{}",
        daemon.log()
    );
    assert!(daemon.log().contains("ending the program attached to it"));
}

#[test]
fn an_orphaned_program_that_ignores_sigterm_is_killed_after_gpud_s_grace() {
    let daemon = Daemon::start_with("16GiB", "[supervision]\nkill_grace = \"700ms\"\n");
    let program_file = daemon.dir.path().join("program.pid");
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        program_file.display()
    );
    let mut gpudctl = daemon
        .gpudctl_command(&[
            "run", "--vram", "1GiB", "--label", "stubborn", "--", "sh", "-c", &script,
        ])
        .spawn()
        .unwrap();
    let program = read_pid(&program_file);
    attached_lease(&daemon, "stubborn");
    gpudctl.kill().unwrap();
    gpudctl.wait().unwrap();
    let killed_at = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !gone(program),
        "SIGTERM is ignored; SIGKILL waits for the grace"
    );
    assert!(
        wait_until(Duration::from_secs(5), || gone(program)),
        "SIGKILL after the grace; log:\n{}",
        daemon.log()
    );
    assert!(killed_at.elapsed() >= Duration::from_millis(600));
}

#[test]
fn a_revoked_program_that_ignores_sigterm_is_killed_after_kill_after_and_gpudctl_exits_revoked() {
    let daemon = Daemon::start("16GiB");
    let program_file = daemon.dir.path().join("program.pid");
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        program_file.display()
    );
    let gpudctl = daemon
        .gpudctl_command(&[
            "run",
            "--vram",
            "1GiB",
            "--label",
            "deaf",
            "--kill-after",
            "600ms",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let program = read_pid(&program_file);
    let lease = attached_lease(&daemon, "deaf");
    let revoked_at = Instant::now();
    let out = daemon.gpudctl(&["revoke", &lease.id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = gpudctl.wait_with_output().unwrap();
    let took = revoked_at.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "REVOKED: {stderr}");
    assert!(stderr.contains("sending SIGKILL"), "{stderr}");
    assert!(
        took >= Duration::from_millis(550) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(wait_until(Duration::from_secs(2), || gone(program)));

    // A program that exits 0 on SIGTERM was still stopped by the revocation: REVOKED.
    let gpudctl = daemon
        .gpudctl_command(&[
            "run",
            "--vram",
            "1GiB",
            "--label",
            "polite",
            "--",
            "sh",
            "-c",
            "trap 'exit 0' TERM; while :; do sleep 0.05; done",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lease = attached_lease(&daemon, "polite");
    daemon.client().revoke(lease.id).unwrap();
    let out = gpudctl.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_yield_notice_reaches_the_program_as_the_chosen_signal_or_is_logged() {
    let daemon = Daemon::start("16GiB");
    let yielded = daemon.dir.path().join("yielded");
    let script = format!(
        "trap 'echo yes > {}' USR1; while :; do sleep 0.05; done",
        yielded.display()
    );
    let mut gpudctl = daemon
        .gpudctl_command(&[
            "run",
            "--compute",
            "--label",
            "yielder",
            "--on-yield",
            "SIGUSR1",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut gpudctl);
    attached_lease(&daemon, "yielder");
    // A critical request for the compute slot makes the holder yield.
    let socket = daemon.socket.clone();
    let critical = std::thread::spawn(move || {
        let c = gpud_client::blocking::Client::connect(&socket).unwrap();
        let lease = c
            .acquire(&LeaseRequest::new().compute().class(Class::Critical))
            .unwrap();
        lease.release().unwrap();
    });
    assert!(
        wait_until(Duration::from_secs(10), || yielded.exists()),
        "the program never got SIGUSR1; log:\n{}",
        daemon.log()
    );
    wait_line(&lines, "sending SIGUSR1", Duration::from_secs(2)).unwrap();
    kill(Pid::from_raw(gpudctl.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(gpudctl.wait().unwrap().code(), Some(128 + 15));
    critical.join().unwrap();

    // Without --on-yield the notice is logged and ignored.
    let mut gpudctl = daemon
        .gpudctl_command(&[
            "run",
            "--compute",
            "--label",
            "deaf-yielder",
            "--",
            "sh",
            "-c",
            "trap 'echo no > /dev/null' USR1; while :; do sleep 0.05; done",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut gpudctl);
    attached_lease(&daemon, "deaf-yielder");
    let socket = daemon.socket.clone();
    let critical = std::thread::spawn(move || {
        let c = gpud_client::blocking::Client::connect(&socket).unwrap();
        let lease = c
            .acquire(&LeaseRequest::new().compute().class(Class::Critical))
            .unwrap();
        lease.release().unwrap();
    });
    let seen = wait_line(&lines, "ignored (see --on-yield)", Duration::from_secs(10));
    assert!(seen.is_ok(), "no logged ignore: {seen:?}");
    kill(Pid::from_raw(gpudctl.id() as i32), Signal::SIGTERM).unwrap();
    gpudctl.wait().unwrap();
    critical.join().unwrap();
}

#[test]
fn attach_refuses_a_dead_pid_a_stranger_and_another_user_s_process() {
    let daemon = Daemon::start_with(
        "16GiB",
        "socket_mode = \"0666\"\n[access]\nallowed_uids = [65534]\n",
    );
    let c = daemon.client();
    let lease = c.acquire(&LeaseRequest::new().vram(GIB)).unwrap();
    let refused = |pid: u32| match lease.attach(pid, EnforcedBy::Supervised, true) {
        Err(gpud_client::ClientError::Daemon(body)) => body.code,
        other => panic!("attached {pid}: {other:?}"),
    };
    // An exited (and reaped) process.
    let mut exited = Command::new("true").spawn().unwrap();
    let dead = exited.id();
    exited.wait().unwrap();
    assert_eq!(refused(dead), ErrorCode::NoSuchProcess);
    // The caller's parent: same user, not a descendant.
    let parent = nix::unistd::getppid().as_raw() as u32;
    assert_eq!(refused(parent), ErrorCode::NotDescendant);
    assert_eq!(
        c.status().unwrap().leases[0].program_pid,
        None,
        "refusals record nothing"
    );
    // A child is fine, and shows.
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    lease
        .attach(child.id(), EnforcedBy::Preload, false)
        .expect("a child may be attached");
    let row = c.status().unwrap().leases[0].clone();
    assert_eq!(row.program_pid, Some(child.id()));
    assert_eq!(row.enforced_by, Some(EnforcedBy::Preload));
    let _ = child.kill();
    let _ = child.wait();

    // Another user's process: a client of uid 65534 attaching this (root's) process.
    if nix::unistd::geteuid().is_root() {
        let me = std::process::id().to_string();
        let socket = daemon.socket.to_str().unwrap().to_string();
        let mut other = Command::new(bin("gpud-chaos-client"))
            .args(["attach", &socket, &me])
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        other
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut said)
            .unwrap();
        other.wait().unwrap();
        assert!(said.contains("refused not_process_owner"), "{said}");
    } else {
        eprintln!("skipped: attaching another user's process needs root (as CI runs)");
    }
}

#[test]
fn gpudctl_run_forwards_hup_and_quit_and_exits_128_plus_the_signal_while_waiting() {
    let daemon = Daemon::start("16GiB");
    for (sig, code) in [(Signal::SIGHUP, 21), (Signal::SIGQUIT, 22)] {
        let script = "trap 'exit 21' HUP; trap 'exit 22' QUIT; while :; do sleep 0.05; done";
        let label = format!("forward-{code}");
        let mut gpudctl = daemon
            .gpudctl_command(&[
                "run", "--vram", "1GiB", "--label", &label, "--", "sh", "-c", script,
            ])
            .spawn()
            .unwrap();
        attached_lease(&daemon, &label);
        std::thread::sleep(Duration::from_millis(100));
        kill(Pid::from_raw(gpudctl.id() as i32), sig).unwrap();
        assert_eq!(gpudctl.wait().unwrap().code(), Some(code), "{sig}");
    }
    // A signal while the lease is still waiting ends gpudctl with 128 + the signal.
    let full = daemon
        .client()
        .acquire(&LeaseRequest::new().vram(16 * GIB))
        .unwrap();
    for sig in [Signal::SIGHUP, Signal::SIGQUIT] {
        let mut gpudctl = daemon
            .gpudctl_command(&["run", "--vram", "1GiB", "--", "true"])
            .spawn()
            .unwrap();
        let c = daemon.client();
        assert!(wait_until(Duration::from_secs(5), || !c
            .status()
            .unwrap()
            .waiters
            .is_empty()));
        kill(Pid::from_raw(gpudctl.id() as i32), sig).unwrap();
        assert_eq!(gpudctl.wait().unwrap().code(), Some(128 + sig as i32));
    }
    full.release().unwrap();
}

#[test]
fn a_restarted_gpud_hears_the_attach_again_with_the_re_adoption() {
    let mut daemon = Daemon::start_with("16GiB", "[supervision]\nkill_grace = \"1s\"\n");
    let program_file = daemon.dir.path().join("program.pid");
    let script = format!("echo $$ > {}; exec sleep 300", program_file.display());
    let mut gpudctl = daemon
        .gpudctl_command(&[
            "run", "--vram", "1GiB", "--label", "survivor", "--", "sh", "-c", &script,
        ])
        .spawn()
        .unwrap();
    let program = read_pid(&program_file);
    let before = attached_lease(&daemon, "survivor");
    daemon.kill_and_restart();
    // gpudctl re-adopts its lease from the journal and attaches its program again.
    let after = attached_lease(&daemon, "survivor");
    assert_eq!(after.id, before.id);
    assert_eq!(after.program_pid, Some(program), "log:\n{}", daemon.log());
    assert!(
        !gone(program),
        "a restart of gpud does not stop the program"
    );
    gpudctl.kill().unwrap();
    gpudctl.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || gone(program)),
        "the restarted gpud ends the program of the session that died; log:\n{}",
        daemon.log()
    );
}

/// The state letter of /proc/PID/stat (`S`, `T`, …).
fn state(pid: u32) -> Option<char> {
    stat_field(pid, 3)?.chars().next()
}

#[test]
fn a_program_stopped_on_the_terminal_stops_gpudctl_and_continues_with_it() {
    let daemon = Daemon::start("16GiB");
    let resumed = daemon.dir.path().join("resumed");
    // gpudctl on a terminal of its own, in its foreground, as from an interactive shell.
    let pty = nix::pty::openpty(None, None).unwrap();
    let tty = || Stdio::from(pty.slave.try_clone().unwrap());
    let script = format!("kill -STOP $$; echo yes > {}", resumed.display());
    let mut command = daemon.gpudctl_command(&[
        "run", "--vram", "1GiB", "--label", "job", "--", "sh", "-c", &script,
    ]);
    command.stdin(tty()).stdout(tty()).stderr(tty());
    // SAFETY: setsid and the TIOCSCTTY ioctl are async-signal-safe system calls; they make the
    // child a session leader whose controlling terminal is its standard input.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut gpudctl = command.spawn().unwrap();
    let pid = gpudctl.id();
    let program = attached_lease(&daemon, "job")
        .program_pid
        .unwrap_or_default();
    if !wait_until(Duration::from_secs(10), || state(pid) == Some('T')) {
        let state = state(pid);
        let _ = nix::sys::signal::killpg(Pid::from_raw(program as i32), Signal::SIGKILL);
        let _ = gpudctl.kill();
        panic!("gpudctl did not stop with its program (state {state:?})");
    }
    assert!(!resumed.exists());
    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
    let status = gpudctl.wait().unwrap();
    assert_eq!(status.code(), Some(0), "the program ran on after the stop");
    assert!(resumed.exists());
    drop(pty);
}
