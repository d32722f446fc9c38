//! The kernels' arithmetic and NTT index math, compiled as plain C++ with g++ and run on the
//! CPU, against blstrs: field operations on random inputs, and the exact launch plans the GPU
//! runs (every pass, permutation and scaling) for all transform kinds and the H polynomial.
//!
//! Needs g++ (Debian: build-essential). Fails, not skips, without it.

mod common;

use std::path::PathBuf;

use blstrs::Scalar;
use ff::Field;
use gpud_cuda::cpu;
use gpud_cuda::fr::{cast_slice, to_limbs};
use gpud_cuda::ntt::plan::{self, NttKind, Step, TableKey};
use gpud_cuda::ntt::tables;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Which field multiplication the harness is built with: fr.cuh's default (`fr_mul_cios`) or
/// `fr_mul_karatsuba` (`-DFR_MUL_KARATSUBA=1`, as the `ntt_kara` and `fr_bench_kara` modules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Build {
    Default,
    Karatsuba,
}

const BUILDS: [Build; 2] = [Build::Default, Build::Karatsuba];

fn harness(build: Build) -> PathBuf {
    let (name, defines): (_, &[&str]) = match build {
        Build::Default => ("fr_ntt_harness", &[]),
        Build::Karatsuba => ("fr_ntt_harness_kara", &["-DFR_MUL_KARATSUBA=1"]),
    };
    let flags = [
        "-O1",
        "-g",
        "-Wno-unknown-pragmas",
        // Out-of-bounds indexing in the kernels' index math (shared memory is a vector of
        // exactly the kernel's size here) fails the tests instead of passing silently.
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
    ];
    common::compile(name, "harness.cpp", &[&flags[..], defines].concat())
}

fn run_harness(build: Build, input: &[u8]) -> Vec<u8> {
    common::run_harness(&harness(build), input.to_vec())
}

fn put_scalars(buf: &mut Vec<u8>, xs: &[Scalar]) {
    for x in xs {
        for l in to_limbs(x) {
            buf.extend_from_slice(&l.to_le_bytes());
        }
    }
}

fn get_scalars(bytes: &[u8]) -> Vec<Scalar> {
    assert_eq!(bytes.len() % 32, 0);
    bytes
        .chunks_exact(32)
        .map(|c| {
            let l: [u64; 4] = std::array::from_fn(|i| {
                u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().unwrap())
            });
            gpud_cuda::fr::from_limbs(l).expect("harness returned a non-canonical element")
        })
        .collect()
}

#[test]
fn scalar_layout_is_blst_montgomery_limbs() {
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    for _ in 0..16 {
        let s = Scalar::random(&mut rng);
        assert_eq!(to_limbs(&s), blst::blst_fr::from(s).l);
        let as_u32: &[[u32; 8]] = cast_slice(std::slice::from_ref(&s));
        let l = blst::blst_fr::from(s).l;
        for i in 0..4 {
            assert_eq!(
                as_u32[0][2 * i] as u64 | (as_u32[0][2 * i + 1] as u64) << 32,
                l[i]
            );
        }
    }
}

#[test]
fn field_ops_match_blstrs_bit_for_bit() {
    let mut rng = ChaCha20Rng::seed_from_u64(0x5eed);
    let minus_one = -Scalar::ONE;
    let edges = [
        Scalar::ZERO,
        Scalar::ONE,
        minus_one,
        minus_one - Scalar::ONE,
        Scalar::from(2u64),
    ];
    let mut cases: Vec<(Scalar, Scalar, u64)> = Vec::new();
    for a in edges {
        for b in edges {
            cases.push((a, b, rng.r#gen()));
        }
    }
    for _ in 0..20_000 {
        cases.push((
            Scalar::random(&mut rng),
            Scalar::random(&mut rng),
            rng.r#gen(),
        ));
    }
    cases.push((Scalar::random(&mut rng), Scalar::ONE, 0));
    cases.push((Scalar::random(&mut rng), Scalar::ONE, u64::MAX));
    let mut input = 1u32.to_le_bytes().to_vec();
    input.extend_from_slice(&(cases.len() as u64).to_le_bytes());
    for (a, b, e) in &cases {
        put_scalars(&mut input, &[*a, *b]);
        input.extend_from_slice(&e.to_le_bytes());
    }
    let want: Vec<[Scalar; 6]> = cases
        .iter()
        .map(|(a, b, e)| [*a + b, *a - b, *a * b, a.square(), -*a, a.pow_vartime([*e])])
        .collect();
    for build in BUILDS {
        let out = get_scalars(&run_harness(build, &input));
        assert_eq!(out.len(), cases.len() * 6);
        for (i, ((a, b, e), want)) in cases.iter().zip(&want).enumerate() {
            let got = &out[6 * i..6 * i + 6];
            for (op, (g, w)) in ["add", "sub", "mul", "sqr", "neg", "pow"]
                .iter()
                .zip(got.iter().zip(want))
            {
                assert_eq!(
                    g, w,
                    "{build:?} build: {op} of case {i}: a={a:?} b={b:?} e={e}"
                );
            }
        }
    }
}

/// Raw Montgomery limb values (what the multiplication sees) at the edges of its carries: 0, 1,
/// r - 1 and r - 2, R mod r (one), -R mod r, words of all ones (every subset of the 7 lower
/// 32-bit limbs), r - 1 with subsets of limbs set to all ones where still below r, and halves
/// whose sum carries (limbs 0..3 all ones under a large upper half).
fn edge_values() -> Vec<Scalar> {
    const R: [u64; 4] = [
        0xffff_ffff_0000_0001,
        0x53bd_a402_fffe_5bfe,
        0x3339_d808_09a1_d805,
        0x73ed_a753_299d_7d48,
    ];
    let words =
        |l: [u64; 4]| -> [u32; 8] { std::array::from_fn(|i| (l[i / 2] >> (32 * (i % 2))) as u32) };
    let limbs = |w: [u32; 8]| -> [u64; 4] {
        std::array::from_fn(|i| w[2 * i] as u64 | (w[2 * i + 1] as u64) << 32)
    };
    let r_minus = |k: u64| {
        let mut l = R;
        l[0] -= k;
        l
    };
    let mut raw: Vec<[u64; 4]> = vec![
        [0; 4],
        [1, 0, 0, 0],
        [2, 0, 0, 0],
        r_minus(1),
        r_minus(2),
        to_limbs(&Scalar::ONE),
        to_limbs(&-Scalar::ONE),
        [u64::MAX, u64::MAX, 0, 0],
        [0, 0, 1, 0],
        // 2^128 (r >> 128) - 1: every lower limb all ones, the largest upper half below it.
        [u64::MAX, u64::MAX, R[2] - 1, R[3]],
    ];
    for mask in 0u32..256 {
        let pick = |base: [u32; 8]| -> [u64; 4] {
            let mut w = base;
            for (i, x) in w.iter_mut().enumerate() {
                if mask >> i & 1 == 1 {
                    *x = u32::MAX;
                }
            }
            limbs(w)
        };
        raw.push(pick([0; 8]));
        raw.push(pick(words(r_minus(1))));
        let mut w = words(r_minus(1));
        for (i, x) in w.iter_mut().enumerate() {
            if mask >> i & 1 == 1 {
                *x = 0;
            }
        }
        raw.push(limbs(w));
    }
    let mut out: Vec<Scalar> = Vec::new();
    for l in raw {
        if let Some(s) = gpud_cuda::fr::from_limbs(l) {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

#[test]
fn products_of_edge_values_match_blstrs() {
    let edges = edge_values();
    assert!(edges.len() > 200, "{} edge values", edges.len());
    let mut rng = ChaCha20Rng::seed_from_u64(0xed9e);
    let mut pairs: Vec<(Scalar, Scalar)> = Vec::new();
    for a in &edges {
        for b in &edges {
            pairs.push((*a, *b));
        }
        for _ in 0..8 {
            pairs.push((*a, Scalar::random(&mut rng)));
        }
    }
    let mut input = 3u32.to_le_bytes().to_vec();
    input.extend_from_slice(&(pairs.len() as u64).to_le_bytes());
    for (a, b) in &pairs {
        put_scalars(&mut input, &[*a, *b]);
    }
    for build in BUILDS {
        let out = get_scalars(&run_harness(build, &input));
        assert_eq!(out.len(), pairs.len());
        for (i, ((a, b), got)) in pairs.iter().zip(&out).enumerate() {
            assert_eq!(
                *got,
                *a * b,
                "{build:?} build: product {i}: a={a:?} b={b:?}"
            );
        }
    }
}

/// Which kernels the harness runs a plan's passes and bit reversals with (the GPU engine's
/// `NttVariant`s: legacy = `ntt_pass_kernel` and the pairwise bit reversal; radix =
/// `ntt_radix_kernel` and the tiled bit reversal from 2^8 points).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernels {
    Legacy,
    Radix,
    Radix4,
}

/// Serializes a plan for the harness: regions are consecutive `region_len`-element slices of
/// `data`; every table the steps read is built the way the GPU engine builds it.
fn run_plan(
    data: &[Scalar],
    region_len: usize,
    steps: &[Step],
    kernels: Kernels,
    build: Build,
) -> Vec<Scalar> {
    let keys = plan::tables_used(steps);
    let mut tables: Vec<(TableKey, Vec<Scalar>)> = Vec::new();
    let mut prelude: Vec<[u64; 13]> = Vec::new();
    let index_of = |tables: &Vec<(TableKey, Vec<Scalar>)>, k: TableKey| {
        tables.iter().position(|(t, _)| *t == k)
    };
    for key in keys {
        match key {
            TableKey::Powers { .. } => tables.push((key, tables::powers_for(key).unwrap())),
            TableKey::Twiddles { log_n } => {
                let src = tables::twiddle_source(log_n);
                if index_of(&tables, src).is_none() {
                    tables.push((src, tables::powers_for(src).unwrap()));
                }
                let src_idx = index_of(&tables, src).unwrap() as u64;
                tables.push((key, Vec::new()));
                let dst = (tables.len() - 1) as u64;
                prelude.push([
                    1,
                    0,
                    tables::twiddle_count(log_n),
                    log_n as u64,
                    0,
                    0,
                    0,
                    0,
                    0,
                    src_idx,
                    0,
                    dst,
                    0,
                ]);
            }
        }
    }
    let off = |r: usize| (r * region_len) as u64;
    let mut encoded = prelude;
    for s in steps {
        encoded.push(match *s {
            Step::Pass {
                region,
                params,
                scale,
            } => {
                let tw = index_of(
                    &tables,
                    TableKey::Twiddles {
                        log_n: params.log_n,
                    },
                )
                .unwrap() as u64;
                let sc = scale
                    .map(|k| index_of(&tables, k).unwrap() as u64)
                    .unwrap_or(tw);
                [
                    match kernels {
                        Kernels::Legacy => 2,
                        Kernels::Radix => 6,
                        Kernels::Radix4 => 8,
                    },
                    off(region),
                    params.total,
                    params.log_n as u64,
                    params.log_stride as u64,
                    params.k as u64,
                    params.log_subs as u64,
                    params.inverse as u64,
                    params.dit as u64,
                    tw,
                    sc,
                    params.scale as u64,
                    params.scale_bitrev as u64,
                ]
            }
            Step::Bitrev {
                region,
                total,
                log_n,
            } => [
                if plan::permutes_by_tiles(kernels != Kernels::Legacy, log_n) {
                    7
                } else {
                    3
                },
                off(region),
                total,
                log_n as u64,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ],
            Step::Pointwise { a, b, c, log_n } => [
                if plan::permutes_by_tiles(kernels != Kernels::Legacy, log_n) {
                    9
                } else {
                    5
                },
                off(a),
                1 << log_n,
                log_n as u64,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                off(b),
                off(c),
            ],
        });
    }
    let mut input = 2u32.to_le_bytes().to_vec();
    input.extend_from_slice(&(data.len() as u64).to_le_bytes());
    put_scalars(&mut input, data);
    input.extend_from_slice(&(tables.len() as u32).to_le_bytes());
    for (_, t) in &tables {
        input.extend_from_slice(&(t.len() as u64).to_le_bytes());
        put_scalars(&mut input, t);
    }
    input.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
    for e in &encoded {
        for v in e {
            input.extend_from_slice(&v.to_le_bytes());
        }
    }
    get_scalars(&run_harness(build, &input))
}

fn random(rng: &mut ChaCha20Rng, n: usize) -> Vec<Scalar> {
    (0..n).map(|_| Scalar::random(&mut *rng)).collect()
}

#[test]
fn ntt_launch_plans_match_the_cpu_reference() {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    // Sizes cover one pass (<= 8 or 9 stages), two passes with blocks smaller and larger than
    // a sub-problem's stride, three passes, radix rounds of 1, 2 and 3 stages, the tiled bit
    // reversal with 0 to 9 middle bits, and odd batch sizes (blocks straddling polynomials).
    let cases: &[(u32, u64)] = &[
        (1, 1),
        (1, 3),
        (2, 1),
        (2, 5),
        (3, 2),
        (4, 1),
        (5, 1),
        (7, 3),
        (8, 1),
        (8, 3),
        (9, 1),
        (9, 3),
        (10, 3),
        (11, 1),
        (13, 2),
        (16, 1),
        (17, 1),
        (18, 1),
    ];
    // Both kernels with both plans (the H computation runs the default plan whatever the
    // engine's kernels), and the default engine's (radix-4) with the Karatsuba product.
    let variants = [
        (Kernels::Legacy, plan::LEGACY_PASS_STAGES, Build::Default),
        (Kernels::Legacy, plan::MAX_PASS_STAGES, Build::Default),
        (Kernels::Radix, plan::LEGACY_PASS_STAGES, Build::Default),
        (Kernels::Radix, plan::MAX_PASS_STAGES, Build::Default),
        (Kernels::Radix4, plan::MAX_PASS_STAGES, Build::Default),
        (Kernels::Radix4, plan::MAX_PASS_STAGES, Build::Karatsuba),
    ];
    for &(log_n, batch) in cases {
        for kind in [
            NttKind::Forward,
            NttKind::Inverse,
            NttKind::CosetForward,
            NttKind::CosetInverse,
        ] {
            let n = 1usize << log_n;
            let x = random(&mut rng, n * batch as usize);
            let mut want = x.clone();
            cpu::ntt(&mut want, kind, log_n).unwrap();
            for (kernels, max, build) in variants {
                // The two plans coincide where the pass count is the same.
                let default_plan = max == plan::MAX_PASS_STAGES;
                let first_of_kernel =
                    kernels == Kernels::Radix4 || (kernels == Kernels::Legacy) != default_plan;
                if !first_of_kernel
                    && plan::split_stages_max(log_n, plan::LEGACY_PASS_STAGES)
                        == plan::split_stages(log_n)
                {
                    continue;
                }
                let steps = plan::ntt_steps_max(kind, log_n, batch, max);
                let got = run_plan(&x, x.len(), &steps, kernels, build);
                assert!(
                    got == want,
                    "{kind:?} 2^{log_n} x {batch}, {kernels:?} kernels, passes <= {max}, \
                     {build:?} build: mismatch"
                );
            }
        }
    }
}

#[test]
fn h_launch_plan_matches_the_cpu_reference() {
    let mut rng = ChaCha20Rng::seed_from_u64(12);
    for log_n in [1u32, 2, 3, 7, 9, 12, 15] {
        let n = 1usize << log_n;
        // Inputs shorter than the domain are zero-padded, as bellperson pads them.
        let len = if log_n > 2 { n - 3 } else { n };
        let (a, b, c) = (
            random(&mut rng, len),
            random(&mut rng, len),
            random(&mut rng, len),
        );
        let mut data = Vec::with_capacity(3 * n);
        for x in [&a, &b, &c] {
            data.extend_from_slice(x);
            data.resize(data.len() + n - len, Scalar::ZERO);
        }
        let want = cpu::h_poly(&a, &b, &c).unwrap();
        for (kernels, max, build) in [
            (Kernels::Legacy, plan::LEGACY_PASS_STAGES, Build::Default),
            (Kernels::Radix, plan::MAX_PASS_STAGES, Build::Default),
            (Kernels::Radix4, plan::MAX_PASS_STAGES, Build::Default),
            (Kernels::Radix4, plan::MAX_PASS_STAGES, Build::Karatsuba),
        ] {
            let mut steps = Vec::new();
            for r in 0..3 {
                steps.extend(plan::h_input_steps_max(log_n, r, max));
            }
            steps.extend(plan::h_tail_steps_max(log_n, 0, 1, 2, max));
            let got = run_plan(&data, n, &steps, kernels, build);
            assert!(
                got[..n] == want[..],
                "H 2^{log_n}, {kernels:?} kernels, {build:?} build: mismatch"
            );
        }
    }
}
