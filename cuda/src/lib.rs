//! Lease-aware CUDA layer of gpud, and the BLS12-381 kernels of the Groth16 prover.
//!
//! - [`Device`] opens the GPU a gpud lease names (by UUID) and charges every allocation
//!   ([`DeviceBuffer`]) against the lease's VRAM reservation before CUDA is asked;
//!   device-global operations need the lease's [`gpud_client::ComputeToken`].
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
//! let dev = Device::open(&lease)?;
//! let mut ntt = NttEngine::new(&dev)?;
//! let mut data = dev.alloc::<blstrs::Scalar>(1 << 20)?;
//! ntt.run(&mut data, NttKind::Forward, 20)?;
//! drop((data, ntt));
//! if let Some(token) = lease.compute_token() {
//!     dev.close(&token)?;
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod buffer;
pub mod cpu;
pub mod device;
pub mod driver;
pub mod error;
pub mod fr;
pub mod hpoly;
pub mod kernels;
pub mod ledger;
pub mod msm;
pub mod ntt;
pub mod nvrtc;
pub mod pinned;
pub mod pool;

pub use buffer::{DeviceBuffer, DeviceCopy};
pub use device::Device;
pub use error::{Error, Result};
pub use fr::FrElement;
pub use pinned::PinnedBuffer;
