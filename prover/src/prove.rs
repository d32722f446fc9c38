//! A Groth16 proof in three steps: synthesis, the GPU phase (on an [`Engine`]), the CPU tail.
//!
//! The split is the pipeline's: only [`gpu_phase`] runs under a gpud lease; [`cpu_tail`] (the
//! assembly, and the G2 MSM for B unless the engine ran it in the phase) runs after the lease
//! is released, overlapping the next
//! partition's GPU phase. The arithmetic is bellperson 0.27's, so with the same `r` and `s`
//! the proof is bit-for-bit the one `bellperson::groth16::create_proof` makes.

use std::sync::Arc;
use std::time::Instant;

use bellperson::SynthesisError;
use bellperson::groth16::Proof;
use blstrs::{Bls12, G1Projective, G2Affine, G2Projective, Scalar};
use gpud_client::Reservation;
use group::Curve;
use group::prime::PrimeCurveAffine;

use crate::engine::{Engine, G1Scalars, G1Sums, HeldLease, PhaseInput, PhaseLease, PhaseTimings};
use crate::error::Result;
use crate::fft::Domain;
use crate::msm;
use crate::params::ProvingKey;
use crate::segmented::Synthesize;
use crate::synthesis::{Density, ProvingAssignment, SynthesisOptions};

/// A circuit synthesized against a key it fits.
#[derive(Debug)]
pub struct Synthesized {
    domain: Arc<Domain>,
    cs: ProvingAssignment,
}

impl Synthesized {
    /// Public inputs (without the leading one), as the verifier takes them.
    pub fn public_inputs(&self) -> &[Scalar] {
        self.cs.public_inputs()
    }

    /// Constraints including the public-input constraints.
    pub fn num_constraints(&self) -> usize {
        self.cs.num_constraints()
    }

    /// log2 of the evaluation domain.
    pub fn log_domain(&self) -> u32 {
        self.domain.log_size()
    }
}

/// Runs `circuit` with its witness and checks that `key` was made for it.
pub fn synthesize<C: Synthesize>(
    key: &ProvingKey,
    circuit: C,
    opts: SynthesisOptions,
) -> Result<Synthesized> {
    let cs = circuit.synthesize_assignment(opts)?;
    let domain = Domain::for_constraints(cs.num_constraints())?;
    key.check_fits(&cs, &domain)?;
    Ok(Synthesized { domain, cs })
}

/// What the CPU tail needs after the GPU phase.
#[derive(Debug)]
pub struct GpuPhaseOutput {
    /// The G1 sums.
    pub g1: G1Sums,
    /// Seconds computing H.
    pub h_secs: f64,
    /// Seconds in the G1 MSMs (with bases uploads and the final synchronize and trim).
    pub msm_secs: f64,
    /// The engine's own split of the phase.
    pub timings: PhaseTimings,
    /// The B sum over G2 when the engine computed it in the phase (else the CPU tail does).
    pub b_g2: Option<G2Projective>,
    input: Vec<Scalar>,
    aux: Vec<Scalar>,
    b_input_density: Density,
    b_aux_density: Density,
    public_inputs: Vec<Scalar>,
}

impl GpuPhaseOutput {
    /// Public inputs of the proof.
    pub fn public_inputs(&self) -> &[Scalar] {
        &self.public_inputs
    }
}

/// The work that runs under the lease: H (seven FFTs) and the G1 MSMs, in one engine call.
pub fn gpu_phase<E: Engine + ?Sized>(
    engine: &E,
    lease: &dyn Reservation,
    key: &ProvingKey,
    syn: Synthesized,
) -> Result<GpuPhaseOutput> {
    gpu_phase_with_safe_points(engine, &mut HeldLease(lease), key, syn)
}

/// [`gpu_phase`] under a lease that may be given back at the engine's safe points (a yield).
pub fn gpu_phase_with_safe_points<E: Engine + ?Sized>(
    engine: &E,
    lease: &mut dyn PhaseLease,
    key: &ProvingKey,
    syn: Synthesized,
) -> Result<GpuPhaseOutput> {
    let Synthesized { domain, cs } = syn;
    let ProvingAssignment {
        a,
        b,
        c,
        input,
        aux,
        a_aux_density,
        b_input_density,
        b_aux_density,
        ..
    } = cs;
    let start = Instant::now();
    let out = engine.gpu_phase_with_safe_points(
        lease,
        key,
        PhaseInput {
            domain: &domain,
            a,
            b,
            c,
            scalars: G1Scalars {
                input: &input,
                aux: &aux,
                a_aux_density: &a_aux_density,
                b_input_density: &b_input_density,
                b_aux_density: &b_aux_density,
            },
        },
    )?;
    let total = start.elapsed().as_secs_f64();
    Ok(GpuPhaseOutput {
        g1: out.sums,
        h_secs: out.timings.h,
        msm_secs: total - out.timings.h,
        timings: out.timings,
        b_g2: out.b_g2,
        public_inputs: input[1..].to_vec(),
        input,
        aux,
        b_input_density,
        b_aux_density,
    })
}

/// The G2 MSM for B over the key's dense B bases: the phase's result when the engine ran it
/// on the GPU, else computed here on the CPU.
pub fn b_g2_msm(key: &ProvingKey, out: &GpuPhaseOutput) -> G2Projective {
    match out.b_g2 {
        Some(b) => b,
        None => b_g2_on_cpu(key, out),
    }
}

/// The G2 MSM for B computed on the CPU (blst), whatever the engine did: the tail's fallback,
/// and the reference for a phase's own G2 sum.
pub fn b_g2_on_cpu(key: &ProvingKey, out: &GpuPhaseOutput) -> G2Projective {
    b_g2_sum(
        &key.params().b_g2,
        &out.input,
        &out.aux,
        &out.b_input_density,
        &out.b_aux_density,
    )
}

/// `Σ b_i·B_i` over the B query's G2 bases: the inputs present in B, then the aux variables.
pub fn b_g2_sum(
    bases: &[G2Affine],
    input: &[Scalar],
    aux: &[Scalar],
    b_input_density: &Density,
    b_aux_density: &Density,
) -> G2Projective {
    let b_in = b_input_density.count();
    msm::g2(&bases[..b_in], &b_input_density.select(input))
        + msm::g2(&bases[b_in..], &b_aux_density.select(aux))
}

/// The host work after the lease: the G2 MSM (unless the phase computed it) and the assembly
/// with the blinding `r`, `s`.
pub fn cpu_tail(
    key: &ProvingKey,
    out: GpuPhaseOutput,
    r: Scalar,
    s: Scalar,
) -> Result<Proof<Bls12>> {
    let b_g2 = b_g2_msm(key, &out);
    assemble(key, &out.g1, b_g2, r, s)
}

/// `A = α + Σa + rδ`, `B = β + Σb + sδ`, `C = s·Σa + r·Σb₁ + rsδ + sα + rβ + H + L`.
pub fn assemble(
    key: &ProvingKey,
    g1: &G1Sums,
    b_g2: G2Projective,
    r: Scalar,
    s: Scalar,
) -> Result<Proof<Bls12>> {
    let vk = key.vk();
    // An identity δ means a subverted CRS: the proof would leak the witness.
    if bool::from(vk.delta_g1.is_identity() | vk.delta_g2.is_identity()) {
        return Err(SynthesisError::UnexpectedIdentity.into());
    }
    let delta_g1 = G1Projective::from(vk.delta_g1);
    let a = delta_g1 * r + vk.alpha_g1 + g1.a;
    let b = G2Projective::from(vk.delta_g2) * s + vk.beta_g2 + b_g2;
    let c = g1.a * s
        + g1.b_g1 * r
        + delta_g1 * (r * s)
        + G1Projective::from(vk.alpha_g1) * s
        + G1Projective::from(vk.beta_g1) * r
        + g1.h
        + g1.l;
    Ok(Proof {
        a: a.to_affine(),
        b: b.to_affine(),
        c: c.to_affine(),
    })
}

/// Synthesis, GPU phase and CPU tail in one call (no pipelining).
pub fn prove<E: Engine + ?Sized, C: Synthesize>(
    engine: &E,
    lease: &dyn Reservation,
    key: &ProvingKey,
    circuit: C,
    r: Scalar,
    s: Scalar,
) -> Result<(Proof<Bls12>, Vec<Scalar>)> {
    // C only for an engine that reads it, as the pipeline does.
    let opts = SynthesisOptions {
        keep_c: engine.needs_c(),
        ..Default::default()
    };
    let syn = synthesize(key, circuit, opts)?;
    let out = gpu_phase(engine, lease, key, syn)?;
    let inputs = out.public_inputs().to_vec();
    Ok((cpu_tail(key, out, r, s)?, inputs))
}
