//! Scale: many connected clients and a deep queue against one daemon.
//!
//! Connects `--clients` sessions (default 1000), fills the device, queues `--requests`
//! acquires (default 10,000) behind it, then frees the device and measures how fast the daemon
//! works through the queue: grants per second, the daemon's peak RSS and its CPU time.
//!
//! Build release binaries first: `cargo build --release --workspace --bins`, then run
//! `target/release/gpud-bench-scale [--clients N] [--requests N] [--json]`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use gpud_client::{Client, LeaseRequest};
use gpud_tests::Daemon;

struct Options {
    clients: usize,
    requests: usize,
    json: bool,
}

fn options() -> Result<Options> {
    let mut o = Options {
        clients: 1000,
        requests: 10_000,
        json: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--clients" => o.clients = args.next().context("--clients N")?.parse()?,
            "--requests" => o.requests = args.next().context("--requests N")?.parse()?,
            "--json" => o.json = true,
            other => bail!("unknown argument {other:?} (--clients N, --requests N, --json)"),
        }
    }
    if o.clients == 0 || o.requests < o.clients {
        bail!("need at least one client and at least as many requests as clients");
    }
    Ok(o)
}

/// (VmRSS, VmHWM) of a process, in KiB.
fn rss_kib(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("{name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU time of a process.
fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("stat")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15; index 11 and 12 after the state (field 3).
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.unwrap_or(100) as u64;
    Ok(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

fn main() -> Result<()> {
    let o = options()?;
    let slots = 64u64;
    let config = format!(
        "[limits]\nmax_sessions = {}\nmax_sessions_per_uid = {}\nmax_outstanding_requests = {}\n",
        o.clients + 16,
        o.clients + 16,
        o.requests / o.clients + 1
    );
    // One device of 64 GiB; every request is 1 GiB, so 64 are granted at a time.
    let daemon = Daemon::start_logging("64GiB", &config, "warn");
    let pid = daemon.pid();
    let (rss_idle, _) = rss_kib(pid)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(async {
        let blocker = Client::connect(&daemon.socket).await?;
        let mut held = Vec::new();
        for _ in 0..slots {
            held.push(blocker.acquire(&LeaseRequest::new().vram(1 << 30)).await?);
        }
        let mut clients = Vec::with_capacity(o.clients);
        for _ in 0..o.clients {
            clients.push(Client::connect(&daemon.socket).await?);
        }
        let per_client = o.requests / o.clients;
        let total = per_client * o.clients;
        let mut tasks = tokio::task::JoinSet::new();
        for c in &clients {
            for _ in 0..per_client {
                let c = c.clone();
                tasks.spawn(async move {
                    // Granted, then dropped at once: the release is pipelined.
                    c.acquire(&LeaseRequest::new().vram(1 << 30))
                        .await
                        .map(drop)
                });
            }
        }
        // Wait until every request is queued in the daemon.
        loop {
            let s = blocker.status().await?;
            if s.waiters.len() >= total {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (rss_queued, _) = rss_kib(pid)?;
        let cpu_before = cpu_time(pid)?;
        let started = Instant::now();
        drop(held);
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        let elapsed = started.elapsed();
        let cpu = cpu_time(pid)? - cpu_before;
        let (_, rss_peak) = rss_kib(pid)?;
        anyhow::Ok((total, elapsed, cpu, rss_queued, rss_peak))
    })?;
    let (total, elapsed, cpu, rss_queued, rss_peak) = report;
    let grants_per_s = total as f64 / elapsed.as_secs_f64();
    if o.json {
        println!(
            "{}",
            serde_json::json!({
                "clients": o.clients, "requests": total, "seconds": elapsed.as_secs_f64(),
                "grants_per_second": grants_per_s, "daemon_cpu_seconds": cpu.as_secs_f64(),
                "daemon_rss_idle_kib": rss_idle, "daemon_rss_queued_kib": rss_queued,
                "daemon_rss_peak_kib": rss_peak,
            })
        );
        return Ok(());
    }
    println!(
        "{} clients connected, {total} requests queued behind a full device",
        o.clients
    );
    println!(
        "drained in {:.3} s: {grants_per_s:.0} grants/s (each grant followed by its release)",
        elapsed.as_secs_f64()
    );
    println!(
        "daemon: CPU {:.3} s ({:.0} % of one core), RSS idle {:.1} MiB, with the queue {:.1} MiB, peak {:.1} MiB",
        cpu.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64(),
        rss_idle as f64 / 1024.0,
        rss_queued as f64 / 1024.0,
        rss_peak as f64 / 1024.0
    );
    println!(
        "targets: RSS <= 64 MiB: {}; >= 20,000 grants/s: {}",
        if rss_peak <= 64 * 1024 {
            "met"
        } else {
            "MISSED"
        },
        if grants_per_s >= 20_000.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    Ok(())
}
