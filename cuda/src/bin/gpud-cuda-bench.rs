//! GPU check and benchmark of gpud-cuda's NTT and H polynomial, in one run on the GPU machine.
//!
//! `gpud-cuda-bench [--check] [--bench] [--quick] [--max-log N] [--json PATH]`
//!
//! --quick (alone, about a minute): every NTT kernel variant (`NttVariant`: the first measured
//!   version, its passes with the current multiplication, the register-radix passes with 8- and
//!   9-stage plans, radix-4 with the CIOS and the Karatsuba multiplication) checked against the
//!   CPU at a few sizes and against each other at 2^20, 2^24 and 2^27, then timed there and on
//!   H 2^22 and 2^24, with the Fr product rate of the three multiplications (first version,
//!   current, Karatsuba); one table of every variant's times at the end.
//! --check: every transform kind at 2^1..2^max-log (and odd batches at small sizes), and the H
//!   polynomial at sizes up to 2^min(max-log, 26), against the rayon CPU reference, bit for bit,
//!   on fresh random inputs; the reservation overflow check.
//! --bench: device-to-device copy bandwidth; Fr multiplication rate; forward NTT 2^16..2^27 (median of timed runs, and
//!   each pass's time and bandwidth); the same NTT on the CPU's cores with rayon and the ratio;
//!   H 2^20..2^26 without host transfers, and with them from page-locked memory.
//! Prints tables; writes everything as JSON to --json.

use std::time::Instant;

use blstrs::Scalar;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, LaunchConfig, PushKernelArg, result};
use ff::Field;
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_cuda::hpoly::HPoly;
use gpud_cuda::ntt::plan::{self, NttKind, Step};
use gpud_cuda::ntt::{NttEngine, NttVariant};
use gpud_cuda::{Arena, Device, Error, PinnedBuffer, cpu, driver};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rayon::prelude::*;
use serde_json::{Value, json};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Args {
    check: bool,
    bench: bool,
    quick: bool,
    max_log: u32,
    json: Option<String>,
    /// Only a forward NTT of this size, three times (for a profiler to look at).
    repeat_ntt: Option<u32>,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        check: false,
        bench: false,
        quick: false,
        max_log: plan::MAX_LOG_N,
        json: None,
        repeat_ntt: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--check" => a.check = true,
            "--bench" => a.bench = true,
            "--quick" => a.quick = true,
            "--max-log" => a.max_log = it.next().ok_or("--max-log needs a value")?.parse()?,
            "--json" => a.json = Some(it.next().ok_or("--json needs a path")?),
            "--repeat-ntt" => {
                let log_n: u32 = it.next().ok_or("--repeat-ntt needs a log size")?.parse()?;
                plan::check_log_n(log_n)?;
                a.repeat_ntt = Some(log_n);
            }
            "-h" | "--help" => {
                println!(
                    "usage: gpud-cuda-bench [--check] [--bench] [--quick] [--max-log N] [--json PATH] [--repeat-ntt LOG]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if !a.check && !a.bench && !a.quick && a.repeat_ntt.is_none() {
        a.check = true;
        a.bench = true;
    }
    a.max_log = a.max_log.clamp(1, plan::MAX_LOG_N);
    Ok(a)
}

/// Fresh random scalars, generated in parallel (one seeded stream per chunk).
fn random(seed: u64, n: usize) -> Vec<Scalar> {
    let mut v = vec![Scalar::ZERO; n];
    v.par_chunks_mut(1 << 14).enumerate().for_each(|(i, c)| {
        let mut rng =
            ChaCha20Rng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for x in c {
            *x = Scalar::random(&mut rng);
        }
    });
    v
}

fn event(dev: &Arena) -> Res<CudaEvent> {
    Ok(dev
        .raw_stream_bypassing_tokens()
        .context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn check(
    dev: &Arena,
    lease: &ExclusiveDevice,
    max_log: u32,
    seed: &mut ChaCha20Rng,
    report: &mut Vec<Value>,
) -> Res<bool> {
    let mut ntt = NttEngine::new(dev)?;
    let mut ok = true;
    println!("\n== correctness vs CPU (blstrs + rayon), fresh random inputs");
    println!(
        "{:<14} {:>6} {:>6} {:>8}",
        "kind", "log_n", "batch", "result"
    );
    for log_n in 1..=max_log {
        let batches: &[u64] = if log_n <= 12 { &[1, 3] } else { &[1] };
        for &batch in batches {
            for kind in [
                NttKind::Forward,
                NttKind::Inverse,
                NttKind::CosetForward,
                NttKind::CosetInverse,
            ] {
                // The largest sizes once per kind is enough: forward and inverse share passes.
                if log_n > 24 && matches!(kind, NttKind::CosetForward | NttKind::CosetInverse) {
                    continue;
                }
                let x = random(seed.next_u64(), (batch as usize) << log_n);
                let mut buf = dev.alloc::<Scalar>(x.len())?;
                buf.copy_from_host(&x)?;
                ntt.run(&mut buf, kind, log_n)?;
                let got = buf.to_vec()?;
                drop(buf);
                let mut want = x;
                cpu::ntt(&mut want, kind, log_n)?;
                let pass = got == want;
                ok &= pass;
                println!(
                    "{:<14} {:>6} {:>6} {:>8}",
                    format!("{kind:?}"),
                    log_n,
                    batch,
                    if pass { "ok" } else { "MISMATCH" }
                );
                report.push(json!({"check": "ntt", "kind": format!("{kind:?}"), "log_n": log_n, "batch": batch, "ok": pass}));
            }
        }
        if log_n >= 20 {
            ntt.release_tables();
        }
    }
    drop(ntt);
    let mut hp = HPoly::new(dev)?;
    let h_sizes: Vec<u32> = [1u32, 2, 3, 4, 8, 12, 16, 20, 22, 24, 26]
        .into_iter()
        .filter(|&l| l <= max_log.min(26))
        .collect();
    for log_n in h_sizes {
        let n = 1usize << log_n;
        let len = if n > 4 { n - 1 } else { n };
        let (a, b, c) = (
            random(seed.next_u64(), len),
            random(seed.next_u64(), len),
            random(seed.next_u64(), len),
        );
        let out = hp.compute(&a, &b, &c)?;
        let mut got = vec![Scalar::ZERO; n];
        out.download_into(&mut got)?;
        drop(out);
        let want = cpu::h_poly(&a, &b, &c)?;
        let pass = got == want;
        ok &= pass;
        println!(
            "{:<14} {:>6} {:>6} {:>8}",
            "H",
            log_n,
            1,
            if pass { "ok" } else { "MISMATCH" }
        );
        report.push(json!({"check": "h", "log_n": log_n, "ok": pass}));
        if log_n >= 20 {
            hp.engine().release_tables();
        }
    }
    drop(hp);
    // Reservation: an allocation past it fails with the typed error, CUDA untouched, and the
    // device stays usable.
    let budget = dev.ledger();
    let remaining = budget.limit - budget.in_use;
    let before = dev.pool_usage()?;
    let over = dev.alloc::<u8>((remaining + 1) as usize);
    let typed = matches!(over, Err(Error::OverReservation { .. }));
    drop(over);
    let untouched = dev.pool_usage()?.reserved == before.reserved;
    let mut ntt = NttEngine::new(dev)?;
    let x = random(seed.next_u64(), 1 << 16);
    let mut buf = dev.alloc::<Scalar>(x.len())?;
    buf.copy_from_host(&x)?;
    ntt.run(&mut buf, NttKind::Forward, 16)?;
    let mut want = x;
    cpu::ntt(&mut want, NttKind::Forward, 16)?;
    let usable = buf.to_vec()? == want;
    drop((buf, ntt));
    let token = lease.compute_token().ok_or("no compute token")?;
    dev.synchronize(&token)?;
    let pass = typed && untouched && usable;
    ok &= pass;
    println!(
        "reservation overflow: typed error {typed}, pool untouched {untouched}, device usable after {usable}"
    );
    report.push(json!({"check": "reservation_overflow", "typed_error": typed, "pool_untouched": untouched, "usable_after": usable, "ok": pass}));
    Ok(ok)
}

/// Device-to-device copy bandwidth, bytes read plus written per second.
fn copy_bandwidth(dev: &Arena) -> Res<f64> {
    let bytes = 4usize << 30;
    let src = dev.alloc::<u8>(bytes)?;
    let mut dst = dev.alloc::<u8>(bytes)?;
    dst.fill_bytes(1)?;
    let stream = dev.raw_stream_bypassing_tokens().cu_stream();
    let mut times = Vec::new();
    for i in 0..12 {
        let (e0, e1) = (event(dev)?, event(dev)?);
        e0.record(dev.raw_stream_bypassing_tokens())?;
        dev.raw_stream_bypassing_tokens()
            .context()
            .bind_to_thread()?;
        // SAFETY: both buffers hold `bytes` bytes on this device, ordered on the main stream.
        unsafe { result::memcpy_dtod_async(dst.device_ptr(), src.device_ptr(), bytes, stream) }?;
        e1.record(dev.raw_stream_bypassing_tokens())?;
        e1.synchronize()?;
        if i >= 2 {
            times.push(e0.elapsed_ms(&e1)? as f64);
        }
    }
    Ok(2.0 * bytes as f64 / (median(times) / 1e3))
}

/// Field multiplications per second (Montgomery products, fr_mul), all SMs busy.
fn mul_rate(dev: &Arena, seed: &mut ChaCha20Rng) -> Res<f64> {
    mul_rate_of(dev, &gpud_cuda::kernels::FR_BENCH, seed)
}

/// [`mul_rate`] of the multiplication built into `module` (FR_BENCH, FR_BENCH_V0 or
/// FR_BENCH_KARA).
fn mul_rate_of(
    dev: &Arena,
    module: &'static gpud_cuda::kernels::KernelModule,
    seed: &mut ChaCha20Rng,
) -> Res<f64> {
    let f = dev.function(module, "fr_mul_throughput")?;
    let threads = 256u32;
    let blocks = dev.info().multiprocessors * 8;
    let n = (blocks * threads) as usize;
    let mut x = dev.alloc::<Scalar>(4 * n)?;
    x.copy_from_host(&random(seed.next_u64(), 4 * n))?;
    let mut y = dev.alloc::<Scalar>(n)?;
    y.copy_from_host(&random(seed.next_u64(), n))?;
    let iters = 2048u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut times = Vec::new();
    for rep in 0..6 {
        let (e0, e1) = (event(dev)?, event(dev)?);
        e0.record(dev.raw_stream_bypassing_tokens())?;
        let (px, py) = (x.device_ptr(), y.device_ptr());
        let mut b = dev.raw_stream_bypassing_tokens().launch_builder(&f);
        b.arg(&px).arg(&py).arg(&iters);
        // SAFETY: x holds 4 elements and y one element per thread of the launch.
        unsafe { b.launch(cfg) }?;
        e1.record(dev.raw_stream_bypassing_tokens())?;
        e1.synchronize()?;
        if rep > 0 {
            times.push(e0.elapsed_ms(&e1)? as f64);
        }
    }
    drop((x, y));
    Ok(4.0 * n as f64 * f64::from(iters) / (median(times) / 1e3))
}

fn bench(dev: &Arena, max_log: u32, seed: &mut ChaCha20Rng, report: &mut Vec<Value>) -> Res<()> {
    let copy_bw = copy_bandwidth(dev)?;
    println!(
        "\n== device-to-device copy: {:.0} GB/s (read + write)",
        copy_bw / 1e9
    );
    report.push(json!({"bench": "copy", "bytes_per_s": copy_bw}));
    let muls = mul_rate(dev, seed)?;
    println!(
        "== Fr multiplication: {:.1} G/s (Montgomery products, all SMs)",
        muls / 1e9
    );
    report.push(json!({"bench": "fr_mul", "per_s": muls}));

    println!("\n== forward NTT (natural order in and out), median of timed runs");
    println!(
        "   floor: the larger of (n/2) log n products at the measured Fr rate and the passes'"
    );
    println!(
        "   bytes (each launch reads and writes every element) at the measured copy bandwidth"
    );
    println!(
        "{:>6} {:>10} {:>10} {:>8} {:>9} {:>9} {:>10}   per launch: ms, GB/s (% of copy)",
        "log_n", "gpu ms", "cpu ms", "cpu/gpu", "mul ms", "mem ms", "gpu GB/s"
    );
    let mut ntt = NttEngine::new(dev)?;
    for log_n in 16..=max_log {
        let n = 1usize << log_n;
        let x = random(seed.next_u64(), n);
        let mut buf = dev.alloc::<Scalar>(n)?;
        buf.copy_from_host(&x)?;
        let steps = plan::ntt_steps(NttKind::Forward, log_n, 1);
        ntt.prepare(&steps)?;
        ntt.run(&mut buf, NttKind::Forward, log_n)?; // warm-up
        let reps = if log_n <= 22 { 20 } else { 7 };
        let mut times = Vec::new();
        for _ in 0..reps {
            let (e0, e1) = (event(dev)?, event(dev)?);
            e0.record(dev.raw_stream_bypassing_tokens())?;
            ntt.run(&mut buf, NttKind::Forward, log_n)?;
            e1.record(dev.raw_stream_bypassing_tokens())?;
            e1.synchronize()?;
            times.push(e0.elapsed_ms(&e1)? as f64);
        }
        let gpu_ms = median(times);
        // Each launch timed alone: a pass reads and writes every element once.
        let mut per_launch = Vec::new();
        for step in &steps {
            let mut ts = Vec::new();
            for _ in 0..5 {
                let (e0, e1) = (event(dev)?, event(dev)?);
                e0.record(dev.raw_stream_bypassing_tokens())?;
                ntt_step(&mut ntt, step, buf.device_ptr())?;
                e1.record(dev.raw_stream_bypassing_tokens())?;
                e1.synchronize()?;
                ts.push(e0.elapsed_ms(&e1)? as f64);
            }
            let ms = median(ts);
            let bw = 2.0 * (n * 32) as f64 / (ms / 1e3);
            per_launch.push((step_name(step), ms, bw));
        }
        let total_bytes = 2.0 * (n * 32) as f64 * steps.len() as f64;
        let gpu_bw = total_bytes / (gpu_ms / 1e3);
        let mul_floor_ms = (n / 2) as f64 * f64::from(log_n) / muls * 1e3;
        let mem_floor_ms = total_bytes / copy_bw * 1e3;
        // CPU: same transform with rayon on every core of this machine.
        let cpu_reps = if log_n <= 20 { 3 } else { 1 };
        let mut cpu_times = Vec::new();
        let mut y = x.clone();
        for _ in 0..cpu_reps {
            let t = Instant::now();
            cpu::ntt(&mut y, NttKind::Forward, log_n)?;
            cpu_times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let cpu_ms = median(cpu_times);
        let launches: Vec<String> = per_launch
            .iter()
            .map(|(name, ms, bw)| {
                format!(
                    "{name} {ms:.3} {:.0} ({:.0}%)",
                    bw / 1e9,
                    100.0 * bw / copy_bw
                )
            })
            .collect();
        println!(
            "{:>6} {:>10.3} {:>10.1} {:>8.1} {:>9.3} {:>9.3} {:>10.0}   {}",
            log_n,
            gpu_ms,
            cpu_ms,
            cpu_ms / gpu_ms,
            mul_floor_ms,
            mem_floor_ms,
            gpu_bw / 1e9,
            launches.join(" | ")
        );
        report.push(json!({
            "bench": "ntt_forward", "log_n": log_n, "gpu_ms": gpu_ms, "cpu_ms": cpu_ms,
            "cpu_threads": rayon::current_num_threads(), "gpu_bytes_per_s": gpu_bw,
            "mul_floor_ms": mul_floor_ms, "mem_floor_ms": mem_floor_ms,
            "launches": per_launch.iter().map(|(name, ms, bw)| json!({"step": name, "ms": ms, "bytes_per_s": bw, "fraction_of_copy": bw / copy_bw})).collect::<Vec<_>>(),
        }));
        drop(buf);
        if log_n >= 22 {
            ntt.release_tables();
        }
    }
    drop(ntt);

    println!("\n== Groth16 H (3 iNTT + 3 coset NTT + pointwise + coset iNTT)");
    println!(
        "{:>6} {:>14} {:>22}",
        "log_n", "on device ms", "with uploads (pinned) ms"
    );
    let mut hp = HPoly::new(dev)?;
    for log_n in 20..=max_log.min(26) {
        let n = 1usize << log_n;
        let inputs: Vec<Vec<Scalar>> = (0..3).map(|_| random(seed.next_u64(), n)).collect();
        let mut times = Vec::new();
        for rep in 0..6 {
            let mut bufs = Vec::new();
            for x in &inputs {
                let mut b = dev.alloc::<Scalar>(n)?;
                b.copy_from_host(x)?;
                bufs.push(b);
            }
            let c = bufs.pop().ok_or("c")?;
            let b = bufs.pop().ok_or("b")?;
            let a = bufs.pop().ok_or("a")?;
            let (e0, e1) = (event(dev)?, event(dev)?);
            e0.record(dev.raw_stream_bypassing_tokens())?;
            let out = hp.compute_on_device(a, b, c)?;
            e1.record(dev.raw_stream_bypassing_tokens())?;
            e1.synchronize()?;
            if rep > 0 {
                times.push(e0.elapsed_ms(&e1)? as f64);
            }
            drop(out);
        }
        let on_device = median(times);
        let mut pins = Vec::new();
        for x in &inputs {
            let mut p = PinnedBuffer::<Scalar>::zeroed(dev, n)?;
            p.copy_from_slice(x);
            pins.push(p);
        }
        let mut full = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            let out = hp.compute(&pins[0], &pins[1], &pins[2])?;
            dev.raw_stream_bypassing_tokens().synchronize()?;
            full.push(t.elapsed().as_secs_f64() * 1e3);
            drop(out);
        }
        let with_uploads = median(full);
        println!("{:>6} {:>14.3} {:>22.3}", log_n, on_device, with_uploads);
        report.push(json!({"bench": "h", "log_n": log_n, "on_device_ms": on_device, "with_pinned_uploads_ms": with_uploads}));
        if log_n >= 22 {
            hp.engine().release_tables();
        }
    }
    Ok(())
}

/// Device-to-device copy of `bytes` on the main stream.
fn d2d(dev: &Arena, dst: u64, src: u64, bytes: usize) -> Res<()> {
    dev.raw_stream_bypassing_tokens()
        .context()
        .bind_to_thread()?;
    // SAFETY: callers pass two distinct buffers of this arena holding at least `bytes` bytes,
    // ordered on the device's main stream.
    unsafe {
        result::memcpy_dtod_async(
            dst,
            src,
            bytes,
            dev.raw_stream_bypassing_tokens().cu_stream(),
        )
    }?;
    Ok(())
}

/// Median device time of `reps` runs of `f` (after one warm-up run), in milliseconds.
fn time_ms(dev: &Arena, reps: usize, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    f()?;
    let mut times = Vec::new();
    for _ in 0..reps {
        let (e0, e1) = (event(dev)?, event(dev)?);
        e0.record(dev.raw_stream_bypassing_tokens())?;
        f()?;
        e1.record(dev.raw_stream_bypassing_tokens())?;
        e1.synchronize()?;
        times.push(e0.elapsed_ms(&e1)? as f64);
    }
    Ok(median(times))
}

fn variant_name(v: NttVariant) -> &'static str {
    match v {
        NttVariant::Baseline => "baseline (first version)",
        NttVariant::LegacyPasses => "legacy passes, new mul",
        NttVariant::Radix8 => "radix, passes <= 8",
        NttVariant::Radix => "radix, passes <= 9",
        NttVariant::Radix4 => "radix-4, passes <= 9",
        NttVariant::Radix4Karatsuba => "radix-4, passes <= 9, Karatsuba",
        NttVariant::Radix4Occ4 => "radix-4, 4 blocks/SM (default)",
    }
}

/// The quick suite: every NTT variant checked and timed at the key sizes, one table at the end.
fn quick(dev: &Arena, seed: &mut ChaCha20Rng, report: &mut Vec<Value>) -> Res<bool> {
    let mut ok = true;
    let copy_bw = copy_bandwidth(dev)?;
    let muls_v0 = mul_rate_of(dev, &gpud_cuda::kernels::FR_BENCH_V0, seed)?;
    let muls = mul_rate(dev, seed)?;
    let muls_kara = mul_rate_of(dev, &gpud_cuda::kernels::FR_BENCH_KARA, seed)?;
    println!(
        "\n== copy {:.0} GB/s; Fr products: first version {:.1} G/s, current {:.1} G/s ({:+.1} %), \
         Karatsuba {:.1} G/s ({:+.1} % vs current)",
        copy_bw / 1e9,
        muls_v0 / 1e9,
        muls / 1e9,
        100.0 * (muls / muls_v0 - 1.0),
        muls_kara / 1e9,
        100.0 * (muls_kara / muls - 1.0)
    );
    report.push(json!({"bench": "copy", "bytes_per_s": copy_bw}));
    report.push(json!({"bench": "fr_mul", "variant": "first version", "per_s": muls_v0}));
    report.push(json!({"bench": "fr_mul", "variant": "current", "per_s": muls}));
    report.push(json!({"bench": "fr_mul", "variant": "karatsuba", "per_s": muls_kara}));

    // Correctness of every variant against the CPU at small sizes (every kind, odd batches).
    println!("\n== quick check: every variant = CPU reference (fresh random inputs)");
    let mut ntt = NttEngine::new(dev)?;
    for v in NttVariant::ALL {
        ntt.set_variant(v)?;
        let mut all = true;
        for (log_n, batch) in [
            (1u32, 3u64),
            (5, 1),
            (8, 3),
            (9, 1),
            (12, 3),
            (17, 1),
            (20, 1),
        ] {
            for kind in [
                NttKind::Forward,
                NttKind::Inverse,
                NttKind::CosetForward,
                NttKind::CosetInverse,
            ] {
                let x = random(seed.next_u64(), (batch as usize) << log_n);
                let mut buf = dev.alloc::<Scalar>(x.len())?;
                buf.copy_from_host(&x)?;
                ntt.run(&mut buf, kind, log_n)?;
                let got = buf.to_vec()?;
                let mut want = x;
                cpu::ntt(&mut want, kind, log_n)?;
                if got != want {
                    println!(
                        "  {}: {kind:?} 2^{log_n} x {batch} MISMATCH",
                        variant_name(v)
                    );
                    all = false;
                }
            }
        }
        println!(
            "  {:<32} {}",
            variant_name(v),
            if all { "ok" } else { "MISMATCH" }
        );
        report.push(json!({"check": "ntt_quick", "variant": variant_name(v), "ok": all}));
        ok &= all;
    }
    ntt.release_tables();

    // Forward NTT at the key sizes: every variant on the same input, outputs compared with
    // each other (and with the CPU at 2^20), then timed.
    let sizes = [20u32, 24, 27];
    let mut ntt_ms = vec![vec![f64::NAN; sizes.len()]; NttVariant::ALL.len()];
    println!("\n== forward NTT, natural order in and out (median ms)");
    for (si, &log_n) in sizes.iter().enumerate() {
        let n = 1usize << log_n;
        let x = random(seed.next_u64(), n);
        let mut pristine = dev.alloc::<Scalar>(n)?;
        pristine.copy_from_host(&x)?;
        let mut buf = dev.alloc::<Scalar>(n)?;
        let bytes = n * 32;
        let mut first: Option<Vec<Scalar>> = None;
        if log_n <= 20 {
            let mut want = x.clone();
            cpu::ntt(&mut want, NttKind::Forward, log_n)?;
            first = Some(want);
        }
        drop(x);
        for (vi, v) in NttVariant::ALL.into_iter().enumerate() {
            ntt.set_variant(v)?;
            d2d(dev, buf.device_ptr(), pristine.device_ptr(), bytes)?;
            ntt.run(&mut buf, NttKind::Forward, log_n)?;
            let got = buf.to_vec()?;
            let same = match &first {
                Some(w) => got == *w,
                None => {
                    first = Some(got);
                    true
                }
            };
            if !same {
                println!("  {} 2^{log_n}: MISMATCH", variant_name(v));
            }
            ok &= same;
            let reps = if log_n >= 27 { 5 } else { 9 };
            let ms = time_ms(dev, reps, || {
                ntt.run(&mut buf, NttKind::Forward, log_n)?;
                Ok(())
            })?;
            ntt_ms[vi][si] = ms;
            // Each launch alone at 2^24: passes and bit reversal.
            let mut launches = Vec::new();
            if log_n == 24 {
                let steps = plan::ntt_steps_max(NttKind::Forward, log_n, 1, v.max_stages());
                for step in &steps {
                    let t = time_ms(dev, 5, || ntt_step(&mut ntt, step, buf.device_ptr()))?;
                    launches.push(format!("{} {t:.3}", step_name(step)));
                }
            }
            println!(
                "  2^{log_n} {:<32} {ms:>8.3} ms  {} {}",
                variant_name(v),
                if same { "" } else { "MISMATCH" },
                launches.join(" | ")
            );
            report.push(json!({"bench": "ntt_quick", "variant": variant_name(v), "log_n": log_n, "ms": ms, "same_result": same, "launches": launches}));
        }
        drop((buf, pristine));
        ntt.release_tables();
    }
    drop(ntt);

    // H on the device at 2^22 and 2^24 (inputs copied from pristine device buffers; every
    // variant's result compared with the first's, and with the CPU at 2^22).
    let h_sizes = [22u32, 24];
    let mut h_ms = vec![vec![f64::NAN; h_sizes.len()]; NttVariant::ALL.len()];
    println!("\n== Groth16 H on the device (median ms)");
    let mut hp = HPoly::new(dev)?;
    for (si, &log_n) in h_sizes.iter().enumerate() {
        let n = 1usize << log_n;
        let inputs: Vec<Vec<Scalar>> = (0..3).map(|_| random(seed.next_u64(), n)).collect();
        let mut pristine = Vec::new();
        for x in &inputs {
            let mut b = dev.alloc::<Scalar>(n)?;
            b.copy_from_host(x)?;
            pristine.push(b);
        }
        let mut first: Option<Vec<Scalar>> = None;
        if log_n <= 22 {
            first = Some(cpu::h_poly(&inputs[0], &inputs[1], &inputs[2])?);
        }
        drop(inputs);
        let fresh = || -> Res<[gpud_cuda::DeviceBuffer<'_, Scalar>; 3]> {
            let mut out = Vec::new();
            for p in &pristine {
                let b = dev.alloc::<Scalar>(n)?;
                d2d(dev, b.device_ptr(), p.device_ptr(), n * 32)?;
                out.push(b);
            }
            let c = out.pop().ok_or("c")?;
            let b = out.pop().ok_or("b")?;
            let a = out.pop().ok_or("a")?;
            Ok([a, b, c])
        };
        for (vi, v) in NttVariant::ALL.into_iter().enumerate() {
            hp.engine().set_variant(v)?;
            let [a, b, c] = fresh()?;
            let out = hp.compute_on_device(a, b, c)?;
            let got = out.buffer().to_vec()?;
            drop(out);
            let same = match &first {
                Some(w) => got == *w,
                None => {
                    first = Some(got);
                    true
                }
            };
            ok &= same;
            let mut times = Vec::new();
            for _ in 0..5 {
                let [a, b, c] = fresh()?;
                let (e0, e1) = (event(dev)?, event(dev)?);
                e0.record(dev.raw_stream_bypassing_tokens())?;
                let out = hp.compute_on_device(a, b, c)?;
                e1.record(dev.raw_stream_bypassing_tokens())?;
                e1.synchronize()?;
                times.push(e0.elapsed_ms(&e1)? as f64);
                drop(out);
            }
            let ms = median(times);
            h_ms[vi][si] = ms;
            println!(
                "  H 2^{log_n} {:<32} {ms:>8.3} ms  {}",
                variant_name(v),
                if same { "" } else { "MISMATCH" }
            );
            report.push(json!({"bench": "h_quick", "variant": variant_name(v), "log_n": log_n, "ms": ms, "same_result": same}));
        }
        drop(pristine);
        hp.engine().release_tables();
    }
    drop(hp);

    println!("\n== NTT variants (ms; targets: NTT 2^24 <= 3, NTT 2^27 <= 40, H 2^24 <= 30)");
    println!(
        "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "variant", "ntt 2^20", "ntt 2^24", "ntt 2^27", "H 2^22", "H 2^24"
    );
    for (vi, v) in NttVariant::ALL.into_iter().enumerate() {
        println!(
            "{:<32} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            variant_name(v),
            ntt_ms[vi][0],
            ntt_ms[vi][1],
            ntt_ms[vi][2],
            h_ms[vi][0],
            h_ms[vi][1]
        );
    }
    println!(
        "Fr products: first version {:.1} G/s, current {:.1} G/s, Karatsuba {:.1} G/s; copy {:.0} GB/s; checks {}",
        muls_v0 / 1e9,
        muls / 1e9,
        muls_kara / 1e9,
        copy_bw / 1e9,
        if ok { "ok" } else { "FAILED" }
    );
    Ok(ok)
}

fn step_name(s: &Step) -> String {
    match s {
        Step::Pass { params, .. } => format!("pass k={} S=2^{}", params.k, params.log_stride),
        Step::Bitrev { .. } => "bitrev".into(),
        Step::Pointwise { .. } => "pointwise".into(),
    }
}

fn ntt_step(ntt: &mut NttEngine<'_>, step: &Step, ptr: u64) -> Res<()> {
    // SAFETY: `ptr` is the buffer the plan was made for (one polynomial of the plan's size).
    unsafe { ntt.execute_steps(std::slice::from_ref(step), &[ptr]) }?;
    Ok(())
}

/// A forward NTT of 2^log_n points, three times (the first warms the tables), each timed.
fn repeat_ntt(dev: &Arena, log_n: u32, seed: &mut ChaCha20Rng) -> Res<()> {
    let mut ntt = NttEngine::new(dev)?;
    let x = random(seed.next_u64(), 1 << log_n);
    let mut buf = dev.alloc::<Scalar>(x.len())?;
    buf.copy_from_host(&x)?;
    for i in 0..3 {
        let (start, end) = (event(dev)?, event(dev)?);
        start.record(dev.raw_stream_bypassing_tokens())?;
        ntt.run(&mut buf, NttKind::Forward, log_n)?;
        end.record(dev.raw_stream_bypassing_tokens())?;
        end.synchronize()?;
        println!(
            "forward NTT 2^{log_n}, run {i}: {:.3} ms",
            start.elapsed_ms(&end)?
        );
    }
    Ok(())
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("gpud-cuda-bench: some checks FAILED");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("gpud-cuda-bench: {e}");
            std::process::exit(2);
        }
    }
}

fn run() -> Res<bool> {
    let args = parse_args()?;
    let info = driver::list_devices()?
        .into_iter()
        .next()
        .ok_or("no CUDA device")?;
    println!(
        "device {} ({}), {} SMs, {:.1} GiB, sm_{}{}; rayon threads {}",
        info.name,
        info.uuid,
        info.multiprocessors,
        info.total_mem as f64 / (1u64 << 30) as f64,
        info.compute_capability.0,
        info.compute_capability.1,
        rayon::current_num_threads()
    );
    // The whole card but 2 GiB, claimed by this program alone.
    let lease = ExclusiveDevice::assume_unshared(
        info.uuid.clone(),
        info.ordinal as u32,
        info.total_mem.saturating_sub(2 << 30),
    );
    let device = Device::open(lease.device_uuid())?;
    let dev = device.reserve(&lease)?;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    println!("seed {seed}");
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut report = Vec::new();
    let t = Instant::now();
    dev.module(&gpud_cuda::kernels::NTT)?;
    println!(
        "kernel module ready in {:.0} ms (NVRTC or disk cache)",
        t.elapsed().as_secs_f64() * 1e3
    );
    let mut ok = true;
    if args.check {
        ok &= check(&dev, &lease, args.max_log, &mut rng, &mut report)?;
    }
    if args.bench {
        bench(&dev, args.max_log, &mut rng, &mut report)?;
    }
    if args.quick {
        ok &= quick(&dev, &mut rng, &mut report)?;
    }
    if let Some(log_n) = args.repeat_ntt {
        repeat_ntt(&dev, log_n, &mut rng)?;
    }
    let token = lease.compute_token().ok_or("no compute token")?;
    let closed = dev.close(&token)?;
    println!("closed: pool holds {} bytes", closed.reserved);
    if let Some(path) = args.json {
        let doc = json!({"device": info.name, "uuid": info.uuid, "seed": seed, "ok": ok, "results": report});
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
        println!("wrote {path}");
    }
    println!(
        "\n{}",
        if ok {
            "ALL CHECKS PASSED"
        } else {
            "CHECKS FAILED"
        }
    );
    Ok(ok)
}
