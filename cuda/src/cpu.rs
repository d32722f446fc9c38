//! CPU NTTs and H polynomial with blstrs and rayon: the reference the GPU results are compared
//! with bit for bit, and the multi-core baseline the benchmark times.
//!
//! Same definitions as bellperson's `EvaluationDomain`: forward y_k = sum_j x_j w^(jk);
//! inverse with w^-1 and 1/n; coset transforms shift by g = 7 (the multiplicative generator).

use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

use crate::error::Result;
use crate::ntt::plan::{NttKind, check_log_n};
use crate::ntt::tables::{coset_gen, inv_n, inv_z_on_coset, omega};

fn bitrev_permute(a: &mut [Scalar]) {
    let n = a.len();
    let bits = n.trailing_zeros();
    for i in 0..n {
        let j = i.reverse_bits() >> (usize::BITS - bits);
        if i < j {
            a.swap(i, j);
        }
    }
}

fn powers(base: Scalar, count: usize) -> Vec<Scalar> {
    let mut v = Vec::with_capacity(count);
    let mut acc = Scalar::ONE;
    for _ in 0..count {
        v.push(acc);
        acc *= base;
    }
    v
}

/// In-place radix-2 transform with root `w` (natural order in and out), parallel over the
/// butterflies of each stage.
fn fft_in_place(a: &mut [Scalar], w: Scalar) {
    let n = a.len();
    if n <= 1 {
        return;
    }
    bitrev_permute(a);
    // Twiddles w^j for j < n/2; stage with half-size h uses every (n/2h)-th.
    let tw = powers(w, n / 2);
    let mut h = 1;
    while h < n {
        let stride = n / (2 * h);
        let body = |block: &mut [Scalar]| {
            let (lo, hi) = block.split_at_mut(h);
            for j in 0..h {
                let t = hi[j] * tw[j * stride];
                hi[j] = lo[j] - t;
                lo[j] += t;
            }
        };
        if 2 * h >= 1 << 12 {
            // Few large blocks: split each block's butterflies across threads instead.
            for block in a.chunks_mut(2 * h) {
                let (lo, hi) = block.split_at_mut(h);
                lo.par_chunks_mut(1 << 10)
                    .zip(hi.par_chunks_mut(1 << 10))
                    .enumerate()
                    .for_each(|(c, (l, r))| {
                        for j in 0..l.len() {
                            let t = r[j] * tw[(c * (1 << 10) + j) * stride];
                            r[j] = l[j] - t;
                            l[j] += t;
                        }
                    });
            }
        } else {
            a.par_chunks_mut((2 * h).max(1 << 12))
                .for_each(|chunk| chunk.chunks_mut(2 * h).for_each(body));
        }
        h *= 2;
    }
}

fn scale_by_powers(a: &mut [Scalar], base: Scalar, factor: Scalar) {
    a.par_chunks_mut(1 << 12)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut p = factor * base.pow_vartime([(c as u64) << 12]);
            for x in chunk {
                *x *= p;
                p *= base;
            }
        });
}

/// Transforms every 2^log_n-point polynomial of `data` in place.
pub fn ntt(data: &mut [Scalar], kind: NttKind, log_n: u32) -> Result<()> {
    check_log_n(log_n)?;
    let n = 1usize << log_n;
    if data.is_empty() || data.len() % n != 0 {
        return Err(crate::Error::InvalidArgument(format!(
            "{} elements is not a whole number of 2^{log_n}-point polynomials",
            data.len()
        )));
    }
    let w = omega(log_n);
    let winv = Option::<Scalar>::from(w.invert()).unwrap_or(Scalar::ZERO);
    let g = coset_gen();
    let ginv = Option::<Scalar>::from(g.invert()).unwrap_or(Scalar::ZERO);
    for poly in data.chunks_mut(n) {
        match kind {
            NttKind::Forward => fft_in_place(poly, w),
            NttKind::Inverse => {
                fft_in_place(poly, winv);
                scale_by_powers(poly, Scalar::ONE, inv_n(log_n));
            }
            NttKind::CosetForward => {
                scale_by_powers(poly, g, Scalar::ONE);
                fft_in_place(poly, w);
            }
            NttKind::CosetInverse => {
                fft_in_place(poly, winv);
                scale_by_powers(poly, ginv, inv_n(log_n));
            }
        }
    }
    Ok(())
}

/// The Groth16 H polynomial of equal-length a, b, c (zero-padded to 2^log_n), as bellperson
/// computes it: all 2^log_n coefficients.
pub fn h_poly(a: &[Scalar], b: &[Scalar], c: &[Scalar]) -> Result<Vec<Scalar>> {
    let log_n = crate::hpoly::domain_log_n(a.len())?;
    if b.len() != a.len() || c.len() != a.len() {
        return Err(crate::Error::InvalidArgument(
            "a, b, c lengths differ".into(),
        ));
    }
    let n = 1usize << log_n;
    let prep = |x: &[Scalar]| -> Result<Vec<Scalar>> {
        let mut v = x.to_vec();
        v.resize(n, Scalar::ZERO);
        ntt(&mut v, NttKind::Inverse, log_n)?;
        ntt(&mut v, NttKind::CosetForward, log_n)?;
        Ok(v)
    };
    let (mut ea, eb, ec) = (prep(a)?, prep(b)?, prep(c)?);
    let zinv = inv_z_on_coset(log_n);
    ea.par_iter_mut()
        .zip(eb.par_iter().zip(ec.par_iter()))
        .for_each(|(x, (y, z))| *x = (*x * y - z) * zinv);
    ntt(&mut ea, NttKind::CosetInverse, log_n)?;
    Ok(ea)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn naive(x: &[Scalar], w: Scalar) -> Vec<Scalar> {
        let n = x.len();
        (0..n)
            .map(|k| {
                let wk = w.pow_vartime([k as u64]);
                let mut acc = Scalar::ZERO;
                let mut p = Scalar::ONE;
                for xj in x {
                    acc += *xj * p;
                    p *= wk;
                }
                acc
            })
            .collect()
    }

    #[test]
    fn transforms_match_the_definition_and_invert() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        for log_n in 1..=7u32 {
            let n = 1usize << log_n;
            let x: Vec<Scalar> = (0..2 * n).map(|_| Scalar::random(&mut rng)).collect();
            let mut y = x.clone();
            ntt(&mut y, NttKind::Forward, log_n).unwrap();
            for p in 0..2 {
                assert_eq!(
                    &y[p * n..(p + 1) * n],
                    &naive(&x[p * n..(p + 1) * n], omega(log_n))[..]
                );
            }
            ntt(&mut y, NttKind::Inverse, log_n).unwrap();
            assert_eq!(y, x);
            let mut z = x.clone();
            ntt(&mut z, NttKind::CosetForward, log_n).unwrap();
            let shifted: Vec<Scalar> = x[..n]
                .iter()
                .enumerate()
                .map(|(j, v)| *v * coset_gen().pow_vartime([j as u64]))
                .collect();
            assert_eq!(&z[..n], &naive(&shifted, omega(log_n))[..]);
            ntt(&mut z, NttKind::CosetInverse, log_n).unwrap();
            assert_eq!(z, x);
        }
    }

    #[test]
    fn large_stages_take_the_split_path_and_agree() {
        // 2^13 reaches the branch that splits one block's butterflies across threads.
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let log_n = 13;
        let x: Vec<Scalar> = (0..1 << log_n).map(|_| Scalar::random(&mut rng)).collect();
        let mut y = x.clone();
        ntt(&mut y, NttKind::Forward, log_n).unwrap();
        // Spot-check outputs against the definition.
        let w = omega(log_n);
        for k in [0usize, 1, 4095, 8191] {
            let wk = w.pow_vartime([k as u64]);
            let mut acc = Scalar::ZERO;
            let mut p = Scalar::ONE;
            for v in &x {
                acc += *v * p;
                p *= wk;
            }
            assert_eq!(y[k], acc, "k = {k}");
        }
        ntt(&mut y, NttKind::Inverse, log_n).unwrap();
        assert_eq!(y, x);
    }

    #[test]
    fn h_of_a_satisfied_system_is_the_quotient() {
        // With a*b - c = Z * q on the subgroup (here: a*b = c pointwise, so Z divides a*b - c
        // as polynomials), h is a polynomial of degree <= n - 2: its top coefficient is zero.
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let n = 16;
        let a: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        let b: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        let c: Vec<Scalar> = a.iter().zip(&b).map(|(x, y)| *x * y).collect();
        let h = h_poly(&a, &b, &c).unwrap();
        assert_eq!(h.len(), n);
        assert_eq!(h[n - 1], Scalar::ZERO);
        assert!(h[..n - 1].iter().any(|v| *v != Scalar::ZERO));
    }
}
