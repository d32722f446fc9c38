//! Lease latency against a flock baseline, measured in one run.
//!
//! - Uncontended acquire+release round trip through a real daemon, against open+flock+close
//!   (the way bellperson's GPU lock works).
//! - Contended handoff: from one holder's release to the next holder's grant, with N clients
//!   waiting, against N threads blocked in flock on the same file.
//!
//! - The floor under both on this machine: one round trip between two processes over a Unix
//!   socket pair, nothing else (two wake-ups of a sleeping process; on a virtual machine with
//!   idle vCPUs that alone can cost tens of µs and varies from hour to hour).
//!
//! Build release binaries first: `cargo build --release --workspace --bins`, then run
//! `target/release/gpud-bench-lease [--iterations N] [--waiters N] [--json]`.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use gpud_bench::latency::{self, kernel_round_trip};
use gpud_bench::stats::{Summary, summarize};
use gpud_client::{Client, LeaseRequest};
use gpud_tests::Daemon;
use nix::fcntl::{Flock, FlockArg};

struct Options {
    iterations: usize,
    waiters: usize,
    json: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        iterations: 20_000,
        waiters: 64,
        json: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iterations" => o.iterations = args.next().context("--iterations N")?.parse()?,
            "--waiters" => o.waiters = args.next().context("--waiters N")?.parse()?,
            "--json" => o.json = true,
            latency::ECHO_ARG => {
                latency::echo()?;
                std::process::exit(0);
            }
            "--help" | "-h" => {
                println!("gpud-bench-lease [--iterations N] [--waiters N] [--json]");
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?} (try --help)"),
        }
    }
    anyhow::ensure!(
        o.iterations >= 100 && o.waiters >= 2,
        "need --iterations >= 100 and --waiters >= 2"
    );
    Ok(o)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// One client pinging: the floor of any request.
fn gpud_ping(daemon: &Daemon, n: usize) -> Result<Summary> {
    runtime()?.block_on(async {
        let client = Client::connect(&daemon.socket).await?;
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + n / 10 {
            let t = Instant::now();
            client.ping().await?;
            if i >= n / 10 {
                samples.push(t.elapsed());
            }
        }
        Ok(summarize(&mut samples))
    })
}

/// The same ping from a bare blocking socket (no client library): what the kernel and the
/// daemon cost alone.
fn raw_ping(daemon: &Daemon, n: usize) -> Result<Summary> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(&daemon.socket)?;
    let frame = |v: serde_json::Value| {
        let body = serde_json::to_vec(&v).unwrap_or_default();
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend(body);
        out
    };
    let read_frame = |s: &mut std::os::unix::net::UnixStream| -> Result<()> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body)?;
        Ok(())
    };
    s.write_all(&frame(serde_json::json!({"type": "hello", "version": 1})))?;
    read_frame(&mut s)?;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let request = frame(serde_json::json!({"type": "request", "id": i, "op": "ping"}));
        let t = Instant::now();
        s.write_all(&request)?;
        read_frame(&mut s)?;
        if i >= n / 10 {
            samples.push(t.elapsed());
        }
    }
    Ok(summarize(&mut samples))
}

/// One client acquiring and releasing a compute lease back to back.
fn gpud_round_trip(daemon: &Daemon, n: usize) -> Result<Summary> {
    runtime()?.block_on(async {
        let client = Client::connect(&daemon.socket).await?;
        let request = LeaseRequest::new().vram(1 << 20).compute();
        for _ in 0..n / 10 {
            client.acquire(&request).await?.release().await?;
        }
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            client.acquire(&request).await?.release().await?;
            samples.push(t.elapsed());
        }
        Ok(summarize(&mut samples))
    })
}

/// The guard's normal path: acquire, then drop the lease (the release is sent, not awaited;
/// the daemon applies it before the next acquire of the same session).
fn gpud_round_trip_pipelined(daemon: &Daemon, n: usize) -> Result<Summary> {
    runtime()?.block_on(async {
        let client = Client::connect(&daemon.socket).await?;
        let request = LeaseRequest::new().vram(1 << 20).compute();
        let mut samples = Vec::with_capacity(n);
        for i in 0..n + n / 10 {
            let t = Instant::now();
            drop(client.acquire(&request).await?);
            if i >= n / 10 {
                samples.push(t.elapsed());
            }
        }
        // Every release was applied: the last acquire was granted, so the one before was freed.
        client.ping().await?;
        Ok(summarize(&mut samples))
    })
}

fn flock_round_trip(path: &std::path::Path, n: usize) -> Result<Summary> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t = Instant::now();
        let file = File::create(path)?;
        let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
        drop(lock);
        if i >= n / 10 {
            samples.push(t.elapsed());
        }
    }
    Ok(summarize(&mut samples))
}

/// Shared clock for handoffs: nanoseconds since `epoch` of the last release.
struct Handoff {
    epoch: Instant,
    last_release: AtomicU64,
    /// Which waiter released last: a waiter that re-takes its own lock is not a handoff.
    last_releaser: AtomicU64,
    grants: AtomicU64,
    target: u64,
    done: AtomicBool,
    /// Grants that went to another waiter than the last releaser.
    passed_on: AtomicU64,
    /// A releaser waits for someone else's grant before asking again (a worker doing its CPU
    /// tail); otherwise every waiter asks again at once (free for all).
    forced: bool,
    samples: Mutex<Vec<Duration>>,
    /// Wakes a paused releaser when the next grant happens.
    next_grant: (Mutex<()>, Condvar),
}

impl Handoff {
    fn new(target: u64, forced: bool) -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            last_release: AtomicU64::new(0),
            last_releaser: AtomicU64::new(u64::MAX),
            grants: AtomicU64::new(0),
            target,
            done: AtomicBool::new(false),
            passed_on: AtomicU64::new(0),
            forced,
            samples: Mutex::new(Vec::new()),
            next_grant: (Mutex::new(()), Condvar::new()),
        })
    }
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    /// Called right after a grant; returns false when enough grants were seen.
    fn granted(&self, me: u64, local: &mut Vec<Duration>) -> bool {
        let released = self.last_release.load(Ordering::Acquire);
        let releaser = self.last_releaser.load(Ordering::Acquire);
        let now = self.now();
        let n = self.grants.fetch_add(1, Ordering::AcqRel);
        if releaser != me && n < self.target {
            self.passed_on.fetch_add(1, Ordering::Relaxed);
        }
        // The first grants of the run have no release before them; a re-take is no handoff.
        if n >= 16 && released > 0 && n < self.target && releaser != me {
            local.push(Duration::from_nanos(now.saturating_sub(released)));
        }
        if n >= self.target {
            self.done.store(true, Ordering::Release);
        }
        if self.forced {
            let _guard = self.next_grant.0.lock().unwrap_or_else(|p| p.into_inner());
            self.next_grant.1.notify_all();
        }
        !self.done.load(Ordering::Acquire)
    }
    fn released(&self, me: u64) -> u64 {
        self.last_releaser.store(me, Ordering::Release);
        self.last_release.store(self.now(), Ordering::Release);
        self.grants.load(Ordering::Acquire)
    }

    /// In forced mode, blocks until another waiter has been granted.
    fn pause(&self, grants_at_release: u64) {
        if !self.forced {
            return;
        }
        let mut guard = self.next_grant.0.lock().unwrap_or_else(|p| p.into_inner());
        while !self.done.load(Ordering::Acquire)
            && self.grants.load(Ordering::Acquire) == grants_at_release
        {
            guard = self
                .next_grant
                .1
                .wait(guard)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Share of grants that went to another waiter than the last releaser.
    fn fairness(&self) -> f64 {
        self.passed_on.load(Ordering::Relaxed) as f64 / self.target as f64
    }
    fn finish(&self, local: Vec<Duration>) {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(local);
    }
}

/// Runs `waiters` threads of `body` (each given its number and the shared clock) and
/// summarizes the handoffs they saw.
fn handoff_run(
    waiters: usize,
    target: u64,
    forced: bool,
    body: impl Fn(u64, Arc<Handoff>) -> Result<()> + Send + Sync + Clone + 'static,
) -> Result<(Summary, f64)> {
    let h = Handoff::new(target, forced);
    let threads: Vec<_> = (0..waiters as u64)
        .map(|me| {
            let (h, body) = (h.clone(), body.clone());
            std::thread::spawn(move || body(me, h))
        })
        .collect();
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a waiter thread panicked"))??;
    }
    let mut samples = std::mem::take(&mut *h.samples.lock().unwrap_or_else(|p| p.into_inner()));
    if samples.is_empty() {
        samples.push(Duration::ZERO);
    }
    Ok((summarize(&mut samples), h.fairness()))
}

/// Waiters each with their own gpud session, taking the compute slot in turn.
fn gpud_handoff(
    daemon: &Daemon,
    waiters: usize,
    target: u64,
    forced: bool,
) -> Result<(Summary, f64)> {
    let socket = daemon.socket.clone();
    handoff_run(waiters, target, forced, move |me, h| {
        runtime()?.block_on(async {
            let client = Client::connect(&socket).await?;
            let request = LeaseRequest::new().compute();
            let mut local = Vec::new();
            loop {
                let lease = client.acquire(&request).await?;
                let go_on = h.granted(me, &mut local);
                let at = h.released(me);
                lease.release().await?;
                if !go_on {
                    break;
                }
                h.pause(at);
            }
            h.finish(local);
            Ok(())
        })
    })
}

/// Waiters each opening the lock file and blocking in flock, as bellperson's GPU lock does.
fn flock_handoff(
    path: &std::path::Path,
    waiters: usize,
    target: u64,
    forced: bool,
) -> Result<(Summary, f64)> {
    let path = path.to_path_buf();
    handoff_run(waiters, target, forced, move |me, h| {
        let mut local = Vec::new();
        loop {
            let file = File::create(&path)?;
            let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
            let go_on = h.granted(me, &mut local);
            let at = h.released(me);
            drop(lock);
            if !go_on {
                break;
            }
            h.pause(at);
        }
        h.finish(local);
        Ok(())
    })
}

fn main() -> Result<()> {
    let o = options()?;
    // Without the per-session rate limit, which would pace one client's tens of thousands
    // of requests a second.
    let daemon = latency::start_daemon("16GiB");
    let lock = daemon.dir.path().join("gpu.lock");
    let handoffs = (o.iterations / 2) as u64;

    let kernel = kernel_round_trip(o.iterations)?;
    let raw_ping = raw_ping(&daemon, o.iterations)?;
    let gpud_ping = gpud_ping(&daemon, o.iterations)?;
    let gpud_rt = gpud_round_trip(&daemon, o.iterations)?;
    let gpud_rt_drop = gpud_round_trip_pipelined(&daemon, o.iterations)?;
    let flock_rt = flock_round_trip(&lock, o.iterations)?;
    let (gpud_ho, _) = gpud_handoff(&daemon, o.waiters, handoffs, true)?;
    let (flock_ho, _) = flock_handoff(&lock, o.waiters, handoffs, true)?;
    // Free for all: every waiter asks again at once; who gets the next grant?
    let (_, gpud_fair) = gpud_handoff(&daemon, o.waiters, handoffs / 4, false)?;
    let (_, flock_fair) = flock_handoff(&lock, o.waiters, handoffs / 4, false)?;

    if o.json {
        let v = serde_json::json!({
            "iterations": o.iterations, "waiters": o.waiters,
            "kernel_round_trip": kernel,
            "ping": gpud_ping,
            "raw_socket_ping": raw_ping,
            "round_trip": { "gpud": gpud_rt, "gpud_guard_drop": gpud_rt_drop, "flock": flock_rt },
            "handoff": { "gpud": gpud_ho, "flock": flock_ho },
            "passed_on_share": { "gpud": gpud_fair, "flock": flock_fair },
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "lease latency, {} iterations, {} waiting clients for handoff",
        o.iterations, o.waiters
    );

    println!(
        "{:<42} {:>10} {:>10} {:>10}",
        "", "p50 µs", "p99 µs", "mean µs"
    );
    let row = |name: &str, s: &Summary| {
        println!(
            "{name:<42} {:>10.1} {:>10.1} {:>10.1}",
            s.p50_us, s.p99_us, s.mean_us
        )
    };
    row("kernel: round trip between two processes", &kernel);
    row("ping, bare socket (kernel + daemon only)", &raw_ping);
    row("gpud ping through the client library", &gpud_ping);
    row("gpud acquire + release (reply awaited)", &gpud_rt);
    row(
        "gpud acquire + guard drop (release pipelined)",
        &gpud_rt_drop,
    );
    row("flock open+lock+close (bellperson style)", &flock_rt);
    row("gpud handoff (release -> next grant)", &gpud_ho);
    row("flock handoff (unlock -> next lock)", &flock_ho);
    println!(
        "free for all (releaser asks again at once): grants passed to another waiter: gpud {:.1} %, flock {:.1} %",
        gpud_fair * 100.0,
        flock_fair * 100.0
    );
    println!(
        "ratios gpud/flock: round trip p50 {:.2}x, handoff p50 {:.2}x, handoff p99 {:.2}x",
        gpud_rt.p50_us / flock_rt.p50_us,
        gpud_ho.p50_us / flock_ho.p50_us,
        gpud_ho.p99_us / flock_ho.p99_us
    );
    println!(
        "above the kernel floor (p50): ping {:+.1} µs; acquire + release {:+.1} µs over its two round trips ({:.2}x the floor); handoff {:+.1} µs over its two process wake-ups",
        raw_ping.p50_us - kernel.p50_us,
        gpud_rt.p50_us - 2.0 * kernel.p50_us,
        gpud_rt.p50_us / (2.0 * kernel.p50_us),
        gpud_ho.p50_us - kernel.p50_us
    );
    println!(
        "targets: round trip p50 <= 30 µs: {}; handoff p99 <= 100 µs: {}; handoff p99 no worse than flock: {}",
        verdict(gpud_rt.p50_us <= 30.0),
        verdict(gpud_ho.p99_us <= 100.0),
        verdict(gpud_ho.p99_us <= flock_ho.p99_us)
    );
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}
