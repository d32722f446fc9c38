//! The GPU phase's plan for a VRAM budget: how each step lays out its buffers so that the phase
//! fits the partition's lease, and the peak it charges (what the lease asks for).
//!
//! Pure arithmetic over the same charges as [`crate::vram`] (2 MiB pages per allocation,
//! [`MsmPlan::temp_bytes_of`], [`gpud_cuda::hpoly::charged_bytes`]); the CUDA engine runs the
//! plan it gets here ([`gpud_cuda::msm::MsmEngine::msm_chunked`]).
//!
//! - **H step**: `a`, `b`, `c` on the device with the NTT tables (the one layout
//!   [`gpud_cuda::hpoly::HPoly`] has; a budget below it fails).
//! - **Each MSM** runs as `k` chunks of `⌈n/k⌉` points, the smallest `k` whose step fits (at most
//!   [`MAX_CHUNKS`]). A step holds the chunk's temporaries, its scalars (the H MSM reads `h`,
//!   which stays on the device: `⌈32·m⌉₂ₘ` for the whole step), and, with the bases in host
//!   memory, two base buffers of a chunk (one when `k = 1`): the next chunk is copied while the
//!   current one runs. With resident bases only the temporaries shrink.
//!
//! Streamed MSMs of more than [`STREAM_OVERLAP_POINTS`] points take at least two chunks (up to
//! [`MIN_STREAMED_CHUNKS`], see [`min_chunks`]) so that copies overlap compute. With an
//! unbounded budget every other MSM is one chunk, and up to 2^22 points the peak is
//! [`crate::vram::VramEstimate::phase_lease`], the formula the leases used before plans.

use gpud_cuda::ledger::charge_for;
use gpud_cuda::msm::plan::MsmPlan;
use gpud_cuda::msm::{G1, G2, MsmCurve};
use serde::Serialize;

use crate::vram::KeyShape;

/// Most chunks the planner splits one MSM into (below ~2^17 points per chunk at 2^27 the
/// per-chunk fixed costs, bucket reduction and launches, start to dominate).
pub const MAX_CHUNKS: usize = 1024;

/// Streamed MSMs of at least this many points run in at least two chunks (up to
/// [`MIN_STREAMED_CHUNKS`]): one chunk would copy all its bases before computing, and only
/// the first chunk's copy is not overlapped. Below it (a copy under ~0.4 GB) a chunk's fixed
/// costs outweigh the overlap.
pub const STREAM_OVERLAP_POINTS: usize = 1 << 22;

/// The most chunks the overlap rule asks for: the first chunk's copy, a quarter of the
/// query's, is the part not hidden behind compute.
pub const MIN_STREAMED_CHUNKS: usize = 4;

const FR: u64 = 32;

/// The fewest chunks an MSM of `n` points runs in: [`STREAM_OVERLAP_POINTS`] per chunk up to
/// [`MIN_STREAMED_CHUNKS`] when streamed, else one.
pub fn min_chunks(n: usize, streamed: bool) -> usize {
    if streamed {
        (n / STREAM_OVERLAP_POINTS).clamp(1, MIN_STREAMED_CHUNKS)
    } else {
        1
    }
}

/// Where the phase reads the proving key's bases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BasesAt {
    /// On the device under the resident lease: nothing of them is charged to the phase.
    Resident,
    /// In host memory, streamed into the phase's lease chunk by chunk; `pinned` when the host
    /// copies are page-locked (direct DMA, overlapped with the previous chunk's compute).
    Host {
        /// Whether the host copies are page-locked.
        pinned: bool,
    },
}

/// What the planner is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanInput {
    /// The proving key's query sizes.
    pub shape: KeyShape,
    /// The domain is `2^log_domain`.
    pub log_domain: u32,
    /// The GPU's multiprocessors (thread counts of the MSM passes).
    pub multiprocessors: u32,
    /// Whether the B_G2 MSM runs in the phase.
    pub g2_on_gpu: bool,
    /// Where the bases are.
    pub bases: BasesAt,
    /// The phase lease's bytes.
    pub budget: u64,
}

/// The MSMs of a phase, in the order the engine runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Query {
    /// `h` (on the device) against the H query.
    H,
    /// The aux assignment against L.
    L,
    /// The A query.
    A,
    /// The B query over G1.
    BG1,
    /// The B query over G2.
    BG2,
}

/// One MSM of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MsmStep {
    /// Which MSM.
    pub query: Query,
    /// Points.
    pub n: usize,
    /// Points per chunk (the last chunk may be shorter).
    pub chunk: usize,
    /// Chunks (`⌈n / chunk⌉`).
    pub chunks: usize,
    /// Whether the bases are streamed from host memory.
    pub streamed: bool,
    /// What the step charges at its peak.
    pub peak: u64,
}

/// The order of a phase's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PhaseOrder {
    /// The H step (a, b, c copied and transformed), the H MSM, then L, A, B_G1 and B_G2: `h`
    /// is freed early, so this needs the least memory.
    HFirst,
    /// L, A, B_G1 and B_G2 first while a and b are copied to the device beside them (their
    /// buffers held through those MSMs), then the transforms and the H MSM: the copies, a
    /// third of the phase's host-to-device bytes, overlap compute instead of preceding it.
    /// Chosen when the bases are resident (streamed bases would share the host link with
    /// those copies) and holding the H buffers costs no MSM an extra chunk.
    MsmsFirst,
}

/// The plan of one GPU phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhasePlan {
    /// The H step's peak (a, b, c and the NTT tables).
    pub h_step: u64,
    /// The MSMs with points, in the order they run.
    pub msms: Vec<MsmStep>,
    /// The order of the steps.
    pub order: PhaseOrder,
    /// The largest step: what the phase lease must hold.
    pub peak: u64,
    /// Where the bases were.
    pub bases: BasesAt,
}

impl PhasePlan {
    /// The step of `query`, when it has points.
    pub fn step(&self, query: Query) -> Option<&MsmStep> {
        self.msms.iter().find(|s| s.query == query)
    }

    /// One line per step, for logs and the bench.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{}H step {:.2} GiB",
            match self.order {
                PhaseOrder::HFirst => "",
                PhaseOrder::MsmsFirst => "MSMs first (a, b copied beside them); ",
            },
            gib(self.h_step)
        );
        for s in &self.msms {
            out.push_str(&format!(
                "; {:?} {} pts in {} x {}{} {:.2} GiB",
                s.query,
                s.n,
                s.chunks,
                s.chunk,
                if s.streamed { " streamed" } else { "" },
                gib(s.peak)
            ));
        }
        out
    }
}

fn gib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 30)
}

/// Why no plan fits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// Even the smallest layout of some step charges more than the budget.
    #[error(
        "a GPU phase of 2^{log_domain} does not fit {budget} bytes of VRAM: the smallest plan needs {needed} bytes"
    )]
    DoesNotFit {
        /// The budget asked for.
        budget: u64,
        /// The smallest budget that works.
        needed: u64,
        /// The domain.
        log_domain: u32,
    },
    /// The domain is out of the H step's range.
    #[error("no H step for a domain of 2^{log_domain}: {why}")]
    Domain {
        /// The domain asked for.
        log_domain: u32,
        /// What the H polynomial refused.
        why: String,
    },
}

/// The charge of one MSM step over `n` points in chunks of `chunk`: `held` bytes for the whole
/// step (the H MSM's `h`), the chunk's scalars when they are uploaded, the base buffers when
/// streamed, and the temporaries of the larger of a full chunk and the tail.
fn step_charge<C: MsmCurve>(
    n: usize,
    chunk: usize,
    held: u64,
    host_scalars: bool,
    streamed: bool,
    multiprocessors: u32,
) -> u64 {
    let chunks = n.div_ceil(chunk);
    let tail = n - (chunks - 1) * chunk;
    let temps = |len: usize| {
        MsmPlan::new(len, multiprocessors).map_or(u64::MAX, |p| p.temp_bytes_of::<C>())
    };
    let temps = temps(chunk).max(temps(tail));
    let scalars = if host_scalars {
        charge_for(FR * chunk as u64)
    } else {
        0
    };
    let bases = if streamed {
        (chunks.min(2) as u64).saturating_mul(charge_for(C::AFFINE_BYTES * chunk as u64))
    } else {
        0
    };
    held.saturating_add(scalars)
        .saturating_add(bases)
        .saturating_add(temps)
}

/// The fewest chunks whose step fits `budget`, or (`Err`) the smallest charge of any chunking.
fn choose<C: MsmCurve>(
    query: Query,
    n: usize,
    held: u64,
    host_scalars: bool,
    streamed: bool,
    input: &PlanInput,
) -> Result<MsmStep, u64> {
    let mut least = u64::MAX;
    let mut last_chunk = 0;
    for k in min_chunks(n, streamed)..=MAX_CHUNKS.min(n) {
        let chunk = n.div_ceil(k);
        if chunk == last_chunk {
            continue;
        }
        last_chunk = chunk;
        let peak = step_charge::<C>(
            n,
            chunk,
            held,
            host_scalars,
            streamed,
            input.multiprocessors,
        );
        if peak <= input.budget {
            return Ok(MsmStep {
                query,
                n,
                chunk,
                chunks: n.div_ceil(chunk),
                streamed,
                peak,
            });
        }
        least = least.min(peak);
    }
    Err(least)
}

/// The plan of a GPU phase for `input`, or the smallest budget that has one: the
/// [`PhaseOrder::MsmsFirst`] order where it applies (resident bases, a bounded budget) and
/// costs no extra chunk, else [`PhaseOrder::HFirst`]. An unbounded budget (`u64::MAX`) asks
/// what the phase needs at least, for a lease of that size: the H-first plan.
pub fn plan(input: &PlanInput) -> Result<PhasePlan, PlanError> {
    let h_first = plan_in_order(input, PhaseOrder::HFirst)?;
    if input.bases != BasesAt::Resident || input.budget == u64::MAX {
        return Ok(h_first);
    }
    match plan_in_order(input, PhaseOrder::MsmsFirst) {
        Ok(p) if no_more_chunks(&p, &h_first) => Ok(p),
        _ => Ok(h_first),
    }
}

/// Whether every MSM of `p` runs in at most as many chunks as in `than`.
fn no_more_chunks(p: &PhasePlan, than: &PhasePlan) -> bool {
    p.msms
        .iter()
        .all(|s| than.step(s.query).is_some_and(|t| s.chunks <= t.chunks))
}

/// The plan of a GPU phase in `order`.
pub fn plan_in_order(input: &PlanInput, order: PhaseOrder) -> Result<PhasePlan, PlanError> {
    let s = input.shape;
    let m = 1usize << input.log_domain;
    let h_step = gpud_cuda::hpoly::charged_bytes(m.max(2)).map_err(|e| PlanError::Domain {
        log_domain: input.log_domain,
        why: e.to_string(),
    })?;
    let streamed = matches!(input.bases, BasesAt::Host { .. });
    // What the MSMs other than H hold beside their own charges: the H inputs' three buffers
    // when they are copied during those MSMs.
    let h_inputs = match order {
        PhaseOrder::HFirst => 0,
        PhaseOrder::MsmsFirst => 3 * charge_for(FR * m as u64),
    };
    let mut needed = h_step;
    let mut msms = Vec::new();
    let h = (Query::H, s.h, charge_for(FR * m as u64), false, false);
    let mut rest: Vec<(Query, usize, u64, bool, bool)> = vec![
        (Query::L, s.l, h_inputs, true, false),
        (Query::A, s.a, h_inputs, true, false),
        (Query::BG1, s.b_g1, h_inputs, true, false),
    ];
    if input.g2_on_gpu {
        rest.push((Query::BG2, s.b_g2, h_inputs, true, true));
    }
    let steps: Vec<_> = match order {
        PhaseOrder::HFirst => std::iter::once(h).chain(rest).collect(),
        PhaseOrder::MsmsFirst => rest.into_iter().chain(std::iter::once(h)).collect(),
    };
    for (query, n, held, host_scalars, g2) in steps {
        if n == 0 {
            continue;
        }
        let step = if g2 {
            choose::<G2>(query, n, held, host_scalars, streamed, input)
        } else {
            choose::<G1>(query, n, held, host_scalars, streamed, input)
        };
        match step {
            Ok(step) => {
                needed = needed.max(step.peak);
                msms.push(step);
            }
            Err(least) => needed = needed.max(least),
        }
    }
    let steps_with_points = [s.h, s.l, s.a, s.b_g1]
        .into_iter()
        .chain(input.g2_on_gpu.then_some(s.b_g2))
        .filter(|&n| n > 0)
        .count();
    if needed > input.budget || msms.len() < steps_with_points {
        return Err(PlanError::DoesNotFit {
            budget: input.budget,
            needed,
            log_domain: input.log_domain,
        });
    }
    Ok(PhasePlan {
        h_step,
        peak: msms.iter().map(|s| s.peak).fold(h_step, u64::max),
        msms,
        order,
        bases: input.bases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vram::{DEFAULT_MULTIPROCESSORS, estimate_with_g2};
    use proptest::prelude::*;

    const GIB: u64 = 1 << 30;

    fn porep(m: usize) -> KeyShape {
        KeyShape {
            h: m - 1,
            l: m,
            a: m / 2,
            b_g1: m / 2,
            b_g2: m / 2,
        }
    }

    fn input(shape: KeyShape, log: u32, bases: BasesAt, budget: u64) -> PlanInput {
        PlanInput {
            shape,
            log_domain: log,
            multiprocessors: DEFAULT_MULTIPROCESSORS,
            g2_on_gpu: true,
            bases,
            budget,
        }
    }

    #[test]
    fn an_unbounded_budget_is_one_chunk_each_and_the_old_formula() {
        for (log, bases, resident) in [
            (20, BasesAt::Resident, true),
            (20, BasesAt::Host { pinned: true }, false),
            (22, BasesAt::Host { pinned: false }, false),
            (16, BasesAt::Resident, true),
        ] {
            let s = porep(1 << log);
            let p = plan(&input(s, log, bases, u64::MAX)).unwrap();
            assert!(p.msms.iter().all(|s| s.chunks == 1), "{p:?}");
            let e = estimate_with_g2(&s, log, DEFAULT_MULTIPROCESSORS, true);
            assert_eq!(p.peak, e.phase_lease(resident), "2^{log} {bases:?}");
            assert_eq!(p.h_step, e.h_step);
        }
    }

    #[test]
    fn a_2_27_porep_partition_fits_16_gib_streaming_and_48_gib_resident() {
        let s = porep(1 << 27);
        let small = plan(&input(s, 27, BasesAt::Host { pinned: true }, 16 * GIB)).unwrap();
        assert!(small.peak <= 16 * GIB, "{}", small.summary());
        assert!(small.msms.iter().all(|m| m.streamed));
        assert!(
            small.step(Query::L).unwrap().chunks > 1,
            "{}",
            small.summary()
        );
        let big = plan(&input(s, 27, BasesAt::Resident, 48 * GIB)).unwrap();
        assert!(big.peak <= 48 * GIB);
        println!(
            "16 GiB streamed: {}\n48 GiB resident: {}",
            small.summary(),
            big.summary()
        );
        // More budget, never more chunks.
        for q in [Query::H, Query::L, Query::A, Query::BG1, Query::BG2] {
            let (a, b) = (small.step(q).unwrap(), big.step(q).unwrap());
            assert!(b.chunks <= a.chunks, "{q:?}: {} > {}", b.chunks, a.chunks);
        }
    }

    #[test]
    fn resident_bases_with_room_copy_a_and_b_beside_the_msms() {
        let s = porep(1 << 27);
        let big = plan(&input(s, 27, BasesAt::Resident, 48 * GIB)).unwrap();
        assert_eq!(big.order, PhaseOrder::MsmsFirst, "{}", big.summary());
        let order: Vec<Query> = big.msms.iter().map(|m| m.query).collect();
        assert_eq!(
            order,
            [Query::L, Query::A, Query::BG1, Query::BG2, Query::H]
        );
        let h_first = plan_in_order(
            &input(s, 27, BasesAt::Resident, 48 * GIB),
            PhaseOrder::HFirst,
        )
        .unwrap();
        assert!(no_more_chunks(&big, &h_first));
        // The L step holds the three H buffers beside its own charge.
        let l = big.step(Query::L).unwrap();
        assert!(l.peak >= 3 * charge_for(FR << 27), "{}", big.summary());
        // Where holding them would cost chunks, or the bases are streamed, or the budget is
        // unbounded (the least memory is asked for), H goes first.
        let tight = plan(&input(s, 27, BasesAt::Resident, 16 * GIB)).unwrap();
        assert_eq!(tight.order, PhaseOrder::HFirst, "{}", tight.summary());
        let streamed = plan(&input(s, 27, BasesAt::Host { pinned: true }, 48 * GIB)).unwrap();
        assert_eq!(streamed.order, PhaseOrder::HFirst);
        let unbounded = plan(&input(s, 27, BasesAt::Resident, u64::MAX)).unwrap();
        assert_eq!(unbounded.order, PhaseOrder::HFirst);
    }

    #[test]
    fn large_streamed_msms_overlap_copies_even_when_one_chunk_fits() {
        let s = porep(1 << 27);
        let p = plan(&input(s, 27, BasesAt::Host { pinned: true }, u64::MAX)).unwrap();
        for m in &p.msms {
            assert_eq!(m.chunks, MIN_STREAMED_CHUNKS, "{}", p.summary());
        }
        let r = plan(&input(s, 27, BasesAt::Resident, u64::MAX)).unwrap();
        assert!(r.msms.iter().all(|m| m.chunks == 1));
        assert_eq!(min_chunks(3 << 22, true), 3);
        assert_eq!(min_chunks((1 << 22) - 1, true), 1);
        assert_eq!(min_chunks(1 << 30, false), 1);
    }

    #[test]
    fn below_the_smallest_plan_the_error_names_a_budget_that_works() {
        let s = porep(1 << 24);
        let bases = BasesAt::Host { pinned: false };
        let err = plan(&input(s, 24, bases, GIB / 4)).unwrap_err();
        let PlanError::DoesNotFit { needed, budget, .. } = err else {
            panic!("{err:?}");
        };
        assert_eq!(budget, GIB / 4);
        assert!(needed > GIB / 4);
        let p = plan(&input(s, 24, bases, needed)).unwrap();
        assert!(p.peak <= needed);
        assert!(plan(&input(s, 24, bases, needed - 1)).is_err());
        assert!(err.to_string().contains(&needed.to_string()), "{err}");
    }

    #[test]
    fn a_domain_the_h_step_cannot_run_is_a_typed_error() {
        let s = porep(4);
        let err = plan(&input(s, 40, BasesAt::Resident, u64::MAX)).unwrap_err();
        assert!(
            matches!(err, PlanError::Domain { log_domain: 40, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn empty_queries_have_no_step_and_g2_on_the_cpu_has_none() {
        let s = KeyShape {
            a: 0,
            b_g1: 0,
            b_g2: 0,
            ..porep(1 << 12)
        };
        let p = plan(&input(s, 12, BasesAt::Resident, u64::MAX)).unwrap();
        let qs: Vec<Query> = p.msms.iter().map(|m| m.query).collect();
        assert_eq!(qs, [Query::H, Query::L]);
        let s = porep(1 << 12);
        let p = plan(&PlanInput {
            g2_on_gpu: false,
            ..input(s, 12, BasesAt::Resident, u64::MAX)
        })
        .unwrap();
        assert!(p.step(Query::BG2).is_none());
        assert_eq!(p.msms.len(), 4);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any budget: the plan never exceeds it, its steps' charges are what the chunking
        /// charges, it uses the fewest chunks that fit, and a failure's `needed` works.
        #[test]
        fn plans_fit_their_budget_with_the_fewest_chunks(
            log in 10u32..=27,
            budget_mib in 8u64..(80 << 10),
            host in any::<bool>(),
            pinned in any::<bool>(),
            g2 in any::<bool>(),
            l_per_mille in 100usize..=1000,
            b_per_mille in 0usize..=1000,
        ) {
            let m = 1usize << log;
            let shape = KeyShape {
                h: m - 1,
                l: m * l_per_mille / 1000,
                a: m * b_per_mille / 1000,
                b_g1: m * b_per_mille / 1000,
                b_g2: m * b_per_mille / 1000,
            };
            let bases = if host { BasesAt::Host { pinned } } else { BasesAt::Resident };
            let inp = PlanInput {
                shape,
                log_domain: log,
                multiprocessors: DEFAULT_MULTIPROCESSORS,
                g2_on_gpu: g2,
                bases,
                budget: budget_mib << 20,
            };
            match plan(&inp) {
                Ok(p) => {
                    prop_assert!(p.peak <= inp.budget);
                    prop_assert!(p.h_step <= p.peak);
                    for s in &p.msms {
                        prop_assert!(s.peak <= p.peak);
                        prop_assert_eq!(s.chunks, s.n.div_ceil(s.chunk));
                        prop_assert_eq!(s.streamed, host);
                        let h_inputs = match p.order {
                            PhaseOrder::HFirst => 0,
                            PhaseOrder::MsmsFirst => 3 * charge_for(FR * m as u64),
                        };
                        let (held, host_scalars) = if s.query == Query::H {
                            (charge_for(FR * m as u64), false)
                        } else {
                            (h_inputs, true)
                        };
                        let charge = |chunk| if s.query == Query::BG2 {
                            step_charge::<G2>(s.n, chunk, held, host_scalars, host, inp.multiprocessors)
                        } else {
                            step_charge::<G1>(s.n, chunk, held, host_scalars, host, inp.multiprocessors)
                        };
                        prop_assert_eq!(charge(s.chunk), s.peak);
                        prop_assert!(s.chunks >= min_chunks(s.n, host));
                        // One chunk fewer would not have fitted.
                        if s.chunks > min_chunks(s.n, host) {
                            let fewer = s.n.div_ceil(s.chunks - 1);
                            prop_assert!(charge(fewer) > inp.budget);
                        }
                    }
                    // The order: MSMs first only with resident bases and no MSM in more chunks
                    // than H first would run it; then the H MSM is last.
                    let h_first = plan_in_order(&inp, PhaseOrder::HFirst).unwrap();
                    match p.order {
                        PhaseOrder::MsmsFirst => {
                            prop_assert!(!host);
                            prop_assert!(no_more_chunks(&p, &h_first));
                            prop_assert_eq!(p.msms.last().map(|s| s.query), Some(Query::H));
                        }
                        PhaseOrder::HFirst => {
                            prop_assert_eq!(&p, &h_first);
                            let msms_first = plan_in_order(&inp, PhaseOrder::MsmsFirst);
                            prop_assert!(
                                host || msms_first.is_err()
                                    || !no_more_chunks(&msms_first.unwrap(), &h_first)
                            );
                        }
                    }
                }
                Err(PlanError::DoesNotFit { needed, .. }) => {
                    prop_assert!(plan_in_order(&inp, PhaseOrder::MsmsFirst).is_err());
                    prop_assert!(needed > inp.budget);
                    let ok = plan(&PlanInput { budget: needed, ..inp });
                    prop_assert!(ok.is_ok(), "{:?}", ok);
                }
                Err(e) => prop_assert!(false, "{}", e),
            }
        }
    }
}
