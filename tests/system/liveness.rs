//! Liveness end to end: a holder whose process is SIGSTOPped (as `scontrol suspend` does to a
//! job) loses a VRAM-only or a compute lease at its maximum hold, at once, since it cannot
//! answer a notice; and a stopped compute holder loses its slot to a waiting critical request
//! once it has been stopped for the stopped grace (at once when it has been longer), and the
//! critical request is granted; `gpudctl leases` shows the stopped holder.

use std::os::unix::process::CommandExt;
use std::process::Child;
use std::time::{Duration, Instant};

use gpud_client::{Class, LeaseRequest};
use gpud_tests::{Daemon, wait_until};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

const GIB: u64 = 1 << 30;

/// A `gpudctl run` holding `args` around a long sleep, in a process group of its own (so that
/// the sleep goes with it), once its lease is granted.
struct Holder {
    child: Child,
}

impl Holder {
    fn start(daemon: &Daemon, args: &[&str]) -> Self {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "sleep", "600"]);
        let child = daemon
            .gpudctl_command(&all)
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let probe = daemon.client();
        assert!(
            wait_until(Duration::from_secs(5), || probe
                .status()
                .unwrap()
                .leases
                .iter()
                .any(|l| l.pid == pid)),
            "gpudctl run got no lease"
        );
        Self { child }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    fn stop(&self) {
        kill(self.pid(), Signal::SIGSTOP).unwrap();
    }

    fn holds_a_lease(&self, daemon: &Daemon) -> bool {
        let pid = self.child.id();
        daemon
            .client()
            .status()
            .unwrap()
            .leases
            .iter()
            .any(|l| l.pid == pid)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = killpg(self.pid(), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn revocations_for_stopped_holders(daemon: &Daemon) -> usize {
    let metrics = String::from_utf8(daemon.gpudctl(&["metrics"]).stdout).unwrap();
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("gpud_lease_revocations_total{")
                && l.contains("reason=\"holder_stopped\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}

/// A daemon that checks holders every 100 ms, with `extra` config; yield notices are never
/// followed by revocations, so only the liveness rules can take a lease away.
fn daemon(extra: &str) -> Daemon {
    let config = format!(
        "[scheduler]\nstopped_poll_interval = \"100ms\"\nrevoke_after_yield = \"none\"\n\
         memory_revoke_after_yield = \"none\"\n{extra}"
    );
    Daemon::start_with("1x16GiB", &config)
}

#[test]
fn a_sigstopped_holder_of_a_vram_only_lease_loses_it_at_its_max_hold() {
    let daemon = daemon("[scheduler.max_hold.memory]\nnormal = \"2s\"\n");
    let holder = Holder::start(&daemon, &["--vram", "4GiB"]);
    let granted = Instant::now();
    holder.stop();
    assert!(
        wait_until(Duration::from_secs(6), || !holder.holds_a_lease(&daemon)),
        "the stopped holder kept its VRAM lease past its max hold"
    );
    let held = granted.elapsed();
    assert!(
        held >= Duration::from_millis(1900),
        "revoked after {held:?}, before its max hold"
    );
    assert_eq!(
        daemon.client().status().unwrap().devices[0].reserved_bytes,
        0
    );
    assert_eq!(revocations_for_stopped_holders(&daemon), 1);
    assert!(
        daemon.log().contains("lease holder stopped"),
        "{}",
        daemon.log()
    );
}

#[test]
fn a_sigstopped_holder_of_a_compute_lease_loses_it_at_its_max_hold() {
    let daemon = daemon("[scheduler.max_hold]\nnormal = \"2s\"\n");
    let holder = Holder::start(&daemon, &["--compute"]);
    holder.stop();
    assert!(
        wait_until(Duration::from_secs(6), || !holder.holds_a_lease(&daemon)),
        "the stopped holder kept its compute lease past its max hold"
    );
    assert_eq!(revocations_for_stopped_holders(&daemon), 1);
    let status = daemon.client().status().unwrap();
    assert!(status.devices[0].compute_holders.is_empty());
}

#[test]
fn a_critical_request_waits_out_the_stopped_grace_of_a_holder_just_stopped() {
    let uid = nix::unistd::getuid().as_raw();
    let daemon = daemon(&format!(
        "stopped_grace = \"2s\"\n[access]\ncritical_uids = [0, {uid}]\n"
    ));
    let holder = Holder::start(&daemon, &["--compute"]);
    holder.stop();
    let stopped = Instant::now();
    let critical = daemon
        .client()
        .acquire(
            &LeaseRequest::new()
                .compute()
                .class(Class::Critical)
                .timeout(Duration::from_secs(10)),
        )
        .expect("the critical request is granted");
    let waited = stopped.elapsed();
    assert!(critical.info().compute);
    assert!(
        waited >= Duration::from_millis(1950),
        "granted after {waited:?}, within the stopped grace"
    );
    assert!(waited < Duration::from_secs(5), "granted after {waited:?}");
    assert!(!holder.holds_a_lease(&daemon));
    assert_eq!(revocations_for_stopped_holders(&daemon), 1);
}

#[test]
fn a_running_holder_past_its_max_hold_is_asked_to_yield_and_keeps_its_lease() {
    // The same limits as above with a holder that is not stopped: no revocation (yields are
    // never followed by one here), so the revocations above are the stopped rule's.
    let daemon = daemon("[scheduler.max_hold]\nnormal = \"1s\"\n");
    let holder = Holder::start(&daemon, &["--compute"]);
    std::thread::sleep(Duration::from_secs(2));
    assert!(holder.holds_a_lease(&daemon));
    assert_eq!(revocations_for_stopped_holders(&daemon), 0);
}

#[test]
fn a_compute_holder_stopped_past_its_grace_keeps_its_slot_until_a_critical_request_takes_it() {
    let uid = nix::unistd::getuid().as_raw();
    let daemon = daemon(&format!(
        "stopped_grace = \"1s\"\n[access]\ncritical_uids = [0, {uid}]\n"
    ));
    let holder = Holder::start(&daemon, &["--compute", "--vram", "8GiB"]);
    holder.stop();
    let stopped = Instant::now();
    // Nothing waits for it yet: it keeps its lease, and gpudctl shows it stopped.
    assert!(
        wait_until(Duration::from_secs(5), || {
            let text = String::from_utf8(daemon.gpudctl(&["leases"]).stdout).unwrap();
            text.contains("gpudctl (stopped ")
        }),
        "gpudctl leases does not show the stopped holder"
    );
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        holder.holds_a_lease(&daemon),
        "revoked with nothing waiting"
    );
    let asked = Instant::now();
    let critical = daemon
        .client()
        .acquire(
            &LeaseRequest::new()
                .vram(4 * GIB)
                .compute()
                .class(Class::Critical)
                .timeout(Duration::from_secs(10)),
        )
        .expect("the critical request is granted");
    // Stopped for longer than the grace already: the critical request takes the slot at once.
    let waited = asked.elapsed();
    assert!(critical.info().compute);
    assert!(stopped.elapsed() >= Duration::from_secs(1));
    assert!(waited < Duration::from_secs(2), "granted after {waited:?}");
    assert!(!holder.holds_a_lease(&daemon));
    assert_eq!(revocations_for_stopped_holders(&daemon), 1);
}
