//! Lease-aware CUDA layer of gpud, and the BLS12-381 kernels of the Groth16 prover.
//!
//! - [`Device`] opens a GPU once per process (by UUID, as gpud names it); each lease becomes an
//!   [`Arena`] borrowed from it ([`Device::reserve`]) that charges every allocation
//!   ([`DeviceBuffer`]) against the lease's VRAM reservation before CUDA is asked;
//!   device-global operations need a [`gpud_client::ComputeToken`] of the device.
//! - [`kernels`] is the registry of `.cu` modules, compiled at run time by [`nvrtc`] for the
//!   device's architecture and cached on disk.
//! - [`ntt`] runs NTTs over Fr; [`hpoly`] computes the Groth16 H polynomial in one call.
//!
//! Without a CUDA driver every entry point returns [`Error::NoDriver`]; nothing panics.
//!
//! ```no_run
//! use gpud_client::{ExclusiveDevice, Reservation};
//! use gpud_cuda::{Device, driver, ntt::{NttEngine, plan::NttKind}};
//!
//! # fn main() -> gpud_cuda::Result<()> {
//! let info = driver::list_devices()?.remove(0);
//! let lease = ExclusiveDevice::claim(info.uuid.clone(), 0, 8 << 30);
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

pub use arena::Arena;
pub use buffer::{DeviceBuffer, DeviceCopy};
pub use device::Device;
pub use error::{Error, Result};
pub use fr::FrElement;
pub use pinned::{PinnedBuffer, RegisteredVec};
