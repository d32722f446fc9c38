//! The farm driver (the sharing benchmark) end to end on the CPU: gpud on simulated devices, the
//! CPU engine, a simulated device memory shared by the prover processes. Checks the
//! orchestration (every mode at every N, the priority runs, placement over two devices), the
//! out-of-memory accounting, the JSON, the tables and the plot.

use std::path::Path;
use std::process::Command;

use gpud_bench::farm::analysis::{CellMetrics, FarmResults};

fn cell<'a>(cells: &'a [CellMetrics], name: &str) -> &'a CellMetrics {
    cells
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no cell {name}"))
}

#[test]
fn farm_runs_every_mode_counts_out_of_memory_and_reports() {
    let (out, stdout, r) = farm(|cmd| {
        cmd.args(["farm", "--simulate", "--sim-gpus", "2"])
            .args(["--log-size", "10", "--critical-log-size", "8"])
            .args(["--ns", "1,2", "--duration", "1.5", "--calibrate-secs", "1"])
            .args(["--modes", "gpud,gpud2,gpud-warm,ideal,flock,none"])
            // Warm bases of 3 GiB each; the critical partition's 5 GiB fit beside a phase but,
            // under gpud-warm, only once warm bases are given back.
            .args(["--warm-vram", "3GiB", "--critical-phase-vram", "5GiB"])
            // Two 10 GiB phases do not fit on the 16 GiB device: uncoordinated provers collide.
            .args(["--phase-vram", "10GiB", "--card", "16GiB"])
            .args(["--priority-n", "2", "--priority-duration", "2.5"])
            .args(["--critical-every", "0.25"])
            .args(["--multi-gpu", "--multi-ns", "2"])
    });
    assert!(r.host.simulated);
    assert_eq!(r.host.gpus.len(), 2);
    let cal = r.calibration.as_ref().expect("calibration");
    assert!(cal.proofs > 0 && cal.phase.mean > 0.0);
    // The modeled tail follows the calibrated phase (0.28 of it by default).
    assert!((r.config.tail_secs - 0.28 * cal.phase.mean).abs() < 1e-6);
    assert!(r.config.pad_bytes > 0 && r.config.formula_bytes + r.config.pad_bytes == 10 << 30);

    assert_eq!(r.cells.len(), 12);
    for mode in ["gpud", "gpud2", "gpud-warm", "ideal", "flock", "none"] {
        for n in [1, 2] {
            let c = cell(&r.cells, &format!("{mode}-n{n}"));
            assert_eq!((c.mode.as_str(), c.n), (mode, n));
            assert!(c.normal.proofs > 0, "{mode}-n{n}: {c:?}");
            assert!(c.startup_errors.is_empty(), "{mode}-n{n}: {c:?}");
            // The matrix is about one GPU, also when gpud sees two.
            assert_eq!(
                c.devices.iter().filter(|d| d.phases > 0).count(),
                1,
                "{c:?}"
            );
            if mode != "none" {
                assert_eq!(
                    (c.normal.oom, c.normal.failed),
                    (0, 0),
                    "{mode}-n{n}: {c:?}"
                );
            }
            if mode == "ideal" {
                assert_eq!(c.normal.processes, 1);
                assert_eq!(c.normal.lanes, n);
            } else {
                assert_eq!(c.normal.processes, n);
            }
        }
    }
    // A single uncoordinated prover never collides; two do, and are counted, not crashed.
    assert_eq!(cell(&r.cells, "none-n1").normal.oom, 0);
    let none2 = cell(&r.cells, "none-n2");
    assert!(none2.normal.oom > 0, "{none2:?}");
    assert_eq!(none2.normal.failed, none2.normal.oom);
    // With a lock, two provers wait for each other; so they do under gpud with two compute
    // slots, because two 10 GiB phases do not fit: the VRAM lease keeps them apart.
    for name in ["gpud-n2", "gpud2-n2", "ideal-n2", "flock-n2"] {
        let c = cell(&r.cells, name);
        assert!(c.normal.wait.max > 0.0, "{name}");
        assert_eq!(c.phase_overlap, 0.0, "{name}: {c:?}");
    }

    // Warm provers: the bases went up once per process before the window, and the phases ran
    // warm (nothing asked for the memory); the other modes keep no warm state.
    for n in [1, 2] {
        let c = cell(&r.cells, &format!("gpud-warm-n{n}"));
        let w = c.warm.as_ref().expect("warm metrics");
        assert_eq!(w.vram_bytes, 3 << 30, "{w:?}");
        assert!(w.loads as usize >= n && w.warm_phases > 0, "{w:?}");
        assert_eq!((w.evictions, w.cold_phases), (0, 0), "{w:?}");
        assert!(cell(&r.cells, &format!("gpud-n{n}")).warm.is_none());
    }
    assert_eq!(r.priority.len(), 4);
    for lock in ["gpud", "gpudc", "gpudc-warm", "flock"] {
        let p = cell(&r.priority, &format!("priority-{lock}"));
        let c = p.critical.as_ref().expect("critical prover");
        assert!(c.proofs > 0 && c.wait.n > 0, "{p:?}");
        assert_eq!(
            (c.oom, c.failed, p.normal.oom, p.normal.failed),
            (0, 0, 0, 0)
        );
        assert_eq!(p.normal.processes, 2);
    }
    // One exclusive slot: the critical proof's phase never runs beside a normal one. With a
    // critical slot it does (the normal provers keep the device busy and the small proof's
    // VRAM fits beside a 10 GiB phase), and still nothing runs out of memory.
    assert_eq!(cell(&r.priority, "priority-gpud").phase_overlap, 0.0);
    let gpudc = cell(&r.priority, "priority-gpudc");
    assert!(gpudc.phase_overlap > 0.0, "{gpudc:?}");
    // Beside a phase, the critical partition needs memory the warm bases hold: they are
    // reclaimed with notice and given back, never revoked, and put back up later.
    let warm = cell(&r.priority, "priority-gpudc-warm");
    let w = warm.warm.as_ref().expect("warm metrics");
    assert!(w.evictions > 0, "{w:?}");
    assert_eq!(w.reclaim_answer.n, w.evictions as usize, "{w:?}");
    assert!(w.loads > 2, "never put back up: {w:?}");

    assert_eq!(r.multi_gpu.len(), 2);
    let one = cell(&r.multi_gpu, "multi-one-n2");
    let any = cell(&r.multi_gpu, "multi-any-n2");
    assert_eq!(one.devices.iter().filter(|d| d.phases > 0).count(), 1);
    assert_eq!(any.devices.iter().filter(|d| d.phases > 0).count(), 2);
    assert_eq!((any.normal.oom, any.normal.failed), (0, 0));

    // Targets, tables (printed last), per-cell raw reports, the plot.
    assert!(
        r.targets
            .iter()
            .any(|t| t.name.starts_with("gpud throughput"))
    );
    assert!(r.targets.iter().any(|t| t.name.starts_with("2 GPUs")));
    let md = std::fs::read_to_string(out.path().join("farm.md")).unwrap();
    assert!(md.contains("| mode | N | partitions/min |"), "{md}");
    assert!(md.contains("| lock | critical proofs |"), "{md}");
    assert!(md.contains("| placement | GPUs | N |"), "{md}");
    assert!(md.contains("| cell | warm lease MiB | loads |"), "{md}");
    // Where the phase's time goes, from the engine's own split (the CPU engine reports H and
    // the MSMs too): the parts fit inside the phase held.
    assert!(md.contains("| mode | N | phase held | engine |"), "{md}");
    for c in &r.cells {
        if c.normal.proofs == 0 {
            continue;
        }
        let p = c
            .normal
            .phase_parts
            .unwrap_or_else(|| panic!("{}: no split", c.name));
        // The split is medians part by part, and medians do not add up: each part is within
        // the engine's time in every phase, so each median is within the engine's median, but
        // their sum need not be (a loaded machine spreads the parts and broke `h + msms`).
        assert!(
            p.engine > 0.0 && p.h <= p.engine && p.msms <= p.engine,
            "{}: {p:?}",
            c.name
        );
        assert!(p.engine <= c.normal.phase.max, "{}: {p:?}", c.name);
    }
    assert!(
        stdout.trim_end().ends_with(md.trim_end()),
        "tables are not last"
    );
    for c in r.cells.iter().chain(&r.priority).chain(&r.multi_gpu) {
        let raw = out.path().join("cells").join(format!("{}.json", c.name));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&raw).unwrap()).unwrap();
        assert!(v["processes"].as_array().is_some_and(|p| !p.is_empty()));
    }
    assert_png(&out.path().join("farm.png"));
    let again = out.path().join("again.png");
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_gpud-bench"))
            .arg("farm-plot")
            .arg(out.path().join("farm.json"))
            .arg(&again),
    );
    assert_png(&again);
}

/// Runs `gpud-bench` with the arguments `args` gives it, writing to a fresh output directory
/// (returned) from a fresh work directory; returns its stdout (printed) and `farm.json`.
fn farm(
    args: impl FnOnce(&mut Command) -> &mut Command,
) -> (tempfile::TempDir, String, FarmResults) {
    let out = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpud-bench"));
    args(&mut cmd)
        .arg("--out")
        .arg(out.path())
        .arg("--work-dir")
        .arg(work.path());
    let run = run_ok(&mut cmd);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    println!("{stdout}");
    let text = std::fs::read_to_string(out.path().join("farm.json")).unwrap();
    let r = serde_json::from_str(&text).unwrap();
    (out, stdout, r)
}

/// Runs `cmd` to its end and fails the test, with its output, unless it succeeded.
fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("running gpud-bench");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the plot needs a TrueType font: install fonts-dejavu-core)",
            path.display()
        )
    });
    assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

/// A worker asked to pin itself near a GPU that NVML cannot name (here: no NVML at all, or no
/// such GPU) says why in its report and proves on, unpinned.
#[test]
fn a_worker_that_cannot_pin_says_why_and_proves_on() {
    let bundle = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_gpud-bench");
    run_ok(
        Command::new(exe)
            .args(["farm-prepare", "--log-size", "8", "--witnesses", "1"])
            .arg("--bundle")
            .arg(bundle.path()),
    );
    let run = run_ok(
        Command::new(exe)
            .args(["farm-worker", "--log-size", "8", "--witnesses", "1"])
            .args(["--lock", "none", "--engine", "cpu", "--duration", "0.5"])
            .args(["--pin-near", "GPU-00000000-0000-0000-0000-000000000000"])
            .arg("--bundle")
            .arg(bundle.path()),
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    let report: gpud_bench::farm::worker::WorkerReport = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("a report");
    let why = match report.pinned {
        Some(Err(why)) => why,
        other => panic!("pinning should have failed and said why: {other:?}"),
    };
    assert!(why.contains("NVML"), "{why}");
    assert!(
        report.records.iter().any(|r| r.tail_end.is_some()),
        "no proof: {:?}",
        report.records
    );
}

/// The host pair on the CPU (no cgroup): per-process bounds against gpud host leases, every
/// partition synthesized anew. Under gpud each synthesis waited for its lease and ran on the
/// CPU it named; the host metrics (peak RSS summed over the provers, kills) are filled in, and
/// the tables and the HOST lines show them.
#[test]
fn farm_host_pair_compares_per_process_bounds_with_gpud_host_leases() {
    let (out, stdout, r) = farm(|cmd| {
        cmd.args(["farm", "--simulate", "--no-matrix", "--priority-n", "0"])
            .args(["--log-size", "10", "--calibrate-secs", "1"])
            .args(["--host-n", "2", "--host-lanes", "2", "--host-duration", "2"])
    });
    assert!(r.cells.is_empty() && r.priority.is_empty());
    assert_eq!(r.host_cells.len(), 2);
    for (name, leases) in [("host-bounds-n2", false), ("host-gpud-n2", true)] {
        let c = cell(&r.host_cells, name);
        let h = c.host.as_ref().expect("host metrics");
        assert_eq!(
            (h.host_leases, h.lanes, h.limit_bytes),
            (leases, 2, None),
            "{c:?}"
        );
        assert!(c.normal.proofs > 0, "{c:?}");
        assert!(c.startup_errors.is_empty(), "{c:?}");
        assert_eq!(
            (c.normal.oom, c.normal.failed, h.killed),
            (0, 0, 0),
            "{c:?}"
        );
        assert!(h.partition_bytes > 0 && h.rss_samples > 0, "{h:?}");
        // Two provers' resident memory: each holds at least its key and a partition.
        assert!(h.peak_rss_bytes > 2 * h.partition_bytes, "{h:?}");
        assert!(h.synthesis.n > 0 && h.synthesis.mean > 0.0, "{h:?}");
        assert_eq!(h.cgroup_oom_kills, None);
    }
    // The raw reports: under gpud every synthesis ran on a CPU its lease named; without host
    // leases none was named.
    for (name, leases) in [("host-bounds-n2", false), ("host-gpud-n2", true)] {
        let raw: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.path().join("cells").join(format!("{name}.json")))
                .unwrap(),
        )
        .unwrap();
        let records: Vec<&serde_json::Value> = raw["processes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["report"]["records"].as_array().unwrap())
            .filter(|r| r["synth_start"].is_number())
            .collect();
        assert!(!records.is_empty(), "{name}");
        for rec in records {
            let cpus = rec["synthesis_cpus"].as_array().unwrap();
            assert_eq!(cpus.len(), usize::from(leases), "{name}: {rec}");
        }
    }
    let md = std::fs::read_to_string(out.path().join("farm.md")).unwrap();
    assert!(md.contains("| cell | memory limit | host leases |"), "{md}");
    assert!(
        stdout.contains("HOST host-gpud-n2 limit=none host_leases=true"),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with(md.trim_end()),
        "tables are not last"
    );
}

/// `--host-limit` where cgroups cannot be made fails at once, naming what is wrong.
#[test]
fn a_host_limit_without_a_writable_cgroup_tree_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpud-bench"))
        .args(["farm", "--simulate", "--no-matrix", "--priority-n", "0"])
        .args(["--host-n", "2", "--host-limit", "1GiB"])
        .arg("--cgroup-root")
        .arg(root.path())
        .arg("--out")
        .arg(root.path().join("out"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--host-limit"), "{stderr}");
    assert!(stderr.contains("not a cgroup v2 hierarchy"), "{stderr}");
}

/// The G2 stage on the CPU: gpud provers with B_G2 in the phase (computed on the host under the
/// lease: the CPU engine has no G2 of its own) against B_G2 in the CPU tail, N = 1 and 2. Every
/// proof verified after its B_G2 equalled the bundle's precomputed sum; the G2 table, the JSON
/// and the G2 lines carry throughput and CPU utilisation.
#[test]
fn farm_g2_stage_compares_g2_in_the_phase_with_g2_in_the_tail() {
    let (out, stdout, r) = farm(|cmd| {
        cmd.args(["farm", "--simulate", "--no-matrix", "--priority-n", "0"])
            .args([
                "--log-size",
                "10",
                "--calibrate-secs",
                "1",
                "--witnesses",
                "1",
            ])
            .args(["--g2-compare", "gpu,cpu", "--g2-ns", "1,2"])
            .args([
                "--g2-duration",
                "1.5",
                "--g2-cpu-duration",
                "2",
                "--tail-ms",
                "0",
            ])
    });
    assert!(r.cells.is_empty() && r.priority.is_empty() && r.host_cells.is_empty());
    assert_eq!(r.g2_cells.len(), 4);
    for n in [1, 2] {
        for (g2, window) in [("gpu", 1.5), ("cpu", 2.0)] {
            let c = cell(&r.g2_cells, &format!("g2-{g2}-n{n}"));
            assert_eq!((c.g2.name(), c.n, c.duration), (g2, n, window), "{c:?}");
            assert!(c.startup_errors.is_empty(), "{c:?}");
            assert!(c.normal.proofs > 0, "{c:?}");
            assert_eq!((c.normal.oom, c.normal.failed), (0, 0), "{c:?}");
            assert!(c.normal.per_minute_lanes > 0.0, "{c:?}");
            // Every verified proof computed its own B_G2.
            assert_eq!(c.normal.g2.n, c.normal.proofs, "{c:?}");
            let cpu = c.cpu.expect("cpu metrics");
            let host = cpu.host.expect("/proc/stat over the window");
            assert!(
                host.busy > 0.0 && host.busy <= 1.0 && host.cores >= 1,
                "{cpu:?}"
            );
            assert!(cpu.provers_secs > 0.0, "{cpu:?}");
            let parts = c.normal.phase_parts.expect("phase parts");
            // In the phase, the G2 MSM is part of it; in the tail, it is not.
            assert_eq!(parts.msm_b_g2 > 0.0, g2 == "gpu", "{c:?}");
        }
    }
    // The bundle carries the G2 query; the workers' reports say where G2 ran.
    let raw: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("cells").join("g2-cpu-n2.json")).unwrap(),
    )
    .unwrap();
    for p in raw["processes"].as_array().unwrap() {
        assert_eq!(p["report"]["g2"], "cpu", "{p}");
        assert!(p["report"]["cpu_secs"].as_f64().is_some_and(|s| s > 0.0));
    }
    let md = std::fs::read_to_string(out.path().join("farm.md")).unwrap();
    assert!(md.contains("| G2 | N | partitions/min (lanes) |"), "{md}");
    assert!(md.contains("| cpu | 2 |"), "{md}");
    assert!(stdout.contains("G2 g2-gpu-n1 g2=gpu n=1"), "{stdout}");
    assert!(stdout.contains("host CPU"), "{stdout}");
}

/// A G2 mode the farm does not know is refused before anything starts.
#[test]
fn an_unknown_g2_mode_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpud-bench"))
        .args(["farm", "--simulate", "--g2-compare", "gpu,fpga"])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fpga") && stderr.contains("--g2-compare"),
        "{stderr}"
    );
}
