//! The groups the MSM runs over: BLS12-381 G1 and G2. Each is one build of the MSM kernels
//! (msm.cu over g1.cuh or g2.cuh: the same Pippenger steps with the group's point operations)
//! and the host's view of its points (blstrs' affine bases as they are, the kernels' Jacobian
//! window sums as blst points).

use blst::{blst_fp, blst_fp2, blst_p1, blst_p2};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective};
use group::Group;

use crate::buffer::DeviceCopy;
use crate::kernels::{KernelModule, MSM, MSM_G2};

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::G1 {}
    impl Sealed for super::G2 {}
}

/// A group the MSM kernels support. Sealed: the kernels exist for [`G1`] and [`G2`] only.
pub trait MsmCurve: sealed::Sealed + Send + Sync + 'static {
    /// blstrs' affine point, the bases' device layout.
    type Affine: DeviceCopy + std::fmt::Debug;
    /// The result type.
    type Projective: Group + std::fmt::Debug;
    /// A Jacobian point as the kernels write it (the bytes of blst's `blst_p1` / `blst_p2`).
    type Jacobian: DeviceCopy;
    /// An XYZZ bucket or partial sum.
    type Xyzz: DeviceCopy;
    /// "G1" or "G2", for messages and benchmarks.
    const NAME: &'static str;
    /// Bytes of one affine base.
    const AFFINE_BYTES: u64;
    /// Bytes of one XYZZ point on the device.
    const XYZZ_BYTES: u64;
    /// Bytes of one Jacobian window sum.
    const JACOBIAN_BYTES: u64;
    /// The kernel module of the product build.
    fn module() -> &'static KernelModule;
    /// The point a kernel wrote; Z = 0 is the point at infinity, as in blst.
    fn from_jacobian(limbs: &Self::Jacobian) -> Self::Projective;
    /// A zeroed Jacobian (host buffers the window sums are copied into).
    fn jacobian_zeroed() -> Self::Jacobian;
}

/// BLS12-381 G1 (y^2 = x^3 + 4 over Fq).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct G1;

/// BLS12-381 G2 (y^2 = x^3 + 4(1 + u) over Fq2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct G2;

/// A G1 Jacobian point as the kernels write it: X, Y, Z, each 12 little-endian `u32` limbs in
/// Montgomery form (the bytes of blst's `blst_p1`).
pub type G1JacobianLimbs = [u32; 36];

/// A G2 Jacobian point as the kernels write it: X, Y, Z, each an Fq2 element (c0 then c1, 12
/// limbs each; the bytes of blst's `blst_p2`).
pub type G2JacobianLimbs = [u32; 72];

/// A G1 XYZZ point: X, Y, ZZ, ZZZ, 12 `u32` limbs each (`g1_xyzz` in g1.cuh).
pub type G1XyzzLimbs = [u32; 48];

/// A G2 XYZZ point: X, Y, ZZ, ZZZ, 24 `u32` limbs each (`g2_xyzz` in g2.cuh).
pub type G2XyzzLimbs = [u32; 96];

fn fp_from_limbs(l: &[u32]) -> blst_fp {
    let mut w = [0u64; 6];
    for (i, word) in w.iter_mut().enumerate() {
        *word = u64::from(l[2 * i]) | (u64::from(l[2 * i + 1]) << 32);
    }
    blst_fp { l: w }
}

fn fp2_from_limbs(l: &[u32]) -> blst_fp2 {
    blst_fp2 {
        fp: [fp_from_limbs(&l[0..12]), fp_from_limbs(&l[12..24])],
    }
}

impl MsmCurve for G1 {
    type Affine = G1Affine;
    type Projective = G1Projective;
    type Jacobian = G1JacobianLimbs;
    type Xyzz = G1XyzzLimbs;
    const NAME: &'static str = "G1";
    const AFFINE_BYTES: u64 = 96;
    const XYZZ_BYTES: u64 = 192;
    const JACOBIAN_BYTES: u64 = 144;

    fn module() -> &'static KernelModule {
        &MSM
    }

    fn from_jacobian(p: &G1JacobianLimbs) -> G1Projective {
        let mut out = G1Projective::identity();
        *out.as_mut() = blst_p1 {
            x: fp_from_limbs(&p[0..12]),
            y: fp_from_limbs(&p[12..24]),
            z: fp_from_limbs(&p[24..36]),
        };
        out
    }

    fn jacobian_zeroed() -> G1JacobianLimbs {
        [0; 36]
    }
}

impl MsmCurve for G2 {
    type Affine = G2Affine;
    type Projective = G2Projective;
    type Jacobian = G2JacobianLimbs;
    type Xyzz = G2XyzzLimbs;
    const NAME: &'static str = "G2";
    const AFFINE_BYTES: u64 = 192;
    const XYZZ_BYTES: u64 = 384;
    const JACOBIAN_BYTES: u64 = 288;

    fn module() -> &'static KernelModule {
        &MSM_G2
    }

    fn from_jacobian(p: &G2JacobianLimbs) -> G2Projective {
        let mut out = G2Projective::identity();
        *out.as_mut() = blst_p2 {
            x: fp2_from_limbs(&p[0..24]),
            y: fp2_from_limbs(&p[24..48]),
            z: fp2_from_limbs(&p[48..72]),
        };
        out
    }

    fn jacobian_zeroed() -> G2JacobianLimbs {
        [0; 72]
    }
}

// SAFETY: `G1Affine` is `repr(transparent)` over `blst_p1_affine { x: blst_fp, y: blst_fp }`,
// two `[u64; 6]` arrays: 96 bytes, no padding, no pointers, no drop glue. The MSM kernels only
// read bases; the fixed-base kernel writes valid points (fully reduced Montgomery coordinates on
// the curve, or (0, 0) for infinity), as blst would.
unsafe impl DeviceCopy for G1Affine {}

// SAFETY: `G2Affine` is `repr(transparent)` over `blst_p2_affine { x: blst_fp2, y: blst_fp2 }`,
// four `[u64; 6]` arrays: 192 bytes, no padding, no pointers, no drop glue. The kernels only
// read them.
unsafe impl DeviceCopy for G2Affine {}

const _: () = assert!(std::mem::size_of::<G1Affine>() as u64 == G1::AFFINE_BYTES);
const _: () = assert!(std::mem::align_of::<G1Affine>() <= 16);
const _: () = assert!(std::mem::size_of::<G2Affine>() as u64 == G2::AFFINE_BYTES);
const _: () = assert!(std::mem::align_of::<G2Affine>() <= 16);
const _: () = assert!(std::mem::size_of::<G1XyzzLimbs>() as u64 == G1::XYZZ_BYTES);
const _: () = assert!(std::mem::size_of::<G2XyzzLimbs>() as u64 == G2::XYZZ_BYTES);
const _: () = assert!(std::mem::size_of::<G1JacobianLimbs>() as u64 == G1::JACOBIAN_BYTES);
const _: () = assert!(std::mem::size_of::<G2JacobianLimbs>() as u64 == G2::JACOBIAN_BYTES);
const _: () = assert!(std::mem::size_of::<blst_p2>() as u64 == G2::JACOBIAN_BYTES);
const _: () = assert!(std::mem::size_of::<blst_p1>() as u64 == G1::JACOBIAN_BYTES);
