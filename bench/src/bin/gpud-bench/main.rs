//! `gpud-bench`: the prover's benchmarks (`vs-bellperson`, `engines`) and the sharing farm
//! (`farm`, `farm-plot`, and the processes `farm` starts, hidden from `--help`).

mod bench_engines;
mod farm;
mod farm_proc;
mod gpu_phase;
mod partition;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use gpud_bench::proofs::{self, BenchRow};
use gpud_prover::{CircuitKind, CircuitSpec, ParamsCache};

#[derive(Parser)]
#[command(
    name = "gpud-bench",
    version,
    about = "Benchmarks of the gpud prover and of GPU sharing through gpud"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compare our CPU prover with bellperson's on the same circuit, sizes 2^FROM..2^TO.
    VsBellperson(BenchArgs),
    /// Full proofs on the CPU and CUDA engines, split by stage, with parameters from the fast
    /// generator (GPU), and bellperson's prover as the baseline; 2^20 and 2^22 by default.
    Engines(BenchEnginesArgs),
    /// One large partition (a PoRep-shaped 2^26 by default) proved once on the CUDA engine
    /// with fresh parameters from the fast generator, verified: generation, synthesis, GPU
    /// phase, peak host RSS and VRAM.
    Partition(partition::PartitionArgs),
    /// Several provers sharing a GPU through gpud, against the in-process ideal, no lock and
    /// flock: throughput, GPU busy, out-of-memory, waits, priority, several GPUs.
    Farm(farm::FarmArgs),
    /// The GPU phase of a PoRep-shaped partition (2^27 by default) on random bases, per VRAM
    /// budget: the plan, planned and measured peak, per-step times (no proof: for sizes whose
    /// parameters do not fit host memory).
    GpuPhase(gpu_phase::GpuPhaseArgs),
    /// Draw the PNG of a farm run from its farm.json.
    FarmPlot(farm::PlotArgs),
    /// One prover process of the farm (started by `farm`).
    #[command(hide = true)]
    FarmWorker(farm_proc::WorkerArgs),
    /// The farm's workload bundle (started by `farm`).
    #[command(hide = true)]
    FarmPrepare(farm_proc::PrepareArgs),
    /// Holds all but --leave of every GPU (started by `farm`).
    #[command(hide = true)]
    FarmBallast(farm_proc::BallastArgs),
    /// gpud from the library (started by `farm` unless --gpud names a binary).
    #[command(hide = true)]
    FarmGpud(farm_proc::GpudArgs),
}

/// A byte size on the command line (`6GiB`, `4096`).
fn size(s: &str) -> Result<u64> {
    gpud_client::proto::parse_size(s).with_context(|| format!("size {s:?}"))
}

use gpud_prover::engine::EngineChoice as EngineArg;

#[derive(Args)]
struct BenchArgs {
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
    /// Smallest log size.
    #[arg(long, default_value_t = 10)]
    from: u32,
    /// Largest log size.
    #[arg(long, default_value_t = 16)]
    to: u32,
    /// Timed repetitions per size (after one warm-up).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Also print a Markdown table (for BENCHMARKS.md).
    #[arg(long)]
    markdown: bool,
}

#[derive(Args)]
struct BenchEnginesArgs {
    /// Circuit (synthetic, poseidon, sha256 or porep).
    #[arg(long, default_value = "synthetic")]
    circuit: String,
    /// log2 sizes, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [20u32, 22])]
    sizes: Vec<u32>,
    /// Timed proofs per CUDA engine (after one warm-up).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Timed proofs on the CPU engine (a warm-up too at sizes up to 2^20).
    #[arg(long, default_value_t = 1)]
    cpu_reps: usize,
    /// Also generate the parameters on the CPU and require the GPU's to be identical, up to
    /// this size.
    #[arg(long, default_value_t = 20)]
    check_params_up_to: u32,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where the CUDA engines compute the G2 MSM for B: gpu (in the phase), cpu (in the
    /// tail) or auto (gpu when the phase with it fits the GPU).
    #[arg(long, value_enum, default_value = "auto")]
    g2: gpud_prover::engine::G2Placement,
    /// Synthesis of the timed proofs: parallel (segmented circuits such as porep on all cores)
    /// or sequential. Both are also timed once per size, synthesis alone.
    #[arg(long, value_enum, default_value = "parallel")]
    synthesis: SynthesisMode,
    /// Also prove every size with bellperson's own `create_proof` (same circuit, key and
    /// first r, s; timed like the engines, verified, compared bit for bit) and print
    /// bellperson / ours: bellperson's CUDA prover in a build with the `bellperson-gpu`
    /// feature (where it is the default), its CPU prover otherwise.
    #[arg(long, value_enum, default_value_t = BaselineArg::for_build())]
    baseline: BaselineArg,
}

/// `--synthesis`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SynthesisMode {
    Parallel,
    Sequential,
}

impl SynthesisMode {
    pub(crate) fn options(self) -> gpud_prover::synthesis::SynthesisOptions {
        gpud_prover::synthesis::SynthesisOptions {
            parallel: self == Self::Parallel,
            ..Default::default()
        }
    }
}

/// `gpud-bench engines --baseline`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum BaselineArg {
    /// bellperson's `create_proof`.
    Bellperson,
    /// No baseline.
    None,
}

impl BaselineArg {
    /// bellperson where this build has its GPU prover; none otherwise (its CPU prover takes
    /// minutes at 2^22).
    fn for_build() -> Self {
        if gpud_bench::bellperson_prover::GPU_BUILD {
            Self::Bellperson
        } else {
            Self::None
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::VsBellperson(a) => vs_bellperson(a),
        Command::Engines(a) => bench_engines::run(a),
        Command::Partition(a) => partition::run(a),
        Command::Farm(a) => farm::run(a),
        Command::FarmPlot(a) => farm::plot_cmd(a),
        Command::GpuPhase(a) => gpu_phase::run(a),
        Command::FarmWorker(a) => farm_proc::worker(a),
        Command::FarmPrepare(a) => farm_proc::prepare(a),
        Command::FarmBallast(a) => farm_proc::ballast(a),
        Command::FarmGpud(a) => farm_proc::gpud(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpud-bench: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn vs_bellperson(a: BenchArgs) -> Result<()> {
    let kind = CircuitKind::from_name(&a.circuit)?;
    if a.from > a.to {
        bail!("--from {} is larger than --to {}", a.from, a.to);
    }
    let cache = ParamsCache::new(a.params_dir.unwrap_or_else(ParamsCache::default_dir));
    let mut rows: Vec<BenchRow> = Vec::new();
    for k in a.from..=a.to {
        let spec = CircuitSpec::new(kind, k)?;
        let key = cache
            .load_or_generate_shown(&spec, a.json)
            .with_context(|| format!("parameters for {spec}"))?;
        let pb = gpud_prover::progress::spinner(format!("benchmarking {spec}"), a.json);
        let row =
            proofs::run(&spec, &key, a.reps).with_context(|| format!("benchmarking {spec}"))?;
        pb.finish_and_clear();
        if !a.json {
            println!(
                "{spec}: ours {:.3} s (synth {:.3}, H {:.3}, G1 {:.3}, tail {:.3}) bellperson {:.3} s ratio {:.2}",
                row.ours.total,
                row.ours.synthesis,
                row.ours.h,
                row.ours.g1_msms,
                row.ours.cpu_tail,
                row.bellperson,
                row.ratio
            );
        }
        rows.push(row);
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "rows": rows, "threads": rayon::current_num_threads() })
        );
    }
    if a.markdown {
        println!(
            "\n| circuit | k | constraints | ours (s) | synthesis | H (7 FFTs) | G1 MSMs | CPU tail | bellperson (s) | ratio |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for r in &rows {
            println!(
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} |",
                r.circuit,
                r.log_size,
                r.constraints,
                r.ours.total,
                r.ours.synthesis,
                r.ours.h,
                r.ours.g1_msms,
                r.ours.cpu_tail,
                r.bellperson,
                r.ratio
            );
        }
    }
    Ok(())
}
