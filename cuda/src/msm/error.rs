//! Errors of the MSM.

/// What went wrong in an MSM call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MsmError {
    /// More scalars than resident bases.
    #[error("{scalars} scalars for {bases} bases")]
    TooManyScalars {
        /// Scalars given.
        scalars: usize,
        /// Bases on the device.
        bases: usize,
    },
    /// More points than the kernels index (31-bit point indices).
    #[error("{n} points exceed the supported {max}")]
    TooManyPoints {
        /// Points asked for.
        n: usize,
        /// The limit.
        max: usize,
    },
    /// A window size outside 2..=23 bits.
    #[error("window of {bits} bits is outside 2..=23")]
    InvalidWindow {
        /// The window size asked for.
        bits: u32,
    },
    /// The CUDA layer failed (driver, NVRTC, allocation under the lease).
    #[error(transparent)]
    Cuda(#[from] crate::error::Error),
}

impl From<cudarc::driver::DriverError> for MsmError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        MsmError::Cuda(e.into())
    }
}
