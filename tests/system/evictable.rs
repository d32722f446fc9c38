//! Evictable (warm) leases end to end: a request that cannot otherwise fit reclaims the warm
//! memory with a notice the holder's client hears; the holder shrinks, the request is granted,
//! and status, gpudctl and the metrics show the warm state.

use std::time::Duration;

use gpud_client::LeaseRequest;
use gpud_client::proto::Event;
use gpud_tests::{Daemon, wait_until};
use serde_json::Value;

const GIB: u64 = 1 << 30;

#[test]
fn a_warm_lease_hears_a_reclaim_and_its_shrink_lets_the_waiter_in() {
    let daemon = Daemon::start("1x16GiB");
    let holder = daemon.client();
    let mut warm = holder
        .acquire(&LeaseRequest::new().vram(10 * GIB).evictable())
        .unwrap();
    let out = daemon.gpudctl(&["status", "--json"]);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["devices"][0]["evictable_bytes"], 10 * GIB);
    assert_eq!(status["leases"][0]["evictable"], true);
    let text = String::from_utf8(daemon.gpudctl(&["leases"]).stdout).unwrap();
    assert!(text.contains("10.0 GiB (warm)"), "{text}");
    let metrics = String::from_utf8(daemon.gpudctl(&["metrics"]).stdout).unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gpud_device_memory_evictable_bytes{")
                && l.ends_with(" 10737418240")),
        "{metrics}"
    );

    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            daemon
                .client()
                .acquire(&LeaseRequest::new().vram(10 * GIB))
                .unwrap()
        });
        let asked = wait_until(Duration::from_secs(10), || warm.reclaim_requested());
        assert!(asked, "no reclaim notice reached the warm lease");
        assert!(matches!(
            warm.try_event(),
            Some(Event::ReclaimRequested { .. })
        ));
        let text = String::from_utf8(daemon.gpudctl(&["leases"]).stdout).unwrap();
        assert!(text.contains("(warm, reclaim asked)"), "{text}");
        assert_eq!(warm.resize(4 * GIB, None).unwrap(), 4 * GIB);
        assert!(!warm.reclaim_requested(), "the shrink answered the notice");
        let granted = waiter.join().unwrap();
        assert_eq!(granted.info().vram_bytes, 10 * GIB);
    });
    let metrics = String::from_utf8(daemon.gpudctl(&["metrics"]).stdout).unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gpud_lease_reclaim_requests_total{") && l.ends_with(" 1")),
        "{metrics}"
    );
}

/// A warm holder that ignores its reclaim notice is revoked at the deadline (`reclaimed`),
/// and the request that needed the memory is granted then.
#[test]
fn a_warm_lease_that_ignores_its_reclaim_is_revoked_at_the_deadline() {
    let daemon = Daemon::start_with("1x16GiB", "[scheduler]\nreclaim_grace = \"1s\"\n");
    let holder = daemon.client();
    let mut warm = holder
        .acquire(&LeaseRequest::new().vram(10 * GIB).evictable())
        .unwrap();
    let asked = std::time::Instant::now();
    let granted = daemon
        .client()
        .acquire(
            &LeaseRequest::new()
                .vram(10 * GIB)
                .timeout(Duration::from_secs(20)),
        )
        .unwrap();
    let waited = asked.elapsed();
    assert_eq!(granted.info().vram_bytes, 10 * GIB);
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "granted after {waited:?}, the grace is 1 s"
    );
    assert!(wait_until(Duration::from_secs(5), || warm.is_lost()));
    let mut events = Vec::new();
    while let Some(e) = warm.try_event() {
        events.push(e);
    }
    assert!(
        matches!(events.as_slice(), [Event::ReclaimRequested { .. }, Event::Revoked { reason, .. }]
            if *reason == gpud_client::proto::RevokeReason::Reclaimed),
        "{events:?}"
    );
    let metrics = String::from_utf8(daemon.gpudctl(&["metrics"]).stdout).unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gpud_lease_revocations_total{")
                && l.contains("reclaimed")
                && l.ends_with(" 1")),
        "{metrics}"
    );
}
