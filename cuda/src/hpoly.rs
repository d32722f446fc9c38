//! The Groth16 H polynomial in one call, as bellperson computes it:
//! `h = icoset_fft((coset_fft(ifft(a)) * coset_fft(ifft(b)) - coset_fft(ifft(c))) / Z)`.
//!
//! Inputs are the prover's a, b, c evaluations as slices of 32-byte Montgomery scalars
//! ([`FrElement`]: blstrs `Scalar`, no conversion). Each is uploaded on a copy stream while the
//! previous one is transformed; from page-locked memory ([`crate::PinnedBuffer`]) the copy is a
//! direct DMA, from ordinary memory it goes through page-locked staging buffers filled by the
//! CPU's cores ([`STAGING_HOST_BYTES`]), several times faster than the driver's own staging.
//! The result stays on the device ([`HOutput`]) for the H MSM, or is downloaded into a caller's
//! slice.

use std::sync::Arc;

use blstrs::Scalar;
use cudarc::driver::CudaStream;
use cudarc::driver::result;

use crate::arena::Arena;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::fr::{FrElement, cast_slice};
use crate::ntt::NttEngine;
use crate::ntt::plan::{self, Step};
use crate::staged::Staging;

/// Staging buffers of the upload from ordinary memory, and their size in scalars (32 MiB
/// each: large enough for the copy engine to run at full speed).
const STAGING_BUFFERS: usize = 3;
const STAGING_CHUNK: usize = 1 << 20;

/// Page-locked host memory an [`HPoly`] holds once it has uploaded from ordinary memory
/// (allocated on first use, freed with it): what a host lease books as pinned for it.
pub const STAGING_HOST_BYTES: u64 =
    (STAGING_BUFFERS * STAGING_CHUNK * std::mem::size_of::<Scalar>()) as u64;

/// h on the device: 2^log_n coefficients (the prover uses the first 2^log_n - 1).
#[derive(Debug)]
pub struct HOutput<'d> {
    h: DeviceBuffer<'d, Scalar>,
    log_n: u32,
}

impl<'d> HOutput<'d> {
    /// The coefficients on the device, for the H MSM. Work on them is queued on the device's
    /// main stream, after the computation.
    pub fn buffer(&self) -> &DeviceBuffer<'d, Scalar> {
        &self.h
    }

    /// Takes the device buffer.
    pub fn into_buffer(self) -> DeviceBuffer<'d, Scalar> {
        self.h
    }

    /// log2 of the domain size.
    pub fn log_n(&self) -> u32 {
        self.log_n
    }

    /// Waits for the computation and copies the first `dst.len()` coefficients into `dst`.
    pub fn download_into<T: FrElement>(&self, dst: &mut [T]) -> Result<()> {
        if dst.len() > self.h.len() {
            return Err(Error::InvalidArgument(format!(
                "{} coefficients asked of {}",
                dst.len(),
                self.h.len()
            )));
        }
        let dst: &mut [Scalar] = crate::fr::cast_slice_mut(dst);
        self.h.copy_to_host_at(0, dst)
    }
}

/// Computes H polynomials on one device; keeps the NTT tables between calls.
#[derive(Debug)]
pub struct HPoly<'d> {
    engine: NttEngine<'d>,
    copy: Arc<CudaStream>,
    staging: Staging<Scalar>,
}

/// Domain size bellperson uses for inputs of `len` elements: the next power of two.
pub fn domain_log_n(len: usize) -> Result<u32> {
    if len < 2 {
        return Err(Error::InvalidArgument(format!(
            "H needs at least 2 evaluations, got {len}"
        )));
    }
    let log_n = usize::BITS - (len - 1).leading_zeros();
    plan::check_log_n(log_n)?;
    Ok(log_n)
}

/// What [`HPoly::compute`] charges a lease at its peak for inputs of `len` evaluations: the
/// three padded buffers and every table the launch plan reads (each allocation rounded up as
/// the allocator charges it, [`crate::ledger::charge_for`]). After `compute` returns, b and c are
/// freed; [`HPoly::release_tables`] frees the tables.
pub fn charged_bytes(len: usize) -> Result<u64> {
    use crate::ledger::charge_for;
    use crate::ntt::plan::TableKey;
    let log_n = domain_log_n(len)?;
    let n = 1u64 << log_n;
    let mut steps: Vec<Step> = (0..3).flat_map(|r| plan::h_input_steps(log_n, r)).collect();
    steps.extend(plan::h_tail_steps(log_n, 0, 1, 2));
    let mut tables = plan::tables_used(&steps);
    // A twiddle table is expanded on the device from a power table, which stays cached.
    for key in tables.clone() {
        if let TableKey::Twiddles { log_n } = key {
            let source = crate::ntt::tables::twiddle_source(log_n);
            if !tables.contains(&source) {
                tables.push(source);
            }
        }
    }
    let table_bytes: u64 = tables
        .iter()
        .map(|key| match *key {
            TableKey::Twiddles { log_n } => {
                charge_for(32 * crate::ntt::tables::twiddle_count(log_n))
            }
            TableKey::Powers { .. } => charge_for(32 * crate::ntt::tables::POW_TABLE_LEN as u64),
        })
        .sum();
    Ok(3 * charge_for(32 * n) + table_bytes)
}

impl<'d> HPoly<'d> {
    /// Frees the NTT tables (twiddles, power tables); they are rebuilt on the next call.
    pub fn release_tables(&mut self) {
        self.engine.release_tables();
    }

    /// Loads the kernels and creates the copy stream; every buffer is charged to `dev`.
    pub fn new(dev: &'d Arena<'d>) -> Result<Self> {
        let engine = NttEngine::new(dev)?;
        let copy = dev.context().new_stream()?;
        Ok(Self {
            engine,
            copy,
            staging: Staging::new(STAGING_BUFFERS, STAGING_CHUNK),
        })
    }

    /// The NTT engine (its tables are shared with standalone transforms).
    pub fn engine(&mut self) -> &mut NttEngine<'d> {
        &mut self.engine
    }

    /// Uploads a, b, c (equal lengths; zero-padded to the next power of two, as bellperson's
    /// `EvaluationDomain::from_coeffs`) and queues the whole computation. Returns once the
    /// uploads are done (the slices are free again); the result is ready when the device's main
    /// stream reaches it.
    pub fn compute<T: FrElement>(&mut self, a: &[T], b: &[T], c: &[T]) -> Result<HOutput<'d>> {
        if a.len() != b.len() || a.len() != c.len() {
            return Err(Error::InvalidArgument(format!(
                "a, b, c lengths differ: {}, {}, {}",
                a.len(),
                b.len(),
                c.len()
            )));
        }
        let log_n = domain_log_n(a.len())?;
        let n = 1usize << log_n;
        let dev = self.engine.arena();
        let tail = plan::h_tail_steps(log_n, 0, 1, 2);
        let inputs: [Vec<Step>; 3] = [0, 1, 2].map(|r| plan::h_input_steps(log_n, r));
        for steps in inputs.iter().chain(std::iter::once(&tail)) {
            self.engine.prepare(steps)?;
        }
        let mut bufs = [
            dev.alloc::<Scalar>(n)?,
            dev.alloc::<Scalar>(n)?,
            dev.alloc::<Scalar>(n)?,
        ];
        // The copy stream may touch the buffers only after the main stream allocated them.
        self.copy.join(dev.stream())?;
        let regions = bufs.each_ref().map(|b| b.device_ptr());
        let srcs = [a, b, c];
        let result = (|| -> Result<()> {
            for (i, buf) in bufs.iter_mut().enumerate() {
                let src: &[Scalar] = cast_slice(srcs[i]);
                // SAFETY: `buf` holds n >= src.len() scalars and the copy stream waited for its
                // allocation; `src` outlives the copies because the copy stream is synchronized
                // before this function returns.
                unsafe {
                    self.staging.upload_async(
                        dev.device(),
                        &self.copy,
                        buf.device_ptr(),
                        src,
                        |_, _, _| Ok::<(), Error>(()),
                    )
                }?;
                if src.len() < n {
                    let tail_ptr = buf.device_ptr_at(src.len())?;
                    dev.bind()?;
                    // SAFETY: the zeroed range is the buffer's tail, ordered on the copy stream.
                    unsafe {
                        result::memset_d8_async(
                            tail_ptr,
                            0,
                            (n - src.len()) * 32,
                            self.copy.cu_stream(),
                        )
                    }?;
                }
                dev.stream().join(&self.copy)?;
                self.engine.execute(&inputs[i], &regions)?;
            }
            self.engine.execute(&tail, &regions)
        })();
        // Whatever happened, no copy may still read the caller's slices after we return.
        let synced = self.copy.synchronize();
        result?;
        synced?;
        let [h, _b, _c] = bufs;
        Ok(HOutput { h, log_n })
    }

    /// The computation on inputs already on the device (each 2^log_n elements, padded), for
    /// callers that keep a, b, c resident and for timing without host transfers. b and c are
    /// consumed (their memory is freed once the computation has used it).
    pub fn compute_on_device(
        &mut self,
        a: DeviceBuffer<'d, Scalar>,
        b: DeviceBuffer<'d, Scalar>,
        c: DeviceBuffer<'d, Scalar>,
    ) -> Result<HOutput<'d>> {
        let n = a.len();
        if !n.is_power_of_two() || b.len() != n || c.len() != n {
            return Err(Error::InvalidArgument(format!(
                "device inputs must be equal powers of two, got {}, {}, {}",
                n,
                b.len(),
                c.len()
            )));
        }
        let log_n = n.trailing_zeros();
        plan::check_log_n(log_n)?;
        let regions = [a.device_ptr(), b.device_ptr(), c.device_ptr()];
        for r in 0..3 {
            self.engine
                .execute(&plan::h_input_steps(log_n, r), &regions)?;
        }
        self.engine
            .execute(&plan::h_tail_steps(log_n, 0, 1, 2), &regions)?;
        Ok(HOutput { h: a, log_n })
    }
}
