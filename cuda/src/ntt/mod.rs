//! NTTs over BLS12-381 Fr on the GPU: forward, inverse and coset transforms of one or several
//! polynomials per call, sizes 2^1..2^27, natural order in and out.
//!
//! [`plan`] decides the launches, [`tables`] computes the constants on the host, and
//! [`NttEngine`] runs the launches on a device, caching twiddle and power tables (charged to the
//! lease like any allocation; [`NttEngine::release_tables`] frees them).

pub mod plan;
pub mod tables;
mod variant;

use std::collections::HashMap;

use blstrs::Scalar;
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use crate::arena::Arena;
use crate::buffer::DeviceBuffer;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::fr::FrElement;
use crate::kernels::KernelModule;
use plan::{BITREV_TILE_BITS, BITREV_TILE_THREADS, NttKind, PASS_THREADS, Step, TableKey};
#[cfg(feature = "bench-variants")]
pub use variant::NttVariant;
#[cfg(not(feature = "bench-variants"))]
use variant::NttVariant;
use variant::PassKernel;

/// Threads per block of the element-wise kernels.
const ELEMENTWISE_THREADS: u32 = 256;

#[derive(Debug)]
struct NttKernels {
    pass: CudaFunction,
    radix: CudaFunction,
    radix4: CudaFunction,
    radix4_occ4: CudaFunction,
    twiddles: CudaFunction,
    bitrev: CudaFunction,
    bitrev_tiled: CudaFunction,
    pointwise: CudaFunction,
    pointwise_tiled: CudaFunction,
    product: CudaFunction,
}

impl NttKernels {
    fn load(dev: &Device, module: &'static KernelModule) -> Result<Self> {
        let f = |name| dev.function(module, name);
        Ok(Self {
            pass: f("ntt_pass_kernel")?,
            radix: f("ntt_radix_kernel")?,
            radix4: f("ntt_radix4_kernel")?,
            radix4_occ4: f("ntt_radix4_occ4_kernel")?,
            twiddles: f("ntt_twiddles")?,
            bitrev: f("ntt_bitrev_kernel")?,
            bitrev_tiled: f("ntt_bitrev_tiled_kernel")?,
            pointwise: f("h_pointwise")?,
            pointwise_tiled: f("h_pointwise_tiled_kernel")?,
            product: f("h_product")?,
        })
    }
}

/// Runs transforms on one device.
#[derive(Debug)]
pub struct NttEngine<'d> {
    dev: &'d Arena<'d>,
    variant: NttVariant,
    k: NttKernels,
    tables: HashMap<TableKey, DeviceBuffer<'d, Scalar>>,
}

impl<'d> NttEngine<'d> {
    /// Loads the NTT kernels (compiled by NVRTC on first use, then from the disk cache); tables
    /// and work buffers are charged to `dev`'s lease.
    pub fn new(dev: &'d Arena<'d>) -> Result<Self> {
        Self::load(dev, NttVariant::Radix4Occ4)
    }

    /// Loads the kernels of a given variant.
    #[cfg(feature = "bench-variants")]
    pub fn with_variant(dev: &'d Arena<'d>, variant: NttVariant) -> Result<Self> {
        Self::load(dev, variant)
    }

    fn load(dev: &'d Arena<'d>, variant: NttVariant) -> Result<Self> {
        Ok(Self {
            dev,
            variant,
            k: NttKernels::load(dev, variant.module())?,
            tables: HashMap::new(),
        })
    }

    /// Switches the kernels (tables are kept: every variant reads the same ones).
    #[cfg(feature = "bench-variants")]
    pub fn set_variant(&mut self, variant: NttVariant) -> Result<()> {
        if variant.module().name != self.variant.module().name {
            self.k = NttKernels::load(self.dev, variant.module())?;
        }
        self.variant = variant;
        Ok(())
    }

    /// The kernels in use.
    #[cfg(feature = "bench-variants")]
    pub fn variant(&self) -> NttVariant {
        self.variant
    }

    /// The arena the engine allocates from.
    pub fn arena(&self) -> &'d Arena<'d> {
        self.dev
    }

    /// Transforms every polynomial of `data` (back to back, each 2^log_n points) in place.
    /// Queued on the device's main stream; returns without waiting.
    pub fn run<T: FrElement>(
        &mut self,
        data: &mut DeviceBuffer<'d, T>,
        kind: NttKind,
        log_n: u32,
    ) -> Result<()> {
        plan::check_log_n(log_n)?;
        let n = 1usize << log_n;
        if data.is_empty() || data.len() % n != 0 {
            return Err(Error::InvalidArgument(format!(
                "{} elements is not a whole number of 2^{log_n}-point polynomials",
                data.len()
            )));
        }
        let steps = plan::ntt_steps_max(
            kind,
            log_n,
            (data.len() / n) as u64,
            self.variant.max_stages(),
        );
        self.execute(&steps, &[data.device_ptr()])
    }

    /// Device bytes held by cached tables.
    pub fn table_bytes(&self) -> u64 {
        self.tables.values().map(|b| b.num_bytes() as u64).sum()
    }

    /// Frees the cached tables (they are rebuilt on demand).
    pub fn release_tables(&mut self) {
        self.tables.clear();
    }

    /// Builds every table `steps` read, so that later launches only queue kernels.
    pub fn prepare(&mut self, steps: &[Step]) -> Result<()> {
        for key in plan::tables_used(steps) {
            self.table(key)?;
        }
        Ok(())
    }

    fn table(&mut self, key: TableKey) -> Result<u64> {
        if let Some(b) = self.tables.get(&key) {
            return Ok(b.device_ptr());
        }
        let buf = match key {
            TableKey::Powers { .. } => {
                let host = tables::powers_for(key)
                    .ok_or_else(|| Error::InvalidArgument(format!("{key:?}")))?;
                let mut buf = self.dev.alloc::<Scalar>(host.len())?;
                buf.copy_from_host(&host)?;
                buf
            }
            TableKey::Twiddles { log_n } => {
                let src = self.table(tables::twiddle_source(log_n))?;
                let count = tables::twiddle_count(log_n);
                let buf = self.dev.alloc::<Scalar>(count as usize)?;
                let mut b = self.dev.stream().launch_builder(&self.k.twiddles);
                let out = buf.device_ptr();
                b.arg(&out).arg(&src).arg(&count);
                // SAFETY: `out` holds `count` elements, `src` a full power table; both live on
                // this device and are ordered on its main stream.
                unsafe { b.launch(elementwise_config(self.dev, count)) }?;
                buf
            }
        };
        let ptr = buf.device_ptr();
        self.tables.insert(key, buf);
        Ok(ptr)
    }

    /// Queues `c[i] <- c[i] · b[i]` for `i < n` on the main stream (the H polynomial's C
    /// evaluations from A's and B's).
    ///
    /// # Safety
    /// `c` and `b` must be device addresses of at least `n` scalars each, written by work the
    /// main stream is ordered after, and must not overlap.
    pub(crate) unsafe fn product(&self, c: u64, b: u64, n: u64) -> Result<()> {
        let stream = self.dev.stream();
        let mut launch = stream.launch_builder(&self.k.product);
        launch.arg(&c).arg(&b).arg(&n);
        // SAFETY: the caller guarantees both ranges; the kernel is grid-stride over exactly n.
        unsafe { launch.launch(elementwise_config(self.dev, n)) }?;
        Ok(())
    }

    /// Queues steps of a plan (for timing single launches); `regions[i]` is the device address
    /// of region i.
    ///
    /// # Safety
    /// Each region must hold at least the elements the steps address, and the two regions of a
    /// pointwise step's a and b or c must not overlap.
    pub unsafe fn execute_steps(&mut self, steps: &[Step], regions: &[u64]) -> Result<()> {
        self.execute(steps, regions)
    }

    /// Queues `steps` on the main stream; `regions[i]` is the device address of region i. The
    /// caller guarantees each region holds what the steps address (the planners do).
    pub(crate) fn execute(&mut self, steps: &[Step], regions: &[u64]) -> Result<()> {
        self.prepare(steps)?;
        let region = |r: usize| {
            regions.get(r).copied().ok_or_else(|| {
                Error::InvalidArgument(format!("step names region {r} of {}", regions.len()))
            })
        };
        let stream = self.dev.stream().clone();
        for step in steps {
            match *step {
                Step::Pass {
                    region: r,
                    params,
                    scale,
                } => {
                    let data = region(r)?;
                    let tw = self.table(TableKey::Twiddles {
                        log_n: params.log_n,
                    })?;
                    // Without scaling the kernel never reads the table: pass the twiddles.
                    let sc = match scale {
                        Some(key) => self.table(key)?,
                        None => tw,
                    };
                    let blocks = u32::try_from(params.blocks()).map_err(|_| {
                        Error::InvalidArgument("batch too large for one launch".into())
                    })?;
                    let (f, threads, smem) = match self.variant.pass_kernel() {
                        PassKernel::Stages => (&self.k.pass, PASS_THREADS, params.shared_bytes()),
                        PassKernel::Radix => (
                            &self.k.radix,
                            params.radix_threads(),
                            params.radix_shared_bytes(),
                        ),
                        PassKernel::Radix4 => (
                            &self.k.radix4,
                            params.radix_threads_for(2),
                            params.radix_shared_bytes(),
                        ),
                        PassKernel::Radix4Occ4 => (
                            &self.k.radix4_occ4,
                            params.radix_threads_for(2),
                            params.radix_shared_bytes(),
                        ),
                    };
                    let cfg = LaunchConfig {
                        grid_dim: (blocks, 1, 1),
                        block_dim: (threads, 1, 1),
                        shared_mem_bytes: smem,
                    };
                    let mut b = stream.launch_builder(f);
                    b.arg(&data).arg(&tw).arg(&sc).arg(&params);
                    // SAFETY: `data` holds params.total elements (planner invariant), `tw` the
                    // n/2 twiddles of this size, `sc` a power table when the pass scales;
                    // threads and shared memory are the kernel's for these parameters.
                    unsafe { b.launch(cfg) }?;
                }
                Step::Bitrev {
                    region: r,
                    total,
                    log_n,
                } => {
                    let data = region(r)?;
                    if plan::permutes_by_tiles(self.variant.radix(), log_n) {
                        let mut b = stream.launch_builder(&self.k.bitrev_tiled);
                        b.arg(&data).arg(&log_n);
                        // SAFETY: `data` holds `total` elements, a whole number of polynomials
                        // of 2^log_n >= 2^8 points; one block per 256 elements.
                        unsafe { b.launch(tiles_config(total)?) }?;
                    } else {
                        let mut b = stream.launch_builder(&self.k.bitrev);
                        b.arg(&data).arg(&log_n).arg(&total);
                        // SAFETY: `data` holds `total` elements, a whole number of polynomials.
                        unsafe { b.launch(elementwise_config(self.dev, total)) }?;
                    }
                }
                Step::Pointwise { a, b: rb, c, log_n } => {
                    let (pa, pb, pc) = (region(a)?, region(rb)?, region(c)?);
                    if plan::permutes_by_tiles(self.variant.radix(), log_n) {
                        let mut b = stream.launch_builder(&self.k.pointwise_tiled);
                        b.arg(&pa).arg(&pb).arg(&pc).arg(&log_n);
                        // SAFETY: each region holds 2^log_n >= 2^8 elements; a is distinct from
                        // b and c; one block per 256 elements.
                        unsafe { b.launch(tiles_config(1 << log_n)?) }?;
                    } else {
                        let mut b = stream.launch_builder(&self.k.pointwise);
                        b.arg(&pa).arg(&pb).arg(&pc).arg(&log_n);
                        // SAFETY: each region holds 2^log_n elements; a is distinct from b and c.
                        unsafe { b.launch(elementwise_config(self.dev, 1 << log_n)) }?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A launch of the tiled kernels over `total` elements: one block of 256 threads per tile of 256
/// elements (blocks past a tile pair's smaller index return at once).
fn tiles_config(total: u64) -> Result<LaunchConfig> {
    let blocks = u32::try_from(total >> (2 * BITREV_TILE_BITS))
        .map_err(|_| Error::InvalidArgument("batch too large for one launch".into()))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BITREV_TILE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// A grid-stride launch over `count` elements: enough blocks to fill the device a few times.
fn elementwise_config(dev: &Device, count: u64) -> LaunchConfig {
    let max_blocks = u64::from(dev.info().multiprocessors.max(1)) * 16;
    let blocks = count
        .div_ceil(u64::from(ELEMENTWISE_THREADS))
        .clamp(1, max_blocks);
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (ELEMENTWISE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}
