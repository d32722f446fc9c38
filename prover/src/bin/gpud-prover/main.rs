//! `gpud-prover`: prove, generate parameters, demo. (The benchmarks are `gpud-bench`, in the
//! workspace's `bench/` crate.)

mod demo;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use gpud_prover::engine::SimulatedResident;
use gpud_prover::engine::{CudaEngine, CudaOptions};
use gpud_prover::lease::{GpudLeaser, LocalLeaser};
use gpud_prover::pipeline::{self, HostLeasing, PipelineConfig, PipelineReport};
use gpud_prover::warm::WarmOptions;
use gpud_prover::{CircuitSpec, CpuEngine, ParamsCache, ProverError};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "gpud-prover",
    version,
    about = "Groth16 prover that shares GPUs through gpud"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prove N proofs of P partitions each, every GPU phase under a gpud lease.
    Prove(ProveArgs),
    /// Generate (or check) the cached parameters of a circuit.
    Params(ParamsArgs),
    /// Start gpud and several provers sharing its device; show `gpudctl status` and a summary.
    Demo(demo::DemoArgs),
}

#[derive(Args, Clone)]
struct CircuitArgs {
    /// Circuit: synthetic, poseidon, sha256 or porep.
    #[arg(long, default_value = "synthetic")]
    circuit: String,
    /// Parameter cache directory [default: $GPUD_PROVER_PARAMS, $XDG_CACHE_HOME/gpud-prover,
    /// ~/.cache/gpud-prover or /var/tmp/gpud-prover].
    #[arg(long)]
    params_dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl CircuitArgs {
    fn cache(&self) -> ParamsCache {
        ParamsCache::new(
            self.params_dir
                .clone()
                .unwrap_or_else(ParamsCache::default_dir),
        )
    }
}

use gpud_prover::engine::EngineChoice as EngineArg;
use gpud_prover::engine::G2Placement;

#[derive(Args, Clone, Copy)]
struct EngineArgs {
    /// Engine of the GPU phase: auto (cuda when a driver and a GPU are present), cuda or cpu.
    #[arg(long, value_enum, default_value = "auto")]
    engine: EngineArg,
    /// CUDA engine: keep the proving key's G1 bases on the device under a long-lived VRAM-only
    /// lease (else every GPU phase uploads them under its own lease).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    resident_bases: bool,
    /// CUDA engine without resident bases: page-lock the proving key's G1 bases in host memory
    /// once, so every phase's upload of them is a direct DMA.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pin_bases: bool,
    /// CUDA engine: where the G2 MSM for B runs. gpu: inside the GPU phase, under its lease
    /// (its bases resident with the G1 ones); cpu: in the CPU tail after the lease (small
    /// cards, CPU-rich hosts); auto: gpu when the phase with it fits the smallest visible
    /// GPU's memory and the GPU was no slower at a G2 MSM than the host's cores when the
    /// pipeline timed both before its first proof, else cpu.
    #[arg(long, value_enum, default_value = "auto")]
    g2: G2Placement,
}

impl EngineArgs {
    fn cuda(&self) -> Result<CudaEngine> {
        CudaEngine::new(CudaOptions {
            resident_bases: self.resident_bases,
            pin_bases: self.pin_bases,
            g2: self.g2,
            vram_budget: None,
            c_on_device: true,
        })
        .context("starting the CUDA engine (use --engine cpu on machines without a GPU)")
    }
}

#[derive(Args)]
struct ProveArgs {
    #[command(flatten)]
    common: CircuitArgs,
    #[command(flatten)]
    engine: EngineArgs,
    /// log2 of the constraint count (the evaluation domain).
    #[arg(long, short = 'k')]
    log_size: u32,
    /// Partitions per proof (one Groth16 proof each).
    #[arg(long, default_value_t = 1)]
    partitions: usize,
    /// Number of proofs.
    #[arg(long, default_value_t = 1)]
    proofs: usize,
    /// Lease class: critical, high, normal or background.
    #[arg(long, default_value = "normal")]
    class: String,
    /// gpud's socket.
    #[arg(long, env = "GPUD_SOCKET", default_value = "/run/gpud/gpud.sock")]
    socket: PathBuf,
    /// Run without gpud: leases come from an in-process lock (one process per device!).
    #[arg(long)]
    no_daemon: bool,
    /// Partitions this process may synthesize at once: a cap. With host leases gpud admits
    /// each one (its host memory and a CPU), so it decides how many of all processes' run.
    #[arg(long, default_value_t = 1)]
    synthesis_workers: usize,
    /// Host leases (docs/HOST.md): each partition leases its host memory (from synthesis to
    /// the end of its tail) and a CPU for its synthesis, which runs pinned there; each CPU
    /// tail leases its CPUs; the process leases its resident footprint. auto: on when gpud
    /// books host resources (its welcome lists the feature "host"), off without a daemon or
    /// with an older one. off: per-process bounds only, as before.
    #[arg(long, value_enum, default_value = "auto")]
    host_leases: HostLeasesArg,
    /// With host leases: CPUs each CPU tail leases [default: 1 when the G2 MSM runs in the
    /// GPU phase, else every CPU the process may run on].
    #[arg(long)]
    tail_cpus: Option<u32>,
    /// Witness seed (partition j uses seed + j).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Generate missing parameters instead of failing.
    #[arg(long)]
    generate: bool,
    /// Each GPU phase's lease reserves at least this much VRAM (e.g. 7GiB), as a larger
    /// partition would on a GPU [default: what the engine needs].
    #[arg(long, value_parser = parse_size)]
    phase_vram: Option<u64>,
    /// CPU engine on simulated devices: lease this much VRAM for resident bases (e.g. 2GiB),
    /// as the CUDA engine does for the bases it keeps on the GPU; phases while they are not
    /// loaded lease it on top of their own memory.
    #[arg(long, value_parser = parse_size)]
    resident_vram: Option<u64>,
    /// Keep resident bases in an evictable lease: gpud may reclaim the memory for a request
    /// that needs it; the bases go back up when they fit again. `false`: a plain lease held
    /// for the whole run.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    evictable_bases: bool,
    /// After an eviction, how long a phase waits for its bases to fit again before it runs
    /// with its own upload (e.g. 500ms, 2s).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    rewarm_wait: std::time::Duration,
}

/// `--host-leases`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum HostLeasesArg {
    /// On when the daemon books host resources.
    Auto,
    /// Always (a daemon without host resources refuses the leases).
    On,
    /// Never: per-process bounds only.
    Off,
}

fn parse_duration(s: &str) -> std::result::Result<std::time::Duration, String> {
    gpud_client::proto::parse_duration(s)
}

fn parse_size(s: &str) -> std::result::Result<u64, String> {
    gpud_client::proto::parse_size(s).map_err(|e| e.to_string())
}

#[derive(Args)]
struct ParamsArgs {
    #[command(flatten)]
    common: CircuitArgs,
    /// log2 of the constraint count.
    #[arg(long, short = 'k')]
    log_size: u32,
    /// Only report whether valid parameters are cached; never generate.
    #[arg(long)]
    check: bool,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Prove(a) => prove(a),
        Command::Params(a) => params(a),
        Command::Demo(a) => demo::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpud-prover: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn params(a: ParamsArgs) -> Result<()> {
    let spec = CircuitSpec::parse(&a.common.circuit, a.log_size)?;
    let cache = a.common.cache();
    let start = Instant::now();
    let generated = if a.check {
        cache
            .load(&spec)
            .with_context(|| format!("parameters for {spec}"))?;
        false
    } else {
        match cache.load(&spec) {
            Ok(_) => false,
            Err(ProverError::ParamsMissing { .. } | ProverError::ParamsCorrupt { .. }) => {
                cache
                    .load_or_generate_shown(&spec, a.common.json)
                    .with_context(|| format!("parameters for {spec}"))?;
                true
            }
            Err(e) => return Err(e).context(format!("loading parameters for {spec}")),
        }
    };
    let meta = cache.meta(&spec)?;
    let path = cache.params_path(&spec);
    if a.common.json {
        println!(
            "{}",
            serde_json::json!({
                "circuit": spec.kind().name(), "log_size": spec.log_size(),
                "path": path, "generated": generated, "bytes": meta.bytes,
                "sha256": meta.sha256, "generation_secs": meta.generation_secs,
                "secs": start.elapsed().as_secs_f64(),
            })
        );
    } else {
        println!(
            "{spec}: {} {} ({:.1} MiB, generation took {:.1} s)",
            if generated {
                "generated"
            } else {
                "cached and valid at"
            },
            path.display(),
            meta.bytes as f64 / (1 << 20) as f64,
            meta.generation_secs
        );
    }
    Ok(())
}

fn prove(a: ProveArgs) -> Result<()> {
    if a.partitions == 0 || a.proofs == 0 {
        bail!("--partitions and --proofs must be at least 1");
    }
    let spec = CircuitSpec::parse(&a.common.circuit, a.log_size)?;
    a.class
        .parse::<gpud_client::Class>()
        .map_err(anyhow::Error::from)
        .context("--class")?;
    let json = a.common.json;
    // Connect before the (possibly slow) parameter load, so a missing daemon is reported at once.
    let leaser = if a.no_daemon {
        None
    } else {
        Some(GpudLeaser::connect(&a.socket)?)
    };
    // The engine before the (possibly slow) parameter load: a missing GPU is reported at once.
    let cuda = match a.engine.engine.resolve() {
        EngineArg::Cuda => Some(a.engine.cuda()?),
        _ => None,
    };
    let cache = a.common.cache();
    let key = if a.generate {
        cache.load_or_generate_shown(&spec, json)
    } else {
        cache.load(&spec)
    }
    .with_context(|| format!("parameters for {spec}"))?;
    let cfg = PipelineConfig {
        spec,
        partitions: a.partitions,
        proofs: a.proofs,
        synthesis_workers: a.synthesis_workers,
        class: a.class.clone(),
        seed: a.seed,
        label: format!("gpud-prover[{}]", std::process::id()),
        min_phase_vram: a.phase_vram.unwrap_or(0),
        warm: WarmOptions {
            evictable: a.evictable_bases,
            rewarm_wait: a.rewarm_wait,
        },
        host: HostLeasing {
            enabled: match (a.host_leases, &leaser) {
                (HostLeasesArg::On, _) => true,
                (HostLeasesArg::Off, _) | (HostLeasesArg::Auto, None) => false,
                (HostLeasesArg::Auto, Some(l)) => l.offers_host(),
            },
            tail_cpus: a.tail_cpus.unwrap_or(0),
        },
    };
    let jobs = (a.partitions * a.proofs) as u64;
    let pb = if json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(jobs).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} partitions ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
    };
    pb.set_message(format!("proving {spec}"));
    let progress = |_: &pipeline::PartitionRecord| pb.inc(1);
    let report = match &cuda {
        Some(cuda) => match leaser {
            Some(l) => pipeline::run(cuda, &l, &key, &cfg, &progress)?,
            None => pipeline::run(cuda, &local_cuda_leaser()?, &key, &cfg, &progress)?,
        },
        None => {
            let cpu = SimulatedResident::new(CpuEngine, a.resident_vram.unwrap_or(0));
            match leaser {
                Some(l) => pipeline::run(&cpu, &l, &key, &cfg, &progress)?,
                None => pipeline::run(&cpu, &LocalLeaser::default(), &key, &cfg, &progress)?,
            }
        }
    };
    pb.finish_and_clear();
    print_report(&report, json)?;
    if !report.all_verified {
        bail!("some proofs did not verify");
    }
    Ok(())
}

/// Without gpud, leases name the first visible GPU (the CUDA engine opens what a lease names).
fn local_cuda_leaser() -> Result<LocalLeaser> {
    let first = gpud_cuda::driver::list_devices()?
        .into_iter()
        .next()
        .context("no CUDA device is visible")?;
    Ok(LocalLeaser::on_device(first.uuid, first.ordinal as u32))
}

fn print_report(r: &PipelineReport, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
        return Ok(());
    }
    println!(
        "{} proofs × {} partitions of {}@2^{} on the {} engine, {:.2} s wall, lease {:.1} MiB",
        r.proofs,
        r.partitions,
        r.circuit,
        r.log_size,
        r.engine,
        r.wall,
        r.vram_bytes as f64 / (1 << 20) as f64
    );
    println!("  stage        mean s    max s   total s");
    for (name, s) in [
        ("synthesis", r.synthesis),
        ("host wait", r.host_wait),
        ("lease wait", r.lease_wait),
        ("GPU phase", r.gpu_phase),
        ("CPU tail", r.cpu_tail),
    ] {
        println!(
            "  {name:<11}{:>8.3} {:>8.3} {:>9.3}",
            s.mean, s.max, s.total
        );
    }
    println!("  GPU-phase occupancy {:.0} %", 100.0 * r.gpu_occupancy);
    if let Some(h) = &r.host {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        println!(
            "  host leases: {:.1} MiB per partition, resident {:.1} MiB ({:.1} MiB page-locked), host wait mean {:.3} s max {:.3} s",
            mib(h.partition()),
            mib(r.host_resident.0),
            mib(r.host_resident.1),
            r.host_wait.mean,
            r.host_wait.max
        );
    }
    if let Some(w) = &r.resident {
        println!(
            "  resident bases {:.1} MiB ({}): {} upload(s) in {:.3} s, {} eviction(s), {} cold phase(s)",
            w.vram_bytes as f64 / (1 << 20) as f64,
            if w.evictable { "evictable" } else { "held" },
            w.loads,
            w.load_seconds,
            w.evictions,
            w.cold_phases
        );
    }
    let n = r.partitions_detail.len();
    if r.all_verified {
        println!("all {n} partition proofs verified");
    } else {
        let ok = r.partitions_detail.iter().filter(|p| p.verified).count();
        println!(
            "VERIFICATION FAILED: {ok} of {} partition proofs verified",
            r.proofs * r.partitions
        );
    }
    Ok(())
}
