//! A well-behaved client's acquire+release round trip while hostile clients abuse the same
//! daemon, against the same client's round trip with the abuse paused, in one run; and the
//! daemon's memory (RSS) under each abuse.
//!
//! Abuses:
//! - status flood: sessions pipeline `status` on a host of 1000 labelled leases and never
//!   read (reconnecting whenever gpud closes them);
//! - critical-waiter flood: 16,384 critical requests wait behind a held compute slot;
//! - descriptor flood: another user (uid 65534) opens connections until gpud refuses them,
//!   and holds them;
//! - request flood: pipelined pings as fast as the socket takes them (replies read).
//!
//! Each case alternates rounds with and without the abuse (load from other programs comes and
//! goes; the abuse's effect does not) and keeps each side's best round. Target: the attacked
//! p99 within 2x of the quiet p99.
//!
//! Build release binaries first (`cargo build --release --workspace --bins`), run as root
//! (gpud lets root ask for the critical class):
//! `target/release/gpud-bench-hostile [--samples N] [--rounds N] [--json]`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use gpud_bench::stats::{Summary, summarize};
use gpud_client::LeaseRequest;
use gpud_client::blocking::Client;
use gpud_tests::{Daemon, frame};
use serde::Serialize;
use serde_json::json;

struct Options {
    samples: usize,
    rounds: usize,
    critical: usize,
    /// Run only the abuses whose names contain one of these words.
    only: Vec<String>,
    json: bool,
}

impl Options {
    fn wants(&self, abuse: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| abuse.contains(w.as_str()))
    }
}

fn options() -> Result<Options> {
    let mut o = Options {
        samples: 2000,
        rounds: 3,
        critical: 16_384,
        only: Vec::new(),
        json: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--samples" => o.samples = number(&mut args, "--samples")?,
            "--rounds" => o.rounds = number(&mut args, "--rounds")?,
            "--critical" => o.critical = number(&mut args, "--critical")?,
            "--json" => o.json = true,
            "--only" => o.only.push(
                args.next()
                    .context("--only status|critical|descriptor|request")?,
            ),
            "--hold-connections" => {
                let socket = PathBuf::from(args.next().context("--hold-connections SOCKET N")?);
                let n = number(&mut args, "--hold-connections SOCKET")?;
                hold_connections(&socket, n)?;
                std::process::exit(0);
            }
            "--help" | "-h" => {
                println!(
                    "gpud-bench-hostile [--samples N] [--rounds N] [--critical N] [--only WORD]... [--json]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    anyhow::ensure!(
        o.samples >= 100 && o.rounds >= 1 && o.critical >= 1,
        "need --samples >= 100, --rounds >= 1, --critical >= 1"
    );
    Ok(o)
}

fn number(args: &mut impl Iterator<Item = String>, name: &str) -> Result<usize> {
    args.next()
        .with_context(|| format!("{name} N"))?
        .parse()
        .with_context(|| format!("{name} takes a number"))
}

/// One abuse's result.
#[derive(Debug, Serialize)]
struct Case {
    abuse: String,
    quiet: Summary,
    attacked: Summary,
    /// attacked p99 / quiet p99.
    p99_ratio: f64,
    /// gpud's resident memory at the end of the abuse, MiB.
    rss_mib: f64,
    /// gpud's peak resident memory so far, MiB.
    peak_rss_mib: f64,
    /// What the abuse achieved (sessions closed, refused, waiters queued).
    note: String,
    /// Whether the 2x target applies: the request flood's flooder shares the machine's CPUs
    /// with gpud and the client, so its ratio says as much about the machine as about gpud.
    target: bool,
}

/// The well-behaved client: acquire 1 GiB, release, `n` times.
fn round_trips(client: &Client, n: usize) -> Result<Summary> {
    let request = LeaseRequest::new().vram(1 << 30).label("well-behaved");
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let lease = client.acquire(&request)?;
        lease.release()?;
        samples.push(t.elapsed());
    }
    Ok(summarize(&mut samples))
}

/// `(rss, peak)` of a process in MiB, from /proc.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The descriptor flood's process (run as another user): opens up to `n` sessions, says on
/// stdout how many gpud admitted, and holds them until stdin closes.
fn hold_connections(socket: &Path, n: usize) -> Result<()> {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)?;
    let mut held = Vec::new();
    let (mut admitted, mut refused) = (0, 0);
    for _ in 0..n {
        let Some(mut s) = raw_session(socket) else {
            refused += 1;
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut len = [0u8; 4];
        let mut body = Vec::new();
        let welcomed = s.read_exact(&mut len).is_ok() && {
            body.resize(u32::from_be_bytes(len) as usize, 0);
            s.read_exact(&mut body).is_ok()
                && serde_json::from_slice::<serde_json::Value>(&body)
                    .is_ok_and(|v| v["type"] == "welcome")
        };
        if welcomed {
            admitted += 1;
            held.push(s);
        } else {
            refused += 1;
        }
    }
    println!("{admitted} {refused}");
    std::io::stdout().flush()?;
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    Ok(())
}

/// The best (lowest p99) of `rounds` measurements.
fn best_of(o: &Options, client: &Client) -> Result<Summary> {
    let mut best = round_trips(client, o.samples)?;
    for _ in 1..o.rounds {
        let next = round_trips(client, o.samples)?;
        if next.p99_us < best.p99_us {
            best = next;
        }
    }
    Ok(best)
}

/// For abuses that take a while to set up: quiet rounds, the abuse set up, attacked rounds,
/// the abuse torn down (`setup`'s value dropped), quiet rounds again.
fn sustained<T>(
    o: &Options,
    client: &Client,
    progress: &str,
    setup: impl FnOnce() -> Result<T>,
) -> Result<(Summary, Summary, T)> {
    eprint!("{progress}: quiet");
    let before = best_of(o, client)?;
    eprint!(", setting up");
    let abuse = setup()?;
    eprint!(", attacked");
    let attacked = best_of(o, client)?;
    eprintln!();
    Ok((before, attacked, abuse))
}

/// An abuse that runs on its own thread while `active`, until `stop`.
struct Abuse {
    active: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Abuse {
    fn start(mut step: impl FnMut() + Send + 'static) -> Self {
        let active = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (active.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if a.load(Ordering::Relaxed) {
                    step();
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        Self {
            active,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, on: bool) {
        self.active.store(on, Ordering::Relaxed);
        // Let the abuse (or its absence) settle in.
        std::thread::sleep(Duration::from_millis(if on { 200 } else { 50 }));
    }
}

impl Drop for Abuse {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Alternating rounds with the abuse off and on; each side's best round (lowest p99).
fn compare(
    o: &Options,
    client: &Client,
    abuse: &Abuse,
    progress: &str,
) -> Result<(Summary, Summary)> {
    let mut best: (Option<Summary>, Option<Summary>) = (None, None);
    let better = |a: Option<Summary>, b: Summary| match a {
        Some(a) if a.p99_us <= b.p99_us => Some(a),
        _ => Some(b),
    };
    for round in 0..o.rounds {
        eprint!("\r{progress}: round {}/{}   ", round + 1, o.rounds);
        abuse.set(false);
        best.0 = better(best.0, round_trips(client, o.samples)?);
        abuse.set(true);
        best.1 = better(best.1, round_trips(client, o.samples)?);
    }
    abuse.set(false);
    eprintln!();
    Ok((best.0.context("no round")?, best.1.context("no round")?))
}

fn case(
    daemon: &Daemon,
    abuse: String,
    (quiet, attacked): (Summary, Summary),
    note: String,
) -> Case {
    let (rss, peak) = rss_mib(daemon.pid());
    Case {
        target: !abuse.starts_with("request flood"),
        abuse,
        p99_ratio: attacked.p99_us / quiet.p99_us,
        quiet,
        attacked,
        rss_mib: rss,
        peak_rss_mib: peak,
        note,
    }
}

/// A raw session that has said hello.
fn raw_session(socket: &Path) -> Option<UnixStream> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.write_all(&frame(&json!({"type": "hello", "version": 1})))
        .ok()?;
    Some(s)
}

/// Sessions that pipeline status requests and never read; a session gpud closes is opened
/// again. Counts the sessions gpud closed.
fn status_flood(socket: PathBuf, sessions: usize, closed: Arc<AtomicU64>) -> impl FnMut() + Send {
    let mut open: Vec<Option<UnixStream>> = (0..sessions).map(|_| None).collect();
    let mut batch = Vec::new();
    for id in 0..256u64 {
        batch.extend(frame(&json!({"type": "request", "id": id, "op": "status"})));
    }
    move || {
        for slot in open.iter_mut() {
            if slot.is_none() {
                *slot = raw_session(&socket);
                if let Some(s) = slot {
                    let _ = s.set_write_timeout(Some(Duration::from_millis(20)));
                }
            }
            let failed = slot.as_mut().is_some_and(|s| match s.write(&batch) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => {
                    e.kind() != std::io::ErrorKind::WouldBlock
                        && e.kind() != std::io::ErrorKind::TimedOut
                }
            });
            if failed {
                *slot = None;
                closed.fetch_add(1, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() -> Result<()> {
    let o = options()?;
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "run as root: the critical-waiter flood needs the critical class, which gpud gives root"
        );
    }
    // Enough descriptors for the descriptor flood (gpud raises its own).
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)?;
    let sessions_cap = 2048;
    // Room for the floods; the request rate stays limited (a bit above what the well-behaved
    // client itself sends, two requests per round trip).
    let config = format!(
        "socket_mode = \"0666\"\n[access]\nallowed_uids = [65534]\n\
         [limits]\nmax_sessions = {sessions_cap}\nmax_sessions_per_uid = {sessions_cap}\n\
         max_outstanding_requests = 65536\nmax_leases_per_session = 4096\n\
         max_entries_per_uid = {}\nrequests_per_second = 20000\n",
        o.critical + 8192
    );
    let daemon = Daemon::start_logging("2x16GiB", &config, "error");
    let client = daemon.client();
    let mut cases = Vec::new();

    // A host of 1000 labelled leases on device 1 (the client works on device 0 or 1).
    let holder = daemon.client();
    let held: Vec<_> = (0..1000)
        .map(|i| {
            holder.acquire(
                &LeaseRequest::new()
                    .vram(1 << 20)
                    .device(gpud_client::Placement::Index(1))
                    .label(format!("{i:0>200}")),
            )
        })
        .collect::<Result<_, _>>()?;

    // Status flood.
    if o.wants("status") {
        let closed = Arc::new(AtomicU64::new(0));
        let abuse = Abuse::start(status_flood(daemon.socket.clone(), 16, closed.clone()));
        let result = compare(&o, &client, &abuse, "status flood")?;
        drop(abuse);
        let status_bytes = serde_json::to_vec(&client.status()?)?.len();
        cases.push(case(
            &daemon,
            "status flood (16 sessions that never read)".into(),
            result,
            format!(
                "{} sessions closed by gpud; status {:.1} MiB",
                closed.load(Ordering::Relaxed),
                status_bytes as f64 / (1 << 20) as f64
            ),
        ));
    }
    drop(held);

    // Critical-waiter flood: a normal lease holds device 0's compute slot; critical compute
    // requests pile up behind it.
    if o.wants("critical") {
        let compute = daemon.client();
        let slot = compute.acquire(
            &LeaseRequest::new()
                .compute()
                .device(gpud_client::Placement::Index(0)),
        )?;
        let socket = daemon.socket.clone();
        let critical = o.critical;
        let status_client = daemon.client();
        let (quiet, attacked, (flooders, waiting)) =
            sustained(&o, &client, "critical-waiter flood", || {
                let mut flooders: Vec<UnixStream> = Vec::new();
                let per_session = 4096;
                let mut queued = 0;
                while queued < critical {
                    let mut s = raw_session(&socket).context("a flooding session")?;
                    let n = per_session.min(critical - queued);
                    let mut batch = Vec::new();
                    for id in 0..n {
                        batch.extend(frame(
                            &json!({"type": "request", "id": id, "op": {"acquire": {
                        "device": "0", "compute": true, "class": "critical"}}}),
                        ));
                    }
                    s.write_all(&batch)?;
                    queued += n;
                    flooders.push(s);
                }
                // Measured once they all wait.
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let w = status_client.status()?.waiters.len();
                    if w >= critical || Instant::now() > deadline {
                        break Ok((flooders, w));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })?;
        cases.push(case(
            &daemon,
            format!("critical-waiter flood ({} queued)", o.critical),
            (quiet, attacked),
            format!("{waiting} critical waiters seen in status"),
        ));
        drop(flooders);
        slot.release()?;
    }

    // Descriptor flood: another user opens sessions until gpud refuses, and holds them.
    if o.wants("descriptor") {
        let socket = daemon.socket.clone();
        let tries = sessions_cap + 256;
        let (quiet, attacked, (mut holder, counts)) =
            sustained(&o, &client, "descriptor flood", || {
                use std::os::unix::process::CommandExt;
                let mut child = std::process::Command::new(std::env::current_exe()?)
                    .arg("--hold-connections")
                    .arg(&socket)
                    .arg(tries.to_string())
                    .uid(65534)
                    .gid(65534)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .context("the descriptor flood's process (as uid 65534)")?;
                let mut line = String::new();
                let mut out = std::io::BufReader::new(child.stdout.take().context("stdout")?);
                std::io::BufRead::read_line(&mut out, &mut line)?;
                Ok((child, line.trim().to_string()))
            })?;
        let admin_in = Client::connect(&daemon.socket).is_ok();
        cases.push(case(
            &daemon,
            format!("descriptor flood (uid 65534, {tries} connections)"),
            (quiet, attacked),
            format!(
                "admitted/refused: {counts}; a new root session {}",
                if admin_in {
                    "still gets in"
                } else {
                    "was refused"
                }
            ),
        ));
        drop(holder.stdin.take());
        let _ = holder.wait();
    }

    // Request flood: pipelined pings, replies drained.
    if o.wants("request") {
        let flood = raw_session(&daemon.socket).context("a flooding session")?;
        let mut reader = flood.try_clone()?;
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while reader.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        let flood = Arc::new(Mutex::new(flood));
        let ids = Arc::new(AtomicU64::new(1));
        let (f, i) = (flood.clone(), ids.clone());
        let abuse = Abuse::start(move || {
            let mut batch = Vec::new();
            for _ in 0..64 {
                let id = i.fetch_add(1, Ordering::Relaxed);
                batch.extend(frame(&json!({"type": "request", "id": id, "op": "ping"})));
            }
            if let Ok(mut f) = f.lock() {
                let _ = f.write_all(&batch);
            }
        });
        let result = compare(&o, &client, &abuse, "request flood")?;
        drop(abuse);
        cases.push(case(
            &daemon,
            "request flood (pipelined pings)".into(),
            result,
            format!("{} pings sent", ids.load(Ordering::Relaxed)),
        ));
    }

    if o.json {
        println!("{}", serde_json::to_string_pretty(&cases)?);
        return Ok(());
    }
    println!(
        "{:<44} {:>9} {:>9} {:>11} {:>11} {:>7} {:>8} {:>9}",
        "abuse",
        "quiet p50",
        "quiet p99",
        "attack p50",
        "attack p99",
        "p99 x",
        "RSS MiB",
        "peak MiB"
    );
    for c in &cases {
        println!(
            "{:<44} {:>7.1}µs {:>7.1}µs {:>9.1}µs {:>9.1}µs {:>7.2} {:>8.1} {:>9.1}",
            c.abuse,
            c.quiet.p50_us,
            c.quiet.p99_us,
            c.attacked.p50_us,
            c.attacked.p99_us,
            c.p99_ratio,
            c.rss_mib,
            c.peak_rss_mib
        );
    }
    for c in &cases {
        println!("  {}: {}", c.abuse, c.note);
    }
    let worst = cases
        .iter()
        .filter(|c| c.target)
        .map(|c| c.p99_ratio)
        .fold(0.0, f64::max);
    println!(
        "worst p99 ratio of the status, critical-waiter and descriptor floods {worst:.2} (target <= 2.00): {}",
        if worst <= 2.0 { "met" } else { "NOT met" }
    );
    println!(
        "(the request flood is shown for reference: its flooder takes CPU from gpud and the client on the same machine)"
    );
    Ok(())
}
