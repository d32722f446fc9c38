//! gpudctl against a real daemon.

use std::time::Duration;

use gpud_client::{Class, LeaseRequest, Placement};
use gpud_tests::{Daemon, wait_until};
use serde_json::Value;

const GIB: u64 = 1 << 30;

#[test]
fn status_json_matches_what_is_held() {
    let daemon = Daemon::start("2x16GiB");
    let c = daemon.client();
    let a = c
        .acquire(
            &LeaseRequest::new()
                .vram(3 * GIB)
                .compute()
                .device(Placement::Index(1))
                .class(Class::High),
        )
        .unwrap();
    let b = c
        .acquire(
            &LeaseRequest::new()
                .vram(5 * GIB)
                .device(Placement::Index(1)),
        )
        .unwrap();
    let out = daemon.gpudctl(&["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let dev = &v["devices"][1];
    assert_eq!(dev["index"], 1);
    assert_eq!(dev["uuid"], a.info().device_uuid.as_str());
    assert_eq!(dev["name"], "Simulated GPU");
    assert_eq!(dev["total_bytes"], 16 * GIB);
    assert_eq!(dev["capacity_bytes"], 16 * GIB);
    assert_eq!(dev["reserved_bytes"], 8 * GIB);
    assert_eq!(dev["compute_holder"]["lease"], a.id());
    assert_eq!(dev["compute_holder"]["pid"], std::process::id());
    assert_eq!(dev["compute_holder"]["class"], "high");
    assert_eq!(dev["queued"]["normal"], 0);
    assert_eq!(v["devices"][0]["reserved_bytes"], 0);
    assert_eq!(v["devices"][0]["compute_holder"], Value::Null);
    let leases = v["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2);
    let la = leases.iter().find(|l| l["id"] == a.id()).unwrap();
    assert_eq!(la["device"], a.info().device_uuid.as_str());
    assert_eq!(la["vram_bytes"], 3 * GIB);
    assert_eq!(la["compute"], true);
    assert_eq!(la["class"], "high");
    assert_eq!(la["pid"], std::process::id());
    let lb = leases.iter().find(|l| l["id"] == b.id()).unwrap();
    assert_eq!(lb["compute"], false);
    // The text form shows the same and sizes in binary units.
    let text = String::from_utf8(daemon.gpudctl(&["status"]).stdout).unwrap();
    assert!(
        text.contains("8.0 GiB") && text.contains(&format!("lease {}", a.id())),
        "{text}"
    );
    let text = String::from_utf8(daemon.gpudctl(&["leases"]).stdout).unwrap();
    assert!(text.contains("3.0 GiB") && text.contains("high"), "{text}");
}

#[test]
fn a_critical_slot_grants_critical_work_beside_a_phase_and_status_shows_it() {
    let daemon = Daemon::start_with("16GiB", "[devices]\ncritical_slots = 1\n");
    let c = daemon.client();
    let phase = c
        .acquire(&LeaseRequest::new().vram(6 * GIB).compute())
        .unwrap();
    // The critical lease is granted at once beside the running phase.
    let critical = c
        .acquire(
            &LeaseRequest::new()
                .vram(6 * GIB)
                .compute()
                .class(Class::Critical)
                .timeout(Duration::from_secs(2)),
        )
        .unwrap();
    // A normal request does not get the critical slot: it times out.
    let normal = c.acquire(
        &LeaseRequest::new()
            .vram(GIB)
            .compute()
            .timeout(Duration::from_millis(200)),
    );
    assert!(normal.is_err(), "{normal:?}");
    let out = daemon.gpudctl(&["status", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let dev = &v["devices"][0];
    assert_eq!(dev["compute_slots"], 1);
    assert_eq!(dev["critical_slots"], 1);
    let holders: Vec<u64> = dev["compute_holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["lease"].as_u64().unwrap())
        .collect();
    assert_eq!(holders, vec![phase.id(), critical.id()]);
    let text = String::from_utf8(daemon.gpudctl(&["status"]).stdout).unwrap();
    assert!(text.contains("SLOTS") && text.contains("1+1c"), "{text}");
}

#[test]
fn run_passes_exit_codes_and_releases_on_exit() {
    let daemon = Daemon::start("16GiB");
    for code in [0, 3, 42] {
        let script = format!(
            "test -n \"$CUDA_VISIBLE_DEVICES\" && test -n \"$GPUD_LEASE_ID\" || exit 99; exit {code}"
        );
        let out = daemon.gpudctl(&[
            "run",
            "--vram",
            "2GiB",
            "--compute",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A program killed by a signal: 128 + signal.
    let out = daemon.gpudctl(&["run", "--compute", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15));
    // The lease is visible while the program runs, and gone after.
    let mut child = daemon
        .gpudctl_command(&[
            "run", "--vram", "1GiB", "--label", "sleeper", "--", "sleep", "1",
        ])
        .spawn()
        .unwrap();
    let c = daemon.client();
    assert!(wait_until(Duration::from_secs(5), || {
        c.status()
            .unwrap()
            .leases
            .iter()
            .any(|l| l.label.as_deref() == Some("sleeper"))
    }));
    assert!(child.wait().unwrap().success());
    assert!(wait_until(Duration::from_secs(2), || c
        .status()
        .unwrap()
        .leases
        .is_empty()));
    // Nothing to reserve, and a missing program, are clear errors.
    let out = daemon.gpudctl(&["run", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to reserve"));
    let out = daemon.gpudctl(&["run", "--compute", "--", "/no/such/program"]);
    assert!(!out.status.success());
    assert!(
        c.status().unwrap().leases.is_empty(),
        "a failed start releases the lease"
    );
}

#[test]
fn run_forwards_sigterm_to_the_program() {
    let daemon = Daemon::start("16GiB");
    let mut child = daemon
        .gpudctl_command(&[
            "run",
            "--compute",
            "--",
            "sh",
            "-c",
            "trap 'exit 17' TERM; while true; do sleep 0.05; done",
        ])
        .spawn()
        .unwrap();
    let c = daemon.client();
    assert!(wait_until(Duration::from_secs(5), || c
        .status()
        .unwrap()
        .leases
        .len()
        == 1));
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(17),
        "the program's own exit code after its TERM trap"
    );
    assert!(wait_until(Duration::from_secs(2), || c
        .status()
        .unwrap()
        .leases
        .is_empty()));
}

#[test]
fn missing_daemon_is_a_clear_error_naming_the_socket() {
    let out = std::process::Command::new(gpud_tests::bin("gpudctl"))
        .args(["--socket", "/nonexistent/gpud.sock", "status"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/gpud.sock") && stderr.contains("is gpud running"),
        "{stderr}"
    );
}

#[test]
fn daemon_without_gpus_or_simulation_says_so_and_exits_nonzero() {
    let out = std::process::Command::new(gpud_tests::bin("gpud"))
        .args(["--socket", "/tmp/gpud-never.sock"])
        .env("GPUD_LOG", "error")
        .output()
        .unwrap();
    // On a GPU host this test still holds: there it would start, so only check without NVML.
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return;
    }
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NVML") && stderr.contains("--simulate"),
        "{stderr}"
    );
}

#[test]
fn sigterm_stops_the_daemon_cleanly_and_tells_clients() {
    let mut daemon = Daemon::start("16GiB");
    let c = daemon.client();
    let mut lease = c.acquire(&LeaseRequest::new().vram(GIB)).unwrap();
    let status = daemon
        .terminate(Duration::from_secs(5))
        .expect("exits within 5 s");
    assert!(status.success(), "{status:?}");
    let event = lease.wait_event();
    assert!(
        matches!(event, Some(gpud_client::proto::Event::ShuttingDown)),
        "{event:?}"
    );
    assert!(!daemon.socket.exists(), "socket file removed");
}

/// A host with more leases than one status page holds: the client and gpudctl follow the
/// pages and show every lease (status was one frame, and past 64 MiB it closed the asker's
/// session and `gpudctl status` hung).
#[test]
fn status_of_more_leases_than_a_page_holds_comes_in_pages() {
    let daemon = Daemon::start_with(
        "1x16GiB",
        "[limits]\nmax_leases_per_session = 5000\nmax_entries_per_uid = 5000\nrequests_per_second = 1000000\n",
    );
    let c = daemon.client();
    let wanted = gpud_client::proto::STATUS_PAGE_ENTRIES + 100;
    let leases: Vec<_> = (0..wanted)
        .map(|i| {
            c.acquire(&LeaseRequest::new().vram(1 << 20).label(format!("job-{i}")))
                .unwrap()
        })
        .collect();
    let report = c.status().unwrap();
    assert_eq!(report.leases.len(), wanted);
    assert_eq!(report.more, None);
    let ids: Vec<u64> = report.leases.iter().map(|l| l.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "each lease once, in id order"
    );
    let out = daemon.gpudctl(&["leases", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown = v.as_array().or_else(|| v["leases"].as_array()).unwrap();
    assert_eq!(shown.len(), wanted);
    drop(leases);
}
