//! What the GPU runs for a transform: passes, permutations and scalings, as plain data.
//!
//! The same step list drives the kernel launches and the CPU tests (which run the kernels'
//! code on the host), so the planning is tested without a GPU.

use cudarc::driver::DeviceRepr;

use crate::error::{Error, Result};

/// Largest supported transform: 2^27 points (the power tables cover exponents below 2^27; the
/// field's two-adicity is 32).
pub const MAX_LOG_N: u32 = 27;
/// Most radix-2 stages one pass runs in shared memory (the default plan: 2^27 in three passes).
pub const MAX_PASS_STAGES: u32 = 9;
/// The first version's limit (2^27 in four passes), kept to compare plans on the GPU.
pub const LEGACY_PASS_STAGES: u32 = 8;
/// A pass's thread block holds 2^10 elements: 32 KiB of shared memory.
pub const BLOCK_LOG_ELEMS: u32 = 10;
/// Threads per block of the legacy pass kernel (`ntt_pass_kernel`).
pub const PASS_THREADS: u32 = 256;
/// log2 of the elements a thread of the radix pass kernel keeps in registers (ntt.cuh:
/// NTTR_MAX_LOG_RADIX).
pub const RADIX_LOG: u32 = 3;
/// Bits of a bit-reversal tile side (ntt.cuh: NTT_BR_TILE_BITS): transforms of 2^(2 * this)
/// points or more use the tiled bit reversal.
pub const BITREV_TILE_BITS: u32 = 4;
/// Threads per block of the tiled bit reversal.
pub const BITREV_TILE_THREADS: u32 = 1 << (2 * BITREV_TILE_BITS);

/// Whether the permuting steps (bit reversal, the H pointwise step) of a transform of 2^log_n
/// points run by 16×16 tiles: with the register-radix kernels, from 2^8 points (a tile pair
/// needs the 8 bits); the first versions permute element by element.
pub fn permutes_by_tiles(radix_kernels: bool, log_n: u32) -> bool {
    radix_kernels && log_n >= 2 * BITREV_TILE_BITS
}

/// The kernel's `ntt_pass` argument (ntt.cuh); field order and types must match.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassParams {
    /// Transform size 2^log_n.
    pub log_n: u32,
    /// Distance 2^log_stride between the elements of one sub-problem.
    pub log_stride: u32,
    /// Stages in this pass.
    pub k: u32,
    /// Sub-problems per block, as a power of two.
    pub log_subs: u32,
    /// Elements in the whole batch.
    pub total: u64,
    /// 1 for omega^-1.
    pub inverse: u32,
    /// 1 for DIT order.
    pub dit: u32,
    /// Multiply by the step's power table: [`SCALE_NONE`], [`SCALE_ON_LOAD`] or
    /// [`SCALE_ON_STORE`].
    pub scale: u32,
    /// 1 to index the power table by the bit-reversed position.
    pub scale_bitrev: u32,
}

/// No scaling in a pass.
pub const SCALE_NONE: u32 = 0;
/// Scale elements as the pass loads them (before its butterflies).
pub const SCALE_ON_LOAD: u32 = 1;
/// Scale elements before the pass stores them (after its butterflies).
pub const SCALE_ON_STORE: u32 = 2;

// SAFETY: repr(C) plain integers, laid out like the kernel's struct (checked in tests).
unsafe impl DeviceRepr for PassParams {}

impl PassParams {
    /// Sub-problems over the batch.
    pub fn subproblems(&self) -> u64 {
        self.total >> self.k
    }

    /// Thread blocks of the launch.
    pub fn blocks(&self) -> u64 {
        self.subproblems().div_ceil(1 << self.log_subs)
    }

    /// Threads per block of the radix pass kernel (ntt.cuh: nttr_threads).
    pub fn radix_threads(&self) -> u32 {
        self.radix_threads_for(RADIX_LOG)
    }

    /// Threads per block of a radix pass kernel keeping at most 2^log_radix elements per
    /// thread (3: `ntt_radix_kernel`, 2: `ntt_radix4_kernel`).
    pub fn radix_threads_for(&self, log_radix: u32) -> u32 {
        let r = self.k.min(log_radix);
        1 << (self.log_subs + self.k - r)
    }

    /// Dynamic shared memory of the radix pass kernel: 32 bytes per element of the block.
    pub fn radix_shared_bytes(&self) -> u32 {
        32 << (self.log_subs + self.k)
    }

    /// Dynamic shared memory of the legacy pass kernel in bytes: 8 limb planes of the block's
    /// elements plus the bank padding between sub-problems (ntt.cuh: ntt_plane).
    pub fn shared_bytes(&self) -> u32 {
        let pad = if self.k >= 5 {
            (32 >> self.log_subs) << self.log_subs
        } else {
            0
        };
        32 * ((1 << (self.log_subs + self.k)) + pad)
    }
}

/// Which constant a power table carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Factor {
    /// 1.
    One,
    /// 1/n.
    InvN,
    /// 1/n times 1/Z(g), Z(x) = x^n - 1 the domain's vanishing polynomial at the coset shift g.
    InvNInvZ,
}

/// The base of a power table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    /// The n-th root of unity omega_n.
    Omega,
    /// The coset shift g (the field's multiplicative generator, 7, as bellperson uses).
    Gen,
    /// g^-1.
    GenInv,
    /// 1 (a constant table).
    One,
}

/// A table the steps read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableKey {
    /// omega_n^e for e < n/2, expanded on the device from `Powers { Omega, One }`.
    Twiddles {
        /// log2 n.
        log_n: u32,
    },
    /// factor * base^e for e < 2^27, as two small tables (see ntt.cuh).
    Powers {
        /// log2 n (fixes omega_n and 1/n).
        log_n: u32,
        /// The base.
        base: Base,
        /// The constant.
        factor: Factor,
    },
}

/// One kernel launch. `region` names the buffer (polynomial or batch) it works on: the caller
/// maps region numbers to device buffers (region 0 for a standalone transform; 0, 1, 2 for the
/// H inputs a, b, c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A pass of butterflies; reads `TableKey::Twiddles { log_n }`, and `scale` (a
    /// `TableKey::Powers`) when `params.scale` asks for scaling.
    Pass {
        /// The buffer.
        region: usize,
        /// The pass.
        params: PassParams,
        /// The power table of the scaling folded into this pass.
        scale: Option<TableKey>,
    },
    /// Bit-reversal permutation of each polynomial.
    Bitrev {
        /// The buffer.
        region: usize,
        /// Elements.
        total: u64,
        /// log2 of the polynomial size.
        log_n: u32,
    },
    /// Groth16 H: a <- a * b - c, written bit-reversed.
    Pointwise {
        /// Region of a (overwritten with the result).
        a: usize,
        /// Region of b.
        b: usize,
        /// Region of c.
        c: usize,
        /// log2 of the polynomial size.
        log_n: u32,
    },
}

/// Splits `log_n` stages into passes of at most [`MAX_PASS_STAGES`], as even as possible
/// (larger first).
pub fn split_stages(log_n: u32) -> Vec<u32> {
    split_stages_max(log_n, MAX_PASS_STAGES)
}

/// Splits `log_n` stages into passes of at most `max_stages` (1..=10), as even as possible.
pub fn split_stages_max(log_n: u32, max_stages: u32) -> Vec<u32> {
    if log_n == 0 {
        return Vec::new();
    }
    let max_stages = max_stages.clamp(1, BLOCK_LOG_ELEMS);
    let passes = log_n.div_ceil(max_stages);
    let (q, r) = (log_n / passes, log_n % passes);
    (0..passes).map(|i| q + u32::from(i < r)).collect()
}

fn ceil_log2(x: u64) -> u32 {
    64 - x.saturating_sub(1).leading_zeros()
}

/// The passes of one transform of `batch` polynomials of 2^log_n points stored back to back.
/// DIF takes natural order to bit-reversed; DIT bit-reversed to natural.
pub fn passes(log_n: u32, batch: u64, inverse: bool, dit: bool) -> Vec<PassParams> {
    passes_max(log_n, batch, inverse, dit, MAX_PASS_STAGES)
}

/// [`passes`] with passes of at most `max_stages` stages.
pub fn passes_max(
    log_n: u32,
    batch: u64,
    inverse: bool,
    dit: bool,
    max_stages: u32,
) -> Vec<PassParams> {
    let total = batch << log_n;
    let mut out = Vec::new();
    let mut remaining = log_n;
    for k in split_stages_max(log_n, max_stages) {
        // DIF: the first pass takes the stages with the largest half-sizes.
        remaining -= k;
        let subs = total >> k;
        let log_subs = (BLOCK_LOG_ELEMS - k).min(ceil_log2(subs));
        out.push(PassParams {
            log_n,
            log_stride: remaining,
            k,
            log_subs,
            total,
            inverse: u32::from(inverse),
            dit: u32::from(dit),
            scale: SCALE_NONE,
            scale_bitrev: 0,
        });
    }
    if dit {
        // DIT runs the same sub-problems in the opposite order (small half-sizes first).
        out.reverse();
    }
    out
}

/// The kind of a standalone transform; all take and give natural order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NttKind {
    /// Evaluations on the subgroup from coefficients.
    Forward,
    /// Coefficients from evaluations on the subgroup (includes the 1/n).
    Inverse,
    /// Evaluations on the coset g * subgroup from coefficients.
    CosetForward,
    /// Coefficients from evaluations on the coset.
    CosetInverse,
}

/// Checks a transform size.
pub fn check_log_n(log_n: u32) -> Result<()> {
    if (1..=MAX_LOG_N).contains(&log_n) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "NTT size 2^{log_n} outside 2^1..2^{MAX_LOG_N}"
        )))
    }
}

/// Where a transform's scaling goes.
#[derive(Debug, Clone, Copy)]
struct Scaling {
    table: TableKey,
    /// Into the first pass's loads (else the last pass's stores).
    on_load: bool,
    /// Index by bit-reversed position (the data is in bit-reversed order there).
    bitrev: bool,
}

fn pass_steps(
    region: usize,
    log_n: u32,
    batch: u64,
    inverse: bool,
    dit: bool,
    scaling: Option<Scaling>,
    max_stages: u32,
) -> Vec<Step> {
    let mut params = passes_max(log_n, batch, inverse, dit, max_stages);
    let mut scale = vec![None; params.len()];
    if let Some(sc) = scaling {
        let i = if sc.on_load { 0 } else { params.len() - 1 };
        params[i].scale = if sc.on_load {
            SCALE_ON_LOAD
        } else {
            SCALE_ON_STORE
        };
        params[i].scale_bitrev = u32::from(sc.bitrev);
        scale[i] = Some(sc.table);
    }
    params
        .into_iter()
        .zip(scale)
        .map(|(params, scale)| Step::Pass {
            region,
            params,
            scale,
        })
        .collect()
}

/// The steps of a standalone transform of `batch` polynomials (natural order in and out):
/// DIF passes, then a bit-reversal. The coset shift g^i is folded into the first pass's loads;
/// 1/n (and g^-i) into the last pass's stores, where the data is bit-reversed.
pub fn ntt_steps(kind: NttKind, log_n: u32, batch: u64) -> Vec<Step> {
    ntt_steps_max(kind, log_n, batch, MAX_PASS_STAGES)
}

/// [`ntt_steps`] with passes of at most `max_stages` stages.
pub fn ntt_steps_max(kind: NttKind, log_n: u32, batch: u64, max_stages: u32) -> Vec<Step> {
    let total = batch << log_n;
    let (inverse, scaling) = match kind {
        NttKind::Forward => (false, None),
        NttKind::CosetForward => (
            false,
            Some(Scaling {
                table: TableKey::Powers {
                    log_n,
                    base: Base::Gen,
                    factor: Factor::One,
                },
                on_load: true,
                bitrev: false,
            }),
        ),
        NttKind::Inverse | NttKind::CosetInverse => {
            let base = if kind == NttKind::Inverse {
                Base::One
            } else {
                Base::GenInv
            };
            (
                true,
                Some(Scaling {
                    table: TableKey::Powers {
                        log_n,
                        base,
                        factor: Factor::InvN,
                    },
                    on_load: false,
                    bitrev: true,
                }),
            )
        }
    };
    let mut steps = pass_steps(0, log_n, batch, inverse, false, scaling, max_stages);
    steps.push(Step::Bitrev {
        region: 0,
        total,
        log_n,
    });
    steps
}

/// Groth16 H, for the input polynomial in `region` (evaluations on the subgroup, natural order):
/// to coefficients (DIF, bit-reversed) with g^i / n applied as the last pass stores, then to
/// evaluations on the coset (DIT, natural order). Inputs are independent, so each runs as soon
/// as its upload lands.
pub fn h_input_steps(log_n: u32, region: usize) -> Vec<Step> {
    h_input_steps_max(log_n, region, MAX_PASS_STAGES)
}

/// [`h_input_steps`] with passes of at most `max_stages` stages.
pub fn h_input_steps_max(log_n: u32, region: usize, max_stages: u32) -> Vec<Step> {
    let scaling = Scaling {
        table: TableKey::Powers {
            log_n,
            base: Base::Gen,
            factor: Factor::InvN,
        },
        on_load: false,
        bitrev: true,
    };
    let mut steps = pass_steps(region, log_n, 1, true, false, Some(scaling), max_stages);
    steps.extend(pass_steps(region, log_n, 1, false, true, None, max_stages));
    steps
}

/// Groth16 H after the three inputs: a * b - c on the coset (written bit-reversed), back to
/// coefficients (DIT inverse, natural order) with g^-i / (n Z(g)) applied as the last pass
/// stores (the division by Z). The result is in a.
pub fn h_tail_steps(log_n: u32, a: usize, b: usize, c: usize) -> Vec<Step> {
    h_tail_steps_max(log_n, a, b, c, MAX_PASS_STAGES)
}

/// [`h_tail_steps`] with passes of at most `max_stages` stages.
pub fn h_tail_steps_max(log_n: u32, a: usize, b: usize, c: usize, max_stages: u32) -> Vec<Step> {
    let scaling = Scaling {
        table: TableKey::Powers {
            log_n,
            base: Base::GenInv,
            factor: Factor::InvNInvZ,
        },
        on_load: false,
        bitrev: false,
    };
    let mut steps = vec![Step::Pointwise { a, b, c, log_n }];
    steps.extend(pass_steps(
        a,
        log_n,
        1,
        true,
        true,
        Some(scaling),
        max_stages,
    ));
    steps
}

/// Every table a step list reads (twiddle tables once per size).
pub fn tables_used(steps: &[Step]) -> Vec<TableKey> {
    let mut out: Vec<TableKey> = Vec::new();
    for s in steps {
        if let Step::Pass { params, scale, .. } = *s {
            let twiddles = TableKey::Twiddles {
                log_n: params.log_n,
            };
            for k in [Some(twiddles), scale].into_iter().flatten() {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_split_evenly_into_passes_of_at_most_the_limit() {
        assert_eq!(split_stages(1), vec![1]);
        assert_eq!(split_stages(9), vec![9]);
        assert_eq!(split_stages(10), vec![5, 5]);
        assert_eq!(split_stages(24), vec![8, 8, 8]);
        assert_eq!(split_stages(27), vec![9, 9, 9]);
        assert_eq!(split_stages_max(9, LEGACY_PASS_STAGES), vec![5, 4]);
        assert_eq!(split_stages_max(27, LEGACY_PASS_STAGES), vec![7, 7, 7, 6]);
        for max in [LEGACY_PASS_STAGES, MAX_PASS_STAGES] {
            for l in 1..=MAX_LOG_N {
                let s = split_stages_max(l, max);
                assert_eq!(s.iter().sum::<u32>(), l);
                assert!(s.iter().all(|&k| (1..=max).contains(&k)));
                assert_eq!(s.len() as u32, l.div_ceil(max));
            }
        }
    }

    #[test]
    fn radix_launch_shapes_fit_the_kernel() {
        for max in [LEGACY_PASS_STAGES, MAX_PASS_STAGES] {
            for l in 1..=MAX_LOG_N {
                for batch in [1, 3] {
                    for p in passes_max(l, batch, false, false, max) {
                        assert!(p.radix_threads() <= 128, "{p:?}");
                        assert!(p.radix_threads() >= 1);
                        assert!(p.radix_threads_for(2) <= 256, "{p:?}");
                        assert!(p.radix_shared_bytes() <= 32 << BLOCK_LOG_ELEMS);
                        assert!(p.shared_bytes() <= 48 << 10);
                    }
                }
            }
        }
    }

    #[test]
    fn passes_cover_every_stage_once_in_order() {
        for l in 1..=MAX_LOG_N {
            for dit in [false, true] {
                let p = passes(l, 3, false, dit);
                // Each pass covers stages whose half-size exponents are
                // [log_stride, log_stride + k); together they tile 0..l.
                let mut ranges: Vec<(u32, u32)> = p
                    .iter()
                    .map(|q| (q.log_stride, q.log_stride + q.k))
                    .collect();
                if !dit {
                    ranges.reverse();
                }
                let mut next = 0;
                for (lo, hi) in ranges {
                    assert_eq!(lo, next);
                    next = hi;
                }
                assert_eq!(next, l);
                for q in &p {
                    assert!(q.log_subs + q.k <= BLOCK_LOG_ELEMS);
                    assert_eq!(q.total, 3 << l);
                }
            }
        }
    }

    #[test]
    fn pass_params_match_the_kernel_struct_layout() {
        assert_eq!(std::mem::size_of::<PassParams>(), 40);
        assert_eq!(std::mem::align_of::<PassParams>(), 8);
    }

    #[test]
    fn every_scaling_is_folded_into_exactly_one_pass() {
        let count = |steps: &[Step]| {
            steps
                .iter()
                .filter(|s| matches!(s, Step::Pass { params, scale: Some(_), .. } if params.scale != SCALE_NONE))
                .count()
        };
        for l in [1, 9, 27] {
            assert_eq!(count(&ntt_steps(NttKind::Forward, l, 1)), 0);
            for k in [
                NttKind::Inverse,
                NttKind::CosetForward,
                NttKind::CosetInverse,
            ] {
                assert_eq!(count(&ntt_steps(k, l, 1)), 1);
            }
            assert_eq!(count(&h_input_steps(l, 0)), 1);
            assert_eq!(count(&h_tail_steps(l, 0, 1, 2)), 1);
        }
    }

    #[test]
    fn sizes_outside_the_supported_range_are_refused() {
        assert!(check_log_n(0).is_err());
        assert!(check_log_n(28).is_err());
        assert!(check_log_n(1).is_ok());
        assert!(check_log_n(27).is_ok());
    }
}
