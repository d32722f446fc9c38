//! Chaos: random clients acquiring, resizing and releasing, killed with SIGKILL at random;
//! and gpud itself killed and restarted while clients hold leases.

use std::collections::{BTreeMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpud_client::proto::StatusReport;
use gpud_client::{LeaseRequest, blocking::Client};
use gpud_tests::ops::stdout_lines;
use gpud_tests::{Daemon, bin, wait_until};

/// A chaos client process with its stdout lines on a channel.
struct Worker {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Worker {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(bin("gpud-chaos-client"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn gpud-chaos-client");
        let lines = stdout_lines(&mut child);
        let w = Self { child, lines };
        assert_eq!(
            w.expect_line(Duration::from_secs(10)).as_deref(),
            Some("ready")
        );
        w
    }

    fn expect_line(&self, limit: Duration) -> Option<String> {
        self.lines.recv_timeout(limit).ok()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reserved bytes equal the sum of the leases on every device, and nothing is over-committed.
fn check_books(status: &StatusReport) {
    for dev in &status.devices {
        let sum: u64 = status
            .leases
            .iter()
            .filter(|l| l.device_index == dev.index)
            .map(|l| l.vram_bytes)
            .sum();
        assert_eq!(
            dev.reserved_bytes, sum,
            "device {}: reserved != leases",
            dev.index
        );
        assert!(
            dev.reserved_bytes <= dev.capacity_bytes,
            "device {} over-committed",
            dev.index
        );
        let holders = status
            .leases
            .iter()
            .filter(|l| l.device_index == dev.index && l.compute)
            .count();
        assert!(
            holders <= dev.compute_slots as usize,
            "device {}: {holders} compute holders",
            dev.index
        );
    }
    let ids: HashSet<u64> = status.leases.iter().map(|l| l.id).collect();
    assert_eq!(ids.len(), status.leases.len(), "duplicate lease ids");
}

fn cycles(default: usize) -> usize {
    std::env::var("GPUD_CHAOS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn random_clients_killed_at_random_never_leak() {
    let _alone = gpud_tests::exclusive();
    let daemon = Daemon::start_logging("16GiB,24GiB", "", "warn");
    let socket = daemon.socket.to_string_lossy().into_owned();
    let observer = daemon.client();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut workers: Vec<Worker> = (0..6)
        .map(|_| Worker::spawn(&["random", &socket, &next().to_string()]))
        .collect();
    let n = cycles(1000);
    let started = Instant::now();
    let (mut leases_seen, mut max_cleanup) = (0usize, Duration::ZERO);
    for _ in 0..n {
        // Let the workers do a little, then kill one without warning.
        std::thread::sleep(Duration::from_micros(next() % 3000));
        let victim = workers.swap_remove((next() % workers.len() as u64) as usize);
        let dead = victim.pid();
        let killed = Instant::now();
        victim.kill();
        // Its leases must be gone, and the books straight, in every snapshot.
        assert!(
            wait_until(Duration::from_secs(2), || {
                let s = observer.status().unwrap();
                check_books(&s);
                !s.leases.iter().any(|l| l.pid == dead)
            }),
            "leases of killed pid {dead} never freed"
        );
        max_cleanup = max_cleanup.max(killed.elapsed());
        let s = observer.status().unwrap();
        check_books(&s);
        let alive: HashSet<u32> = workers.iter().map(Worker::pid).collect();
        for l in &s.leases {
            assert!(
                alive.contains(&l.pid),
                "lease {} of pid {} that is not running",
                l.id,
                l.pid
            );
        }
        leases_seen += s.leases.len();
        workers.push(Worker::spawn(&["random", &socket, &next().to_string()]));
    }
    for w in workers.drain(..) {
        w.kill();
    }
    assert!(wait_until(Duration::from_secs(5), || observer
        .status()
        .unwrap()
        .daemon
        .sessions
        == 1));
    let s = observer.status().unwrap();
    check_books(&s);
    assert!(
        s.leases.is_empty(),
        "leases left after every client died: {:?}",
        s.leases
    );
    assert!(s.devices.iter().all(|d| d.reserved_bytes == 0));
    println!(
        "chaos: {n} cycles in {:.1} s, {n} kill -9, {leases_seen} leases seen live in snapshots, \
         slowest cleanup after a kill {:?}, nothing leaked",
        started.elapsed().as_secs_f64(),
        max_cleanup
    );
    assert!(
        leases_seen > n / 2,
        "the workers hardly held anything: {leases_seen} leases in {n} snapshots"
    );
}

#[test]
fn gpud_killed_and_restarted_while_clients_hold_leases() {
    let _alone = gpud_tests::exclusive();
    let gib = 1u64 << 30;
    let mut daemon = Daemon::start_logging("16GiB", "readopt_grace = \"5s\"\n", "info");
    let socket = daemon.socket.to_string_lossy().into_owned();
    // Eight holders: 1.5 GiB each, two of them with the compute slot... one at a time.
    let spawn_holder = |i: usize| {
        let compute = if i == 0 { "true" } else { "false" };
        let w = Worker::spawn(&["hold", &socket, "1536", compute]);
        let line = w
            .expect_line(Duration::from_secs(10))
            .expect("holder granted");
        let id: u64 = line
            .strip_prefix("lease ")
            .and_then(|s| s.parse().ok())
            .expect(&line);
        (w, id)
    };
    let mut holders: Vec<(Worker, u64)> = (0..8).map(spawn_holder).collect();
    let cycles = cycles(50).min(50);
    let mut seed = 12345u64;
    let (mut readopted, mut dropped, mut worst) = (0usize, 0usize, Duration::ZERO);
    for cycle in 0..cycles {
        // Some holders die while gpud is down.
        let dead: Vec<(Worker, u64)> = {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (seed >> 33) as usize % 3;
            (0..k)
                .map(|_| holders.remove((seed as usize >> 7) % holders.len()))
                .collect()
        };
        daemon.kill_and_restart_with(|| {
            for (w, _) in dead.iter() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(w.pid() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        });
        let restarted = Instant::now();
        let probe = Client::connect(&daemon.socket).unwrap();
        // Zero double grants: what the live holders held is still reserved, so asking for
        // more than the rest must wait, re-adopted or not.
        let held: u64 = holders.len() as u64 * 1536 * (1 << 20);
        let rest = 16 * gib - held;
        let over = probe
            .try_acquire(
                &LeaseRequest::new().vram(rest + (1 << 20)),
                Duration::from_millis(50),
            )
            .unwrap();
        assert!(
            over.is_none(),
            "cycle {cycle}: granted memory that restored leases hold"
        );
        let want: BTreeMap<u64, u32> = holders.iter().map(|(w, id)| (*id, w.pid())).collect();
        let back = wait_until(Duration::from_secs(5), || {
            let s = probe.status().unwrap();
            check_books(&s);
            want.iter().all(|(id, pid)| {
                s.leases
                    .iter()
                    .any(|l| l.id == *id && l.pid == *pid && l.session != 0)
            })
        });
        assert!(
            back,
            "cycle {cycle}: live holders not re-adopted; status {:?}",
            probe.status().unwrap().leases
        );
        worst = worst.max(restarted.elapsed());
        let s = probe.status().unwrap();
        check_books(&s);
        for (w, id) in &dead {
            assert!(
                !s.leases.iter().any(|l| l.id == *id),
                "cycle {cycle}: lease {id} of dead pid {} kept",
                w.pid()
            );
        }
        assert_eq!(
            s.leases.len(),
            holders.len(),
            "cycle {cycle}: only the live holders' leases"
        );
        readopted += holders.len();
        dropped += dead.len();
        for (w, _) in dead {
            w.kill();
        }
        for (w, id) in &holders {
            if let Ok(line) = w.lines.try_recv() {
                panic!("cycle {cycle}: holder of lease {id} said {line:?}");
            }
        }
        drop(probe);
        while holders.len() < 8 {
            holders.push(spawn_holder(1));
        }
    }
    println!(
        "restart: {cycles} kill -9 of gpud with 8 holders; {readopted} leases re-adopted, {dropped} of dead \
         holders dropped, zero double grants, zero over-commit; slowest re-adoption {worst:?}"
    );
}
