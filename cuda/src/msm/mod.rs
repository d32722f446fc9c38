//! Multi-scalar multiplication over BLS12-381 G1 and G2 on the GPU (Pippenger, XYZZ buckets):
//! one launcher and one set of kernel steps, generic over the group ([`MsmCurve`]).
//!
//! See `cuda/README-msm.md` for the algorithm, its cost model and its measured numbers.

mod chunked;
pub mod combine;
pub mod curve;
mod error;
mod gpu;
pub mod layout;
pub mod plan;

pub use chunked::{ChunkBases, ChunkScalars};
pub use curve::{G1, G2, MsmCurve};
pub use error::MsmError;
#[cfg(feature = "bench-variants")]
pub use gpu::MsmVariant;
pub use gpu::{Bases, G1Bases, G2Bases, MsmEngine, MsmPhases, STAGING_HOST_BYTES};
