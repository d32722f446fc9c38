//! Leasing through a real daemon: serialization, crash release, priorities, yields.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpud_client::proto::{ErrorCode, Event, YieldReason};
use gpud_client::{Class, LeaseRequest, Placement, Reservation};
use gpud_tests::{Daemon, wait_until};

const GIB: u64 = 1 << 30;

#[test]
fn two_ten_gib_requests_on_a_16_gib_device_are_serialized() {
    let daemon = Daemon::start("16GiB");
    let (a, b) = (daemon.client(), daemon.client());
    let first = a.acquire(&LeaseRequest::new().vram(10 * GIB)).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let lease = b.acquire(&LeaseRequest::new().vram(10 * GIB)).unwrap();
        tx.send(Instant::now()).unwrap();
        lease
    });
    // While the first holds, the second must not be granted, and the books show 10 GiB.
    let probe = daemon.client();
    assert!(wait_until(Duration::from_secs(5), || {
        probe.status().unwrap().devices[0].queued.normal == 1
    }));
    for _ in 0..20 {
        assert!(
            rx.try_recv().is_err(),
            "second lease granted while the first is held"
        );
        let status = daemon.client().status().unwrap();
        assert_eq!(status.devices[0].reserved_bytes, 10 * GIB);
        assert_eq!(status.devices[0].queued.normal, 1);
        thread::sleep(Duration::from_millis(10));
    }
    let released = Instant::now();
    first.release().unwrap();
    let granted = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("second granted after release");
    assert!(granted >= released);
    let second = waiter.join().unwrap();
    assert_eq!(
        daemon.client().status().unwrap().devices[0].reserved_bytes,
        10 * GIB
    );
    drop(second);
    assert!(wait_until(Duration::from_secs(2), || {
        daemon.client().status().unwrap().devices[0].reserved_bytes == 0
    }));
    println!("handoff after release: {:?}", granted - released);
}

#[test]
fn killing_a_holder_frees_its_lease_for_the_waiter_within_100ms() {
    let daemon = Daemon::start("16GiB");
    // The holder is a separate process: gpudctl holding 10 GiB around a long sleep.
    let mut holder = daemon
        .gpudctl_command(&["run", "--vram", "10GiB", "--compute", "--", "sleep", "600"])
        .spawn()
        .unwrap();
    let probe = daemon.client();
    assert!(wait_until(Duration::from_secs(5), || probe
        .status()
        .unwrap()
        .leases
        .len()
        == 1));
    let status = probe.status().unwrap();
    assert_eq!(
        status.leases[0].pid,
        holder.id(),
        "status names the holder's pid"
    );
    assert_eq!(status.leases[0].process, "gpudctl");

    let waiter = daemon.client();
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let lease = waiter
            .acquire(&LeaseRequest::new().vram(10 * GIB).compute())
            .unwrap();
        tx.send(Instant::now()).unwrap();
        lease
    });
    assert!(wait_until(Duration::from_secs(5), || probe
        .status()
        .unwrap()
        .waiters
        .len()
        == 1));
    let killed = Instant::now();
    holder.kill().unwrap(); // SIGKILL
    let granted = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("waiter granted after kill -9");
    let latency = granted - killed;
    let _ = holder.wait();
    // The orphaned `sleep` is harmless; end it anyway.
    let _ = std::process::Command::new("pkill")
        .args(["-f", "^sleep 600$"])
        .status();
    println!("kill -9 to grant: {latency:?}");
    assert!(
        latency < Duration::from_millis(100),
        "grant took {latency:?} after kill -9"
    );
    drop(t.join().unwrap());
}

#[test]
fn critical_overtakes_normal_waiters_and_the_holder_is_asked_to_yield() {
    let daemon = Daemon::start("16GiB");
    let holder_client = daemon.client();
    let mut holder = holder_client
        .acquire(&LeaseRequest::new().vram(GIB).compute().class(Class::Normal))
        .unwrap();
    let (tx, rx) = mpsc::channel::<(&'static str, Instant)>();
    let mut threads = Vec::new();
    let probe = daemon.client();
    for (queued, name) in ["normal-1", "normal-2", "normal-3"].into_iter().enumerate() {
        // One at a time, so that their order of arrival is the order of their names.
        assert!(wait_until(Duration::from_secs(5), || {
            probe.status().unwrap().waiters.len() == queued
        }));
        let c = daemon.client();
        let tx = tx.clone();
        threads.push(thread::spawn(move || {
            let lease = c
                .acquire(&LeaseRequest::new().vram(GIB).compute().label(name))
                .unwrap();
            tx.send((name, Instant::now())).unwrap();
            thread::sleep(Duration::from_millis(20));
            lease.release().unwrap();
        }));
    }
    assert!(wait_until(Duration::from_secs(5), || probe
        .status()
        .unwrap()
        .waiters
        .len()
        == 3));
    assert!(
        holder.try_event().is_none(),
        "normal waiters do not ask for a yield"
    );
    let c = daemon.client();
    let critical_tx = tx.clone();
    threads.push(thread::spawn(move || {
        let lease = c
            .acquire(
                &LeaseRequest::new()
                    .vram(GIB)
                    .compute()
                    .class(Class::Critical)
                    .label("critical"),
            )
            .unwrap();
        critical_tx.send(("critical", Instant::now())).unwrap();
        lease.release().unwrap();
    }));
    // The holder hears about it and yields at its "safe point".
    let event = holder.wait_event().expect("yield notice");
    assert!(
        matches!(
            event,
            Event::YieldRequested {
                reason: YieldReason::CriticalWaiting,
                ..
            }
        ),
        "{event:?}"
    );
    assert!(holder.yield_requested());
    let queue = probe.status().unwrap().devices[0].queued;
    assert_eq!((queue.critical, queue.normal), (1, 3));
    holder.release().unwrap();
    drop(tx);
    for t in threads {
        t.join().unwrap();
    }
    let order: Vec<&str> = rx.iter().map(|(n, _)| n).collect();
    assert_eq!(order, ["critical", "normal-1", "normal-2", "normal-3"]);
}

#[test]
fn requests_that_can_never_fit_are_refused_with_a_clear_error() {
    let daemon = Daemon::start("16GiB,24GiB");
    let c = daemon.client();
    let e = c.acquire(&LeaseRequest::new().vram(30 * GIB)).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NeverFits));
    assert!(e.to_string().contains("can never fit"), "{e}");
    let e = c
        .acquire(&LeaseRequest::new().vram(GIB).device(Placement::Index(5)))
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownDevice));
    let e = c.acquire(&LeaseRequest::new()).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidRequest));
    // "any" picks the only device that fits.
    let lease = c.acquire(&LeaseRequest::new().vram(20 * GIB)).unwrap();
    assert_eq!(lease.info().device_index, 1);
    assert_eq!(lease.cuda_visible_devices(), lease.info().device_uuid);
}

#[test]
fn try_acquire_times_out_and_grow_keeps_the_lease() {
    let daemon = Daemon::start("16GiB");
    let c = daemon.client();
    let mut a = c.acquire(&LeaseRequest::new().vram(8 * GIB)).unwrap();
    let _b = c.acquire(&LeaseRequest::new().vram(6 * GIB)).unwrap();
    let started = Instant::now();
    let none = c
        .try_acquire(
            &LeaseRequest::new().vram(4 * GIB),
            Duration::from_millis(150),
        )
        .unwrap();
    assert!(none.is_none());
    assert!(started.elapsed() >= Duration::from_millis(150));
    let e = a
        .resize(12 * GIB, Some(Duration::from_millis(100)))
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::TimedOut));
    assert_eq!(a.resize(4 * GIB, None).unwrap(), 4 * GIB);
    assert_eq!(a.resize(10 * GIB, None).unwrap(), 10 * GIB);
    let status = c.status().unwrap();
    assert_eq!(status.devices[0].reserved_bytes, 16 * GIB);
}

#[test]
fn admin_operations_drain_and_revoke() {
    let daemon = Daemon::start("2x16GiB");
    let c = daemon.client();
    let mut lease = c
        .acquire(
            &LeaseRequest::new()
                .vram(GIB)
                .compute()
                .device(Placement::Index(0)),
        )
        .unwrap();
    assert!(lease.compute_token().is_some());
    c.drain(Placement::Index(0)).unwrap();
    let other = c.acquire(&LeaseRequest::new().vram(GIB)).unwrap();
    assert_eq!(other.info().device_index, 1, "drained device is skipped");
    assert!(daemon.client().status().unwrap().devices[0].drained);
    c.undrain(Placement::Index(0)).unwrap();
    // Revoke: the holder gets an event and the lease is gone.
    daemon.client().revoke(lease.id()).unwrap();
    let event = lease.wait_event().unwrap();
    assert!(matches!(event, Event::Revoked { .. }), "{event:?}");
    assert!(lease.is_lost());
    assert!(
        lease.compute_token().is_none(),
        "a revoked lease proves nothing"
    );
    let status = c.status().unwrap();
    assert_eq!(status.devices[0].reserved_bytes, 0);
}

#[test]
fn a_lease_watch_runs_its_hook_on_a_yield_notice_and_on_a_revocation() {
    let daemon = Daemon::start("16GiB");
    let holder = daemon.client();
    let lease = holder.acquire(&LeaseRequest::new().compute()).unwrap();
    let watch = lease.watch();
    let (tx, rx) = mpsc::channel();
    watch.on_notice(move || {
        let _ = tx.send(());
    });
    assert!(rx.try_recv().is_err(), "no notice yet");
    let critical = daemon.client();
    let waiter = thread::spawn(move || {
        critical
            .acquire(&LeaseRequest::new().compute().class(Class::Critical))
            .unwrap()
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the hook runs on the yield notice");
    assert!(watch.yield_requested() && !watch.is_lost());
    daemon.client().revoke(lease.id()).unwrap();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the hook runs on the revocation");
    assert!(watch.is_lost() && lease.is_lost());
    drop(waiter.join().unwrap());
    // A hook installed after the notice runs at once.
    let (tx, rx) = mpsc::channel();
    watch.on_notice(move || {
        let _ = tx.send(());
    });
    rx.try_recv().expect("a late hook sees the raised flag");
}

#[test]
fn closing_a_client_ends_its_session_and_its_leases_are_lost() {
    let daemon = Daemon::start("16GiB");
    let client = daemon.client();
    let lease = client.acquire(&LeaseRequest::new().vram(10 * GIB)).unwrap();
    let other = daemon.client();
    let waiter = thread::spawn(move || other.acquire(&LeaseRequest::new().vram(10 * GIB)));
    let probe = daemon.client();
    assert!(wait_until(Duration::from_secs(5), || {
        probe.status().unwrap().waiters.len() == 1
    }));
    client.close();
    assert!(wait_until(Duration::from_secs(5), || lease.is_lost()));
    let granted = waiter.join().unwrap().expect("the waiter gets the memory");
    assert_eq!(granted.vram_bytes(), 10 * GIB);
    assert!(matches!(
        client.status(),
        Err(gpud_client::ClientError::Disconnected)
    ));
    assert!(matches!(
        lease.release(),
        Err(gpud_client::ClientError::Disconnected)
    ));
    assert_eq!(probe.status().unwrap().leases.len(), 1);
}

#[test]
fn two_leases_growing_into_each_others_memory_fail_the_younger_grow() {
    let daemon = Daemon::start("16GiB");
    let (a, b) = (daemon.client(), daemon.client());
    let mut older = a.acquire(&LeaseRequest::new().vram(6 * GIB)).unwrap();
    let mut younger = b.acquire(&LeaseRequest::new().vram(6 * GIB)).unwrap();
    let grows = thread::spawn(move || {
        let size = older.resize(11 * GIB, Some(Duration::from_secs(30)));
        (older, size)
    });
    let probe = daemon.client();
    assert!(wait_until(Duration::from_secs(5), || {
        probe.status().unwrap().devices[0].queued.normal == 1
    }));
    let e = younger.resize(11 * GIB, None).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::GrowDeadlock), "{e}");
    assert!(e.to_string().contains("youngest"), "{e}");
    assert_eq!(younger.info().vram_bytes, 6 * GIB);
    // Told its allocation failed, the younger program lets go: the older one grows.
    younger.release().unwrap();
    let (older, size) = grows.join().unwrap();
    assert_eq!(size.unwrap(), 11 * GIB);
    older.release().unwrap();
}
