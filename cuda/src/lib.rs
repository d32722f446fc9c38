//! Lease-aware CUDA layer of gpud, and the BLS12-381 kernels of the Groth16 prover.
//!
//! - [`Device`] opens a GPU once per process (by UUID, as gpud names it); each lease becomes an
//!   [`Arena`] borrowed from it ([`Device::reserve`]) that charges every allocation
//!   ([`DeviceBuffer`]) against the lease's VRAM reservation before CUDA is asked;
//!   device-global operations need a [`gpud_client::ComputeToken`] of the device.
//! - [`kernels`] is the registry of `.cu` modules, compiled at run time by [`nvrtc`] for the
//!   device's architecture and cached on disk.
//! - [`ntt`] runs NTTs over Fr; [`hpoly`] computes the Groth16 H polynomial in one call;
//!   [`msm`] and [`fixed_base`] multiply G1 and G2 points.
//!
//! Without a CUDA driver every entry point returns [`Error::NoDriver`]; nothing panics.
//!
//! # What the compiler enforces
//!
//! Synchronizing the context, trimming a pool and reading the device's memory take a
//! [`gpud_client::ComputeToken`], which only gpud-client makes, borrowed from a compute lease
//! (or from [`gpud_client::ExclusiveDevice::assume_unshared`]), so it cannot outlive the lease;
//! a lease revoked while its token is borrowed is [`Error::LeaseLost`] at use. Nothing public
//! hands out the cudarc context or stream. `tests/compile_fail/` holds the misuses that must
//! not compile (checked by trybuild, without a GPU). Benchmark variants of the kernels and the
//! benchmark binaries exist only with the `bench-variants` feature.
//!
//! # Layers
//!
//! Each module imports only modules listed before it:
//!
//! 1. [`error`]; [`driver`] (device discovery), [`ledger`] (the budget arithmetic), [`pool`]
//!    (a lease's CUDA memory pool), [`kernels`] (sources), [`nvrtc`] (compilation and cache);
//! 2. [`device`]: the context, main stream and loaded modules of one GPU;
//! 3. [`buffer`]: device memory (on a device, charged to a ledger); [`fr`] and [`pinned`]
//!    (host memory) build on its `DeviceCopy`; `staged` (uploads from ordinary memory through
//!    page-locked buffers) on `pinned`;
//! 4. [`arena`]: one lease's budget, which makes buffers ([`Device::reserve`] is defined
//!    there);
//! 5. the engines: [`ntt`] (its `plan` and `tables` need only [`error`]), then [`hpoly`] on
//!    it; [`msm`]; [`fixed_base`]; and [`cpu`], the CPU reference, on `ntt`'s plan and tables
//!    and `hpoly`'s domain size.
//!
//! ```no_run
//! use gpud_client::{ExclusiveDevice, Reservation};
//! use gpud_cuda::{Device, driver, ntt::{NttEngine, plan::NttKind}};
//!
//! # fn main() -> gpud_cuda::Result<()> {
//! let info = driver::list_devices()?.remove(0);
//! let lease = ExclusiveDevice::assume_unshared(info.uuid.clone(), 0, 8 << 30);
//! let device = Device::open(&info.uuid)?;       // once per process
//! let arena = device.reserve(&lease)?;          // per lease
//! let mut ntt = NttEngine::new(&arena)?;
//! let mut data = arena.alloc::<blstrs::Scalar>(1 << 20)?;
//! ntt.run(&mut data, NttKind::Forward, 20)?;
//! drop((data, ntt));
//! if let Some(token) = lease.compute_token() {
//!     arena.close(&token)?;                     // synchronize, trim, check; then release
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod arena;
pub mod buffer;
pub mod cpu;
pub mod device;
pub mod driver;
pub mod error;
pub mod fixed_base;
pub mod fr;
pub mod hpoly;
pub mod kernels;
pub mod ledger;
pub mod msm;
pub mod ntt;
pub mod nvrtc;
pub mod pinned;
pub mod pool;
mod staged;

pub use arena::Arena;
pub use buffer::{DeviceBuffer, DeviceCopy};
pub use device::Device;
pub use error::{Error, Result};
pub use fr::FrElement;
pub use pinned::{PinnedBuffer, RegisteredVec};
