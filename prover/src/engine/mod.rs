//! Where the GPU phase of a proof runs: the H polynomial (seven FFTs) and the G1 MSMs.
//!
//! A proof splits into a *GPU phase*, which a GPU engine runs under a gpud lease, and a *CPU
//! tail* (the G2 MSM for B and the assembly), which always runs on the host after the lease is
//! released. [`Engine`] is the seam between the two: [`CpuEngine`] runs the GPU phase on the
//! host (rayon FFTs, blst Pippenger); a CUDA engine implements the same trait.
//!
//! The trait is shaped so that a GPU engine makes no extra copies:
//! - [`Engine::compute_h`] takes `a`, `b`, `c` by value and returns the engine's own handle to
//!   `h` ([`Engine::H`]): a device buffer may stay on the device until the H MSM consumes it.
//! - [`Engine::g1_msms`] names bases by query of a [`ProvingKey`], never by slice, so a GPU
//!   engine can keep a key's bases resident across proofs (keyed by [`ProvingKey::id`]) and
//!   upload only the scalars; densities come along so it can select the same scalars.
//! - Every call carries the lease ([`Reservation`]): the byte budget, and the compute token
//!   that device-global operations require.

mod cpu;

pub use cpu::CpuEngine;

use blstrs::{G1Projective, Scalar};
use gpud_client::Reservation;

use crate::error::Result;
use crate::fft::Domain;
use crate::params::ProvingKey;
use crate::synthesis::Density;

/// The assignment the G1 MSMs need, borrowed from the synthesized witness.
#[derive(Debug, Clone, Copy)]
pub struct G1Scalars<'a> {
    /// Public inputs, `input[0] = 1`.
    pub input: &'a [Scalar],
    /// Private variables.
    pub aux: &'a [Scalar],
    /// Aux variables present in the A query (inputs are all present).
    pub a_aux_density: &'a Density,
    /// Inputs present in the B query.
    pub b_input_density: &'a Density,
    /// Aux variables present in the B query.
    pub b_aux_density: &'a Density,
}

/// The four G1 sums of a proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct G1Sums {
    /// `Σ h_i · H_i`.
    pub h: G1Projective,
    /// `Σ aux_i · L_i`.
    pub l: G1Projective,
    /// `Σ input_i · A_i + Σ_{dense} aux_i · A_i`.
    pub a: G1Projective,
    /// `Σ_{dense} input_i · B_i + Σ_{dense} aux_i · B_i` over G1.
    pub b_g1: G1Projective,
}

/// Runs the GPU phase of a proof: the H polynomial and the G1 MSMs.
///
/// Engines may rely on the lengths fitting the key: [`crate::prove::gpu_phase`] only takes a
/// [`crate::prove::Synthesized`], which [`crate::prove::synthesize`] makes after
/// [`ProvingKey::check_fits`].
pub trait Engine: Send + Sync {
    /// The engine's handle to the coefficients of h (host vector, device buffer, …).
    type H: Send;

    /// Short name for logs and reports ("cpu", "cuda").
    fn name(&self) -> &'static str;

    /// Computes the `domain.size() − 1` coefficients of `h = (a·b − c)/Z` from the constraint
    /// evaluations (shorter than the domain; the engine pads them with zeros).
    fn compute_h(
        &self,
        lease: &dyn Reservation,
        key: &ProvingKey,
        domain: &Domain,
        a: Vec<Scalar>,
        b: Vec<Scalar>,
        c: Vec<Scalar>,
    ) -> Result<Self::H>;

    /// The G1 MSMs over the key's H, L, A and B_G1 queries, consuming `h`.
    fn g1_msms(
        &self,
        lease: &dyn Reservation,
        key: &ProvingKey,
        h: Self::H,
        scalars: G1Scalars<'_>,
    ) -> Result<G1Sums>;

    /// Bytes of device memory this engine allocates for a proof over a domain of
    /// `2^log_domain` (what the lease must reserve). See [`crate::vram`].
    fn vram_bytes(&self, key: &ProvingKey, log_domain: u32) -> u64 {
        crate::vram::estimate(&key.shape(), log_domain).total()
    }
}
