//! Leases of several devices end to end on simulated devices: granted on all at once or not
//! at all, placed by the policy asked, kept whole over a restart, and handed to a program by
//! `gpudctl run --devices N` as one CUDA_VISIBLE_DEVICES.

use std::time::Duration;

use gpud_client::proto::{ErrorCode, Placement};
use gpud_client::{LeaseRequest, PlacementPolicy};
use gpud_tests::{Daemon, wait_until};
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// Simulated device `i`'s UUID.
fn uuid(i: u32) -> String {
    format!("GPU-5e1a0000-0000-4000-8000-{i:012x}")
}

fn status(daemon: &Daemon) -> Value {
    let out = daemon.gpudctl(&["status", "--json"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The device of each part of a lease, in order.
fn devices(lease: &gpud_client::blocking::Lease) -> Vec<u32> {
    lease.parts().iter().map(|p| p.device_index).collect()
}

#[test]
fn a_two_device_lease_waits_while_one_is_partly_taken_and_is_granted_whole() {
    let daemon = Daemon::start("2x16GiB");
    let other = daemon.client();
    let taken = other
        .acquire(
            &LeaseRequest::new()
                .vram(10 * GIB)
                .device(Placement::Index(1)),
        )
        .unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            daemon
                .client()
                .acquire(&LeaseRequest::new().vram(12 * GIB).compute().devices(2))
                .unwrap()
        });
        let waiting = wait_until(Duration::from_secs(10), || {
            status(&daemon)["waiters"]
                .as_array()
                .is_some_and(|w| w.len() == 1)
        });
        assert!(waiting, "the group request never queued");
        // Nothing is held for it meanwhile: device 0 is untouched.
        let now = status(&daemon);
        assert_eq!(now["devices"][0]["reserved_bytes"], 0);
        assert!(now["devices"][0]["compute_holder"].is_null());
        assert_eq!(now["waiters"][0]["parts"].as_array().unwrap().len(), 2);
        let text = String::from_utf8(daemon.gpudctl(&["leases"]).stdout).unwrap();
        assert!(text.contains("2 devices: any,any"), "{text}");
        taken.release().unwrap();
        let lease = waiter.join().unwrap();
        assert_eq!(devices(&lease), vec![0, 1]);
        assert_eq!(lease.parts()[0].lease, lease.id());
        assert_eq!(
            lease.cuda_visible_devices(),
            format!("{},{}", uuid(0), uuid(1))
        );
        let now = status(&daemon);
        for d in 0..2 {
            assert_eq!(now["devices"][d]["reserved_bytes"], 12 * GIB);
        }
        let leases = now["leases"].as_array().unwrap();
        assert_eq!(leases.len(), 2);
        assert!(leases.iter().all(|l| l["group"] == lease.id()));
        let text = String::from_utf8(daemon.gpudctl(&["leases"]).stdout).unwrap();
        assert!(text.contains(&format!("(group {})", lease.id())), "{text}");
        // Releasing the lease frees every part.
        lease.release().unwrap();
        let now = status(&daemon);
        assert!(now["leases"].as_array().unwrap().is_empty());
    });
}

#[test]
fn spread_and_pack_place_as_documented_on_four_devices() {
    let daemon = Daemon::start("4x16GiB");
    let client = daemon.client();
    // Device 2 holds 8 GiB, device 3 2 GiB; 0 and 1 are empty.
    let _a = client
        .acquire(
            &LeaseRequest::new()
                .vram(8 * GIB)
                .device(Placement::Index(2)),
        )
        .unwrap();
    let _b = client
        .acquire(
            &LeaseRequest::new()
                .vram(2 * GIB)
                .device(Placement::Index(3)),
        )
        .unwrap();
    let ask = |policy| LeaseRequest::new().vram(GIB).devices(2).placement(policy);
    // Spread: most free memory first, lowest index among equals.
    let spread = client.acquire(&ask(PlacementPolicy::Spread)).unwrap();
    assert_eq!(devices(&spread), vec![0, 1]);
    spread.release().unwrap();
    // Pack: the most loaded devices first.
    let pack = client.acquire(&ask(PlacementPolicy::Pack)).unwrap();
    assert_eq!(devices(&pack), vec![2, 3]);
    pack.release().unwrap();
    // One device of each policy too.
    let one = |policy| {
        let lease = client
            .acquire(&LeaseRequest::new().vram(GIB).placement(policy))
            .unwrap();
        let d = lease.info().device_index;
        lease.release().unwrap();
        d
    };
    assert_eq!(one(PlacementPolicy::Spread), 0);
    assert_eq!(one(PlacementPolicy::Pack), 2);
    assert_eq!(one(PlacementPolicy::BestFit), 2);
}

#[test]
fn near_keeps_parts_on_one_island_and_needs_a_topology() {
    let daemon = Daemon::start_with(
        "4x16GiB",
        "[devices]\nnvlink_islands = [[0, 1], [2, 3]]\nnuma_nodes = [0, 0, 1, 1]\n",
    );
    let now = status(&daemon);
    assert_eq!(now["devices"][3]["nvlink_island"], 1);
    assert_eq!(now["devices"][1]["numa_node"], 0);
    let text = String::from_utf8(daemon.gpudctl(&["status"]).stdout).unwrap();
    assert!(text.contains("nvlink island 1, numa 1"), "{text}");
    let client = daemon.client();
    // Device 1 is full: spread would take 0 and 2, near must take 2 and 3.
    let _full = client
        .acquire(
            &LeaseRequest::new()
                .vram(16 * GIB)
                .device(Placement::Index(1)),
        )
        .unwrap();
    let near = client
        .acquire(
            &LeaseRequest::new()
                .vram(4 * GIB)
                .devices(2)
                .placement(PlacementPolicy::Near),
        )
        .unwrap();
    assert_eq!(devices(&near), vec![2, 3]);
    let spread = client
        .acquire(
            &LeaseRequest::new()
                .vram(4 * GIB)
                .devices(2)
                .placement(PlacementPolicy::Spread),
        )
        .unwrap();
    assert_eq!(devices(&spread), vec![0, 2]);

    // Without a topology, near is refused with a reason.
    let plain = Daemon::start("2x16GiB");
    let e = plain
        .client()
        .acquire(
            &LeaseRequest::new()
                .vram(GIB)
                .devices(2)
                .placement(PlacementPolicy::Near),
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidRequest));
    assert!(e.to_string().contains("NVLink"), "{e}");
}

#[test]
fn nonsense_multi_device_requests_are_refused_with_reasons() {
    let daemon = Daemon::start("2x16GiB");
    let client = daemon.client();
    let refused = |request: LeaseRequest, says: &str| {
        let e = client.acquire(&request).unwrap_err();
        assert!(e.to_string().contains(says), "{e} should say {says:?}");
    };
    refused(LeaseRequest::new().vram(GIB).devices(3), "this host has 2");
    refused(
        LeaseRequest::new().vram(GIB).devices(0),
        "at least one device",
    );
    refused(
        LeaseRequest::new()
            .part(Placement::Index(1), GIB, false)
            .part(Placement::Uuid(uuid(1)), GIB, false),
        "both name device 1",
    );
    refused(
        LeaseRequest::new()
            .part(Placement::Any, GIB, false)
            .part(Placement::Any, 0, false),
        "part 2 reserves nothing",
    );
    // An unknown policy never reaches the daemon from gpudctl.
    let out = daemon.gpudctl(&[
        "run",
        "--vram",
        "1GiB",
        "--devices",
        "2",
        "--placement",
        "wide",
        "--",
        "true",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("best-fit, spread, pack or near"), "{err}");
    // A lease of one device still answers in the old shape: no parts.
    let one = client.acquire(&LeaseRequest::new().vram(GIB)).unwrap();
    assert!(one.parts().is_empty());
    assert_eq!(one.cuda_visible_devices(), one.info().device_uuid);
}

#[test]
fn gpudctl_run_with_two_devices_sets_both_in_cuda_visible_devices() {
    let daemon = Daemon::start("2x16GiB");
    let out = daemon.gpudctl(&[
        "run",
        "--vram",
        "2GiB",
        "--compute",
        "--devices",
        "2",
        "--",
        "sh",
        "-c",
        "echo \"$CUDA_VISIBLE_DEVICES\"",
    ]);
    assert!(out.status.success(), "{out:?}");
    let seen = String::from_utf8(out.stdout).unwrap();
    assert_eq!(seen.trim(), format!("{},{}", uuid(0), uuid(1)));
    // Both parts were released when the program ended.
    assert!(status(&daemon)["leases"].as_array().unwrap().is_empty());
}

#[test]
fn a_group_is_re_adopted_whole_after_a_restart() {
    let mut daemon = Daemon::start_with("3x16GiB", "readopt_grace = \"10s\"\n");
    let client = daemon.client();
    let lease = client
        .acquire(&LeaseRequest::new().vram(4 * GIB).devices(2))
        .unwrap();
    let parts: Vec<u64> = lease.parts().iter().map(|p| p.lease).collect();
    daemon.kill_and_restart();
    // The client re-adopts its lease by the group's id; every part comes back with it.
    let back = wait_until(Duration::from_secs(10), || {
        let now = status(&daemon);
        let leases = now["leases"].as_array().cloned().unwrap_or_default();
        leases.len() == 2
            && leases
                .iter()
                .all(|l| l["group"] == lease.id() && l["pid"] != 0)
            && leases
                .iter()
                .map(|l| l["id"].as_u64().unwrap())
                .collect::<Vec<_>>()
                == parts
    });
    assert!(back, "group not re-adopted whole: {}", status(&daemon));
    assert!(!lease.is_lost());
    lease.release().unwrap();
    assert!(status(&daemon)["leases"].as_array().unwrap().is_empty());
}
