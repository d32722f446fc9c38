//! Radix-2 FFTs over Fr and the H-polynomial computation built on them.
//!
//! The domain is the smallest power of two at least as large as the number of constraints;
//! the coset is `g · ⟨ω⟩` with `g` Fr's multiplicative generator, as in bellperson, so that
//! `Z(x) = x^m − 1` is the constant `g^m − 1` on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use blstrs::Scalar;
use ff::{Field, PrimeField};
use rayon::prelude::*;

use crate::error::{ProverError, Result};

/// Elements per block for the cache-resident first stages of an FFT (32 KiB of scalars).
const BLOCK: usize = 1 << 10;
/// Chunk of elements a rayon task handles in element-wise passes.
const CHUNK: usize = 1 << 12;

/// A radix-2 evaluation domain of size `2^log_size` with its twiddle tables.
#[derive(Debug)]
pub struct Domain {
    log_size: u32,
    size: usize,
    /// `ω^j` for `j < size/2`.
    twiddles: Vec<Scalar>,
    /// `ω^{-j}` for `j < size/2`.
    inv_twiddles: Vec<Scalar>,
    size_inv: Scalar,
}

impl Domain {
    /// The smallest domain that holds `n` evaluations (bellperson's choice of size).
    pub fn for_constraints(n: usize) -> Result<Arc<Domain>> {
        let log = n.next_power_of_two().trailing_zeros();
        if log >= Scalar::S {
            return Err(ProverError::DomainTooLarge {
                constraints: n,
                max_log: Scalar::S - 1,
            });
        }
        Ok(Self::cached(log))
    }

    /// The domain of size `2^log_size`, built once per process and shared.
    fn cached(log_size: u32) -> Arc<Domain> {
        static CACHE: OnceLock<Mutex<HashMap<u32, Arc<Domain>>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(log_size)
            .or_insert_with(|| Arc::new(Domain::new(log_size)))
            .clone()
    }

    fn new(log_size: u32) -> Domain {
        let size = 1usize << log_size;
        let mut omega = Scalar::ROOT_OF_UNITY;
        for _ in log_size..Scalar::S {
            omega = omega.square();
        }
        let omega_inv = omega.invert().unwrap_or(Scalar::ONE);
        Domain {
            log_size,
            size,
            twiddles: powers(omega, size / 2),
            inv_twiddles: powers(omega_inv, size / 2),
            size_inv: Scalar::from(size as u64).invert().unwrap_or(Scalar::ONE),
        }
    }

    /// log2 of the size.
    pub fn log_size(&self) -> u32 {
        self.log_size
    }

    /// Number of points.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Evaluations on the domain from coefficients, in place (`values.len() == size`).
    pub fn fft(&self, values: &mut [Scalar]) {
        transform(values, &self.twiddles);
    }

    /// Coefficients from evaluations on the domain, in place.
    pub fn ifft(&self, values: &mut [Scalar]) {
        transform(values, &self.inv_twiddles);
        scale(values, self.size_inv);
    }

    /// Evaluations on the coset `g·⟨ω⟩` from coefficients.
    pub fn coset_fft(&self, values: &mut [Scalar]) {
        distribute_powers(values, Scalar::MULTIPLICATIVE_GENERATOR, Scalar::ONE);
        transform(values, &self.twiddles);
    }

    /// Coefficients from evaluations on the coset `g·⟨ω⟩`.
    pub fn icoset_fft(&self, values: &mut [Scalar]) {
        transform(values, &self.inv_twiddles);
        let g_inv = Scalar::MULTIPLICATIVE_GENERATOR
            .invert()
            .unwrap_or(Scalar::ONE);
        // The 1/m of the inverse transform rides along with the coset shift.
        distribute_powers(values, g_inv, self.size_inv);
    }

    /// `1 / Z(g)` where `Z(x) = x^m − 1`: the vanishing polynomial is constant on the coset.
    pub fn z_inv_on_coset(&self) -> Scalar {
        let zg = Scalar::MULTIPLICATIVE_GENERATOR.pow_vartime([self.size as u64]) - Scalar::ONE;
        // g is not an m-th root of unity, so Z(g) ≠ 0.
        zg.invert().unwrap_or(Scalar::ZERO)
    }
}

/// `[1, x, x², …]`, `n` of them.
fn powers(x: Scalar, n: usize) -> Vec<Scalar> {
    let mut out = vec![Scalar::ZERO; n];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut p = x.pow_vartime([(i * CHUNK) as u64]);
            for v in chunk {
                *v = p;
                p *= x;
            }
        });
    out
}

/// `values[i] *= c · g^i`.
fn distribute_powers(values: &mut [Scalar], g: Scalar, c: Scalar) {
    values
        .par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut p = g.pow_vartime([(i * CHUNK) as u64]) * c;
            for v in chunk {
                *v *= p;
                p *= g;
            }
        });
}

/// `values[i] *= c`.
fn scale(values: &mut [Scalar], c: Scalar) {
    values
        .par_chunks_mut(CHUNK)
        .for_each(|chunk| chunk.iter_mut().for_each(|v| *v *= c));
}

/// In-place decimation-in-time transform: bit-reversal, then butterflies of growing span.
/// `twiddles[j] = w^j` for `j < n/2`, `w` a primitive n-th root of unity (or its inverse).
fn transform(values: &mut [Scalar], twiddles: &[Scalar]) {
    let n = values.len();
    debug_assert!(n.is_power_of_two() && twiddles.len() == n / 2);
    if n < 2 {
        return;
    }
    bit_reverse(values);
    // Spans up to BLOCK/2 stay inside one cache-resident block: do them block by block.
    let block = n.min(BLOCK);
    values.par_chunks_mut(block).for_each(|chunk| {
        let mut half = 1;
        while half < block {
            butterflies(chunk, half, twiddles, n / (2 * half));
            half *= 2;
        }
    });
    // Wider spans: few groups, so split each group's butterflies across tasks.
    let mut half = block;
    while half < n {
        let stride = n / (2 * half);
        values.par_chunks_mut(2 * half).for_each(|group| {
            let (lo, hi) = group.split_at_mut(half);
            lo.par_chunks_mut(BLOCK)
                .zip(hi.par_chunks_mut(BLOCK))
                .enumerate()
                .for_each(|(k, (lo, hi))| {
                    let base = k * BLOCK;
                    for (j, (l, h)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
                        let t = *h * twiddles[(base + j) * stride];
                        *h = *l - t;
                        *l += t;
                    }
                });
        });
        half *= 2;
    }
}

/// One stage of butterflies with span `half` over every group of `chunk`.
fn butterflies(chunk: &mut [Scalar], half: usize, twiddles: &[Scalar], stride: usize) {
    for group in chunk.chunks_mut(2 * half) {
        let (lo, hi) = group.split_at_mut(half);
        for (j, (l, h)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
            let t = if j == 0 {
                *h
            } else {
                *h * twiddles[j * stride]
            };
            *h = *l - t;
            *l += t;
        }
    }
}

fn bit_reverse(values: &mut [Scalar]) {
    let n = values.len();
    let shift = usize::BITS - n.trailing_zeros();
    for i in 0..n {
        let r = i.reverse_bits() >> shift;
        if i < r {
            values.swap(i, r);
        }
    }
}

/// Coefficients of `h = (a·b − c) / Z` from the evaluations of a, b, c on the domain.
///
/// Seven transforms, as in bellperson: inverse FFT of a, b, c; coset FFT of each; the
/// point-wise `a·b − c` divided by `Z(g)`; one inverse coset FFT. The vectors are padded to
/// the domain size in place; the result has `size − 1` coefficients (deg h ≤ m − 2), the
/// length of the proving key's H query.
pub fn compute_h(
    domain: &Domain,
    mut a: Vec<Scalar>,
    mut b: Vec<Scalar>,
    mut c: Vec<Scalar>,
) -> Vec<Scalar> {
    let m = domain.size();
    for v in [&mut a, &mut b, &mut c] {
        v.resize(m, Scalar::ZERO);
    }
    let to_coset = |v: &mut Vec<Scalar>| {
        domain.ifft(v);
        domain.coset_fft(v);
    };
    rayon::join(
        || to_coset(&mut a),
        || rayon::join(|| to_coset(&mut b), || to_coset(&mut c)),
    );
    let z_inv = domain.z_inv_on_coset();
    a.par_chunks_mut(CHUNK)
        .zip(b.par_chunks(CHUNK))
        .zip(c.par_chunks(CHUNK))
        .for_each(|((a, b), c)| {
            for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                *a = (*a * b - c) * z_inv;
            }
        });
    drop(b);
    drop(c);
    domain.icoset_fft(&mut a);
    a.truncate(m - 1);
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn random(n: usize, seed: u64) -> Vec<Scalar> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| Scalar::random(&mut rng)).collect()
    }

    fn eval(coeffs: &[Scalar], x: Scalar) -> Scalar {
        coeffs.iter().rev().fold(Scalar::ZERO, |acc, c| acc * x + c)
    }

    #[test]
    fn fft_matches_naive_evaluation_across_block_boundary() {
        for log in [1u32, 3, 10, 12] {
            let d = Domain::cached(log);
            let coeffs = random(d.size(), log as u64);
            let mut v = coeffs.clone();
            d.fft(&mut v);
            let mut omega = Scalar::ROOT_OF_UNITY;
            for _ in log..Scalar::S {
                omega = omega.square();
            }
            for i in [0usize, 1, d.size() / 2, d.size() - 1] {
                assert_eq!(
                    v[i],
                    eval(&coeffs, omega.pow_vartime([i as u64])),
                    "log {log} i {i}"
                );
            }
            let g = Scalar::MULTIPLICATIVE_GENERATOR;
            let mut w = coeffs.clone();
            d.coset_fft(&mut w);
            let i = d.size() - 1;
            assert_eq!(w[i], eval(&coeffs, g * omega.pow_vartime([i as u64])));
            d.icoset_fft(&mut w);
            assert_eq!(w, coeffs);
            d.ifft(&mut v);
            assert_eq!(v, coeffs);
        }
    }

    #[test]
    fn h_times_z_is_ab_minus_c() {
        let log = 11;
        let d = Domain::cached(log);
        let m = d.size();
        let x = Scalar::from(0x1234_5678u64);
        let z = x.pow_vartime([m as u64]) - Scalar::ONE;
        // Low-degree a, b (deg < m/2): a·b fits the domain, so c = a·b exactly and h = 0;
        // full-degree a, b: a·b wraps around, and h is the quotient by Z.
        for (deg, seed) in [(m / 2, 1u64), (m, 7)] {
            let mut a = random(deg, seed);
            let mut b = random(deg, seed + 1);
            a.resize(m, Scalar::ZERO);
            b.resize(m, Scalar::ZERO);
            let (mut ea, mut eb) = (a.clone(), b.clone());
            d.fft(&mut ea);
            d.fft(&mut eb);
            // A satisfied system: c's evaluations are a·b at every constraint.
            let ec: Vec<Scalar> = ea.iter().zip(&eb).map(|(x, y)| x * y).collect();
            let mut c = ec.clone();
            d.ifft(&mut c);
            let h = compute_h(&d, ea, eb, ec);
            assert_eq!(h.len(), m - 1);
            if deg < m {
                assert!(h.iter().all(|v| bool::from(v.is_zero())));
            } else {
                assert!(!h.iter().all(|v| bool::from(v.is_zero())));
            }
            assert_eq!(eval(&a, x) * eval(&b, x) - eval(&c, x), eval(&h, x) * z);
        }
    }
}
