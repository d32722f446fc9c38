//! gpud-bench-clients end to end with tiny counts: one daemon, every client that this machine
//! can build (Rust always; C, Python and Go when their tools and libgpud are there), both
//! phases, two passes, the JSON and the table. Nothing here is about timing.
//!
//! It runs the daemon and libgpud from the target folder (`target/debug`): scripts/test.sh's
//! `cargo build --workspace --all-targets` builds both (alone: `cargo build -p gpud -p gpud-c`).

use std::process::Command;

#[test]
fn every_client_runs_both_phases_or_says_why_not() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpud-bench-clients"))
        .args(["--iterations", "20", "--handoffs", "10"])
        .args(["--passes", "2", "--json"])
        .output()
        .expect("run gpud-bench-clients");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stderr}");
    assert!(out.status.success(), "gpud-bench-clients failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["iterations"], 20);
    assert_eq!(v["handoffs"], 10);
    // The counts are split over the passes, and every pass's samples summarized together.
    let floor = &v["kernel_round_trip"];
    assert_eq!(floor["passes"].as_array().unwrap().len(), 2);
    assert_eq!(floor["passes"][0]["n"], 10);
    assert_eq!(floor["pooled"]["n"], 20);

    let clients = v["clients"].as_array().expect("clients");
    let names: Vec<&str> = clients
        .iter()
        .map(|c| c["client"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rust", "c", "python", "go"]);
    for c in clients {
        let name = c["client"].as_str().unwrap();
        if let Some(why) = c["skipped"].as_str() {
            // Only a missing tool or library skips a client (a driver that fails fails the
            // run), and the skip is shown.
            assert_ne!(name, "rust");
            assert!(stderr.contains(why), "{name}'s skip was not shown: {why}");
            continue;
        }
        for (phase, n) in [("round_trip", 20), ("handoff", 10)] {
            let figure = &c[phase];
            assert_eq!(
                figure["passes"].as_array().unwrap().len(),
                2,
                "{name} {phase}"
            );
            assert_eq!(figure["passes"][1]["n"], n / 2, "{name} {phase}");
            assert_eq!(figure["pooled"]["n"], n, "{name} {phase}");
            assert!(
                figure["pooled"]["p50_us"].as_f64().unwrap() > 0.0,
                "{name} {phase}"
            );
            assert!(figure["best_pass"].as_u64().unwrap() >= 1, "{name} {phase}");
            let ratio = &c[format!("{phase}_vs_rust")];
            assert!(ratio["p50"].as_f64().is_some(), "{name} {phase}");
            assert!(ratio["best_pass_p50"].as_f64().is_some(), "{name} {phase}");
        }
    }
    assert!(
        stderr.contains("[pass 2/2] Rust (gpud-client, blocking): compute-slot handoff"),
        "no progress on stderr:\n{stderr}"
    );
}

#[test]
fn only_runs_the_chosen_clients_in_a_table() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpud-bench-clients"))
        .args(["--iterations", "10", "--handoffs", "3", "--passes", "2"])
        .args(["--only", "rust"])
        .output()
        .expect("run gpud-bench-clients");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "gpud-bench-clients failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    assert!(stdout.contains("kernel floor"), "{stdout}");
    assert!(stdout.contains("Rust (gpud-client, blocking)"), "{stdout}");
    assert!(!stdout.contains("Python"), "{stdout}");
    assert!(
        stdout.contains("not measured (needs C and Rust)"),
        "{stdout}"
    );
}
