//! gpud under a real one-node Slurm cluster: `munged`, `slurmctld` and `slurmd` started here
//! with a generated `slurm.conf`, GRES from `gpudctl slurm gres`, and the shipped prolog,
//! epilog and task prolog (`slurm/`) turning jobs' GRES into gpud budgets.
//!
//! Needs root and Slurm (`slurm-wlm`, `munge`); the README's test command installs them and
//! sets `GPUD_REQUIRE_SLURM=1`, which turns a missing Slurm into a failure. Elsewhere the test
//! says SKIPPED and passes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpud_tests::{Daemon, bin, wait_until};
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// The Slurm and munge programs the test runs.
const PROGRAMS: [&str; 7] = [
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "squeue",
    "scancel",
    "scontrol",
];

/// Where `program` is: on PATH, or in the sbin directories a user's PATH may leave out.
fn program(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&dirs)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn on_path(name: &str) -> bool {
    program(name).is_some()
}

/// A command for a Slurm or munge program (checked present by `cluster_possible`).
fn command(name: &str) -> Command {
    Command::new(program(name).unwrap_or_else(|| name.into()))
}

/// Whether this machine can run the cluster; says why not, or fails when it must.
fn cluster_possible() -> bool {
    let missing: Vec<&str> = PROGRAMS.into_iter().filter(|p| !on_path(p)).collect();
    let root = nix::unistd::geteuid().is_root();
    if missing.is_empty() && root {
        return true;
    }
    let why = if root {
        format!(
            "{} not installed (apt-get install slurm-wlm munge)",
            missing.join(", ")
        )
    } else {
        "not root (slurmd runs jobs as their users)".into()
    };
    assert!(
        std::env::var_os("GPUD_REQUIRE_SLURM").is_none(),
        "GPUD_REQUIRE_SLURM is set but the Slurm cluster cannot run: {why}"
    );
    eprintln!("SKIPPED: the Slurm cluster test: {why}");
    false
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn short_hostname() -> String {
    let name = fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    name.trim().split('.').next().unwrap_or_default().to_owned()
}

/// A one-node cluster in a temporary directory; every daemon it started is stopped on drop.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    fn start(gpud: &Daemon) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("gpud-slurm-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let dir = tmp.path().to_path_buf();
        // Jobs' processes (any uid) read scripts and write outputs here; munge wants its
        // socket's directory searchable.
        set_mode(&dir, 0o755);
        for sub in ["ctld", "d", "out"] {
            fs::create_dir(dir.join(sub)).unwrap();
        }
        set_mode(&dir.join("out"), 0o1777);
        let mut daemons = Vec::new();

        let key = dir.join("munge.key");
        fs::write(&key, rand_bytes(1024)).unwrap();
        set_mode(&key, 0o600);
        let munge_socket = dir.join("munge.sock");
        let munged = command("munged")
            .arg("--foreground")
            .arg("--force")
            .arg(format!("--socket={}", munge_socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
            .arg(format!("--log-file={}", dir.join("munged.log").display()))
            .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start munged");
        daemons.push(("munged", munged));
        assert!(
            wait_until(Duration::from_secs(10), || munge_socket.exists()),
            "munged did not start"
        );

        // The shipped scripts, behind wrappers that give them what /etc/default/gpud-slurm
        // gives them on a real host.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let gpudctl = bin("gpudctl");
        for script in ["prolog", "epilog", "task-prolog"] {
            let wrapper = dir.join(script);
            fs::write(
                &wrapper,
                format!(
                    "#!/bin/sh\nexport GPUD_SOCKET={}\nexport GPUDCTL={}\nexec {}\n",
                    gpud.socket.display(),
                    gpudctl.display(),
                    repo.join("slurm").join(format!("{script}.sh")).display()
                ),
            )
            .unwrap();
            set_mode(&wrapper, 0o755);
        }

        let host = short_hostname();
        let out = gpud.gpudctl(&["slurm", "gres", "--node", &host]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let gres_text = String::from_utf8(out.stdout).unwrap();
        let gres_conf: String = gres_text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let node_gres = gres_text
            .lines()
            .find_map(|l| l.strip_prefix("# Gres="))
            .unwrap_or_else(|| panic!("no Gres= in {gres_text}"));
        fs::write(dir.join("gres.conf"), gres_conf).unwrap();
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        fs::write(
            &conf,
            format!(
                "ClusterName=gpudtest\n\
                 SlurmctldHost={host}(127.0.0.1)\n\
                 SlurmUser=root\nSlurmdUser=root\n\
                 AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={}\n\
                 StateSaveLocation={d}/ctld\nSlurmdSpoolDir={d}/d\n\
                 SlurmctldPidFile={d}/ctld.pid\nSlurmdPidFile={d}/d.pid\n\
                 SlurmctldLogFile={d}/ctld.log\nSlurmdLogFile={d}/d.log\n\
                 SlurmctldPort={}\nSlurmdPort={}\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 SchedulerType=sched/backfill\n\
                 GresTypes=vram,gpucompute\n\
                 SlurmdParameters=config_overrides\nReturnToService=2\nMpiDefault=none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\n\
                 Prolog={d}/prolog\nEpilog={d}/epilog\nTaskProlog={d}/task-prolog\n\
                 PrologFlags=Alloc\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 Gres={node_gres} State=UNKNOWN\n\
                 PartitionName=main Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
                munge_socket.display(),
                free_port(),
                free_port(),
            ),
        )
        .unwrap();
        for (name, program) in [("slurmctld", "slurmctld"), ("slurmd", "slurmd")] {
            let child = command(program)
                .arg("-D")
                .arg("-f")
                .arg(&conf)
                .env("SLURM_CONF", &conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("start {program}: {e}"));
            daemons.push((name, child));
        }
        let mut cluster = Self {
            dir,
            conf,
            daemons,
            _tmp: tmp,
        };
        let idle = wait_until(Duration::from_secs(30), || {
            let out = cluster.slurm("sinfo", &["-h", "-o", "%t"]);
            out.trim() == "idle"
        });
        if !idle {
            panic!(
                "the node never came up idle:\n{}\n{}",
                cluster.log("ctld.log"),
                cluster.log("d.log")
            );
        }
        cluster.check_daemons();
        cluster
    }

    fn log(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    fn check_daemons(&mut self) {
        for (name, child) in &mut self.daemons {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{name} exited: {status}");
            }
        }
    }

    /// Runs a Slurm client command against this cluster; its stdout.
    fn slurm(&self, program: &str, args: &[&str]) -> String {
        let out = command(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Submits a batch job; its id.
    fn sbatch(&self, args: &[&str], script: &str) -> String {
        let output = format!("{}/out/job-%j.out", self.dir.display());
        let mut all = vec!["--parsable", "-o", &output];
        all.extend_from_slice(args);
        let wrap = format!("--wrap={script}");
        all.push(&wrap);
        let out = command("sbatch")
            .args(&all)
            .env("SLURM_CONF", &self.conf)
            .output()
            .expect("sbatch");
        assert!(
            out.status.success(),
            "sbatch: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn running(&self, job: &str) -> bool {
        !self
            .slurm("squeue", &["-h", "-j", job, "-o", "%i"])
            .trim()
            .is_empty()
    }

    fn state(&self, job: &str) -> String {
        let shown = self.slurm("scontrol", &["show", "job", "-o", job]);
        shown
            .split_whitespace()
            .find_map(|f| f.strip_prefix("JobState="))
            .unwrap_or("?")
            .to_owned()
    }

    fn job_output(&self, job: &str) -> String {
        fs::read_to_string(self.dir.join(format!("out/job-{job}.out"))).unwrap_or_default()
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.join("out").join(name)
    }

    /// Waits for jobs to end, and checks they completed.
    fn wait_done(&mut self, jobs: &[&str], limit: Duration) {
        let ended = wait_until(limit, || jobs.iter().all(|j| !self.running(j)));
        self.check_daemons();
        for j in jobs {
            assert!(
                ended && self.state(j) == "COMPLETED",
                "job {j}: {} (ended {ended})\n{}\nslurmd:\n{}",
                self.state(j),
                self.job_output(j),
                self.log("d.log")
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = command("scancel")
            .args(["--full", "-u", "root"])
            .env("SLURM_CONF", &self.conf)
            .output();
        // slurmd first (it ends its job steps), then the controller, then munge.
        for (_, child) in self.daemons.iter_mut().rev() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn rand_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0; n];
    let mut f = fs::File::open("/dev/urandom").unwrap();
    std::io::Read::read_exact(&mut f, &mut bytes).unwrap();
    bytes
}

fn budgets(gpud: &Daemon) -> Vec<Value> {
    let out = gpud.gpudctl(&["budget", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn status(gpud: &Daemon) -> Value {
    let out = gpud.gpudctl(&["status", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Nanosecond timestamps written by `date +%s%N` in a file's `WORD N` lines.
fn stamps(path: &Path, word: &str) -> Vec<u128> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(word)?.trim().parse().ok())
        .collect()
}

#[test]
fn slurm_jobs_lease_from_budgets_that_gpud_enforces() {
    if !cluster_possible() {
        return;
    }
    let _one = gpud_tests::exclusive();
    let mut gpud = Daemon::start("1x16GiB");
    let mut cluster = Cluster::start(&gpud);
    let g = bin("gpudctl");
    let g = g.display();

    // Two jobs of 10 GiB on a 16 GiB device: never both budgets at once.
    let a = cluster.sbatch(&["--gres=vram:10G"], "sleep 3");
    let b = cluster.sbatch(&["--gres=vram:10G"], "sleep 1");
    let mut seen = std::collections::BTreeSet::new();
    let both_done = wait_until(Duration::from_secs(60), || {
        let held = budgets(&gpud);
        let bytes: u64 = held.iter().map(|b| b["vram_bytes"].as_u64().unwrap()).sum();
        assert!(
            bytes <= 16 * GIB,
            "budgets over-commit the device: {held:?}"
        );
        seen.extend(held.iter().map(|b| b["job"].as_str().unwrap().to_owned()));
        !cluster.running(&a) && !cluster.running(&b)
    });
    assert!(both_done, "the 10 GiB jobs did not finish");
    cluster.wait_done(&[&a, &b], Duration::from_secs(5));
    assert_eq!(
        seen,
        [a.clone(), b.clone()].into(),
        "each job had its budget"
    );
    assert!(budgets(&gpud).is_empty(), "the epilogs ended them");

    // Inside an 8 GiB budget: two 6 GiB leases are serialized, 12 GiB is refused by name.
    let lease = |name: &str| {
        format!(
            "{g} run --vram 6GiB -- sh -c 'echo start $(date +%s%N); sleep 1; echo end $(date +%s%N)' > {} 2>&1",
            cluster.out(name).display()
        )
    };
    let script = format!(
        "env > {env}; {one} & {two} & wait; {g} run --vram 12GiB -- true 2> {big}; echo rc=$? >> {big}",
        env = cluster.out("env").display(),
        one = lease("one"),
        two = lease("two"),
        big = cluster.out("big").display(),
    );
    let job = cluster.sbatch(&["--gres=vram:8G"], &script);
    cluster.wait_done(&[&job], Duration::from_secs(60));
    let env = fs::read_to_string(cluster.out("env")).unwrap();
    assert!(
        env.contains("GPUD_BUDGET="),
        "the task prolog set the job's budget: {env}"
    );
    let (one, two) = (cluster.out("one"), cluster.out("two"));
    let spans: Vec<(u128, u128)> = [&one, &two]
        .iter()
        .map(|p| {
            let (s, e) = (stamps(p, "start "), stamps(p, "end "));
            assert!(
                s.len() == 1 && e.len() == 1,
                "{}: {:?}",
                p.display(),
                fs::read_to_string(p)
            );
            (s[0], e[0])
        })
        .collect();
    let (first, second) = if spans[0].0 < spans[1].0 {
        (spans[0], spans[1])
    } else {
        (spans[1], spans[0])
    };
    assert!(
        first.1 <= second.0,
        "6 + 6 GiB ran at once in an 8 GiB budget: {spans:?}"
    );
    let big = fs::read_to_string(cluster.out("big")).unwrap();
    assert!(
        !big.contains("rc=0") && big.contains("budget") && big.contains(&format!("job {job}")),
        "{big}"
    );

    // scancel frees the budget and what is leased from it.
    let job = cluster.sbatch(
        &["--gres=vram:4G"],
        &format!("{g} run --vram 2GiB -- sleep 300"),
    );
    let inside = wait_until(Duration::from_secs(30), || {
        status(&gpud)["leases"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l["within"].is_u64()))
    });
    assert!(
        inside,
        "the job's lease never appeared\n{}",
        cluster.job_output(&job)
    );
    // gpud restarts mid-job: the budget comes back from the journal and the job's gpudctl
    // re-adopts its lease inside it, so Slurm's view and gpud's agree again.
    gpud.kill_and_restart();
    let readopted = wait_until(Duration::from_secs(30), || {
        let s = status(&gpud);
        let held = budgets(&gpud);
        held.len() == 1
            && held[0]["job"] == job.as_str()
            && held[0]["used_bytes"] == 2 * GIB
            && s["leases"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|l| l["within"] == held[0]["budget"] && l["pid"] != 0)
            })
    });
    assert!(
        readopted,
        "after the restart: {:?}\n{}",
        status(&gpud),
        gpud.log()
    );
    assert!(cluster.running(&job), "the job survived gpud's restart");
    cluster.slurm("scancel", &[&job]);
    let freed = wait_until(Duration::from_secs(30), || {
        let s = status(&gpud);
        budgets(&gpud).is_empty() && s["leases"].as_array().is_some_and(Vec::is_empty)
    });
    assert!(freed, "scancel left {:?}", status(&gpud));
    assert_eq!(status(&gpud)["devices"][0]["reserved_bytes"], 0);

    // A critical job's leases overtake a normal job's that waited first.
    let go = cluster.out("go");
    let holder = format!(
        "{g} run --vram 256MiB --compute -- sh -c 'echo granted $(date +%s%N) > {}; while [ ! -e {} ]; do sleep 0.05; done'",
        cluster.out("held").display(),
        go.display()
    );
    let waiter = |name: &str| {
        format!(
            "{g} run --vram 256MiB --compute -- sh -c 'echo granted $(date +%s%N) > {}'",
            cluster.out(name).display()
        )
    };
    let gres = "--gres=vram:1G,gpucompute:1";
    let held = cluster.sbatch(&[gres], &holder);
    assert!(
        wait_until(Duration::from_secs(30), || cluster.out("held").exists()),
        "{}",
        cluster.job_output(&held)
    );
    let waiting = |n: usize| {
        wait_until(Duration::from_secs(30), || {
            status(&gpud)["waiters"]
                .as_array()
                .is_some_and(|w| w.len() == n)
        })
    };
    let normal = cluster.sbatch(&[gres], &waiter("normal"));
    assert!(
        waiting(1),
        "the normal job never waited: {}",
        cluster.job_output(&normal)
    );
    let critical = cluster.sbatch(&[gres, "--comment=gpud:critical"], &waiter("critical"));
    assert!(
        waiting(2),
        "the critical job never waited: {}",
        cluster.job_output(&critical)
    );
    let classes: Vec<String> = budgets(&gpud)
        .iter()
        .map(|b| b["class"].as_str().unwrap().to_owned())
        .collect();
    assert!(classes.contains(&"critical".to_owned()), "{classes:?}");
    fs::write(&go, "").unwrap();
    cluster.wait_done(&[&held, &normal, &critical], Duration::from_secs(60));
    let (n, c) = (
        stamps(&cluster.out("normal"), "granted "),
        stamps(&cluster.out("critical"), "granted "),
    );
    assert!(
        c[0] < n[0],
        "the critical job's lease came after the normal one's: {c:?} {n:?}"
    );
    assert!(budgets(&gpud).is_empty());
    cluster.check_daemons();
}
