//! Budgets end to end: `gpudctl budget` creates one, a process leases from it with its
//! handle, status shows both, a gpud restart keeps them, and ending the budget revokes what
//! is inside.

use std::time::Duration;

use gpud_client::LeaseRequest;
use gpud_client::proto::{Event, RevokeReason};
use gpud_tests::{Daemon, wait_until};
use serde_json::Value;

const GIB: u64 = 1 << 30;

fn json(out: std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_budget_survives_a_restart_and_ending_it_revokes_its_leases() {
    let mut daemon = Daemon::start("1x16GiB");
    let created = json(daemon.gpudctl(&[
        "budget",
        "create",
        "--job",
        "42",
        "--uid",
        "0",
        "--vram",
        "8GiB",
        "--compute-slots",
        "1",
        "--json",
    ]));
    let handle = created["handle"]
        .as_str()
        .expect("the creator sees the handle")
        .to_owned();
    let id = created["budget"].as_u64().unwrap();
    let env = daemon.gpudctl(&["budget", "env", "--job", "42"]);
    let env = String::from_utf8(env.stdout).unwrap();
    assert!(
        env.contains(&format!("export GPUD_BUDGET={handle}\n")),
        "{env}"
    );
    assert!(env.contains("export CUDA_VISIBLE_DEVICES=GPU-"), "{env}");

    let client = daemon.client();
    let mut lease = client
        .acquire(
            &LeaseRequest::new()
                .budget(Some(handle.clone()))
                .vram(6 * GIB),
        )
        .unwrap();
    assert_eq!(lease.info().within, Some(id));
    let refused = client
        .acquire(
            &LeaseRequest::new()
                .budget(Some(handle.clone()))
                .vram(9 * GIB),
        )
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!("budget {id}")) && refused.contains("job 42"),
        "{refused}"
    );
    let text = String::from_utf8(daemon.gpudctl(&["status"]).stdout).unwrap();
    assert!(
        text.contains(&format!("budget {id} job 42")) && text.contains("6.0 GiB of 8.0 GiB"),
        "{text}"
    );
    let text = String::from_utf8(daemon.gpudctl(&["leases"]).stdout).unwrap();
    assert!(text.contains(&format!("budget {id}")), "{text}");

    // gpud dies and comes back: the budget is restored from the journal, the client re-adopts
    // its lease inside it, and the handle still works.
    daemon.kill_and_restart();
    let back = wait_until(Duration::from_secs(10), || {
        let list = json(daemon.gpudctl(&["budget", "list", "--json"]));
        list[0]["used_bytes"] == 6 * GIB && list[0]["handle"] == handle.as_str()
    });
    assert!(back, "{}", daemon.log());
    let status = json(daemon.gpudctl(&["status", "--json"]));
    assert_eq!(
        status["devices"][0]["reserved_bytes"],
        8 * GIB,
        "the budget, not budget + lease"
    );
    let again = daemon
        .client()
        .acquire(
            &LeaseRequest::new()
                .budget(Some(handle.clone()))
                .vram(2 * GIB),
        )
        .unwrap();

    let out = daemon.gpudctl(&["budget", "end", "--job", "42"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let revoked = wait_until(Duration::from_secs(5), || {
        matches!(
            lease.try_event(),
            Some(Event::Revoked {
                reason: RevokeReason::BudgetEnded,
                ..
            })
        )
    });
    assert!(revoked, "the lease inside heard its budget end");
    let status = json(daemon.gpudctl(&["status", "--json"]));
    assert_eq!(
        status["leases"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
    assert_eq!(status["devices"][0]["reserved_bytes"], 0);
    drop(again);
    let gone = daemon
        .client()
        .acquire(&LeaseRequest::new().budget(Some(handle)).vram(GIB))
        .unwrap_err()
        .to_string();
    assert!(gone.contains("no such budget"), "{gone}");
}
