//! Metrics scraped over the optional listener (Unix socket and loopback TCP) and through
//! `gpudctl metrics`, parsed by a real Prometheus text-format parser, matching the leases held.

use std::time::Duration;

use gpud_client::{Class, LeaseRequest, Placement};
use gpud_tests::ops::{Gpud, metric, parse_metrics, scrape_tcp, scrape_unix, tempdir};
use gpud_tests::{frame, wait_until};
use serde_json::json;
use std::io::Write;

const GIB: u64 = 1 << 30;

#[test]
fn metrics_match_the_leases_held() {
    let dir = tempdir("gpud-metrics");
    let listen = dir.path().join("metrics.sock");
    let gpud = Gpud::start(
        "2x16GiB",
        &format!("[metrics]\nlisten = {:?}\n", listen),
        &["--dbus", "none"],
        &[],
    );
    let (a, b, c) = (gpud.client(), gpud.client(), gpud.client());
    let high = a
        .acquire(
            &LeaseRequest::new()
                .vram(4 * GIB)
                .compute()
                .class(Class::High)
                .device(Placement::Index(0)),
        )
        .unwrap();
    // A raw session whose connection will simply close: its lease ends as "disconnected".
    let mut normal = std::os::unix::net::UnixStream::connect(&gpud.socket).unwrap();
    normal
        .write_all(&frame(&json!({"type": "hello", "version": 1})))
        .unwrap();
    let acquire = json!({"type": "request", "id": 1, "op": {"acquire": {"device": "1", "vram_bytes": 6 * GIB}}});
    normal.write_all(&frame(&acquire)).unwrap();
    assert!(wait_until(Duration::from_secs(5), || b
        .status()
        .unwrap()
        .leases
        .len()
        == 2));
    // A waiter: device 0's compute slot is taken.
    let waiting = std::thread::spawn(move || {
        c.acquire(
            &LeaseRequest::new()
                .compute()
                .class(Class::Background)
                .device(Placement::Index(0)),
        )
        .map(drop)
    });
    let probe = gpud.client();
    assert!(wait_until(Duration::from_secs(5), || probe
        .status()
        .unwrap()
        .waiters
        .len()
        == 1));

    let text = scrape_unix(&listen);
    let m = parse_metrics(&text);
    let dev = |d: &'static str| [("device", d)];
    assert_eq!(
        metric(&m, "gpud_device_memory_total_bytes", &dev("0")),
        Some((16 * GIB) as f64)
    );
    assert_eq!(
        metric(&m, "gpud_device_memory_reserved_bytes", &dev("0")),
        Some((4 * GIB) as f64)
    );
    assert_eq!(
        metric(&m, "gpud_device_memory_reserved_bytes", &dev("1")),
        Some((6 * GIB) as f64)
    );
    assert_eq!(
        metric(&m, "gpud_device_memory_capacity_bytes", &dev("1")),
        Some((16 * GIB) as f64)
    );
    assert_eq!(
        metric(&m, "gpud_device_memory_unmanaged_bytes", &dev("0")),
        Some(0.0)
    );
    assert_eq!(metric(&m, "gpud_device_leases", &dev("0")), Some(1.0));
    assert_eq!(
        metric(&m, "gpud_device_compute_holders", &dev("0")),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &m,
            "gpud_queue_depth",
            &[("device", "0"), ("class", "background")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, "gpud_lease_grants_total", &[("class", "high")]),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, "gpud_lease_grants_total", &[("class", "normal")]),
        Some(1.0)
    );
    assert_eq!(metric(&m, "gpud_sessions", &[]), Some(5.0));
    let busy = metric(&m, "gpud_device_compute_busy_seconds_total", &dev("0")).unwrap();
    assert!(busy > 0.0, "device 0 has held compute for a while: {busy}");

    // Release and end sessions: the counters and histograms follow.
    std::thread::sleep(Duration::from_millis(50));
    high.release().unwrap();
    waiting.join().unwrap().unwrap();
    drop(normal);
    let m = parse_metrics(&gpud.client().metrics().unwrap());
    assert_eq!(
        metric(
            &m,
            "gpud_lease_releases_total",
            &[("class", "high"), ("how", "released")]
        ),
        Some(1.0)
    );
    assert!(wait_until(Duration::from_secs(5), || {
        let m = parse_metrics(&probe.metrics().unwrap());
        metric(
            &m,
            "gpud_lease_releases_total",
            &[("class", "normal"), ("how", "disconnected")],
        ) == Some(1.0)
    }));
    let m = parse_metrics(&probe.metrics().unwrap());
    assert_eq!(
        metric(&m, "gpud_device_memory_reserved_bytes", &dev("0")),
        Some(0.0)
    );
    assert_eq!(
        metric(&m, "gpud_lease_grants_total", &[("class", "background")]),
        Some(1.0)
    );
    // The background waiter was granted after the high lease's release: it waited.
    assert_eq!(
        metric(
            &m,
            "gpud_lease_wait_seconds_count",
            &[("class", "background")]
        ),
        Some(1.0)
    );
    let waited = metric(
        &m,
        "gpud_lease_wait_seconds_sum",
        &[("class", "background")],
    )
    .unwrap();
    let held = metric(&m, "gpud_lease_hold_seconds_sum", &[("class", "high")]).unwrap();
    assert!(
        waited >= 0.05 && held >= 0.05,
        "waited {waited}, held {held}"
    );
    assert_eq!(
        metric(&m, "gpud_lease_hold_seconds_count", &[("class", "high")]),
        Some(1.0)
    );
    println!("background waited {waited:.3} s; high held {held:.3} s");

    // A refusal is counted by code.
    assert!(probe.acquire(&LeaseRequest::new().vram(64 * GIB)).is_err());
    let m = parse_metrics(&probe.metrics().unwrap());
    assert_eq!(
        metric(
            &m,
            "gpud_lease_refusals_total",
            &[("class", "normal"), ("code", "never_fits")]
        ),
        Some(1.0)
    );
}

#[test]
fn metrics_on_loopback_tcp_and_gpudctl_metrics_agree() {
    // A free port: bind, note, release.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let gpud = Gpud::start(
        "16GiB",
        &format!("[metrics]\nlisten = \"{addr}\"\n"),
        &["--dbus", "none"],
        &[],
    );
    let client = gpud.client();
    let _lease = client.acquire(&LeaseRequest::new().vram(3 * GIB)).unwrap();
    let over_tcp = parse_metrics(&scrape_tcp(addr));
    let out = std::process::Command::new(gpud_tests::bin("gpudctl"))
        .arg("--socket")
        .arg(&gpud.socket)
        .arg("metrics")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let over_ctl = parse_metrics(&String::from_utf8_lossy(&out.stdout));
    for m in [&over_tcp, &over_ctl] {
        assert_eq!(
            metric(m, "gpud_device_memory_reserved_bytes", &[("device", "0")]),
            Some((3 * GIB) as f64)
        );
        assert_eq!(
            metric(m, "gpud_lease_grants_total", &[("class", "normal")]),
            Some(1.0)
        );
    }
    // Every family has HELP and TYPE, counters end in _total.
    for (name, _) in over_ctl.docs.iter() {
        assert!(name.starts_with("gpud_"), "{name}");
    }
    println!("{} samples over TCP", over_tcp.samples.len());
}
