//! GPU check and benchmark of gpud-cuda's BLS12-381 G1 and G2 MSMs, in one run on the GPU
//! machine.
//!
//! `gpud-msm-bench [--g2] [--check] [--bench] [--min-log N] [--max-log N] [--cpu-max-log N]
//!                 [--sweep-log N] [--quick] [--json PATH]`
//!
//! --g2: the G2 MSM instead (see `run_g2`): --check against blstrs `G2Projective::multi_exp`
//!   for sizes 1..2^max-log (default 22), random and witness-shaped, and the edge cases;
//!   --bench 2^min-log..2^max-log (default 16..24) against blstrs on all cores up to
//!   2^cpu-max-log (default 22), then the G1 MSM at 2^22 for the ratio G2 / G1 (target 3).
//!   Prints `PASS`/`FAIL` and `RATIO` lines. `--quick` keeps the check to small sizes.
//!
//! --check: the GPU MSM against blstrs `G1Projective::multi_exp` on fresh random inputs: sizes
//!   1, 2, 3, odd sizes, and every power of two up to 2^max-log (default 24), each with random
//!   and witness-shaped scalars (~50% zero, ~25% one, the rest small or random); edge cases
//!   (zero and one scalars, identity bases, duplicated points, P and -P, the negation
//!   threshold); both kernel builds; every temporary poisoned before use. `--quick` keeps to
//!   small sizes (for compute-sanitizer).
//! --bench: MSM 2^min-log..2^max-log (defaults 16..26), random and witness-shaped scalars: GPU
//!   end to end (host scalars in, point out; median of timed runs after a warm-up), GPU with
//!   the scalars already on the device (and its phases: sort, accumulate, combine, reduce),
//!   blstrs on all CPU cores up to 2^cpu-max-log (default 24) with the ratio, each GPU result
//!   checked against the CPU one (above the CPU limit: against the sum of the two halves'
//!   MSMs, on the GPU). Then, at 2^sweep-log (default 24), every window size 15..=20 with both
//!   kernel builds.
//! --bench --quick: the key sizes only, about a minute: 2^20, 2^22, 2^24, random and witness
//!   scalars, end to end with the pipelined upload (the default) and with the first version's
//!   upload-then-convert, scalars on the device with phases, every kernel build at 2^24; results
//!   compared with each other and with blstrs at 2^20 and 2^22 (random); one table at the end.
//! Prints tables; writes everything as JSON to --json.

use std::time::Instant;

use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::Field;
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_cuda::msm::plan::MsmPlan;
use gpud_cuda::msm::{G1Bases, G2, G2Bases, MsmEngine, MsmVariant};
use gpud_cuda::{Arena, Device, driver};
use group::prime::PrimeCurveAffine;
use group::{Curve, Group};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;
use serde_json::{Value, json};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Args {
    g2: bool,
    check: bool,
    bench: bool,
    quick: bool,
    min_log: u32,
    max_log: Option<u32>,
    cpu_max_log: u32,
    sweep_log: u32,
    json: Option<String>,
}

const USAGE: &str = "usage: gpud-msm-bench [--g2] [--check] [--bench] [--min-log N] [--max-log N] \
                     [--cpu-max-log N] [--sweep-log N] [--quick] [--json PATH]";

fn parse_args() -> Res<Args> {
    let mut a = Args {
        g2: false,
        check: false,
        bench: false,
        quick: false,
        min_log: 16,
        max_log: None,
        cpu_max_log: 24,
        sweep_log: 24,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    let num = |it: &mut dyn Iterator<Item = String>, what: &str| -> Res<u32> {
        Ok(it.next().ok_or(format!("{what} needs a value"))?.parse()?)
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--g2" => a.g2 = true,
            "--check" => a.check = true,
            "--bench" => a.bench = true,
            "--quick" => a.quick = true,
            "--min-log" => a.min_log = num(&mut it, "--min-log")?,
            "--max-log" => a.max_log = Some(num(&mut it, "--max-log")?),
            "--cpu-max-log" => a.cpu_max_log = num(&mut it, "--cpu-max-log")?,
            "--sweep-log" => a.sweep_log = num(&mut it, "--sweep-log")?,
            "--json" => a.json = Some(it.next().ok_or("--json needs a path")?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    if !a.check && !a.bench {
        a.check = true;
        a.bench = true;
    }
    Ok(a)
}

fn seed() -> u64 {
    rand::thread_rng().next_u64()
}

/// `n` distinct bases, fast (about 1 us of one core per point): each chunk of 2^14 starts at its
/// own random multiple of the generator and walks by mixed additions of 16 random points, then
/// batch normalization. Above 2^25 the second half is the negation of the first (-P is as good
/// a base as any, and free), which halves the time at 2^26.
fn random_bases(n: usize) -> Vec<G1Affine> {
    const FRESH: usize = 1 << 25;
    if n > FRESH {
        let mut v = random_bases(n.div_ceil(2));
        let neg: Vec<G1Affine> = v[..n - v.len()].par_iter().map(|p| -*p).collect();
        v.extend(neg);
        return v;
    }
    let s = seed();
    let mut rng = ChaCha20Rng::seed_from_u64(s);
    let steps: Vec<G1Affine> = (0..16)
        .map(|_| (G1Projective::generator() * Scalar::random(&mut rng)).to_affine())
        .collect();
    let mut out = vec![G1Affine::identity(); n];
    out.par_chunks_mut(1 << 14)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng =
                ChaCha20Rng::seed_from_u64(s ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut acc = G1Projective::generator() * Scalar::random(&mut rng);
            let mut proj = Vec::with_capacity(chunk.len());
            for _ in 0..chunk.len() {
                acc += &steps[rng.gen_range(0..steps.len())];
                proj.push(acc);
            }
            G1Projective::batch_normalize(&proj, chunk);
        });
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Random,
    Witness,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Random => "random",
            Kind::Witness => "witness",
        }
    }
}

/// Fresh scalars: uniformly random, or witness-shaped (~50% zero, ~25% one, ~12.5% below
/// 2^32, ~12.5% uniformly random).
fn scalars(kind: Kind, n: usize) -> Vec<Scalar> {
    let s = seed();
    let mut v = vec![Scalar::ZERO; n];
    v.par_chunks_mut(1 << 14).enumerate().for_each(|(i, c)| {
        let mut rng =
            ChaCha20Rng::seed_from_u64(s ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for x in c {
            *x = match kind {
                Kind::Random => Scalar::random(&mut rng),
                Kind::Witness => match rng.gen_range(0..8) {
                    0..4 => Scalar::ZERO,
                    4..6 => Scalar::ONE,
                    6 => Scalar::from(u64::from(rng.next_u32())),
                    _ => Scalar::random(&mut rng),
                },
            };
        }
    });
    v
}

fn cpu_msm(bases: &[G1Affine], scalars: &[Scalar]) -> G1Projective {
    let proj: Vec<G1Projective> = bases.par_iter().map(G1Projective::from).collect();
    G1Projective::multi_exp(&proj, scalars)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

struct Ctx<'d> {
    dev: &'d Arena<'d>,
    engine: MsmEngine<'d>,
    /// The other builds of the kernels (MsmVariant::ALL after the default).
    others: Vec<MsmEngine<'d>>,
    bases_host: Vec<G1Affine>,
    bases: G1Bases<'d>,
}

/// Checks one MSM against blstrs: over the resident bases when `bases` is None, else over
/// `host` uploaded for the occasion.
fn check_one(
    ctx: &Ctx<'_>,
    what: &str,
    upload: Option<&[G1Affine]>,
    s: &[Scalar],
    failures: &mut Vec<String>,
) -> Res<()> {
    let dev_bases;
    let (b, host) = match upload {
        None => (&ctx.bases, &ctx.bases_host[..]),
        Some(h) => {
            dev_bases = G1Bases::upload(ctx.dev, h)?;
            (&dev_bases, h)
        }
    };
    let t = Instant::now();
    let want = cpu_msm(&host[..s.len()], s);
    let cpu = ms(t);
    let t = Instant::now();
    let got = ctx.engine.msm(b, s)?;
    let gpu = ms(t);
    let ok = got == want;
    println!(
        "{:<44} n = {:>9}  {}  (gpu {:.1} ms, cpu {:.1} ms)",
        what,
        s.len(),
        if ok { "ok" } else { "MISMATCH" },
        gpu,
        cpu
    );
    if !ok {
        failures.push(format!("{what} n = {}", s.len()));
    }
    Ok(())
}

fn run_check(ctx: &Ctx<'_>, max_log: u32, quick: bool, report: &mut Value) -> Res<()> {
    println!("== check against blstrs multi_exp (poisoned temporaries)");
    let mut failures = Vec::new();
    let bh = &ctx.bases_host;
    let mut sizes: Vec<usize> = vec![1, 2, 3, 5, 7, 31, 33, 100, 255, 257, 1000, 4097];
    if !quick {
        sizes.extend([65_537, 100_001, 1_000_003]);
    }
    sizes.extend((0..=max_log).map(|l| 1usize << l));
    sizes.sort_unstable();
    sizes.dedup();
    for &n in sizes.iter().filter(|&&n| n <= bh.len()) {
        for kind in [Kind::Random, Kind::Witness] {
            let s = scalars(kind, n);
            check_one(
                ctx,
                &format!("{} scalars", kind.name()),
                None,
                &s,
                &mut failures,
            )?;
        }
    }
    // Edge cases at a moderate size.
    let n = if quick { 1000 } else { 1 << 16 }.min(bh.len());
    let mut rng = ChaCha20Rng::seed_from_u64(seed());
    check_one(
        ctx,
        "zero scalars",
        None,
        &vec![Scalar::ZERO; n],
        &mut failures,
    )?;
    check_one(
        ctx,
        "one scalars (one bucket holds every point)",
        None,
        &vec![Scalar::ONE; n],
        &mut failures,
    )?;
    let mut with_inf = bh[..n].to_vec();
    for i in (0..n).step_by(3) {
        with_inf[i] = G1Affine::identity();
    }
    check_one(
        ctx,
        "a third of the bases at infinity",
        Some(&with_inf),
        &scalars(Kind::Random, n),
        &mut failures,
    )?;
    let dup = vec![bh[0]; n];
    check_one(
        ctx,
        "one point repeated, random scalars",
        Some(&dup),
        &scalars(Kind::Random, n),
        &mut failures,
    )?;
    check_one(
        ctx,
        "one point repeated, scalar one",
        Some(&dup),
        &vec![Scalar::ONE; n],
        &mut failures,
    )?;
    let pm: Vec<G1Affine> = (0..n)
        .map(|i| if i % 2 == 0 { bh[i / 2] } else { -bh[i / 2] })
        .collect();
    let ps: Vec<Scalar> = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                Scalar::from((i as u64) * 7 + 1)
            } else {
                Scalar::from(((i - 1) as u64) * 7 + 1)
            }
        })
        .collect();
    check_one(
        ctx,
        "P and -P with equal scalars",
        Some(&pm),
        &ps,
        &mut failures,
    )?;
    // (r - 1) / 2 = -1/2: the largest scalar the kernels use as it is (larger ones are negated).
    let half = -Option::<Scalar>::from(Scalar::from(2u64).invert()).ok_or("2 has an inverse")?;
    let special = [
        half,
        half + Scalar::ONE,
        half - Scalar::ONE,
        -Scalar::ONE,
        Scalar::ONE,
        Scalar::ZERO,
    ];
    let sp: Vec<Scalar> = (0..n)
        .map(|_| special[rng.gen_range(0..special.len())])
        .collect();
    check_one(ctx, "scalars at (r-1)/2 and r-1", None, &sp, &mut failures)?;
    // The other kernel builds on a few sizes.
    for other in &ctx.others {
        for &n in [1usize, 3, 1000, 1 << 12.min(max_log), 1 << 16.min(max_log)]
            .iter()
            .filter(|&&n| n <= bh.len())
        {
            for kind in [Kind::Random, Kind::Witness] {
                let s = scalars(kind, n);
                let want = cpu_msm(&bh[..n], &s);
                let got = other.msm(&ctx.bases, &s)?;
                let ok = got == want;
                let what = format!("{:?} build, {} scalars", other.variant(), kind.name());
                println!(
                    "{:<44} n = {:>9}  {}",
                    what,
                    n,
                    if ok { "ok" } else { "MISMATCH" }
                );
                if !ok {
                    failures.push(format!("{what} n = {n}"));
                }
            }
        }
    }
    // Too many scalars is a typed error.
    let too_many = ctx
        .engine
        .msm(&G1Bases::upload(ctx.dev, &bh[..2])?, &[Scalar::ONE; 3]);
    let typed = matches!(
        too_many,
        Err(gpud_cuda::msm::MsmError::TooManyScalars { .. })
    );
    println!(
        "{:<44} {}",
        "3 scalars for 2 bases is an error",
        if typed { "ok" } else { "WRONG" }
    );
    if !typed {
        failures.push("too many scalars not rejected".into());
    }
    report["check"] = json!({ "failures": failures, "max_log": max_log });
    if failures.is_empty() {
        println!("check: all passed");
        Ok(())
    } else {
        Err(format!("check failed: {failures:?}").into())
    }
}

/// Median wall time of `reps` runs of `f` after one warm-up.
fn time_runs(reps: usize, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    f()?;
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        v.push(ms(t));
    }
    Ok(median(&mut v))
}

fn run_bench(
    ctx: &Ctx<'_>,
    min_log: u32,
    max_log: u32,
    cpu_max_log: u32,
    sweep_log: u32,
    report: &mut Value,
) -> Res<()> {
    println!(
        "== MSM benchmark (GPU: median after a warm-up; CPU: blstrs multi_exp on {} threads)",
        rayon::current_num_threads()
    );
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut table = Vec::new();
    for log in min_log..=max_log {
        let n = 1usize << log;
        if n > ctx.bases_host.len() {
            break;
        }
        for kind in [Kind::Random, Kind::Witness] {
            let s = scalars(kind, n);
            let plan = ctx.engine.plan(n)?;
            let reps = if log <= 20 {
                9
            } else if log <= 23 {
                5
            } else {
                3
            };
            let mut result = G1Projective::identity();
            let e2e = time_runs(reps, || {
                result = ctx.engine.msm(&ctx.bases, &s)?;
                Ok(())
            })?;
            let mut dev_s = ctx.dev.alloc::<Scalar>(n)?;
            dev_s.copy_from_host(&s)?;
            let mut phases = Vec::new();
            let dev_ms = time_runs(reps, || {
                let (p, ph) = ctx.engine.msm_device_profiled(&ctx.bases, &dev_s, &plan)?;
                if p != result {
                    return Err("device-resident result differs from the end-to-end one".into());
                }
                phases.push(ph);
                Ok(())
            })?;
            drop(dev_s);
            let ph = phases[phases.len() / 2];
            let (cpu_ms, check) = if log <= cpu_max_log {
                let t = Instant::now();
                let want = cpu_msm(&ctx.bases_host[..n], &s);
                let c = ms(t);
                (
                    Some(c),
                    if want == result {
                        "= blstrs"
                    } else {
                        "MISMATCH blstrs"
                    },
                )
            } else {
                let h = n / 2;
                let lo = ctx.engine.msm(&ctx.bases, &s[..h])?;
                let hi_bases = G1Bases::upload(ctx.dev, &ctx.bases_host[h..n])?;
                let hi = ctx.engine.msm(&hi_bases, &s[h..])?;
                (
                    None,
                    if lo + hi == result {
                        "= halves"
                    } else {
                        "MISMATCH halves"
                    },
                )
            };
            if check.starts_with("MISMATCH") {
                failures.push(format!("2^{log} {}", kind.name()));
            }
            let ratio = cpu_ms.map(|c| c / e2e);
            table.push(format!(
                "2^{:<3} {:<8} c={:<3} {:>10.2} {:>10.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>11} {:>8} {}",
                log,
                kind.name(),
                plan.window_bits,
                e2e,
                dev_ms,
                ph.sort_ms,
                ph.accumulate_ms,
                ph.combine_ms,
                ph.reduce_ms,
                cpu_ms.map_or("-".to_string(), |c| format!("{c:.1}")),
                ratio.map_or("-".to_string(), |r| format!("{r:.1}x")),
                check
            ));
            println!("{}", table.last().map(String::as_str).unwrap_or(""));
            rows.push(json!({
                "log_n": log, "kind": kind.name(), "window_bits": plan.window_bits,
                "segment": plan.segment, "gpu_e2e_ms": e2e, "gpu_device_ms": dev_ms,
                "phases_ms": { "sort": ph.sort_ms, "accumulate": ph.accumulate_ms,
                               "combine": ph.combine_ms, "reduce": ph.reduce_ms },
                "cpu_ms": cpu_ms, "cpu_over_gpu": ratio, "check": check,
            }));
        }
    }
    // Window-size and build sweep at one size.
    let mut sweep = Vec::new();
    let n = 1usize << sweep_log;
    if n <= ctx.bases_host.len() {
        let s = scalars(Kind::Random, n);
        let mut dev_s = ctx.dev.alloc::<Scalar>(n)?;
        dev_s.copy_from_host(&s)?;
        let reference = ctx.engine.msm(&ctx.bases, &s)?;
        println!("== sweep at 2^{sweep_log}, random scalars, scalars on the device");
        for engine in std::iter::once(&ctx.engine).chain(ctx.others.iter()) {
            let variant = engine.variant();
            for c in 15..=20 {
                let plan = MsmPlan::with_window_bits(n, c, ctx.dev.info().multiprocessors)?;
                let mut phases = Vec::new();
                let t = time_runs(3, || {
                    let (p, ph) = engine.msm_device_profiled(&ctx.bases, &dev_s, &plan)?;
                    if p != reference {
                        return Err(format!("sweep {variant:?} c = {c}: wrong result").into());
                    }
                    phases.push(ph);
                    Ok(())
                })?;
                let ph = phases[phases.len() / 2];
                let line = format!(
                    "{:<12} c={:<3} {:>9.2} ms  sort {:>7.2}  accumulate {:>7.2}  combine {:>6.2}  reduce {:>6.2}",
                    format!("{variant:?}"),
                    c,
                    t,
                    ph.sort_ms,
                    ph.accumulate_ms,
                    ph.combine_ms,
                    ph.reduce_ms
                );
                println!("{line}");
                sweep.push(
                    json!({ "variant": format!("{variant:?}"), "window_bits": c, "ms": t,
                    "phases_ms": { "sort": ph.sort_ms, "accumulate": ph.accumulate_ms,
                                   "combine": ph.combine_ms, "reduce": ph.reduce_ms } }),
                );
            }
        }
    }
    println!(
        "\n== MSM summary (ms; e2e = host scalars in, point out; dev = scalars already on the GPU)"
    );
    println!(
        "{:<5} {:<8} {:<5} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>11} {:>8} check",
        "n",
        "scalars",
        "c",
        "gpu e2e",
        "gpu dev",
        "sort",
        "accum",
        "combine",
        "reduce",
        "cpu blstrs",
        "cpu/gpu"
    );
    for l in &table {
        println!("{l}");
    }
    if cpu_max_log < max_log {
        println!(
            "(blstrs not run above 2^{cpu_max_log}: its time; those rows are checked against the sum of two half MSMs)"
        );
    }
    report["bench"] =
        json!({ "rows": rows, "sweep": sweep, "cpu_threads": rayon::current_num_threads() });
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("bench results wrong: {failures:?}").into())
    }
}

/// The key sizes (`--bench --quick`): end to end (pipelined and plain upload), device-resident
/// with phases, every build at 2^24; all results compared.
fn run_quick_bench(ctx: &mut Ctx<'_>, report: &mut Value) -> Res<()> {
    println!("== MSM key sizes (median of timed runs after a warm-up)");
    let mut table = Vec::new();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for log in [20u32, 22, 24] {
        let n = 1usize << log;
        if n > ctx.bases_host.len() {
            break;
        }
        for kind in [Kind::Random, Kind::Witness] {
            let s = scalars(kind, n);
            let plan = ctx.engine.plan(n)?;
            let reps = if log <= 22 { 5 } else { 3 };
            let mut piped = G1Projective::identity();
            ctx.engine.set_pipelined_upload(true);
            let e2e = time_runs(reps, || {
                piped = ctx.engine.msm(&ctx.bases, &s)?;
                Ok(())
            })?;
            ctx.engine.set_pipelined_upload(false);
            let mut plain = G1Projective::identity();
            let e2e_plain = time_runs(reps, || {
                plain = ctx.engine.msm(&ctx.bases, &s)?;
                Ok(())
            })?;
            ctx.engine.set_pipelined_upload(true);
            let mut dev_s = ctx.dev.alloc::<Scalar>(n)?;
            dev_s.copy_from_host(&s)?;
            let mut phases = Vec::new();
            let mut resident = G1Projective::identity();
            let dev_ms = time_runs(reps, || {
                let (p, ph) = ctx.engine.msm_device_profiled(&ctx.bases, &dev_s, &plan)?;
                resident = p;
                phases.push(ph);
                Ok(())
            })?;
            let ph = phases[phases.len() / 2];
            let mut check = if piped == plain && plain == resident {
                "paths agree"
            } else {
                "MISMATCH between paths"
            };
            if log <= 22 && kind == Kind::Random && check == "paths agree" {
                let want = cpu_msm(&ctx.bases_host[..n], &s);
                check = if want == piped {
                    "= blstrs"
                } else {
                    "MISMATCH blstrs"
                };
            }
            // Every build at 2^24, random scalars, on the device.
            let mut builds = Vec::new();
            if log == 24 && kind == Kind::Random {
                for engine in ctx.others.iter() {
                    let mut got = G1Projective::identity();
                    let t = time_runs(reps, || {
                        got = engine.msm_device(&ctx.bases, &dev_s)?;
                        Ok(())
                    })?;
                    if got != resident {
                        check = "MISMATCH between builds";
                    }
                    builds.push(format!("{:?} {t:.2}", engine.variant()));
                    rows.push(json!({"log_n": log, "kind": kind.name(), "build": format!("{:?}", engine.variant()), "gpu_device_ms": t}));
                }
            }
            drop(dev_s);
            if check.starts_with("MISMATCH") {
                failures.push(format!("2^{log} {}", kind.name()));
            }
            table.push(format!(
                "2^{:<3} {:<8} c={:<3} {:>9.2} {:>9.2} {:>9.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2}  {} {}",
                log,
                kind.name(),
                plan.window_bits,
                e2e,
                e2e_plain,
                dev_ms,
                ph.sort_ms,
                ph.accumulate_ms,
                ph.combine_ms,
                ph.reduce_ms,
                check,
                builds.join(", ")
            ));
            println!("{}", table.last().map(String::as_str).unwrap_or(""));
            rows.push(json!({
                "log_n": log, "kind": kind.name(), "window_bits": plan.window_bits,
                "gpu_e2e_ms": e2e, "gpu_e2e_plain_upload_ms": e2e_plain, "gpu_device_ms": dev_ms,
                "phases_ms": { "sort": ph.sort_ms, "accumulate": ph.accumulate_ms,
                               "combine": ph.combine_ms, "reduce": ph.reduce_ms },
                "check": check,
            }));
        }
    }
    // The pipelined upload with a partial last chunk, from pageable and from page-locked memory.
    let n = 3 * (1usize << 19) + 12_345;
    if n <= ctx.bases_host.len() {
        let s = scalars(Kind::Random, n);
        let want = cpu_msm(&ctx.bases_host[..n], &s);
        let pageable = ctx.engine.msm(&ctx.bases, &s)?;
        let mut pinned = gpud_cuda::PinnedBuffer::<Scalar>::zeroed(ctx.dev.device(), n)?;
        pinned.copy_from_slice(&s);
        let locked = ctx.engine.msm(&ctx.bases, &pinned)?;
        let ok = pageable == want && locked == want;
        println!(
            "pipelined upload, n = {n}: from pageable memory {}, from page-locked memory {}",
            if pageable == want {
                "= blstrs"
            } else {
                "MISMATCH"
            },
            if locked == want {
                "= blstrs"
            } else {
                "MISMATCH"
            }
        );
        if !ok {
            failures.push(format!("pipelined upload n = {n}"));
        }
        rows.push(json!({"check": "pipelined_upload", "n": n, "ok": ok}));
    }
    println!(
        "\n== MSM key sizes (ms; e2e = host scalars in, point out, pipelined upload; plain = the \
         first version's upload then convert; dev = scalars already on the GPU; targets 2^24 dev \
         <= 150 then <= 100)"
    );
    println!(
        "{:<5} {:<8} {:<5} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7}  check, other builds (dev ms)",
        "n", "scalars", "c", "e2e", "plain", "dev", "sort", "accum", "combine", "reduce"
    );
    for l in &table {
        println!("{l}");
    }
    report["quick_bench"] = json!({ "rows": rows });
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("quick bench results wrong: {failures:?}").into())
    }
}

fn main() -> Res<()> {
    let args = parse_args()?;
    let info = driver::list_devices()?
        .into_iter()
        .next()
        .ok_or("no CUDA device")?;
    println!(
        "device: {} ({}), {} SMs, {} MiB",
        info.name,
        info.uuid,
        info.multiprocessors,
        info.total_mem >> 20
    );
    if args.g2 {
        return run_g2(&args, &info);
    }
    let max_log = args
        .max_log
        .unwrap_or(if args.bench { 26 } else { 24 })
        .min(26);
    let quick_bench = args.quick && args.bench;
    let max_log = if args.quick { max_log.min(12) } else { max_log };
    let need_log = if quick_bench {
        24
    } else if args.bench {
        max_log.max(args.sweep_log)
    } else {
        max_log
    };
    let vram = info.total_mem - (info.total_mem / 16);
    let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, vram);
    let device = Device::open(lease.device_uuid())?;
    let dev = device.reserve(&lease)?;
    let t = Instant::now();
    let engine = MsmEngine::new(&dev)?;
    let others = MsmVariant::ALL[1..]
        .iter()
        .map(|&v| MsmEngine::with_variant(&dev, v))
        .collect::<Result<Vec<_>, _>>()?;
    println!("kernels loaded in {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let bases_host = random_bases(1 << need_log);
    println!(
        "2^{need_log} bases generated in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let bases = G1Bases::upload(&dev, &bases_host)?;
    println!(
        "bases uploaded in {:.1} ms (resident for every run below)",
        ms(t)
    );
    let mut ctx = Ctx {
        dev: &dev,
        engine,
        others,
        bases_host,
        bases,
    };
    let mut report = json!({
        "device": info.name, "uuid": info.uuid, "multiprocessors": info.multiprocessors,
        "cpu_threads": rayon::current_num_threads(),
    });
    let mut result = Ok(());
    if args.check {
        ctx.engine.set_poison(true);
        ctx.others.iter_mut().for_each(|e| e.set_poison(true));
        result = run_check(&ctx, max_log.min(24).min(need_log), args.quick, &mut report);
        ctx.engine.set_poison(false);
        ctx.others.iter_mut().for_each(|e| e.set_poison(false));
    }
    if quick_bench && result.is_ok() {
        result = run_quick_bench(&mut ctx, &mut report);
    } else if args.bench && result.is_ok() {
        result = run_bench(
            &ctx,
            args.min_log,
            max_log,
            args.cpu_max_log,
            args.sweep_log,
            &mut report,
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    drop(ctx);
    if let Some(token) = lease.compute_token() {
        dev.close(&token)?;
    }
    result
}

// --- G2 ----------------------------------------------------------------------------------------

/// `n` distinct G2 bases, as [`random_bases`] does for G1 (chunks walking by random steps).
fn random_g2_bases(n: usize) -> Vec<G2Affine> {
    let s = seed();
    let mut rng = ChaCha20Rng::seed_from_u64(s);
    let steps: Vec<G2Affine> = (0..16)
        .map(|_| (G2Projective::generator() * Scalar::random(&mut rng)).to_affine())
        .collect();
    let mut out = vec![G2Affine::identity(); n];
    out.par_chunks_mut(1 << 14)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng =
                ChaCha20Rng::seed_from_u64(s ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut acc = G2Projective::generator() * Scalar::random(&mut rng);
            let mut proj = Vec::with_capacity(chunk.len());
            for _ in 0..chunk.len() {
                acc += &steps[rng.gen_range(0..steps.len())];
                proj.push(acc);
            }
            G2Projective::batch_normalize(&proj, chunk);
        });
    out
}

fn cpu_g2(bases: &[G2Affine], scalars: &[Scalar]) -> G2Projective {
    let proj: Vec<G2Projective> = bases.par_iter().map(G2Projective::from).collect();
    G2Projective::multi_exp(&proj, scalars)
}

/// The G2 check and benchmark (`--g2`), under one lease of most of the device.
fn run_g2(args: &Args, info: &driver::DeviceInfo) -> Res<()> {
    let check_log = args.max_log.unwrap_or(22).min(24);
    let check_log = if args.quick {
        check_log.min(12)
    } else {
        check_log
    };
    let bench_log = args.max_log.unwrap_or(24).min(24);
    let cpu_log = args.cpu_max_log.min(22);
    let need_log = match (args.check, args.bench) {
        (_, true) => bench_log.max(22).max(check_log),
        _ => check_log,
    };
    let vram = info.total_mem - (info.total_mem / 16);
    let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, vram);
    let device = Device::open(lease.device_uuid())?;
    let dev = device.reserve(&lease)?;
    let t = Instant::now();
    let mut engine = MsmEngine::<G2>::for_group(&dev)?;
    println!("G2 kernels loaded in {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let host = random_g2_bases(1 << need_log);
    println!(
        "2^{need_log} G2 bases generated in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let bases = G2Bases::upload(&dev, &host)?;
    let mut report = json!({
        "device": info.name, "multiprocessors": info.multiprocessors,
        "cpu_threads": rayon::current_num_threads(),
    });
    let mut failures: Vec<String> = Vec::new();
    fn check(failures: &mut Vec<String>, what: String, got: G2Projective, want: G2Projective) {
        if got != want {
            println!("{what}: MISMATCH");
            failures.push(what);
        }
    }
    if args.check {
        println!("== G2 check against blstrs multi_exp (poisoned temporaries)");
        engine.set_poison(true);
        let mut sizes: Vec<usize> = vec![1, 2, 3, 5, 7, 31, 33, 100, 255, 257, 1000, 4097];
        if !args.quick {
            sizes.extend([65_537, 1_000_003]);
        }
        sizes.extend((0..=check_log).map(|l| 1usize << l));
        sizes.sort_unstable();
        sizes.dedup();
        for &n in sizes.iter().filter(|&&n| n <= host.len()) {
            for kind in [Kind::Random, Kind::Witness] {
                let s = scalars(kind, n);
                let t = Instant::now();
                let got = engine.msm(&bases, &s)?;
                let gpu = ms(t);
                let t = Instant::now();
                let want = cpu_g2(&host[..n], &s);
                let cpu = ms(t);
                let ok = got == want;
                println!(
                    "G2 {:<8} n = {:>9}  {}  (gpu {:.1} ms, cpu {:.1} ms)",
                    kind.name(),
                    n,
                    if ok { "ok" } else { "MISMATCH" },
                    gpu,
                    cpu
                );
                check(
                    &mut failures,
                    format!("G2 {} n = {n}", kind.name()),
                    got,
                    want,
                );
            }
        }
        // Edge cases over 5000 bases: zero and one scalars, identity bases, one point
        // repeated, P and -P, the negation threshold.
        let n = 5000.min(host.len());
        let h = &host[..n];
        let zero = vec![Scalar::ZERO; n];
        check(
            &mut failures,
            "G2 zero scalars".into(),
            engine.msm(&bases, &zero)?,
            G2Projective::identity(),
        );
        let one = vec![Scalar::ONE; n];
        check(
            &mut failures,
            "G2 one scalars".into(),
            engine.msm(&bases, &one)?,
            h.iter().map(G2Projective::from).sum(),
        );
        let s = scalars(Kind::Random, n);
        let mut inf = h.to_vec();
        for p in inf.iter_mut().step_by(3) {
            *p = G2Affine::identity();
        }
        let b = G2Bases::upload(&dev, &inf)?;
        check(
            &mut failures,
            "G2 identity bases".into(),
            engine.msm(&b, &s)?,
            cpu_g2(&inf, &s),
        );
        let dup = vec![h[1]; n];
        let b = G2Bases::upload(&dev, &dup)?;
        check(
            &mut failures,
            "G2 repeated point".into(),
            engine.msm(&b, &s)?,
            cpu_g2(&dup, &s),
        );
        check(
            &mut failures,
            "G2 repeated point, one scalars".into(),
            engine.msm(&b, &one)?,
            G2Projective::from(h[1]) * Scalar::from(n as u64),
        );
        let pm: Vec<G2Affine> = (0..n)
            .map(|i| if i % 2 == 0 { h[i] } else { -h[i - 1] })
            .collect();
        let ps: Vec<Scalar> = (0..n).map(|i| s[i - i % 2]).collect();
        let b = G2Bases::upload(&dev, &pm)?;
        check(
            &mut failures,
            "G2 P and -P".into(),
            engine.msm(&b, &ps)?,
            G2Projective::identity(),
        );
        let threshold: Vec<Scalar> = (0..n)
            .map(|i| match i % 4 {
                0 => -Scalar::ONE,
                // 1/2 - 1 = (r - 1) / 2: the negation threshold.
                1 => Scalar::from(2u64).invert().unwrap_or(Scalar::ONE) - Scalar::ONE,
                2 => -Scalar::from(2u64),
                _ => Scalar::from(u64::MAX),
            })
            .collect();
        check(
            &mut failures,
            "G2 threshold scalars".into(),
            engine.msm(&bases, &threshold)?,
            cpu_g2(h, &threshold),
        );
        engine.set_poison(false);
        let verdict = if failures.is_empty() { "PASS" } else { "FAIL" };
        println!("{verdict} G2 MSM equals blstrs for sizes 1..2^{check_log} and the edge cases");
        report["g2_check"] = json!({ "max_log": check_log, "failures": failures.clone() });
    }
    if args.bench && failures.is_empty() {
        println!("== G2 MSM timing (median after a warm-up; host scalars in, point out)");
        println!(
            "{:<5} {:<8} {:<4} {:>10} {:>10} {:>8}",
            "n", "scalars", "c", "gpu ms", "cpu ms", "cpu/gpu"
        );
        let mut rows = Vec::new();
        let mut at22 = [0.0f64; 2];
        for log in args.min_log..=bench_log {
            let n = 1usize << log;
            for (ki, kind) in [Kind::Random, Kind::Witness].into_iter().enumerate() {
                let s = scalars(kind, n);
                let reps = if log <= 22 { 5 } else { 3 };
                let mut got = G2Projective::identity();
                let gpu = time_runs(reps, || {
                    got = engine.msm(&bases, &s)?;
                    Ok(())
                })?;
                if log == 22 {
                    at22[ki] = gpu;
                }
                let cpu = if log <= cpu_log {
                    let t = Instant::now();
                    let want = cpu_g2(&host[..n], &s);
                    let cpu = ms(t);
                    check(
                        &mut failures,
                        format!("G2 bench {} 2^{log}", kind.name()),
                        got,
                        want,
                    );
                    Some(cpu)
                } else {
                    None
                };
                let c = engine.plan(n)?.window_bits;
                println!(
                    "2^{:<3} {:<8} {:<4} {:>10.2} {:>10} {:>8}",
                    log,
                    kind.name(),
                    c,
                    gpu,
                    cpu.map_or("-".into(), |v| format!("{v:.1}")),
                    cpu.map_or("-".into(), |v| format!("{:.1}x", v / gpu)),
                );
                rows.push(json!({ "log": log, "scalars": kind.name(), "c": c,
                    "gpu_ms": gpu, "cpu_ms": cpu }));
            }
        }
        report["g2_bench"] = json!({ "rows": rows });
        if bench_log >= 22 {
            // The window the cost model picks was fitted to G1; a G2 addition costs about
            // three times as much in the same memory traffic, so time every window at 2^22.
            let n = 1usize << 22;
            let s = scalars(Kind::Random, n);
            let mut sweep: Vec<(u32, f64)> = Vec::new();
            for c in 12..=18u32 {
                engine.set_window_bits(Some(c));
                let t = time_runs(5, || {
                    engine.msm(&bases, &s)?;
                    Ok(())
                })?;
                println!("G2 window sweep at 2^22: c = {c:<2} {t:>8.2} ms");
                sweep.push((c, t));
            }
            engine.set_window_bits(None);
            let best = sweep.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((c, t)) = best {
                println!(
                    "G2 window sweep at 2^22: best c = {c} ({t:.2} ms; the model's c = {})",
                    engine.plan(n)?.window_bits
                );
            }
            let json_row = |(c, ms): (u32, f64)| json!({ "c": c, "ms": ms });
            report["g2_window_sweep"] = json!({ "log": 22,
                "rows": sweep.iter().copied().map(json_row).collect::<Vec<_>>(),
                "best": best.map(json_row) });

            // Our G1 MSM at 2^22 (random scalars, host scalars in), for the ratio.
            let g1_bases = G1Bases::upload(&dev, &random_bases(1 << 22))?;
            let g1 = MsmEngine::new(&dev)?;
            // The same random scalars as the sweep's.
            let g1_ms = time_runs(5, || {
                g1.msm(&g1_bases, &s)?;
                Ok(())
            })?;
            drop((g1_bases, g1));
            let ratio = at22[0] / g1_ms;
            let witness = at22[1] / at22[0];
            println!(
                "RATIO G2/G1 at 2^22 (random): {ratio:.2} (G2 {:.1} ms, G1 {g1_ms:.1} ms; target <= 3) {}",
                at22[0],
                if ratio <= 3.0 { "PASS" } else { "FAIL" }
            );
            println!(
                "RATIO G2 witness/random at 2^22: {witness:.2} (target <= 1.05) {}",
                if witness <= 1.05 { "PASS" } else { "FAIL" }
            );
            report["g2_ratio"] = json!({ "g2_ms": at22[0], "g2_witness_ms": at22[1],
                "g1_ms": g1_ms, "ratio": ratio, "witness_over_random": witness });

            // The build with the accumulation's prefetch (the G1 setting) against the
            // product's G2 build, same bases and scalars, alternating.
            let prefetch = MsmEngine::<G2>::g2_with_prefetch(&dev)?;
            let witness_s = scalars(Kind::Witness, n);
            let mut builds = Vec::new();
            for (name, s) in [("random", &s), ("witness", &witness_s)] {
                let product = time_runs(5, || {
                    engine.msm(&bases, s)?;
                    Ok(())
                })?;
                let other = time_runs(5, || {
                    prefetch.msm(&bases, s)?;
                    Ok(())
                })?;
                if prefetch.msm(&bases, s)? != engine.msm(&bases, s)? {
                    failures.push(format!("G2 prefetch build, {name} scalars: wrong result"));
                }
                println!(
                    "G2 builds at 2^22, {name} scalars: no prefetch (product) {product:.2} ms, \
                     prefetch {other:.2} ms ({:.2}x)",
                    other / product
                );
                builds
                    .push(json!({ "scalars": name, "product_ms": product, "prefetch_ms": other }));
            }
            report["g2_builds"] = json!(builds);
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    drop(bases);
    if let Some(token) = lease.compute_token() {
        dev.close(&token)?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("G2 MSM results wrong: {failures:?}").into())
    }
}
