//! The registry of kernel sources: every `.cu` module and the headers it includes, embedded in
//! the binary and compiled by NVRTC on first use (see [`crate::nvrtc`]).
//!
//! To add a module: put `foo.cu` (and any new `.cuh`) in `cuda/kernels/`, declare a [`Header`]
//! per new header and a [`KernelModule`] here, and list the module in [`ALL_MODULES`] so that
//! the CI compile test covers it. NVRTC sees only the headers a module lists, under their
//! file names, so `#include "fr.cuh"` works as it does on disk.

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

/// NTT passes (with coset and 1/n scaling folded in), bit reversal and the Groth16 H pointwise
/// step.
pub static NTT: KernelModule = KernelModule {
    name: "ntt",
    source: include_str!("../kernels/ntt.cu"),
    headers: &[FR_CUH, NTT_CUH],
    kernels: &[
        "ntt_twiddles",
        "ntt_pass_kernel",
        "ntt_bitrev_kernel",
        "h_pointwise",
    ],
};

/// Every module, for the compile test and for warming the cache.
pub static ALL_MODULES: &[&KernelModule] = &[&NTT];
