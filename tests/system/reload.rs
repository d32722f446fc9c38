//! SIGHUP reloads the config (limits, classes, access lists, compute and critical slots) without
//! dropping leases; a bad config is refused with a log line naming the key, and the old one
//! stays in force.

use std::time::Duration;

use gpud_client::proto::ErrorCode;
use gpud_client::{Class, LeaseRequest};
use gpud_tests::ops::Gpud;
use gpud_tests::wait_until;

const GIB: u64 = 1 << 30;

fn rewrite(gpud: &Gpud, config: &str) {
    let path = gpud.dir.path().join("gpud.toml");
    let state = format!("state_dir = {:?}\n", gpud.dir.path().join("state"));
    std::fs::write(path, format!("{state}{config}")).unwrap();
}

fn hup(gpud: &Gpud) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(gpud.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
}

fn limit_exceeded<T>(r: gpud_client::Result<T>) -> bool {
    matches!(r, Err(e) if e.code() == Some(ErrorCode::LimitExceeded))
}

#[test]
fn sighup_applies_new_limits_keeps_leases_and_refuses_a_bad_config() {
    let gpud = Gpud::start("16GiB", "", &["--dbus", "none"], &[]);
    let holder = gpud.client();
    let held = holder.acquire(&LeaseRequest::new().vram(GIB)).unwrap();

    rewrite(&gpud, "[limits]\nmax_leases_per_session = 1\n");
    hup(&gpud);
    assert!(wait_until(Duration::from_secs(5), || gpud
        .log()
        .contains("configuration reloaded")));
    let client = gpud.client();
    let first = client.acquire(&LeaseRequest::new().vram(GIB)).unwrap();
    assert!(
        limit_exceeded(client.acquire(&LeaseRequest::new().vram(GIB))),
        "the reloaded limit applies"
    );
    let status = gpud.client().status().unwrap();
    assert_eq!(status.leases.len(), 2, "leases survive the reload");
    assert!(status.leases.iter().any(|l| l.id == held.id()));

    rewrite(&gpud, "[devices]\nheadroom = \"lots\"\n");
    hup(&gpud);
    assert!(wait_until(Duration::from_secs(5), || gpud
        .log()
        .contains("config reload rejected, keeping the old one")));
    let line = gpud
        .log()
        .lines()
        .find(|l| l.contains("config reload rejected"))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains("devices.headroom"), "{line}");
    println!("{line}");
    assert!(
        limit_exceeded(client.acquire(&LeaseRequest::new().vram(GIB))),
        "the old config stays in force"
    );
    assert_eq!(gpud.client().status().unwrap().leases.len(), 2);
    drop(first);
    drop(held);
}

#[test]
fn sighup_changes_compute_and_critical_slots_and_holders_keep_theirs() {
    let gpud = Gpud::start("16GiB", "", &["--dbus", "none"], &[]);
    let client = gpud.client();
    let compute = |class| {
        LeaseRequest::new()
            .vram(GIB)
            .compute()
            .class(class)
            .timeout(Duration::from_millis(300))
    };
    let a = client.acquire(&compute(Class::Normal)).unwrap();
    assert!(client.acquire(&compute(Class::Normal)).is_err(), "one slot");

    rewrite(&gpud, "[devices]\ncompute_slots = 2\ncritical_slots = 1\n");
    hup(&gpud);
    assert!(wait_until(Duration::from_secs(5), || gpud
        .log()
        .contains("configuration reloaded")));
    let b = client.acquire(&compute(Class::Normal)).unwrap();
    let c = client.acquire(&compute(Class::Critical)).unwrap();
    let dev = &gpud.client().status().unwrap().devices[0];
    assert_eq!((dev.compute_slots, dev.critical_slots), (2, 1));
    assert_eq!(dev.compute_holders.len(), 3);

    // Back to the defaults: the three holders keep their slots, nobody new gets one.
    rewrite(&gpud, "");
    hup(&gpud);
    assert!(wait_until(Duration::from_secs(5), || gpud
        .log()
        .matches("configuration reloaded")
        .count()
        == 2));
    let dev = &gpud.client().status().unwrap().devices[0];
    assert_eq!((dev.compute_slots, dev.critical_slots), (1, 0));
    assert_eq!(dev.compute_holders.len(), 3, "holders keep their slots");
    assert!(client.acquire(&compute(Class::Critical)).is_err());
    drop((a, b, c));
    assert!(
        client.acquire(&compute(Class::Normal)).is_ok(),
        "free again"
    );
}
