//! Whole proofs timed by stage: our CPU prover against bellperson's `create_random_proof`, same
//! circuit, key and machine ([`run`]), and engines against each other on one key ([`engines`]).

use std::time::Instant;

use bellperson::groth16;
use blstrs::Scalar;
use ff::Field;
use gpud_client::ExclusiveDevice;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::Serialize;

use gpud_prover::circuits::CircuitSpec;
use gpud_prover::engine::CpuEngine;
use gpud_prover::error::{ProverError, Result};
use gpud_prover::params::ProvingKey;
use gpud_prover::prove;
use gpud_prover::synthesis::SynthesisOptions;

/// Per-stage seconds of one of our proofs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct OurStages {
    /// Witness synthesis (with the constraint check).
    pub synthesis: f64,
    /// H polynomial: seven FFTs.
    pub h: f64,
    /// G1 MSMs: H, L, A, B_G1.
    pub g1_msms: f64,
    /// CPU tail: G2 MSM and assembly.
    pub cpu_tail: f64,
    /// Everything.
    pub total: f64,
}

/// One benchmark row: medians over the repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// Circuit name.
    pub circuit: String,
    /// log2 of the domain.
    pub log_size: u32,
    /// Constraints including input constraints.
    pub constraints: usize,
    /// Repetitions.
    pub reps: usize,
    /// Our prover, median per stage.
    pub ours: OurStages,
    /// bellperson's `create_random_proof`, median seconds.
    pub bellperson: f64,
    /// `ours.total / bellperson`: below 1 means we are faster.
    pub ratio: f64,
}

/// Times our prover and bellperson's, alternating, `reps` times each; every proof is verified.
pub fn run(spec: &CircuitSpec, key: &ProvingKey, reps: usize) -> Result<BenchRow> {
    let reps = reps.max(1);
    let device = ExclusiveDevice::assume_unshared("cpu", 0, u64::MAX);
    let mut rng = ChaCha20Rng::seed_from_u64(u64::from(spec.log_size()));
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut constraints = 0;
    // One untimed round of each warms caches and the thread pools.
    for rep in 0..=reps {
        let seed = rep as u64;
        let (r, s) = (Scalar::random(&mut rng), Scalar::random(&mut rng));

        let t0 = Instant::now();
        let syn = prove::synthesize(key, spec.with_witness(seed), SynthesisOptions::default())?;
        constraints = syn.num_constraints();
        let t1 = Instant::now();
        let out = prove::gpu_phase(&CpuEngine, &device, key, syn)?;
        let (h_secs, msm_secs) = (out.h_secs, out.msm_secs);
        let inputs = out.public_inputs().to_vec();
        let t3 = Instant::now();
        let proof = prove::cpu_tail(key, out, r, s)?;
        let t4 = Instant::now();
        if !key.verify(&proof, &inputs)? {
            return Err(ProverError::VerificationFailed);
        }

        let t5 = Instant::now();
        let proof = groth16::create_random_proof(spec.with_witness(seed), key.params(), &mut rng)?;
        let t6 = Instant::now();
        if !key.verify(&proof, &inputs)? {
            return Err(ProverError::VerificationFailed);
        }
        if rep == 0 {
            continue;
        }
        let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
        ours.push(OurStages {
            synthesis: secs(t0, t1),
            h: h_secs,
            g1_msms: msm_secs,
            cpu_tail: secs(t3, t4),
            total: secs(t0, t4),
        });
        theirs.push(secs(t5, t6));
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let pick = |f: fn(&OurStages) -> f64| med(ours.iter().map(f).collect());
    let ours_med = OurStages {
        synthesis: pick(|s| s.synthesis),
        h: pick(|s| s.h),
        g1_msms: pick(|s| s.g1_msms),
        cpu_tail: pick(|s| s.cpu_tail),
        total: pick(|s| s.total),
    };
    let bellperson = med(theirs);
    Ok(BenchRow {
        circuit: spec.kind().name().to_owned(),
        log_size: spec.log_size(),
        constraints,
        reps,
        ratio: ours_med.total / bellperson,
        ours: ours_med,
        bellperson,
    })
}

/// One engine's numbers in [`engines`]: medians over the timed repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct EngineRun {
    /// `cpu`, `cuda` (resident bases) or `cuda-uploads` (bases uploaded in every phase).
    pub engine: String,
    /// Timed repetitions (after the warm-up, if any).
    pub reps: usize,
    /// Witness synthesis.
    pub synthesis: f64,
    /// The GPU phase, by stage (for the CPU engine: the same stages on the CPU).
    pub gpu_phase: gpud_prover::engine::PhaseTimings,
    /// G2 MSM for B and the assembly.
    pub cpu_tail: f64,
    /// Synthesis + GPU phase + CPU tail.
    pub total: f64,
    /// VRAM of each phase lease (0 for the CPU engine).
    pub phase_vram: u64,
    /// VRAM of the resident lease.
    pub resident_vram: u64,
    /// Every proof of this engine verified.
    pub verified: bool,
}

/// A row of [`engines`]: one circuit size, every engine, same key, same machine, one run.
#[derive(Debug, Clone, Serialize)]
pub struct EnginesRow {
    /// Circuit name.
    pub circuit: String,
    /// log2 of the domain.
    pub log_size: u32,
    /// Constraints including input constraints.
    pub constraints: usize,
    /// The engines, in the order run.
    pub runs: Vec<EngineRun>,
    /// The first proof of every engine, made with the same witness and `r`, `s`, is the same
    /// proof, bit for bit.
    pub proofs_identical: bool,
    /// The first engine's first proof (witness 0, `r`, `s` from [`first_randomness`]).
    #[serde(skip)]
    pub first_proof: Option<groth16::Proof<blstrs::Bls12>>,
}

/// One timed proof: synthesis, GPU phase by stage, CPU tail, total.
type Sample = (f64, gpud_prover::engine::PhaseTimings, f64, f64);

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What one engine is asked to do in [`engines`].
pub struct EngineCase<'a> {
    /// Name in the report.
    pub name: &'a str,
    /// The engine.
    pub engine: &'a dyn gpud_prover::engine::Engine,
    /// Runs the GPU phases under this lease's device (a CUDA engine's GPU); the leases are
    /// claimed here (`ExclusiveDevice`): the benchmark owns the GPU.
    pub device: (String, u32),
    /// Untimed proofs first (kernel loading, caches, thread pools).
    pub warmup: usize,
    /// Timed proofs.
    pub reps: usize,
}

/// Times full proofs on several engines with one key: synthesis, each stage of the GPU phase,
/// the CPU tail; every proof verified, and the first proof of each engine (same witness, same
/// `r`, `s`) compared bit for bit.
pub fn engines(
    spec: &CircuitSpec,
    key: &ProvingKey,
    cases: &[EngineCase<'_>],
) -> Result<EnginesRow> {
    engines_with(spec, key, cases, SynthesisOptions::default())
}

/// [`engines`] with the given synthesis options (`parallel: false` times sequential
/// synthesis).
pub fn engines_with(
    spec: &CircuitSpec,
    key: &ProvingKey,
    cases: &[EngineCase<'_>],
    synthesis: SynthesisOptions,
) -> Result<EnginesRow> {
    let (mut rng, (r0, s0)) = first_randomness(spec);
    let mut first_proofs = Vec::new();
    let mut runs = Vec::new();
    let mut constraints = 0;
    for case in cases {
        let e = case.engine;
        let log = spec.log_size();
        let (uuid, index) = case.device.clone();
        let resident_vram = e.resident_bytes(key);
        let resident_lease = ExclusiveDevice::assume_unshared(uuid.clone(), index, resident_vram);
        if resident_vram > 0 {
            e.load_resident(key, &resident_lease)?;
        }
        let phase_vram = if e.name() == "cpu" {
            0
        } else {
            e.vram_bytes(key, log)
        };
        let lease = ExclusiveDevice::assume_unshared(uuid.clone(), index, phase_vram.max(1));
        let mut samples: Vec<Sample> = Vec::new();
        let mut verified = true;
        let result = (|| -> Result<()> {
            for rep in 0..case.warmup + case.reps {
                let (r, s) = if rep == 0 {
                    (r0, s0)
                } else {
                    (Scalar::random(&mut rng), Scalar::random(&mut rng))
                };
                let t0 = Instant::now();
                let syn = prove::synthesize(key, spec.with_witness(rep as u64), synthesis)?;
                constraints = syn.num_constraints();
                let synthesis = t0.elapsed().as_secs_f64();
                let out = prove::gpu_phase(e, &lease, key, syn)?;
                let phase = out.timings;
                let inputs = out.public_inputs().to_vec();
                let t1 = Instant::now();
                let proof = prove::cpu_tail(key, out, r, s)?;
                let tail = t1.elapsed().as_secs_f64();
                let total = t0.elapsed().as_secs_f64();
                verified &= key.verify(&proof, &inputs)?;
                if rep == 0 {
                    first_proofs.push(proof);
                }
                if rep >= case.warmup {
                    samples.push((synthesis, phase, tail, total));
                }
            }
            Ok(())
        })();
        if resident_vram > 0 {
            e.unload_resident(key, Some(&lease))?;
        }
        result?;
        let pick = |f: &dyn Fn(&Sample) -> f64| median(samples.iter().map(f).collect());
        let phase = gpud_prover::engine::PhaseTimings {
            setup: pick(&|s| s.1.setup),
            h: pick(&|s| s.1.h),
            h_upload: pick(&|s| s.1.h_upload),
            scalar_wait: pick(&|s| s.1.scalar_wait),
            msm_h: pick(&|s| s.1.msm_h),
            msm_l: pick(&|s| s.1.msm_l),
            msm_a: pick(&|s| s.1.msm_a),
            msm_b: pick(&|s| s.1.msm_b),
            msm_b_g2: pick(&|s| s.1.msm_b_g2),
            // The same bytes every proof: the key's queries, or none when resident.
            bases_streamed: samples.first().map_or(0, |s| s.1.bases_streamed),
            finish: pick(&|s| s.1.finish),
            total: pick(&|s| s.1.total),
            planned_peak: samples.iter().map(|s| s.1.planned_peak).max().unwrap_or(0),
            measured_peak: samples.iter().map(|s| s.1.measured_peak).max().unwrap_or(0),
            overlapped: samples.iter().any(|s| s.1.overlapped),
        };
        runs.push(EngineRun {
            engine: case.name.to_owned(),
            reps: case.reps,
            synthesis: pick(&|s| s.0),
            gpu_phase: phase,
            cpu_tail: pick(&|s| s.2),
            total: pick(&|s| s.3),
            phase_vram,
            resident_vram,
            verified,
        });
    }
    let proofs_identical = first_proofs.windows(2).all(|w| w[0] == w[1]);
    Ok(EnginesRow {
        circuit: spec.kind().name().to_owned(),
        log_size: spec.log_size(),
        constraints,
        runs,
        proofs_identical,
        first_proof: first_proofs.into_iter().next(),
    })
}

/// The `r`, `s` of the first proof of every engine in [`engines`] (witness 0) and of its
/// baseline ([`crate::bellperson_prover`]), so that those proofs can be compared bit for bit,
/// with the generator the later proofs' `r`, `s` come from.
pub fn first_randomness(spec: &CircuitSpec) -> (ChaCha20Rng, (Scalar, Scalar)) {
    let mut rng = ChaCha20Rng::seed_from_u64(u64::from(spec.log_size()) ^ 0x5eed);
    let rs = (Scalar::random(&mut rng), Scalar::random(&mut rng));
    (rng, rs)
}
