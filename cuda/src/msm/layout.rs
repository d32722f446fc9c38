//! Device layouts of the MSM's points: blstrs' affine points as they are, XYZZ buckets and
//! Jacobian results as limb arrays.

use blstrs::G1Affine;

use crate::buffer::DeviceCopy;

// SAFETY: `G1Affine` is `repr(transparent)` over `blst_p1_affine { x: blst_fp, y: blst_fp }`,
// two `[u64; 6]` arrays: 96 bytes, no padding, no pointers, no drop glue. The MSM kernels only
// read bases; the fixed-base kernel writes valid points (fully reduced Montgomery coordinates on
// the curve, or (0, 0) for infinity), as blst would.
unsafe impl DeviceCopy for G1Affine {}

const _: () = assert!(std::mem::size_of::<G1Affine>() == 96);
const _: () = assert!(std::mem::align_of::<G1Affine>() <= 16);

/// A bucket or partial sum in XYZZ coordinates: X, Y, ZZ, ZZZ, 12 `u32` limbs each
/// (`g1_xyzz` in g1.cuh).
pub type XyzzLimbs = [u32; 48];

/// Bytes of one XYZZ point on the device.
pub const XYZZ_BYTES: u64 = 192;

const _: () = assert!(std::mem::size_of::<XyzzLimbs>() as u64 == XYZZ_BYTES);
