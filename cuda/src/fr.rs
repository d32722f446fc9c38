//! The BLS12-381 scalar layout shared by host and device.

use blstrs::Scalar;

use crate::buffer::DeviceCopy;

/// A 32-byte BLS12-381 scalar in blstrs' layout: 4 little-endian `u64` limbs in Montgomery form
/// with R = 2^256 (the kernels read the same bytes as 8 little-endian `u32` limbs).
///
/// # Safety
/// Implementors are exactly 32 bytes with that layout, and every canonical field element the
/// kernels write is a valid value of the type.
pub unsafe trait FrElement: DeviceCopy + Default {}

// SAFETY: `Scalar` is `repr(transparent)` over `blst_fr { l: [u64; 4] }` in Montgomery form.
unsafe impl FrElement for Scalar {}
// SAFETY: raw Montgomery limbs; any value is a valid array.
unsafe impl FrElement for [u64; 4] {}
// SAFETY: as above, 32-bit limbs, little-endian.
unsafe impl FrElement for [u32; 8] {}

const _: () = assert!(std::mem::size_of::<Scalar>() == 32);
const _: () = assert!(std::mem::align_of::<Scalar>() <= 16);

/// Reinterprets a slice of one Fr layout as another (no copy).
pub fn cast_slice<A: FrElement, B: FrElement>(a: &[A]) -> &[B] {
    assert_eq!(std::mem::size_of::<A>(), std::mem::size_of::<B>());
    assert!(
        a.as_ptr() as usize % std::mem::align_of::<B>() == 0,
        "misaligned Fr slice"
    );
    // SAFETY: same size, alignment checked above, every bit pattern of a canonical element is
    // valid for both types, and the lifetime is carried over.
    unsafe { std::slice::from_raw_parts(a.as_ptr() as *const B, a.len()) }
}

/// Mutable form of [`cast_slice`].
pub fn cast_slice_mut<A: FrElement, B: FrElement>(a: &mut [A]) -> &mut [B] {
    assert_eq!(std::mem::size_of::<A>(), std::mem::size_of::<B>());
    assert!(
        a.as_ptr() as usize % std::mem::align_of::<B>() == 0,
        "misaligned Fr slice"
    );
    // SAFETY: as in `cast_slice`, with unique access carried over from `a`.
    unsafe { std::slice::from_raw_parts_mut(a.as_mut_ptr() as *mut B, a.len()) }
}

/// The Montgomery limbs of a scalar.
pub fn to_limbs(s: &Scalar) -> [u64; 4] {
    cast_slice::<Scalar, [u64; 4]>(std::slice::from_ref(s))[0]
}

/// A scalar from Montgomery limbs, if canonical (< r).
pub fn from_limbs(l: [u64; 4]) -> Option<Scalar> {
    const R: [u64; 4] = [
        0xffff_ffff_0000_0001,
        0x53bd_a402_fffe_5bfe,
        0x3339_d808_09a1_d805,
        0x73ed_a753_299d_7d48,
    ];
    // Canonical iff l < r, compared from the top limb.
    let below = l
        .iter()
        .rev()
        .zip(R.iter().rev())
        .find(|(a, b)| a != b)
        .map(|(a, b)| a < b);
    if below != Some(true) {
        return None;
    }
    Some(cast_slice::<[u64; 4], Scalar>(std::slice::from_ref(&l))[0])
}
