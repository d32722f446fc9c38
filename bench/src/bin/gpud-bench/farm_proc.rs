//! The processes the farm driver starts (hidden subcommands of `gpud-bench`):
//!
//! - `farm-worker`: one prover process (see `gpud_bench::farm::worker`); prints a `ready` JSON
//!   line once set up, waits for `go START END` on stdin (`--sync`) or starts at once
//!   (`--duration`), and prints its report as one JSON line at the end of the window.
//! - `farm-prepare`: the workload bundle (key from the fast parameter generator, witnesses).
//! - `farm-ballast`: holds all but `--leave` bytes of every GPU, as a process without a lease.
//! - `farm-gpud`: the gpud daemon from the library, for when no `gpud` binary is at hand.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use gpud_bench::baseline::{FlockLeaser, UnlockedLeaser};
use gpud_bench::farm::bundle::{self, FarmWitness};
use gpud_bench::farm::worker::{self, PhaseMemory, Window, WorkerOptions, WorkerReport, Workload};
use gpud_bench::farm::{FarmError, G2Mode, LockKind};
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_prover::engine::SimulatedResident;
use gpud_prover::engine::{CudaEngine, CudaOptions, Engine, G2Placement, process_device};
use gpud_prover::lease::{GpudLeaser, HostNeeds, LeaseRequest, Leaser, LocalLeaser};
use gpud_prover::paramgen::{self, Backend, Toxic};
use gpud_prover::warm::WarmOptions;
use gpud_prover::{CircuitSpec, CpuEngine};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;

use crate::{EngineArg, size};

/// Lock choice on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LockArg {
    /// gpud leases.
    Gpud,
    /// One in-process lock per GPU shared by the lanes (the ideal).
    Local,
    /// A per-GPU lock file (bellperson style).
    Flock,
    /// No coordination.
    None,
}

impl From<LockArg> for LockKind {
    fn from(l: LockArg) -> Self {
        match l {
            LockArg::Gpud => LockKind::Gpud,
            LockArg::Local => LockKind::Local,
            LockArg::Flock => LockKind::Flock,
            LockArg::None => LockKind::None,
        }
    }
}

#[derive(Args)]
pub struct WorkerArgs {
    /// Bundle directory (written by farm-prepare).
    #[arg(long)]
    bundle: PathBuf,
    /// Circuit.
    #[arg(long, default_value = "synthetic")]
    circuit: String,
    /// log2 of the constraint count.
    #[arg(long, short = 'k')]
    log_size: u32,
    /// Witnesses of the bundle to use in turn.
    #[arg(long, default_value_t = 2)]
    witnesses: usize,
    /// How the GPU is shared.
    #[arg(long, value_enum)]
    lock: LockArg,
    /// Worker threads in this process.
    #[arg(long, default_value_t = 1)]
    lanes: usize,
    /// Lease class.
    #[arg(long, default_value = "normal")]
    class: String,
    /// Device memory allocated and touched inside each GPU phase's lease, e.g. 4.5GiB.
    #[arg(long, default_value = "0", conflicts_with = "phase_vram")]
    vram_pad: String,
    /// Pad each GPU phase up to this footprint: the pad is this minus the engine's VRAM
    /// formula of the phase (none when the formula is larger).
    #[arg(long)]
    phase_vram: Option<String>,
    /// The modeled CPU tail, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    tail_ms: f64,
    /// Start one proof every this many seconds per lane (a critical prover).
    #[arg(long)]
    interval: Option<f64>,
    /// gpud placement of the phase leases: a device UUID (default: any device).
    #[arg(long)]
    device: Option<String>,
    /// The device of the local, flock and none locks: UUID:INDEX [default: the first CUDA
    /// device; with the CPU engine, cpu:0].
    #[arg(long)]
    gpu: Option<String>,
    /// gpud's socket.
    #[arg(long, env = "GPUD_SOCKET", default_value = "/run/gpud/gpud.sock")]
    socket: PathBuf,
    /// Directory of the flock lock files.
    #[arg(long, default_value = "/tmp/gpud-farm/locks")]
    lock_dir: PathBuf,
    /// Simulated device memory, DIR:SIZE (one state file per device in DIR).
    #[arg(long)]
    sim_vram: Option<String>,
    /// gpud mode with the CUDA engine: a VRAM-only lease of this size per device, held for the
    /// process's life, for its CUDA context.
    #[arg(long, default_value = "0")]
    context_vram: String,
    /// gpud mode: keep the proving key's bases on the device as warm state, in an evictable
    /// lease for the process's life (the phase leases are then the footprint less the bases);
    /// a reclaim notice frees them, and they go back up when they fit.
    #[arg(long)]
    warm: bool,
    /// With --warm and the CPU engine: the simulated bases' size [default: the formula's
    /// resident bases].
    #[arg(long, requires = "warm")]
    warm_vram: Option<String>,
    /// Synthesize each attempt's witness anew from the circuit (the bundle witness's seed, so
    /// its G2 sum still fits): real synthesis time and host memory, held until the attempt's
    /// proof is made (the host modes).
    #[arg(long)]
    synthesize: bool,
    /// With --synthesize and --lock gpud: lease the host work from gpud (docs/HOST.md): each
    /// attempt's memory from its synthesis to its tail's end, a CPU for the synthesis and one
    /// for the tail (the lane's thread pinned there), and the process's resident footprint.
    #[arg(long, requires = "synthesize")]
    host_leases: bool,
    /// Where each proof's B_G2 comes from: precomputed (the witness's sum from the bundle),
    /// gpu (the B_G2 MSM inside the GPU phase, under its lease) or cpu (blstrs in the CPU
    /// tail). gpu and cpu read the bundle's G2 query (farm-prepare --g2-query).
    #[arg(long, value_enum, default_value = "precomputed")]
    g2: G2Mode,
    /// Engine of the GPU phase.
    #[arg(long, value_enum, default_value = "auto")]
    engine: EngineArg,
    /// Blinding seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// This process's number in the cell (its lanes start at witness `index + lane`).
    #[arg(long, default_value_t = 0)]
    index: usize,
    /// Print `ready`, then wait for `go START_NS END_NS` on stdin.
    #[arg(long)]
    sync: bool,
    /// Without --sync: prove for this many seconds, starting now.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Pin the process to the CPUs NVML names nearest this GPU (UUID) before any thread
    /// starts, so the host side of the GPU phase (staging copies, preparation) runs on the
    /// GPU's NUMA node, alike in every mode.
    #[arg(long)]
    pin_near: Option<String>,
}

/// Pins this process (and every thread it starts afterwards) to the CPUs that NVML names as
/// nearest GPU `uuid`; returns how many there are.
fn pin_near_gpu(uuid: &str) -> Result<usize> {
    use nix::sched::{CpuSet, sched_setaffinity};
    let nvml = nvml_wrapper::Nvml::init().context("NVML")?;
    let device = nvml
        .device_by_uuid(uuid)
        .with_context(|| format!("NVML has no GPU {uuid}"))?;
    let bits = std::mem::size_of::<std::ffi::c_ulong>() * 8;
    let mask = device
        .cpu_affinity(CpuSet::count().div_ceil(bits))
        .context("NVML's CPU affinity")?;
    let mut set = CpuSet::new();
    let mut n = 0;
    for (word, value) in mask.iter().enumerate() {
        for bit in 0..bits {
            if value >> bit & 1 == 1 {
                set.set(word * bits + bit)?;
                n += 1;
            }
        }
    }
    if n == 0 {
        bail!("NVML names no CPU near {uuid}");
    }
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).context("sched_setaffinity")?;
    Ok(n)
}

fn device_arg(gpu: &Option<String>, cuda: bool) -> Result<(String, u32)> {
    if let Some(g) = gpu {
        let (uuid, index) = g.rsplit_once(':').context("--gpu takes UUID:INDEX")?;
        return Ok((uuid.to_owned(), index.parse().context("--gpu index")?));
    }
    if cuda {
        let d = gpud_cuda::driver::list_devices()?
            .into_iter()
            .next()
            .context("no CUDA device is visible")?;
        Ok((d.uuid, d.ordinal as u32))
    } else {
        Ok(("cpu".into(), 0))
    }
}

/// What the worker prints when ready.
fn ready_line(setup: f64, context: u64) -> String {
    serde_json::json!({
        "ready": true, "pid": std::process::id(), "setup_secs": setup,
        "context_lease_bytes": context,
    })
    .to_string()
}

#[allow(clippy::too_many_arguments)]
fn serve<E, L>(
    a: &WorkerArgs,
    started: Instant,
    engine: Arc<E>,
    leaser: Arc<L>,
    work: Arc<Workload>,
    memory: PhaseMemory,
    context_lease_bytes: u64,
) -> Result<WorkerReport>
where
    E: Engine + 'static,
    L: Leaser + Send + Sync + 'static,
    L::Lease: Send + 'static,
{
    // The footprint's pad from the phase without resident bases: warm phases lease the same
    // footprint less the bases they keep.
    let formula = worker::phase_formula(engine.as_ref(), &work.key, work.log_domain(), a.g2);
    let vram_pad = match &a.phase_vram {
        Some(p) => size(p)?.saturating_sub(formula),
        None => size(&a.vram_pad)?,
    };
    let label = format!("farm[{}]", std::process::id());
    let warm = match (a.warm, a.lock) {
        (false, _) => None,
        (true, LockArg::Gpud) => Some(
            worker::warm_up(
                &engine,
                &leaser,
                &work,
                WarmOptions::default(),
                &a.class,
                &label,
            )
            .context("putting the warm bases on the device")?,
        ),
        (true, _) => bail!("--warm needs --lock gpud (warm state is an evictable gpud lease)"),
    };
    // Host leases: the process's resident footprint first, for its life (what it holds now,
    // at least the key, and the staging buffers its phases will page-lock).
    let _resident_host = match (a.host_leases, a.lock) {
        (false, _) => None,
        (true, LockArg::Gpud) => {
            let key = &work.key;
            let needs = gpud_prover::host::resident_needs(
                gpud_prover::host::bases_bytes(&key.shape(), true),
                engine.host_pinned(key),
            );
            Some(
                leaser
                    .acquire(&LeaseRequest::host_only(
                        needs,
                        &a.class,
                        format!("{label} resident host memory"),
                    ))
                    .context("leasing the resident host memory")?,
            )
        }
        (true, _) => bail!("--host-leases needs --lock gpud"),
    };
    let setup_secs = started.elapsed().as_secs_f64();
    let window = if a.sync {
        println!("{}", ready_line(setup_secs, context_lease_bytes));
        std::io::stdout().flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        Window::parse_go(&line).with_context(|| format!("expected `go START END`, got {line:?}"))?
    } else {
        Window::starting_in(Duration::ZERO, Duration::from_secs_f64(a.duration.max(0.0)))
    };
    let opts = WorkerOptions {
        lanes: a.lanes.max(1),
        class: a.class.clone(),
        vram_pad,
        tail: Duration::from_secs_f64(a.tail_ms.max(0.0) / 1000.0),
        interval: a.interval.filter(|i| *i > 0.0).map(Duration::from_secs_f64),
        device: a.device.clone(),
        seed: a.seed.wrapping_mul(1_000_003).wrapping_add(a.index as u64),
        first_witness: a.index,
        label,
        synthesize: a.synthesize,
        host_leases: a.host_leases,
        g2: a.g2,
    };
    let engine_name = engine.name().to_owned();
    let (circuit, log_size) = (work.spec.kind().name().to_owned(), work.log_domain());
    let out = worker::run(
        engine,
        leaser,
        work,
        Arc::new(memory),
        opts.clone(),
        window,
        warm,
    )?;
    Ok(WorkerReport {
        pid: std::process::id(),
        lock: a.lock.into(),
        class: a.class.clone(),
        lanes: opts.lanes,
        engine: engine_name,
        circuit,
        log_size,
        formula_bytes: out.formula_bytes,
        pad_bytes: opts.vram_pad,
        lease_bytes: out.lease_bytes,
        context_lease_bytes,
        tail_secs: opts.tail.as_secs_f64(),
        setup_secs,
        pinned: None,
        window_secs: window.duration(),
        records: out.records,
        open: out.open,
        warm: out.warm,
        g2: a.g2,
        cpu_secs: out.cpu_secs,
    })
}

#[allow(clippy::too_many_arguments)]
fn with_leaser<E: Engine + 'static>(
    a: &WorkerArgs,
    started: Instant,
    engine: Arc<E>,
    cuda: bool,
    work: Arc<Workload>,
    memory: PhaseMemory,
    gpud: Option<GpudLeaser>,
    context: u64,
) -> Result<WorkerReport> {
    let (uuid, index) = device_arg(&a.gpu, cuda)?;
    match a.lock {
        LockArg::Gpud => {
            let l = gpud.context("gpud mode without a connection")?;
            serve(a, started, engine, Arc::new(l), work, memory, context)
        }
        LockArg::Local => {
            let l = LocalLeaser::on_device(uuid, index);
            serve(a, started, engine, Arc::new(l), work, memory, context)
        }
        LockArg::Flock => {
            std::fs::create_dir_all(&a.lock_dir)
                .with_context(|| format!("creating {}", a.lock_dir.display()))?;
            let l = FlockLeaser::new(&a.lock_dir, uuid, index);
            serve(a, started, engine, Arc::new(l), work, memory, context)
        }
        LockArg::None => {
            let l = UnlockedLeaser::new(uuid, index);
            serve(a, started, engine, Arc::new(l), work, memory, context)
        }
    }
}

pub fn worker(a: WorkerArgs) -> Result<()> {
    let started = Instant::now();
    // Before any thread exists (gpud's client, rayon, the lanes): threads inherit it.
    let pinned = a
        .pin_near
        .as_deref()
        .map(|uuid| pin_near_gpu(uuid).map_err(|e| format!("{e:#}")));
    let spec = CircuitSpec::parse(&a.circuit, a.log_size)?;
    a.class
        .parse::<gpud_client::Class>()
        .map_err(anyhow::Error::from)
        .context("--class")?;
    let cuda = a.engine.resolve() == EngineArg::Cuda;
    // gpud first: a missing daemon is reported at once.
    let gpud = match a.lock {
        LockArg::Gpud => Some(GpudLeaser::connect(&a.socket)?),
        _ => None,
    };
    // The CUDA context will hold memory outside any phase: in gpud mode it is leased first.
    let mut context_leases = Vec::new();
    let context_vram = size(&a.context_vram)?;
    if let (Some(g), true, true) = (&gpud, cuda, context_vram > 0) {
        for d in g.client().status()?.devices {
            let request = LeaseRequest {
                vram_bytes: context_vram,
                compute: false,
                device: Some(d.uuid.clone()),
                class: a.class.clone(),
                label: format!("farm[{}] CUDA context", std::process::id()),
                evictable: false,
                host: HostNeeds::default(),
            };
            context_leases.push(g.acquire(&request)?);
        }
    }
    let context_total = context_vram * context_leases.len() as u64;
    let memory = match &a.sim_vram {
        Some(s) => {
            let (dir, capacity) = gpud_bench::farm::simvram::SimVram::parse_spec(s)
                .context("--sim-vram takes DIR:SIZE")?;
            PhaseMemory::Sim { dir, capacity }
        }
        None if cuda => PhaseMemory::Cuda,
        None => PhaseMemory::Plain,
    };
    let mut work = Workload::load(&a.bundle, &spec, a.witnesses, a.g2)
        .with_context(|| format!("loading the bundle in {}", a.bundle.display()))?;
    if a.synthesize {
        // Every attempt synthesizes its own: the bundle's witnesses give seeds and G2 sums.
        for w in &mut work.witnesses {
            w.keep_seed_only();
        }
    }
    let work = Arc::new(work);
    let mut report = if cuda {
        let engine = CudaEngine::new(CudaOptions {
            resident_bases: a.warm,
            pin_bases: true,
            // Precomputed: the key has no G2 query, and nothing computes B_G2.
            g2: match a.g2 {
                G2Mode::Gpu => G2Placement::Gpu,
                G2Mode::Cpu | G2Mode::Precomputed => G2Placement::Cpu,
            },
            vram_budget: None,
            c_on_device: true,
        })
        .context("starting the CUDA engine")?;
        // Every device's context and kernels now, not inside the first GPU phase; and the
        // bases page-locked, once for every context (a refusal is logged, and the uploads
        // stay staged copies).
        let mut first = None;
        for d in gpud_cuda::driver::list_devices()? {
            let dev = process_device(&d.uuid)?;
            dev.module(&gpud_cuda::kernels::NTT)?;
            dev.module(&gpud_cuda::kernels::MSM)?;
            if engine.g2_on_gpu(&work.key) {
                dev.module(&gpud_cuda::kernels::MSM_G2)?;
            }
            first.get_or_insert(dev);
        }
        if let Some(dev) = first {
            if let Err(e) = engine.pin_bases(&work.key, dev) {
                eprintln!("farm-worker: {e:#}");
            }
        }
        with_leaser(
            &a,
            started,
            Arc::new(engine),
            true,
            work,
            memory,
            gpud,
            context_total,
        )?
    } else {
        // Warm state on the CPU engine: bases that exist only as their lease.
        let warm_vram = match (&a.warm_vram, a.warm) {
            (Some(s), _) => size(s)?,
            (None, true) => {
                gpud_prover::vram::estimate(&work.key.shape(), work.log_domain()).resident
            }
            (None, false) => 0,
        };
        with_leaser(
            &a,
            started,
            Arc::new(SimulatedResident::new(CpuEngine, warm_vram)),
            false,
            work,
            memory,
            gpud,
            context_total,
        )?
    };
    report.pinned = pinned;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    out.flush()?;
    // Lanes may still be blocked in a lock or inside a GPU phase: leave at once, without
    // running exit handlers (the CUDA runtime's teardown would race with those threads). The
    // kernel frees everything: the device memory, the lock files' locks, gpud's socket (and
    // with it every lease of this process).
    // SAFETY: _exit only ends the process; nothing of this process runs after it.
    unsafe { libc::_exit(0) }
}

#[derive(Args)]
pub struct PrepareArgs {
    /// Bundle directory.
    #[arg(long)]
    bundle: PathBuf,
    /// Circuit.
    #[arg(long, default_value = "synthetic")]
    circuit: String,
    /// log2 of the constraint count.
    #[arg(long, short = 'k')]
    log_size: u32,
    /// Witnesses to synthesize.
    #[arg(long, default_value_t = 2)]
    witnesses: usize,
    /// Parameters' secrets and witnesses' seeds.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// G1 points of the parameters on the GPU (else all on the CPU).
    #[arg(long)]
    gpu: bool,
    /// Regenerate even when the bundle's files exist.
    #[arg(long)]
    fresh: bool,
    /// Also write the key's G2 query (for provers with `--g2 gpu` or `--g2 cpu`).
    #[arg(long)]
    g2_query: bool,
}

pub fn prepare(a: PrepareArgs) -> Result<()> {
    let spec = CircuitSpec::parse(&a.circuit, a.log_size)?;
    let key_path = bundle::key_path(&a.bundle, &spec);
    let n = a.witnesses.max(1);
    let g2_path = bundle::g2_path(&a.bundle, &spec);
    let all_there = key_path.is_file()
        && (!a.g2_query || g2_path.is_file())
        && (0..n).all(|i| bundle::witness_path(&a.bundle, &spec, i).is_file());
    if all_there && !a.fresh {
        println!(
            "{}",
            serde_json::json!({"spec": spec.to_string(), "reused": true})
        );
        return Ok(());
    }
    let t = Instant::now();
    let toxic = Toxic::random(&mut ChaCha20Rng::seed_from_u64(a.seed));
    let params = if a.gpu {
        let gpu = gpud_cuda::driver::list_devices()?
            .into_iter()
            .next()
            .context("no CUDA device is visible")?;
        crate::bench_engines::gpu_params(&spec, &toxic, &gpu.uuid, gpu.ordinal as u32)?.0
    } else {
        paramgen::generate(spec.shape(), &toxic, Backend::Cpu)?.0
    };
    let params_secs = t.elapsed().as_secs_f64();
    bundle::write_key(&key_path, &spec, &params)?;
    if a.g2_query {
        bundle::write_g2_query(&g2_path, &spec, &params)?;
    }
    let t = Instant::now();
    (0..n)
        .into_par_iter()
        .map(|i| -> Result<(), FarmError> {
            let w = FarmWitness::synthesize(&spec, &params, a.seed.wrapping_add(1000 + i as u64))?;
            w.write(&bundle::witness_path(&a.bundle, &spec, i), &spec)
        })
        .collect::<Result<Vec<()>, FarmError>>()?;
    println!(
        "{}",
        serde_json::json!({
            "spec": spec.to_string(), "reused": false, "params_secs": params_secs,
            "witnesses": n, "witness_secs": t.elapsed().as_secs_f64(),
            "params_on_gpu": a.gpu, "g2_query": a.g2_query, "g2_points": params.b_g2.len(),
        })
    );
    Ok(())
}

#[derive(Args)]
pub struct BallastArgs {
    /// Memory to leave free on each GPU.
    #[arg(long, default_value = "16GiB")]
    leave: String,
    /// Allocation size.
    #[arg(long, default_value = "1GiB")]
    chunk: String,
}

/// Holds all but `--leave` of every GPU until stdin closes: to the provers and to gpud (through
/// NVML) it is another tenant's memory, as on a small card.
pub fn ballast(a: BallastArgs) -> Result<()> {
    let leave = size(&a.leave)?;
    let chunk = size(&a.chunk)?.max(2 << 20);
    let devices = gpud_cuda::driver::list_devices()?;
    if devices.is_empty() {
        bail!("no CUDA device is visible");
    }
    let mut held = Vec::new();
    for d in &devices {
        let dev = process_device(&d.uuid)?;
        // The ballast is exactly an unmanaged squatter: nobody leases for it.
        let claim: &'static ExclusiveDevice = Box::leak(Box::new(
            ExclusiveDevice::assume_unshared(d.uuid.clone(), d.ordinal as u32, u64::MAX / 2),
        ));
        let token = claim
            .compute_token()
            .context("exclusive device without compute")?;
        let arena: &'static gpud_cuda::Arena<'static> = Box::leak(Box::new(dev.reserve(claim)?));
        let mut bytes = 0u64;
        loop {
            let (free, _) = dev.mem_info(&token)?;
            let want = free.saturating_sub(leave).min(chunk) / (2 << 20) * (2 << 20);
            if want == 0 {
                break;
            }
            let mut buf = arena.alloc::<u8>(usize::try_from(want)?)?;
            buf.fill_bytes(0x5a)?;
            // Backed and written before the next reading of the free memory.
            dev.synchronize(&token)?;
            bytes += want;
            held.push(buf);
        }
        dev.synchronize(&token)?;
        let (free, total) = dev.mem_info(&token)?;
        println!(
            "{}",
            serde_json::json!({"uuid": d.uuid, "held_bytes": bytes, "free_bytes": free,
                               "total_bytes": total})
        );
    }
    println!(
        "{}",
        serde_json::json!({"ready": true, "pid": std::process::id()})
    );
    std::io::stdout().flush()?;
    // Until the driver closes stdin (or the process is killed).
    let mut sink = String::new();
    while std::io::stdin().lock().read_line(&mut sink)? > 0 {
        sink.clear();
    }
    drop(held);
    Ok(())
}

#[derive(Args)]
pub struct GpudArgs {
    /// Socket.
    #[arg(long)]
    socket: PathBuf,
    /// State directory (lease journal).
    #[arg(long)]
    state_dir: PathBuf,
    /// Config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Simulated devices instead of NVML.
    #[arg(long)]
    simulate: Option<String>,
}

/// gpud from the library, as the `gpud` binary runs it (NVML unless --simulate), logging to
/// stderr (`GPUD_LOG`, default info).
pub fn gpud(a: GpudArgs) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("GPUD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let mut config = match &a.config {
        Some(p) => gpud::config::Config::load(p)?,
        None => gpud::config::Config::default(),
    };
    // A private socket: the daemon's own uid (the driver's) may connect; no D-Bus name.
    config.socket_group = None;
    config.dbus = Some(gpud::dbus::BusChoice::None);
    let backend: Box<dyn gpud::backend::Backend> = match &a.simulate {
        Some(spec) => Box::new(gpud::backend::simulated::Simulated::new(spec)?),
        None => Box::new(gpud::backend::nvml::Nvml::probe()?),
    };
    let daemon = gpud::daemon::Daemon {
        config,
        config_path: a.config.clone(),
        socket: a.socket,
        backend,
        state_dir: Some(a.state_dir),
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(daemon.run())?;
    Ok(())
}
