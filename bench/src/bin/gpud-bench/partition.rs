//! `gpud-bench partition`: one large partition (PoRep-shaped 2^26 by default) proved once on
//! the CUDA engine with resident bases, parameters fresh from the fast generator (kept in
//! memory only: a 2^26 key is about 31 GB), the proof verified. Prints generation, synthesis,
//! GPU phase and tail times, peak host RSS, and the VRAM planned and seen by the driver.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_prover::engine::{
    CudaEngine, CudaOptions, Engine, G2Placement, PhaseTimings, process_device,
};
use gpud_prover::paramgen::Toxic;
use gpud_prover::plan::{self, BasesAt, PlanError, PlanInput};
use gpud_prover::{CircuitKind, CircuitSpec, ProvingKey, prove};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use crate::SynthesisMode;
use crate::bench_engines::{gpu_params, synthesis_secs};

#[derive(Args)]
pub struct PartitionArgs {
    /// Circuit (porep, synthetic, …).
    #[arg(long, default_value = "porep")]
    circuit: String,
    /// log2 of the partition's constraints.
    #[arg(long, default_value_t = 26)]
    log_size: u32,
    /// Where the CUDA engine computes the G2 MSM for B (gpu, cpu or auto).
    #[arg(long, value_enum, default_value = "auto")]
    g2: G2Placement,
    /// Also time one sequential synthesis (a few seconds at 2^26 per core-second saved).
    #[arg(long)]
    sequential_too: bool,
    /// The phase lease of the proofs with resident bases (e.g. 48GiB): room the planner may
    /// use to copy a and b beside the other MSMs. Default: the least lease (H first).
    #[arg(long, value_parser = crate::size)]
    resident_budget: Option<u64>,
    /// After the resident proofs, prove once more with the bases streamed from page-locked
    /// host memory within a phase lease of this size (e.g. 16GiB; repeatable): the plan, its
    /// peak and the measured peak, which must stay within the lease.
    #[arg(long = "budget", value_parser = crate::size)]
    budgets: Vec<u64>,
}

const GIB: f64 = (1u64 << 30) as f64;

/// Peak resident set of this process (`VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn rss_text() -> String {
    peak_rss().map_or_else(
        || "unknown".into(),
        |b| format!("{:.1} GiB", b as f64 / GIB),
    )
}

/// Device memory in use as the driver sees it (all processes), through a probe lease.
fn vram_used(uuid: &str, index: u32) -> Option<u64> {
    let probe = ExclusiveDevice::assume_unshared(uuid, index, 1);
    let token = probe.compute_token()?;
    let (free, total) = process_device(uuid).ok()?.mem_info(&token).ok()?;
    Some(total - free)
}

/// A GPU phase's times, as both partition lines print them.
fn phase_text(t: &PhaseTimings) -> String {
    let h = if t.overlapped {
        format!(
            "a, b copied beside L, A, B in {:.3}, transforms {:.3}",
            t.h_upload, t.h
        )
    } else {
        format!("H {:.3} of which uploads {:.3}", t.h, t.h_upload)
    };
    format!(
        "GPU phase {:.3} s (setup {:.3}, {h}, MSM H {:.3} L {:.3} \
         A {:.3} B {:.3} B_G2 {:.3}, waiting for the A and B scalars {:.3}, finish {:.3}, \
         untimed {:.3})",
        t.total,
        t.setup,
        t.msm_h,
        t.msm_l,
        t.msm_a,
        t.msm_b,
        t.msm_b_g2,
        t.scalar_wait,
        t.finish,
        t.untimed()
    )
}

fn gib(b: Option<u64>) -> String {
    b.map_or_else(
        || "unknown".into(),
        |b| format!("{:.1} GiB", b as f64 / GIB),
    )
}

/// One timed proof of `spec` (witness `witness`, randomness `r`, `s`) on `engine` under `lease`.
struct TimedProof {
    synthesis: f64,
    timings: PhaseTimings,
    tail: f64,
    total: f64,
    verified: bool,
}

fn prove_once(
    engine: &CudaEngine,
    lease: &ExclusiveDevice,
    key: &ProvingKey,
    spec: &CircuitSpec,
    witness: u64,
    r: u64,
    s: u64,
) -> Result<TimedProof> {
    let t0 = Instant::now();
    let syn = prove::synthesize(
        key,
        spec.with_witness(witness),
        SynthesisMode::Parallel.options(),
    )?;
    let synthesis = t0.elapsed().as_secs_f64();
    let out = prove::gpu_phase(engine, lease, key, syn)?;
    let timings = out.timings;
    let inputs = out.public_inputs().to_vec();
    let t1 = Instant::now();
    let proof = prove::cpu_tail(key, out, blstrs::Scalar::from(r), blstrs::Scalar::from(s))?;
    let tail = t1.elapsed().as_secs_f64();
    Ok(TimedProof {
        synthesis,
        timings,
        tail,
        total: t0.elapsed().as_secs_f64(),
        verified: key.verify(&proof, &inputs)?,
    })
}

pub fn run(a: PartitionArgs) -> Result<()> {
    let spec = CircuitSpec::new(CircuitKind::from_name(&a.circuit)?, a.log_size)?;
    let gpu = gpud_cuda::driver::list_devices()
        .context("gpud-bench partition needs a CUDA GPU")?
        .into_iter()
        .next()
        .context("no CUDA device is visible")?;
    let index = gpu.ordinal as u32;
    println!(
        "device: {} ({}), {:.1} GiB, {} SMs; host: {} threads; partition {spec}",
        gpu.name,
        gpu.uuid,
        gpu.total_mem as f64 / GIB,
        gpu.multiprocessors,
        rayon::current_num_threads()
    );
    let engine = CudaEngine::new(CudaOptions {
        resident_bases: true,
        pin_bases: false,
        g2: a.g2,
        vram_budget: a.resident_budget,
        c_on_device: true,
    })?;

    let toxic = Toxic::random(&mut ChaCha20Rng::seed_from_u64(u64::from(a.log_size)));
    let t = Instant::now();
    let (params, gen_t) = gpu_params(&spec, &toxic, &gpu.uuid, index)
        .with_context(|| format!("generating parameters for {spec}"))?;
    println!(
        "parameters in {:.1} s (shape and QAP at tau {:.1}, G1 on the GPU {:.1}, G2 on the GPU {:.1}); peak RSS {}",
        t.elapsed().as_secs_f64(),
        gen_t.evaluation,
        gen_t.g1,
        gen_t.g2,
        rss_text()
    );
    let key = ProvingKey::new(format!("fast {spec}"), params);
    let shape = key.shape();
    println!(
        "key: H {} L {} A {} B_G1 {} B_G2 {} points, {} public inputs",
        shape.h,
        shape.l,
        shape.a,
        shape.b_g1,
        shape.b_g2,
        key.vk().ic.len() - 1
    );

    let resident = engine.resident_bytes(&key);
    let phase = engine.vram_bytes(&key, a.log_size);
    println!(
        "VRAM plan: resident bases {:.1} GiB + phase {:.1} GiB = {:.1} GiB of {:.1} GiB; G2 on the {}",
        resident as f64 / GIB,
        phase as f64 / GIB,
        (resident + phase) as f64 / GIB,
        gpu.total_mem as f64 / GIB,
        if engine.g2_on_gpu(&key) { "GPU" } else { "CPU" }
    );
    // The phase lease the resident proofs will ask for, planned as they will plan it (the
    // `phase` above planned for bases in host memory: the key is not resident yet).
    let resident_phase = match plan::plan(&PlanInput {
        shape,
        log_domain: a.log_size,
        multiprocessors: gpu.multiprocessors,
        g2_on_gpu: engine.g2_on_gpu(&key),
        bases: BasesAt::Resident,
        budget: a.resident_budget.unwrap_or(u64::MAX),
    }) {
        Ok(p) => p.peak,
        Err(PlanError::DoesNotFit { needed, .. }) => needed,
        Err(e) => return Err(e.into()),
    };
    // The driver's own context and the probe leave about a GiB less than the card's size.
    let usable = gpu.total_mem.saturating_sub(1 << 30);
    let mut result = Vec::new();
    if resident.saturating_add(resident_phase) > usable {
        // A card too small for the resident bases beside the phase: the streamed proofs below
        // still run (a 16 GiB lease holds a 2^27 phase).
        println!(
            "resident proofs skipped: {spec} needs {:.1} GiB of VRAM with resident bases ({:.1} \
             + a phase of {:.1}), the GPU has {:.1} GiB",
            (resident + resident_phase) as f64 / GIB,
            resident as f64 / GIB,
            resident_phase as f64 / GIB,
            gpu.total_mem as f64 / GIB
        );
        if a.budgets.is_empty() {
            bail!("nothing to prove: the resident bases do not fit and no --budget was given");
        }
    } else {
        let before = vram_used(&gpu.uuid, index);
        let resident_lease = ExclusiveDevice::assume_unshared(gpu.uuid.clone(), index, resident);
        let t = Instant::now();
        engine.load_resident(&key, &resident_lease)?;
        let load = t.elapsed().as_secs_f64();
        let loaded = vram_used(&gpu.uuid, index);
        println!(
            "bases resident in {load:.1} s; VRAM used {} before, {} with the bases",
            gib(before),
            gib(loaded)
        );
        // The phase lease planned above for resident bases.
        let phase = resident_phase;
        println!(
            "phase lease with the bases resident: {:.2} GiB{}",
            phase as f64 / GIB,
            a.resident_budget.map_or(String::new(), |b| format!(
                " (planned within {:.1} GiB)",
                b as f64 / GIB
            ))
        );

        if a.sequential_too {
            let s = synthesis_secs(&spec, SynthesisMode::Sequential)?;
            println!("synthesis alone, sequential: {s:.2} s");
        }
        let lease = ExclusiveDevice::assume_unshared(gpu.uuid.clone(), index, phase.max(1));
        // A warm-up proof (kernels, pools), then the timed one.
        for rep in 0..2u64 {
            let p = prove_once(&engine, &lease, &key, &spec, rep, rep + 3, rep + 5)?;
            let (synthesis, tail, total, verified) = (p.synthesis, p.tail, p.total, p.verified);
            println!(
                "proof {rep}{}: synthesis {synthesis:.2} s (parallel), {}, tail {tail:.3} s, total {total:.2} s, verified {verified}",
                if rep == 0 { " (warm-up)" } else { "" },
                phase_text(&p.timings),
            );
            result.push(verified);
        }
        let after = vram_used(&gpu.uuid, index);
        println!(
            "VRAM used after the proofs {} (planned peak {:.1} GiB); peak host RSS {}",
            gib(after),
            (resident + phase) as f64 / GIB,
            rss_text()
        );
        engine.unload_resident(&key, Some(&resident_lease))?;
        drop(engine);
    }
    // The same partition within smaller leases: bases streamed chunk by chunk.
    for &budget in &a.budgets {
        let streamed = CudaEngine::new(CudaOptions {
            resident_bases: false,
            pin_bases: true,
            g2: a.g2,
            vram_budget: Some(budget),
            c_on_device: true,
        })?;
        let phase = streamed.vram_bytes(&key, a.log_size).min(budget);
        let lease = ExclusiveDevice::assume_unshared(gpu.uuid.clone(), index, phase.max(1));
        let p = prove_once(&streamed, &lease, &key, &spec, 7, 11, 13)?;
        let (synthesis, timings, verified) = (p.synthesis, p.timings, p.verified);
        let within = timings.measured_peak <= budget;
        println!(
            "streamed within a {:.1} GiB lease (asked {:.2} GiB): synthesis {synthesis:.2} s, {}, planned peak {:.2} GiB, measured peak {:.2} GiB (within the lease: {within}), verified {verified}",
            budget as f64 / GIB,
            phase as f64 / GIB,
            phase_text(&timings),
            timings.planned_peak as f64 / GIB,
            timings.measured_peak as f64 / GIB,
        );
        result.push(verified && within);
    }
    if !result.iter().all(|&v| v) {
        bail!("a {spec} proof did not verify, or a streamed phase went past its lease");
    }
    println!("{spec}: proofs verify");
    Ok(())
}
