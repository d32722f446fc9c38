//! The notify protocol, seen by a `NOTIFY_SOCKET` listener that the test owns: READY once the
//! devices are probed, STATUS kept current, WATCHDOG at half of WATCHDOG_USEC, STOPPING and
//! exit 0 on SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use gpud_client::LeaseRequest;
use gpud_tests::ops::{Gpud, collect_notify, tempdir};

#[test]
fn ready_status_watchdog_then_stopping_and_exit_0() {
    let dir = tempdir("gpud-notify");
    let path = dir.path().join("notify");
    let listener = UnixDatagram::bind(&path).unwrap();
    let started = Instant::now();
    let mut gpud = Gpud::start(
        "2x16GiB",
        "",
        &["--dbus", "none"],
        &[
            ("NOTIFY_SOCKET", path.clone().into()),
            // 400 ms: gpud must ping every 200 ms.
            ("WATCHDOG_USEC", "400000".into()),
        ],
    );
    let first = collect_notify(&listener, Duration::from_secs(5), |s| !s.is_empty());
    assert!(
        first
            .first()
            .is_some_and(|m| m.starts_with("READY=1\nSTATUS=2 GPUs, 0 leases")),
        "first message: {first:?}"
    );
    println!("READY after {:?}: {:?}", started.elapsed(), first[0]);

    // Watchdog pings keep coming while the daemon runs.
    let window = Instant::now();
    let pings = collect_notify(&listener, Duration::from_millis(1500), |_| false);
    let watchdogs = pings
        .iter()
        .filter(|m| m.as_str() == "WATCHDOG=1\n")
        .count();
    println!("{watchdogs} WATCHDOG=1 in {:?}", window.elapsed());
    assert!(watchdogs >= 4, "too few watchdog pings: {pings:?}");

    // STATUS follows the state.
    let client = gpud.client();
    let lease = client
        .acquire(&LeaseRequest::new().vram(4 << 30).compute())
        .unwrap();
    let seen = collect_notify(&listener, Duration::from_secs(5), |s| {
        s.iter()
            .any(|m| m.contains("STATUS=2 GPUs, 1 lease (4.0 GiB reserved)"))
    });
    let status = seen.iter().find(|m| m.starts_with("STATUS=")).cloned();
    assert!(
        seen.iter()
            .any(|m| m.contains("1 lease (4.0 GiB reserved), 0 waiting, 1 session")),
        "{seen:?}"
    );
    println!("after a grant: {status:?}");
    drop(lease);

    let exit = gpud.terminate(Duration::from_secs(10));
    let last = collect_notify(&listener, Duration::from_secs(2), |s| {
        s.iter().any(|m| m.contains("STOPPING=1"))
    });
    assert!(last.iter().any(|m| m.starts_with("STOPPING=1")), "{last:?}");
    assert_eq!(
        exit.and_then(|s| s.code()),
        Some(0),
        "exit status; log:\n{}",
        gpud.log()
    );
    drop(client);
}
