//! Multi-scalar multiplication over BLS12-381 G1 on the GPU (Pippenger, XYZZ buckets).
//!
//! See `cuda/README-msm.md` for the algorithm, its cost model and its measured numbers.

pub mod combine;
mod error;
mod gpu;
pub mod layout;
pub mod plan;

pub use error::MsmError;
#[cfg(feature = "bench-variants")]
pub use gpu::MsmVariant;
pub use gpu::{G1Bases, MsmEngine, MsmPhases};
