//! The shape of one MSM on the GPU: window size, thread counts of every pass, buffer sizes.
//!
//! Pure arithmetic, shared by the launcher and the host test harness (which is handed the same
//! numbers), so the order of passes tested on the CPU is the one the GPU runs.

use super::MsmError;
use super::curve::{G1, MsmCurve};

/// Bits in a prepared scalar: scalars above (r-1)/2 are replaced by r - s with the point
/// negated, so every scalar is below 2^254, and signed digits need `c * W >= 255`.
pub const SCALAR_BITS: u32 = 255;

/// Largest supported window (bucket keys must fit in 31 bits; memory grows as 2^c).
pub const MAX_WINDOW_BITS: u32 = 23;

/// Smallest supported window.
pub const MIN_WINDOW_BITS: u32 = 2;

/// Largest number of points (point indices carry a sign in bit 31).
pub const MAX_POINTS: usize = 1 << 30;

/// Field multiplications of one mixed XYZZ addition (8M + 2S), for the cost model.
const MADD_COST: u64 = 10;
/// Field multiplications of one XYZZ addition (12M + 2S).
const ADD_COST: u64 = 14;
/// Field multiplications of one XYZZ doubling (6M + 3S).
const DBL_COST: u64 = 9;

/// How many threads a pass should offer to fill the GPU (resident threads are about
/// multiprocessors x 256 for kernels of this register footprint; twice that hides tails).
fn target_threads(multiprocessors: u32) -> u64 {
    u64::from(multiprocessors.max(1)) * 512
}

/// The shape of one MSM. Build it with [`MsmPlan::new`] (window size from the cost model) or
/// [`MsmPlan::with_window_bits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsmPlan {
    /// Points (and scalars).
    pub n: usize,
    /// Window size c in bits.
    pub window_bits: u32,
    /// Windows W = ceil(255 / c).
    pub windows: u32,
    /// Buckets per window B = 2^(c-1) (signed digits: magnitudes 1..=B).
    pub buckets: u32,
    /// Sorted entries per thread in the first accumulation pass.
    pub segment: u32,
    /// Slots per thread in the combining passes (at least 4, so each pass shrinks).
    pub combine_segment: u32,
    /// Buckets per thread in the bucket reduction (a power of two dividing B).
    pub reduce_chunk: u32,
    /// Points per thread in the group sums after the bucket reduction.
    pub group: u32,
    /// Counts per thread in the scan of bucket counts.
    pub scan_chunk: u32,
}

impl MsmPlan {
    /// The plan for `n` points on a GPU with `multiprocessors` SMs, window size from the cost
    /// model ([`MsmPlan::best_window_bits`]).
    pub fn new(n: usize, multiprocessors: u32) -> Result<Self, MsmError> {
        Self::with_window_bits(n, Self::best_window_bits(n), multiprocessors)
    }

    /// The plan for `n` points with windows of `c` bits.
    pub fn with_window_bits(n: usize, c: u32, multiprocessors: u32) -> Result<Self, MsmError> {
        if n > MAX_POINTS {
            return Err(MsmError::TooManyPoints { n, max: MAX_POINTS });
        }
        if !(MIN_WINDOW_BITS..=MAX_WINDOW_BITS).contains(&c) {
            return Err(MsmError::InvalidWindow { bits: c });
        }
        let windows = SCALAR_BITS.div_ceil(c);
        // Entry positions and slot indices are 32-bit on the device.
        if n as u64 * u64::from(windows) >= u64::from(u32::MAX) / 2 {
            return Err(MsmError::TooManyPoints {
                n,
                max: (u32::MAX / 2 / windows) as usize,
            });
        }
        let buckets = 1u32 << (c - 1);
        let target = target_threads(multiprocessors);
        let worst = n as u64 * u64::from(windows);
        // Entries per thread: enough threads to fill the GPU, at most 256 so that partial sums
        // stay a small share of the work.
        let segment = worst.div_ceil(target).clamp(8, 256) as u32;
        let keys = u64::from(windows) * u64::from(buckets);
        let reduce_chunk = (keys / target).clamp(1, 64);
        let reduce_chunk = (reduce_chunk.next_power_of_two() as u32).min(buckets);
        Ok(Self {
            n,
            window_bits: c,
            windows,
            buckets,
            segment,
            combine_segment: 16,
            reduce_chunk,
            group: 16,
            scan_chunk: 64,
        })
    }

    /// The window size that minimizes the field multiplications of the cost model:
    /// W(c) * n mixed additions, about 2 additions per bucket for the running sums and one
    /// shift by double-and-add per reduction thread.
    pub fn best_window_bits(n: usize) -> u32 {
        let n = n as u64;
        (MIN_WINDOW_BITS..=20)
            .min_by_key(|&c| {
                let w = u64::from(SCALAR_BITS.div_ceil(c));
                let b = 1u64 << (c - 1);
                let accumulate = w * n * MADD_COST;
                let reduce = w * b * 2 * ADD_COST;
                let shifts = w * (b / 64).max(1) * (u64::from(c) * DBL_COST + 4 * ADD_COST);
                // Ties go to the smaller window (less memory).
                (accumulate + reduce + shifts, c)
            })
            .unwrap_or(MIN_WINDOW_BITS)
    }

    /// Bucket keys W * B; the offsets array has one more entry.
    pub fn keys(&self) -> u32 {
        self.windows * self.buckets
    }

    /// Upper bound on sorted entries (every digit non-zero).
    pub fn max_entries(&self) -> u64 {
        self.n as u64 * u64::from(self.windows)
    }

    /// Threads of the first accumulation pass (sized for the worst case, so nothing waits
    /// for the real entry count; threads past it only write filler slots).
    pub fn first_pass_threads(&self) -> u32 {
        (self.max_entries().div_ceil(u64::from(self.segment)).max(1)) as u32
    }

    /// Threads of each combining pass, in order; the last is 1 (empty when the first pass has
    /// a single thread).
    pub fn combine_passes(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut threads = self.first_pass_threads();
        while threads > 1 {
            threads = (2 * threads).div_ceil(self.combine_segment);
            out.push(threads);
        }
        out
    }

    /// Threads of the bucket reduction: W * (B / reduce_chunk).
    pub fn reduce_threads(&self) -> u32 {
        self.windows * (self.buckets / self.reduce_chunk)
    }

    /// Points per window after the bucket reduction and after each group-sum pass; the last
    /// is 1.
    pub fn group_passes(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut per = self.buckets / self.reduce_chunk;
        out.push(per);
        while per > 1 {
            per = per.div_ceil(self.group);
            out.push(per);
        }
        out
    }

    /// Lengths of the scan levels: the counts (keys + 1), then the chunk sums of each level
    /// until one chunk holds everything.
    pub fn scan_levels(&self) -> Vec<u32> {
        let mut out = vec![self.keys() + 1];
        let mut len = self.keys() + 1;
        while len > self.scan_chunk {
            len = len.div_ceil(self.scan_chunk);
            out.push(len);
        }
        out
    }

    /// Bytes of every temporary the launcher allocates for one G1 MSM, one entry per allocation
    /// (the bases and the scalars not counted). Every group-sum pass is listed although each
    /// frees its predecessor, so the list bounds what is live at once.
    pub fn temp_allocations(&self) -> Vec<u64> {
        self.temp_allocations_of::<G1>()
    }

    /// [`MsmPlan::temp_allocations`] for the group `C` (its buckets and window sums).
    pub fn temp_allocations_of<C: MsmCurve>(&self) -> Vec<u64> {
        let xyzz = C::XYZZ_BYTES;
        let keys = u64::from(self.keys());
        let slots = 2 * u64::from(self.first_pass_threads());
        let slots2 = 2 * u64::from(self.combine_passes().first().copied().unwrap_or(1));
        // `alloc(len)` allocates at least one element.
        let n = (self.n as u64).max(1);
        let mut out = vec![
            (keys + 1) * 4,                                 // offsets (counts, then their scan)
            n * 32,                                         // prepared scalars
            keys.max(1) * 4,                                // scatter cursor
            self.max_entries().max(1) * 8,                  // sorted entries
            keys.max(1) * xyzz,                             // buckets
            slots * 4,                                      // slot keys, first set
            slots2 * 4,                                     // slot keys, second set
            slots * xyzz,                                   // slot points, first set
            slots2 * xyzz,                                  // slot points, second set
            u64::from(self.reduce_threads()).max(1) * xyzz, // bucket reduction
            u64::from(self.windows) * C::JACOBIAN_BYTES,    // window sums (Jacobian)
        ];
        out.extend(
            self.scan_levels()
                .iter()
                .skip(1)
                .map(|&l| u64::from(l).max(1) * 4),
        );
        out.extend(
            self.group_passes()
                .windows(2)
                .map(|w| u64::from(self.windows * w[1]).max(1) * xyzz),
        );
        out
    }

    /// What the temporaries of one G1 MSM charge a lease at most: every allocation of
    /// [`MsmPlan::temp_allocations`] rounded up as the allocator charges it
    /// ([`crate::ledger::charge_for`], whole 2 MiB pages). A reservation of this much plus the
    /// bases' and scalars' charges always holds the MSM.
    pub fn temp_bytes(&self) -> u64 {
        self.temp_bytes_of::<G1>()
    }

    /// [`MsmPlan::temp_bytes`] for the group `C`.
    pub fn temp_bytes_of<C: MsmCurve>(&self) -> u64 {
        self.temp_allocations_of::<C>()
            .into_iter()
            .map(crate::ledger::charge_for)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_prepared_scalar() {
        for c in MIN_WINDOW_BITS..=MAX_WINDOW_BITS {
            let p = MsmPlan::with_window_bits(1000, c, 132).expect("valid window");
            assert!(p.windows * c >= SCALAR_BITS, "c = {c}");
            assert!(
                (p.windows - 1) * c < SCALAR_BITS,
                "c = {c}: a window too many"
            );
            assert!(p.keys() < 1 << 31);
            assert_eq!(p.buckets % p.reduce_chunk, 0);
            assert!(p.reduce_chunk.is_power_of_two());
        }
    }

    #[test]
    fn the_cost_model_grows_the_window_with_n() {
        let mut last = 0;
        for log in 0..=26 {
            let c = MsmPlan::best_window_bits(1 << log);
            assert!(c >= last, "2^{log}: {c} < {last}");
            last = c;
        }
        assert!((15..=20).contains(&MsmPlan::best_window_bits(1 << 24)));
        assert!((10..=15).contains(&MsmPlan::best_window_bits(1 << 16)));
    }

    #[test]
    fn passes_shrink_to_one_thread() {
        for n in [0usize, 1, 2, 3, 100, 4097, 1 << 20, 1 << 24, 1 << 26] {
            let p = MsmPlan::new(n, 132).expect("valid plan");
            let passes = p.combine_passes();
            if p.first_pass_threads() > 1 {
                assert_eq!(passes.last(), Some(&1), "n = {n}");
            } else {
                assert!(passes.is_empty());
            }
            assert!(
                passes.windows(2).all(|w| w[1] < w[0]),
                "n = {n}: {passes:?}"
            );
            let groups = p.group_passes();
            assert_eq!(groups.last(), Some(&1));
            assert_eq!(groups[0], p.buckets / p.reduce_chunk);
            let scan = p.scan_levels();
            assert!(*scan.last().expect("one level") <= p.scan_chunk);
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(matches!(
            MsmPlan::with_window_bits(10, 1, 132),
            Err(MsmError::InvalidWindow { bits: 1 })
        ));
        assert!(matches!(
            MsmPlan::with_window_bits(10, 24, 132),
            Err(MsmError::InvalidWindow { bits: 24 })
        ));
        assert!(matches!(
            MsmPlan::new(MAX_POINTS + 1, 132),
            Err(MsmError::TooManyPoints { .. })
        ));
    }

    #[test]
    fn temp_bytes_counts_the_allocators_rounding_per_allocation() {
        use crate::ledger::{CHARGE_GRANULARITY, charge_for};
        for n in [0usize, 1, 100, 5000, 1 << 16, 1 << 20] {
            let p = MsmPlan::new(n, 132).expect("valid plan");
            let allocs = p.temp_allocations();
            let raw: u64 = allocs.iter().sum();
            assert_eq!(p.temp_bytes() % CHARGE_GRANULARITY, 0, "n = {n}");
            assert!(p.temp_bytes() >= raw, "n = {n}");
            // Every allocation costs at least one page: the estimate the 2 MiB rounding broke.
            assert!(p.temp_bytes() >= allocs.len() as u64 * CHARGE_GRANULARITY);
            assert_eq!(
                p.temp_bytes(),
                allocs.iter().map(|&b| charge_for(b)).sum::<u64>()
            );
        }
    }

    #[test]
    fn g2_temporaries_are_the_g1_ones_with_twice_the_point_bytes() {
        use crate::msm::curve::G2;
        for n in [1usize, 1000, 1 << 16, 1 << 22] {
            let p = MsmPlan::new(n, 132).expect("valid plan");
            let (g1, g2) = (p.temp_allocations(), p.temp_allocations_of::<G2>());
            assert_eq!(g1.len(), g2.len());
            let keys = u64::from(p.keys());
            // Buckets are the largest point allocation: 192 bytes each in G1, 384 in G2.
            assert!(
                g1.contains(&(keys * 192)) && g2.contains(&(keys * 384)),
                "n = {n}"
            );
            // Small MSMs round to the same 2 MiB pages; large ones charge more for G2.
            assert!(p.temp_bytes_of::<G2>() >= p.temp_bytes(), "n = {n}");
            if n >= 1 << 16 {
                assert!(p.temp_bytes_of::<G2>() > p.temp_bytes(), "n = {n}");
            }
            // The sorted entries (8 bytes each) do not depend on the group.
            assert!(g2.contains(&(p.max_entries() * 8)));
        }
    }

    #[test]
    fn the_2_pow_26_plan_fits_an_h200() {
        let p = MsmPlan::new(1 << 26, 132).expect("valid plan");
        // Temporaries plus 2^26 bases (96 B) and scalars (32 B) must fit in 141 GB with room.
        let total = p.temp_bytes() + (1u64 << 26) * 128;
        assert!(total < 40 << 30, "{total} bytes");
    }
}
