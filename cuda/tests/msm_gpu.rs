//! GPU tests of the G1 and G2 MSMs: run with `--ignored` on a machine with an NVIDIA GPU
//! (gpu/run-suite.sh does). Without a GPU they are skipped visibly (ignored, with the reason).
//! The full-size checks and the benchmark are in the `gpud-msm-bench` binary.

use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::Field;
use gpud_client::{ExclusiveDevice, Reservation};
use gpud_cuda::ledger::charge_for;
use gpud_cuda::msm::plan::MsmPlan;
use gpud_cuda::msm::{
    ChunkBases, ChunkScalars, G1Bases, G2, G2Bases, MsmEngine, MsmError, MsmVariant,
};
use gpud_cuda::{Device, Error, driver};
use group::prime::PrimeCurveAffine;
use group::{Curve, Group};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

const MIB: u64 = 1 << 20;

fn claim(vram: u64) -> ExclusiveDevice {
    let info = driver::list_devices()
        .expect("CUDA driver")
        .into_iter()
        .next()
        .expect("a GPU");
    ExclusiveDevice::assume_unshared(info.uuid, info.ordinal as u32, vram)
}

fn fresh_rng() -> ChaCha20Rng {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    println!("seed {seed}");
    ChaCha20Rng::seed_from_u64(seed)
}

fn bases(rng: &mut ChaCha20Rng, n: usize) -> Vec<G1Affine> {
    let steps: Vec<G1Projective> = (0..8)
        .map(|_| G1Projective::generator() * Scalar::random(&mut *rng))
        .collect();
    let mut acc = G1Projective::generator() * Scalar::random(&mut *rng);
    let proj: Vec<G1Projective> = (0..n)
        .map(|_| {
            acc += steps[rng.gen_range(0..steps.len())];
            acc
        })
        .collect();
    let mut out = vec![G1Affine::identity(); n];
    G1Projective::batch_normalize(&proj, &mut out);
    out
}

fn witness(rng: &mut ChaCha20Rng, n: usize) -> Vec<Scalar> {
    (0..n)
        .map(|_| match rng.gen_range(0..8) {
            0..4 => Scalar::ZERO,
            4..6 => Scalar::ONE,
            6 => Scalar::from(rng.r#gen::<u32>() as u64),
            _ => Scalar::random(&mut *rng),
        })
        .collect()
}

fn cpu(bases: &[G1Affine], s: &[Scalar]) -> G1Projective {
    let proj: Vec<G1Projective> = bases[..s.len()].iter().map(G1Projective::from).collect();
    G1Projective::multi_exp(&proj, s)
}

#[test]
#[ignore = "needs a GPU"]
fn msm_matches_blstrs_at_small_sizes_with_every_build() {
    let lease = claim(4096 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut rng = fresh_rng();
    let host = bases(&mut rng, 1 << 14);
    let resident = G1Bases::upload(&dev, &host).unwrap();
    for variant in MsmVariant::ALL {
        let mut engine = MsmEngine::with_variant(&dev, variant).unwrap();
        engine.set_poison(true);
        for n in [
            1usize,
            2,
            3,
            4,
            5,
            7,
            8,
            31,
            32,
            33,
            100,
            255,
            256,
            1000,
            1023,
            4096,
            9999,
            1 << 14,
        ] {
            let random: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
            assert_eq!(
                engine.msm(&resident, &random).unwrap(),
                cpu(&host, &random),
                "{variant:?} random n = {n}"
            );
            let w = witness(&mut rng, n);
            assert_eq!(
                engine.msm(&resident, &w).unwrap(),
                cpu(&host, &w),
                "{variant:?} witness n = {n}"
            );
        }
    }
    drop(resident);
    if let Some(t) = lease.compute_token() {
        dev.close(&t).unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn msm_edge_cases_on_the_gpu() {
    let lease = claim(4096 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut rng = fresh_rng();
    let mut engine = MsmEngine::new(&dev).unwrap();
    engine.set_poison(true);
    let n = 5000;
    let host = bases(&mut rng, n);
    let b = G1Bases::upload(&dev, &host).unwrap();
    let zero = vec![Scalar::ZERO; n];
    assert_eq!(engine.msm(&b, &zero).unwrap(), G1Projective::identity());
    let one = vec![Scalar::ONE; n];
    assert_eq!(
        engine.msm(&b, &one).unwrap(),
        host.iter().map(G1Projective::from).sum::<G1Projective>()
    );
    // Every window size, tiny and large, on the same inputs.
    let s: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
    let want = cpu(&host, &s);
    for c in [2, 3, 5, 8, 11, 13, 16, 17, 20] {
        engine.set_window_bits(Some(c));
        assert_eq!(engine.msm(&b, &s).unwrap(), want, "c = {c}");
    }
    engine.set_window_bits(None);
    // Identity bases, repeated points, P and -P.
    let mut inf = host.clone();
    for i in (0..n).step_by(2) {
        inf[i] = G1Affine::identity();
    }
    let bi = G1Bases::upload(&dev, &inf).unwrap();
    assert_eq!(engine.msm(&bi, &s).unwrap(), cpu(&inf, &s));
    let dup = vec![host[7]; n];
    let bd = G1Bases::upload(&dev, &dup).unwrap();
    assert_eq!(
        engine.msm(&bd, &one).unwrap(),
        G1Projective::from(host[7]) * Scalar::from(n as u64)
    );
    assert_eq!(engine.msm(&bd, &s).unwrap(), cpu(&dup, &s));
    let pm: Vec<G1Affine> = (0..n)
        .map(|i| if i % 2 == 0 { host[i] } else { -host[i - 1] })
        .collect();
    let ps: Vec<Scalar> = (0..n).map(|i| s[i - i % 2]).collect();
    let bp = G1Bases::upload(&dev, &pm).unwrap();
    assert_eq!(engine.msm(&bp, &ps).unwrap(), G1Projective::identity());
    // Fewer scalars than bases use a prefix; more is an error.
    assert_eq!(engine.msm(&b, &s[..10]).unwrap(), cpu(&host, &s[..10]));
    assert!(matches!(
        engine.msm(&G1Bases::upload(&dev, &host[..3]).unwrap(), &s[..4]),
        Err(MsmError::TooManyScalars {
            scalars: 4,
            bases: 3
        })
    ));
    assert_eq!(engine.msm(&b, &[]).unwrap(), G1Projective::identity());
    drop((b, bi, bd, bp));
    if let Some(t) = lease.compute_token() {
        dev.close(&t).unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn msm_temporaries_are_charged_to_the_lease() {
    // A reservation of exactly what the plan says (bases, scalars and temporaries, each
    // allocation rounded up to the allocator's 2 MiB pages) holds a small MSM but not a big one.
    let info = driver::list_devices().unwrap().remove(0);
    let sms = info.multiprocessors;
    let big = 1usize << 16;
    let small = 100usize;
    let bases_charge = charge_for(96 * big as u64);
    let small_need = MsmPlan::new(small, sms).unwrap().temp_bytes() + charge_for(32 * small as u64);
    let big_need = MsmPlan::new(big, sms).unwrap().temp_bytes() + charge_for(32 * big as u64);
    assert!(big_need > small_need);
    let lease = claim(bases_charge + small_need);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut rng = fresh_rng();
    let host = bases(&mut rng, big);
    let b = G1Bases::upload(&dev, &host).unwrap();
    let engine = MsmEngine::new(&dev).unwrap();
    let s: Vec<Scalar> = (0..big).map(|_| Scalar::random(&mut rng)).collect();
    match engine.msm(&b, &s) {
        Err(MsmError::Cuda(Error::OverReservation { .. })) => {}
        other => panic!("expected OverReservation, got {other:?}"),
    }
    // Nothing leaked: the small MSM fits in exactly its estimate and is right.
    assert_eq!(
        engine.msm(&b, &s[..small]).unwrap(),
        cpu(&host, &s[..small])
    );
    assert!(dev.ledger().peak <= bases_charge + small_need);
    drop((b, engine));
    if let Some(t) = lease.compute_token() {
        dev.close(&t).unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn the_plans_estimate_holds_every_msm_size() {
    // For each size, a fresh arena of exactly bases + scalars + `temp_bytes` runs the MSM.
    let info = driver::list_devices().unwrap().remove(0);
    let device = Device::open(&info.uuid).unwrap();
    let mut rng = fresh_rng();
    let host = bases(&mut rng, 1 << 17);
    for n in [1usize, 2, 100, 4097, 1 << 14, (1 << 17) - 1] {
        let need = charge_for(96 * n as u64)
            + charge_for(32 * n as u64)
            + MsmPlan::new(n, info.multiprocessors).unwrap().temp_bytes();
        let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, need);
        let arena = device.reserve(&lease).unwrap();
        let b = G1Bases::upload(&arena, &host[..n]).unwrap();
        let engine = MsmEngine::new(&arena).unwrap();
        let s: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        assert_eq!(engine.msm(&b, &s).unwrap(), cpu(&host, &s), "n = {n}");
        assert!(arena.ledger().peak <= need, "n = {n}");
        drop((b, engine));
        arena.close(&lease.compute_token().unwrap()).unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn pipelined_upload_matches_the_plain_upload_and_blstrs() {
    // Above one upload chunk (2^19 scalars) msm() copies and converts in chunks; a partial last
    // chunk, pageable and page-locked sources, random and witness scalars.
    let n = 2 * (1usize << 19) + 777;
    let lease = claim(16 << 30);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut rng = fresh_rng();
    let host = bases(&mut rng, n);
    let b = G1Bases::upload(&dev, &host).unwrap();
    let mut engine = MsmEngine::new(&dev).unwrap();
    engine.set_poison(true);
    let random: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
    for s in [random, witness(&mut rng, n)] {
        let want = cpu(&host, &s);
        engine.set_pipelined_upload(true);
        assert_eq!(engine.msm(&b, &s).unwrap(), want, "pipelined, pageable");
        let mut pinned = gpud_cuda::PinnedBuffer::<Scalar>::zeroed(&device, n).unwrap();
        pinned.copy_from_slice(&s);
        assert_eq!(
            engine.msm(&b, &pinned).unwrap(),
            want,
            "pipelined, page-locked"
        );
        engine.set_pipelined_upload(false);
        assert_eq!(engine.msm(&b, &s).unwrap(), want, "plain upload");
    }
    drop((b, engine));
    if let Some(t) = lease.compute_token() {
        dev.close(&t).unwrap();
    }
}

// --- G2 ------------------------------------------------------------------------------------------

fn g2_bases(rng: &mut ChaCha20Rng, n: usize) -> Vec<G2Affine> {
    let steps: Vec<G2Projective> = (0..8)
        .map(|_| G2Projective::generator() * Scalar::random(&mut *rng))
        .collect();
    let mut acc = G2Projective::generator() * Scalar::random(&mut *rng);
    let proj: Vec<G2Projective> = (0..n)
        .map(|_| {
            acc += steps[rng.gen_range(0..steps.len())];
            acc
        })
        .collect();
    let mut out = vec![G2Affine::identity(); n];
    G2Projective::batch_normalize(&proj, &mut out);
    out
}

fn cpu_g2(bases: &[G2Affine], s: &[Scalar]) -> G2Projective {
    let proj: Vec<G2Projective> = bases[..s.len()].iter().map(G2Projective::from).collect();
    G2Projective::multi_exp(&proj, s)
}

#[test]
#[ignore = "needs a GPU"]
fn g2_msm_matches_blstrs_at_small_sizes() {
    let lease = claim(4096 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut rng = fresh_rng();
    let host = g2_bases(&mut rng, 1 << 14);
    let resident = G2Bases::upload(&dev, &host).unwrap();
    let mut engine = MsmEngine::<G2>::for_group(&dev).unwrap();
    engine.set_poison(true);
    for n in [
        1usize,
        2,
        3,
        5,
        8,
        31,
        33,
        100,
        256,
        1000,
        4096,
        9999,
        1 << 14,
    ] {
        let random: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        assert_eq!(
            engine.msm(&resident, &random).unwrap(),
            cpu_g2(&host, &random),
            "G2 random n = {n}"
        );
        let w = witness(&mut rng, n);
        assert_eq!(
            engine.msm(&resident, &w).unwrap(),
            cpu_g2(&host, &w),
            "G2 witness n = {n}"
        );
    }
    drop((resident, engine));
    if let Some(t) = lease.compute_token() {
        dev.close(&t).unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn g2_msm_edge_cases_on_the_gpu() {
    let lease = claim(4096 * MIB);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let mut rng = fresh_rng();
    let mut engine = MsmEngine::<G2>::for_group(&dev).unwrap();
    engine.set_poison(true);
    let n = 3000;
    let host = g2_bases(&mut rng, n);
    let b = G2Bases::upload(&dev, &host).unwrap();
    assert_eq!(
        engine.msm(&b, &vec![Scalar::ZERO; n]).unwrap(),
        G2Projective::identity()
    );
    let one = vec![Scalar::ONE; n];
    assert_eq!(
        engine.msm(&b, &one).unwrap(),
        host.iter().map(G2Projective::from).sum::<G2Projective>()
    );
    let s: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
    let want = cpu_g2(&host, &s);
    for c in [2, 3, 5, 8, 11, 13, 16, 17] {
        engine.set_window_bits(Some(c));
        assert_eq!(engine.msm(&b, &s).unwrap(), want, "G2 c = {c}");
    }
    engine.set_window_bits(None);
    let mut inf = host.clone();
    for i in (0..n).step_by(2) {
        inf[i] = G2Affine::identity();
    }
    let bi = G2Bases::upload(&dev, &inf).unwrap();
    assert_eq!(engine.msm(&bi, &s).unwrap(), cpu_g2(&inf, &s));
    let dup = vec![host[7]; n];
    let bd = G2Bases::upload(&dev, &dup).unwrap();
    assert_eq!(
        engine.msm(&bd, &one).unwrap(),
        G2Projective::from(host[7]) * Scalar::from(n as u64)
    );
    assert_eq!(engine.msm(&bd, &s).unwrap(), cpu_g2(&dup, &s));
    let pm: Vec<G2Affine> = (0..n)
        .map(|i| if i % 2 == 0 { host[i] } else { -host[i - 1] })
        .collect();
    let ps: Vec<Scalar> = (0..n).map(|i| s[i - i % 2]).collect();
    let bp = G2Bases::upload(&dev, &pm).unwrap();
    assert_eq!(engine.msm(&bp, &ps).unwrap(), G2Projective::identity());
    assert_eq!(engine.msm(&b, &s[..10]).unwrap(), cpu_g2(&host, &s[..10]));
    assert!(matches!(
        engine.msm(&G2Bases::upload(&dev, &host[..3]).unwrap(), &s[..4]),
        Err(MsmError::TooManyScalars {
            scalars: 4,
            bases: 3
        })
    ));
    assert_eq!(engine.msm(&b, &[]).unwrap(), G2Projective::identity());
    drop((b, bi, bd, bp, engine));
    if let Some(t) = lease.compute_token() {
        dev.close(&t).unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn g2_plans_estimate_holds_and_the_pipelined_upload_is_right() {
    // Each size in a fresh arena of exactly G2 bases + scalars + the G2 temporaries; the last
    // size is above one upload chunk (pipelined, with a partial last chunk).
    let info = driver::list_devices().unwrap().remove(0);
    let device = Device::open(&info.uuid).unwrap();
    let mut rng = fresh_rng();
    let top = (1usize << 20) + 777;
    let host = g2_bases(&mut rng, top);
    for n in [1usize, 2, 100, 4097, (1 << 17) - 1, top] {
        let need = charge_for(192 * n as u64)
            + charge_for(32 * n as u64)
            + MsmPlan::new(n, info.multiprocessors)
                .unwrap()
                .temp_bytes_of::<G2>();
        let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), info.ordinal as u32, need);
        let arena = device.reserve(&lease).unwrap();
        let b = G2Bases::upload(&arena, &host[..n]).unwrap();
        let engine = MsmEngine::<G2>::for_group(&arena).unwrap();
        for s in [
            (0..n).map(|_| Scalar::random(&mut rng)).collect::<Vec<_>>(),
            witness(&mut rng, n),
        ] {
            assert_eq!(engine.msm(&b, &s).unwrap(), cpu_g2(&host, &s), "G2 n = {n}");
        }
        assert!(arena.ledger().peak <= need, "G2 n = {n}");
        drop((b, engine));
        arena.close(&lease.compute_token().unwrap()).unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn chunked_and_streamed_msms_equal_the_unchunked_one_and_blstrs() {
    // G1 and G2, bases resident (chunked temporaries only) and streamed from host memory
    // (ordinary and page-locked), host and device scalars, chunk sizes that divide n, leave an
    // uneven tail, cover it in one chunk and exceed it; each chunked sum equals the unchunked
    // MSM and blstrs, and streaming charges two chunk buffers, not the whole query.
    let mut rng = fresh_rng();
    let n = (1usize << 16) + 777;
    let host = bases(&mut rng, n);
    let host2 = g2_bases(&mut rng, n / 8);
    let s = witness(&mut rng, n);
    // Streaming charges at most two chunks of bases beyond the chunk's scalars and
    // temporaries, far less than the whole query (its own lease, so its peak is its own).
    {
        let lease = claim(4 << 30);
        let device = Device::open(lease.device_uuid()).unwrap();
        let dev = device.reserve(&lease).unwrap();
        let engine = MsmEngine::new(&dev).unwrap();
        let chunk = 1usize << 13;
        let sum = engine
            .msm_chunked(ChunkBases::Host(&host[..]), ChunkScalars::Host(&s), chunk)
            .unwrap();
        assert_eq!(sum, cpu(&host, &s));
        let temps = |len: usize| {
            MsmPlan::new(len, device.info().multiprocessors)
                .unwrap()
                .temp_bytes()
        };
        let tail = n % chunk;
        let bound = 2 * charge_for(96 * chunk as u64)
            + charge_for(32 * chunk as u64)
            + temps(chunk).max(temps(tail));
        let peak = dev.ledger().peak;
        assert!(peak <= bound, "{peak} > {bound}");
        // The unchunked upload would have held all n bases at once, with n points' temporaries.
        assert!(peak < charge_for(96 * n as u64) + temps(n), "{peak}");
        drop(engine);
        if let Some(t) = lease.compute_token() {
            dev.close(&t).unwrap();
        }
    }
    let lease = claim(4 << 30);
    let device = Device::open(lease.device_uuid()).unwrap();
    let dev = device.reserve(&lease).unwrap();
    let engine = MsmEngine::new(&dev).unwrap();
    let resident = G1Bases::upload(&dev, &host).unwrap();
    let want = cpu(&host, &s);
    assert_eq!(engine.msm(&resident, &s).unwrap(), want);
    let pinned =
        gpud_cuda::RegisteredVec::register(&device, std::sync::Arc::new(host.clone())).unwrap();
    let mut dev_scalars = dev.alloc::<Scalar>(n + 5).unwrap();
    dev_scalars.copy_from_host_at(0, &s).unwrap();
    for chunk in [1usize << 12, 10_000, (n / 3) + 1, n, 2 * n] {
        let host_b = ChunkBases::Host(&host[..]);
        let pinned_b = ChunkBases::Host(&pinned[..]);
        for (what, b) in [
            ("resident", ChunkBases::Device(&resident)),
            ("streamed", host_b),
            ("streamed pinned", pinned_b),
        ] {
            let sum = engine
                .msm_chunked(b, ChunkScalars::Host(&s), chunk)
                .unwrap();
            assert_eq!(sum, want, "{what} chunk {chunk}");
        }
        let sum = engine
            .msm_chunked(
                ChunkBases::Host(&host[..]),
                ChunkScalars::Device(&dev_scalars, n),
                chunk,
            )
            .unwrap();
        assert_eq!(sum, want, "device scalars, chunk {chunk}");
        // A prefix of a device buffer (the H MSM's m - 1 of m).
        let sum = engine
            .msm_chunked(
                ChunkBases::Device(&resident),
                ChunkScalars::Device(&dev_scalars, n - 1),
                chunk,
            )
            .unwrap();
        assert_eq!(sum, cpu(&host, &s[..n - 1]), "device prefix, chunk {chunk}");
    }
    // G2, streamed and resident, uneven tails.
    let g2 = MsmEngine::<G2>::for_group(&dev).unwrap();
    let s2 = &s[..host2.len()];
    let want2 = cpu_g2(&host2, s2);
    let resident2 = G2Bases::upload(&dev, &host2).unwrap();
    for chunk in [1000usize, 3001, host2.len()] {
        for b in [ChunkBases::Device(&resident2), ChunkBases::Host(&host2[..])] {
            assert_eq!(
                g2.msm_chunked(b, ChunkScalars::Host(s2), chunk).unwrap(),
                want2,
                "G2 chunk {chunk}"
            );
        }
    }
    // A chunk of 0 points is a clear error, not a hang.
    assert!(
        engine
            .msm_chunked(ChunkBases::Host(&host[..]), ChunkScalars::Host(&s), 0)
            .is_err()
    );
    drop((engine, g2, resident, resident2, dev_scalars, pinned));
    if let Some(t) = lease.compute_token() {
        dev.close(&t).unwrap();
    }
}
