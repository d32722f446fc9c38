//! `gpud-bench engines`: full proofs on the CPU and CUDA engines, same key, same
//! machine, one run, split by stage; parameters from the fast generator (G1 and G2 on the GPU);
//! bellperson's own prover as the baseline (`--baseline`).

use std::time::Instant;

use anyhow::{Context, Result, bail};
use gpud_bench::bellperson_prover::{self, BaselineRun, GPU_BUILD, Ran};
use gpud_bench::proofs::{self, EngineCase, EnginesRow};
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_prover::engine::{CpuEngine, CudaEngine, CudaOptions, process_device};
use gpud_prover::paramgen::{self, Backend, GenTimings, GpuTables, Toxic};
use gpud_prover::{CircuitKind, CircuitSpec, ProvingKey};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::Serialize;

use crate::{BaselineArg, BenchEnginesArgs, SynthesisMode};

/// Seconds of one synthesis of `spec` (witness seed 0) in `mode`.
pub(crate) fn synthesis_secs(spec: &CircuitSpec, mode: SynthesisMode) -> Result<f64> {
    use gpud_prover::segmented::Synthesize;
    let t = Instant::now();
    let cs = spec.with_witness(0).synthesize_assignment(mode.options())?;
    let secs = t.elapsed().as_secs_f64();
    drop(cs);
    Ok(secs)
}

#[derive(Serialize)]
struct Row {
    #[serde(flatten)]
    row: EnginesRow,
    params: GenTimings,
    /// Parameters also generated on the CPU and found identical (None: not checked).
    params_equal_cpu: Option<bool>,
    /// bellperson's `create_proof` on the same key (None: `--baseline none`).
    baseline: Option<BaselineRun>,
    /// bellperson's median total over each engine's (the speed-up; the target is >= 5 for
    /// `cuda` at 2^20 and 2^22).
    bellperson_over_ours: std::collections::BTreeMap<String, f64>,
}

/// Parameters for `spec` from the fast generator with the G1 and G2 points on the GPU.
pub(crate) fn gpu_params(
    spec: &CircuitSpec,
    toxic: &Toxic,
    uuid: &str,
    index: u32,
) -> Result<(bellperson::groth16::Parameters<blstrs::Bls12>, GenTimings)> {
    let device = process_device(uuid)?;
    let lease = ExclusiveDevice::assume_unshared(uuid, index, GpuTables::charged_bytes());
    let arena = device.reserve(&lease)?;
    let out = GpuTables::new(&arena, toxic)
        .and_then(|tables| paramgen::generate(spec.shape(), toxic, Backend::Gpu(&tables)));
    let token = lease
        .compute_token()
        .context("exclusive device without compute")?;
    arena.close(&token)?;
    Ok(out?)
}

fn param_bytes(p: &bellperson::groth16::Parameters<blstrs::Bls12>) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    p.write(&mut v)?;
    Ok(v)
}

pub fn run(a: BenchEnginesArgs) -> Result<()> {
    let kind = CircuitKind::from_name(&a.circuit)?;
    let gpu = gpud_cuda::driver::list_devices()
        .context("gpud-bench engines needs a CUDA GPU")?
        .into_iter()
        .next()
        .context("no CUDA device is visible")?;
    println!(
        "device: {} ({}), {} SMs; host: {} threads",
        gpu.name,
        gpu.uuid,
        gpu.multiprocessors,
        rayon::current_num_threads()
    );
    let t = Instant::now();
    let resident = CudaEngine::new(CudaOptions {
        resident_bases: true,
        pin_bases: false,
        g2: a.g2,
        vram_budget: None,
        c_on_device: true,
    })?;
    println!(
        "kernels ready in {:.1} s (NVRTC or disk cache)",
        t.elapsed().as_secs_f64()
    );
    let device = (gpu.uuid.clone(), gpu.ordinal as u32);
    let baseline_on = baseline_banner(a.baseline)?;
    let mut rows = Vec::new();
    let mut ok = true;
    for &k in &a.sizes {
        let spec = CircuitSpec::new(kind, k)?;
        let toxic = Toxic::random(&mut ChaCha20Rng::seed_from_u64(u64::from(k)));
        let (params, gen_t) = gpu_params(&spec, &toxic, &gpu.uuid, gpu.ordinal as u32)
            .with_context(|| format!("generating parameters for {spec}"))?;
        println!(
            "{spec}: parameters in {:.1} s (synthesis {:.1}, evaluation {:.1}, G1 on the GPU {:.1}, G2 on the GPU {:.1})",
            gen_t.total, gen_t.synthesis, gen_t.evaluation, gen_t.g1, gen_t.g2
        );
        let params_equal_cpu = if k <= a.check_params_up_to {
            let t = Instant::now();
            let (cpu, _) = paramgen::generate(spec.shape(), &toxic, Backend::Cpu)?;
            let same = param_bytes(&cpu)? == param_bytes(&params)?;
            println!(
                "{spec}: parameters generated on the CPU ({:.1} s) are {}",
                t.elapsed().as_secs_f64(),
                if same { "identical" } else { "DIFFERENT" }
            );
            ok &= same;
            Some(same)
        } else {
            None
        };
        let key = ProvingKey::new(format!("fast {spec}"), params);
        // Per size, so that each key's page-locked bases are released with its engine. The
        // ordinary-memory case runs first: page-locking is process-wide.
        let pageable = CudaEngine::new(CudaOptions {
            resident_bases: false,
            pin_bases: false,
            g2: a.g2,
            vram_budget: None,
            c_on_device: true,
        })?;
        let uploads = CudaEngine::new(CudaOptions {
            resident_bases: false,
            pin_bases: true,
            g2: a.g2,
            vram_budget: None,
            c_on_device: true,
        })?;
        let cases = [
            EngineCase {
                name: "cpu",
                engine: &CpuEngine,
                device: device.clone(),
                warmup: usize::from(k <= 20),
                reps: a.cpu_reps,
            },
            EngineCase {
                name: "cuda",
                engine: &resident,
                device: device.clone(),
                warmup: 1,
                reps: a.reps,
            },
            EngineCase {
                name: "cuda-uploads-pageable",
                engine: &pageable,
                device: device.clone(),
                warmup: 0,
                reps: a.reps.min(2),
            },
            // Its warm-up page-locks the bases (after the ordinary-memory case has run).
            EngineCase {
                name: "cuda-uploads",
                engine: &uploads,
                device: device.clone(),
                warmup: 1,
                reps: a.reps.min(2),
            },
        ];
        let (seq, par) = (
            synthesis_secs(&spec, SynthesisMode::Sequential)?,
            synthesis_secs(&spec, SynthesisMode::Parallel)?,
        );
        println!(
            "{spec}: synthesis alone {seq:.3} s sequential, {par:.3} s parallel ({:.1}x; {} threads)",
            seq / par.max(1e-9),
            rayon::current_num_threads()
        );
        let row = proofs::engines_with(&spec, &key, &cases, a.synthesis.options())
            .with_context(|| format!("benchmarking {spec}"))?;
        // The warm-up pinned them: this returns the bytes without pinning again.
        let pinned = uploads.pin_bases(&key, process_device(&gpu.uuid)?)?;
        println!(
            "{spec}: {:.2} GiB of G1 bases page-locked for the cuda-uploads case",
            pinned as f64 / (1u64 << 30) as f64
        );
        print_row(&row);
        ok &= row.proofs_identical && row.runs.iter().all(|r| r.verified);
        let baseline = if a.baseline == BaselineArg::Bellperson {
            let (_, first_rs) = proofs::first_randomness(&spec);
            let b = bellperson_prover::bellperson(
                &spec,
                &key,
                first_rs,
                row.first_proof.as_ref(),
                1,
                a.reps,
            )
            .with_context(|| format!("bellperson's prover at {spec}"))?;
            ok &= baseline_ok(&spec, &b);
            Some(b)
        } else {
            None
        };
        let bellperson_over_ours = baseline
            .iter()
            .flat_map(|b| {
                row.runs
                    .iter()
                    .map(|e| (e.engine.clone(), b.total / e.total.max(1e-9)))
            })
            .collect();
        rows.push(Row {
            row,
            params: gen_t,
            params_equal_cpu,
            baseline,
            bellperson_over_ours,
        });
    }
    println!("\n== engines summary (seconds; medians)");
    println!(
        "| k | engine | synthesis | H | MSM H | MSM L | MSM A | MSM B_G1 | MSM B_G2 | bases streamed (GiB) | finish | GPU phase | CPU tail (assembly, G2 if on the CPU) | total | verified |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        for e in &r.row.runs {
            let p = &e.gpu_phase;
            println!(
                "| {} | {} | {:.3} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.3} | {:.3} | {} |",
                r.row.log_size,
                e.engine,
                e.synthesis,
                p.h,
                p.msm_h,
                p.msm_l,
                p.msm_a,
                p.msm_b,
                p.msm_b_g2,
                p.bases_streamed as f64 / (1u64 << 30) as f64,
                p.finish,
                p.total,
                e.cpu_tail,
                e.total,
                e.verified
            );
        }
    }
    for r in &rows {
        let find = |name: &str| r.row.runs.iter().find(|e| e.engine == name);
        if let (Some(plain), Some(pinned)) = (find("cuda-uploads-pageable"), find("cuda-uploads")) {
            println!(
                "2^{}: bases streamed in the phase ({:.2} GiB): GPU phase {:.3} s from page-locked memory vs {:.3} s from ordinary memory ({:.2}x)",
                r.row.log_size,
                pinned.gpu_phase.bases_streamed as f64 / (1u64 << 30) as f64,
                pinned.gpu_phase.total,
                plain.gpu_phase.total,
                plain.gpu_phase.total / pinned.gpu_phase.total.max(1e-9)
            );
        }
        if let (Some(cpu), Some(cuda)) = (find("cpu"), find("cuda")) {
            println!(
                "2^{}: GPU phase {:.3} s on the GPU vs {:.3} s on the CPU ({:.1}x); proof {:.3} s vs {:.3} s; proofs identical across engines: {}; parameters: {}",
                r.row.log_size,
                cuda.gpu_phase.total,
                cpu.gpu_phase.total,
                cpu.gpu_phase.total / cuda.gpu_phase.total.max(1e-9),
                cuda.total,
                cpu.total,
                r.row.proofs_identical,
                match r.params_equal_cpu {
                    Some(true) => "fast generator, GPU = CPU",
                    Some(false) => "fast generator, GPU != CPU (FAILED)",
                    None => "fast generator (GPU; the proofs verify)",
                }
            );
            if r.row.log_size == 22 {
                let met = cuda.gpu_phase.total <= 0.5;
                println!(
                    "target: GPU phase of a 2^22 proof <= 0.5 s: {} ({:.3} s)",
                    if met { "met" } else { "missed" },
                    cuda.gpu_phase.total
                );
            }
        }
    }
    print_baseline_summary(&rows, baseline_on.as_deref());
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "device": gpu.name, "uuid": gpu.uuid, "multiprocessors": gpu.multiprocessors,
            "threads": rayon::current_num_threads(), "rows": rows,
            "baseline": match a.baseline {
                BaselineArg::Bellperson => if GPU_BUILD { "bellperson-gpu" } else { "bellperson-cpu" },
                BaselineArg::None => "none",
            },
            "baseline_devices": baseline_on,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !ok {
        bail!(
            "a proof did not verify, engines disagreed, the GPU parameters differ, or the \
             baseline differed from our proofs or did not run on the GPU"
        );
    }
    Ok(())
}

/// Says which bellperson prover the baseline is, before anything runs; in a GPU build, the
/// GPUs rust-gpu-tools sees (an error when there are none: bellperson would fall back to
/// the CPU without a word). Returns that device list (None: no GPU baseline).
fn baseline_banner(choice: BaselineArg) -> Result<Option<String>> {
    match choice {
        BaselineArg::None => {
            println!("baseline: none (--baseline none)");
            Ok(None)
        }
        BaselineArg::Bellperson if GPU_BUILD => {
            let devices = bellperson_prover::gpu_devices();
            if devices.is_empty() {
                bail!(
                    "this gpud-bench has bellperson's CUDA prover (feature bellperson-gpu), but \
                     rust-gpu-tools finds no CUDA GPU: bellperson would prove on the CPU \
                     (run with --baseline none to skip the baseline)"
                );
            }
            let devices = devices.join(", ");
            println!("baseline: bellperson's CUDA prover (ec-gpu-gen kernels) on {devices}");
            Ok(Some(devices))
        }
        BaselineArg::Bellperson => {
            println!(
                "baseline: bellperson's CPU prover (this gpud-bench was built without the \
                 bellperson-gpu feature)"
            );
            Ok(None)
        }
    }
}

/// Prints one size's baseline; false when a proof did not verify, the first proof differs
/// from ours, or a GPU build's baseline did not run wholly on the GPU.
fn baseline_ok(spec: &CircuitSpec, b: &BaselineRun) -> bool {
    println!(
        "  {:<13} total {:.3} (create_proof, synthesis included, median of {})  ran on: {}  GPU kernels started: {}  fallbacks: {}  verified {}  same proof as ours: {}",
        b.engine,
        b.total,
        b.reps,
        b.ran.name(),
        b.gpu_kernels,
        b.fallbacks,
        b.verified,
        match b.same_proof {
            Some(true) => "yes (bit for bit)",
            Some(false) => "NO",
            None => "not compared",
        }
    );
    let mut ok = b.verified && b.same_proof != Some(false);
    if GPU_BUILD && b.ran != Ran::Gpu {
        println!(
            "{spec}: BASELINE NOT ON THE GPU: this build has bellperson's CUDA prover, but it ran: {}",
            b.ran.name()
        );
        ok = false;
    }
    ok
}

fn print_baseline_summary(rows: &[Row], devices: Option<&str>) {
    if rows.iter().all(|r| r.baseline.is_none()) {
        return;
    }
    println!(
        "\n== baseline: bellperson's create_proof against ours (same circuit, key, machine, run; seconds, medians)"
    );
    if let Some(d) = devices {
        println!("bellperson on: {d}");
    }
    println!(
        "| k | bellperson ran on | bellperson | ours (cuda) | bellperson / ours (cuda) | bellperson / ours (cpu) | same proof | verified |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        let Some(b) = &r.baseline else { continue };
        let ours = |name: &str| r.row.runs.iter().find(|e| e.engine == name);
        let ratio = |name: &str| {
            r.bellperson_over_ours
                .get(name)
                .map_or("-".to_owned(), |x| format!("{x:.2}x"))
        };
        println!(
            "| {} | {} | {:.3} | {} | {} | {} | {} | {} |",
            r.row.log_size,
            b.ran.name(),
            b.total,
            ours("cuda").map_or("-".to_owned(), |e| format!("{:.3}", e.total)),
            ratio("cuda"),
            ratio("cpu"),
            match b.same_proof {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            },
            b.verified && ours("cuda").is_none_or(|e| e.verified)
        );
    }
    for r in rows {
        let (Some(b), Some(x)) = (&r.baseline, r.bellperson_over_ours.get("cuda")) else {
            continue;
        };
        if matches!(r.row.log_size, 20 | 22) {
            println!(
                "target: whole proofs at 2^{} ours >= 5x faster than bellperson ({}): {} ({x:.2}x)",
                r.row.log_size,
                b.ran.name(),
                if *x >= 5.0 && b.ran == Ran::Gpu {
                    "met"
                } else if b.ran != Ran::Gpu {
                    "not measured (bellperson not on the GPU)"
                } else {
                    "missed"
                }
            );
        }
    }
}

fn print_row(r: &EnginesRow) {
    println!(
        "{} 2^{} ({} constraints):",
        r.circuit, r.log_size, r.constraints
    );
    for e in &r.runs {
        let p = &e.gpu_phase;
        println!(
            "  {:<13} synth {:.3}  H {:.4}  MSM H {:.4} L {:.4} A {:.4} B {:.4} B_G2 {:.4}  streamed {:.2} GiB  finish {:.4}  GPU phase {:.4}  tail {:.3}  total {:.3}  lease {:.0} MiB + resident {:.0} MiB  verified {}",
            e.engine,
            e.synthesis,
            p.h,
            p.msm_h,
            p.msm_l,
            p.msm_a,
            p.msm_b,
            p.msm_b_g2,
            p.bases_streamed as f64 / (1u64 << 30) as f64,
            p.finish,
            p.total,
            e.cpu_tail,
            e.total,
            e.phase_vram as f64 / (1 << 20) as f64,
            e.resident_vram as f64 / (1 << 20) as f64,
            e.verified
        );
    }
}
