//! The systemd units and the install script, checked with systemd's own tools, and socket
//! activation through `systemd-socket-activate`.

use std::process::{Command, Stdio};
use std::time::Duration;

use gpud_tests::ops::{repo_root_dir, tempdir};
use gpud_tests::{bin, bin_dir, wait_until};

/// Copies the units into a directory with ExecStart pointing at the built binary.
fn units_for_test() -> tempfile::TempDir {
    let dir = tempdir("gpud-units");
    let root = repo_root_dir();
    let gpud = bin("gpud");
    for unit in ["gpud.service", "gpud.socket"] {
        let text = std::fs::read_to_string(root.join("systemd").join(unit)).unwrap();
        let text = text.replace("/usr/local/bin/gpud", gpud.to_str().unwrap());
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    dir
}

#[test]
fn units_pass_verify_and_exposure_is_at_most_2_5() {
    let dir = units_for_test();
    let service = dir.path().join("gpud.service");
    let socket = dir.path().join("gpud.socket");
    // --man=no: the units name man:gpud(8), which only an install puts on the host
    // (scripts/test-package.sh verifies the installed units with it).
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&service)
        .arg(&socket)
        .output()
        .expect("systemd-analyze must be installed (scripts/test.sh installs systemd)");
    let said = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success(),
        "systemd-analyze verify failed:\n{said}"
    );
    // verify exits 0 on some warnings; any line about our units is a finding.
    let findings: Vec<&str> = said.lines().filter(|l| l.contains("gpud")).collect();
    assert!(findings.is_empty(), "systemd-analyze verify:\n{said}");

    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&service)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&security.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| {
            panic!(
                "no exposure line:\n{out}\n{}",
                String::from_utf8_lossy(&security.stderr)
            )
        });
    let exposure: f64 = line
        .split(':')
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("cannot read {line:?}"));
    println!("systemd-analyze security --offline=yes: {}", line.trim());
    assert!(exposure <= 2.5, "exposure {exposure} > 2.5:\n{out}");
}

#[test]
fn install_script_stages_every_file_and_uninstall_removes_them() {
    let dest = tempdir("gpud-destdir");
    let script = repo_root_dir().join("scripts/install.sh");
    let run = |args: &[&str]| {
        let out = Command::new("bash")
            .arg(&script)
            .arg("--destdir")
            .arg(dest.path())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "install.sh {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["--bin-dir", bin_dir().to_str().unwrap()]);
    let d = dest.path();
    let installed = [
        "usr/local/bin/gpud",
        "usr/local/bin/gpudctl",
        "etc/systemd/system/gpud.service",
        "etc/systemd/system/gpud.socket",
        "etc/dbus-1/system.d/org.gpud.Manager1.conf",
        "etc/sysusers.d/gpud.conf",
        "etc/tmpfiles.d/gpud.conf",
        // Rendered at install time by gpud-cli-docs from the binaries' command lines.
        "usr/local/share/man/man8/gpud.8",
        "usr/local/share/man/man1/gpudctl.1",
        "usr/local/share/man/man1/gpudctl-run.1",
        "usr/local/share/bash-completion/completions/gpudctl",
        "usr/local/share/zsh/site-functions/_gpudctl",
        "usr/local/share/fish/vendor_completions.d/gpudctl.fish",
        // The documents the help and the man pages refer to.
        "usr/local/share/doc/gpud/README.md",
        "usr/local/share/doc/gpud/docs/PROTOCOL.md",
        // The config last: --uninstall keeps it.
        "etc/gpud/gpud.toml",
    ];
    for f in installed {
        assert!(d.join(f).exists(), "{f} not installed");
    }
    // The installed config is valid for the installed daemon.
    let check = Command::new(d.join("usr/local/bin/gpud"))
        .arg("--config")
        .arg(d.join("etc/gpud/gpud.toml"))
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // A second install keeps the administrator's config.
    std::fs::write(d.join("etc/gpud/gpud.toml"), "# mine\n").unwrap();
    run(&["--bin-dir", bin_dir().to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(d.join("etc/gpud/gpud.toml")).unwrap(),
        "# mine\n"
    );
    assert!(d.join("etc/gpud/gpud.toml.new").exists());

    run(&["--uninstall"]);
    for f in &installed[..installed.len() - 1] {
        assert!(!d.join(f).exists(), "{f} left behind by --uninstall");
    }
    assert!(
        d.join("etc/gpud/gpud.toml").exists(),
        "config kept without --purge"
    );
    run(&["--uninstall", "--purge"]);
    assert!(!d.join("etc/gpud").exists(), "--purge removes the config");
}

#[test]
fn the_first_connection_starts_gpud_on_the_passed_socket() {
    let dir = tempdir("gpud-activate");
    // Another path than the --socket gpud is given: the log must name the one it serves.
    let socket = dir.path().join("activated.sock");
    let gpud = gpud_tests::ops::Gpud::command(dir.path(), "16GiB", "");
    let program = gpud.get_program().to_owned();
    let args: Vec<_> = gpud.get_args().map(|a| a.to_owned()).collect();
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("gpud.log"))
        .unwrap();
    // systemd-socket-activate binds, waits for the first connection, then execs gpud in its
    // own process with LISTEN_FDS=1, LISTEN_PID and LISTEN_FDNAMES set.
    let mut activator = Command::new("systemd-socket-activate")
        .arg("--listen")
        .arg(&socket)
        .arg("--fdname=gpud.socket")
        .arg(&program)
        .args(&args)
        .args(["--dbus", "none"])
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("systemd-socket-activate must be installed (scripts/test.sh installs systemd)");
    assert!(
        wait_until(Duration::from_secs(10), || socket.exists()),
        "no socket"
    );
    let comm =
        || std::fs::read_to_string(format!("/proc/{}/comm", activator.id())).unwrap_or_default();
    std::thread::sleep(Duration::from_millis(200));
    assert_ne!(comm().trim(), "gpud", "gpud started before any connection");

    let started = std::time::Instant::now();
    let client =
        gpud_client::blocking::Client::connect(&socket).expect("first connection is served");
    let status = client.status().expect("status from the activated daemon");
    println!("first connection served after {:?}", started.elapsed());
    assert_eq!(
        status.daemon.pid,
        activator.id(),
        "gpud runs in the activated process"
    );
    assert_eq!(status.devices.len(), 1);
    let log = std::fs::read_to_string(dir.path().join("gpud.log")).unwrap();
    assert!(log.contains("activated=true"), "{log}");
    assert!(
        log.contains(&format!("socket={} ", socket.display())),
        "the served path: {log}"
    );
    drop(client);

    let exit = gpud_tests::ops::terminate(&mut activator, Duration::from_secs(10));
    assert_eq!(
        exit.and_then(|s| s.code()),
        Some(0),
        "clean exit on SIGTERM"
    );
    // The socket belongs to the activator (systemd): gpud leaves it in place.
    assert!(
        socket.exists(),
        "an activated gpud must not remove the passed socket"
    );
}

/// The unit's last `KEY=` value, if it sets one.
fn unit_value<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("{key}=");
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .next_back()
}

/// Capability names as setpriv spells them: `CAP_KILL` → `kill`.
fn setpriv_caps(value: &str) -> Vec<String> {
    value
        .split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

/// gpud signals other users' processes (a revoked holder's, an attached program whose
/// supervisor died): under the unit's credentials CAP_KILL must be effective, not only in the
/// bounding set. With `SecureBits=noroot-locked` root gains nothing at exec, so only the ambient
/// set gives it. The unit's settings are replayed with setpriv, as systemd applies them.
#[test]
fn the_units_credentials_leave_gpud_able_to_signal_other_users() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: replaying the unit's credentials needs root");
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: no setpriv (util-linux)");
        return;
    }
    let unit = std::fs::read_to_string(repo_root_dir().join("systemd/gpud.service")).unwrap();
    let bounding = setpriv_caps(unit_value(&unit, "CapabilityBoundingSet").unwrap_or(""));
    let ambient = setpriv_caps(unit_value(&unit, "AmbientCapabilities").unwrap_or(""));
    let mut setpriv = Command::new("setpriv");
    if unit_value(&unit, "SecureBits").is_some_and(|v| v.contains("noroot")) {
        setpriv.args(["--securebits", "+noroot,+noroot_locked"]);
    }
    let keep: String = bounding.iter().map(|c| format!(",+{c}")).collect();
    setpriv.arg("--bounding-set").arg(format!("-all{keep}"));
    if !ambient.is_empty() {
        let list: Vec<String> = ambient.iter().map(|c| format!("+{c}")).collect();
        let list = list.join(",");
        setpriv.args(["--inh-caps", &list, "--ambient-caps", &list]);
    }
    let out = setpriv
        .args(["grep", "CapEff", "/proc/self/status"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "setpriv: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let effective = text
        .split_whitespace()
        .nth(1)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or_else(|| panic!("no CapEff in {text:?}"));
    const CAP_KILL: u64 = 1 << 5;
    assert_ne!(
        effective & CAP_KILL,
        0,
        "under the unit gpud has no effective CAP_KILL (CapEff {effective:#x}): it could not \
         signal other users' processes"
    );
}
