//! A fast Groth16 parameter generator: bellperson's `generate_parameters`, with the G1
//! fixed-base multiplications on the GPU ([`gpud_cuda::fixed_base`]) and the G2 ones on all
//! CPU cores with a window table.
//!
//! Given the same secrets ([`Toxic`]) it produces *the same parameters* as
//! `bellperson::groth16::generate_parameters`, byte for byte (`tests/paramgen.rs` checks it
//! with the CPU path; the GPU tests check that the GPU path equals the CPU path), so proofs
//! made with them verify and match `create_proof` like any bellperson parameters. bellperson
//! needs about 85 s at 2^20 and 6 minutes at 2^22 on 16 cores; this takes seconds.
//!
//! The steps mirror bellperson's generator: synthesize the circuit's shape recording, per
//! variable, the constraints it appears in (A, B, C); add one `input · 1 = 0`-style constraint
//! per input; evaluate the Lagrange basis at τ by an inverse FFT of τ's powers; evaluate every
//! variable's A, B, C polynomials at τ; then
//! H_i = τ^i·Z(τ)/δ·G1 (i < m − 1), A_i = a_i(τ)·G1, B_i = b_i(τ)·G1 and ·G2,
//! IC_i / L_i = (β·a_i + α·b_i + c_i)/γ or /δ ·G1; identity points are dropped from A and B.

use std::ops::AddAssign;
use std::sync::Arc;

use bellperson::groth16::{Parameters, VerifyingKey};
use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::{Bls12, G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::{Field, PrimeField};
use group::prime::PrimeCurveAffine;
use group::{Curve, Group};
use rand_core::RngCore;
use rayon::prelude::*;

use crate::error::Result;
use crate::fft::Domain;

/// The secrets of one parameter set (bellperson's "toxic waste"): the two generators and
/// α, β, γ, δ, τ.
#[derive(Debug, Clone, Copy)]
pub struct Toxic {
    /// The G1 generator.
    pub g1: G1Projective,
    /// The G2 generator.
    pub g2: G2Projective,
    /// α.
    pub alpha: Scalar,
    /// β.
    pub beta: Scalar,
    /// γ.
    pub gamma: Scalar,
    /// δ.
    pub delta: Scalar,
    /// τ.
    pub tau: Scalar,
}

impl Toxic {
    /// Draws them in the order bellperson's `generate_random_parameters` does.
    pub fn random<R: RngCore>(rng: &mut R) -> Self {
        Self {
            g1: G1Projective::random(&mut *rng),
            g2: G2Projective::random(&mut *rng),
            alpha: Scalar::random(&mut *rng),
            beta: Scalar::random(&mut *rng),
            gamma: Scalar::random(&mut *rng),
            delta: Scalar::random(&mut *rng),
            tau: Scalar::random(&mut *rng),
        }
    }
}

/// Where the G1 multiplications run.
#[derive(Debug, Clone, Copy)]
pub enum G1Backend<'a> {
    /// All CPU cores, over a window table.
    Cpu,
    /// A GPU, with the generator's table uploaded (`G1FixedBase::new(arena, &toxic.g1)`).
    Gpu(&'a gpud_cuda::fixed_base::G1FixedBase<'a>),
}

/// Seconds of each step, for the benchmark.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct GenTimings {
    /// Synthesis of the circuit's shape.
    pub synthesis: f64,
    /// Powers of τ, the inverse FFT and the evaluation of every variable's polynomials.
    pub evaluation: f64,
    /// The G1 points.
    pub g1: f64,
    /// The G2 points.
    pub g2: f64,
    /// Everything.
    pub total: f64,
}

/// One term of a linear combination: variable (bit 63 set for aux), constraint, coefficient.
#[derive(Debug, Clone, Copy)]
struct Term {
    var: u64,
    constraint: u64,
    coeff: Scalar,
}

const AUX: u64 = 1 << 63;

/// The circuit's shape: variable counts and the terms of A, B and C.
#[derive(Debug, Default)]
struct Assembly {
    num_inputs: usize,
    num_aux: usize,
    num_constraints: usize,
    terms: [Vec<Term>; 3],
}

impl Assembly {
    fn push(&mut self, which: usize, lc: &LinearCombination<Scalar>) {
        let constraint = self.num_constraints as u64;
        for (&i, &coeff) in lc.iter_inputs() {
            self.terms[which].push(Term {
                var: i as u64,
                constraint,
                coeff,
            });
        }
        for (&i, &coeff) in lc.iter_aux() {
            self.terms[which].push(Term {
                var: AUX | i as u64,
                constraint,
                coeff,
            });
        }
    }
}

impl ConstraintSystem<Scalar> for Assembly {
    type Root = Self;

    fn alloc<F, A, AR>(&mut self, _: A, _: F) -> std::result::Result<Variable, SynthesisError>
    where
        F: FnOnce() -> std::result::Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.num_aux += 1;
        Ok(Variable::new_unchecked(Index::Aux(self.num_aux - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, _: F) -> std::result::Result<Variable, SynthesisError>
    where
        F: FnOnce() -> std::result::Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.num_inputs += 1;
        Ok(Variable::new_unchecked(Index::Input(self.num_inputs - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, c: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        self.push(0, &a(LinearCombination::zero()));
        self.push(1, &b(LinearCombination::zero()));
        self.push(2, &c(LinearCombination::zero()));
        self.num_constraints += 1;
    }

    fn push_namespace<NR, N>(&mut self, _: N)
    where
        NR: Into<String>,
        N: FnOnce() -> NR,
    {
    }

    fn pop_namespace(&mut self) {}

    fn get_root(&mut self) -> &mut Self::Root {
        self
    }
}

/// A window table of `base` on the host: entry `w · (2^bits − 1) + d − 1` is
/// `d · 2^(bits·w) · base`.
struct HostTable<G: Curve> {
    bits: u32,
    points: Vec<G::AffineRepr>,
}

impl<G> HostTable<G>
where
    G: Curve + Group + Send + Sync + for<'a> AddAssign<&'a G::AffineRepr>,
    G::AffineRepr: Copy + Default + Send + Sync,
{
    fn windows(bits: u32) -> usize {
        255usize.div_ceil(bits as usize)
    }

    fn new(base: G, bits: u32) -> Self {
        let digits = (1usize << bits) - 1;
        let windows = Self::windows(bits);
        // Each window's row from its base, rows in parallel.
        let mut bases = Vec::with_capacity(windows);
        let mut b = base;
        for _ in 0..windows {
            bases.push(b);
            for _ in 0..bits {
                b = b.double();
            }
        }
        let mut points = vec![G::AffineRepr::default(); windows * digits];
        points
            .par_chunks_mut(digits)
            .zip(bases.par_iter())
            .for_each(|(row, wb)| {
                let mut proj = Vec::with_capacity(digits);
                let mut acc = *wb;
                for _ in 0..digits {
                    proj.push(acc);
                    acc += *wb;
                }
                G::batch_normalize(&proj, row);
            });
        Self { bits, points }
    }

    /// `k · base` for a canonical little-endian scalar.
    fn mul(&self, k: &[u64; 4]) -> G {
        let digits = (1usize << self.bits) - 1;
        let mut acc = G::identity();
        for w in 0..Self::windows(self.bits) {
            let bit = w * self.bits as usize;
            let (limb, shift) = (bit / 64, bit % 64);
            let mut d = k[limb] >> shift;
            if shift + self.bits as usize > 64 && limb + 1 < 4 {
                d |= k[limb + 1] << (64 - shift);
            }
            let d = (d & ((1u64 << self.bits) - 1)) as usize;
            if d != 0 {
                acc += &self.points[w * digits + d - 1];
            }
        }
        acc
    }

    /// `k_i · base` in affine form for every scalar, on all cores.
    fn mul_all(&self, scalars: &[Scalar]) -> Vec<G::AffineRepr> {
        let mut out = vec![G::AffineRepr::default(); scalars.len()];
        out.par_chunks_mut(1024)
            .zip(scalars.par_chunks(1024))
            .for_each(|(o, s)| {
                let proj: Vec<G> = s.iter().map(|k| self.mul(&limbs64(k))).collect();
                G::batch_normalize(&proj, o);
            });
        out
    }
}

fn limbs64(s: &Scalar) -> [u64; 4] {
    let bytes = s.to_repr();
    let mut out = [0u64; 4];
    for (i, c) in bytes.as_ref().chunks_exact(8).enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        out[i] = u64::from_le_bytes(w);
    }
    out
}

/// Window bits of a host table for `n` multiplications: bigger tables pay off for many.
fn host_bits(n: usize) -> u32 {
    if n >= 1 << 16 { 12 } else { 8 }
}

fn g1_points(
    backend: G1Backend<'_>,
    base: G1Projective,
    scalars: &[Scalar],
) -> Result<Vec<G1Affine>> {
    match backend {
        G1Backend::Cpu => Ok(HostTable::new(base, host_bits(scalars.len())).mul_all(scalars)),
        G1Backend::Gpu(fb) => {
            let limbs: Vec<[u32; 8]> = scalars
                .par_iter()
                .map(gpud_cuda::fixed_base::canonical_limbs)
                .collect();
            let mut out = vec![G1Affine::identity(); scalars.len()];
            fb.mul(&limbs, &mut out)?;
            Ok(out)
        }
    }
}

/// Generates parameters for `circuit` (its shape: witness closures are never called) from the
/// secrets `toxic`, with the G1 multiplications on `backend` (whose table, for the GPU, must be
/// of `toxic.g1`).
pub fn generate<C: Circuit<Scalar>>(
    circuit: C,
    toxic: &Toxic,
    backend: G1Backend<'_>,
) -> Result<(Parameters<Bls12>, GenTimings)> {
    let start = std::time::Instant::now();
    let mut t = GenTimings::default();
    let mut cs = Assembly::default();
    cs.alloc_input(|| "", || Ok(Scalar::ONE))?;
    circuit.synthesize(&mut cs)?;
    for i in 0..cs.num_inputs {
        cs.enforce(
            || "",
            |lc| lc + Variable::new_unchecked(Index::Input(i)),
            |lc| lc,
            |lc| lc,
        );
    }
    t.synthesis = start.elapsed().as_secs_f64();

    let lap = std::time::Instant::now();
    let domain = Domain::for_constraints(cs.num_constraints)?;
    let m = domain.size();
    let tau = toxic.tau;
    // τ^i for i < m, in parallel chunks.
    let mut powers = vec![Scalar::ZERO; m];
    powers
        .par_chunks_mut(1 << 12)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut p = tau.pow_vartime([(c << 12) as u64]);
            for x in chunk {
                *x = p;
                p *= tau;
            }
        });
    let gamma_inv =
        Option::<Scalar>::from(toxic.gamma.invert()).ok_or(SynthesisError::UnexpectedIdentity)?;
    let delta_inv =
        Option::<Scalar>::from(toxic.delta.invert()).ok_or(SynthesisError::UnexpectedIdentity)?;
    let z_over_delta = (tau.pow_vartime([m as u64]) - Scalar::ONE) * delta_inv;
    let h_scalars: Vec<Scalar> = powers[..m - 1]
        .par_iter()
        .map(|p| *p * z_over_delta)
        .collect();
    // The Lagrange basis at τ.
    domain.ifft(&mut powers);
    let lagrange = powers;
    let nv = cs.num_inputs + cs.num_aux;
    let slot = |var: u64| {
        if var & AUX != 0 {
            cs.num_inputs + (var & !AUX) as usize
        } else {
            var as usize
        }
    };
    let eval = |terms: &[Term]| {
        let mut out = vec![Scalar::ZERO; nv];
        for term in terms {
            out[slot(term.var)] += lagrange[term.constraint as usize] * term.coeff;
        }
        out
    };
    let (at, (bt, ct)) = rayon::join(
        || eval(&cs.terms[0]),
        || rayon::join(|| eval(&cs.terms[1]), || eval(&cs.terms[2])),
    );
    drop(lagrange);
    let ext: Vec<Scalar> = (0..nv)
        .into_par_iter()
        .map(|i| {
            let inv = if i < cs.num_inputs {
                gamma_inv
            } else {
                delta_inv
            };
            (at[i] * toxic.beta + bt[i] * toxic.alpha + ct[i]) * inv
        })
        .collect();
    t.evaluation = lap.elapsed().as_secs_f64();

    // Every G1 point in one batch: H, A, B, then IC and L.
    let lap = std::time::Instant::now();
    let mut all = h_scalars;
    all.extend_from_slice(&at);
    all.extend_from_slice(&bt);
    all.extend_from_slice(&ext);
    let mut g1 = g1_points(backend, toxic.g1, &all)?;
    drop(all);
    let ext_g1 = g1.split_off(m - 1 + 2 * nv);
    let b_g1 = g1.split_off(m - 1 + nv);
    let a_g1 = g1.split_off(m - 1);
    let h = g1;
    t.g1 = lap.elapsed().as_secs_f64();

    let lap = std::time::Instant::now();
    let b_nonzero: Vec<Scalar> = bt
        .iter()
        .copied()
        .filter(|b| !bool::from(b.is_zero()))
        .collect();
    let b_g2: Vec<G2Affine> =
        HostTable::new(toxic.g2, host_bits(b_nonzero.len())).mul_all(&b_nonzero);
    t.g2 = lap.elapsed().as_secs_f64();

    let (ic, l) = {
        let mut ext_g1 = ext_g1;
        let l = ext_g1.split_off(cs.num_inputs);
        (ext_g1, l)
    };
    if l.iter().any(|p| bool::from(p.is_identity())) {
        return Err(SynthesisError::UnconstrainedVariable.into());
    }
    let g1a = toxic.g1.to_affine();
    let g2a = toxic.g2.to_affine();
    let vk = VerifyingKey::<Bls12> {
        alpha_g1: (g1a * toxic.alpha).to_affine(),
        beta_g1: (g1a * toxic.beta).to_affine(),
        beta_g2: (g2a * toxic.beta).to_affine(),
        gamma_g2: (g2a * toxic.gamma).to_affine(),
        delta_g1: (g1a * toxic.delta).to_affine(),
        delta_g2: (g2a * toxic.delta).to_affine(),
        ic,
    };
    let not_identity = |p: &G1Affine| !bool::from(p.is_identity());
    let params = Parameters {
        vk,
        h: Arc::new(h),
        l: Arc::new(l),
        a: Arc::new(a_g1.into_iter().filter(not_identity).collect()),
        b_g1: Arc::new(b_g1.into_iter().filter(not_identity).collect()),
        b_g2: Arc::new(b_g2),
    };
    t.total = start.elapsed().as_secs_f64();
    Ok((params, t))
}
