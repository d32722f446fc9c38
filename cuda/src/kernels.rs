//! The registry of kernel sources: every `.cu` module and the headers it includes, embedded in
//! the binary and compiled by NVRTC on first use (see [`crate::nvrtc`]).
//!
//! To add a module: put `foo.cu` (and any new `.cuh`) in `cuda/kernels/`, declare a [`Header`]
//! per new header and a [`KernelModule`] here, and list the module in [`ALL_MODULES`] so that
//! the CI compile test covers it. NVRTC sees only the headers a module lists, under their
//! file names, so `#include "fr.cuh"` works as it does on disk.
//!
//! The benchmark variants (the first NTT, the Karatsuba product, the field-product throughput
//! kernels, the MSM without inlining or register cap) exist only with the `bench-variants`
//! feature: the product builds and compiles only the kernels it runs.

/// A header that modules may `#include` by `name`.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    /// The include name, e.g. `fr.cuh`.
    pub name: &'static str,
    /// Its text.
    pub source: &'static str,
}

/// One translation unit of kernels.
#[derive(Debug)]
pub struct KernelModule {
    /// Short name, used in errors and in cache file names.
    pub name: &'static str,
    /// The `.cu` source.
    pub source: &'static str,
    /// Every header it includes, directly or not.
    pub headers: &'static [Header],
    /// Its `extern "C"` kernels, checked to exist after compilation.
    pub kernels: &'static [&'static str],
}

/// BLS12-381 scalar field arithmetic (host and device).
pub const FR_CUH: Header = Header {
    name: "fr.cuh",
    source: include_str!("../kernels/fr.cuh"),
};

/// NTT passes and helpers (host and device).
pub const NTT_CUH: Header = Header {
    name: "ntt.cuh",
    source: include_str!("../kernels/ntt.cuh"),
};

/// The NTT kernels, as a header for the variant build below.
#[cfg(feature = "bench-variants")]
pub const NTT_CU: Header = Header {
    name: "ntt.cu",
    source: include_str!("../kernels/ntt.cu"),
};

/// The kernels of the NTT module (and of its variant build).
pub const NTT_KERNELS: &[&str] = &[
    "ntt_twiddles",
    "ntt_pass_kernel",
    "ntt_radix_kernel",
    "ntt_radix4_kernel",
    "ntt_radix4_occ4_kernel",
    "ntt_bitrev_kernel",
    "ntt_bitrev_tiled_kernel",
    "h_pointwise",
    "h_pointwise_tiled_kernel",
    "h_product",
];

/// NTT passes (with coset and 1/n scaling folded in), bit reversal and the Groth16 H pointwise
/// step.
pub static NTT: KernelModule = KernelModule {
    name: "ntt",
    source: include_str!("../kernels/ntt.cu"),
    headers: &[FR_CUH, NTT_CUH],
    kernels: NTT_KERNELS,
};

/// The NTT kernels with the first version's field multiplication (benchmark comparisons).
#[cfg(feature = "bench-variants")]
pub static NTT_V0: KernelModule = KernelModule {
    name: "ntt_v0",
    source: include_str!("../kernels/ntt_v0.cu"),
    headers: &[FR_CUH, NTT_CUH, NTT_CU],
    kernels: NTT_KERNELS,
};

/// The NTT kernels with the Karatsuba field multiplication (`FR_MUL_KARATSUBA`; benchmark
/// comparisons).
#[cfg(feature = "bench-variants")]
pub static NTT_KARA: KernelModule = KernelModule {
    name: "ntt_kara",
    source: include_str!("../kernels/ntt_kara.cu"),
    headers: &[FR_CUH, NTT_CUH, NTT_CU],
    kernels: NTT_KERNELS,
};

/// Field multiplication throughput (benchmark only): the compute ceiling of the NTT.
#[cfg(feature = "bench-variants")]
pub static FR_BENCH: KernelModule = KernelModule {
    name: "fr_bench",
    source: include_str!("../kernels/fr_bench.cu"),
    headers: &[FR_CUH],
    kernels: &["fr_mul_throughput"],
};

/// The fr_bench.cu source, as a header for the variant build below.
#[cfg(feature = "bench-variants")]
pub const FR_BENCH_CU: Header = Header {
    name: "fr_bench.cu",
    source: include_str!("../kernels/fr_bench.cu"),
};

/// Field multiplication throughput with the first version's multiplication.
#[cfg(feature = "bench-variants")]
pub static FR_BENCH_V0: KernelModule = KernelModule {
    name: "fr_bench_v0",
    source: include_str!("../kernels/fr_bench_v0.cu"),
    headers: &[FR_CUH, FR_BENCH_CU],
    kernels: &["fr_mul_throughput"],
};

/// Field multiplication throughput with the Karatsuba multiplication.
#[cfg(feature = "bench-variants")]
pub static FR_BENCH_KARA: KernelModule = KernelModule {
    name: "fr_bench_kara",
    source: include_str!("../kernels/fr_bench_kara.cu"),
    headers: &[FR_CUH, FR_BENCH_CU],
    kernels: &["fr_mul_throughput"],
};

/// BLS12-381 base field Fq (host and device).
pub const FQ_CUH: Header = Header {
    name: "fq.cuh",
    source: include_str!("../kernels/fq.cuh"),
};

/// BLS12-381 G1 in XYZZ coordinates (host and device).
pub const G1_CUH: Header = Header {
    name: "g1.cuh",
    source: include_str!("../kernels/g1.cuh"),
};

/// BLS12-381 Fq2 over Fq (host and device).
pub const FQ2_CUH: Header = Header {
    name: "fq2.cuh",
    source: include_str!("../kernels/fq2.cuh"),
};

/// BLS12-381 G2 in XYZZ coordinates (host and device).
pub const G2_CUH: Header = Header {
    name: "g2.cuh",
    source: include_str!("../kernels/g2.cuh"),
};

/// The per-thread steps of the MSM (host and device).
pub const MSM_CUH: Header = Header {
    name: "msm.cuh",
    source: include_str!("../kernels/msm.cuh"),
};

/// The MSM kernels, as a header for the G2 build and the variant builds below.
pub const MSM_CU: Header = Header {
    name: "msm.cu",
    source: include_str!("../kernels/msm.cu"),
};

/// The kernels of the G1 and of the G2 MSM, in launch order.
pub const MSM_KERNELS: &[&str] = &[
    "msm_prepare_kernel",
    "msm_scan_sum_kernel",
    "msm_scan_apply_kernel",
    "msm_scatter_kernel",
    "msm_accumulate_kernel",
    "msm_combine_kernel",
    "msm_bucket_reduce_kernel",
    "msm_group_sum_kernel",
    "msm_to_jacobian_kernel",
];

/// G1 MSM (Pippenger): scalar preparation, counting sort, bucket accumulation and reduction.
pub static MSM: KernelModule = KernelModule {
    name: "msm",
    source: include_str!("../kernels/msm.cu"),
    headers: &[FQ_CUH, G1_CUH, MSM_CUH],
    kernels: MSM_KERNELS,
};

/// G2 MSM: the same Pippenger steps over G2's point operations (msm.cu built with g2.cuh).
pub static MSM_G2: KernelModule = KernelModule {
    name: "msm_g2",
    source: include_str!("../kernels/msm_g2.cu"),
    headers: &[FQ_CUH, FQ2_CUH, G2_CUH, MSM_CUH, MSM_CU],
    kernels: MSM_KERNELS,
};

/// The G2 MSM kernels, as a header for the variant build below.
#[cfg(feature = "bench-variants")]
pub const MSM_G2_CU: Header = Header {
    name: "msm_g2.cu",
    source: include_str!("../kernels/msm_g2.cu"),
};

/// The G2 MSM kernels with the accumulation's prefetch of the next point (the product's G2
/// build has none), for comparison.
#[cfg(feature = "bench-variants")]
pub static MSM_G2_PREFETCH: KernelModule = KernelModule {
    name: "msm_g2_prefetch",
    source: include_str!("../kernels/msm_g2_prefetch.cu"),
    headers: &[FQ_CUH, FQ2_CUH, G2_CUH, MSM_CUH, MSM_CU, MSM_G2_CU],
    kernels: MSM_KERNELS,
};

/// The same MSM kernels with the field multiplication not inlined.
#[cfg(feature = "bench-variants")]
pub static MSM_NOINLINE: KernelModule = KernelModule {
    name: "msm_noinline",
    source: include_str!("../kernels/msm_noinline.cu"),
    headers: &[FQ_CUH, G1_CUH, MSM_CUH, MSM_CU],
    kernels: MSM_KERNELS,
};

/// The same MSM kernels without the register cap on the hot kernels.
#[cfg(feature = "bench-variants")]
pub static MSM_NOCAP: KernelModule = KernelModule {
    name: "msm_nocap",
    source: include_str!("../kernels/msm_nocap.cu"),
    headers: &[FQ_CUH, G1_CUH, MSM_CUH, MSM_CU],
    kernels: MSM_KERNELS,
};

/// Fixed-base G1 multiplication (host and device), for the parameter generator.
pub const FIXED_BASE_CUH: Header = Header {
    name: "fixed_base.cuh",
    source: include_str!("../kernels/fixed_base.cuh"),
};

/// The fixed-base kernel, as a header for the G2 build.
pub const FIXED_BASE_CU: Header = Header {
    name: "fixed_base.cu",
    source: include_str!("../kernels/fixed_base.cu"),
};

/// `k * G` for many scalars and one G1 point, from a window table (the parameter generator).
pub static FIXED_BASE: KernelModule = KernelModule {
    name: "fixed_base",
    source: include_str!("../kernels/fixed_base.cu"),
    headers: &[FQ_CUH, G1_CUH, FIXED_BASE_CUH],
    kernels: &["fixed_base_kernel"],
};

/// `k * G` for many scalars and one G2 point (fixed_base.cu built with g2.cuh).
pub static FIXED_BASE_G2: KernelModule = KernelModule {
    name: "fixed_base_g2",
    source: include_str!("../kernels/fixed_base_g2.cu"),
    headers: &[FQ_CUH, FQ2_CUH, G2_CUH, FIXED_BASE_CUH, FIXED_BASE_CU],
    kernels: &["fixed_base_kernel"],
};

/// The modules the product runs: NTT, the G1 and G2 MSMs and fixed-base multiplication in G1
/// and G2.
pub static PRODUCT_MODULES: &[&KernelModule] = &[&NTT, &MSM, &MSM_G2, &FIXED_BASE, &FIXED_BASE_G2];

/// Every module, for the compile test and for warming the cache: the product's, plus (with the
/// `bench-variants` feature) the variants the benchmark binaries time against them.
#[cfg(not(feature = "bench-variants"))]
pub static ALL_MODULES: &[&KernelModule] = PRODUCT_MODULES;

/// Every module, for the compile test and for warming the cache: the product's, plus (with the
/// `bench-variants` feature) the variants the benchmark binaries time against them.
#[cfg(feature = "bench-variants")]
pub static ALL_MODULES: &[&KernelModule] = &[
    &NTT,
    &NTT_V0,
    &NTT_KARA,
    &FR_BENCH,
    &FR_BENCH_V0,
    &FR_BENCH_KARA,
    &MSM,
    &MSM_G2,
    &MSM_G2_PREFETCH,
    &MSM_NOINLINE,
    &MSM_NOCAP,
    &FIXED_BASE,
    &FIXED_BASE_G2,
];
