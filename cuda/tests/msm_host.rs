//! Host checks of the MSM kernels' field, curve and bucket code against blstrs, for G1 and G2.
//!
//! `tests/host/fq_harness.cpp` includes the very headers NVRTC compiles (`kernels/fq.cuh`,
//! `fq2.cuh`, `g1.cuh`, `g2.cuh`, `msm.cuh`); compiled here with g++, their PTX carry chains run on an emulated carry
//! flag and every kernel body runs over all its thread indices. Inputs are fresh random draws
//! each run (the seed is printed, and `MSM_HOST_SEED` replays one).

mod common;

use blst::{blst_fp, blst_fp2, blst_p1, blst_p1_affine, blst_p2, blst_p2_affine};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::{Field, PrimeField};
use gpud_cuda::msm::plan::MsmPlan;
use group::prime::PrimeCurveAffine;
use group::{Curve, Group};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

fn run_harness(input: Vec<u8>) -> Vec<u8> {
    common::run_harness(&common::compile_harness("fq_harness"), input)
}

fn rng() -> ChaCha20Rng {
    let seed = std::env::var("MSM_HOST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().next_u64());
    eprintln!("MSM_HOST_SEED={seed}");
    ChaCha20Rng::seed_from_u64(seed)
}

// --- byte layouts and the blst reference -----------------------------------------------------

/// p, little-endian bytes.
const P_LE: [u8; 48] = {
    let limbs: [u64; 6] = [
        0xb9fe_ffff_ffff_aaab,
        0x1eab_fffe_b153_ffff,
        0x6730_d2a0_f6b0_f624,
        0x6477_4b84_f385_12bf,
        0x4b1b_a7b6_434b_acd7,
        0x1a01_11ea_397f_e69a,
    ];
    let mut out = [0u8; 48];
    let mut i = 0;
    while i < 48 {
        out[i] = (limbs[i / 8] >> (8 * (i % 8))) as u8;
        i += 1;
    }
    out
};

fn below_p(le: &[u8; 48]) -> bool {
    for i in (0..48).rev() {
        if le[i] != P_LE[i] {
            return le[i] < P_LE[i];
        }
    }
    false
}

/// A uniformly random element of Fq (Montgomery form inside blst_fp).
fn random_fp(rng: &mut impl RngCore) -> blst_fp {
    loop {
        let mut le = [0u8; 48];
        rng.fill_bytes(&mut le);
        le[47] &= 0x1f;
        if below_p(&le) {
            return fp_from_canonical(&le);
        }
    }
}

fn fp_from_canonical(le: &[u8; 48]) -> blst_fp {
    let mut f = blst_fp::default();
    // SAFETY: `le` is 48 readable bytes holding a value below p; `f` is a valid out-pointer.
    unsafe { blst::blst_fp_from_lendian(&mut f, le.as_ptr()) };
    f
}

fn fp_canonical(f: &blst_fp) -> [u8; 48] {
    let mut out = [0u8; 48];
    // SAFETY: `out` has the 48 bytes blst writes; `f` is a valid element.
    unsafe { blst::blst_lendian_from_fp(out.as_mut_ptr(), f) };
    out
}

fn fp_u64(v: u64) -> blst_fp {
    let mut le = [0u8; 48];
    le[..8].copy_from_slice(&v.to_le_bytes());
    fp_from_canonical(&le)
}

type FpOp = unsafe extern "C" fn(*mut blst_fp, *const blst_fp, *const blst_fp);

fn fp_op(op: FpOp, a: &blst_fp, b: &blst_fp) -> blst_fp {
    let mut r = blst_fp::default();
    // SAFETY: blst's two-operand field functions take valid elements and an out-pointer.
    unsafe { op(&mut r, a, b) };
    r
}

fn fp_neg(a: &blst_fp) -> blst_fp {
    let mut r = blst_fp::default();
    // SAFETY: valid element and out-pointer.
    unsafe { blst::blst_fp_cneg(&mut r, a, true) };
    r
}

fn fp_inv(a: &blst_fp) -> blst_fp {
    if a.l == [0; 6] {
        return blst_fp::default();
    }
    let mut r = blst_fp::default();
    // SAFETY: valid non-zero element and out-pointer.
    unsafe { blst::blst_fp_inverse(&mut r, a) };
    r
}

/// Montgomery limbs as bytes (the kernels' layout).
fn fp_bytes(f: &blst_fp) -> [u8; 48] {
    let mut out = [0u8; 48];
    for (i, l) in f.l.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&l.to_le_bytes());
    }
    out
}

fn fp_from(bytes: &[u8]) -> blst_fp {
    let mut f = blst_fp::default();
    for (i, word) in f.l.iter_mut().enumerate() {
        *word = u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    }
    f
}

fn affine_bytes(p: &G1Affine) -> Vec<u8> {
    let raw: &blst_p1_affine = p.as_ref();
    let mut v = fp_bytes(&raw.x).to_vec();
    v.extend_from_slice(&fp_bytes(&raw.y));
    v
}

fn scalar_bytes(s: &Scalar) -> [u8; 32] {
    let raw = blst::blst_fr::from(*s);
    let mut out = [0u8; 32];
    for (i, l) in raw.l.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&l.to_le_bytes());
    }
    out
}

fn jacobian(bytes: &[u8]) -> G1Projective {
    let mut p = G1Projective::identity();
    *p.as_mut() = blst_p1 {
        x: fp_from(&bytes[0..48]),
        y: fp_from(&bytes[48..96]),
        z: fp_from(&bytes[96..144]),
    };
    p
}

// --- Fq ---------------------------------------------------------------------------------------

#[test]
fn fq_operations_match_blst() {
    let mut rng = rng();
    let mut pairs: Vec<(blst_fp, blst_fp)> = (0..3000)
        .map(|_| (random_fp(&mut rng), random_fp(&mut rng)))
        .collect();
    // Elements whose Montgomery limbs are extreme: 1 and p - 1 as raw limbs.
    let raw_one = blst_fp {
        l: [1, 0, 0, 0, 0, 0],
    };
    let raw_top = fp_neg(&raw_one);
    let one = fp_u64(1);
    let two = fp_u64(2);
    let edge = [
        blst_fp::default(),
        one,
        fp_neg(&one),
        two,
        fp_neg(&two),
        raw_one,
        raw_top,
    ];
    for a in edge {
        for b in edge {
            pairs.push((a, b));
        }
        pairs.push((a, random_fp(&mut rng)));
        pairs.push((random_fp(&mut rng), a));
    }
    let mut input = 1u32.to_le_bytes().to_vec();
    input.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (a, b) in &pairs {
        input.extend_from_slice(&fp_bytes(a));
        input.extend_from_slice(&fp_bytes(b));
    }
    let out = run_harness(input);
    assert_eq!(out.len(), pairs.len() * 7 * 48);
    for (i, (a, b)) in pairs.iter().enumerate() {
        let o = &out[i * 7 * 48..(i + 1) * 7 * 48];
        let field = |k: usize| &o[k * 48..(k + 1) * 48];
        let want = [
            fp_op(blst::blst_fp_mul, a, b),
            fp_op(blst::blst_fp_mul, a, a),
            fp_op(blst::blst_fp_add, a, b),
            fp_op(blst::blst_fp_sub, a, b),
            fp_neg(a),
            fp_inv(a),
        ];
        for (k, w) in want.iter().enumerate() {
            // Bit-exact: the kernels keep elements fully reduced, as blst does.
            assert_eq!(
                field(k),
                fp_bytes(w),
                "case {i}, op {k}: a = {a:?}, b = {b:?}"
            );
        }
        assert_eq!(
            field(6),
            fp_canonical(a),
            "case {i}: leaving Montgomery form"
        );
    }
}

// --- G1 ---------------------------------------------------------------------------------------

fn random_point(rng: &mut impl RngCore) -> G1Projective {
    G1Projective::generator() * Scalar::random(rng)
}

#[test]
fn g1_operations_match_blstrs() {
    let mut rng = rng();
    let mut cases: Vec<(G1Projective, G1Projective)> = Vec::new();
    for _ in 0..200 {
        cases.push((random_point(&mut rng), random_point(&mut rng)));
    }
    let inf = G1Projective::identity();
    for _ in 0..10 {
        let p = random_point(&mut rng);
        cases.push((p, p)); // P + P
        cases.push((p, -p)); // P + (-P)
        cases.push((p, inf));
        cases.push((inf, p));
        cases.push((p, p.double()));
    }
    cases.push((inf, inf));
    let mut input = 2u32.to_le_bytes().to_vec();
    input.extend_from_slice(&(cases.len() as u32).to_le_bytes());
    let mut ks = Vec::new();
    for (p, q) in &cases {
        input.extend_from_slice(&affine_bytes(&p.to_affine()));
        input.extend_from_slice(&affine_bytes(&q.to_affine()));
        input.extend_from_slice(&fp_bytes(&random_fp(&mut rng)));
        input.extend_from_slice(&fp_bytes(&random_fp(&mut rng)));
        let k: u32 = match rng.gen_range(0..4) {
            0 => rng.gen_range(0..4),
            1 => 1 << rng.gen_range(0..31),
            _ => rng.r#gen(),
        };
        ks.push(k);
        input.extend_from_slice(&k.to_le_bytes());
    }
    let out = run_harness(input);
    let per = 5 * 144 + 96;
    assert_eq!(out.len(), cases.len() * per);
    for (i, ((p, q), k)) in cases.iter().zip(&ks).enumerate() {
        let o = &out[i * per..(i + 1) * per];
        let sum = p + q;
        assert_eq!(jacobian(&o[0..144]), sum, "case {i}: mixed addition");
        assert_eq!(jacobian(&o[144..288]), sum, "case {i}: XYZZ addition");
        assert_eq!(jacobian(&o[288..432]), p.double(), "case {i}: doubling");
        assert_eq!(jacobian(&o[432..576]), *q, "case {i}: infinity + Q");
        assert_eq!(
            jacobian(&o[576..720]),
            p * Scalar::from(u64::from(*k)),
            "case {i}: {k} * P"
        );
        assert_eq!(
            &o[720..816],
            &affine_bytes(&p.to_affine())[..],
            "case {i}: to affine"
        );
    }
}

// --- MSM --------------------------------------------------------------------------------------

/// Parameters handed to the harness; the plan's own unless a test forces smaller pieces.
#[derive(Clone, Copy, Debug)]
struct Shape {
    c: u32,
    seg: u32,
    seg2: u32,
    m: u32,
    group: u32,
    scan_chunk: u32,
}

impl Shape {
    fn of(plan: &MsmPlan) -> Self {
        Shape {
            c: plan.window_bits,
            seg: plan.segment,
            seg2: plan.combine_segment,
            m: plan.reduce_chunk,
            group: plan.group,
            scan_chunk: plan.scan_chunk,
        }
    }
}

struct MsmOut {
    combined_on_host: G1Projective,
    windows: Vec<[u32; 36]>,
    entries: u32,
    passes: u32,
}

fn harness_msm(bases: &[G1Affine], scalars: &[Scalar], s: Shape) -> MsmOut {
    let mut input = 3u32.to_le_bytes().to_vec();
    for v in [
        bases.len() as u32,
        s.c,
        s.seg,
        s.seg2,
        s.m,
        s.group,
        s.scan_chunk,
    ] {
        input.extend_from_slice(&v.to_le_bytes());
    }
    for b in bases {
        input.extend_from_slice(&affine_bytes(b));
    }
    for x in scalars {
        input.extend_from_slice(&scalar_bytes(x));
    }
    let out = run_harness(input);
    let w = u32::from_le_bytes(out[0..4].try_into().expect("4 bytes")) as usize;
    let mut windows = Vec::with_capacity(w);
    for j in 0..w {
        let mut limbs = [0u32; 36];
        for (i, l) in limbs.iter_mut().enumerate() {
            let at = 4 + j * 144 + 4 * i;
            *l = u32::from_le_bytes(out[at..at + 4].try_into().expect("4 bytes"));
        }
        windows.push(limbs);
    }
    let at = 4 + w * 144;
    assert_eq!(out.len(), at + 144 + 8);
    MsmOut {
        combined_on_host: jacobian(&out[at..at + 144]),
        windows,
        entries: u32::from_le_bytes(out[at + 144..at + 148].try_into().expect("4 bytes")),
        passes: u32::from_le_bytes(out[at + 148..at + 152].try_into().expect("4 bytes")),
    }
}

fn check_msm(bases: &[G1Affine], scalars: &[Scalar], s: Shape, what: &str) -> MsmOut {
    let proj: Vec<G1Projective> = bases.iter().map(G1Projective::from).collect();
    let want = if bases.is_empty() {
        G1Projective::identity()
    } else {
        G1Projective::multi_exp(&proj, scalars)
    };
    let out = harness_msm(bases, scalars, s);
    assert_eq!(
        out.combined_on_host,
        want,
        "{what}: n = {}, {s:?}",
        bases.len()
    );
    let launcher = gpud_cuda::msm::combine::combine_windows(&out.windows, s.c);
    assert_eq!(
        launcher, want,
        "{what}: the launcher's window combination, {s:?}"
    );
    out
}

fn random_bases(rng: &mut impl RngCore, n: usize) -> Vec<G1Affine> {
    // A few random points and their running sums: cheap, and distinct with overwhelming odds.
    let seeds: Vec<G1Projective> = (0..8).map(|_| random_point(rng)).collect();
    let mut acc = random_point(rng);
    let mut proj = Vec::with_capacity(n);
    for i in 0..n {
        acc += seeds[(i * 7 + (i >> 3)) % seeds.len()];
        proj.push(acc);
    }
    let mut out = vec![G1Affine::identity(); n];
    G1Projective::batch_normalize(&proj, &mut out);
    out
}

fn witness_scalars(rng: &mut impl RngCore, n: usize) -> Vec<Scalar> {
    (0..n)
        .map(|_| match rng.gen_range(0..100) {
            0..50 => Scalar::ZERO,
            50..75 => Scalar::ONE,
            75..85 => Scalar::from(rng.gen_range(2..1u64 << 20)),
            85..90 => -Scalar::from(rng.gen_range(1..1000u64)),
            _ => Scalar::random(&mut *rng),
        })
        .collect()
}

fn random_scalars(rng: &mut impl RngCore, n: usize) -> Vec<Scalar> {
    (0..n).map(|_| Scalar::random(&mut *rng)).collect()
}

#[test]
fn msm_matches_multi_exp_on_random_scalars() {
    let mut rng = rng();
    for n in [1usize, 2, 3, 5, 7, 31, 33, 100, 257, 1000, 2048, 3001] {
        let bases = random_bases(&mut rng, n);
        let scalars = random_scalars(&mut rng, n);
        let plan = MsmPlan::new(n, 132).expect("plan");
        check_msm(&bases, &scalars, Shape::of(&plan), "random, planned shape");
    }
}

#[test]
fn msm_matches_multi_exp_on_witness_scalars() {
    let mut rng = rng();
    for n in [1usize, 2, 3, 17, 64, 255, 1024, 4099] {
        let bases = random_bases(&mut rng, n);
        let scalars = witness_scalars(&mut rng, n);
        let plan = MsmPlan::new(n, 132).expect("plan");
        check_msm(&bases, &scalars, Shape::of(&plan), "witness, planned shape");
    }
}

#[test]
fn msm_is_right_for_every_window_size_and_tiny_pieces() {
    // Small segments force many partial runs and several combining passes; small chunks and
    // groups force several reduction passes.
    let mut rng = rng();
    let n = 300;
    let bases = random_bases(&mut rng, n);
    for c in 2..=16 {
        let scalars = if c % 2 == 0 {
            random_scalars(&mut rng, n)
        } else {
            witness_scalars(&mut rng, n)
        };
        let s = Shape {
            c,
            seg: rng.gen_range(1..12),
            seg2: rng.gen_range(4..9),
            m: 1 << rng.gen_range(0..4),
            group: rng.gen_range(2..6),
            scan_chunk: rng.gen_range(2..40),
        };
        let s = Shape {
            m: s.m.min(1 << (c - 1)),
            ..s
        };
        let out = check_msm(&bases, &scalars, s, "forced shape");
        assert!(out.passes >= 1);
    }
}

#[test]
fn msm_edge_cases() {
    let mut rng = rng();
    let n = 200;
    let bases = random_bases(&mut rng, n);
    let tiny = Shape {
        c: 5,
        seg: 3,
        seg2: 4,
        m: 2,
        group: 3,
        scan_chunk: 5,
    };
    let planned = Shape::of(&MsmPlan::new(n, 132).expect("plan"));

    // Zero scalars: no entries at all, the identity.
    let zeros = vec![Scalar::ZERO; n];
    for s in [tiny, planned] {
        let out = check_msm(&bases, &zeros, s, "all zero");
        assert_eq!(out.entries, 0);
        assert_eq!(out.combined_on_host, G1Projective::identity());
    }
    // All ones: one bucket holds every point (the witness hot spot).
    let ones = vec![Scalar::ONE; n];
    for s in [tiny, planned] {
        let out = check_msm(&bases, &ones, s, "all one");
        assert_eq!(out.entries, n as u32);
    }
    // Identity points among the bases, and only identity points.
    let mut with_inf = bases.clone();
    for i in (0..n).step_by(3) {
        with_inf[i] = G1Affine::identity();
    }
    let scalars = random_scalars(&mut rng, n);
    check_msm(&with_inf, &scalars, tiny, "identity bases");
    check_msm(&with_inf, &scalars, planned, "identity bases");
    check_msm(
        &vec![G1Affine::identity(); 7],
        &random_scalars(&mut rng, 7),
        tiny,
        "only identity bases",
    );
    // Duplicated points with equal scalars: P + P inside a bucket (doubling paths).
    let dup = vec![bases[0]; n];
    check_msm(&dup, &ones, tiny, "duplicate points, scalar one");
    check_msm(
        &dup,
        &random_scalars(&mut rng, n),
        tiny,
        "duplicate points, random scalars",
    );
    let same_scalar = vec![Scalar::random(&mut rng); n];
    check_msm(&dup, &same_scalar, tiny, "duplicate points, one scalar");
    // P and -P with equal scalars: P + (-P) = infinity inside a bucket.
    let mut pm = Vec::new();
    for b in bases.iter().take(n / 2) {
        pm.push(*b);
        pm.push(-*b);
    }
    let s: Vec<Scalar> = (0..n / 2)
        .flat_map(|_| {
            let x = Scalar::random(&mut rng);
            [x, x]
        })
        .collect();
    let out = check_msm(&pm, &s, tiny, "P and -P");
    assert_eq!(out.combined_on_host, G1Projective::identity());
    // Scalars at the negation threshold and the top of the field.
    let half = Scalar::from_str_vartime(
        "26217937587563095239723870254092982918845276250263818911301829349969290592256",
    )
    .expect("(r-1)/2");
    let special = [
        half,
        half + Scalar::ONE,
        half - Scalar::ONE,
        -Scalar::ONE,
        -Scalar::from(2u64),
        Scalar::ONE,
        Scalar::ZERO,
        Scalar::from(u64::MAX),
    ];
    let sp: Vec<Scalar> = (0..n).map(|i| special[i % special.len()]).collect();
    check_msm(&bases, &sp, tiny, "threshold scalars");
    check_msm(&bases, &sp, planned, "threshold scalars");
    // n = 0.
    check_msm(&[], &[], tiny, "empty");
}

// --- Fq2 and G2 ---------------------------------------------------------------------------------

fn random_fp2(rng: &mut impl RngCore) -> blst_fp2 {
    blst_fp2 {
        fp: [random_fp(rng), random_fp(rng)],
    }
}

fn fp2_bytes(f: &blst_fp2) -> Vec<u8> {
    let mut v = fp_bytes(&f.fp[0]).to_vec();
    v.extend_from_slice(&fp_bytes(&f.fp[1]));
    v
}

fn fp2_from(bytes: &[u8]) -> blst_fp2 {
    blst_fp2 {
        fp: [fp_from(&bytes[0..48]), fp_from(&bytes[48..96])],
    }
}

type Fp2Op = unsafe extern "C" fn(*mut blst_fp2, *const blst_fp2, *const blst_fp2);

fn fp2_op(op: Fp2Op, a: &blst_fp2, b: &blst_fp2) -> blst_fp2 {
    let mut r = blst_fp2::default();
    // SAFETY: blst's two-operand Fq2 functions take valid elements and an out-pointer.
    unsafe { op(&mut r, a, b) };
    r
}

fn fp2_sqr(a: &blst_fp2) -> blst_fp2 {
    let mut r = blst_fp2::default();
    // SAFETY: valid element and out-pointer.
    unsafe { blst::blst_fp2_sqr(&mut r, a) };
    r
}

fn fp2_neg(a: &blst_fp2) -> blst_fp2 {
    let mut r = blst_fp2::default();
    // SAFETY: valid element and out-pointer.
    unsafe { blst::blst_fp2_cneg(&mut r, a, true) };
    r
}

fn fp2_inv(a: &blst_fp2) -> blst_fp2 {
    if a.fp[0].l == [0; 6] && a.fp[1].l == [0; 6] {
        return blst_fp2::default();
    }
    let mut r = blst_fp2::default();
    // SAFETY: valid non-zero element and out-pointer.
    unsafe { blst::blst_fp2_inverse(&mut r, a) };
    r
}

fn g2_affine_bytes(p: &G2Affine) -> Vec<u8> {
    let raw: &blst_p2_affine = p.as_ref();
    let mut v = fp2_bytes(&raw.x);
    v.extend_from_slice(&fp2_bytes(&raw.y));
    v
}

fn g2_jacobian(bytes: &[u8]) -> G2Projective {
    let mut p = G2Projective::identity();
    *p.as_mut() = blst_p2 {
        x: fp2_from(&bytes[0..96]),
        y: fp2_from(&bytes[96..192]),
        z: fp2_from(&bytes[192..288]),
    };
    p
}

#[test]
fn fq2_operations_match_blst() {
    let mut rng = rng();
    let mut pairs: Vec<(blst_fp2, blst_fp2)> = (0..2000)
        .map(|_| (random_fp2(&mut rng), random_fp2(&mut rng)))
        .collect();
    let one = fp_u64(1);
    let zero = blst_fp::default();
    let top = fp_neg(&one);
    let raw_one = blst_fp {
        l: [1, 0, 0, 0, 0, 0],
    };
    let parts = [zero, one, top, raw_one, fp_neg(&raw_one)];
    let mut edge = Vec::new();
    for a in parts {
        for b in parts {
            edge.push(blst_fp2 { fp: [a, b] });
        }
    }
    for a in &edge {
        for b in &edge {
            pairs.push((*a, *b));
        }
        pairs.push((*a, random_fp2(&mut rng)));
    }
    let mut input = 4u32.to_le_bytes().to_vec();
    input.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (a, b) in &pairs {
        input.extend_from_slice(&fp2_bytes(a));
        input.extend_from_slice(&fp2_bytes(b));
    }
    let out = run_harness(input);
    assert_eq!(out.len(), pairs.len() * 7 * 96);
    for (i, (a, b)) in pairs.iter().enumerate() {
        let o = &out[i * 7 * 96..(i + 1) * 7 * 96];
        let want = [
            fp2_op(blst::blst_fp2_mul, a, b),
            fp2_sqr(a),
            fp2_op(blst::blst_fp2_add, a, b),
            fp2_op(blst::blst_fp2_sub, a, b),
            fp2_neg(a),
            fp2_op(blst::blst_fp2_add, a, a),
            fp2_inv(a),
        ];
        for (k, w) in want.iter().enumerate() {
            assert_eq!(
                &o[k * 96..(k + 1) * 96],
                &fp2_bytes(w)[..],
                "case {i}, op {k}: a = {a:?}, b = {b:?}"
            );
        }
    }
}

fn random_g2(rng: &mut impl RngCore) -> G2Projective {
    G2Projective::generator() * Scalar::random(rng)
}

#[test]
fn g2_operations_match_blstrs() {
    let mut rng = rng();
    let mut cases: Vec<(G2Projective, G2Projective)> = Vec::new();
    for _ in 0..100 {
        cases.push((random_g2(&mut rng), random_g2(&mut rng)));
    }
    let inf = G2Projective::identity();
    for _ in 0..8 {
        let p = random_g2(&mut rng);
        cases.push((p, p)); // P + P
        cases.push((p, -p)); // P + (-P)
        cases.push((p, inf));
        cases.push((inf, p));
        cases.push((p, p.double()));
    }
    cases.push((inf, inf));
    let mut input = 5u32.to_le_bytes().to_vec();
    input.extend_from_slice(&(cases.len() as u32).to_le_bytes());
    let mut ks = Vec::new();
    for (p, q) in &cases {
        input.extend_from_slice(&g2_affine_bytes(&p.to_affine()));
        input.extend_from_slice(&g2_affine_bytes(&q.to_affine()));
        input.extend_from_slice(&fp2_bytes(&random_fp2(&mut rng)));
        input.extend_from_slice(&fp2_bytes(&random_fp2(&mut rng)));
        let k: u32 = match rng.gen_range(0..4) {
            0 => rng.gen_range(0..4),
            1 => 1 << rng.gen_range(0..31),
            _ => rng.r#gen(),
        };
        ks.push(k);
        input.extend_from_slice(&k.to_le_bytes());
    }
    let out = run_harness(input);
    let per = 5 * 288 + 192;
    assert_eq!(out.len(), cases.len() * per);
    for (i, ((p, q), k)) in cases.iter().zip(&ks).enumerate() {
        let o = &out[i * per..(i + 1) * per];
        let sum = p + q;
        assert_eq!(g2_jacobian(&o[0..288]), sum, "case {i}: mixed addition");
        assert_eq!(g2_jacobian(&o[288..576]), sum, "case {i}: XYZZ addition");
        assert_eq!(g2_jacobian(&o[576..864]), p.double(), "case {i}: doubling");
        assert_eq!(g2_jacobian(&o[864..1152]), *q, "case {i}: infinity + Q");
        assert_eq!(
            g2_jacobian(&o[1152..1440]),
            p * Scalar::from(u64::from(*k)),
            "case {i}: {k} * P"
        );
        assert_eq!(
            &o[1440..1632],
            &g2_affine_bytes(&p.to_affine())[..],
            "case {i}: to affine"
        );
    }
}

struct G2MsmOut {
    combined_on_host: G2Projective,
    windows: Vec<[u32; 72]>,
    entries: u32,
}

fn harness_msm_g2(bases: &[G2Affine], scalars: &[Scalar], s: Shape) -> G2MsmOut {
    let mut input = 6u32.to_le_bytes().to_vec();
    for v in [
        bases.len() as u32,
        s.c,
        s.seg,
        s.seg2,
        s.m,
        s.group,
        s.scan_chunk,
    ] {
        input.extend_from_slice(&v.to_le_bytes());
    }
    for b in bases {
        input.extend_from_slice(&g2_affine_bytes(b));
    }
    for x in scalars {
        input.extend_from_slice(&scalar_bytes(x));
    }
    let out = run_harness(input);
    let w = u32::from_le_bytes(out[0..4].try_into().expect("4 bytes")) as usize;
    let mut windows = Vec::with_capacity(w);
    for j in 0..w {
        let mut limbs = [0u32; 72];
        for (i, l) in limbs.iter_mut().enumerate() {
            let at = 4 + j * 288 + 4 * i;
            *l = u32::from_le_bytes(out[at..at + 4].try_into().expect("4 bytes"));
        }
        windows.push(limbs);
    }
    let at = 4 + w * 288;
    assert_eq!(out.len(), at + 288 + 8);
    G2MsmOut {
        combined_on_host: g2_jacobian(&out[at..at + 288]),
        windows,
        entries: u32::from_le_bytes(out[at + 288..at + 292].try_into().expect("4 bytes")),
    }
}

fn check_msm_g2(bases: &[G2Affine], scalars: &[Scalar], s: Shape, what: &str) -> G2MsmOut {
    let proj: Vec<G2Projective> = bases.iter().map(G2Projective::from).collect();
    let want = if bases.is_empty() {
        G2Projective::identity()
    } else {
        G2Projective::multi_exp(&proj, scalars)
    };
    let out = harness_msm_g2(bases, scalars, s);
    assert_eq!(
        out.combined_on_host,
        want,
        "{what}: n = {}, {s:?}",
        bases.len()
    );
    let launcher = gpud_cuda::msm::combine::combine_windows_g2(&out.windows, s.c);
    assert_eq!(
        launcher, want,
        "{what}: the launcher's window combination, {s:?}"
    );
    out
}

fn random_g2_bases(rng: &mut impl RngCore, n: usize) -> Vec<G2Affine> {
    let seeds: Vec<G2Projective> = (0..8).map(|_| random_g2(rng)).collect();
    let mut acc = random_g2(rng);
    let mut proj = Vec::with_capacity(n);
    for i in 0..n {
        acc += seeds[(i * 7 + (i >> 3)) % seeds.len()];
        proj.push(acc);
    }
    let mut out = vec![G2Affine::identity(); n];
    G2Projective::batch_normalize(&proj, &mut out);
    out
}

#[test]
fn g2_msm_matches_multi_exp_on_random_and_witness_scalars() {
    let mut rng = rng();
    for n in [1usize, 2, 3, 7, 33, 100, 257, 1000, 2049] {
        let bases = random_g2_bases(&mut rng, n);
        let plan = MsmPlan::new(n, 132).expect("plan");
        let scalars = random_scalars(&mut rng, n);
        check_msm_g2(
            &bases,
            &scalars,
            Shape::of(&plan),
            "G2 random, planned shape",
        );
        let scalars = witness_scalars(&mut rng, n);
        check_msm_g2(
            &bases,
            &scalars,
            Shape::of(&plan),
            "G2 witness, planned shape",
        );
    }
}

#[test]
fn g2_msm_is_right_for_many_window_sizes_and_tiny_pieces() {
    let mut rng = rng();
    let n = 150;
    let bases = random_g2_bases(&mut rng, n);
    for c in [2, 3, 4, 5, 7, 8, 11, 13, 16] {
        let scalars = if c % 2 == 0 {
            random_scalars(&mut rng, n)
        } else {
            witness_scalars(&mut rng, n)
        };
        let s = Shape {
            c,
            seg: rng.gen_range(1..12),
            seg2: rng.gen_range(4..9),
            m: (1 << rng.gen_range(0..4)).min(1 << (c - 1)),
            group: rng.gen_range(2..6),
            scan_chunk: rng.gen_range(2..40),
        };
        check_msm_g2(&bases, &scalars, s, "G2 forced shape");
    }
}

#[test]
fn g2_msm_edge_cases() {
    let mut rng = rng();
    let n = 120;
    let bases = random_g2_bases(&mut rng, n);
    let tiny = Shape {
        c: 5,
        seg: 3,
        seg2: 4,
        m: 2,
        group: 3,
        scan_chunk: 5,
    };
    let planned = Shape::of(&MsmPlan::new(n, 132).expect("plan"));
    let zeros = vec![Scalar::ZERO; n];
    for s in [tiny, planned] {
        let out = check_msm_g2(&bases, &zeros, s, "G2 all zero");
        assert_eq!(out.entries, 0);
        assert_eq!(out.combined_on_host, G2Projective::identity());
    }
    let ones = vec![Scalar::ONE; n];
    for s in [tiny, planned] {
        let out = check_msm_g2(&bases, &ones, s, "G2 all one");
        assert_eq!(out.entries, n as u32);
    }
    let mut with_inf = bases.clone();
    for i in (0..n).step_by(3) {
        with_inf[i] = G2Affine::identity();
    }
    let scalars = random_scalars(&mut rng, n);
    check_msm_g2(&with_inf, &scalars, tiny, "G2 identity bases");
    check_msm_g2(&with_inf, &scalars, planned, "G2 identity bases");
    check_msm_g2(
        &vec![G2Affine::identity(); 5],
        &random_scalars(&mut rng, 5),
        tiny,
        "G2 only identity bases",
    );
    // P + P inside a bucket.
    let dup = vec![bases[0]; n];
    check_msm_g2(&dup, &ones, tiny, "G2 duplicate points, scalar one");
    let same_scalar = vec![Scalar::random(&mut rng); n];
    check_msm_g2(&dup, &same_scalar, tiny, "G2 duplicate points, one scalar");
    // P + (-P) inside a bucket.
    let mut pm = Vec::new();
    for b in bases.iter().take(n / 2) {
        pm.push(*b);
        pm.push(-*b);
    }
    let s: Vec<Scalar> = (0..n / 2)
        .flat_map(|_| {
            let x = Scalar::random(&mut rng);
            [x, x]
        })
        .collect();
    let out = check_msm_g2(&pm, &s, tiny, "G2 P and -P");
    assert_eq!(out.combined_on_host, G2Projective::identity());
    let half = Scalar::from_str_vartime(
        "26217937587563095239723870254092982918845276250263818911301829349969290592256",
    )
    .expect("(r-1)/2");
    let special = [
        half,
        half + Scalar::ONE,
        -Scalar::ONE,
        Scalar::ONE,
        Scalar::ZERO,
        Scalar::from(u64::MAX),
    ];
    let sp: Vec<Scalar> = (0..n).map(|i| special[i % special.len()]).collect();
    check_msm_g2(&bases, &sp, tiny, "G2 threshold scalars");
    check_msm_g2(&bases, &sp, planned, "G2 threshold scalars");
    check_msm_g2(&[], &[], tiny, "G2 empty");
}
