//! Bad input closes only the session that sent it.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use gpud_client::LeaseRequest;
use gpud_tests::{Daemon, frame, frames, read_until_eof};
use serde_json::json;

fn error_code(frames: &[serde_json::Value]) -> Option<String> {
    frames
        .iter()
        .find(|f| f["type"] == "error")
        .and_then(|f| f["error"]["code"].as_str().map(String::from))
}

#[test]
fn garbage_and_oversized_frames_close_only_their_session() {
    let daemon = Daemon::start("16GiB");
    let good = daemon.client();
    let lease = good
        .acquire(&LeaseRequest::new().vram(1 << 30).compute())
        .unwrap();

    // Garbage: a small length prefix followed by bytes that are not JSON.
    let mut bad = UnixStream::connect(&daemon.socket).unwrap();
    bad.write_all(&[0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4])
        .unwrap();
    let got = frames(&read_until_eof(&mut bad, Duration::from_secs(5)));
    assert_eq!(error_code(&got).as_deref(), Some("bad_frame"), "{got:?}");
    good.ping().unwrap();

    // A 1 GiB length prefix, after a valid hello.
    let mut big = UnixStream::connect(&daemon.socket).unwrap();
    big.write_all(&frame(&json!({"type": "hello", "version": 1})))
        .unwrap();
    big.write_all(&(1u32 << 30).to_be_bytes()).unwrap();
    big.write_all(&[b'{'; 64]).unwrap();
    let got = frames(&read_until_eof(&mut big, Duration::from_secs(5)));
    assert_eq!(got[0]["type"], "welcome");
    assert_eq!(
        error_code(&got).as_deref(),
        Some("frame_too_large"),
        "{got:?}"
    );

    // A valid JSON frame of the wrong shape, and a request before the hello.
    let mut shape = UnixStream::connect(&daemon.socket).unwrap();
    shape
        .write_all(&frame(&json!({"type": "hello", "version": 1})))
        .unwrap();
    shape
        .write_all(&frame(
            &json!({"type": "request", "id": 1, "op": {"acquire": {"vram": "lots"}}}),
        ))
        .unwrap();
    let got = frames(&read_until_eof(&mut shape, Duration::from_secs(5)));
    assert_eq!(error_code(&got).as_deref(), Some("bad_frame"), "{got:?}");
    let mut early = UnixStream::connect(&daemon.socket).unwrap();
    early
        .write_all(&frame(&json!({"type": "request", "id": 1, "op": "status"})))
        .unwrap();
    let got = frames(&read_until_eof(&mut early, Duration::from_secs(5)));
    assert_eq!(
        error_code(&got).as_deref(),
        Some("hello_required"),
        "{got:?}"
    );

    // A wrong protocol version.
    let mut old = UnixStream::connect(&daemon.socket).unwrap();
    old.write_all(&frame(&json!({"type": "hello", "version": 99})))
        .unwrap();
    let got = frames(&read_until_eof(&mut old, Duration::from_secs(5)));
    assert_eq!(
        error_code(&got).as_deref(),
        Some("unsupported_version"),
        "{got:?}"
    );

    // Through all of it the good client kept its lease and is served.
    good.ping().unwrap();
    let status = good.status().unwrap();
    assert_eq!(status.leases.len(), 1);
    assert_eq!(status.leases[0].id, lease.id());
    assert_eq!(status.daemon.sessions, 1, "only the good session is left");
}

#[test]
fn a_uid_that_is_not_allowed_is_refused() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test drops to another uid and must run as root (as CI does)"
    );
    let daemon = Daemon::start_with("16GiB", "socket_mode = \"0666\"\n");
    // A child process that drops to `nobody` before connecting.
    let out = daemon
        .gpudctl_command(&["status"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refused the session") && stderr.contains("uid 65534"),
        "{stderr}"
    );
    // Root still gets in, and the refused session left nothing behind.
    let status = daemon.client().status().unwrap();
    assert_eq!(status.daemon.sessions, 1);
    // An allowed uid (by config) gets in.
    let allowed = Daemon::start_with(
        "16GiB",
        "socket_mode = \"0666\"\n[access]\nallowed_uids = [65534]\n",
    );
    let out = allowed
        .gpudctl_command(&["status"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // But it is not an administrator.
    let out = allowed
        .gpudctl_command(&["drain", "0"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs root"));
}

/// A well-behaved client speaking the protocol on one blocking socket in the calling thread,
/// so that its round trip measures the daemon and not the scheduling of client threads.
struct Pinger {
    stream: UnixStream,
    next: u64,
}

impl Pinger {
    fn connect(socket: &std::path::Path) -> Self {
        let mut stream = UnixStream::connect(socket).unwrap();
        stream
            .write_all(&frame(&json!({"type": "hello", "version": 1})))
            .unwrap();
        let mut p = Self { stream, next: 1 };
        assert_eq!(p.read()["type"], "welcome");
        p
    }

    fn read(&mut self) -> serde_json::Value {
        let mut len = [0u8; 4];
        std::io::Read::read_exact(&mut self.stream, &mut len).unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        std::io::Read::read_exact(&mut self.stream, &mut body).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    fn ping(&mut self) {
        self.next += 1;
        let id = self.next;
        self.stream
            .write_all(&frame(&json!({"type": "request", "id": id, "op": "ping"})))
            .unwrap();
        let reply = self.read();
        assert_eq!(reply["id"], id);
    }
}

/// The first frame a connection receives (with its length prefix), or nothing.
fn read_first_frame(c: &mut UnixStream) -> Vec<u8> {
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut len = [0u8; 4];
    if std::io::Read::read_exact(c, &mut len).is_err() {
        return Vec::new();
    }
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    if std::io::Read::read_exact(c, &mut body).is_err() {
        return Vec::new();
    }
    let mut out = len.to_vec();
    out.extend(body);
    out
}

/// Median ping round trip over `n` pings.
fn ping_p50(client: &mut Pinger, n: usize) -> Duration {
    let mut samples: Vec<Duration> = (0..n)
        .map(|_| {
            let t = std::time::Instant::now();
            client.ping();
            t.elapsed()
        })
        .collect();
    samples.sort();
    samples[n / 2]
}

/// The client's p50 round trip without and with `attack` running on another thread, in
/// alternating rounds (the attack paused and resumed), each side's best round: load from other
/// programs comes and goes on this machine, the attack's effect does not.
fn compare<F: Fn() + Send + 'static>(
    attack: F,
    mut measure: impl FnMut() -> Duration,
) -> (Duration, Duration) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let active = std::sync::Arc::new(AtomicBool::new(false));
    let (s, a) = (stop.clone(), active.clone());
    let t = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            if a.load(Ordering::Relaxed) {
                attack();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    let (mut quiet, mut attacked) = (Duration::MAX, Duration::MAX);
    for _ in 0..4 {
        active.store(false, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        quiet = quiet.min(measure());
        active.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        attacked = attacked.min(measure());
    }
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    (quiet, attacked)
}

#[test]
fn a_well_behaved_client_is_served_through_hostile_clients() {
    // Timing: not while the chaos tests load the machine.
    let _alone = gpud_tests::exclusive();
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test drops to another uid and must run as root (as CI does)"
    );
    let daemon = Daemon::start_logging(
        "16GiB",
        "socket_mode = \"0666\"\n[limits]\nmax_sessions = 64\nrequests_per_second = 2000\n",
        "warn",
    );
    let good = daemon.client();
    let _lease = good
        .acquire(&LeaseRequest::new().vram(1 << 30).compute())
        .unwrap();
    let n = 500;
    let socket = daemon.socket.clone();
    let mut pinger = Pinger::connect(&socket);
    let mut report: Vec<(&str, (Duration, Duration))> = Vec::new();
    let mut measure = || ping_p50(&mut pinger, n);

    // Garbage bytes, new connection each time.
    let s = socket.clone();
    report.push((
        "garbage bytes",
        compare(
            move || {
                if let Ok(mut c) = UnixStream::connect(&s) {
                    let _ = c.write_all(&[0, 0, 0, 5, 0xff, 0xfe, 0xfd, 0xfc, 0xfb]);
                    let _ = read_until_eof(&mut c, Duration::from_secs(1));
                }
                std::thread::sleep(Duration::from_millis(2));
            },
            &mut measure,
        ),
    ));

    // A 4 GiB length prefix after a valid hello.
    let s = socket.clone();
    report.push((
        "4 GiB length prefix",
        compare(
            move || {
                if let Ok(mut c) = UnixStream::connect(&s) {
                    let _ = c.write_all(&frame(&json!({"type": "hello", "version": 1})));
                    let _ = c.write_all(&u32::MAX.to_be_bytes());
                    let got = frames(&read_until_eof(&mut c, Duration::from_secs(1)));
                    assert_eq!(error_code(&got).as_deref(), Some("frame_too_large"));
                }
                std::thread::sleep(Duration::from_millis(2));
            },
            &mut measure,
        ),
    ));

    // Writers that send one byte a second (a frame that never completes).
    let slow: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    let slow = std::sync::Arc::new(std::sync::Mutex::new(slow));
    let writers = slow.clone();
    report.push((
        "8 writers at one byte a second",
        compare(
            move || {
                for c in writers.lock().unwrap().iter_mut() {
                    let _ = c.write_all(&[0]);
                }
                std::thread::sleep(Duration::from_millis(1000));
            },
            &mut measure,
        ),
    ));
    drop(slow);

    // A request flood: pipelined pings as fast as the socket takes them, replies drained.
    let s = socket.clone();
    let flood = UnixStream::connect(&s).unwrap();
    let mut reader = flood.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while std::io::Read::read(&mut reader, &mut buf).is_ok_and(|n| n > 0) {}
    });
    let flood = std::sync::Arc::new(std::sync::Mutex::new(flood));
    flood
        .lock()
        .unwrap()
        .write_all(&frame(&json!({"type": "hello", "version": 1})))
        .unwrap();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
    let (f, ids) = (flood.clone(), next.clone());
    report.push((
        "request flood",
        compare(
            move || {
                let mut batch = Vec::new();
                for _ in 0..64 {
                    let id = ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    batch.extend(frame(&json!({"type": "request", "id": id, "op": "ping"})));
                }
                let _ = f.lock().unwrap().write_all(&batch);
            },
            &mut measure,
        ),
    ));
    let flooded = next.load(std::sync::atomic::Ordering::Relaxed);
    drop(flood);

    // A connection flood past the session limit: 100 connections opened and held a moment,
    // over and over.
    let s = socket.clone();
    let refusals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let seen = refusals.clone();
    report.push((
        "100 connections past a limit of 64",
        compare(
            move || {
                let mut held = Vec::new();
                let mut refused = 0;
                for _ in 0..100 {
                    let Ok(mut c) = UnixStream::connect(&s) else {
                        continue;
                    };
                    // A refused connection may be closed before the hello is written.
                    let _ = c.write_all(&frame(&json!({"type": "hello", "version": 1})));
                    let got = frames(&read_first_frame(&mut c));
                    if error_code(&got).as_deref() == Some("limit_exceeded") {
                        refused += 1;
                    }
                    held.push(c);
                }
                seen.fetch_min(refused, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(30));
            },
            &mut measure,
        ),
    ));
    let refused = refusals.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        refused > 100 - 64 && refused != usize::MAX,
        "only {refused} of 100 connections refused past a limit of 64"
    );

    // Wrong protocol version, over and over.
    let s = socket.clone();
    report.push((
        "wrong protocol version",
        compare(
            move || {
                if let Ok(mut c) = UnixStream::connect(&s) {
                    let _ = c.write_all(&frame(&json!({"type": "hello", "version": 0})));
                    let _ = read_until_eof(&mut c, Duration::from_secs(1));
                }
                std::thread::sleep(Duration::from_millis(2));
            },
            &mut measure,
        ),
    ));

    // A uid that is not allowed, over and over (a real child process each time).
    let ctl = gpud_tests::bin("gpudctl");
    let s = socket.clone();
    report.push((
        "disallowed uid",
        compare(
            move || {
                let out = std::process::Command::new(&ctl)
                    .args(["--socket"])
                    .arg(&s)
                    .arg("status")
                    .uid(65534)
                    .gid(65534)
                    .output()
                    .unwrap();
                assert!(!out.status.success());
            },
            &mut measure,
        ),
    ));

    println!(
        "well-behaved client's ping p50, without and with each attack (best of four alternating rounds) (request flood sent {flooded} pings, {refused} connections refused):"
    );
    for (what, (before, during)) in &report {
        println!(
            "  {what:<36} {:>8.1} µs -> {:>8.1} µs  ({:.2}x)",
            before.as_secs_f64() * 1e6,
            during.as_secs_f64() * 1e6,
            during.as_secs_f64() / before.as_secs_f64()
        );
    }
    // The round trips above are shown, not judged: a timed assertion here failed on a loaded
    // machine. gpud-bench-hostile holds the latency target (BENCHMARKS.md); this test holds
    // that every abuse was refused or closed and the well-behaved client was served through
    // all of them (each of its pings above got its answer).
    good.ping().unwrap();
}

/// A session that asks for status over and over and never reads is closed at its byte budget,
/// and its connection with it: it once stayed open, its task blocked writing to a client that
/// did not read, for as long as the client kept it.
#[test]
fn a_client_that_asks_and_never_reads_is_cut_off() {
    use std::os::fd::AsFd;
    let daemon = Daemon::start_with(
        "16GiB",
        "[limits]\nsession_buffer = \"64KiB\"\nmax_leases_per_session = 4096\n",
    );
    let holder = daemon.client();
    let _leases: Vec<_> = (0..2000)
        .map(|i| {
            holder
                .acquire(
                    &LeaseRequest::new()
                        .vram(1 << 20)
                        .label(format!("{i:0>200}")),
                )
                .unwrap()
        })
        .collect();
    let mut greedy = UnixStream::connect(&daemon.socket).unwrap();
    greedy
        .write_all(&frame(&json!({"type": "hello", "version": 1})))
        .unwrap();
    let mut asks = Vec::new();
    for id in 0..64 {
        asks.extend(frame(&json!({"type": "request", "id": id, "op": "status"})));
    }
    greedy.write_all(&asks).unwrap();
    // Without reading a byte: gpud hangs up.
    let mut fds = [nix::poll::PollFd::new(
        greedy.as_fd(),
        nix::poll::PollFlags::from_bits_retain(libc::POLLRDHUP),
    )];
    let hung_up = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(10_000u16)).unwrap();
    assert_eq!(
        hung_up, 1,
        "gpud still holds the connection of a session it closed"
    );
    assert!(
        gpud_tests::wait_until(Duration::from_secs(5), || holder
            .status()
            .is_ok_and(|s| s.daemon.sessions == 1)),
        "the greedy session is gone"
    );
    assert!(daemon.log().contains("does not read"), "{}", daemon.log());
}
