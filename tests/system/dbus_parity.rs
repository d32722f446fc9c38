//! The D-Bus interface does what the socket does, on a real gpud and a real dbus-daemon:
//! acquire with options (timeout, label, evictable), resize, cancel by the caller's name for the
//! request, notices addressed to the holder only, and re-adoption after a daemon restart.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use gpud_client::LeaseRequest;
use gpud_tests::ops::{Bus, Gpud};
use gpud_tests::wait_until;
use serde_json::Value;
use zbus::{Connection, Message, MessageStream, OwnedVariant, Variant};

const GIB: u64 = 1 << 30;

#[zbus::proxy(
    interface = "org.gpud.Manager1",
    default_service = "org.gpud.Manager1",
    default_path = "/org/gpud/Manager1"
)]
trait Manager1 {
    fn acquire_with(
        &self,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<HashMap<String, OwnedVariant>>;
    fn resize(
        &self,
        lease: u64,
        vram: u64,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<u64>;
    fn cancel(&self, request: &str) -> zbus::Result<()>;
    fn adopt(&self, lease: u64, token: &str) -> zbus::Result<HashMap<String, OwnedVariant>>;
    fn release(&self, lease: u64) -> zbus::Result<()>;
}

/// One bus client: its connection, a proxy of the manager, and the manager's signals it gets.
struct Caller {
    conn: Connection,
    manager: Manager1Proxy<'static>,
    signals: MessageStream,
}

impl Caller {
    async fn connect(bus: &Bus) -> Self {
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .method_timeout(Duration::from_secs(3600))
            .build()
            .await
            .unwrap();
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface("org.gpud.Manager1")
            .build()
            .unwrap();
        let signals = MessageStream::for_match_rule(rule, &conn, None)
            .await
            .unwrap();
        let manager = Manager1Proxy::new(&conn).await.unwrap();
        Self {
            conn,
            manager,
            signals,
        }
    }

    fn name(&self) -> String {
        self.conn.unique_name().unwrap().to_string()
    }

    /// Leaves the bus.
    async fn leave(self) {
        let Self { conn, .. } = self;
        conn.close().await.unwrap();
    }

    /// The next signal `member` within `limit`, checked to be addressed to this caller.
    async fn signal(&mut self, member: &str, limit: Duration) -> Option<Message> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, self.signals.next()).await
            else {
                return None;
            };
            if msg.header().member().is_some_and(|m| m.as_str() == member) {
                let to = msg.header().destination().map(|d| d.to_string());
                assert_eq!(to, Some(self.name()), "{member} is for its holder only");
                return Some(msg);
            }
        }
    }

    /// Whether a signal `member` comes within `limit` (to anyone this connection can see).
    async fn sees(&mut self, member: &str, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, self.signals.next()).await {
            if msg.header().member().is_some_and(|m| m.as_str() == member) {
                return true;
            }
        }
        false
    }
}

fn options<'a>(pairs: &[(&'a str, Variant<'a>)]) -> HashMap<&'a str, Variant<'a>> {
    pairs.iter().cloned().collect()
}

fn lease_of(info: &HashMap<String, OwnedVariant>) -> u64 {
    match &*info["lease"] {
        Variant::U64(id) => *id,
        other => panic!("lease is {other:?}"),
    }
}

fn string_of(info: &HashMap<String, OwnedVariant>, key: &str) -> String {
    match &*info[key] {
        Variant::Str(s) => s.to_string(),
        other => panic!("{key} is {other:?}"),
    }
}

/// The D-Bus error name and message of a failed call.
fn refusal<T: std::fmt::Debug>(result: zbus::Result<T>) -> (String, String) {
    match result {
        Err(zbus::Error::MethodError(name, message, _)) => {
            (name.to_string(), message.unwrap_or_default())
        }
        // zbus reads the standard org.freedesktop.DBus.Error names into its own type.
        Err(zbus::Error::FDO(e)) => {
            use zbus::DBusError;
            (
                e.name().to_string(),
                e.description().unwrap_or_default().to_string(),
            )
        }
        other => panic!("expected an error reply, got {other:?}"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn gpud_on(bus: &Bus, simulate: &str, config: &str) -> Gpud {
    let gpud = Gpud::start(simulate, config, &["--dbus", &bus.address], &[]);
    bus.wait_for_gpud();
    gpud
}

/// The daemon's status, asked on a socket. The blocking client runs its own runtime, so it is
/// used on a thread of its own, never inside the test's.
fn status(gpud: &Gpud) -> Value {
    std::thread::scope(|s| {
        s.spawn(|| serde_json::to_value(gpud.client().status().unwrap()).unwrap())
            .join()
            .unwrap()
    })
}

#[test]
fn a_bus_lease_grows_when_the_memory_is_freed_gives_up_at_its_timeout_and_shrinks_at_once() {
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "");
    let other = gpud.client();
    runtime().block_on(async {
        let caller = Caller::connect(&bus).await;
        let info = caller
            .manager
            .acquire_with(options(&[("vram", (4 * GIB).into())]))
            .await
            .unwrap();
        let lease = lease_of(&info);
        let held = std::thread::scope(|s| {
            s.spawn(|| other.acquire(&LeaseRequest::new().vram(10 * GIB)).unwrap())
                .join()
                .unwrap()
        });

        // 8 GiB does not fit beside the other 10: the grow waits, and gives up at its timeout.
        let asked = Instant::now();
        let timed_out = caller
            .manager
            .resize(lease, 8 * GIB, options(&[("timeout_ms", 300u64.into())]))
            .await;
        let (name, message) = refusal(timed_out);
        assert_eq!(name, "org.gpud.Error.TimedOut");
        assert_eq!(message, "gave up waiting: timeout reached");
        assert!(asked.elapsed() >= Duration::from_millis(300));
        assert_eq!(status(&gpud)["leases"][0]["vram_bytes"], 4 * GIB);

        // Without a timeout it waits, and is granted when the other lease goes.
        let manager = caller.manager.clone();
        let grow = tokio::spawn(async move { manager.resize(lease, 8 * GIB, options(&[])).await });
        assert!(
            wait_until(Duration::from_secs(5), || status(&gpud)["waiters"]
                .as_array()
                .is_some_and(|w| w.len() == 1)),
            "the grow does not wait"
        );
        assert!(!grow.is_finished(), "grew while the memory was held");
        tokio::task::spawn_blocking(move || held.release().unwrap())
            .await
            .unwrap();
        let grown = tokio::time::timeout(Duration::from_secs(5), grow)
            .await
            .expect("the grow is answered once the memory is free")
            .unwrap()
            .unwrap();
        assert_eq!(grown, 8 * GIB);
        assert_eq!(status(&gpud)["devices"][0]["reserved_bytes"], 8 * GIB);

        // Shrinking is immediate.
        let shrunk = caller
            .manager
            .resize(lease, GIB, options(&[]))
            .await
            .unwrap();
        assert_eq!(shrunk, GIB);
        assert_eq!(status(&gpud)["leases"][0]["vram_bytes"], GIB);
        // Another caller's lease is not its to resize: the socket's refusal, by name.
        let stranger = Caller::connect(&bus).await;
        let (name, message) = refusal(stranger.manager.resize(lease, 2 * GIB, options(&[])).await);
        assert_eq!(name, "org.gpud.Error.UnknownLease");
        assert_eq!(message, format!("no lease {lease} in this session"));
    });
}

#[test]
fn a_waiting_bus_acquire_is_cancelled_by_its_name_from_its_own_caller_only() {
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "");
    let held = gpud
        .client()
        .acquire(&LeaseRequest::new().vram(16 * GIB))
        .unwrap();
    runtime().block_on(async {
        let mut caller = Caller::connect(&bus).await;
        let manager = caller.manager.clone();
        let waiting = tokio::spawn(async move {
            let asked = options(&[
                ("vram", (8 * GIB).into()),
                ("request", "proof-17".into()),
                ("queued_events", true.into()),
            ]);
            manager.acquire_with(asked).await
        });
        let queued = caller
            .signal("Queued", Duration::from_secs(5))
            .await
            .expect("a Queued signal for the waiting request");
        let (request, position): (String, u32) = queued.body().deserialize().unwrap();
        assert_eq!((request.as_str(), position), ("proof-17", 1));

        // The name is the caller's: a second request may not take it while the first waits.
        let (name, message) = refusal(
            caller
                .manager
                .acquire_with(options(&[
                    ("vram", GIB.into()),
                    ("request", "proof-17".into()),
                ]))
                .await,
        );
        assert_eq!(name, "org.gpud.Error.DuplicateRequest");
        assert!(message.contains("\"proof-17\""), "{message}");
        // Another caller cannot cancel it.
        let stranger = Caller::connect(&bus).await;
        let (name, message) = refusal(stranger.manager.cancel("proof-17").await);
        assert_eq!(name, "org.gpud.Error.UnknownRequest");
        assert_eq!(message, "no waiting request \"proof-17\" in this session");
        assert!(!waiting.is_finished());

        caller.manager.cancel("proof-17").await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the cancelled acquire is answered")
            .unwrap();
        let (name, message) = refusal(answer);
        assert_eq!(name, "org.gpud.Error.Cancelled");
        assert_eq!(message, "cancelled by the client");
        let now = status(&gpud);
        assert_eq!(now["waiters"].as_array().map(Vec::len), Some(0));
        assert_eq!(now["leases"].as_array().map(Vec::len), Some(1));
        // Answered, the name is free again, and nothing by it waits.
        let (name, _) = refusal(caller.manager.cancel("proof-17").await);
        assert_eq!(name, "org.gpud.Error.UnknownRequest");
    });
    drop(held);
}

#[test]
fn a_bus_acquire_gives_up_at_its_timeout_and_its_label_shows_in_status() {
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "");
    runtime().block_on(async {
        let caller = Caller::connect(&bus).await;
        let info = caller
            .manager
            .acquire_with(options(&[
                ("vram", (12 * GIB).into()),
                ("compute", true.into()),
                ("class", "high".into()),
                ("label", "proof 17".into()),
            ]))
            .await
            .unwrap();
        let lease = lease_of(&info);
        assert_eq!(string_of(&info, "class"), "high");
        assert_eq!(string_of(&info, "token").len(), 32, "{info:?}");
        let now = status(&gpud);
        assert_eq!(now["leases"][0]["id"], lease);
        assert_eq!(now["leases"][0]["label"], "proof 17");
        assert_eq!(now["leases"][0]["class"], "high");
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
        assert!(leases.contains("\"proof 17\""), "{leases}");

        // 8 GiB more never comes while the lease is held: the acquire gives up at its timeout.
        let asked = Instant::now();
        let (name, message) = refusal(
            caller
                .manager
                .acquire_with(options(&[
                    ("vram", (8 * GIB).into()),
                    ("timeout_ms", 300u64.into()),
                ]))
                .await,
        );
        assert_eq!(name, "org.gpud.Error.TimedOut");
        assert_eq!(message, "gave up waiting: timeout reached");
        assert!(asked.elapsed() >= Duration::from_millis(300));
        assert_eq!(status(&gpud)["waiters"].as_array().map(Vec::len), Some(0));

        // Options gpud does not know, or of the wrong type, are refused by name.
        let (name, message) = refusal(
            caller
                .manager
                .acquire_with(options(&[("vram", GIB.into()), ("colour", "red".into())]))
                .await,
        );
        assert_eq!(name, "org.freedesktop.DBus.Error.InvalidArgs");
        assert!(message.contains("\"colour\""), "{message}");
        let (name, message) = refusal(
            caller
                .manager
                .acquire_with(options(&[("label", 17u32.into())]))
                .await,
        );
        assert_eq!(name, "org.freedesktop.DBus.Error.InvalidArgs");
        assert!(message.contains("\"label\""), "{message}");
        // A refusal of the daemon's own checks carries the socket's message.
        let (name, message) = refusal(
            caller
                .manager
                .acquire_with(options(&[("vram", GIB.into()), ("label", "a\nb".into())]))
                .await,
        );
        assert_eq!(name, "org.freedesktop.DBus.Error.InvalidArgs");
        assert_eq!(message, "label must be at most 256 bytes of printable text");
    });
}

#[test]
fn an_evictable_bus_lease_hears_its_reclaim_and_a_bystander_does_not() {
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "[scheduler]\nreclaim_grace = \"1s\"\n");
    runtime().block_on(async {
        let mut warm = Caller::connect(&bus).await;
        let mut bystander = Caller::connect(&bus).await;
        let info = warm
            .manager
            .acquire_with(options(&[
                ("vram", (10 * GIB).into()),
                ("evictable", true.into()),
            ]))
            .await
            .unwrap();
        let lease = lease_of(&info);
        assert_eq!(status(&gpud)["leases"][0]["evictable"], true);

        // A request that is not evictable needs the memory: the warm holder is asked for it,
        // shrinks, and the request is granted.
        let socket = gpud.socket.clone();
        let waiter = tokio::task::spawn_blocking(move || {
            let c = gpud_client::blocking::Client::connect(&socket).unwrap();
            let lease = c.acquire(&LeaseRequest::new().vram(10 * GIB)).unwrap();
            (lease.info().vram_bytes, c, lease)
        });
        let notice = warm
            .signal("ReclaimRequested", Duration::from_secs(5))
            .await
            .expect("a ReclaimRequested signal to the warm holder");
        let (noticed, revoke_in_ms): (u64, u64) = notice.body().deserialize().unwrap();
        assert_eq!(noticed, lease);
        assert!(
            revoke_in_ms > 0 && revoke_in_ms <= 1000,
            "revoke_in_ms {revoke_in_ms}"
        );
        assert_eq!(
            warm.manager
                .resize(lease, 4 * GIB, options(&[]))
                .await
                .unwrap(),
            4 * GIB
        );
        let (granted, client, held) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is granted once the warm lease shrinks")
            .unwrap();
        assert_eq!(granted, 10 * GIB);
        assert!(
            !bystander
                .sees("ReclaimRequested", Duration::from_millis(200))
                .await,
            "the notice went to another client"
        );

        // A second need the holder ignores: the lease is revoked at the deadline, and told so.
        let socket = gpud.socket.clone();
        let waiter = tokio::task::spawn_blocking(move || {
            let c = gpud_client::blocking::Client::connect(&socket).unwrap();
            c.acquire(&LeaseRequest::new().vram(5 * GIB)).map(drop)
        });
        warm.signal("ReclaimRequested", Duration::from_secs(5))
            .await
            .expect("a second reclaim notice");
        let revoked = warm
            .signal("LeaseRevoked", Duration::from_secs(5))
            .await
            .expect("a LeaseRevoked signal after the deadline");
        let (gone, reason): (u64, String) = revoked.body().deserialize().unwrap();
        assert_eq!((gone, reason.as_str()), (lease, "reclaimed"));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        // The blocking client's runtime may not be dropped inside this one.
        tokio::task::spawn_blocking(move || drop((held, client)))
            .await
            .unwrap();
    });
}

#[test]
fn a_bus_compute_holder_hears_a_yield_notice_addressed_to_it() {
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "16GiB", "[scheduler]\nrevoke_after_yield = \"30s\"\n");
    runtime().block_on(async {
        let mut holder = Caller::connect(&bus).await;
        let info = holder
            .manager
            .acquire_with(options(&[
                ("vram", GIB.into()),
                ("compute", true.into()),
                ("label", "phase 1".into()),
            ]))
            .await
            .unwrap();
        let lease = lease_of(&info);
        let socket = gpud.socket.clone();
        let critical = tokio::task::spawn_blocking(move || {
            let c = gpud_client::blocking::Client::connect(&socket).unwrap();
            let request = LeaseRequest::new()
                .vram(GIB)
                .compute()
                .class(gpud_client::Class::Critical);
            c.acquire(&request).map(|l| l.info().vram_bytes)
        });
        let notice = holder
            .signal("YieldRequested", Duration::from_secs(5))
            .await
            .expect("a YieldRequested signal to the compute holder");
        let (noticed, reason, revoke_in_ms): (u64, String, u64) =
            notice.body().deserialize().unwrap();
        assert_eq!((noticed, reason.as_str()), (lease, "critical_waiting"));
        assert!(revoke_in_ms > 0 && revoke_in_ms <= 30_000, "{revoke_in_ms}");
        // Honoured: the critical request gets the slot.
        holder.manager.release(lease).await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(5), critical)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(granted, GIB);
    });
}

#[test]
fn a_bus_lease_is_re_adopted_after_a_daemon_restart_with_its_token() {
    // A permissive bus, so that a caller of another uid reaches gpud's own check.
    let bus = Bus::permissive();
    let mut gpud = gpud_on(
        &bus,
        "16GiB",
        "readopt_grace = \"2s\"\n[access]\nallowed_uids = [0, 65534]\n",
    );
    runtime().block_on(async {
        let first = Caller::connect(&bus).await;
        let info = first
            .manager
            .acquire_with(options(&[
                ("vram", (6 * GIB).into()),
                ("compute", true.into()),
                ("label", "resident bases".into()),
            ]))
            .await
            .unwrap();
        let (kept, token) = (lease_of(&info), string_of(&info, "token"));
        let unclaimed = lease_of(
            &first
                .manager
                .acquire_with(options(&[("vram", (2 * GIB).into())]))
                .await
                .unwrap(),
        );

        gpud.kill_and_restart();
        bus.wait_for_gpud();
        let restored = status(&gpud);
        assert_eq!(
            restored["leases"].as_array().map(Vec::len),
            Some(2),
            "both bus leases are back from the journal: {restored}"
        );
        assert_eq!(restored["devices"][0]["reserved_bytes"], 8 * GIB);

        // A new connection (a new unique name) of the same process and uid adopts it with the
        // token; a wrong token or another uid does not.
        let second = Caller::connect(&bus).await;
        let (name, message) = refusal(second.manager.adopt(kept, "0123").await);
        assert_eq!(name, "org.gpud.Error.UnknownLease");
        assert_eq!(
            message,
            format!("no lease {kept} waiting to be re-adopted with that token")
        );
        let other_uid = bus.dbus_send_as(
            65534,
            "Adopt",
            &[&format!("uint64:{kept}"), &format!("string:{token}")],
        );
        let said = String::from_utf8_lossy(&other_uid.stderr);
        assert!(
            !other_uid.status.success() && said.contains("org.gpud.Error.UnknownLease"),
            "{said}"
        );
        let adopted = second.manager.adopt(kept, &token).await.unwrap();
        assert_eq!(lease_of(&adopted), kept);
        assert_eq!(string_of(&adopted, "token"), token);
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
            leases.contains(&format!("\"{}\"", second.name())),
            "the adopter owns it: {leases}"
        );

        // The lease not re-adopted is dropped at the end of the grace; the adopted one stays.
        assert!(
            wait_until(Duration::from_secs(10), || status(&gpud)["leases"]
                .as_array()
                .is_some_and(|l| l.len() == 1)),
            "the unclaimed lease {unclaimed} outlived the grace"
        );
        let after = status(&gpud);
        assert_eq!(after["leases"][0]["id"], kept);
        assert_eq!(after["leases"][0]["label"], "resident bases");
        assert_eq!(after["leases"][0]["compute"], true);
        assert_eq!(after["devices"][0]["reserved_bytes"], 6 * GIB);

        // Its new owner's name leaving the bus ends it, as for any bus lease.
        second.leave().await;
        assert!(
            wait_until(Duration::from_secs(5), || status(&gpud)["leases"]
                .as_array()
                .is_some_and(Vec::is_empty)),
            "the adopted lease outlived its owner's name"
        );
        first.leave().await;
    });
}

/// A bus lease of two devices: spread over both, all at once, its parts and both UUIDs in the
/// lease dictionary; with one device partly taken it is not granted in part.
#[test]
fn a_bus_lease_of_two_devices_is_granted_whole_with_its_parts() {
    let bus = Bus::system_like();
    let gpud = gpud_on(&bus, "2x16GiB", "");
    runtime().block_on(async {
        let caller = Caller::connect(&bus).await;
        let info = caller
            .manager
            .acquire_with(options(&[
                ("devices", 2u32.into()),
                ("vram", (10 * GIB).into()),
                ("compute", true.into()),
                ("placement", "spread".into()),
            ]))
            .await
            .unwrap();
        let parts: Vec<(u64, u32, String, u64, bool)> = info["parts"].clone().try_into().unwrap();
        assert_eq!(parts.len(), 2, "{info:?}");
        assert_ne!(parts[0].1, parts[1].1, "two parts on one device");
        assert!(parts.iter().all(|p| p.3 == 10 * GIB && p.4));
        let visible = string_of(&info, "cuda_visible_devices");
        assert_eq!(visible, format!("{},{}", parts[0].2, parts[1].2));
        let now = status(&gpud);
        assert_eq!(now["leases"].as_array().unwrap().len(), 2, "{now}");
        // Both devices now hold 10 GiB: a second pair cannot be granted, not even in part.
        let (name, message) = refusal(
            caller
                .manager
                .acquire_with(options(&[
                    ("devices", 2u32.into()),
                    ("vram", (10 * GIB).into()),
                    ("timeout_ms", 300u64.into()),
                ]))
                .await,
        );
        assert!(name.ends_with("TimedOut"), "{name}: {message}");
        assert_eq!(status(&gpud)["leases"].as_array().unwrap().len(), 2);
        // Releasing the first part ends the whole lease.
        caller.manager.release(lease_of(&info)).await.unwrap();
        assert!(
            wait_until(Duration::from_secs(5), || status(&gpud)["leases"]
                .as_array()
                .unwrap()
                .is_empty()),
            "parts outlived their lease"
        );
        // A count of none, or a device beside a count, is refused by name.
        let (_, message) = refusal(
            caller
                .manager
                .acquire_with(options(&[("devices", 0u32.into())]))
                .await,
        );
        assert!(message.contains("devices"), "{message}");
    });
}

#[test]
fn a_bus_lease_takes_host_resources_names_its_cpus_and_resizes_its_host_memory() {
    let bus = Bus::system_like();
    let gpud = gpud_on(
        &bus,
        "16GiB",
        "[host]\nmemory = \"8GiB\"\nmemory_headroom = \"0\"\npinned = \"2GiB\"\n",
    );
    runtime().block_on(async {
        let caller = Caller::connect(&bus).await;
        let info = caller
            .manager
            .acquire_with(options(&[
                ("vram", GIB.into()),
                ("host_mem_bytes", (2 * GIB).into()),
                ("pinned_bytes", GIB.into()),
                ("cpus", 1u32.into()),
                ("label", "gpu phase".into()),
            ]))
            .await
            .unwrap();
        let lease = lease_of(&info);
        let host: HashMap<String, OwnedVariant> = info["host"].clone().try_into().unwrap();
        assert_eq!(*host["mem_bytes"], Variant::U64(2 * GIB));
        assert_eq!(*host["pinned_bytes"], Variant::U64(GIB));
        let cpus: Vec<u32> = host["cpus"].clone().try_into().unwrap();
        assert_eq!(cpus.len(), 1);
        assert!(host.contains_key("numa_node"), "{host:?}");
        let s = status(&gpud);
        assert_eq!(s["host"]["memory"]["reserved_bytes"], 2 * GIB, "{s}");
        assert_eq!(s["host"]["pinned"]["reserved_bytes"], GIB, "{s}");
        assert_eq!(s["devices"][0]["reserved_bytes"], GIB, "{s}");

        // Host memory grows through Resize's option; vram must then be 0.
        let grown = caller
            .manager
            .resize(lease, 0, options(&[("host_mem_bytes", (3 * GIB).into())]))
            .await
            .unwrap();
        assert_eq!(grown, 3 * GIB);
        assert_eq!(status(&gpud)["host"]["memory"]["reserved_bytes"], 3 * GIB);
        let (name, message) = refusal(
            caller
                .manager
                .resize(lease, GIB, options(&[("host_mem_bytes", GIB.into())]))
                .await,
        );
        assert_eq!(name, "org.freedesktop.DBus.Error.InvalidArgs");
        assert!(message.contains("host_mem_bytes"), "{message}");

        // A lease of the host alone has no device; a bad option is named.
        let alone = caller
            .manager
            .acquire_with(options(&[("host_mem_bytes", GIB.into())]))
            .await
            .unwrap();
        assert_eq!(string_of(&alone, "cuda_visible_devices"), "");
        let (name, message) = refusal(
            caller
                .manager
                .acquire_with(options(&[("cpus", 1u32.into()), ("numa", "far".into())]))
                .await,
        );
        assert_eq!(name, "org.freedesktop.DBus.Error.InvalidArgs");
        assert!(message.contains("numa"), "{message}");

        caller.manager.release(lease).await.unwrap();
        caller.manager.release(lease_of(&alone)).await.unwrap();
        let s = status(&gpud);
        assert_eq!(s["host"]["memory"]["reserved_bytes"], 0, "{s}");
        caller.leave().await;
    });
}
