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

/// Where the C evaluations of an H computation come from.
#[derive(Debug, Clone, Copy)]
pub enum CSource<'a, T> {
    /// Uploaded from host memory, like A and B.
    Host(&'a [T]),
    /// `c_i = a_i · b_i`, computed on the device: every constraint of a satisfied constraint
    /// system asserts exactly that (and the padding is zero on all three), so the prover's C
    /// need not cross the host link. For an unsatisfied system the result differs from
    /// uploading C, but neither gives a valid proof.
    ProductOfAB,
}

/// The device buffers of one H computation between [`HPoly::upload`] and
/// [`HPoly::transform`].
#[derive(Debug)]
pub struct HInputs<'d> {
    bufs: [DeviceBuffer<'d, Scalar>; 3],
    len: usize,
    log_n: u32,
    derive_c: bool,
    steps: [Vec<Step>; 3],
    tail: Vec<Step>,
}

impl HInputs<'_> {
    fn regions(&self) -> [u64; 3] {
        self.bufs.each_ref().map(|b| b.device_ptr())
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
        self.compute_with(a, b, CSource::Host(c))
    }

    /// [`HPoly::compute`] with C from `c`: each input is transformed on the main stream while
    /// the next one is copied.
    pub fn compute_with<T: FrElement>(
        &mut self,
        a: &[T],
        b: &[T],
        c: CSource<'_, T>,
    ) -> Result<HOutput<'d>> {
        let mut inputs = self.inputs(a.len())?;
        self.load(&mut inputs, a, b, c, true)?;
        self.finish(inputs)
    }

    /// The device buffers of an H computation over `len` evaluations (allocated on the main
    /// stream, charged like [`HPoly::compute`]'s), to fill with [`HPoly::upload`] and turn into
    /// h with [`HPoly::transform`]: the copies can then run while other work (e.g. the MSMs
    /// that do not need h) computes on the main stream.
    pub fn inputs(&mut self, len: usize) -> Result<HInputs<'d>> {
        let log_n = domain_log_n(len)?;
        let n = 1usize << log_n;
        let dev = self.engine.arena();
        let bufs = [
            dev.alloc::<Scalar>(n)?,
            dev.alloc::<Scalar>(n)?,
            dev.alloc::<Scalar>(n)?,
        ];
        // The copy stream may touch the buffers only after the main stream allocated them.
        self.copy.join(dev.stream())?;
        Ok(HInputs {
            bufs,
            len,
            log_n,
            derive_c: false,
            steps: [0, 1, 2].map(|r| plan::h_input_steps(log_n, r)),
            tail: plan::h_tail_steps(log_n, 0, 1, 2),
        })
    }

    /// Queues the copies of a, b (and c, or what deriving C on the device needs) into
    /// `inputs` on the copy stream; returns once the slices are free again. Nothing is
    /// transformed: [`HPoly::transform`] queues that on the main stream after the copies.
    pub fn upload<T: FrElement>(
        &mut self,
        inputs: &mut HInputs<'d>,
        a: &[T],
        b: &[T],
        c: CSource<'_, T>,
    ) -> Result<()> {
        self.load(inputs, a, b, c, false)
    }

    /// Queues the transforms of uploaded inputs on the main stream (after the copies) and
    /// returns h.
    pub fn transform(&mut self, inputs: HInputs<'d>) -> Result<HOutput<'d>> {
        self.prepare(&inputs)?;
        let regions = inputs.regions();
        let dev = self.engine.arena();
        dev.stream().join(&self.copy)?;
        if inputs.derive_c {
            // SAFETY: regions 2 and 1 are distinct buffers of 2^log_n scalars, written by the
            // copies the main stream now follows.
            unsafe {
                self.engine
                    .product(regions[2], regions[1], 1u64 << inputs.log_n)
            }?;
        }
        for steps in &inputs.steps {
            self.engine.execute(steps, &regions)?;
        }
        self.finish(inputs)
    }

    /// Queues the tail (a · b − c on the coset, back to coefficients) once the inputs are
    /// transformed, and hands out h (b and c are freed).
    fn finish(&mut self, inputs: HInputs<'d>) -> Result<HOutput<'d>> {
        self.engine.execute(&inputs.tail, &inputs.regions())?;
        let [h, _b, _c] = inputs.bufs;
        Ok(HOutput {
            h,
            log_n: inputs.log_n,
        })
    }

    /// Builds the tables the transforms read (cached between calls).
    fn prepare(&mut self, inputs: &HInputs<'d>) -> Result<()> {
        for steps in inputs.steps.iter().chain(std::iter::once(&inputs.tail)) {
            self.engine.prepare(steps)?;
        }
        Ok(())
    }

    /// Copies the inputs in order; with `interleave`, queues each input's transforms on the
    /// main stream as soon as its copy is queued (the next copy overlaps them).
    fn load<T: FrElement>(
        &mut self,
        inputs: &mut HInputs<'d>,
        a: &[T],
        b: &[T],
        c: CSource<'_, T>,
        interleave: bool,
    ) -> Result<()> {
        let c_len = match c {
            CSource::Host(c) => c.len(),
            CSource::ProductOfAB => a.len(),
        };
        if a.len() != b.len() || a.len() != c_len || a.len() != inputs.len {
            return Err(Error::InvalidArgument(format!(
                "a, b, c lengths differ from each other or from the {} prepared: {}, {}, {}",
                inputs.len,
                a.len(),
                b.len(),
                c_len
            )));
        }
        inputs.derive_c = matches!(c, CSource::ProductOfAB);
        let n = 1usize << inputs.log_n;
        let dev = self.engine.arena();
        if interleave {
            self.prepare(inputs)?;
        }
        let regions = inputs.regions();
        let srcs: [Option<&[T]>; 3] = match c {
            CSource::Host(c) => [Some(a), Some(b), Some(c)],
            CSource::ProductOfAB => [Some(a), Some(b), None],
        };
        let result = (|| -> Result<()> {
            for (i, src) in srcs.into_iter().enumerate() {
                if let Some(src) = src {
                    let src: &[Scalar] = cast_slice(src);
                    // SAFETY: buffer i holds n >= src.len() scalars and the copy stream waited
                    // for its allocation; `src` outlives the copies because the copy stream is
                    // synchronized before this function returns.
                    unsafe {
                        self.staging.upload_async(
                            dev.device(),
                            &self.copy,
                            regions[i],
                            src,
                            |_, _, _| Ok::<(), Error>(()),
                        )
                    }?;
                    if src.len() < n {
                        dev.bind()?;
                        // SAFETY: the zeroed range is buffer i's tail, ordered on the copy
                        // stream.
                        unsafe {
                            result::memset_d8_async(
                                regions[i] + (src.len() * 32) as u64,
                                0,
                                (n - src.len()) * 32,
                                self.copy.cu_stream(),
                            )
                        }?;
                    }
                }
                if i == 0 && inputs.derive_c {
                    dev.bind()?;
                    // SAFETY: buffers 0 and 2 hold n scalars each; the copy follows a's upload
                    // on the same stream. C starts as a copy of A (then C <- C * B).
                    unsafe {
                        result::memcpy_dtod_async(
                            regions[2],
                            regions[0],
                            n * 32,
                            self.copy.cu_stream(),
                        )
                    }?;
                }
                if interleave {
                    dev.stream().join(&self.copy)?;
                    if i == 1 && inputs.derive_c {
                        // SAFETY: C (a copy of A) and B are distinct buffers of n scalars, both
                        // written by copies the main stream now follows; B is not transformed
                        // before this product reads it (queued next on the same stream).
                        unsafe { self.engine.product(regions[2], regions[1], n as u64) }?;
                    }
                    self.engine.execute(&inputs.steps[i], &regions)?;
                }
            }
            Ok(())
        })();
        // Whatever happened, no copy may still read the caller's slices after we return.
        let synced = self.copy.synchronize();
        result?;
        Ok(synced?)
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
