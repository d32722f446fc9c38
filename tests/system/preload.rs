//! libgpud_preload.so against a real gpud on simulated devices: a fake CUDA driver (a
//! `libcuda.so.1` built here from cuda/preload/tests/fake/libcuda.c, whose devices carry the
//! simulated devices' UUIDs) driven by a probe program the three ways programs reach a driver
//! (dlsym of exact names, cuGetProcAddress_v2 by base name as a static runtime does, and
//! direct linking).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use gpud_client::proto::StatusReport;
use gpud_tests::ops::stdout_lines;
use gpud_tests::{Daemon, bin_dir, wait_until};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const MODES: [&str; 3] = ["dlsym", "proc", "linked"];

/// The fake driver and the probes, compiled once per test process.
fn fake_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = gpud_tests::ops::tempdir("gpud-fake-cuda");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cuda/preload/tests/fake");
        let cc = |args: &[&std::ffi::OsStr]| {
            let out = Command::new("cc").args(args).output().expect("run cc");
            assert!(
                out.status.success(),
                "cc {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let d = dir.path();
        cc(&[
            // Its own references bind inside it, as the real driver's do: cuGetProcAddress
            // hands out the driver's own functions, never the interposer's same-named ones.
            "-shared".as_ref(),
            "-fPIC".as_ref(),
            "-Wl,-Bsymbolic".as_ref(),
            "-o".as_ref(),
            d.join("libcuda.so.1").as_os_str(),
            src.join("libcuda.c").as_os_str(),
            "-lpthread".as_ref(),
        ]);
        std::os::unix::fs::symlink("libcuda.so.1", d.join("libcuda.so")).unwrap();
        cc(&[
            "-o".as_ref(),
            d.join("probe").as_os_str(),
            src.join("probe.c").as_os_str(),
            "-ldl".as_ref(),
        ]);
        cc(&[
            "-DLINKED".as_ref(),
            "-o".as_ref(),
            d.join("probe-linked").as_os_str(),
            src.join("probe.c").as_os_str(),
            "-L".as_ref(),
            d.as_os_str(),
            "-lcuda".as_ref(),
            "-ldl".as_ref(),
        ]);
        dir
    })
    .path()
}

/// The interposer as the workspace built it.
fn preload_lib() -> PathBuf {
    let lib = bin_dir().join("libgpud_preload.so");
    assert!(
        lib.exists(),
        "{} is missing: build it first (cargo build -p gpud-preload)",
        lib.display()
    );
    lib
}

/// The probe's command line in `mode`.
fn probe_command(mode: &str) -> Command {
    let dir = fake_dir();
    let mut c = if mode == "linked" {
        Command::new(dir.join("probe-linked"))
    } else {
        let mut c = Command::new(dir.join("probe"));
        c.arg(mode);
        c
    };
    c.env("LD_LIBRARY_PATH", dir);
    for var in [
        "GPUD_VRAM",
        "GPUD_POLICY",
        "GPUD_ON_LOST",
        "GPUD_CLASS",
        "GPUD_LABEL",
        "GPUD_TIMEOUT",
        "GPUD_GROW_TIMEOUT",
    ] {
        c.env_remove(var);
    }
    c
}

/// A probe process under the interposer, answering one line per command.
struct Probe {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: PathBuf,
    _logs: tempfile::TempDir,
}

impl Probe {
    /// A probe in `mode` with gpud's socket, the defaults below and `env` over them.
    fn start(socket: &Path, mode: &str, env: &[(&str, &str)]) -> Probe {
        let mut c = probe_command(mode);
        c.env("LD_PRELOAD", preload_lib())
            .env("GPUD_SOCKET", socket)
            .env("GPUD_VRAM", "1GiB")
            .env("GPUD_CONTEXT_OVERHEAD", "0")
            .env("GPUD_GROW_STEP", "1GiB")
            .env("GPUD_SHRINK_ABOVE", "2GiB");
        for (k, v) in env {
            c.env(k, v);
        }
        Probe::spawn(c)
    }

    fn spawn(mut c: Command) -> Probe {
        let logs = gpud_tests::ops::tempdir("gpud-probe");
        let stderr = logs.path().join("stderr");
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut child = c.spawn().expect("start the probe");
        let stdin = child.stdin.take().unwrap();
        let lines = stdout_lines(&mut child);
        Probe {
            child,
            stdin,
            lines,
            stderr,
            _logs: logs,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to the probe");
        self.stdin.flush().unwrap();
    }

    /// The answer to the last command, within `limit` (None when it has not come).
    fn answer(&mut self, limit: Duration) -> Option<String> {
        self.lines.recv_timeout(limit).ok()
    }

    fn run(&mut self, line: &str) -> String {
        self.send(line);
        self.answer(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("no answer to {line:?}; stderr:\n{}", self.stderr()))
    }

    /// Runs a command that must succeed: the numbers of its answer.
    fn ok(&mut self, line: &str) -> Vec<u64> {
        let answer = self.run(line);
        let mut words = answer.split_whitespace();
        assert_eq!(
            words.next(),
            Some("ok"),
            "{line:?} answered {answer:?}; stderr:\n{}",
            self.stderr()
        );
        words.map(|w| w.parse().unwrap()).collect()
    }

    /// Runs a command that must fail: its CUresult.
    fn err(&mut self, line: &str) -> i64 {
        let answer = self.run(line);
        let code = answer
            .strip_prefix("err ")
            .unwrap_or_else(|| panic!("{line:?} answered {answer:?}, not an error"));
        code.parse().unwrap()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status(daemon: &Daemon) -> StatusReport {
    daemon.client().status().expect("status")
}

/// The memory lease of process `pid`: its size (None when it holds none).
fn lease_of(daemon: &Daemon, pid: u32) -> Option<u64> {
    let s = status(daemon);
    let mine: Vec<_> = s
        .leases
        .iter()
        .filter(|l| l.pid == pid && !l.compute)
        .collect();
    assert!(mine.len() <= 1, "one memory lease per device: {mine:?}");
    mine.first().map(|l| l.vram_bytes)
}

fn wait_for_lease(daemon: &Daemon, pid: u32, bytes: u64) {
    assert!(
        wait_until(Duration::from_secs(5), || lease_of(daemon, pid)
            == Some(bytes)),
        "lease of {pid} is {:?}, not {bytes}",
        lease_of(daemon, pid)
    );
}

/// An allocation command of `bytes` for each allocation path, with the command that frees it.
fn paths(bytes: u64) -> Vec<(String, &'static str)> {
    vec![
        (format!("alloc {bytes}"), "free"),
        (format!("managed {bytes}"), "free"),
        (format!("pitch 1024 {}", bytes / 1024), "free"),
        (format!("async {bytes}"), "freeasync"),
        (format!("pool {bytes}"), "freeasync"),
        (format!("create {bytes}"), "release"),
    ]
}

#[test]
fn the_lease_is_acquired_at_the_first_cuda_use_with_its_initial_size() {
    let daemon = Daemon::start("1x16GiB");
    for mode in MODES {
        let mut p = Probe::start(
            &daemon.socket,
            mode,
            &[("GPUD_CONTEXT_OVERHEAD", "256MiB"), ("GPUD_LABEL", "probe")],
        );
        // Loaded and resolved, no CUDA call yet: no lease.
        p.ok("total");
        assert_eq!(
            lease_of(&daemon, p.pid()),
            None,
            "{mode}: leased before use"
        );
        p.ok("init");
        assert_eq!(lease_of(&daemon, p.pid()), Some(GIB), "{mode}");
        let s = status(&daemon);
        let lease = s.leases.iter().find(|l| l.pid == p.pid()).unwrap();
        assert_eq!(lease.device, "GPU-5e1a0000-0000-4000-8000-000000000000");
        assert_eq!(lease.label.as_deref(), Some("probe"));
        // The interposer attaches itself: status says how the lease is enforced.
        assert!(
            wait_until(Duration::from_secs(5), || status(&daemon)
                .leases
                .iter()
                .any(|l| {
                    l.pid == p.pid()
                        && l.program_pid == Some(p.pid())
                        && l.enforced_by == Some(gpud_client::proto::EnforcedBy::Preload)
                })),
            "{mode}: not attached as preload"
        );
        // What the program is told: the lease, less the context's footprint.
        assert_eq!(p.ok("info"), vec![GIB - 256 * MIB, GIB], "{mode}");
        // The device's total, which the lease may grow to under grow: frameworks size their
        // address ranges from it once.
        assert_eq!(p.ok("total"), vec![16 * GIB], "{mode}");
        drop(p);
        assert!(wait_until(Duration::from_secs(5), || status(&daemon)
            .leases
            .is_empty()));
    }
}

#[test]
fn an_allocation_past_the_lease_grows_it_under_grow() {
    let daemon = Daemon::start("1x16GiB");
    for mode in MODES {
        for (alloc, _) in paths(3 * GIB) {
            let mut p = Probe::start(&daemon.socket, mode, &[]);
            p.ok("init");
            assert_eq!(lease_of(&daemon, p.pid()), Some(GIB));
            p.ok(&alloc);
            assert_eq!(
                lease_of(&daemon, p.pid()),
                Some(3 * GIB),
                "{mode} {alloc}: the lease grew to what is used"
            );
            assert_eq!(p.ok("used"), vec![3 * GIB], "the driver allocated it");
            assert_eq!(p.ok("info"), vec![0, 3 * GIB], "{mode} {alloc}");
            assert_eq!(p.ok("total"), vec![16 * GIB], "what the lease may grow to");
            // Within the grown lease: no growth.
            let mut q = Probe::start(&daemon.socket, mode, &[("GPUD_VRAM", "4GiB")]);
            q.ok("init");
            q.ok(&alloc);
            assert_eq!(lease_of(&daemon, q.pid()), Some(4 * GIB), "{mode} {alloc}");
        }
    }
}

/// The lease grew, but the driver still says out-of-memory: the memory came from a process
/// that just ended and is not freed yet. The allocation is retried until it goes through;
/// within the lease (no growth) a refusal comes back at once.
#[test]
fn an_allocation_the_lease_grew_for_is_retried_while_the_driver_frees_memory() {
    let daemon = Daemon::start("1x16GiB");
    for (alloc, _) in paths(3 * GIB) {
        let mut p = Probe::start(
            &daemon.socket,
            "proc",
            &[("FAKE_CUDA_BUSY_ALLOCS", "3"), ("GPUD_SETTLE", "5s")],
        );
        p.ok("init");
        p.ok(&alloc);
        assert_eq!(
            p.ok("used"),
            vec![3 * GIB],
            "{alloc}: allocated after the retries"
        );
        assert!(p.stderr().contains("still freeing memory"), "{alloc}");
        let mut q = Probe::start(
            &daemon.socket,
            "proc",
            &[("FAKE_CUDA_BUSY_ALLOCS", "1"), ("GPUD_VRAM", "4GiB")],
        );
        q.ok("init");
        assert_eq!(q.err(&alloc), 2, "{alloc}: within the lease, not retried");
    }
}

#[test]
fn an_allocation_past_the_lease_fails_with_out_of_memory_under_fail() {
    let daemon = Daemon::start("1x16GiB");
    for mode in MODES {
        for (alloc, _) in paths(3 * GIB) {
            let mut p = Probe::start(&daemon.socket, mode, &[("GPUD_POLICY", "fail")]);
            p.ok("init");
            assert_eq!(p.err(&alloc), 2, "{mode} {alloc}: CUDA_ERROR_OUT_OF_MEMORY");
            assert_eq!(p.ok("used"), vec![0], "refused before the driver was asked");
            assert_eq!(lease_of(&daemon, p.pid()), Some(GIB));
            // Within the lease it goes ahead.
            p.ok(&format!("alloc {}", 512 * MIB));
            assert_eq!(p.ok("info"), vec![512 * MIB, GIB]);
            // The lease is all the program will ever have: that is the device's total for it.
            assert_eq!(p.ok("total"), vec![GIB], "{mode} {alloc}");
        }
    }
}

#[test]
fn frees_shrink_the_lease_once_the_unused_part_passes_the_hysteresis() {
    let daemon = Daemon::start("1x16GiB");
    for ((alloc_big, free), (alloc_small, _)) in paths(6 * GIB).into_iter().zip(paths(GIB)) {
        let mut p = Probe::start(&daemon.socket, "proc", &[]);
        p.ok("init");
        let big = p.ok(&alloc_big)[0];
        let small = p.ok(&alloc_small)[0];
        assert_eq!(lease_of(&daemon, p.pid()), Some(7 * GIB), "{alloc_big}");
        // 1 GiB unused is within the hysteresis (2 GiB): the lease stays.
        p.ok(&format!("{free} {small}"));
        assert_eq!(lease_of(&daemon, p.pid()), Some(7 * GIB), "{alloc_big}");
        // 7 GiB unused: back to the initial size.
        p.ok(&format!("{free} {big}"));
        wait_for_lease(&daemon, p.pid(), GIB);
        assert_eq!(p.ok("info"), vec![GIB, GIB], "{alloc_big}");
    }
}

#[test]
fn two_growing_processes_wait_in_gpud_s_queue_instead_of_failing() {
    let daemon = Daemon::start("1x8GiB");
    let mut a = Probe::start(&daemon.socket, "proc", &[]);
    let mut b = Probe::start(&daemon.socket, "proc", &[]);
    a.ok("init");
    b.ok("init");
    a.ok(&format!("alloc {}", 6 * GIB));
    // b's grow does not fit beside a's: it waits in the queue.
    b.send(&format!("alloc {}", 6 * GIB));
    let b_lease = status(&daemon)
        .leases
        .iter()
        .find(|l| l.pid == b.pid())
        .map(|l| l.id);
    assert!(wait_until(Duration::from_secs(5), || {
        status(&daemon)
            .waiters
            .iter()
            .any(|w| w.grows_lease.is_some() && w.grows_lease == b_lease)
    }));
    assert_eq!(b.answer(Duration::from_millis(300)), None, "b waits");
    // gpud never reserves more than the device holds, while b waits and after.
    let capacity_held = |daemon: &Daemon| {
        let d = &status(daemon).devices[0];
        d.reserved_bytes <= d.capacity_bytes
    };
    assert!(capacity_held(&daemon));
    a.ok("free 0");
    let answer = b.answer(Duration::from_secs(10));
    assert_eq!(answer.as_deref(), Some("ok 0"), "{}", b.stderr());
    assert!(capacity_held(&daemon));
    assert_eq!(lease_of(&daemon, a.pid()), Some(GIB));
    assert_eq!(lease_of(&daemon, b.pid()), Some(6 * GIB));
}

#[test]
fn when_gpud_goes_away_fail_keeps_the_process_within_what_it_held() {
    let daemon = Daemon::start("1x16GiB");
    let mut p = Probe::start(&daemon.socket, "proc", &[("GPUD_VRAM", "2GiB")]);
    p.ok("init");
    p.ok(&format!("alloc {GIB}"));
    drop(daemon);
    assert!(wait_until(Duration::from_secs(5), || p
        .stderr()
        .contains("GPUD_ON_LOST=fail")));
    p.ok(&format!("alloc {}", 512 * MIB));
    assert_eq!(p.err(&format!("alloc {GIB}")), 2, "beyond what was held");
}

#[test]
fn when_gpud_goes_away_continue_stops_enforcing_and_says_so_once() {
    let daemon = Daemon::start("1x16GiB");
    let mut p = Probe::start(&daemon.socket, "proc", &[("GPUD_ON_LOST", "continue")]);
    p.ok("init");
    drop(daemon);
    assert!(wait_until(Duration::from_secs(5), || p
        .stderr()
        .contains("no longer enforced")));
    p.ok(&format!("alloc {}", 4 * GIB));
    p.ok(&format!("alloc {}", 4 * GIB));
    assert_eq!(p.ok("info"), vec![8 * GIB, 16 * GIB], "the device as it is");
    assert_eq!(p.stderr().matches("no longer enforced").count(), 1);
}

#[test]
fn without_gpud_the_chosen_policy_applies_from_the_start() {
    let dir = gpud_tests::ops::tempdir("gpud-nosocket");
    let socket = dir.path().join("absent.sock");
    let mut fail = Probe::start(&socket, "proc", &[]);
    fail.ok("init");
    assert_eq!(fail.err("alloc 1"), 2, "nothing held, nothing allocated");
    assert!(fail.stderr().contains("cannot reach gpud"));
    let mut cont = Probe::start(&socket, "proc", &[("GPUD_ON_LOST", "continue")]);
    cont.ok("init");
    cont.ok(&format!("alloc {GIB}"));
    assert_eq!(cont.ok("total"), vec![16 * GIB]);
}

#[test]
fn gpudctl_run_enforce_preload_leaves_the_lease_to_the_program() {
    let daemon = Daemon::start("1x16GiB");
    let mut c = daemon.gpudctl_command(&[
        "run",
        "--enforce",
        "preload",
        "--vram",
        "1GiB",
        "--policy",
        "fail",
        "--",
    ]);
    c.arg(fake_dir().join("probe")).arg("proc");
    c.env("LD_LIBRARY_PATH", fake_dir())
        .env("GPUD_CONTEXT_OVERHEAD", "0")
        .env_remove("GPUD_VRAM")
        .env_remove("GPUD_POLICY");
    let mut p = Probe::spawn(c);
    assert_eq!(p.ok("total"), vec![GIB], "the interposer is loaded");
    assert!(status(&daemon).leases.is_empty(), "gpudctl holds no lease");
    p.ok("init");
    let s = status(&daemon);
    assert_eq!(s.leases.len(), 1);
    assert_ne!(s.leases[0].pid, p.pid(), "held by the program, not gpudctl");
    assert_eq!(s.leases[0].vram_bytes, GIB);
    assert_eq!(p.err(&format!("alloc {}", 2 * GIB)), 2, "--policy fail");
    p.send("quit");
    let status = p.child.wait().unwrap();
    assert!(status.success(), "the program's status passes through");

    // A grow policy is the interposer's: under MPS a lease cannot grow.
    let out = daemon.gpudctl(&[
        "run",
        "--enforce",
        "mps",
        "--policy",
        "grow",
        "--vram",
        "1GiB",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--policy is for --enforce preload"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// gpudctl killed with SIGKILL: the program, in its own process group under a parent-death
/// signal, ends too, and its own lease with it.
#[test]
fn gpudctl_run_enforce_preload_ends_the_program_when_gpudctl_is_killed() {
    let daemon = Daemon::start("1x16GiB");
    let mut c = daemon.gpudctl_command(&["run", "--enforce", "preload", "--vram", "1GiB", "--"]);
    c.arg(fake_dir().join("probe")).arg("proc");
    c.env("LD_LIBRARY_PATH", fake_dir())
        .env("GPUD_CONTEXT_OVERHEAD", "0")
        .env_remove("GPUD_VRAM")
        .env_remove("GPUD_POLICY");
    let mut p = Probe::spawn(c);
    p.ok("init");
    let leases = status(&daemon).leases;
    assert_eq!(leases.len(), 1, "the program's lease");
    let program = nix::unistd::Pid::from_raw(leases[0].pid as i32);
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    assert!(
        gpud_tests::wait_until(Duration::from_secs(5), || {
            nix::sys::signal::kill(program, None).is_err()
        }),
        "the program outlived gpudctl"
    );
    assert!(gpud_tests::wait_until(Duration::from_secs(5), || {
        status(&daemon).leases.is_empty()
    }));
}

/// The compute lease of process `pid`, when it holds one.
fn compute_lease_of(daemon: &Daemon, pid: u32) -> Option<u64> {
    status(daemon)
        .leases
        .iter()
        .find(|l| l.pid == pid && l.compute)
        .map(|l| l.id)
}

#[test]
fn compute_auto_holds_the_interlock_only_around_launches() {
    let daemon = Daemon::start("1x16GiB");
    let auto = [("GPUD_COMPUTE", "auto"), ("GPUD_COMPUTE_IDLE", "300ms")];
    for mode in MODES {
        let mut a = Probe::start(&daemon.socket, mode, &auto);
        let mut b = Probe::start(&daemon.socket, mode, &auto);
        a.ok("init");
        b.ok("init");
        assert_eq!(
            compute_lease_of(&daemon, a.pid()),
            None,
            "{mode}: none before a launch"
        );
        a.ok("launch");
        assert!(
            compute_lease_of(&daemon, a.pid()).is_some(),
            "{mode}: taken at the launch"
        );
        a.ok("launch");
        // b's launch waits for the interlock: a holds it until it has been idle for 300 ms and
        // its context synchronised (from the idle watcher's thread, with a's context made
        // current there: the fake refuses a synchronisation without one).
        b.send("launch");
        assert_eq!(
            b.answer(Duration::from_millis(100)),
            None,
            "{mode}: b waits"
        );
        assert_eq!(
            b.answer(Duration::from_secs(10)).as_deref(),
            Some("ok"),
            "{mode}: {}",
            a.stderr()
        );
        assert_eq!(
            compute_lease_of(&daemon, a.pid()),
            None,
            "{mode}: a gave it back"
        );
        assert!(compute_lease_of(&daemon, b.pid()).is_some());
        // The memory leases stay throughout.
        assert_eq!(lease_of_memory(&daemon, a.pid()), Some(GIB));
        // A device-global call runs under the interlock too: a waits for b's idle.
        a.ok("sync");
        assert!(compute_lease_of(&daemon, a.pid()).is_some(), "{mode}");
        assert_eq!(compute_lease_of(&daemon, b.pid()), None, "{mode}");
    }
}

#[test]
fn without_compute_auto_launches_take_no_lease() {
    let daemon = Daemon::start("1x16GiB");
    let mut a = Probe::start(&daemon.socket, "proc", &[]);
    a.ok("init");
    a.ok("launch");
    a.ok("sync");
    assert_eq!(compute_lease_of(&daemon, a.pid()), None);
}

/// The memory lease of `pid` (its compute lease left out).
fn lease_of_memory(daemon: &Daemon, pid: u32) -> Option<u64> {
    status(daemon)
        .leases
        .iter()
        .find(|l| l.pid == pid && !l.compute)
        .map(|l| l.vram_bytes)
}
