//! How much device memory a proof needs: the VRAM a lease asks gpud for.
//!
//! The formula counts the buffers a GPU engine allocates for one proof over a domain of
//! `m = 2^k` points (Fr elements are 32 bytes, affine G1 points 96, projective G1 buckets 144):
//!
//! | buffer | bytes |
//! |---|---|
//! | `a`, `b`, `c` for the NTTs (h overwrites `a`) | `3 · 32 · m` |
//! | twiddle table (`ω^j`, `j < m/2`) | `32 · m/2` |
//! | resident G1 bases: H, L, A, B_G1 queries | `96 · (|H| + |L| + |A| + |B_G1|)` |
//! | MSM scalars (largest MSM: H or L) | `32 · max(|H|, |L|)` |
//! | MSM digits and sort keys (`w` windows, 8 bytes per point and window) | `8 · w · max(|H|, |L|)` |
//! | MSM buckets (`w` windows of `2^(c−1)` signed-digit buckets) | `144 · w · 2^(c−1)` |
//!
//! with the window `c = clamp(log2(max(|H|, |L|)) − 3, 8, 16)` and `w = ⌈255 / c⌉`. The G2
//! query for B stays on the host (it is the CPU tail). The peak is the sum: the NTT buffers are
//! still allocated while the first MSM runs, as in the measured SupraSeal C2 profile.

use serde::Serialize;

/// Sizes of the proving key's queries (number of points in each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KeyShape {
    /// H query (`m − 1`).
    pub h: usize,
    /// L query (one per aux variable).
    pub l: usize,
    /// A query (inputs and dense aux).
    pub a: usize,
    /// B query in G1.
    pub b_g1: usize,
    /// B query in G2.
    pub b_g2: usize,
}

/// The device buffers of one proof, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VramEstimate {
    /// `a`, `b`, `c` and the twiddle table.
    pub ntt: u64,
    /// The G1 bases a GPU engine keeps on the device.
    pub bases: u64,
    /// MSM scalars, digits, sort keys and buckets.
    pub msm: u64,
}

impl VramEstimate {
    /// Everything a proof's GPU phase holds at its peak.
    pub fn total(&self) -> u64 {
        self.ntt + self.bases + self.msm
    }
}

const FR: u64 = 32;
const G1_AFFINE: u64 = 96;
const G1_BUCKET: u64 = 144;

/// The window size (bits) the formula assumes for an MSM over `n` points.
pub fn msm_window(n: usize) -> u32 {
    let log = usize::BITS - n.max(1).leading_zeros();
    log.saturating_sub(3).clamp(8, 16)
}

/// The VRAM a GPU engine needs for one proof with key `shape` over a domain of `2^log_domain`.
pub fn estimate(shape: &KeyShape, log_domain: u32) -> VramEstimate {
    let m = 1u64 << log_domain;
    let ntt = 3 * FR * m + FR * (m / 2);
    let bases = G1_AFFINE * (shape.h + shape.l + shape.a + shape.b_g1) as u64;
    let n = shape.h.max(shape.l);
    let c = msm_window(n);
    let windows = u64::from(255_u32.div_ceil(c));
    let msm = FR * n as u64 + 8 * windows * n as u64 + G1_BUCKET * windows * (1u64 << (c - 1));
    VramEstimate { ntt, bases, msm }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_at_2_20_matches_hand_computation() {
        let m = 1usize << 20;
        let shape = KeyShape {
            h: m - 1,
            l: m,
            a: m,
            b_g1: m / 2,
            b_g2: m / 2,
        };
        let e = estimate(&shape, 20);
        assert_eq!(e.ntt, 3 * 32 * (1 << 20) + 32 * (1 << 19));
        assert_eq!(e.bases, 96 * (4 * (1u64 << 20) - 1 - (1 << 19)));
        // n = 2^20 → c = 21 − 3 = 18, clamped to 16; w = 16.
        assert_eq!(msm_window(m), 16);
        assert_eq!(
            e.msm,
            32 * (1 << 20) + 8 * 16 * (1 << 20) + 144 * 16 * (1 << 15)
        );
        assert_eq!(e.total(), e.ntt + e.bases + e.msm);
        // Four times the domain needs about four times the memory.
        let big = KeyShape {
            h: 4 * m - 1,
            l: 4 * m,
            a: 4 * m,
            b_g1: 2 * m,
            b_g2: 2 * m,
        };
        let ratio = estimate(&big, 22).total() as f64 / e.total() as f64;
        assert!((3.5..4.2).contains(&ratio), "{ratio}");
    }

    #[test]
    fn small_sizes_use_the_smallest_window() {
        assert_eq!(msm_window(0), 8);
        assert_eq!(msm_window(255), 8);
        assert_eq!(msm_window(1 << 12), 10);
    }
}
