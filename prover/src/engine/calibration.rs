//! Measured speeds behind the CUDA engine's `auto` choice of where the B_G2 MSM runs: the same
//! G2 MSM timed on the GPU and on the host's cores, once per process, before the first proof
//! ([`super::Engine::calibrate`]). The choice itself is pure ([`g2_on_gpu_auto`]).

use blstrs::{G2Affine, G2Projective, Scalar};
use ff::Field;
use group::prime::PrimeCurveAffine;
use group::{Curve, Group};
use rayon::prelude::*;
use serde::Serialize;

/// Points of the measured MSM: large enough that neither side is dominated by its fixed costs
/// (kernel launches, thread wake-ups), small enough to take a fraction of a second on either.
pub const SAMPLE_POINTS: usize = 1 << 17;
/// Distinct bases of the sample, repeated to [`SAMPLE_POINTS`] (the MSM's work does not depend
/// on which points it adds, and distinct random points cost a scalar multiplication each).
const DISTINCT_BASES: usize = 1 << 10;

/// One G2 MSM of [`G2Speeds::points`] witness-shaped scalars, best of the timed runs on each
/// side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct G2Speeds {
    /// Points of the measured MSM.
    pub points: usize,
    /// Seconds on the GPU (scalars uploaded from host memory, bases on the device).
    pub gpu_secs: f64,
    /// Seconds on the host's cores (blst's Pippenger).
    pub cpu_secs: f64,
}

impl G2Speeds {
    /// Whether the GPU computed the MSM no slower than the host's cores.
    pub fn gpu_is_faster(&self) -> bool {
        self.gpu_secs <= self.cpu_secs
    }
}

/// The `auto` placement of the B_G2 MSM: on the GPU when the phase with it fits the device and
/// the GPU is no slower at it than the host, as measured; unmeasured, fitting decides.
pub fn g2_on_gpu_auto(fits: bool, speeds: Option<&G2Speeds>) -> bool {
    fits && speeds.is_none_or(G2Speeds::gpu_is_faster)
}

/// The sample's bases and scalars: [`DISTINCT_BASES`] multiples of the generator repeated, and
/// scalars shaped like a PoRep witness's B values (45 % zeros, 45 % ones, the rest small or
/// full width), from a fixed sequence so that every run measures the same work.
pub fn sample() -> (Vec<G2Affine>, Vec<Scalar>) {
    let g = G2Projective::generator();
    let distinct: Vec<G2Projective> = (0..DISTINCT_BASES as u64)
        .into_par_iter()
        .map(|i| g * Scalar::from(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i + 1)))
        .collect();
    let mut affine = vec![G2Affine::identity(); DISTINCT_BASES];
    G2Projective::batch_normalize(&distinct, &mut affine);
    let bases = (0..SAMPLE_POINTS)
        .map(|i| affine[i % DISTINCT_BASES])
        .collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let scalars = (0..SAMPLE_POINTS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 100 {
                0..45 => Scalar::ZERO,
                45..90 => Scalar::ONE,
                90..98 => Scalar::from(x >> 32),
                _ => Scalar::from(x).square().square().square(),
            }
        })
        .collect();
    (bases, scalars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speeds(gpu_secs: f64, cpu_secs: f64) -> G2Speeds {
        G2Speeds {
            points: SAMPLE_POINTS,
            gpu_secs,
            cpu_secs,
        }
    }

    #[test]
    fn auto_needs_the_fit_and_follows_the_faster_side_once_measured() {
        assert!(g2_on_gpu_auto(true, None));
        assert!(!g2_on_gpu_auto(false, None));
        assert!(g2_on_gpu_auto(true, Some(&speeds(0.01, 0.2))));
        assert!(g2_on_gpu_auto(true, Some(&speeds(0.2, 0.2))));
        assert!(!g2_on_gpu_auto(true, Some(&speeds(0.3, 0.2))));
        assert!(!g2_on_gpu_auto(false, Some(&speeds(0.01, 0.2))));
    }

    #[test]
    fn the_sample_is_witness_shaped_and_the_same_every_time() {
        let (bases, scalars) = sample();
        assert_eq!((bases.len(), scalars.len()), (SAMPLE_POINTS, SAMPLE_POINTS));
        let zeros = scalars.iter().filter(|s| **s == Scalar::ZERO).count();
        let ones = scalars.iter().filter(|s| **s == Scalar::ONE).count();
        let share = |n: usize| n as f64 / SAMPLE_POINTS as f64;
        assert!((0.40..0.50).contains(&share(zeros)), "{zeros} zeros");
        assert!((0.40..0.50).contains(&share(ones)), "{ones} ones");
        assert!(bases.iter().all(|b| !bool::from(b.is_identity())));
        assert_eq!(sample().1[..64], scalars[..64]);
    }
}
