//! Device layouts of the G1 MSM's points (kept for existing users; [`super::curve`] has both
//! groups'): blstrs' affine points as they are, XYZZ buckets and Jacobian results as limb
//! arrays.

/// A bucket or partial sum in XYZZ coordinates: X, Y, ZZ, ZZZ, 12 `u32` limbs each
/// (`g1_xyzz` in g1.cuh).
pub type XyzzLimbs = super::curve::G1XyzzLimbs;

/// Bytes of one XYZZ point on the device.
pub const XYZZ_BYTES: u64 = 192;

const _: () = assert!(std::mem::size_of::<XyzzLimbs>() as u64 == XYZZ_BYTES);
