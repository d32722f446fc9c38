//! The client libraries against each other, in one run against one daemon.
//!
//! For the kernel's round-trip floor and for each client (Rust's blocking `gpud-client`, C's
//! libgpud, Python's `gpud`, Go's `client/go`):
//!
//! - round trip: acquire 1 GiB of VRAM (no compute), release it and wait for the answer, on
//!   one connection with nothing else going on;
//! - handoff of the compute slot: two connections in one process (threads, goroutines). The
//!   holder waits until the daemon shows the other connection's acquire waiting, takes a
//!   timestamp and releases; the other's blocking acquire returns and takes a timestamp;
//!   handoff = the second timestamp − the first. The new holder does the same while the old
//!   one asks again, so the roles swap at every handoff.
//!
//! Every client runs as a program of its own (this binary with `--driver` for Rust,
//! `bench/clients/` for the others) against the same daemon, one after another, and prints
//! its raw samples as one JSON line; this program summarizes them all the same way. The whole
//! set runs `--passes` times (default 10), the order of the clients reversed in every other
//! pass and the floor at the start of each. Each client's `--iterations` and `--handoffs` are
//! split evenly over the passes, and its figures are every pass's samples together: the load
//! of a busy machine changes from second to second, and short alternating passes give every
//! client the same share of it (one pass's p50 moved by ±40 % on the development VM). Each
//! pass's summary, and the best pass, are in `--json`.
//!
//! Build first: `cargo build --release -p gpud -p gpud-c -p gpud-bench --bins` (the daemon
//! and libgpud are taken from beside this binary), then
//! `target/release/gpud-bench-clients [--iterations N] [--handoffs N] [--passes N]
//! [--only rust,c,python,go] [--json]`. C needs cc and pkg-config, Python python3 (3.9+), Go
//! the go tool; a client whose tools are missing is skipped with a message.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use gpud_bench::latency;
use gpud_bench::stats::{Summary, summarize};
use gpud_client::LeaseRequest;
use gpud_client::blocking::Client;

/// The VRAM of the round trip's lease.
const ROUND_TRIP_VRAM: u64 = 1 << 30;

/// How long a holder waits for the other connection's acquire to show in the queue.
const QUEUE_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    C,
    Python,
    Go,
}

const LANGS: [Lang; 4] = [Lang::Rust, Lang::C, Lang::Python, Lang::Go];

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::C => "c",
            Lang::Python => "python",
            Lang::Go => "go",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Lang::Rust => "Rust (gpud-client, blocking)",
            Lang::C => "C (libgpud)",
            Lang::Python => "Python (gpud)",
            Lang::Go => "Go (client/go)",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        LANGS
            .into_iter()
            .find(|l| l.name() == s)
            .with_context(|| format!("unknown client {s:?} (expected rust, c, python or go)"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    RoundTrip,
    Handoff,
}

impl Phase {
    /// The name drivers are given and answer with.
    fn arg(self) -> &'static str {
        match self {
            Phase::RoundTrip => "round-trip",
            Phase::Handoff => "handoff",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        match s {
            "round-trip" => Ok(Phase::RoundTrip),
            "handoff" => Ok(Phase::Handoff),
            other => bail!("unknown phase {other:?} (expected round-trip or handoff)"),
        }
    }
}

struct Options {
    iterations: usize,
    handoffs: usize,
    passes: usize,
    /// The clients to run, in the first pass's order.
    only: Vec<Lang>,
    /// Whether `--only` chose them: then a client that cannot run is an error.
    chosen: bool,
    json: bool,
    repo: PathBuf,
}

const USAGE: &str = "\
gpud-bench-clients [--iterations N] [--handoffs N] [--passes N] [--only rust,c,python,go]
                   [--json] [--repo DIR]

  --iterations N   acquire + release round trips per client, and kernel floor round trips
                   (default 10000)
  --handoffs N     compute-slot handoffs per client (default 2000)
  --passes N       run the set N times in alternating order, the counts split over the
                   passes and pooled (default 10)
  --only LIST      these clients only (a client that cannot run is then an error)
  --json           the figures as JSON (each pass, pooled, the best pass)
  --repo DIR       the repository holding bench/clients (default: where this was built)";

fn options(mut args: impl Iterator<Item = String>) -> Result<Options> {
    let mut o = Options {
        iterations: 10_000,
        handoffs: 2_000,
        passes: 10,
        only: LANGS.to_vec(),
        chosen: false,
        json: false,
        repo: Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    let mut only = Vec::new();
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--iterations" => o.iterations = value("--iterations")?.parse()?,
            "--handoffs" => o.handoffs = value("--handoffs")?.parse()?,
            "--passes" => o.passes = value("--passes")?.parse()?,
            "--only" => {
                for name in value("--only")?.split(',').filter(|s| !s.is_empty()) {
                    let lang = Lang::parse(name)?;
                    if !only.contains(&lang) {
                        only.push(lang);
                    }
                }
            }
            "--json" => o.json = true,
            "--repo" => o.repo = value("--repo")?.into(),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    if !only.is_empty() {
        o.only = only;
        o.chosen = true;
    }
    ensure!(
        o.iterations >= 1 && o.handoffs >= 1 && o.passes >= 1,
        "--iterations, --handoffs and --passes must be at least 1"
    );
    o.repo = o
        .repo
        .canonicalize()
        .with_context(|| format!("the repository {}", o.repo.display()))?;
    ensure!(
        o.repo.join("bench/clients").is_dir(),
        "{} holds no bench/clients (give the repository with --repo DIR)",
        o.repo.display()
    );
    Ok(o)
}

// ---- The Rust driver: this binary run as `--driver SOCKET PHASE COUNT`. -------------------

/// One line of a driver's output.
#[derive(serde::Serialize, serde::Deserialize)]
struct DriverOutput {
    client: String,
    phase: String,
    samples_ns: Vec<u64>,
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// `n` acquire + release round trips, after `n / 10` not counted.
fn rust_round_trip(socket: &Path, n: usize) -> Result<Vec<u64>> {
    let client = Client::connect(socket)?;
    let request = LeaseRequest::new().vram(ROUND_TRIP_VRAM);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t = Instant::now();
        client.acquire(&request)?.release()?;
        if i >= n / 10 {
            samples.push(nanos(t.elapsed()));
        }
    }
    Ok(samples)
}

/// What the two connections of the handoff share.
struct Handoffs {
    epoch: Instant,
    /// When the holder last released, ns since `epoch`.
    last_release: AtomicU64,
    /// Grants so far (only the holder counts).
    grants: AtomicU64,
    done: AtomicBool,
}

impl Handoffs {
    fn now(&self) -> u64 {
        nanos(self.epoch.elapsed())
    }
}

/// `m` handoffs between two connections, after `m / 10` not counted.
fn rust_handoff(socket: &Path, m: usize) -> Result<Vec<u64>> {
    let warmup = (m / 10) as u64;
    let last = warmup + m as u64;
    let shared = Arc::new(Handoffs {
        epoch: Instant::now(),
        last_release: AtomicU64::new(0),
        grants: AtomicU64::new(0),
        done: AtomicBool::new(false),
    });
    let clients = [Client::connect(socket)?, Client::connect(socket)?];
    let threads: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let s = shared.clone();
            std::thread::spawn(move || -> Result<Vec<u64>> {
                let request = LeaseRequest::new().compute();
                let mut local = Vec::new();
                loop {
                    let lease = client.acquire(&request)?;
                    let now = s.now();
                    if s.done.load(Ordering::Acquire) {
                        lease.release()?;
                        return Ok(local);
                    }
                    // The first grant follows no release; then `warmup` not counted.
                    let n = s.grants.fetch_add(1, Ordering::AcqRel);
                    if n > warmup {
                        local.push(now.saturating_sub(s.last_release.load(Ordering::Acquire)));
                    }
                    if n == last {
                        s.done.store(true, Ordering::Release);
                        lease.release()?;
                        return Ok(local);
                    }
                    // Release only once the other connection waits for the slot.
                    let since = Instant::now();
                    while client.status()?.waiters.is_empty() {
                        ensure!(
                            since.elapsed() < QUEUE_WAIT,
                            "the other connection's acquire never showed in the queue"
                        );
                    }
                    s.last_release.store(s.now(), Ordering::Release);
                    lease.release()?;
                }
            })
        })
        .collect();
    let mut samples = Vec::with_capacity(m);
    for t in threads {
        samples.extend(
            t.join()
                .map_err(|_| anyhow::anyhow!("a handoff thread panicked"))??,
        );
    }
    Ok(samples)
}

fn driver(mut args: impl Iterator<Item = String>) -> Result<()> {
    let usage = "gpud-bench-clients --driver SOCKET round-trip|handoff COUNT";
    let socket = PathBuf::from(args.next().context(usage)?);
    let phase = Phase::parse(&args.next().context(usage)?)?;
    let count: usize = args.next().context(usage)?.parse()?;
    let samples_ns = match phase {
        Phase::RoundTrip => rust_round_trip(&socket, count)?,
        Phase::Handoff => rust_handoff(&socket, count)?,
    };
    let out = DriverOutput {
        client: Lang::Rust.name().into(),
        phase: phase.arg().into(),
        samples_ns,
    };
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

// ---- Preparing the drivers. ---------------------------------------------------------------

/// How to start one client's driver.
struct Driver {
    lang: Lang,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl Driver {
    fn command(&self, socket: &Path, phase: Phase, count: usize) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args)
            .arg(socket)
            .arg(phase.arg())
            .arg(count.to_string())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        c
    }
}

/// A program on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs a preparation step; its output is shown when it fails.
fn step(what: &str, command: &mut Command) -> Result<String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("{what}: starting {command:?}"))?;
    ensure!(
        out.status.success(),
        "{what} failed ({}): {command:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The newest modification time of the files under `dir`.
fn newest(dir: &Path) -> SystemTime {
    let mut t = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let m = if path.is_dir() {
            newest(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        t = t.max(m);
    }
    t
}

/// A driver ready to run, or why the client is skipped (a tool or library it needs is not
/// there); a step that fails with its tools present is an error.
type Prepared = Result<Driver, String>;

fn prepare(lang: Lang, repo: &Path, work: &Path) -> Result<Prepared> {
    match lang {
        Lang::Rust => Ok(Ok(Driver {
            lang,
            program: std::env::current_exe()?,
            args: vec!["--driver".into()],
            env: Vec::new(),
        })),
        Lang::C => prepare_c(repo, work),
        Lang::Python => prepare_python(repo),
        Lang::Go => prepare_go(repo, work),
    }
}

/// libgpud from beside this binary, staged by scripts/install-libgpud.sh into a prefix of its
/// own, and bench/clients/bench.c built against it with pkg-config.
fn prepare_c(repo: &Path, work: &Path) -> Result<Prepared> {
    if which("cc").is_none() {
        return Ok(Err(
            "cc not found on PATH (install a C compiler, e.g. build-essential)".into(),
        ));
    }
    if which("pkg-config").is_none() {
        return Ok(Err(
            "pkg-config not found on PATH (install pkg-config)".into()
        ));
    }
    let lib_dir = gpud_tests::bin_dir();
    for lib in ["libgpud.so", "libgpud.a"] {
        if !lib_dir.join(lib).is_file() {
            return Ok(Err(format!(
                "{} is missing (build libgpud: cargo build -p gpud-c, with --release for a release build)",
                lib_dir.join(lib).display()
            )));
        }
    }
    let built = std::fs::metadata(lib_dir.join("libgpud.so")).and_then(|m| m.modified())?;
    let sources = ["client/c/src", "client/src", "proto/src"]
        .iter()
        .map(|d| newest(&repo.join(d)))
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    if built < sources {
        eprintln!(
            "warning: {} is older than its sources (cargo build -p gpud-c); measuring it anyway",
            lib_dir.join("libgpud.so").display()
        );
    }
    let prefix = work.join("libgpud");
    eprintln!(
        "C: staging libgpud from {} into {}",
        lib_dir.display(),
        prefix.display()
    );
    step(
        "scripts/install-libgpud.sh",
        Command::new("bash")
            .arg(repo.join("scripts/install-libgpud.sh"))
            .arg("--lib-dir")
            .arg(&lib_dir)
            .arg(&prefix),
    )?;
    let program = work.join("bench-c");
    let source = repo.join("bench/clients/bench.c");
    eprintln!("C: building {}", source.display());
    let pkg_config_path = prefix.join("lib/pkgconfig");
    step(
        "building bench/clients/bench.c",
        Command::new("sh")
            .arg("-c")
            .arg(
                "cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -pthread -o \"$1\" \"$2\" \
                 $(pkg-config --cflags --libs gpud)",
            )
            .arg("sh")
            .arg(&program)
            .arg(&source)
            .env("PKG_CONFIG_PATH", &pkg_config_path),
    )?;
    Ok(Ok(Driver {
        lang: Lang::C,
        program,
        args: Vec::new(),
        env: vec![("LD_LIBRARY_PATH".into(), prefix.join("lib").into())],
    }))
}

/// bench/clients/bench.py under python3, with client/python/src first on the path.
fn prepare_python(repo: &Path) -> Result<Prepared> {
    let Some(python) = which("python3") else {
        return Ok(Err(
            "python3 not found on PATH (install python3, 3.9 or newer)".into(),
        ));
    };
    let out = Command::new(&python)
        .args([
            "-c",
            "import sys; print(sys.version.split()[0]); sys.exit(sys.version_info < (3, 9))",
        ])
        .output()
        .context("running python3")?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() {
        return Ok(Err(format!(
            "python3 is {version}; the Python client needs 3.9 or newer"
        )));
    }
    eprintln!("Python: python3 {version}, client/python/src");
    Ok(Ok(Driver {
        lang: Lang::Python,
        program: python,
        args: vec![repo.join("bench/clients/bench.py").into()],
        env: vec![
            ("PYTHONPATH".into(), repo.join("client/python/src").into()),
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ],
    }))
}

/// bench/clients/bench_go built with the go tool, offline (its module replaces the client's
/// with client/go).
fn prepare_go(repo: &Path, work: &Path) -> Result<Prepared> {
    let Some(go) = which("go") else {
        return Ok(Err(
            "go not found on PATH (install Go 1.19 or newer, e.g. golang-go)".into(),
        ));
    };
    let program = work.join("bench-go");
    let dir = repo.join("bench/clients/bench_go");
    eprintln!("Go: building {}", dir.display());
    let mut build = Command::new(go);
    build
        .arg("build")
        .arg("-o")
        .arg(&program)
        .arg(".")
        .current_dir(&dir)
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local");
    // Where scripts/test.sh keeps the Go build cache, unless one is set.
    if std::env::var_os("GOCACHE").is_none() {
        let target = gpud_tests::bin_dir();
        let target = target.parent().unwrap_or(&target);
        build.env("GOCACHE", target.join("go-cache"));
    }
    step("building bench/clients/bench_go", &mut build)?;
    Ok(Ok(Driver {
        lang: Lang::Go,
        program,
        args: Vec::new(),
        env: Vec::new(),
    }))
}

// ---- Running and reporting. ---------------------------------------------------------------

/// Runs one driver for one phase; its samples.
fn measure(driver: &Driver, socket: &Path, phase: Phase, count: usize) -> Result<Vec<Duration>> {
    let name = driver.lang.name();
    let out = driver
        .command(socket, phase, count)
        .output()
        .with_context(|| format!("starting the {name} driver"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "the {name} driver failed ({}) in {}:\n{stdout}{}",
        out.status,
        phase.arg(),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .with_context(|| format!("the {name} driver printed nothing"))?;
    let result: DriverOutput = serde_json::from_str(line)
        .with_context(|| format!("the {name} driver's output: {line:.200}"))?;
    ensure!(
        result.client == name && result.phase == phase.arg(),
        "the {name} driver answered for {} {}",
        result.client,
        result.phase
    );
    ensure!(
        result.samples_ns.len() == count,
        "the {name} driver gave {} samples, not {count}",
        result.samples_ns.len()
    );
    Ok(result
        .samples_ns
        .into_iter()
        .map(Duration::from_nanos)
        .collect())
}

/// One figure over the passes: every pass's samples together, and each pass alone.
#[derive(serde::Serialize)]
struct Figure {
    /// Every pass's samples in one summary: the figure the table shows.
    pooled: Summary,
    /// Each pass's own.
    passes: Vec<Summary>,
    /// The lowest p50 of a pass, and that pass's number (from 1).
    best_pass_p50_us: f64,
    best_pass: usize,
}

impl Figure {
    fn of(passes: Vec<Vec<Duration>>) -> Option<Self> {
        let mut all: Vec<Duration> = passes.iter().flatten().copied().collect();
        if all.is_empty() {
            return None;
        }
        let pooled = summarize(&mut all);
        let passes: Vec<Summary> = passes
            .into_iter()
            .filter(|p| !p.is_empty())
            .map(|mut p| summarize(&mut p))
            .collect();
        let (i, best) = passes
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.p50_us.total_cmp(&b.1.p50_us))?;
        Some(Self {
            pooled,
            best_pass_p50_us: best.p50_us,
            best_pass: i + 1,
            passes,
        })
    }

    /// The lowest and highest p50 of a pass.
    fn pass_range(&self) -> (f64, f64) {
        self.passes
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), s| {
                (lo.min(s.p50_us), hi.max(s.p50_us))
            })
    }
}

/// A figure against Rust's: pooled p50 over pooled p50, and best pass over best pass.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Ratio {
    p50: f64,
    best_pass_p50: f64,
}

#[derive(serde::Serialize)]
struct ClientReport {
    client: &'static str,
    label: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    round_trip: Option<Figure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    handoff: Option<Figure>,
    /// Why the client was not measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    round_trip_vs_rust: Option<Ratio>,
    #[serde(skip_serializing_if = "Option::is_none")]
    handoff_vs_rust: Option<Ratio>,
}

/// `total` split over `passes`: pass `pass` (from 0) gets its share, the remainder going to
/// the first passes.
fn share(total: usize, passes: usize, pass: usize) -> usize {
    total / passes + usize::from(pass < total % passes)
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    match args.peek().map(String::as_str) {
        Some(latency::ECHO_ARG) => return latency::echo(),
        Some("--driver") => {
            args.next();
            return driver(args);
        }
        _ => {}
    }
    let o = options(args)?;
    let work = tempfile::Builder::new()
        .prefix("gpud-bench-clients")
        .tempdir()?;

    let mut drivers = Vec::new();
    let mut skipped = Vec::new();
    for &lang in &o.only {
        match prepare(lang, &o.repo, work.path())? {
            Ok(d) => drivers.push(d),
            Err(why) if o.chosen => bail!("{} cannot run: {why}", lang.label()),
            Err(why) => {
                eprintln!("skipping {}: {why}", lang.label());
                skipped.push((lang, why));
            }
        }
    }

    let simulate = "1x16GiB";
    eprintln!("starting gpud --simulate {simulate}");
    let daemon = latency::start_daemon(simulate);
    let socket = daemon.socket.clone();

    let mut floor = Vec::new();
    let mut round_trips: Vec<Vec<Vec<Duration>>> = drivers.iter().map(|_| Vec::new()).collect();
    let mut handoffs: Vec<Vec<Vec<Duration>>> = drivers.iter().map(|_| Vec::new()).collect();
    for pass in 0..o.passes {
        let tag = format!("[pass {}/{}]", pass + 1, o.passes);
        let (n, m) = (
            share(o.iterations, o.passes, pass),
            share(o.handoffs, o.passes, pass),
        );
        if n > 0 {
            eprintln!("{tag} kernel floor: {n} round trips over a socket pair");
            floor.push(latency::kernel_round_trip_samples(n)?);
        }
        let mut order: Vec<usize> = (0..drivers.len()).collect();
        if pass % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let d = &drivers[i];
            if n > 0 {
                eprintln!(
                    "{tag} {}: acquire + release round trip, {n} iterations",
                    d.lang.label()
                );
                round_trips[i].push(measure(d, &socket, Phase::RoundTrip, n)?);
            }
            if m > 0 {
                eprintln!(
                    "{tag} {}: compute-slot handoff, {m} handoffs",
                    d.lang.label()
                );
                handoffs[i].push(measure(d, &socket, Phase::Handoff, m)?);
            }
        }
    }
    drop(daemon);

    let floor = Figure::of(floor).context("no pass")?;
    let mut reports: Vec<ClientReport> = Vec::new();
    for lang in &o.only {
        let mut report = ClientReport {
            client: lang.name(),
            label: lang.label(),
            round_trip: None,
            handoff: None,
            skipped: None,
            round_trip_vs_rust: None,
            handoff_vs_rust: None,
        };
        if let Some(i) = drivers.iter().position(|d| d.lang == *lang) {
            report.round_trip = Figure::of(std::mem::take(&mut round_trips[i]));
            report.handoff = Figure::of(std::mem::take(&mut handoffs[i]));
        } else if let Some((_, why)) = skipped.iter().find(|(l, _)| l == lang) {
            report.skipped = Some(why.clone());
        }
        reports.push(report);
    }
    if let Some(i) = reports.iter().position(|r| r.client == "rust") {
        let (rt, ho) = (
            reports[i]
                .round_trip
                .as_ref()
                .map(|f| (f.pooled, f.best_pass_p50_us)),
            reports[i]
                .handoff
                .as_ref()
                .map(|f| (f.pooled, f.best_pass_p50_us)),
        );
        let ratio = |f: &Figure, (pooled, best): (Summary, f64)| Ratio {
            p50: f.pooled.p50_us / pooled.p50_us,
            best_pass_p50: f.best_pass_p50_us / best,
        };
        for r in &mut reports {
            r.round_trip_vs_rust = r.round_trip.as_ref().zip(rt).map(|(f, x)| ratio(f, x));
            r.handoff_vs_rust = r.handoff.as_ref().zip(ho).map(|(f, x)| ratio(f, x));
        }
    }
    // The target: C within 1.1x of Rust at p50 (pooled), round trip and handoff.
    let c_target = reports.iter().find(|r| r.client == "c").and_then(|r| {
        Some((
            r.round_trip_vs_rust?.p50 <= 1.1,
            r.handoff_vs_rust?.p50 <= 1.1,
        ))
    });

    if o.json {
        let v = serde_json::json!({
            "daemon": format!("gpud --simulate {simulate}"),
            "iterations": o.iterations,
            "handoffs": o.handoffs,
            "passes": o.passes,
            "round_trip_vram_bytes": ROUND_TRIP_VRAM,
            "kernel_round_trip": floor,
            "clients": reports,
            "target_c_within_1_1x_of_rust": c_target.map(|(rt, ho)| serde_json::json!({
                "round_trip_p50": rt, "handoff_p50": ho,
            })),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }

    println!(
        "gpud clients against one daemon (gpud --simulate {simulate}): {} acquire + release \
         round trips (1 GiB, no compute) and {} compute-slot handoffs per client, over {} \
         pass{} in alternating order",
        o.iterations,
        o.handoffs,
        o.passes,
        if o.passes == 1 { "" } else { "es" }
    );
    println!(
        "{:<28} | {:>7} {:>7} {:>7} {:>5} {:>13} | {:>7} {:>7} {:>7} {:>5} {:>13}",
        "",
        "rt p50",
        "p99",
        "mean",
        "×Rust",
        "pass p50s",
        "ho p50",
        "p99",
        "mean",
        "×Rust",
        "pass p50s"
    );
    let cells = |f: Option<&Figure>, ratio: Option<Ratio>| match f {
        Some(f) => {
            let (lo, hi) = f.pass_range();
            format!(
                "{:>7.1} {:>7.1} {:>7.1} {:>5} {:>13}",
                f.pooled.p50_us,
                f.pooled.p99_us,
                f.pooled.mean_us,
                ratio.map_or("-".into(), |r| format!("{:.2}", r.p50)),
                format!("{lo:.0}-{hi:.0}")
            )
        }
        None => format!("{:>7} {:>7} {:>7} {:>5} {:>13}", "-", "-", "-", "-", "-"),
    };
    println!(
        "{:<28} | {} | {}",
        "kernel floor (socket pair)",
        cells(Some(&floor), None),
        cells(None, None)
    );
    for r in &reports {
        match &r.skipped {
            Some(why) => println!("{:<28} | skipped: {why}", r.label),
            None => println!(
                "{:<28} | {} | {}",
                r.label,
                cells(r.round_trip.as_ref(), r.round_trip_vs_rust),
                cells(r.handoff.as_ref(), r.handoff_vs_rust)
            ),
        }
    }
    println!(
        "(µs; rt = acquire + release round trip, ho = handoff; every pass's samples together; \
         ×Rust = p50 / Rust's p50; pass p50s = the lowest and highest p50 of one pass)"
    );
    match c_target {
        Some((rt, ho)) => println!(
            "target: C within 1.1x of Rust at p50: round trip {}, handoff {}",
            verdict(rt),
            verdict(ho)
        ),
        None => println!("target: C within 1.1x of Rust at p50: not measured (needs C and Rust)"),
    }
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}
