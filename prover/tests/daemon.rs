//! Prover processes against a real gpud (in this test process, simulated 16 GiB device).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpud_client::blocking::Client;
use serde_json::Value;

struct Daemon {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

fn start_daemon(devices: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gpud.sock");
    // The test user may not have a `gpud` group; the daemon's own uid is always allowed.
    let config = gpud::config::Config {
        socket_group: None,
        ..Default::default()
    };
    let backend = gpud::backend::simulated::Simulated::new(devices).unwrap();
    let daemon = gpud::daemon::Daemon {
        config,
        config_path: None,
        socket: socket.clone(),
        backend: Box::new(backend),
        state_dir: None,
    };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(daemon.run()).unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while Client::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "gpud did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    Daemon { socket, _dir: dir }
}

fn prover(socket: &Path, k: u32, proofs: usize, partitions: usize, seed: u64) -> Child {
    // Parameters are generated here, once, so the provers only load them.
    common::key("synthetic", k);
    Command::new(env!("CARGO_BIN_EXE_gpud-prover"))
        .args(["prove", "--circuit", "synthetic", "--json"])
        .args(["--log-size", &k.to_string()])
        .args(["--proofs", &proofs.to_string()])
        .args(["--partitions", &partitions.to_string()])
        .args(["--seed", &seed.to_string()])
        .arg("--socket")
        .arg(socket)
        .arg("--params-dir")
        .arg(common::cache_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn report(out: Output) -> Value {
    assert!(
        out.status.success(),
        "prover failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["all_verified"], true);
    report
}

fn intervals(r: &Value, from: &str, to: &str) -> Vec<(u128, u128)> {
    r["partitions_detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let t = |k: &str| {
                p[k].as_u64()
                    .map(u128::from)
                    .unwrap_or_else(|| p[k].as_f64().unwrap() as u128)
            };
            (t(from), t(to))
        })
        .collect()
}

fn overlap(a: (u128, u128), b: (u128, u128)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

#[test]
fn two_provers_never_share_the_compute_slot_and_tails_overlap_the_other_lease() {
    let daemon = start_daemon("16GiB");
    let a = prover(&daemon.socket, 12, 1, 6, 100);
    let b = prover(&daemon.socket, 12, 1, 6, 200);
    let (a, b) = (
        report(a.wait_with_output().unwrap()),
        report(b.wait_with_output().unwrap()),
    );
    let held_a = intervals(&a, "lease_granted_unix", "lease_released_unix");
    let held_b = intervals(&b, "lease_granted_unix", "lease_released_unix");
    for x in &held_a {
        for y in &held_b {
            assert!(!overlap(*x, *y), "compute leases overlap: {x:?} {y:?}");
        }
    }
    let tails_a = intervals(&a, "tail_start_unix", "tail_end_unix");
    let tails_b = intervals(&b, "tail_start_unix", "tail_end_unix");
    let crossing = tails_a
        .iter()
        .filter(|t| held_b.iter().any(|h| overlap(**t, *h)))
        .count()
        + tails_b
            .iter()
            .filter(|t| held_a.iter().any(|h| overlap(**t, *h)))
            .count();
    assert!(
        crossing >= 1,
        "no CPU tail overlapped the other prover's lease"
    );
    // Every lease is gone once both are done.
    let status = Client::connect(&daemon.socket).unwrap().status().unwrap();
    assert!(status.leases.is_empty(), "{:?}", status.leases);
}

#[test]
fn killing_a_prover_mid_proof_frees_its_lease_and_the_others_finish() {
    let daemon = start_daemon("16GiB");
    let observer = Client::connect(&daemon.socket).unwrap();
    let mut victim = prover(&daemon.socket, 12, 3, 3, 300);
    let others = [
        prover(&daemon.socket, 12, 1, 3, 400),
        prover(&daemon.socket, 12, 1, 3, 500),
    ];
    // Kill the victim while it holds a lease.
    let pid = victim.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = observer.status().unwrap();
        if status.leases.iter().any(|l| l.pid == pid) {
            break;
        }
        assert!(Instant::now() < deadline, "the victim never held a lease");
        assert!(
            victim.try_wait().unwrap().is_none(),
            "the victim finished before it was killed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    for child in others {
        report(child.wait_with_output().unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = observer.status().unwrap();
        if status.leases.iter().all(|l| l.pid != pid) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed prover's lease was never freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
