//! The D-Bus service on a private dbus-daemon configured like the system bus, with the
//! project's policy file: introspection, bus leases freed with their owner, access control,
//! and fair competition with socket clients.

use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpud_client::LeaseRequest;
use gpud_tests::ops::{Bus, Gpud, stdout_lines};
use gpud_tests::{bin, wait_until};

const GIB: u64 = 1 << 30;

/// A bus client process asking for a lease; its stdout lines arrive on `lines`.
struct BusClient {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl BusClient {
    fn spawn(bus: &Bus, device: &str, vram: u64, compute: bool, class: &str) -> Self {
        let mut child = Command::new(bin("gpud-dbus-client"))
            .args([
                &bus.address,
                device,
                &vram.to_string(),
                &compute.to_string(),
                class,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = stdout_lines(&mut child);
        Self { child, lines }
    }

    /// The next line starting with `prefix`, within `limit`.
    fn expect(&self, prefix: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    fn granted(&self, limit: Duration) -> Option<u64> {
        self.expect("granted ", limit)
            .and_then(|l| l.trim_start_matches("granted ").parse().ok())
    }
}

impl Drop for BusClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gpud_on(bus: &Bus, simulate: &str, config: &str) -> Gpud {
    let gpud = Gpud::start(simulate, config, &["--dbus", &bus.address], &[]);
    bus.wait_for_gpud();
    gpud
}

#[test]
fn introspection_shows_the_interface() {
    let bus = Bus::system_like();
    let _gpud = gpud_on(&bus, "2x16GiB", "");
    let out = bus
        .busctl(&["introspect", "org.gpud.Manager1", "/org/gpud/Manager1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for member in [
        "org.gpud.Manager1",
        ".Status",
        ".Acquire",
        ".AcquireWith",
        ".Resize",
        ".Cancel",
        ".Adopt",
        ".Release",
        ".Drain",
        ".Undrain",
        ".Revoke",
        ".Devices",
        ".Leases",
        ".LeaseGranted",
        ".LeaseReleased",
        ".DeviceChanged",
        ".YieldRequested",
        ".ReclaimRequested",
        ".LeaseRevoked",
        ".Queued",
    ] {
        assert!(text.contains(member), "{member} missing:\n{text}");
    }
    // The bus policy lets group gpud call every method that is not an admin's (or open to all).
    let policy = std::fs::read_to_string(
        gpud_tests::ops::repo_root_dir().join("systemd/org.gpud.Manager1.conf"),
    )
    .unwrap();
    let users = policy
        .split("<policy group=\"gpud\">")
        .nth(1)
        .and_then(|rest| rest.split("</policy>").next())
        .expect("a policy for group gpud");
    // busctl lists each interface, then its members.
    let mut interface = "";
    let mut methods: Vec<&str> = Vec::new();
    for line in text.lines() {
        let mut cols = line.split_whitespace();
        let (Some(name), Some(kind)) = (cols.next(), cols.next()) else {
            continue;
        };
        match (kind, name.strip_prefix('.')) {
            ("interface", _) => interface = name,
            ("method", Some(method)) if interface == "org.gpud.Manager1" => methods.push(method),
            _ => {}
        }
    }
    assert!(methods.contains(&"AcquireWith"), "{methods:?}");
    for method in methods {
        if ["Status", "Drain", "Undrain", "Revoke"].contains(&method) {
            continue;
        }
        assert!(
            users.contains(&format!("send_member=\"{method}\"")),
            "group gpud may not call {method}"
        );
    }
    // Status and the structured Devices property are open to any user.
    let status = bus.call_as(Some(65534), "Status", &[]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let devices = bus
        .busctl(&[
            "get-property",
            "org.gpud.Manager1",
            "/org/gpud/Manager1",
            "org.gpud.Manager1",
            "Devices",
        ])
        .output()
        .unwrap();
    let devices = String::from_utf8_lossy(&devices.stdout);
    assert!(
        devices.starts_with("a(usstttttbuuu) 2 0 \"GPU-"),
        "{devices}"
    );
}

#[test]
fn a_bus_lease_is_granted_and_freed_when_its_client_is_killed() {
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "");
    let mut holder = BusClient::spawn(&bus, "any", 10 * GIB, true, "high");
    let lease = holder
        .granted(Duration::from_secs(10))
        .expect("bus client granted");
    let probe = gpud.client();
    let status = probe.status().unwrap();
    assert_eq!(status.leases.len(), 1);
    assert_eq!(status.leases[0].id, lease);
    assert_eq!(
        status.leases[0].pid,
        holder.child.id(),
        "the bus caller's pid, from the bus"
    );
    assert_eq!(status.devices[0].reserved_bytes, 10 * GIB);
    // The Leases property names the owner by its unique name.
    let leases = bus
        .busctl(&[
            "get-property",
            "org.gpud.Manager1",
            "/org/gpud/Manager1",
            "org.gpud.Manager1",
            "Leases",
        ])
        .output()
        .unwrap();
    let leases = String::from_utf8_lossy(&leases.stdout);
    assert!(
        leases.contains(&format!("1 {lease} 0 ")) && leases.contains("\":1."),
        "{leases}"
    );

    let killed = Instant::now();
    holder.child.kill().unwrap();
    let _ = holder.child.wait();
    assert!(
        wait_until(Duration::from_secs(5), || probe
            .status()
            .unwrap()
            .leases
            .is_empty()),
        "lease not freed after its bus client died"
    );
    println!("bus lease freed {:?} after SIGKILL", killed.elapsed());
    assert_eq!(probe.status().unwrap().devices[0].reserved_bytes, 0);
}

#[test]
fn revoke_by_a_caller_that_is_not_root_or_admin_is_access_denied() {
    // On the system-like bus, the policy file stops the call: the bus itself answers.
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "");
    let holder = gpud.client();
    let lease = holder.acquire(&LeaseRequest::new().vram(GIB)).unwrap();
    let out = bus.dbus_send_as(65534, "Revoke", &[&format!("uint64:{}", lease.id())]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains("org.freedesktop.DBus.Error.AccessDenied")
            && said.contains("Rejected send message"),
        "{said}"
    );
    println!("bus policy: {}", said.trim());
    assert_eq!(
        gpud.client().status().unwrap().leases.len(),
        1,
        "the lease is still held"
    );

    // Without any bus policy, gpud's own check answers AccessDenied (the caller may use gpud,
    // but is no administrator).
    let open_bus = Bus::permissive();
    let gpud2 = gpud_on(&open_bus, "16GiB", "[access]\nallowed_uids = [0, 65534]\n");
    let lease2 = gpud2
        .client()
        .acquire(&LeaseRequest::new().vram(GIB))
        .unwrap();
    let out = open_bus.dbus_send_as(65534, "Revoke", &[&format!("uint64:{}", lease2.id())]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains("org.freedesktop.DBus.Error.AccessDenied") && said.contains("admin_groups"),
        "{said}"
    );
    println!("gpud's check: {}", said.trim());
    assert_eq!(
        gpud2.client().status().unwrap().leases.len(),
        1,
        "the lease is still held"
    );
    // Root may.
    let out = open_bus.call_as(None, "Revoke", &["t", &lease2.id().to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(gpud2.client().status().unwrap().leases.is_empty());
    drop(lease);
}

#[test]
fn socket_and_bus_clients_are_serialized_on_one_device() {
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "");
    let socket_client = gpud.client();
    let probe = gpud.client();

    // Socket first: the bus client waits.
    let first = socket_client
        .acquire(&LeaseRequest::new().vram(10 * GIB).compute())
        .unwrap();
    let bus_client = BusClient::spawn(&bus, "0", 10 * GIB, true, "normal");
    assert!(
        wait_until(Duration::from_secs(5), || probe
            .status()
            .unwrap()
            .waiters
            .len()
            == 1),
        "the bus request does not wait"
    );
    assert!(
        bus_client.granted(Duration::from_millis(300)).is_none(),
        "granted while held"
    );
    let released = Instant::now();
    first.release().unwrap();
    let bus_lease = bus_client
        .granted(Duration::from_secs(5))
        .expect("granted after release");
    println!("socket -> bus handoff: {:?}", released.elapsed());

    // Bus holds: the socket client waits until the bus client is gone.
    let status = probe.status().unwrap();
    assert_eq!(status.leases.len(), 1);
    assert_eq!(status.leases[0].id, bus_lease);
    let second = socket_client
        .try_acquire(
            &LeaseRequest::new().vram(10 * GIB).compute(),
            Duration::from_millis(300),
        )
        .unwrap();
    assert!(
        second.is_none(),
        "socket client granted while the bus client holds"
    );
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let lease = socket_client
            .acquire(&LeaseRequest::new().vram(10 * GIB).compute())
            .unwrap();
        tx.send(Instant::now()).unwrap();
        drop(lease);
    });
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    let gone = Instant::now();
    drop(bus_client);
    let granted = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("socket granted after the bus client left");
    println!(
        "bus -> socket handoff after the bus client was killed: {:?}",
        granted - gone
    );
    waiter.join().unwrap();
}

#[test]
fn grants_releases_and_device_changes_are_signalled() {
    use futures_util::StreamExt;

    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let seen = rt.block_on(async {
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .build()
            .await
            .unwrap();
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface("org.gpud.Manager1")
            .build()
            .unwrap();
        let mut signals = zbus::MessageStream::for_match_rule(rule, &conn, None)
            .await
            .unwrap();
        // A socket client takes and gives back a lease while the bus watches.
        let socket = gpud.socket.clone();
        let client = tokio::task::spawn_blocking(move || {
            let c = gpud_client::blocking::Client::connect(&socket).unwrap();
            let lease = c
                .acquire(&LeaseRequest::new().vram(2 * GIB).compute())
                .unwrap();
            let id = lease.id();
            lease.release().unwrap();
            id
        });
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !seen.iter().any(|s: &String| s.starts_with("LeaseReleased")) {
            let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, signals.next()).await else {
                break;
            };
            let header = msg.header();
            let member = header.member().map(|m| m.to_string()).unwrap_or_default();
            let body = msg.body();
            let text = match member.as_str() {
                "LeaseGranted" => body
                    .deserialize::<(u64, u32, String, u64, bool, String, String)>()
                    .map(|(l, d, _, v, c, class, owner)| {
                        format!("LeaseGranted {l} {d} {v} {c} {class} {owner:?}")
                    }),
                "LeaseReleased" => body
                    .deserialize::<(u64, u32, String)>()
                    .map(|(l, d, why)| format!("LeaseReleased {l} {d} {why}")),
                "DeviceChanged" => body
                    .deserialize::<u32>()
                    .map(|d| format!("DeviceChanged {d}")),
                other => Ok(other.to_string()),
            };
            seen.push(text.unwrap_or_else(|e| format!("{member}: {e}")));
        }
        (client.await.unwrap(), seen)
    });
    let (lease, seen) = seen;
    println!("signals: {seen:?}");
    let gib2 = 2 * GIB;
    assert!(
        seen.contains(&format!("LeaseGranted {lease} 0 {gib2} true normal \"\"")),
        "{seen:?}"
    );
    assert!(seen.contains(&"DeviceChanged 0".to_string()), "{seen:?}");
    assert!(
        seen.contains(&format!("LeaseReleased {lease} 0 released")),
        "{seen:?}"
    );
}
