//! The operator's surface against real daemons: messages that name what is wrong (each cause
//! once), log lines that say what happened and who did it, exit codes, and what gpudctl shows
//! while it waits.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpud_client::LeaseRequest;
use gpud_tests::{Daemon, bin, frame, wait_until};
use serde_json::{Value, json};

const GIB: u64 = 1 << 30;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn gpud(args: &[&str]) -> Output {
    Command::new(bin("gpud"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run gpud")
}

fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn check_config_refuses_bad_options_and_names_them() {
    let out = gpud(&["--check-config", "--simulate", "bogus"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!text(&out.stdout).contains("config ok"));
    assert!(
        err.contains("--simulate") && err.contains("\"bogus\""),
        "{err}"
    );
    let out = gpud(&["--check-config", "--log", "bogus==="]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--log") && err.contains("bogus==="), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gpud.toml");
    std::fs::write(&config, "[devices]\nheadroom = \"lots\"\n").unwrap();
    let out = gpud(&["--check-config", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    std::fs::write(&config, "").unwrap();
    let out = gpud(&["--check-config", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("config ok"));
}

#[test]
fn errors_name_each_cause_once() {
    let missing = std::io::Error::from_raw_os_error(libc::ENOENT).to_string();
    let out = gpud(&["--config", "/nonexistent/gpud.toml"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.matches(&missing).count(), 1, "{err}");
    assert!(err.contains("/nonexistent/gpud.toml"), "{err}");

    let dir = gpud_tests::ops::tempdir("gpud-bus");
    let socket = dir.path().join("gpud.sock");
    let state = dir.path().join("state");
    let out = gpud(&[
        "--simulate",
        "16GiB",
        "--socket",
        socket.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--dbus",
        "unix:path=/nonexistent/bus",
        "--log",
        "error",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches(&missing).count(), 1, "{err}");

    let out = Command::new(bin("gpudctl"))
        .args(["--socket", "/nonexistent/gpud.sock", "status"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.matches(&missing).count(), 1, "{err}");
    assert!(err.contains("is gpud running?"), "{err}");
}

#[test]
fn a_user_the_socket_refuses_hears_of_permissions_not_of_a_missing_daemon() {
    if !running_as_root() {
        eprintln!("skipped: needs root to run gpudctl as another user");
        return;
    }
    let daemon = Daemon::start("16GiB");
    let out = daemon
        .gpudctl_command(&["status"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(!err.contains("is gpud running"), "{err}");
    assert!(
        err.contains("permission problem") && err.contains("group `"),
        "{err}"
    );
    assert!(err.contains(&daemon.socket.display().to_string()), "{err}");
}

#[test]
fn a_headroom_larger_than_a_device_is_warned_with_its_numbers() {
    let dir = gpud_tests::ops::tempdir("gpud-headroom");
    let socket = dir.path().join("gpud.sock");
    let log = std::fs::File::create(dir.path().join("gpud.log")).unwrap();
    let mut child = Command::new(bin("gpud"))
        .args([
            "--simulate",
            "16GiB",
            "--headroom",
            "20GiB",
            "--dbus",
            "none",
        ])
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(dir.path().join("gpud.log")).unwrap_or_default();
    let up = wait_until(Duration::from_secs(10), || read().contains("gpud ready"));
    let _ = child.kill();
    let _ = child.wait();
    let log = read();
    assert!(up, "{log}");
    let warning = log
        .lines()
        .find(|l| l.contains("can grant no memory"))
        .unwrap_or_else(|| panic!("no warning: {log}"));
    assert!(
        warning.contains("WARN") && warning.contains("device 0"),
        "{warning}"
    );
    assert!(
        warning.contains("20.0 GiB") && warning.contains("16.0 GiB"),
        "{warning}"
    );
}

#[test]
fn a_user_daemon_keeps_its_journal_in_its_own_state_directory() {
    if !running_as_root() {
        eprintln!("skipped: needs root to run gpud as another user");
        return;
    }
    let dir = gpud_tests::ops::tempdir("gpud-user");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    nix::unistd::chown(&home, Some(65534.into()), Some(65534.into())).unwrap();
    let socket = home.join("gpud.sock");
    let mut child = Command::new(bin("gpud"))
        .args(["--simulate", "16GiB", "--dbus", "none", "--log", "warn"])
        .arg("--socket")
        .arg(&socket)
        .env("HOME", &home)
        .env_remove("XDG_STATE_HOME")
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let journal = home.join(".local/state/gpud/leases.journal");
    let made = wait_until(Duration::from_secs(10), || journal.exists());
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(
        made,
        "no journal at {}: {}",
        journal.display(),
        text(&out.stderr)
    );
}

#[test]
fn gpudctl_has_its_own_about_and_lists_its_exit_codes() {
    let out = Command::new(bin("gpudctl")).arg("--help").output().unwrap();
    let help = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(help.starts_with("Inspect and operate gpud"), "{help}");
    assert!(!help.contains("Client library"), "{help}");
    assert!(
        help.contains("Exit status:") && help.contains("revoked"),
        "{help}"
    );
    let out = gpud(&["--help"]);
    assert!(text(&out.stdout).contains("Exit status:"));
}

#[test]
fn refusals_read_for_people_and_exit_refused() {
    let daemon = Daemon::start("16GiB");
    let out = daemon.gpudctl(&["revoke", "999"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("no lease 999") && !err.contains("session"),
        "{err}"
    );
    let out = daemon.gpudctl(&["run", "--vram", "32GiB", "--", "true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("32.0 GiB can never fit") && err.contains("16.0 GiB"),
        "{err}"
    );
}

#[test]
fn revocations_say_why_and_who() {
    let daemon = Daemon::start_with(
        "2x16GiB",
        "[scheduler]\nrevoke_after_yield = \"100ms\"\n[scheduler.max_hold]\nnormal = \"100ms\"\n",
    );
    let c = daemon.client();
    let ignoring = c
        .acquire(
            &LeaseRequest::new()
                .compute()
                .device(gpud_client::Placement::Index(0)),
        )
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .log()
            .contains("ignored the yield notice")),
        "{}",
        daemon.log()
    );
    let line = daemon
        .log()
        .lines()
        .find(|l| l.contains("ignored the yield notice"))
        .unwrap()
        .to_string();
    assert!(
        line.contains(&format!("lease={}", ignoring.id()))
            && line.contains(&format!("pid={}", std::process::id())),
        "{line}"
    );

    let held = c
        .acquire(
            &LeaseRequest::new()
                .vram(GIB)
                .device(gpud_client::Placement::Index(1))
                .label("job-7"),
        )
        .unwrap();
    let out = daemon.gpudctl(&["revoke", &held.id().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = daemon.log();
    let line = log
        .lines()
        .find(|l| l.contains("revoked by an administrator"))
        .unwrap_or_else(|| panic!("{log}"));
    let me = nix::unistd::geteuid().as_raw();
    assert!(
        line.contains(&format!("by_uid={me}"))
            && line.contains("by_pid=")
            && line.contains("by_process=gpudctl")
            && line.contains("label=job-7"),
        "{line}"
    );
}

#[test]
fn a_reload_names_the_keys_that_need_a_restart() {
    let daemon = Daemon::start_with("16GiB", "[devices]\ncompute_slots = 1\n");
    // SIGHUP is handled once gpud says it is ready (the socket answers a little earlier).
    assert!(wait_until(Duration::from_secs(5), || daemon
        .log()
        .contains("gpud ready")));
    std::fs::write(
        daemon.dir.path().join("gpud.toml"),
        "[devices]\ncompute_slots = 2\nheadroom = \"1GiB\"\npoll_interval = \"2s\"\n",
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || daemon
        .log()
        .contains("configuration reloaded")));
    let log = daemon.log();
    let line = log
        .lines()
        .find(|l| l.contains("take effect only when gpud restarts"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains("devices.headroom") && line.contains("devices.poll_interval"),
        "{line}"
    );
    assert!(
        !line.contains("compute_slots"),
        "applied, not ignored: {line}"
    );
}

#[test]
fn watch_appends_plain_screens_in_a_pipe_and_refuses_a_busy_interval() {
    let daemon = Daemon::start("16GiB");
    // Bounded: a gpudctl that took 0s would refresh for ever.
    let mut busy = daemon
        .gpudctl_command(&["watch", "--interval", "0s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let refused = wait_until(Duration::from_secs(5), || {
        matches!(busy.try_wait(), Ok(Some(_)))
    });
    if !refused {
        let _ = busy.kill();
    }
    let out = busy.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(refused, "watch --interval 0s ran on");
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("100ms"), "{err}");
    let mut watch = daemon
        .gpudctl_command(&["watch", "--interval", "100ms"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = watch.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) && text(&got).matches("DEV").count() < 2 {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        got
    });
    let got = reader.join().unwrap();
    let _ = watch.kill();
    let _ = watch.wait();
    let screens = text(&got);
    assert!(screens.matches("DEV").count() >= 2, "{screens}");
    assert!(!screens.contains('\x1b'), "escapes in a pipe: {screens:?}");
}

#[test]
fn every_read_command_speaks_json() {
    let daemon = Daemon::start("16GiB");
    let _held = daemon
        .client()
        .acquire(&LeaseRequest::new().vram(GIB))
        .unwrap();
    for args in [
        &["status", "--json"][..],
        &["leases", "--json"],
        &["metrics", "--json"],
    ] {
        let out = daemon.gpudctl(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out.stdout)));
        if args[0] == "metrics" {
            let samples = v["samples"].as_array().unwrap();
            let sessions = samples
                .iter()
                .find(|s| s["name"] == "gpud_sessions")
                .expect("gpud_sessions");
            assert_eq!(sessions["type"], "gauge");
            assert!(sessions["value"].as_f64().unwrap() >= 1.0);
            let reserved = samples
                .iter()
                .find(|s| s["name"] == "gpud_device_memory_reserved_bytes")
                .unwrap();
            assert_eq!(reserved["labels"]["device"], "0");
            assert_eq!(reserved["value"].as_f64(), Some(GIB as f64));
        }
    }
}

/// Reads one frame from a raw session.
fn read_frame(stream: &mut UnixStream) -> Value {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).unwrap();
    serde_json::from_slice(&body).unwrap()
}

fn raw_session(daemon: &Daemon) -> (UnixStream, Value) {
    let mut s = UnixStream::connect(&daemon.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&frame(&json!({"type": "hello", "version": 1})))
        .unwrap();
    let welcome = read_frame(&mut s);
    (s, welcome)
}

#[test]
fn waiters_that_ask_hear_their_place_on_the_wire_and_others_hear_nothing_new() {
    let daemon = Daemon::start("16GiB");
    let _full = daemon
        .client()
        .acquire(&LeaseRequest::new().vram(16 * GIB))
        .unwrap();
    let (mut asking, welcome) = raw_session(&daemon);
    assert_eq!(
        welcome["features"],
        json!(["queued_events", "multi_device", "attach", "host"]),
        "{welcome}"
    );
    let acquire = |id: u64, queued: bool| {
        let mut args = json!({"vram_bytes": GIB});
        if queued {
            args["queued_events"] = json!(true);
        }
        frame(&json!({"type": "request", "id": id, "op": {"acquire": args}}))
    };
    // An older client's acquire, without the field: it waits and hears nothing but answers.
    let (mut old, _) = raw_session(&daemon);
    old.write_all(&acquire(1, false)).unwrap();
    asking.write_all(&acquire(5, true)).unwrap();
    let event = read_frame(&mut asking);
    assert_eq!(
        event,
        json!({"type": "event", "event": {"queued": {"request": 5, "position": 2}}})
    );
    old.write_all(&frame(&json!({"type": "request", "id": 2, "op": "ping"})))
        .unwrap();
    let next = read_frame(&mut old);
    assert_eq!(next["type"], "reply", "{next}");
    assert_eq!(next["id"], 2, "{next}");
    // The one ahead gives up: the asking one moves up.
    old.write_all(&frame(
        &json!({"type": "request", "id": 3, "op": {"cancel": {"request": 1}}}),
    ))
    .unwrap();
    let event = read_frame(&mut asking);
    assert_eq!(event["event"]["queued"]["position"], 1, "{event}");
}

/// The lines of a child's stderr, as they come.
fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let err = child.stderr.take().expect("a piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn run_verbose_shows_its_place_while_it_waits_and_quiet_run_shows_nothing() {
    let daemon = Daemon::start("16GiB");
    let holder = daemon.client();
    let full = holder.acquire(&LeaseRequest::new().vram(16 * GIB)).unwrap();
    let mut quiet = daemon
        .gpudctl_command(&["run", "--vram", "1GiB", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let quiet_lines = stderr_lines(&mut quiet);
    assert!(wait_until(Duration::from_secs(10), || holder
        .status()
        .unwrap()
        .waiters
        .len()
        == 1));
    let mut verbose = daemon
        .gpudctl_command(&["run", "-v", "--vram", "1GiB", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut verbose);
    let first = lines
        .recv_timeout(Duration::from_secs(10))
        .expect("a waiting line");
    assert!(
        first.starts_with("gpudctl: waiting for the lease: place 2 in the queue, waited"),
        "{first}"
    );
    full.release().unwrap();
    assert_eq!(verbose.wait().unwrap().code(), Some(0));
    assert_eq!(quiet.wait().unwrap().code(), Some(0));
    let rest: Vec<String> = lines.try_iter().collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("lease") && l.contains("after")),
        "{rest:?}"
    );
    assert!(rest.iter().all(|l| !l.contains('\x1b')), "{rest:?}");
    let quiet: Vec<String> = quiet_lines.try_iter().collect();
    assert!(quiet.is_empty(), "nothing extra in a pipe: {quiet:?}");
}

#[test]
fn gpudctl_exit_codes_tell_its_outcomes_apart() {
    let daemon = Daemon::start("16GiB");
    let code = |args: &[&str]| {
        let out = daemon.gpudctl(args);
        (out.status.code(), text(&out.stderr))
    };
    // Usage.
    assert_eq!(code(&["no-such-command"]).0, Some(2));
    let (c, err) = code(&["run", "--", "true"]);
    assert_eq!(c, Some(2), "{err}");
    // The program's status passes through; one that cannot run gets the shell's codes.
    assert_eq!(
        code(&["run", "--vram", "1GiB", "--", "sh", "-c", "exit 42"]).0,
        Some(42)
    );
    let (c, err) = code(&["run", "--vram", "1GiB", "--", "/nonexistent/program"]);
    assert_eq!(c, Some(127), "{err}");
    let plain = daemon.dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let (c, err) = code(&["run", "--vram", "1GiB", "--", plain.to_str().unwrap()]);
    assert_eq!(c, Some(126), "{err}");
    // Timed out while the device is full.
    let full = daemon
        .client()
        .acquire(&LeaseRequest::new().vram(16 * GIB))
        .unwrap();
    let (c, err) = code(&["run", "--vram", "1GiB", "--timeout", "200ms", "--", "true"]);
    assert_eq!(c, Some(6), "{err}");
    full.release().unwrap();
    // Revoked while the program runs.
    let running = daemon
        .gpudctl_command(&[
            "run",
            "--vram",
            "1GiB",
            "--label",
            "to-revoke",
            "--",
            "sleep",
            "30",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let admin = daemon.client();
    let lease = {
        let mut found = None;
        wait_until(Duration::from_secs(10), || {
            found = admin
                .status()
                .unwrap()
                .leases
                .iter()
                .find(|l| l.label.as_deref() == Some("to-revoke"))
                .map(|l| l.id);
            found.is_some()
        });
        found.expect("the run's lease")
    };
    admin.revoke(lease).unwrap();
    let out = running.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("revoked (admin)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn gpudctl_run_exits_lost_when_gpud_does_not_come_back() {
    let mut daemon = Daemon::start("16GiB");
    let mut running = daemon
        .gpudctl_command(&["run", "--vram", "1GiB", "--", "sleep", "120"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c = daemon.client();
    assert!(wait_until(Duration::from_secs(10), || !c
        .status()
        .unwrap()
        .leases
        .is_empty()));
    drop(c);
    daemon.terminate(Duration::from_secs(10));
    // The client library tries to reconnect for 30 s before it gives the lease up.
    let start = Instant::now();
    let status = loop {
        if let Some(s) = running.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = running.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    let _ = running.stderr.take().unwrap().read_to_string(&mut err);
    assert_eq!(status.and_then(|s| s.code()), Some(8), "{err}");
}

#[test]
fn gpudctl_exits_failed_on_an_answer_it_does_not_understand() {
    let dir = gpud_tests::ops::tempdir("gpud-garbage");
    let socket = dir.path().join("gpud.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // Not gpud: a welcome that is not JSON.
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let body = b"{not json";
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        let _ = s.write_all(&out);
        std::thread::sleep(Duration::from_millis(500));
    });
    let out = Command::new(bin("gpudctl"))
        .arg("--socket")
        .arg(&socket)
        .arg("status")
        .output()
        .unwrap();
    server.join().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("protocol error"), "{err}");
}

#[test]
fn run_on_a_terminal_draws_a_live_waiting_line_and_clears_it_at_the_grant() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux's script is needed for a terminal");
        return;
    }
    let daemon = Daemon::start("16GiB");
    let holder = daemon.client();
    let full = holder.acquire(&LeaseRequest::new().vram(16 * GIB)).unwrap();
    let gpudctl = format!(
        "{} --socket {} run --vram 1GiB -- true",
        bin("gpudctl").display(),
        daemon.socket.display()
    );
    // `script` runs the command on a new terminal and copies what it writes to stdout.
    let mut child = Command::new("script")
        .args(["-qfec", &gpudctl, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let start = Instant::now();
    while !text(&seen).contains("place 1 in the queue") && start.elapsed() < Duration::from_secs(10)
    {
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.extend(chunk);
        }
    }
    assert!(
        text(&seen).contains("\r\x1b[Kgpudctl: waiting for the lease: place 1"),
        "{:?}",
        text(&seen)
    );
    full.release().unwrap();
    assert!(child.wait().unwrap().success());
    // Until the copy ends (its sender goes with the end of the output).
    while let Ok(chunk) = rx.recv_timeout(Duration::from_secs(5)) {
        seen.extend(chunk);
    }
    assert!(
        text(&seen).ends_with("\r\x1b[K"),
        "cleared at the grant: {:?}",
        text(&seen)
    );
}

#[test]
fn a_library_waiter_hears_its_place_until_the_grant() {
    let daemon = Daemon::start("16GiB");
    let full = daemon
        .client()
        .acquire(&LeaseRequest::new().vram(16 * GIB))
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let client = daemon.client();
    let waiter = std::thread::spawn(move || {
        client
            .acquire_hearing_places(&LeaseRequest::new().vram(GIB), |place| {
                let _ = tx.send(place);
            })
            .map(|lease| lease.id())
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(1));
    full.release().unwrap();
    waiter.join().unwrap().expect("granted");
    assert!(rx.try_recv().is_err(), "nothing after the grant");
}
