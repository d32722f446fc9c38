//! Host resources in the tools: `gpudctl run --cpus` pins the program, `gpudctl status` and
//! `leases` show the host, the metrics count it, and the host audit reports a holder that keeps
//! more memory resident than its host lease.

use std::time::Duration;

use gpud_client::LeaseRequest;
use gpud_tests::ops::{metric, parse_metrics};
use gpud_tests::{Daemon, wait_until};
use serde_json::Value;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A host of 8 GiB of memory (a configured capacity, so that what the machine's other
/// processes use does not count), 2 GiB of it page-locked, and every CPU gpud may use.
const HOST: &str = "[host]\nmemory = \"8GiB\"\nmemory_headroom = \"0\"\npinned = \"2GiB\"\n";

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The value of `key:` in /proc/PID/status text.
fn status_line<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// A CPU list in the kernel's format (`0-2,5`) as numbers.
fn cpus_of(list: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for run in list.split(',').filter(|r| !r.is_empty()) {
        match run.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => out.push(run.parse().unwrap()),
        }
    }
    out
}

#[test]
fn gpudctl_run_cpus_pins_the_program_to_the_granted_cpus_and_names_them() {
    let daemon = Daemon::start_with("16GiB", HOST);
    let mine = cpus_of(
        status_line(
            &std::fs::read_to_string("/proc/self/status").unwrap(),
            "Cpus_allowed_list",
        )
        .unwrap(),
    );
    // Two CPUs, fewer than this process may use, so that pinning shows (one on a host of two).
    let want = mine.len().saturating_sub(1).clamp(1, 2);
    let n = want.to_string();
    let out = daemon.gpudctl(&[
        "run",
        "--verbose",
        "--cpus",
        &n,
        "--host-mem",
        "64MiB",
        "--",
        "sh",
        "-c",
        "cat /proc/self/status; echo \"GPUD_CPUS=$GPUD_CPUS\"",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let allowed = status_line(&text, "Cpus_allowed_list").expect(&text);
    let named = text
        .lines()
        .find_map(|l| l.strip_prefix("GPUD_CPUS="))
        .expect(&text);
    assert_eq!(allowed, named, "pinned to exactly the CPUs it was told of");
    assert_eq!(cpus_of(allowed).len(), want, "{text}");
    assert!(cpus_of(allowed).iter().all(|c| mine.contains(c)));
    if mine.len() > want {
        assert_ne!(
            cpus_of(allowed),
            mine,
            "pinned to fewer CPUs than gpudctl had"
        );
    }
    // The grant line names the same CPUs.
    assert!(
        stderr(&out).contains(&format!("CPUs {allowed}")),
        "{}",
        stderr(&out)
    );

    // Without --cpus nothing is pinned, and an outer GPUD_CPUS does not leak in.
    let out = daemon
        .gpudctl_command(&[
            "run",
            "--host-mem",
            "64MiB",
            "--",
            "sh",
            "-c",
            "cat /proc/self/status; echo \"GPUD_CPUS=[$GPUD_CPUS]\"",
        ])
        .env("GPUD_CPUS", "99")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        cpus_of(status_line(&text, "Cpus_allowed_list").expect(&text)),
        mine,
        "not pinned"
    );
    assert!(text.contains("GPUD_CPUS=[]"), "{text}");
    assert!(daemon.client().status().unwrap().leases.is_empty());
}

#[test]
fn bad_host_options_are_usage_errors_that_name_the_option() {
    let daemon = Daemon::start_with("16GiB", HOST);
    for (args, says) in [
        (&["run", "--cpus", "0", "--", "true"][..], "--cpus"),
        (
            &["run", "--host-mem", "lots", "--", "true"][..],
            "--host-mem",
        ),
        (&["run", "--pinned", "1XB", "--", "true"][..], "--pinned"),
        (
            &["run", "--numa", "1", "--host-mem", "1GiB", "--", "true"][..],
            "--cpus",
        ),
        (
            &["run", "--cpus", "1", "--numa", "far", "--", "true"][..],
            "NUMA",
        ),
        (
            &["run", "--cpus", "1", "--numa", "near", "--", "true"][..],
            "--numa near",
        ),
        (
            &["run", "--cpus", "1", "--device", "0", "--", "true"][..],
            "--device",
        ),
        (
            &[
                "run",
                "--cpus",
                "1",
                "--vram",
                "1GiB",
                "--enforce",
                "preload",
                "--",
                "true",
            ][..],
            "preload",
        ),
    ] {
        let out = daemon.gpudctl(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    assert!(daemon.client().status().unwrap().leases.is_empty());
}

#[test]
fn status_leases_and_metrics_show_the_host() {
    let daemon = Daemon::start_with("16GiB", HOST);
    let c = daemon.client();
    let lease = c
        .acquire(
            &LeaseRequest::new()
                .vram(GIB)
                .host_memory(3 * GIB)
                .pinned(GIB)
                .cpus(1)
                .label("synthesis"),
        )
        .unwrap();
    let host = lease.host().expect("a host grant").clone();
    assert_eq!((host.mem_bytes, host.pinned_bytes), (3 * GIB, GIB));
    assert_eq!(host.cpus.len(), 1);
    let cpu = host.cpus[0];
    let node = host.numa_node.expect("a node with the CPUs");

    let out = daemon.gpudctl(&["status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let memory = text
        .lines()
        .find(|l| l.starts_with("memory "))
        .unwrap_or_else(|| panic!("no host memory row:\n{text}"));
    // Total 8 GiB, capacity 8 GiB, reserved 3 GiB, free 5 GiB.
    assert!(
        memory.contains("8.0 GiB") && memory.contains("3.0 GiB"),
        "{text}"
    );
    assert!(memory.contains("5.0 GiB"), "{text}");
    let pinned = text
        .lines()
        .find(|l| l.starts_with("pinned "))
        .expect(&text);
    assert!(
        pinned.contains("2.0 GiB") && pinned.contains("1.0 GiB"),
        "{text}"
    );
    assert!(text.contains("NUMA"), "{text}");

    let out = daemon.gpudctl(&["status", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["host"]["memory"]["total_bytes"], 8 * GIB);
    assert_eq!(v["host"]["memory"]["reserved_bytes"], 3 * GIB);
    assert_eq!(v["host"]["pinned"]["reserved_bytes"], GIB);
    let nodes = v["host"]["numa"].as_array().unwrap();
    let n = nodes.iter().find(|n| n["node"] == node).expect("the node");
    assert_eq!(n["granted"], serde_json::json!([cpu]));

    let out = daemon.gpudctl(&["leases"]);
    let text = stdout(&out);
    assert!(text.lines().next().unwrap().contains("HOST"), "{text}");
    assert!(text.contains("3.0 GiB mem"), "{text}");
    assert!(text.contains("1.0 GiB pinned"), "{text}");
    assert!(
        text.contains(&format!("numa{node}")) && text.contains(&format!("CPUs {cpu}")),
        "{text}"
    );

    let out = daemon.gpudctl(&["metrics"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let scrape = parse_metrics(&stdout(&out));
    let gauge = |name: &str, labels: &[(&str, &str)]| {
        metric(&scrape, name, labels).unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(gauge("gpud_host_memory_total_bytes", &[]), (8 * GIB) as f64);
    assert_eq!(
        gauge("gpud_host_memory_capacity_bytes", &[]),
        (8 * GIB) as f64
    );
    assert_eq!(
        gauge("gpud_host_memory_reserved_bytes", &[]),
        (3 * GIB) as f64
    );
    assert_eq!(gauge("gpud_host_memory_unmanaged_bytes", &[]), 0.0);
    assert_eq!(
        gauge("gpud_host_pinned_capacity_bytes", &[]),
        (2 * GIB) as f64
    );
    assert_eq!(gauge("gpud_host_pinned_reserved_bytes", &[]), GIB as f64);
    let node = node.to_string();
    assert_eq!(gauge("gpud_host_cpus_granted", &[("numa", &node)]), 1.0);
    assert!(gauge("gpud_host_cpus", &[("numa", &node)]) >= 1.0);
    assert_eq!(
        gauge(
            "gpud_host_queue_depth",
            &[("pool", "memory"), ("class", "normal")]
        ),
        0.0
    );
    assert_eq!(gauge("gpud_host_memory_over_use_bytes", &[]), 0.0);
    drop(lease);
}

#[test]
fn the_host_audit_reports_a_holder_that_keeps_more_than_its_host_memory() {
    // 64 MiB of tolerance: the program below keeps ~256 MiB resident under a 16 MiB lease.
    let daemon = Daemon::start_with("16GiB", &format!("[audit]\ntolerance = \"64MiB\"\n{HOST}"));
    let mut program = daemon
        .gpudctl_command(&[
            "run",
            "--host-mem",
            "16MiB",
            "--label",
            "hog",
            "--",
            "python3",
            "-c",
            // Written, not only allocated: the pages are resident.
            "import sys, time\nb = bytearray(b'\\x01') * (256 << 20)\nprint('held', flush=True)\ntime.sleep(60)\n",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let probe = daemon.client();
    let over = || {
        probe
            .status()
            .ok()
            .and_then(|s| s.host)
            .is_some_and(|h| h.holders.iter().any(|u| u.over_use))
    };
    assert!(
        wait_until(Duration::from_secs(20), over),
        "no over-use reported: {:?}\n{}",
        probe.status().unwrap().host,
        daemon.log()
    );
    let host = probe.status().unwrap().host.unwrap();
    let hog = host.holders.iter().find(|u| u.over_use).unwrap();
    assert_eq!(hog.mem_bytes, 16 * MIB);
    assert!(hog.rss_bytes >= 256 * MIB, "{hog:?}");
    assert!(!hog.pinned_over_use, "nothing locked: {hog:?}");
    assert!(
        daemon.log().contains("than its host leases reserve"),
        "{}",
        daemon.log()
    );
    let screen = stdout(&daemon.gpudctl(&["status"]));
    assert!(screen.contains("OVER ITS HOST MEMORY"), "{screen}");
    let scrape = parse_metrics(&stdout(&daemon.gpudctl(&["metrics"])));
    let over_bytes = metric(&scrape, "gpud_host_memory_over_use_bytes", &[]).unwrap();
    assert!(over_bytes >= (200 * MIB) as f64, "{over_bytes}");
    let _ = program.kill();
    let _ = program.wait();
}

#[test]
fn cpus_gpudctl_may_not_run_on_are_refused_before_the_program_starts() {
    let daemon = Daemon::start_with("16GiB", HOST);
    let c = daemon.client();
    let status = c.status().unwrap();
    let host = status.host.expect("host resources are booked");
    // A node with two CPUs: the first taken here, so that the run gets the second.
    let Some(node) = host.numa.iter().find(|n| n.cpus.len() >= 2) else {
        eprintln!("skipped: no NUMA node with two CPUs gpud hands out");
        return;
    };
    let (first, second) = (node.cpus[0], node.cpus[1]);
    let held = c
        .acquire(
            &LeaseRequest::new()
                .cpus(1)
                .numa(gpud_client::NumaPlacement::Node(node.node)),
        )
        .unwrap();
    assert_eq!(held.host().unwrap().cpus, vec![first]);
    let out = std::process::Command::new("taskset")
        .args(["-c", &first.to_string()])
        .arg(gpud_tests::bin("gpudctl"))
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["run", "--cpus", "1", "--numa", &node.node.to_string(), "--"])
        .args(["sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("may not run on {second}")),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("ran"), "the program never started");
    // Its lease was given back.
    assert!(wait_until(Duration::from_secs(5), || c
        .status()
        .unwrap()
        .leases
        .iter()
        .all(|l| l
            .host
            .as_ref()
            .is_none_or(|h| !h.cpus.contains(&second)))));
    drop(held);
}
