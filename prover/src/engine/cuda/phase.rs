//! One GPU phase on a device, in the order its plan gives ([`PhaseOrder`]): the H polynomial
//! and the MSMs over the proving key's queries, each MSM in the plan's chunks.
//!
//! - [`PhaseOrder::HFirst`]: a, b (and c) are copied and transformed into `h`, the H MSM runs
//!   and frees `h`, then L, A, B_G1 and B_G2.
//! - [`PhaseOrder::MsmsFirst`]: a thread copies a and b into the H buffers on a copy stream
//!   while L, A, B_G1 and B_G2 compute on the main stream; then the transforms and the H MSM.
//!
//! In both, the A and B scalars are selected by the caller's closure on a thread of its own
//! while the first steps run. The CUDA engine proves through [`run`]; `gpud-bench gpu-phase`
//! times the same code on stand-in bases.

use std::thread::ScopedJoinHandle;
use std::time::Instant;

use blstrs::{G1Projective, G2Projective, Scalar};
use gpud_cuda::Arena;
use gpud_cuda::hpoly::{CSource, HPoly};
use gpud_cuda::msm::{ChunkBases, ChunkScalars, G1, G2, MsmCurve, MsmEngine};
use group::Group;

use super::engine_error;
use crate::engine::{G1Sums, PhaseTimings};
use crate::error::{ProverError, Result};
use crate::plan::{PhaseOrder, PhasePlan, Query};

/// Where one phase reads each query's bases (resident on the device, or in host memory to be
/// streamed chunk by chunk).
#[derive(Debug, Clone, Copy)]
pub struct PhaseBases<'a, 'd> {
    /// The H query.
    pub h: ChunkBases<'a, 'd, G1>,
    /// The L query.
    pub l: ChunkBases<'a, 'd, G1>,
    /// The A query.
    pub a: ChunkBases<'a, 'd, G1>,
    /// The B query over G1.
    pub b_g1: ChunkBases<'a, 'd, G1>,
    /// The B query over G2; `None` leaves B_G2 to the CPU tail.
    pub b_g2: Option<ChunkBases<'a, 'd, G2>>,
}

/// A phase's host inputs.
#[derive(Debug, Clone, Copy)]
pub struct PhaseScalars<'a> {
    /// The A evaluations (one per constraint).
    pub a: &'a [Scalar],
    /// The B evaluations.
    pub b: &'a [Scalar],
    /// The C evaluations, or [`CSource::ProductOfAB`] to make them on the device.
    pub c: CSource<'a, Scalar>,
    /// The aux assignment (the L MSM's scalars).
    pub aux: &'a [Scalar],
}

/// What [`run`] returns.
#[derive(Debug)]
pub struct PhaseResult<Q> {
    /// The four G1 sums.
    pub sums: G1Sums,
    /// B over G2 when the phase computed it.
    pub b_g2: Option<G2Projective>,
    /// The A and B query scalars the selection made (the caller frees them, e.g. off the
    /// phase's thread).
    pub queries: (Q, Q),
}

/// Runs the phase of `plan` under `arena`: `select` makes the A and B query scalars (on a
/// thread of its own, started first); every stage's time goes into `t` (`h_upload` is the
/// copies of a, b, c, which overlap the MSMs in [`PhaseOrder::MsmsFirst`]).
pub fn run<Q, F>(
    arena: &Arena<'_>,
    plan: &PhasePlan,
    bases: &PhaseBases<'_, '_>,
    x: PhaseScalars<'_>,
    select: F,
    t: &mut PhaseTimings,
) -> Result<PhaseResult<Q>>
where
    F: FnOnce() -> (Q, Q) + Send,
    Q: AsRef<[Scalar]> + Send,
{
    let domain = 1usize << gpud_cuda::hpoly::domain_log_n(x.a.len())?;
    let h_points = plan.step(Query::H).map_or(0, |s| s.n);
    if h_points == 0 || h_points > domain {
        return Err(engine_error(format!(
            "the plan's H MSM has {h_points} points, the domain of {} evaluations {domain}",
            x.a.len()
        )));
    }
    t.bases_streamed = streamed_bytes(plan, bases);
    t.overlapped = plan.order == PhaseOrder::MsmsFirst;
    let mut hpoly = HPoly::new(arena)?;
    let g1 = MsmEngine::new(arena)?;
    let h_msm = |h: &gpud_cuda::hpoly::HOutput<'_>| {
        msm(
            &g1,
            plan,
            Query::H,
            bases.h,
            ChunkScalars::Device(h.buffer(), h_points),
        )
    };
    match plan.order {
        PhaseOrder::HFirst => std::thread::scope(|scope| {
            let selection = scope.spawn(select);
            let start = Instant::now();
            let h = hpoly.compute_with(x.a, x.b, x.c)?;
            t.h_upload = start.elapsed().as_secs_f64();
            drop(hpoly); // frees the NTT tables before the MSMs
            arena.sync_main_stream()?;
            t.h = start.elapsed().as_secs_f64();
            let (h_sum, secs) = h_msm(&h)?;
            t.msm_h = secs;
            drop(h);
            let (others, queries) = other_msms(arena, &g1, plan, bases, x.aux, selection, t)?;
            Ok(others.with_h(h_sum, queries))
        }),
        PhaseOrder::MsmsFirst => {
            // Allocated before the thread that fills them, which borrows them.
            let mut inputs = hpoly.inputs(x.a.len())?;
            let (others, queries) = std::thread::scope(|scope| {
                let selection = scope.spawn(select);
                let (hp, ins) = (&mut hpoly, &mut inputs);
                let copies = scope.spawn(move || -> Result<f64> {
                    let start = Instant::now();
                    hp.upload(ins, x.a, x.b, x.c)?;
                    Ok(start.elapsed().as_secs_f64())
                });
                let others = other_msms(arena, &g1, plan, bases, x.aux, selection, t);
                // Joined whatever the MSMs gave: the buffers outlive the copies into them.
                let copied = copies
                    .join()
                    .map_err(|_| engine_error("copying a and b to the device panicked"))?;
                let others = others?;
                t.h_upload = copied?;
                Ok::<_, ProverError>(others)
            })?;
            let start = Instant::now();
            let h = hpoly.transform(inputs)?;
            drop(hpoly);
            arena.sync_main_stream()?;
            t.h = start.elapsed().as_secs_f64();
            let (h_sum, secs) = h_msm(&h)?;
            t.msm_h = secs;
            Ok(others.with_h(h_sum, queries))
        }
    }
}

/// The sums of L, A, B_G1 and B_G2.
struct Others {
    l: G1Projective,
    a: G1Projective,
    b_g1: G1Projective,
    b_g2: Option<G2Projective>,
}

impl Others {
    fn with_h<Q>(self, h: G1Projective, queries: (Q, Q)) -> PhaseResult<Q> {
        PhaseResult {
            sums: G1Sums {
                h,
                l: self.l,
                a: self.a,
                b_g1: self.b_g1,
            },
            b_g2: self.b_g2,
            queries,
        }
    }
}

/// L (while the A and B scalars are selected), then A, B_G1 and B_G2.
fn other_msms<Q: AsRef<[Scalar]>>(
    arena: &Arena<'_>,
    g1: &MsmEngine<'_, G1>,
    plan: &PhasePlan,
    bases: &PhaseBases<'_, '_>,
    aux: &[Scalar],
    selection: ScopedJoinHandle<'_, (Q, Q)>,
    t: &mut PhaseTimings,
) -> Result<(Others, (Q, Q))> {
    let (l, secs) = msm(g1, plan, Query::L, bases.l, ChunkScalars::Host(aux))?;
    t.msm_l = secs;
    let waited = Instant::now();
    let (a_scalars, b_scalars) = selection
        .join()
        .map_err(|_| engine_error("selecting the A and B scalars panicked"))?;
    t.scalar_wait = waited.elapsed().as_secs_f64();
    let (a, secs) = msm(
        g1,
        plan,
        Query::A,
        bases.a,
        ChunkScalars::Host(a_scalars.as_ref()),
    )?;
    t.msm_a = secs;
    let (b_g1, secs) = msm(
        g1,
        plan,
        Query::BG1,
        bases.b_g1,
        ChunkScalars::Host(b_scalars.as_ref()),
    )?;
    t.msm_b = secs;
    let b_g2 = match bases.b_g2 {
        None => None,
        Some(_) if b_scalars.as_ref().is_empty() => Some(G2Projective::identity()),
        Some(g2_bases) => {
            let engine = MsmEngine::<G2>::for_group(arena)?;
            let (sum, secs) = msm(
                &engine,
                plan,
                Query::BG2,
                g2_bases,
                ChunkScalars::Host(b_scalars.as_ref()),
            )?;
            t.msm_b_g2 = secs;
            Some(sum)
        }
    };
    Ok((Others { l, a, b_g1, b_g2 }, (a_scalars, b_scalars)))
}

/// One MSM in the plan's chunks for `query`, and its seconds.
fn msm<C: MsmCurve>(
    engine: &MsmEngine<'_, C>,
    plan: &PhasePlan,
    query: Query,
    bases: ChunkBases<'_, '_, C>,
    scalars: ChunkScalars<'_, '_>,
) -> Result<(C::Projective, f64)> {
    let chunk = plan.step(query).map_or(usize::MAX, |s| s.chunk);
    let start = Instant::now();
    let sum = engine.msm_chunked(bases, scalars, chunk)?;
    Ok((sum, start.elapsed().as_secs_f64()))
}

/// Bytes of bases the phase copies from host memory: every streamed query's points.
fn streamed_bytes(plan: &PhasePlan, bases: &PhaseBases<'_, '_>) -> u64 {
    let g1 = |q: Query, b: &ChunkBases<'_, '_, G1>| match b {
        ChunkBases::Host(_) => plan.step(q).map_or(0, |s| s.n as u64 * G1::AFFINE_BYTES),
        ChunkBases::Device(_) => 0,
    };
    let g2 = match bases.b_g2 {
        Some(ChunkBases::Host(_)) => plan
            .step(Query::BG2)
            .map_or(0, |s| s.n as u64 * G2::AFFINE_BYTES),
        _ => 0,
    };
    g1(Query::H, &bases.h)
        + g1(Query::L, &bases.l)
        + g1(Query::A, &bases.a)
        + g1(Query::BG1, &bases.b_g1)
        + g2
}
