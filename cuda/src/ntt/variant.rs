//! Which kernels run an NTT plan: the default, and (with the `bench-variants` feature) the
//! earlier versions and candidates that the benchmark binary times against it.

use super::plan;
use crate::kernels::{self, KernelModule};

/// Which kernels run a plan. [`NttVariant::Radix4Occ4`] is the default (on the H200 the fastest
/// for the H polynomial, level with [`NttVariant::Radix4`] at 2^20..2^24; [`NttVariant::Radix`]
/// is 3 % faster at 2^27); the others are the earlier versions and candidates, kept so that one
/// GPU run can time them side by side (gpud-cuda-bench, BENCHMARKS.md).
///
/// Public only with the `bench-variants` feature; without it the engine always runs the
/// default, and the other plans stay unreachable (their kernels are part of `ntt.cu`, which
/// the host tests check, so the code stays).
#[cfg_attr(
    not(feature = "bench-variants"),
    allow(
        dead_code,
        reason = "only the default is chosen without bench-variants"
    )
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NttVariant {
    /// The first measured version: one shared-memory stage per barrier (`ntt_pass_kernel`),
    /// pairwise bit reversal, passes of at most 8 stages, and the field multiplication whose
    /// reduction products ptxas splits in two (module `ntt_v0`).
    #[cfg(feature = "bench-variants")]
    Baseline,
    /// [`NttVariant::Baseline`] with the current field multiplication.
    LegacyPasses,
    /// Register-radix passes (`ntt_radix_kernel`), tiled bit reversal, passes of at most 8
    /// stages.
    Radix8,
    /// Register-radix passes, tiled bit reversal, passes of at most 9 stages (2^27 in three
    /// passes instead of four).
    Radix,
    /// [`NttVariant::Radix`] with 4 elements per thread (`ntt_radix4_kernel`: rounds of at
    /// most 2 stages, 256 threads, 80 registers instead of 124).
    Radix4,
    /// [`NttVariant::Radix4`] with the Karatsuba field multiplication (module `ntt_kara`:
    /// 96 wide multiply-adds per product instead of 111.5, more additions).
    #[cfg(feature = "bench-variants")]
    Radix4Karatsuba,
    /// [`NttVariant::Radix4`] compiled for 4 blocks per multiprocessor
    /// (`ntt_radix4_occ4_kernel`: 64 registers, some spilled, instead of 80). The default: H
    /// 2^24 1.5 % faster than [`NttVariant::Radix4`], NTT 2^27 2 % faster.
    Radix4Occ4,
}

impl NttVariant {
    /// Every variant, oldest first.
    #[cfg(feature = "bench-variants")]
    pub const ALL: [NttVariant; 7] = [
        NttVariant::Baseline,
        NttVariant::LegacyPasses,
        NttVariant::Radix8,
        NttVariant::Radix,
        NttVariant::Radix4,
        NttVariant::Radix4Karatsuba,
        NttVariant::Radix4Occ4,
    ];

    /// Most stages per pass in this variant's plans.
    pub fn max_stages(self) -> u32 {
        match self {
            #[cfg(feature = "bench-variants")]
            NttVariant::Radix4Karatsuba => plan::MAX_PASS_STAGES,
            NttVariant::Radix | NttVariant::Radix4 | NttVariant::Radix4Occ4 => {
                plan::MAX_PASS_STAGES
            }
            _ => plan::LEGACY_PASS_STAGES,
        }
    }

    /// Whether passes run on a register-radix kernel.
    pub fn radix(self) -> bool {
        self.pass_kernel() != PassKernel::Stages
    }

    pub(super) fn pass_kernel(self) -> PassKernel {
        match self {
            #[cfg(feature = "bench-variants")]
            NttVariant::Baseline => PassKernel::Stages,
            NttVariant::LegacyPasses => PassKernel::Stages,
            NttVariant::Radix8 | NttVariant::Radix => PassKernel::Radix,
            #[cfg(feature = "bench-variants")]
            NttVariant::Radix4Karatsuba => PassKernel::Radix4,
            NttVariant::Radix4 => PassKernel::Radix4,
            NttVariant::Radix4Occ4 => PassKernel::Radix4Occ4,
        }
    }

    pub(super) fn module(self) -> &'static KernelModule {
        match self {
            #[cfg(feature = "bench-variants")]
            NttVariant::Baseline => &kernels::NTT_V0,
            #[cfg(feature = "bench-variants")]
            NttVariant::Radix4Karatsuba => &kernels::NTT_KARA,
            _ => &kernels::NTT,
        }
    }
}

/// The kernel that runs a plan's passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PassKernel {
    /// `ntt_pass_kernel`: one shared-memory stage per barrier.
    Stages,
    /// `ntt_radix_kernel`: 8 elements per thread.
    Radix,
    /// `ntt_radix4_kernel`: 4 elements per thread.
    Radix4,
    /// `ntt_radix4_occ4_kernel`: the same, 4 blocks per multiprocessor.
    Radix4Occ4,
}
