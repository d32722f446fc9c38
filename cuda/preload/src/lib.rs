//! `libgpud_preload.so`: brings gpud leases to unmodified CUDA programs through `LD_PRELOAD`.
//!
//! The library interposes the CUDA driver API however a program reaches it: `dlsym` (a
//! runtime that opens libcuda itself), `cuGetProcAddress(_v2)` (how CUDA 12 and later
//! runtimes, statically linked ones such as PyTorch's included, find every entry point), and
//! the entry points themselves (programs linked against libcuda). It wraps the allocation
//! paths (`cuMemAlloc`, `cuMemAllocPitch`, `cuMemAllocManaged`, `cuMemAllocAsync`,
//! `cuMemAllocFromPoolAsync`, `cuMemCreate` and their frees), the context's creation (its
//! footprint), and what a program asks about its memory (`cuMemGetInfo`,
//! `cuDeviceTotalMem`, which report the lease).
//!
//! It is its process's gpud client: a lease per device at the device's first use (its wait
//! happens inside that first CUDA call), grown when an allocation needs more (`GPUD_POLICY`),
//! shrunk lazily. docs/PRELOAD.md describes the variables, the policies and what is
//! approximated.
//!
//! Modules: `config` (the `GPUD_*` variables), `account` (the books and the sizing decisions,
//! pure), `compute` (the compute lease around kernel launches, `GPUD_COMPUTE=auto`), `gpud` (a synchronous client), `enforce` (the process's leases), and the two with
//! `unsafe` code, `driver` (the real libcuda and glibc's dlsym) and `exports` (the C symbols).

// The unit tests build without the exported symbols (a test binary exporting `dlsym` would
// interpose its own process), so part of the driver table goes unused there.
#![cfg_attr(test, allow(dead_code))]

mod account;
mod compute;
mod config;
mod driver;
mod enforce;
#[cfg(not(test))]
mod exports;
mod gpud;
mod log;
