//! `gpud-bench gpu-phase`: the GPU phase of a PoRep-shaped partition (2^27 by default) on
//! random bases, timed per VRAM budget, for sizes whose parameters do not fit host memory.
//!
//! The host bases are cheap stand-ins: 2^pool random points repeated to the query sizes (the
//! kernels' work does not depend on which points they add); all G1 queries read prefixes of
//! one vector and B_G2 one G2 vector, so host memory is ~96·m + 96·m/2 bytes of bases and
//! ~6 × 32·m of scalars. Scalars are witness-shaped (see [`witness`]); `h` is what the NTTs
//! make of random a, b, c. Each budget runs the plan [`gpud_prover::plan`] makes for it with
//! the bases streamed from page-locked host memory, and, where the device also holds the
//! resident bases next to the budget, with them resident.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use clap::Args;
use ff::Field;
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_cuda::hpoly::CSource;
use gpud_cuda::msm::{ChunkBases, G1Bases, G2Bases};
use gpud_cuda::{Device, RegisteredVec, driver};
use gpud_prover::engine::PhaseTimings;
use gpud_prover::engine::cuda_phase::{self, PhaseBases, PhaseScalars};
use gpud_prover::plan::{self, BasesAt, PhaseOrder, PlanInput};
use gpud_prover::vram::{self, KeyShape};
use group::{Curve, Group};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;

#[derive(Args)]
pub struct GpuPhaseArgs {
    /// log2 of the domain (the partition has 2^log constraints).
    #[arg(long, default_value_t = 27)]
    log: u32,
    /// Phase lease budgets (repeatable), e.g. 16GiB.
    #[arg(long = "budget", value_parser = crate::size, default_values_t = [16u64 << 30, 48 << 30])]
    budgets: Vec<u64>,
    /// log2 of the pool of distinct random bases repeated to the query sizes.
    #[arg(long, default_value_t = 20)]
    pool_log: u32,
    /// Timed phases per budget and mode (after one warm-up).
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// One timed phase.
#[derive(Debug, Clone, Serialize)]
struct PhaseRow {
    budget: u64,
    bases: &'static str,
    /// "baseline" (H first, C copied) or "product" (the planner's order, C on the device).
    variant: &'static str,
    plan: String,
    planned_peak: u64,
    measured_peak: u64,
    /// Bytes of bases copied from host memory during the phase (0 with resident bases).
    bases_streamed: u64,
    h: f64,
    /// The copies of a, b (and c) to the device: inside `h` when H runs first, beside the
    /// other MSMs when `overlapped`.
    h_upload: f64,
    /// Whether a and b were copied while L, A and B ran (then `h` is the transforms alone).
    overlapped: bool,
    msm_h: f64,
    msm_l: f64,
    msm_a: f64,
    msm_b_g1: f64,
    msm_b_g2: f64,
    total: f64,
}

/// A PoRep-like witness mix: 45 % zeros, 45 % ones, 8 % values below 2^32, 2 % full field
/// elements.
fn witness(rng: &mut ChaCha8Rng) -> Scalar {
    match rng.gen_range(0..100) {
        0..45 => Scalar::ZERO,
        45..90 => Scalar::ONE,
        90..98 => Scalar::from(u64::from(rng.r#gen::<u32>())),
        _ => Scalar::random(rng),
    }
}

/// `n` scalars from `f`, in parallel (one seeded generator per block of 2^16).
fn scalars(n: usize, seed: u64, f: fn(&mut ChaCha8Rng) -> Scalar) -> Vec<Scalar> {
    let mut out = vec![Scalar::ZERO; n];
    out.par_chunks_mut(1 << 16).enumerate().for_each(|(i, c)| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((i as u64) << 20));
        c.iter_mut().for_each(|x| *x = f(&mut rng));
    });
    out
}

/// `pool` random points (random walks from random starts, normalized in batches), repeated to
/// `n`.
fn repeated<P: Group + Curve + Send + Sync>(n: usize, pool: usize, seed: u64) -> Vec<P::AffineRepr>
where
    P::AffineRepr: Copy + Default + Send + Sync,
{
    let pool = pool.min(n).max(1);
    let distinct: Vec<P::AffineRepr> = (0..pool.div_ceil(1 << 12))
        .into_par_iter()
        .flat_map_iter(|i| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((i as u64) << 24));
            let step = P::generator() * P::Scalar::random(&mut rng);
            let mut acc = P::generator() * P::Scalar::random(&mut rng);
            let proj: Vec<P> = (0..(1 << 12))
                .map(|_| {
                    acc += step;
                    acc
                })
                .collect();
            let mut aff = vec![P::AffineRepr::default(); proj.len()];
            P::batch_normalize(&proj, &mut aff);
            aff
        })
        .take_any(pool)
        .collect();
    let mut out = vec![P::AffineRepr::default(); n];
    out.par_chunks_mut(distinct.len())
        .for_each(|c| c.copy_from_slice(&distinct[..c.len()]));
    out
}

struct Inputs {
    shape: KeyShape,
    a: Vec<Scalar>,
    b: Vec<Scalar>,
    c: Vec<Scalar>,
    aux: Vec<Scalar>,
    a_query: Vec<Scalar>,
    b_query: Vec<Scalar>,
    g1: RegisteredVec<G1Affine>,
    g2: RegisteredVec<G2Affine>,
}

pub fn run(args: GpuPhaseArgs) -> Result<()> {
    if !(10..=28).contains(&args.log) {
        bail!("--log {} is outside 10..=28", args.log);
    }
    if args.budgets.is_empty() {
        bail!("no --budget given");
    }
    let info = driver::list_devices()?
        .into_iter()
        .next()
        .context("no CUDA device is visible")?;
    let m = 1usize << args.log;
    let shape = KeyShape {
        h: m - 1,
        l: m,
        a: m / 2,
        b_g1: m / 2,
        b_g2: m / 2,
    };
    println!(
        "== gpu-phase 2^{} on {} ({} SMs, {:.1} GiB)",
        args.log,
        info.name,
        info.multiprocessors,
        gib(info.total_mem)
    );
    println!(
        "shape: H {} L {} A {} B_G1 {} B_G2 {}; scalars: L, A, B witness-shaped (45% 0, 45% 1, \
         8% < 2^32, 2% random), a, b, c random (h full-width)",
        shape.h, shape.l, shape.a, shape.b_g1, shape.b_g2
    );
    println!(
        "bases: 2^{} random G1 and G2 points repeated to the query sizes (RANDOM BASES, not a \
         proving key; no proof is made)",
        args.pool_log
    );
    let t0 = Instant::now();
    let device = Device::open(&info.uuid)?;
    let inputs = {
        let g1 = repeated::<G1Projective>(m, 1 << args.pool_log, 1);
        let g2 = repeated::<G2Projective>(m / 2, 1 << args.pool_log, 2);
        let rnd: fn(&mut ChaCha8Rng) -> Scalar = |r| Scalar::random(r);
        Inputs {
            shape,
            a: scalars(m, 3, rnd),
            b: scalars(m, 4, rnd),
            c: scalars(m, 5, rnd),
            aux: scalars(m, 6, witness),
            a_query: scalars(m / 2, 7, witness),
            b_query: scalars(m / 2, 8, witness),
            g1: RegisteredVec::register(&device, Arc::new(g1)).context("page-locking G1")?,
            g2: RegisteredVec::register(&device, Arc::new(g2)).context("page-locking G2")?,
        }
    };
    println!(
        "host inputs ready in {:.1} s ({:.1} GiB of bases page-locked)",
        t0.elapsed().as_secs_f64(),
        gib((inputs.g1.bytes() + inputs.g2.bytes()) as u64)
    );
    let link = link_rates(&device, &info, &inputs)?;
    println!(
        "host to device, {:.1} GiB per copy: page-locked {:.1} GB/s, ordinary memory (the \
         driver's path) {:.1} GB/s: the ceiling of every streamed byte",
        gib(link.bytes),
        link.pinned_gbps,
        link.pageable_gbps
    );
    let resident_bytes: u64 = [shape.h, shape.l, shape.a, shape.b_g1]
        .into_iter()
        .map(vram::bases_charge)
        .sum::<u64>()
        + vram::g2_bases_charge(shape.b_g2);
    let mut rows = Vec::new();
    for &budget in &args.budgets {
        let mut modes = vec![BasesAt::Host { pinned: true }];
        if resident_bytes + budget <= info.total_mem.saturating_sub(2 << 30) {
            modes.push(BasesAt::Resident);
        }
        for bases in modes {
            let run = |variant| {
                phase(
                    &device,
                    &info,
                    &inputs,
                    args.log,
                    budget,
                    bases,
                    resident_bytes,
                    variant,
                )
            };
            // One warm-up per budget and mode, then each variant in turn, rep by rep, so that
            // the baseline and the product see the same machine state.
            println!("  (warm-up {:.3} s)", run(Variant::Product)?.total);
            for _ in 0..args.reps.max(1) {
                for variant in [Variant::Baseline, Variant::Product] {
                    let row = run(variant)?;
                    print_row(&row);
                    rows.push(row);
                }
            }
        }
    }
    println!("== gpu-phase summary (targets: <= 1.0 s with >= 48 GiB, <= 2.0 s within 16 GiB)");
    for r in &rows {
        let target = if r.budget >= 48 << 30 { 1.0 } else { 2.0 };
        let baseline = rows
            .iter()
            .find(|b| b.variant == "baseline" && b.budget == r.budget && b.bases == r.bases);
        println!(
            "{:>6.1} GiB {:<9} {:<8} total {:.3} s ({}; target {:.1} s: {}), peak {:.2} of {:.2} \
             GiB planned, {:.1} GiB of bases streamed ({:.1} GB/s over the phase)",
            gib(r.budget),
            r.bases,
            r.variant,
            r.total,
            baseline.map_or_else(
                || "no baseline".to_string(),
                |b| format!("{:.2}x the baseline", b.total / r.total)
            ),
            target,
            if r.total <= target { "met" } else { "missed" },
            gib(r.measured_peak),
            gib(r.planned_peak),
            gib(r.bases_streamed),
            r.bases_streamed as f64 / r.total / 1e9
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The host-to-device copy rates this machine gives, from the best of three copies each.
struct LinkRates {
    bytes: u64,
    pinned_gbps: f64,
    pageable_gbps: f64,
}

fn link_rates(device: &Device, info: &driver::DeviceInfo, x: &Inputs) -> Result<LinkRates> {
    // 4 GiB of G1 bases (page-locked) and of the a scalars (ordinary memory), or less.
    let points = (4usize << 30) / std::mem::size_of::<G1Affine>();
    let pinned = &x.g1[..points.min(x.g1.len())];
    let pageable = &x.a[..((4usize << 30) / 32).min(x.a.len())];
    let bytes = std::mem::size_of_val(pinned).max(std::mem::size_of_val(pageable)) as u64;
    let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, bytes);
    let arena = device.reserve(&lease)?;
    let best = |copy: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = Instant::now();
            copy()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(best)
    };
    let pinned_gbps = {
        let mut dst = arena.alloc::<G1Affine>(pinned.len())?;
        let secs = best(&mut || Ok(dst.copy_from_host_at(0, pinned)?))?;
        std::mem::size_of_val(pinned) as f64 / secs / 1e9
    };
    let pageable_gbps = {
        let mut dst = arena.alloc::<Scalar>(pageable.len())?;
        let secs = best(&mut || Ok(dst.copy_from_host_at(0, pageable)?))?;
        std::mem::size_of_val(pageable) as f64 / secs / 1e9
    };
    let token = lease
        .compute_token()
        .context("the copy lease's compute token")?;
    arena.close(&token)?;
    Ok(LinkRates {
        bytes,
        pinned_gbps,
        pageable_gbps,
    })
}

fn gib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 30)
}

fn print_row(r: &PhaseRow) {
    let copies = if r.overlapped {
        format!(
            "a, b copied beside L, A, B in {:.3} s; transforms {:.3} s",
            r.h_upload, r.h
        )
    } else {
        format!(
            "H {:.3} s (inputs on the device after {:.3})",
            r.h, r.h_upload
        )
    };
    println!(
        "budget {:.1} GiB, bases {}, {}: {}\n  planned peak {:.3} GiB, measured peak {:.3} GiB; {copies}, \
         MSM H {:.3}, L {:.3}, A {:.3}, B_G1 {:.3}, B_G2 {:.3}; GPU phase {:.3} s",
        gib(r.budget),
        r.bases,
        r.variant,
        r.plan,
        gib(r.planned_peak),
        gib(r.measured_peak),
        r.msm_h,
        r.msm_l,
        r.msm_a,
        r.msm_b_g1,
        r.msm_b_g2,
        r.total
    );
}

/// Resident bases of the random key, uploaded under their own lease.
struct Resident<'a> {
    h: G1Bases<'a>,
    l: G1Bases<'a>,
    a: G1Bases<'a>,
    b: G1Bases<'a>,
    g2: G2Bases<'a>,
}

/// How a timed phase runs: the product's choices, or the earlier ones as the baseline of the
/// same run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// H first, C copied from the host: the phase before overlapped copies and C on the device.
    Baseline,
    /// What the engine does: the planner's order, C made on the device.
    Product,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::Product => "product",
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn phase(
    device: &Device,
    info: &driver::DeviceInfo,
    x: &Inputs,
    log: u32,
    budget: u64,
    bases: BasesAt,
    resident_bytes: u64,
    variant: Variant,
) -> Result<PhaseRow> {
    let s = x.shape;
    let input = PlanInput {
        shape: s,
        log_domain: log,
        multiprocessors: info.multiprocessors,
        g2_on_gpu: true,
        bases,
        budget,
    };
    let p = match variant {
        Variant::Baseline => plan::plan_in_order(&input, PhaseOrder::HFirst)?,
        Variant::Product => plan::plan(&input)?,
    };
    let ordinal = info.ordinal as u32;
    let res_lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), ordinal, resident_bytes);
    let res_arena = device.reserve(&res_lease)?;
    let resident = match bases {
        BasesAt::Resident => Some(Resident {
            h: G1Bases::upload(&res_arena, &x.g1[..s.h])?,
            l: G1Bases::upload(&res_arena, &x.g1[..s.l])?,
            a: G1Bases::upload(&res_arena, &x.g1[..s.a])?,
            b: G1Bases::upload(&res_arena, &x.g1[..s.b_g1])?,
            g2: G2Bases::upload(&res_arena, &x.g2[..s.b_g2])?,
        }),
        BasesAt::Host { .. } => None,
    };
    let r = resident.as_ref();
    let phase_bases = PhaseBases {
        h: ChunkBases::device_or_host(r.map(|r| &r.h), &x.g1[..s.h]),
        l: ChunkBases::device_or_host(r.map(|r| &r.l), &x.g1[..s.l]),
        a: ChunkBases::device_or_host(r.map(|r| &r.a), &x.g1[..s.a]),
        b_g1: ChunkBases::device_or_host(r.map(|r| &r.b), &x.g1[..s.b_g1]),
        b_g2: Some(ChunkBases::device_or_host(
            r.map(|r| &r.g2),
            &x.g2[..s.b_g2],
        )),
    };
    let scalars = PhaseScalars {
        a: &x.a,
        b: &x.b,
        c: match variant {
            Variant::Baseline => CSource::Host(&x.c),
            Variant::Product => CSource::ProductOfAB,
        },
        aux: &x.aux,
    };
    let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), ordinal, budget);
    let arena = device.reserve(&lease)?;
    let mut t = PhaseTimings::default();
    let start = Instant::now();
    let out = cuda_phase::run(
        &arena,
        &p,
        &phase_bases,
        scalars,
        || (&x.a_query[..], &x.b_query[..]),
        &mut t,
    );
    let total = start.elapsed().as_secs_f64();
    let measured_peak = arena.ledger().peak;
    drop(resident);
    let token = lease
        .compute_token()
        .context("the bench lease's compute token")?;
    arena.close(&token)?;
    let res_token = res_lease
        .compute_token()
        .context("the resident lease's token")?;
    res_arena.close(&res_token)?;
    std::hint::black_box(out?.sums);
    if measured_peak > budget {
        bail!("measured peak {measured_peak} B over the {budget} B budget");
    }
    Ok(PhaseRow {
        budget,
        bases: match bases {
            BasesAt::Resident => "resident",
            BasesAt::Host { .. } => "streamed",
        },
        variant: variant.name(),
        plan: p.summary(),
        bases_streamed: t.bases_streamed,
        planned_peak: p.peak,
        measured_peak,
        h: t.h,
        h_upload: t.h_upload,
        overlapped: t.overlapped,
        msm_h: t.msm_h,
        msm_l: t.msm_l,
        msm_a: t.msm_a,
        msm_b_g1: t.msm_b,
        msm_b_g2: t.msm_b_g2,
        total,
    })
}
