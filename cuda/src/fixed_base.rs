//! `k · G` for many scalars `k` and one point `G` of G1 or G2 on the GPU: what a Groth16
//! parameter generator spends its time on (every point of a proving key is a multiple of one
//! generator of its group).
//!
//! A table of `d · 2^(8w) · G` (32 windows of 8 bits, `d = 1..=255`: 783 KiB in G1, 1.5 MiB in
//! G2, both stay in L2) is built on the host and uploaded once. Each scalar then costs at most
//! 32 mixed additions; batches of points are made affine with one inversion each
//! (`kernels/fixed_base.cuh`). [`FixedBase::mul`] streams the scalars through page-locked
//! buffers: the host converts the next chunk's scalars and copies the last chunk's points out
//! while the GPU computes.

use blstrs::Scalar;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaFunction, LaunchConfig, PushKernelArg};
use ff::PrimeField;
use group::Curve;
use rayon::prelude::*;

use crate::arena::Arena;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::kernels::{self, KernelModule};
use crate::msm::{G1, G2, MsmCurve};
use crate::pinned::PinnedBuffer;

/// Windows of the table (8 bits each over 256-bit scalars).
pub const WINDOWS: usize = 32;
/// Non-zero digits per window.
pub const DIGITS: usize = 255;
/// Points per launch; device memory of a call is the table plus `CHUNK` scalars, XYZZ
/// accumulators and affine outputs ([`FixedBase::charged_bytes`]).
pub const CHUNK: usize = 1 << 21;
/// Points made affine with one inversion (`GPUD_FB_BATCH` in the kernel).
const BATCH: u32 = 8;

const THREADS: u32 = 128;

/// A group with a fixed-base kernel: [`G1`] and [`G2`].
pub trait FixedBaseCurve: MsmCurve
where
    Self::Projective: Curve<AffineRepr = Self::Affine>,
{
    /// The kernel module (fixed_base.cu over the group's point operations).
    fn fixed_base_module() -> &'static KernelModule;
}

impl FixedBaseCurve for G1 {
    fn fixed_base_module() -> &'static KernelModule {
        &kernels::FIXED_BASE
    }
}

impl FixedBaseCurve for G2 {
    fn fixed_base_module() -> &'static KernelModule {
        &kernels::FIXED_BASE_G2
    }
}

/// The window table of `base`: entry `w · 255 + d − 1` is `d · 2^(8w) · base`.
pub fn table<P>(base: &P) -> Vec<P::AffineRepr>
where
    P: Curve,
    P::AffineRepr: Default + Clone,
{
    let mut proj = Vec::with_capacity(WINDOWS * DIGITS);
    let mut window_base = *base;
    for _ in 0..WINDOWS {
        let mut acc = window_base;
        for _ in 0..DIGITS {
            proj.push(acc);
            acc += window_base;
        }
        // acc = 256 · window_base: the next window's base.
        window_base = acc;
    }
    let mut out = vec![P::AffineRepr::default(); proj.len()];
    P::batch_normalize(&proj, &mut out);
    out
}

/// Canonical little-endian 32-bit limbs of a scalar (what the kernel reads).
pub fn canonical_limbs(s: &Scalar) -> [u32; 8] {
    let bytes = s.to_repr();
    let mut out = [0u32; 8];
    for (i, chunk) in bytes.as_ref().chunks_exact(4).enumerate() {
        out[i] = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    out
}

/// A point's window table on a device, ready to multiply it by many scalars.
#[derive(Debug)]
pub struct FixedBase<'a, C: FixedBaseCurve>
where
    C::Projective: Curve<AffineRepr = C::Affine>,
{
    arena: &'a Arena<'a>,
    table: DeviceBuffer<'a, C::Affine>,
    kernel: CudaFunction,
}

/// A G1 generator's table on a device.
pub type G1FixedBase<'a> = FixedBase<'a, G1>;
/// A G2 generator's table on a device.
pub type G2FixedBase<'a> = FixedBase<'a, G2>;

/// One chunk's page-locked host side: scalars in, points out.
struct HostSlot<C: MsmCurve> {
    scalars: PinnedBuffer<[u32; 8]>,
    points: PinnedBuffer<C::Affine>,
    /// Completes when the chunk last queued from this slot has been copied back.
    done: CudaEvent,
    /// That chunk's first point and length, until its points are copied out.
    pending: Option<(usize, usize)>,
}

impl<'a, C: FixedBaseCurve> FixedBase<'a, C>
where
    C::Projective: Curve<AffineRepr = C::Affine>,
    C::Affine: Default + Clone + Send + Sync,
{
    /// Builds `base`'s table (host) and uploads it into `arena`.
    pub fn new(arena: &'a Arena<'a>, base: &C::Projective) -> Result<Self> {
        let kernel = arena.function(C::fixed_base_module(), "fixed_base_kernel")?;
        let host = table(base);
        let mut t = arena.alloc::<C::Affine>(host.len())?;
        t.copy_from_host(&host)?;
        Ok(Self {
            arena,
            table: t,
            kernel,
        })
    }

    /// What [`FixedBase::new`] and [`FixedBase::mul`] charge a lease at most.
    pub fn charged_bytes() -> u64 {
        use crate::ledger::charge_for;
        let chunk = CHUNK as u64;
        charge_for((WINDOWS * DIGITS) as u64 * C::AFFINE_BYTES)
            + charge_for(chunk * 32)
            + charge_for(chunk * C::XYZZ_BYTES)
            + charge_for(chunk * C::AFFINE_BYTES)
    }

    /// `out[i] = scalars[i] · base`, in chunks of [`CHUNK`] through two page-locked slots, so
    /// that the host converts and copies while the GPU computes; waits for the result.
    pub fn mul(&self, scalars: &[Scalar], out: &mut [C::Affine]) -> Result<()> {
        if scalars.len() != out.len() {
            return Err(Error::InvalidArgument(format!(
                "{} scalars into {} points",
                scalars.len(),
                out.len()
            )));
        }
        if scalars.is_empty() {
            return Ok(());
        }
        let dev = self.arena.device();
        let chunk = CHUNK.min(scalars.len());
        let dev_scalars = self.arena.alloc::<[u32; 8]>(chunk)?;
        let scratch = self.arena.alloc::<C::Xyzz>(chunk)?;
        let dev_out = self.arena.alloc::<C::Affine>(chunk)?;
        let slots_needed = scalars.len().div_ceil(chunk).min(2);
        let mut slots = (0..slots_needed)
            .map(|_| -> Result<HostSlot<C>> {
                Ok(HostSlot {
                    scalars: PinnedBuffer::zeroed(dev, chunk)?,
                    points: PinnedBuffer::zeroed(dev, chunk)?,
                    done: dev
                        .context()
                        .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))?,
                    pending: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let stream = self.arena.stream();
        let max_blocks = self.arena.info().multiprocessors.max(1) * 8;
        // Copies a finished chunk's points from its slot into `out`.
        let drain = |slot: &mut HostSlot<C>, out: &mut [C::Affine]| -> Result<()> {
            if let Some((start, len)) = slot.pending.take() {
                slot.done.synchronize()?;
                out[start..start + len]
                    .par_chunks_mut(1 << 14)
                    .zip(slot.points[..len].par_chunks(1 << 14))
                    .for_each(|(d, s)| d.clone_from_slice(s));
            }
            Ok(())
        };
        let result = (|| -> Result<()> {
            for (i, part) in scalars.chunks(chunk).enumerate() {
                let slot = &mut slots[i % slots_needed];
                // The chunk two back used this slot: its points go out before it is reused
                // (the stream ran its copies in order, so its scalars were read long ago).
                drain(slot, out)?;
                let n = part.len();
                slot.scalars[..n]
                    .par_chunks_mut(1 << 14)
                    .zip(part.par_chunks(1 << 14))
                    .for_each(|(d, s)| {
                        for (d, s) in d.iter_mut().zip(s) {
                            *d = canonical_limbs(s);
                        }
                    });
                dev.bind()?;
                // SAFETY: `dev_scalars` holds `chunk` >= n scalars and is ordered on the main
                // stream after its allocation; the page-locked source is not written again
                // before `done` (recorded below, after this copy) completes.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        dev_scalars.device_ptr(),
                        &slot.scalars[..n],
                        stream.cu_stream(),
                    )
                }?;
                let n32 = n as u32;
                let (tab, sc, scr, dst) = (
                    self.table.device_ptr(),
                    dev_scalars.device_ptr(),
                    scratch.device_ptr(),
                    dev_out.device_ptr(),
                );
                let mut b = stream.launch_builder(&self.kernel);
                b.arg(&n32).arg(&tab).arg(&sc).arg(&scr).arg(&dst);
                let cfg = LaunchConfig {
                    grid_dim: (
                        n32.div_ceil(BATCH).div_ceil(THREADS).clamp(1, max_blocks),
                        1,
                        1,
                    ),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: `tab` holds the 32 x 255 table, `sc` n scalars of 8 words, `scr` n
                // XYZZ points and `dst` n affine points of this group; all in this arena,
                // ordered on the device's main stream; the kernel is grid-stride over exactly
                // ⌈n / BATCH⌉ batches and touches no index at or past n.
                unsafe { b.launch(cfg) }?;
                // SAFETY: the slot's page-locked points are not read before `done` completes
                // (drain waits for it), and `dev_out` was written by the kernel queued above.
                unsafe {
                    cudarc::driver::result::memcpy_dtoh_async(
                        &mut slot.points[..n],
                        dst,
                        stream.cu_stream(),
                    )
                }?;
                slot.done.record(stream)?;
                slot.pending = Some((i * chunk, n));
            }
            for slot in &mut slots {
                drain(slot, out)?;
            }
            Ok(())
        })();
        // Whatever happened, no copy may still touch the page-locked slots when they are freed.
        let synced = stream.synchronize();
        result?;
        Ok(synced?)
    }
}

/// `k · base` on the host with the same table (the reference for the kernel and the CPU path
/// of the parameter generator).
pub fn mul_host<P>(table: &[P::AffineRepr], k: &[u32; 8]) -> P
where
    P: Curve,
    P::AffineRepr: Copy,
{
    let mut acc = P::identity();
    for w in 0..WINDOWS {
        let d = (k[w / 4] >> (8 * (w % 4))) & 0xff;
        if d != 0 {
            acc += table[w * DIGITS + d as usize - 1];
        }
    }
    acc
}

/// Converts projective points to affine in parallel chunks (the host path's last step).
pub fn to_affine<P>(points: &[P], out: &mut [P::AffineRepr])
where
    P: Curve + Send + Sync,
    P::AffineRepr: Send,
{
    out.par_chunks_mut(4096)
        .zip(points.par_chunks(4096))
        .for_each(|(o, p)| P::batch_normalize(p, o));
}

#[cfg(test)]
mod tests {
    use super::*;
    use blstrs::{G1Affine, G1Projective, G2Projective};
    use ff::Field;
    use group::Group;
    use rand::SeedableRng;

    #[test]
    fn the_host_path_over_the_table_is_scalar_multiplication() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        let g = G1Projective::generator() * Scalar::random(&mut rng);
        let t = table(&g);
        assert_eq!(t.len(), WINDOWS * DIGITS);
        let g2 = G2Projective::generator() * Scalar::random(&mut rng);
        let t2 = table(&g2);
        for k in [
            Scalar::ZERO,
            Scalar::ONE,
            -Scalar::ONE,
            Scalar::from(255u64),
            Scalar::from(256u64),
            Scalar::random(&mut rng),
        ] {
            assert_eq!(mul_host::<G1Projective>(&t, &canonical_limbs(&k)), g * k);
            assert_eq!(mul_host::<G2Projective>(&t2, &canonical_limbs(&k)), g2 * k);
        }
        let p = [g, g.double(), G1Projective::identity()];
        let mut a = [G1Affine::default(); 3];
        to_affine(&p, &mut a);
        assert_eq!(a[1], g.double().to_affine());
    }
}
