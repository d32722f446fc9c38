//! `k · G` for many scalars `k` and one G1 point `G` on the GPU: what a Groth16 parameter
//! generator spends its time on (every G1 point of a proving key is a multiple of one
//! generator).
//!
//! A table of `d · 2^(8w) · G` (32 windows of 8 bits, `d = 1..=255`, 783 KiB, stays in L2) is
//! built on the host and uploaded once; each scalar then costs at most 32 mixed additions and
//! one inversion to affine, one thread per scalar (`kernels/fixed_base.cuh`).

use blstrs::{G1Affine, G1Projective, Scalar};
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use ff::PrimeField;
use group::{Curve, Group};

use crate::arena::Arena;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::kernels;

/// Windows of the table (8 bits each over 256-bit scalars).
pub const WINDOWS: usize = 32;
/// Non-zero digits per window.
pub const DIGITS: usize = 255;
/// Scalars per launch: bounds the device memory of a call to `CHUNK · (32 + 96)` bytes.
pub const CHUNK: usize = 1 << 22;

const THREADS: u32 = 128;

/// The window table of `base`: entry `w · 255 + d − 1` is `d · 2^(8w) · base`.
pub fn table(base: &G1Projective) -> Vec<G1Affine> {
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
    let mut out = vec![G1Affine::default(); proj.len()];
    G1Projective::batch_normalize(&proj, &mut out);
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

/// A G1 point's window table on a device, ready to multiply it by many scalars.
#[derive(Debug)]
pub struct G1FixedBase<'a> {
    arena: &'a Arena<'a>,
    table: DeviceBuffer<'a, G1Affine>,
    kernel: CudaFunction,
}

impl<'a> G1FixedBase<'a> {
    /// Builds `base`'s table (host) and uploads it into `arena`.
    pub fn new(arena: &'a Arena<'a>, base: &G1Projective) -> Result<Self> {
        let kernel = arena.function(&kernels::FIXED_BASE, "g1_fixed_base_kernel")?;
        let host = table(base);
        let mut t = arena.alloc::<G1Affine>(host.len())?;
        t.copy_from_host(&host)?;
        Ok(Self {
            arena,
            table: t,
            kernel,
        })
    }

    /// What [`G1FixedBase::new`] and [`G1FixedBase::mul`] charge a lease at most.
    pub fn charged_bytes() -> u64 {
        use crate::ledger::charge_for;
        charge_for((WINDOWS * DIGITS * 96) as u64)
            + charge_for((CHUNK * 32) as u64)
            + charge_for((CHUNK * 96) as u64)
    }

    /// `out[i] = canonical(scalars[i]) · base`, in chunks of [`CHUNK`]; waits for the result.
    /// `scalars` are canonical limbs ([`canonical_limbs`]).
    pub fn mul(&self, scalars: &[[u32; 8]], out: &mut [G1Affine]) -> Result<()> {
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
        let chunk = CHUNK.min(scalars.len());
        let mut dev_s = self.arena.alloc::<[u32; 8]>(chunk)?;
        let dev_out = self.arena.alloc::<G1Affine>(chunk)?;
        let stream = self.arena.stream();
        let max_blocks = self.arena.info().multiprocessors.max(1) * 8;
        for (s, o) in scalars.chunks(chunk).zip(out.chunks_mut(chunk)) {
            dev_s.copy_from_host_at(0, s)?;
            let n = s.len() as u32;
            let (tab, sc, dst) = (
                self.table.device_ptr(),
                dev_s.device_ptr(),
                dev_out.device_ptr(),
            );
            let mut b = stream.launch_builder(&self.kernel);
            b.arg(&n).arg(&tab).arg(&sc).arg(&dst);
            let cfg = LaunchConfig {
                grid_dim: (n.div_ceil(THREADS).clamp(1, max_blocks), 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: `tab` holds the 32 x 255 table, `sc` at least n scalars of 8 words,
            // `dst` at least n points; all in arenas of this device, ordered on its main
            // stream; the kernel is grid-stride over exactly n.
            unsafe { b.launch(cfg) }?;
            dev_out.copy_to_host_at(0, o)?;
        }
        Ok(())
    }
}

/// `k · base` on the host with the same table (the reference for the kernel and the CPU path
/// of the parameter generator).
pub fn mul_host(table: &[G1Affine], k: &[u32; 8]) -> G1Projective {
    let mut acc = G1Projective::identity();
    for w in 0..WINDOWS {
        let d = (k[w / 4] >> (8 * (w % 4))) & 0xff;
        if d != 0 {
            acc += table[w * DIGITS + d as usize - 1];
        }
    }
    acc
}

/// Converts projective points to affine in parallel chunks (the host path's last step).
pub fn to_affine(points: &[G1Projective], out: &mut [G1Affine]) {
    use rayon::prelude::*;
    out.par_chunks_mut(4096)
        .zip(points.par_chunks(4096))
        .for_each(|(o, p)| G1Projective::batch_normalize(p, o));
}

#[cfg(test)]
mod tests {
    use super::*;
    use ff::Field;
    use rand::SeedableRng;

    #[test]
    fn the_host_path_over_the_table_is_scalar_multiplication() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        let g = G1Projective::generator() * Scalar::random(&mut rng);
        let t = table(&g);
        assert_eq!(t.len(), WINDOWS * DIGITS);
        for k in [
            Scalar::ZERO,
            Scalar::ONE,
            -Scalar::ONE,
            Scalar::from(255u64),
            Scalar::from(256u64),
            Scalar::random(&mut rng),
        ] {
            assert_eq!(mul_host(&t, &canonical_limbs(&k)), g * k);
        }
        let p = [g, g.double(), G1Projective::identity()];
        let mut a = [G1Affine::default(); 3];
        to_affine(&p, &mut a);
        assert_eq!(a[1], g.double().to_affine());
    }
}
