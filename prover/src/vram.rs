//! How much device memory a proof needs: the VRAM the leases ask gpud for.
//!
//! The numbers are what the CUDA engine's allocations *charge* (each allocation rounded up to
//! the allocator's 2 MiB pages, [`gpud_cuda::ledger::charge_for`]), computed from the same plans
//! the engine runs ([`gpud_cuda::hpoly::charged_bytes`], [`MsmPlan::temp_bytes`]), so a lease
//! of the estimate always holds the phase. They split in two:
//!
//! **Resident** (one VRAM-only lease per prover process and key, held across partitions):
//!
//! | buffer | charge |
//! |---|---|
//! | G1 bases of the H, L, A and B_G1 queries (96 B per affine point), one allocation each | `Σ_Q ⌈96·|Q|⌉₂ₘ` |
//! | with G2 on the GPU: the B_G2 bases (192 B per affine point) | `⌈192·|B|⌉₂ₘ` |
//!
//! **Working** (each partition's {VRAM + compute} lease; steps run one after the other, so
//! the lease is the largest step):
//!
//! | step | charge |
//! |---|---|
//! | H polynomial: `a`, `b`, `c` padded to `m = 2^k`, twiddles (`ω^j`, `j < m/2`) and the power tables of the coset and scaling factors | `3·⌈32·m⌉₂ₘ + ⌈16·m⌉₂ₘ + tables` |
//! | H MSM: `h` stays on the device (`m` scalars) + the MSM's temporaries for `m − 1` points | `⌈32·m⌉₂ₘ + T(m − 1)` |
//! | L, A, B_G1 MSMs: the query's scalars + temporaries | `max_Q ⌈32·|Q|⌉₂ₘ + T(|Q|)` |
//! | with G2 on the GPU, the B_G2 MSM: the B scalars + G2 temporaries | `⌈32·|B|⌉₂ₘ + T₂(|B|)` |
//!
//! where `T(n)` is [`MsmPlan::temp_bytes`] (sorted entries `8·W·n` bytes dominate, `W` windows
//! of the plan's `c` bits; buckets `192·W·2^(c−1)`), and `⌈x⌉₂ₘ` rounds up to 2 MiB. Without
//! resident bases (`--resident-bases false`) each MSM step also holds its query's bases
//! (uploaded for that MSM and freed after it), and there is no resident lease. `T₂(n)` is
//! [`MsmPlan::temp_bytes_of`] for G2: the same plan with 384-byte buckets and partial sums.
//!
//! With the G2 MSM in the CPU tail (the CPU engine, or the CUDA engine's `--g2 cpu`) the G2
//! rows are absent ([`estimate`], [`estimate_for`]); [`estimate_with_g2`] includes them. The MSM
//! temporaries depend a little on the GPU's multiprocessor count (thread counts of the
//! passes); [`estimate`] assumes an H200's 132, [`estimate_for`] takes the device's.

use gpud_cuda::ledger::charge_for;
use gpud_cuda::msm::G2;
use gpud_cuda::msm::plan::MsmPlan;
use serde::Serialize;

/// Multiprocessors assumed when the device is not known (an H200).
pub const DEFAULT_MULTIPROCESSORS: u32 = 132;

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

/// The device memory of one proof, in bytes charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VramEstimate {
    /// The G1 bases (H, L, A, B_G1), and the B_G2 bases when G2 runs on the GPU, kept resident
    /// under their own lease.
    pub resident: u64,
    /// Peak of the H polynomial step.
    pub h_step: u64,
    /// Peak of the MSM steps with the bases resident elsewhere.
    pub msm_step: u64,
    /// Peak of the MSM steps when each query's bases are uploaded for its MSM.
    pub msm_step_with_bases: u64,
}

impl VramEstimate {
    /// What a partition's phase lease needs when the bases are resident (`resident = true`)
    /// or uploaded during the phase (`false`).
    pub fn phase_lease(&self, resident: bool) -> u64 {
        let msm = if resident {
            self.msm_step
        } else {
            self.msm_step_with_bases
        };
        self.h_step.max(msm)
    }

    /// The working memory of a phase with resident bases.
    pub fn working(&self) -> u64 {
        self.phase_lease(true)
    }

    /// Both leases together (resident bases and one phase).
    pub fn total(&self) -> u64 {
        self.resident + self.working()
    }
}

const FR: u64 = 32;
const G1_AFFINE: u64 = 96;
const G2_AFFINE: u64 = 192;

/// What an MSM's temporaries charge over `n` points (nothing for an empty MSM).
fn msm_temps(n: usize, multiprocessors: u32) -> u64 {
    if n == 0 {
        return 0;
    }
    MsmPlan::new(n, multiprocessors).map_or(u64::MAX, |p| p.temp_bytes())
}

/// What a G2 MSM's temporaries charge over `n` points.
fn g2_msm_temps(n: usize, multiprocessors: u32) -> u64 {
    if n == 0 {
        return 0;
    }
    MsmPlan::new(n, multiprocessors).map_or(u64::MAX, |p| p.temp_bytes_of::<G2>())
}

/// What a G2 MSM of `n` points from host scalars charges: its bases on the device, the
/// scalars and the temporaries.
pub fn g2_msm_charge(n: usize, multiprocessors: u32) -> u64 {
    g2_bases_charge(n)
        .saturating_add(charge_for(FR * n.max(1) as u64))
        .saturating_add(g2_msm_temps(n, multiprocessors))
}

/// What the bases of a G1 query of `n` points charge (at least one element is allocated).
pub fn bases_charge(n: usize) -> u64 {
    charge_for(G1_AFFINE * n.max(1) as u64)
}

/// What the bases of a G2 query of `n` points charge.
pub fn g2_bases_charge(n: usize) -> u64 {
    charge_for(G2_AFFINE * n.max(1) as u64)
}

/// [`estimate_for`] on a GPU with [`DEFAULT_MULTIPROCESSORS`].
pub fn estimate(shape: &KeyShape, log_domain: u32) -> VramEstimate {
    estimate_for(shape, log_domain, DEFAULT_MULTIPROCESSORS)
}

/// The VRAM of one proof with key `shape` over a domain of `2^log_domain` on a GPU with
/// `multiprocessors` SMs, the G2 MSM in the CPU tail.
pub fn estimate_for(shape: &KeyShape, log_domain: u32, multiprocessors: u32) -> VramEstimate {
    estimate_with_g2(shape, log_domain, multiprocessors, false)
}

/// [`estimate_for`], with the B_G2 MSM in the GPU phase when `g2_on_gpu`: its bases join the
/// resident set (or its step, without residency) and its step joins the MSM steps.
pub fn estimate_with_g2(
    shape: &KeyShape,
    log_domain: u32,
    multiprocessors: u32,
    g2_on_gpu: bool,
) -> VramEstimate {
    let mut e = estimate_g1(shape, log_domain, multiprocessors);
    if g2_on_gpu && shape.b_g2 > 0 {
        let n = shape.b_g2;
        let step = charge_for(FR * n as u64).saturating_add(g2_msm_temps(n, multiprocessors));
        let bases = g2_bases_charge(n);
        e.resident = e.resident.saturating_add(bases);
        e.msm_step = e.msm_step.max(step);
        e.msm_step_with_bases = e.msm_step_with_bases.max(step.saturating_add(bases));
    }
    e
}

/// The `auto` G2 placement's rule: the B_G2 MSM goes on the GPU when the key has a B query and
/// the resident bases with B_G2 (when `resident_bases`) plus the phase lease with the G2 step
/// fit `device_mem` bytes. The domain is the key's own (`m = |H| + 1`).
pub fn g2_fits_on_gpu(
    shape: &KeyShape,
    multiprocessors: u32,
    resident_bases: bool,
    device_mem: u64,
) -> bool {
    if shape.b_g2 == 0 {
        return false;
    }
    let log_domain = (shape.h + 1).next_power_of_two().trailing_zeros();
    let e = estimate_with_g2(shape, log_domain, multiprocessors, true);
    let resident = if resident_bases { e.resident } else { 0 };
    resident.saturating_add(e.phase_lease(resident_bases)) <= device_mem
}

fn estimate_g1(shape: &KeyShape, log_domain: u32, multiprocessors: u32) -> VramEstimate {
    let m = 1usize << log_domain;
    let resident = [shape.h, shape.l, shape.a, shape.b_g1]
        .into_iter()
        .map(bases_charge)
        .sum();
    let h_step = gpud_cuda::hpoly::charged_bytes(m.max(2)).unwrap_or(u64::MAX);
    let h_msm = charge_for(FR * m as u64).saturating_add(msm_temps(shape.h, multiprocessors));
    let others = [shape.l, shape.a, shape.b_g1].map(|n| {
        if n == 0 {
            0
        } else {
            charge_for(FR * n as u64).saturating_add(msm_temps(n, multiprocessors))
        }
    });
    let msm_step = others.into_iter().fold(h_msm, u64::max);
    let with_bases = [shape.h, shape.l, shape.a, shape.b_g1]
        .into_iter()
        .zip([h_msm, others[0], others[1], others[2]])
        .map(|(n, step)| {
            if n == 0 {
                step
            } else {
                step.saturating_add(bases_charge(n))
            }
        })
        .fold(0, u64::max);
    VramEstimate {
        resident,
        h_step,
        msm_step,
        msm_step_with_bases: with_bases,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn shape(m: usize) -> KeyShape {
        KeyShape {
            h: m - 1,
            l: m,
            a: m,
            b_g1: m / 2,
            b_g2: m / 2,
        }
    }

    #[test]
    fn formula_at_2_20_matches_hand_computation() {
        let m = 1usize << 20;
        let e = estimate(&shape(m), 20);
        // Bases: 96 B per point, each query one allocation in whole 2 MiB pages.
        let page = |b: u64| b.div_ceil(2 * MIB) * 2 * MIB;
        assert_eq!(
            e.resident,
            page(96 * (m as u64 - 1)) + 2 * page(96 * m as u64) + page(96 * m as u64 / 2)
        );
        // The H step: three 32 MiB buffers, a 16 MiB twiddle table and some power tables.
        assert!(e.h_step >= 3 * 32 * MIB + 16 * MIB, "{}", e.h_step);
        assert!(
            e.h_step <= 3 * 32 * MIB + 16 * MIB + 16 * MIB,
            "{}",
            e.h_step
        );
        // The MSM step: scalars plus the plan's temporaries, the largest over the queries.
        let l_plan = MsmPlan::new(m, DEFAULT_MULTIPROCESSORS).unwrap();
        assert_eq!(e.msm_step, 32 * MIB + l_plan.temp_bytes());
        assert_eq!(e.msm_step_with_bases, e.msm_step + 96 * MIB);
        assert_eq!(e.phase_lease(true), e.h_step.max(e.msm_step));
        assert_eq!(e.total(), e.resident + e.working());
        // Four times the domain needs about four times the memory.
        let ratio = estimate(&shape(4 * m), 22).total() as f64 / e.total() as f64;
        assert!((3.0..4.3).contains(&ratio), "{ratio}");
    }

    #[test]
    fn g2_on_the_gpu_adds_its_bases_and_its_step() {
        let m = 1usize << 20;
        let s = shape(m);
        let g1 = estimate(&s, 20);
        let g2 = estimate_with_g2(&s, 20, DEFAULT_MULTIPROCESSORS, true);
        assert_eq!(estimate_with_g2(&s, 20, DEFAULT_MULTIPROCESSORS, false), g1);
        // 2^19 G2 bases of 192 bytes: 96 MiB more resident.
        assert_eq!(g2.resident, g1.resident + 96 * MIB);
        let plan = MsmPlan::new(s.b_g2, DEFAULT_MULTIPROCESSORS).unwrap();
        let step = 16 * MIB + plan.temp_bytes_of::<G2>();
        assert_eq!(g2.msm_step, g1.msm_step.max(step));
        assert_eq!(
            g2.msm_step_with_bases,
            g1.msm_step_with_bases.max(step + 96 * MIB)
        );
        // At 2^22 with B as large as L, the G2 step (384-byte buckets) is the largest.
        let full = KeyShape {
            b_g2: 1 << 22,
            ..shape(1 << 22)
        };
        let e1 = estimate(&full, 22);
        let e2 = estimate_with_g2(&full, 22, DEFAULT_MULTIPROCESSORS, true);
        assert!(
            e2.msm_step > e1.msm_step,
            "{} <= {}",
            e2.msm_step,
            e1.msm_step
        );
    }

    #[test]
    fn auto_puts_g2_on_the_gpu_exactly_when_the_phase_with_it_fits() {
        let s = shape(1 << 20);
        let sms = DEFAULT_MULTIPROCESSORS;
        let e = estimate_with_g2(&s, 20, sms, true);
        let resident_need = e.resident + e.phase_lease(true);
        assert!(g2_fits_on_gpu(&s, sms, true, resident_need));
        assert!(!g2_fits_on_gpu(&s, sms, true, resident_need - 1));
        let upload_need = e.phase_lease(false);
        assert!(g2_fits_on_gpu(&s, sms, false, upload_need));
        assert!(!g2_fits_on_gpu(&s, sms, false, upload_need - 1));
        // No B query: nothing to move.
        let no_b = KeyShape { b_g2: 0, ..s };
        assert!(!g2_fits_on_gpu(&no_b, sms, true, u64::MAX));
        // 2^22 on an H200 (141 GiB) fits; on a 1 GiB card it does not.
        let big = shape(1 << 22);
        assert!(g2_fits_on_gpu(&big, sms, true, 141 << 30));
        assert!(!g2_fits_on_gpu(&big, sms, true, 1 << 30));
    }

    #[test]
    fn small_keys_still_count_whole_pages_per_allocation() {
        let e = estimate(&shape(1 << 4), 4);
        // Four queries of a few points each still take a page each.
        assert_eq!(e.resident, 4 * 2 * MIB);
        assert!(e.h_step >= 3 * 2 * MIB);
        assert!(e.msm_step % (2 * MIB) == 0 && e.msm_step > 2 * MIB);
        // More multiprocessors, more first-pass threads and slots: never less memory.
        let big = estimate_for(&shape(1 << 16), 16, 264);
        let small = estimate_for(&shape(1 << 16), 16, 66);
        assert!(big.msm_step >= small.msm_step);
    }
}
