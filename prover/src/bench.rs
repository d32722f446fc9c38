//! Our CPU prover against bellperson's `create_random_proof`, same circuit, key and machine.

use std::time::Instant;

use bellperson::groth16;
use blstrs::Scalar;
use ff::Field;
use gpud_client::ExclusiveDevice;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::Serialize;

use crate::circuits::CircuitSpec;
use crate::engine::CpuEngine;
use crate::error::{ProverError, Result};
use crate::params::ProvingKey;
use crate::prove;
use crate::synthesis::SynthesisOptions;

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
    let device = ExclusiveDevice::claim("cpu", 0, u64::MAX);
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
