//! A fast Groth16 parameter generator: bellperson's `generate_parameters`, with the G1 and G2
//! fixed-base multiplications on the GPU ([`gpud_cuda::fixed_base`]), or on all CPU cores with
//! window tables.
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

use gpud_cuda::fixed_base::{FixedBase, FixedBaseCurve, G1FixedBase, G2FixedBase};
use gpud_cuda::msm::{G1, G2};

use crate::circuits::counting;
use crate::cs::{CsResult, Lc, Record};
use crate::error::{ProverError, Result};
use crate::fft::Domain;
use crate::segmented::{SegmentShape, Segmented, zeroed};

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

/// Where the fixed-base multiplications run.
#[derive(Debug, Clone, Copy)]
pub enum Backend<'a> {
    /// All CPU cores, over window tables.
    Cpu,
    /// A GPU, with both generators' tables uploaded ([`GpuTables::new`]).
    Gpu(&'a GpuTables<'a>),
}

/// The G1 and G2 generators' window tables on a GPU, for [`Backend::Gpu`].
#[derive(Debug)]
pub struct GpuTables<'a> {
    g1: G1FixedBase<'a>,
    g2: G2FixedBase<'a>,
}

impl<'a> GpuTables<'a> {
    /// Uploads the tables of `toxic`'s two generators into `arena`.
    pub fn new(arena: &'a gpud_cuda::Arena<'a>, toxic: &Toxic) -> Result<Self> {
        Ok(Self {
            g1: G1FixedBase::new(arena, &toxic.g1)?,
            g2: G2FixedBase::new(arena, &toxic.g2)?,
        })
    }

    /// The VRAM the tables and their multiplications charge a lease at most.
    pub fn charged_bytes() -> u64 {
        G1FixedBase::charged_bytes() + G2FixedBase::charged_bytes()
    }
}

/// Seconds of each step, for the benchmark.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct GenTimings {
    /// Synthesis of the circuit's shape (0 when it is part of `evaluation`: the generator
    /// now evaluates while it synthesizes).
    pub synthesis: f64,
    /// Synthesis of the shape, powers of τ, the inverse FFT and the evaluation of every
    /// variable's polynomials.
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

crate::constraint_system!(Assembly);

impl Record for Assembly {
    fn aux(&mut self, _: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        self.num_aux += 1;
        Ok(Variable::new_unchecked(Index::Aux(self.num_aux - 1)))
    }

    fn input(&mut self, _: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        self.num_inputs += 1;
        Ok(Variable::new_unchecked(Index::Input(self.num_inputs - 1)))
    }

    fn constraint(
        &mut self,
        a: impl FnOnce(Lc) -> Lc,
        b: impl FnOnce(Lc) -> Lc,
        c: impl FnOnce(Lc) -> Lc,
    ) {
        self.push(0, &a(LinearCombination::zero()));
        self.push(1, &b(LinearCombination::zero()));
        self.push(2, &c(LinearCombination::zero()));
        self.num_constraints += 1;
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
    // 16-bit windows (a 2^20-point table, 200 MB in G2) save a quarter of the additions over
    // 12-bit ones; worth it from 2^24 multiplications (a 2^26 key's G2 B query).
    if n >= 1 << 24 {
        16
    } else if n >= 1 << 16 {
        12
    } else {
        8
    }
}

/// `k · base` for every scalar, in affine form, on the backend (`table` picks the GPU table of
/// `base`'s group).
fn points<C>(
    backend: Backend<'_>,
    base: C::Projective,
    scalars: &[Scalar],
    table: impl for<'a> Fn(&'a GpuTables<'a>) -> &'a FixedBase<'a, C>,
) -> Result<Vec<C::Affine>>
where
    C: FixedBaseCurve,
    C::Projective: Curve<AffineRepr = C::Affine> + Send + Sync,
    C::Affine: PrimeCurveAffine + Copy + Default + Send + Sync,
{
    if scalars.is_empty() {
        return Ok(Vec::new());
    }
    match backend {
        Backend::Cpu => Ok(HostTable::new(base, host_bits(scalars.len())).mul_all(scalars)),
        Backend::Gpu(t) => {
            let mut out = vec![C::Affine::identity(); scalars.len()];
            table(t).mul(scalars, &mut out)?;
            Ok(out)
        }
    }
}

fn g1_points(
    backend: Backend<'_>,
    base: G1Projective,
    scalars: &[Scalar],
) -> Result<Vec<G1Affine>> {
    points::<G1>(backend, base, scalars, |t| &t.g1)
}

fn g2_points(
    backend: Backend<'_>,
    base: G2Projective,
    scalars: &[Scalar],
) -> Result<Vec<G2Affine>> {
    points::<G2>(backend, base, scalars, |t| &t.g2)
}

use qap::Qap;

mod qap {
    //! Public but unnameable outside the generator: [`super::Generate`]'s result.
    use blstrs::Scalar;

    /// The QAP of a circuit evaluated at τ: per variable (inputs, then aux) `a_i(τ)`,
    /// `b_i(τ)`, `c_i(τ)`.
    pub struct Qap {
        pub num_inputs: usize,
        pub at: Vec<Scalar>,
        pub bt: Vec<Scalar>,
        pub ct: Vec<Scalar>,
    }
}

/// The Lagrange basis of `domain` at τ, and τ's powers times Z(τ)/δ (the H scalars).
fn lagrange_at(domain: &Domain, tau: Scalar, z_scale: Scalar) -> (Vec<Scalar>, Vec<Scalar>) {
    let m = domain.size();
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
    let z_over_delta = (tau.pow_vartime([m as u64]) - Scalar::ONE) * z_scale;
    let h_scalars: Vec<Scalar> = powers[..m - 1]
        .par_iter()
        .map(|p| *p * z_over_delta)
        .collect();
    domain.ifft(&mut powers);
    (powers, h_scalars)
}

/// A circuit the generator can evaluate: through the whole-circuit [`Assembly`] unless it is
/// segmented, then segment by segment on all cores with no assembly at all.
pub trait Generate: Circuit<Scalar> + Sized {
    /// Synthesizes the shape, sizes the domain, and evaluates the QAP at τ (`z_scale` = 1/δ).
    #[doc(hidden)]
    fn qap(self, tau: Scalar, z_scale: Scalar) -> Result<(Qap, Vec<Scalar>, Arc<Domain>)> {
        qap_assembled(self, tau, z_scale)
    }
}

impl Generate for crate::circuits::AnyCircuit {
    fn qap(self, tau: Scalar, z_scale: Scalar) -> Result<(Qap, Vec<Scalar>, Arc<Domain>)> {
        match self {
            Self::Porep(c) => qap_segmented(&c, tau, z_scale),
            other => qap_assembled(other, tau, z_scale),
        }
    }
}

fn qap_assembled<C: Circuit<Scalar>>(
    circuit: C,
    tau: Scalar,
    z_scale: Scalar,
) -> Result<(Qap, Vec<Scalar>, Arc<Domain>)> {
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
    let domain = Domain::for_constraints(cs.num_constraints)?;
    let (lagrange, h_scalars) = lagrange_at(&domain, tau, z_scale);
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
    let qap = Qap {
        num_inputs: cs.num_inputs,
        at,
        bt,
        ct,
    };
    Ok((qap, h_scalars, domain))
}

/// Per segment in parallel: each evaluates its constraints' terms into its own aux slots (no
/// terms are stored); the inputs' sums are folded per worker and added up.
fn qap_segmented<S: Segmented + ?Sized>(
    circuit: &S,
    tau: Scalar,
    z_scale: Scalar,
) -> Result<(Qap, Vec<Scalar>, Arc<Domain>)> {
    let mut pre = counting::Counter::default();
    let inputs = circuit.alloc_inputs(&mut pre)?;
    let num_inputs = pre.inputs + 1;
    let shapes: Vec<SegmentShape> = (0..circuit.num_segments())
        .map(|i| circuit.segment_shape(i))
        .collect();
    let num_aux: usize = shapes.iter().map(|s| s.aux).sum();
    let body: usize = shapes.iter().map(|s| s.constraints).sum();
    let num_constraints = body + num_inputs;
    let domain = Domain::for_constraints(num_constraints)?;
    let (lagrange, h_scalars) = lagrange_at(&domain, tau, z_scale);
    let nv = num_inputs + num_aux;
    let (mut at, mut bt, mut ct) = (zeroed(nv), zeroed(nv), zeroed(nv));

    let mut parts = Vec::with_capacity(shapes.len());
    {
        let (mut ra, mut rb, mut rc) = (
            &mut at[num_inputs..],
            &mut bt[num_inputs..],
            &mut ct[num_inputs..],
        );
        let (mut aux_offset, mut con_offset) = (0, 0);
        for (segment, shape) in shapes.iter().enumerate() {
            let (sa, ta) = std::mem::take(&mut ra).split_at_mut(shape.aux);
            let (sb, tb) = std::mem::take(&mut rb).split_at_mut(shape.aux);
            let (sc, tc) = std::mem::take(&mut rc).split_at_mut(shape.aux);
            (ra, rb, rc) = (ta, tb, tc);
            parts.push((segment, *shape, aux_offset, con_offset, [sa, sb, sc]));
            aux_offset += shape.aux;
            con_offset += shape.constraints;
        }
    }
    let lagrange = &lagrange;
    let inputs = &inputs;
    let sums = parts
        .into_par_iter()
        .try_fold(
            || vec![[Scalar::ZERO; 3]; num_inputs],
            |mut acc, (segment, shape, aux_offset, con_offset, out)| {
                let mut cs = EvalCs {
                    lagrange,
                    inputs: &mut acc,
                    out,
                    aux_offset,
                    aux_len: 0,
                    constraint: con_offset,
                    bad: None,
                };
                circuit.synthesize_segment(segment, &mut cs, inputs)?;
                if let Some(reason) = cs.bad {
                    return Err(ProverError::BadSegment { segment, reason });
                }
                if cs.aux_len != shape.aux || cs.constraint - con_offset != shape.constraints {
                    return Err(ProverError::BadSegment {
                        segment,
                        reason: format!(
                            "declared {} aux variables and {} constraints but allocated {} and {}",
                            shape.aux,
                            shape.constraints,
                            cs.aux_len,
                            cs.constraint - con_offset
                        ),
                    });
                }
                Ok(acc)
            },
        )
        .try_reduce(
            || vec![[Scalar::ZERO; 3]; num_inputs],
            |mut x, y| {
                for (a, b) in x.iter_mut().zip(y) {
                    for q in 0..3 {
                        a[q] += b[q];
                    }
                }
                Ok(x)
            },
        )?;
    for (i, s) in sums.iter().enumerate() {
        at[i] = s[0];
        bt[i] = s[1];
        ct[i] = s[2];
        // The constraint `input_i · 0 = 0` after the body.
        at[i] += lagrange[body + i];
    }
    let qap = Qap {
        num_inputs,
        at,
        bt,
        ct,
    };
    Ok((qap, h_scalars, domain))
}

/// One segment's shape evaluated at τ: `out[q][local aux] += L_c(τ) · coeff` per term.
struct EvalCs<'a> {
    lagrange: &'a [Scalar],
    inputs: &'a mut [[Scalar; 3]],
    out: [&'a mut [Scalar]; 3],
    aux_offset: usize,
    aux_len: usize,
    constraint: usize,
    bad: Option<String>,
}

crate::constraint_system!(EvalCs<'_>);

impl Record for EvalCs<'_> {
    fn aux(&mut self, _: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        if self.aux_len == self.out[0].len() {
            self.bad
                .get_or_insert_with(|| "allocates more aux variables than it declared".into());
            return Err(SynthesisError::Unsatisfiable);
        }
        self.aux_len += 1;
        Ok(Variable::new_unchecked(Index::Aux(
            self.aux_offset + self.aux_len - 1,
        )))
    }

    fn input(&mut self, _: impl FnOnce() -> CsResult<Scalar>) -> CsResult<Variable> {
        self.bad
            .get_or_insert_with(|| "allocates a public input".into());
        Err(SynthesisError::Unsatisfiable)
    }

    fn constraint(
        &mut self,
        a: impl FnOnce(Lc) -> Lc,
        b: impl FnOnce(Lc) -> Lc,
        c: impl FnOnce(Lc) -> Lc,
    ) {
        let Some(&l) = self.lagrange.get(self.constraint) else {
            self.bad.get_or_insert_with(|| "overruns the domain".into());
            return;
        };
        let lcs = [
            a(LinearCombination::zero()),
            b(LinearCombination::zero()),
            c(LinearCombination::zero()),
        ];
        for (q, lc) in lcs.iter().enumerate() {
            for (&i, coeff) in lc.iter_inputs() {
                match self.inputs.get_mut(i) {
                    Some(s) => s[q] += l * coeff,
                    None => {
                        self.bad
                            .get_or_insert_with(|| format!("names unknown input {i}"));
                    }
                }
            }
            for (&i, coeff) in lc.iter_aux() {
                match i.checked_sub(self.aux_offset).filter(|&j| j < self.aux_len) {
                    Some(j) => self.out[q][j] += l * coeff,
                    None => {
                        self.bad
                            .get_or_insert_with(|| format!("names aux variable {i}, not its own"));
                    }
                }
            }
        }
        self.constraint += 1;
    }
}

/// Generates parameters for `circuit` (its shape: witness closures are never called) from the
/// secrets `toxic`, with the fixed-base multiplications on `backend` (whose tables, for the
/// GPU, must be of `toxic`'s generators).
///
/// Memory (docs/PROVER.md has the plan): a segmented circuit's shape is never stored; the
/// scalars of each point group are multiplied group by group, zero ones (identity points)
/// left out before, so the parameters are built once, in place, with no second copy.
pub fn generate<C: Generate>(
    circuit: C,
    toxic: &Toxic,
    backend: Backend<'_>,
) -> Result<(Parameters<Bls12>, GenTimings)> {
    let start = std::time::Instant::now();
    let mut t = GenTimings::default();
    let gamma_inv =
        Option::<Scalar>::from(toxic.gamma.invert()).ok_or(SynthesisError::UnexpectedIdentity)?;
    let delta_inv =
        Option::<Scalar>::from(toxic.delta.invert()).ok_or(SynthesisError::UnexpectedIdentity)?;
    let (qap, h_scalars, domain) = circuit.qap(toxic.tau, delta_inv)?;
    let m = domain.size();
    let Qap {
        num_inputs,
        at,
        bt,
        ct,
    } = qap;
    let ext: Vec<Scalar> = at
        .par_iter()
        .zip(bt.par_iter())
        .zip(ct.par_iter())
        .enumerate()
        .map(|(i, ((a, b), c))| {
            let inv = if i < num_inputs { gamma_inv } else { delta_inv };
            (*a * toxic.beta + *b * toxic.alpha + *c) * inv
        })
        .collect();
    drop(ct);
    if ext[num_inputs..].iter().any(|e| bool::from(e.is_zero())) {
        return Err(SynthesisError::UnconstrainedVariable.into());
    }
    t.evaluation = start.elapsed().as_secs_f64();

    // The G1 points group by group; a zero scalar's point is the identity, which the A and B
    // queries leave out, so those scalars are dropped before multiplying.
    let lap = std::time::Instant::now();
    let nonzero = |v: &[Scalar]| -> Vec<Scalar> {
        v.par_iter()
            .copied()
            .filter(|x| !bool::from(x.is_zero()))
            .collect()
    };
    debug_assert_eq!(h_scalars.len(), m - 1);
    let h = g1_points(backend, toxic.g1, &h_scalars)?;
    drop(h_scalars);
    let a_g1 = g1_points(backend, toxic.g1, &nonzero(&at))?;
    drop(at);
    let b_nonzero = nonzero(&bt);
    drop(bt);
    let b_g1 = g1_points(backend, toxic.g1, &b_nonzero)?;
    let mut ic = g1_points(backend, toxic.g1, &ext)?;
    drop(ext);
    let l = ic.split_off(num_inputs);
    t.g1 = lap.elapsed().as_secs_f64();

    let lap = std::time::Instant::now();
    let b_g2 = g2_points(backend, toxic.g2, &b_nonzero)?;
    drop(b_nonzero);
    t.g2 = lap.elapsed().as_secs_f64();

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
    let params = Parameters {
        vk,
        h: Arc::new(h),
        l: Arc::new(l),
        a: Arc::new(a_g1),
        b_g1: Arc::new(b_g1),
        b_g2: Arc::new(b_g2),
    };
    t.total = start.elapsed().as_secs_f64();
    Ok((params, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_tables_multiply_like_the_group_for_every_window_size() {
        let base = G1Projective::generator() * Scalar::from(7u64);
        let scalars = [
            Scalar::ZERO,
            Scalar::ONE,
            Scalar::from(0xffff_u64),
            -Scalar::ONE,
            Scalar::from(u64::MAX).square(),
        ];
        for bits in [8, 12, 16] {
            let table = HostTable::new(base, bits);
            let got = table.mul_all(&scalars);
            for (k, p) in scalars.iter().zip(got) {
                assert_eq!(p, (base * k).to_affine(), "{bits}-bit windows, {k:?}");
            }
        }
    }
}
