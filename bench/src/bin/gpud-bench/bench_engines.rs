//! `gpud-bench engines`: full proofs on the CPU and CUDA engines, same key, same
//! machine, one run, split by stage; parameters from the fast generator (G1 on the GPU).

use std::time::Instant;

use anyhow::{Context, Result, bail};
use gpud_bench::proofs::{self, EngineCase, EnginesRow};
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_cuda::fixed_base::G1FixedBase;
use gpud_prover::engine::{CpuEngine, CudaEngine, CudaOptions, process_device};
use gpud_prover::paramgen::{self, G1Backend, GenTimings, Toxic};
use gpud_prover::{CircuitKind, CircuitSpec, ProvingKey};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::Serialize;

use crate::{BenchEnginesArgs, SynthesisMode};

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
}

/// Parameters for `spec` from the fast generator with the G1 points on the GPU.
pub(crate) fn gpu_params(
    spec: &CircuitSpec,
    toxic: &Toxic,
    uuid: &str,
    index: u32,
) -> Result<(bellperson::groth16::Parameters<blstrs::Bls12>, GenTimings)> {
    let device = process_device(uuid)?;
    let lease = ExclusiveDevice::assume_unshared(uuid, index, G1FixedBase::charged_bytes());
    let arena = device.reserve(&lease)?;
    let out = {
        let fb = G1FixedBase::new(&arena, &toxic.g1)?;
        paramgen::generate(spec.shape(), toxic, G1Backend::Gpu(&fb))
    };
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
    })?;
    println!(
        "kernels ready in {:.1} s (NVRTC or disk cache)",
        t.elapsed().as_secs_f64()
    );
    let device = (gpu.uuid.clone(), gpu.ordinal as u32);
    let mut rows = Vec::new();
    let mut ok = true;
    for &k in &a.sizes {
        let spec = CircuitSpec::new(kind, k)?;
        let toxic = Toxic::random(&mut ChaCha20Rng::seed_from_u64(u64::from(k)));
        let (params, gen_t) = gpu_params(&spec, &toxic, &gpu.uuid, gpu.ordinal as u32)
            .with_context(|| format!("generating parameters for {spec}"))?;
        println!(
            "{spec}: parameters in {:.1} s (synthesis {:.1}, evaluation {:.1}, G1 on the GPU {:.1}, G2 on the CPU {:.1})",
            gen_t.total, gen_t.synthesis, gen_t.evaluation, gen_t.g1, gen_t.g2
        );
        let params_equal_cpu = if k <= a.check_params_up_to {
            let t = Instant::now();
            let (cpu, _) = paramgen::generate(spec.shape(), &toxic, G1Backend::Cpu)?;
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
        })?;
        let uploads = CudaEngine::new(CudaOptions {
            resident_bases: false,
            pin_bases: true,
            g2: a.g2,
            vram_budget: None,
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
        rows.push(Row {
            row,
            params: gen_t,
            params_equal_cpu,
        });
    }
    println!("\n== engines summary (seconds; medians)");
    println!(
        "| k | engine | synthesis | H | MSM H | MSM L | MSM A | MSM B_G1 | MSM B_G2 | bases upload | finish | GPU phase | CPU tail (assembly, G2 if on the CPU) | total | verified |"
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
                p.bases_upload,
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
                "2^{}: bases upload {:.4} s from page-locked memory vs {:.4} s from ordinary memory ({:.1}x); GPU phase {:.3} s vs {:.3} s",
                r.row.log_size,
                pinned.gpu_phase.bases_upload,
                plain.gpu_phase.bases_upload,
                plain.gpu_phase.bases_upload / pinned.gpu_phase.bases_upload.max(1e-9),
                pinned.gpu_phase.total,
                plain.gpu_phase.total
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
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "device": gpu.name, "uuid": gpu.uuid, "multiprocessors": gpu.multiprocessors,
            "threads": rayon::current_num_threads(), "rows": rows,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !ok {
        bail!("a proof did not verify, engines disagreed, or the GPU parameters differ");
    }
    Ok(())
}

fn print_row(r: &EnginesRow) {
    println!(
        "{} 2^{} ({} constraints):",
        r.circuit, r.log_size, r.constraints
    );
    for e in &r.runs {
        let p = &e.gpu_phase;
        println!(
            "  {:<13} synth {:.3}  H {:.4}  MSM H {:.4} L {:.4} A {:.4} B {:.4} B_G2 {:.4}  upload {:.4}  finish {:.4}  GPU phase {:.4}  tail {:.3}  total {:.3}  lease {:.0} MiB + resident {:.0} MiB  verified {}",
            e.engine,
            e.synthesis,
            p.h,
            p.msm_h,
            p.msm_l,
            p.msm_a,
            p.msm_b,
            p.msm_b_g2,
            p.bases_upload,
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
