//! A gpud client for chaos and restart tests, meant to be killed at any moment.
//!
//! - `gpud-chaos-client random SOCKET SEED`: acquires, resizes and releases random leases for
//!   ever (no reconnection: a lost daemon ends it).
//! - `gpud-chaos-client hold SOCKET VRAM_MIB COMPUTE`: takes one lease and holds it across
//!   daemon restarts (the client library re-adopts it); prints `lease ID` once granted and
//!   `lost ID` (then exits 3) if it is ever lost.
//! - `gpud-chaos-client hold-host SOCKET MEM_MIB CPUS`: like `hold`, a lease of the host alone
//!   (host memory and CPUs); prints `lease ID cpus C1,C2,…` once granted.
//! - `gpud-chaos-client attach SOCKET PID`: takes a 1 MiB lease and attaches process PID to
//!   it; prints `attached`, or `refused CODE` with the daemon's error code.
//!
//! All print `ready` once connected, and exit when their stdin closes, so a test that dies
//! leaves no clients behind.

use std::io::{BufRead, Write};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use gpud_client::blocking::{Client, Lease};
use gpud_client::proto::Class;
use gpud_client::{ClientOptions, LeaseRequest, Placement};

/// A small deterministic generator (xorshift64*), so a seed reproduces a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            if line.is_err() {
                break;
            }
        }
        std::process::exit(0);
    });
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn random(socket: &str, seed: u64) -> Result<()> {
    let options = ClientOptions {
        reconnect_for: None,
        ..ClientOptions::default()
    };
    let client = Client::connect_with(socket, options)?;
    say("ready");
    let mut rng = Rng(seed.max(1));
    let mut held: Vec<Lease> = Vec::new();
    loop {
        match rng.below(10) {
            0..=4 if held.len() < 6 => {
                let class = [
                    Class::Critical,
                    Class::High,
                    Class::Normal,
                    Class::Background,
                ][rng.below(4) as usize];
                let device = match rng.below(3) {
                    0 => Placement::Any,
                    d => Placement::Index(d as u32 - 1),
                };
                let vram = rng.below(6 << 10) << 20;
                let request = LeaseRequest::new()
                    .vram(vram)
                    .with_compute(vram == 0 || rng.below(3) == 0)
                    .class(class)
                    .device(device);
                match client.try_acquire(&request, Duration::from_millis(rng.below(30))) {
                    Ok(Some(lease)) => held.push(lease),
                    Ok(None) => {}
                    Err(e) if e.code().is_some() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            5..=6 if !held.is_empty() => {
                let i = rng.below(held.len() as u64) as usize;
                let vram = (rng.below(6 << 10) + 1) << 20;
                let timeout = Some(Duration::from_millis(rng.below(20)));
                match held[i].resize(vram, timeout) {
                    Ok(_) => {}
                    Err(e) if e.code().is_some() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            7..=8 if !held.is_empty() => {
                let i = rng.below(held.len() as u64) as usize;
                let lease = held.swap_remove(i);
                if rng.below(2) == 0 {
                    lease.release()?;
                } else {
                    drop(lease); // released without waiting
                }
            }
            _ => std::thread::sleep(Duration::from_micros(rng.below(2000))),
        }
    }
}

/// A client that rides out the daemon's restarts (20 s), once it says `ready`.
fn reconnecting(socket: &str) -> Result<Client> {
    let options = ClientOptions {
        reconnect_for: Some(Duration::from_secs(20)),
        ..ClientOptions::default()
    };
    let client = Client::connect_with(socket, options)?;
    say("ready");
    Ok(client)
}

/// Holds `lease` until it is lost, then says so and exits 3.
fn hold_until_lost(lease: &Lease) -> ! {
    loop {
        std::thread::sleep(Duration::from_millis(5));
        if lease.is_lost() {
            say(&format!("lost {}", lease.id()));
            std::process::exit(3);
        }
    }
}

fn hold(socket: &str, vram_mib: u64, compute: bool) -> Result<()> {
    let client = reconnecting(socket)?;
    let request = LeaseRequest::new()
        .vram(vram_mib << 20)
        .with_compute(compute)
        .label("holder");
    let lease = client.acquire(&request)?;
    say(&format!("lease {}", lease.id()));
    hold_until_lost(&lease)
}

/// Holds a lease of host memory and CPUs across restarts, as [`hold`] does a device lease.
fn hold_host(socket: &str, mem_mib: u64, cpus: u32) -> Result<()> {
    let client = reconnecting(socket)?;
    let request = LeaseRequest::new()
        .host_memory(mem_mib << 20)
        .cpus(cpus)
        .label("host holder");
    let lease = client.acquire(&request)?;
    let granted: Vec<String> = lease
        .host()
        .map(|h| h.cpus.iter().map(u32::to_string).collect())
        .unwrap_or_default();
    say(&format!("lease {} cpus {}", lease.id(), granted.join(",")));
    hold_until_lost(&lease)
}

/// Attaches `pid` to a fresh lease and says what gpud answered.
fn attach(socket: &str, pid: u32) -> Result<()> {
    let client = Client::connect(socket)?;
    println!("ready");
    let lease = client.acquire(&LeaseRequest::new().vram(1 << 20))?;
    match lease.attach(pid, gpud_client::proto::EnforcedBy::Supervised, false) {
        Ok(()) => println!("attached"),
        Err(gpud_client::ClientError::Daemon(body)) => {
            println!(
                "refused {}",
                serde_json::to_string(&body.code)?.trim_matches('"')
            )
        }
        Err(e) => return Err(e.into()),
    }
    std::io::stdout().flush()?;
    Ok(())
}

fn main() -> Result<()> {
    exit_when_stdin_closes();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["random", socket, seed] => random(socket, seed.parse().context("SEED")?),
        ["hold", socket, vram, compute] => hold(
            socket,
            vram.parse().context("VRAM_MIB")?,
            compute.parse().context("COMPUTE (true/false)")?,
        ),
        ["hold-host", socket, mem, cpus] => hold_host(
            socket,
            mem.parse().context("MEM_MIB")?,
            cpus.parse().context("CPUS")?,
        ),
        ["attach", socket, pid] => attach(socket, pid.parse().context("PID")?),
        _ => bail!(
            "usage: gpud-chaos-client random SOCKET SEED | hold SOCKET VRAM_MIB COMPUTE | hold-host SOCKET MEM_MIB CPUS | attach SOCKET PID"
        ),
    }
}
