//! The launcher: queues the MSM kernels of msm.cu on a device's main stream in the order of an
//! [`MsmPlan`], with every temporary charged to the device's lease. One launcher for both
//! groups: the kernels of each group's module take the same arguments, only the point buffers'
//! element types differ ([`MsmCurve`]).

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use blstrs::Scalar;
use cudarc::driver::sys::{CUdeviceptr, CUevent_flags};
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use group::Group;

use super::MsmError;
use super::combine::combine_window_sums;
use super::curve::{G1, G2, MsmCurve};
use super::plan::MsmPlan;
use crate::arena::Arena;
use crate::buffer::DeviceBuffer;
use crate::device::Device;
use crate::kernels::KernelModule;
#[cfg(feature = "bench-variants")]
use crate::kernels::MSM;
use crate::staged::Staging;

/// Threads per block of the point-arithmetic kernels (their `__launch_bounds__`).
const HEAVY_THREADS: u32 = 128;
/// Threads per block of the scalar and scan kernels.
const LIGHT_THREADS: u32 = 256;

/// Scalars per chunk of a pipelined upload (16 MiB): host scalars go to the device in chunks,
/// each converted and counted (the prepare kernel) while the next is copied.
pub(super) const UPLOAD_CHUNK: usize = 1 << 19;
/// Page-locked staging buffers of a pipelined upload from ordinary (pageable) memory: the host
/// fills one while the copy engine drains the others.
const STAGING_BUFFERS: usize = 3;
/// Page-locked host memory an [`MsmEngine`] holds in its staging buffers once it has uploaded
/// scalars from ordinary memory (allocated on first use, freed with the engine): what a host
/// lease books as pinned for it.
pub const STAGING_HOST_BYTES: u64 =
    (STAGING_BUFFERS * UPLOAD_CHUNK * std::mem::size_of::<Scalar>()) as u64;

/// Which build of the kernels to run (see `kernels/msm*.cu`); only with the `bench-variants`
/// feature: the product runs [`MsmVariant::Inline`].
#[cfg(feature = "bench-variants")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsmVariant {
    /// Field multiplication inlined everywhere, hot kernels capped at 168 registers (3 blocks
    /// of 128 threads per multiprocessor). The default.
    Inline,
    /// Field multiplication as a real call: smaller code, call overhead.
    NoInlineMul,
    /// Inlined, with no register cap (2 blocks per multiprocessor, no spills).
    NoRegisterCap,
}

#[cfg(feature = "bench-variants")]
impl MsmVariant {
    /// Every build, for comparisons.
    pub const ALL: [MsmVariant; 3] = [
        MsmVariant::Inline,
        MsmVariant::NoInlineMul,
        MsmVariant::NoRegisterCap,
    ];

    fn module(self) -> &'static KernelModule {
        match self {
            MsmVariant::Inline => &MSM,
            MsmVariant::NoInlineMul => &crate::kernels::MSM_NOINLINE,
            MsmVariant::NoRegisterCap => &crate::kernels::MSM_NOCAP,
        }
    }
}

/// Device time of each phase of one MSM, in milliseconds (CUDA events on the stream).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MsmPhases {
    /// Scalar preparation, counting, scan and scatter (the sort).
    pub sort_ms: f32,
    /// The first accumulation pass (the mixed additions).
    pub accumulate_ms: f32,
    /// The combining passes over partial sums.
    pub combine_ms: f32,
    /// Bucket reduction, group sums and the conversion of the window sums.
    pub reduce_ms: f32,
}

impl MsmPhases {
    /// The sum of the phases.
    pub fn total_ms(&self) -> f32 {
        self.sort_ms + self.accumulate_ms + self.combine_ms + self.reduce_ms
    }
}

/// Bases of group `C` resident on a device, in blstrs' affine layout. Upload them once and run
/// any number of MSMs over them (a proving key's bases stay on the GPU across proofs).
#[derive(Debug)]
pub struct Bases<'d, C: MsmCurve> {
    pub(super) points: DeviceBuffer<'d, C::Affine>,
    pub(super) len: usize,
}

/// BLS12-381 G1 bases resident on a device.
pub type G1Bases<'d> = Bases<'d, G1>;

/// BLS12-381 G2 bases resident on a device (192 bytes each).
pub type G2Bases<'d> = Bases<'d, G2>;

impl<'d, C: MsmCurve> Bases<'d, C> {
    /// Copies `points` to `dev`'s device (charged to its lease) and waits.
    pub fn upload(dev: &'d Arena<'d>, points: &[C::Affine]) -> Result<Self, MsmError> {
        let mut buf = dev.alloc::<C::Affine>(points.len().max(1))?;
        buf.copy_from_host_at(0, points)?;
        Ok(Self {
            points: buf,
            len: points.len(),
        })
    }

    /// Bases held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bases are held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the bases live on.
    pub fn device(&self) -> &'d Device {
        self.points.device()
    }
}

struct Kernels {
    prepare: CudaFunction,
    scan_sum: CudaFunction,
    scan_apply: CudaFunction,
    scatter: CudaFunction,
    accumulate: CudaFunction,
    combine: CudaFunction,
    reduce: CudaFunction,
    group_sum: CudaFunction,
    to_jacobian: CudaFunction,
}

/// Runs MSMs over group `C` (G1 unless named) on one device. Cheap to keep: it holds the loaded
/// kernels only; every MSM allocates its temporaries ([`MsmPlan::temp_bytes_of`]) and frees
/// them before returning.
pub struct MsmEngine<'d, C: MsmCurve = G1> {
    pub(super) dev: &'d Arena<'d>,
    k: Kernels,
    #[cfg(feature = "bench-variants")]
    variant: MsmVariant,
    window_bits: Option<u32>,
    poison: bool,
    pub(super) pipelined_upload: bool,
    /// Copy stream of the pipelined upload.
    copy: Arc<CudaStream>,
    /// Page-locked staging buffers of the pipelined upload (allocated on first use; host
    /// memory, not charged to the lease).
    staging: Mutex<Staging<Scalar>>,
    group: PhantomData<C>,
}

impl<C: MsmCurve> std::fmt::Debug for MsmEngine<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("MsmEngine");
        d.field("group", &C::NAME);
        #[cfg(feature = "bench-variants")]
        d.field("variant", &self.variant);
        d.field("window_bits", &self.window_bits)
            .field("poison", &self.poison)
            .finish_non_exhaustive()
    }
}

/// Where an MSM's points start in its base and scalar buffers: 0 for a whole MSM, the chunk's
/// first point for one chunk of a larger MSM ([`MsmEngine::msm_chunked`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) bases: usize,
    pub(super) scalars: usize,
}

impl Window {
    pub(super) const WHOLE: Self = Self {
        bases: 0,
        scalars: 0,
    };
}

fn grid(threads: u64, block: u32) -> Result<LaunchConfig, MsmError> {
    let blocks = threads.div_ceil(u64::from(block)).max(1);
    let blocks = u32::try_from(blocks).map_err(|_| MsmError::TooManyPoints {
        n: threads as usize,
        max: u32::MAX as usize,
    })?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    })
}

impl<'d> MsmEngine<'d, G1> {
    /// Loads (compiling on first use) the default G1 kernels on `dev`'s device; temporaries are
    /// charged to `dev`.
    pub fn new(dev: &'d Arena<'d>) -> Result<Self, MsmError> {
        Self::for_group(dev)
    }

    /// Loads the given build of the G1 kernels.
    #[cfg(feature = "bench-variants")]
    pub fn with_variant(dev: &'d Arena<'d>, variant: MsmVariant) -> Result<Self, MsmError> {
        let mut engine = Self::load(dev, variant.module())?;
        engine.variant = variant;
        Ok(engine)
    }
}

impl<'d> MsmEngine<'d, G2> {
    /// Loads the G2 kernels built with the accumulation's prefetch of the next point (the
    /// product's G2 build has none), for comparison.
    #[cfg(feature = "bench-variants")]
    pub fn g2_with_prefetch(dev: &'d Arena<'d>) -> Result<Self, MsmError> {
        Self::load(dev, &crate::kernels::MSM_G2_PREFETCH)
    }
}

impl<'d, C: MsmCurve> MsmEngine<'d, C> {
    /// Loads (compiling on first use) the kernels of group `C` on `dev`'s device (e.g.
    /// `MsmEngine::<G2>::for_group(&arena)`); temporaries are charged to `dev`.
    pub fn for_group(dev: &'d Arena<'d>) -> Result<Self, MsmError> {
        Self::load(dev, C::module())
    }

    fn load(dev: &'d Arena<'d>, m: &'static KernelModule) -> Result<Self, MsmError> {
        let f = |name: &'static str| dev.function(m, name);
        let k = Kernels {
            prepare: f("msm_prepare_kernel")?,
            scan_sum: f("msm_scan_sum_kernel")?,
            scan_apply: f("msm_scan_apply_kernel")?,
            scatter: f("msm_scatter_kernel")?,
            accumulate: f("msm_accumulate_kernel")?,
            combine: f("msm_combine_kernel")?,
            reduce: f("msm_bucket_reduce_kernel")?,
            group_sum: f("msm_group_sum_kernel")?,
            to_jacobian: f("msm_to_jacobian_kernel")?,
        };
        let copy = dev.context().new_stream()?;
        Ok(Self {
            dev,
            k,
            #[cfg(feature = "bench-variants")]
            variant: MsmVariant::Inline,
            window_bits: None,
            poison: false,
            pipelined_upload: true,
            copy,
            staging: Mutex::new(Staging::new(STAGING_BUFFERS, UPLOAD_CHUNK)),
            group: PhantomData,
        })
    }

    /// Whether [`MsmEngine::msm`] pipelines the scalar upload with the scalars' conversion
    /// (chunks through page-locked staging buffers, each converted on the GPU while the next is
    /// copied; the default) or copies all scalars first, as the first version did (kept to
    /// time the difference).
    pub fn set_pipelined_upload(&mut self, on: bool) {
        self.pipelined_upload = on;
    }

    /// Forces the window size (else the cost model picks it per size).
    pub fn set_window_bits(&mut self, bits: Option<u32>) {
        self.window_bits = bits;
    }

    /// Fills every temporary with a garbage pattern before use, so that a read of memory no
    /// kernel wrote shows up as a wrong result (checks, not production).
    pub fn set_poison(&mut self, poison: bool) {
        self.poison = poison;
    }

    /// The build of the kernels in use.
    #[cfg(feature = "bench-variants")]
    pub fn variant(&self) -> MsmVariant {
        self.variant
    }

    /// The plan an MSM of `n` points would run.
    pub fn plan(&self, n: usize) -> Result<MsmPlan, MsmError> {
        let sms = self.dev.info().multiprocessors;
        match self.window_bits {
            Some(c) => MsmPlan::with_window_bits(n, c, sms),
            None => MsmPlan::new(n, sms),
        }
    }

    /// sum_i scalars[i] * bases[i] over the first `scalars.len()` bases: uploads the scalars,
    /// runs the kernels and waits.
    pub fn msm(&self, bases: &Bases<'_, C>, scalars: &[Scalar]) -> Result<C::Projective, MsmError> {
        if scalars.len() > bases.len() {
            return Err(MsmError::TooManyScalars {
                scalars: scalars.len(),
                bases: bases.len(),
            });
        }
        if scalars.is_empty() {
            return Ok(C::Projective::identity());
        }
        let mut dev_scalars = self.dev.alloc::<Scalar>(scalars.len())?;
        let plan = self.plan(scalars.len())?;
        if self.pipelined_upload && scalars.len() > UPLOAD_CHUNK {
            return self.run_inner(
                bases,
                &dev_scalars,
                &plan,
                None,
                Some(scalars),
                Window::WHOLE,
            );
        }
        dev_scalars.copy_from_host_at(0, scalars)?;
        self.run(bases, &dev_scalars, &plan, None)
    }

    /// sum_i scalars[i] * bases[i] with the scalars already on the device (e.g. an NTT's
    /// output), over the first `scalars.len()` bases; waits for the result.
    pub fn msm_device(
        &self,
        bases: &Bases<'_, C>,
        scalars: &DeviceBuffer<'_, Scalar>,
    ) -> Result<C::Projective, MsmError> {
        let plan = self.plan(scalars.len())?;
        self.run(bases, scalars, &plan, None)
    }

    /// [`MsmEngine::msm_device`] over the first `n` scalars of the buffer (e.g. the `m - 1`
    /// coefficients of an H polynomial held in a buffer of `m`).
    pub fn msm_device_prefix(
        &self,
        bases: &Bases<'_, C>,
        scalars: &DeviceBuffer<'_, Scalar>,
        n: usize,
    ) -> Result<C::Projective, MsmError> {
        if n > scalars.len() {
            return Err(MsmError::TooManyScalars {
                scalars: n,
                bases: scalars.len(),
            });
        }
        let plan = self.plan(n)?;
        self.run(bases, scalars, &plan, None)
    }

    /// [`MsmEngine::msm_device`] with a given plan, also returning the device time of each
    /// phase (events between the phases; for benchmarks).
    pub fn msm_device_profiled(
        &self,
        bases: &Bases<'_, C>,
        scalars: &DeviceBuffer<'_, Scalar>,
        plan: &MsmPlan,
    ) -> Result<(C::Projective, MsmPhases), MsmError> {
        let mut phases = MsmPhases::default();
        let p = self.run(bases, scalars, plan, Some(&mut phases))?;
        Ok((p, phases))
    }

    fn alloc<T: crate::buffer::DeviceCopy>(
        &self,
        len: usize,
    ) -> Result<DeviceBuffer<'d, T>, MsmError> {
        let mut b = self.dev.alloc::<T>(len.max(1))?;
        if self.poison {
            b.fill_bytes(0x5a)?;
        }
        Ok(b)
    }

    fn zeroed(&self, len: usize) -> Result<DeviceBuffer<'d, u32>, MsmError> {
        let mut b = self.dev.alloc::<u32>(len.max(1))?;
        b.fill_bytes(0)?;
        Ok(b)
    }

    fn event(&self) -> Result<CudaEvent, MsmError> {
        let e = self
            .dev
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        e.record(self.dev.stream())?;
        Ok(e)
    }

    fn run(
        &self,
        bases: &Bases<'_, C>,
        scalars: &DeviceBuffer<'_, Scalar>,
        plan: &MsmPlan,
        phases: Option<&mut MsmPhases>,
    ) -> Result<C::Projective, MsmError> {
        self.run_inner(bases, scalars, plan, phases, None, Window::WHOLE)
    }

    /// Step 1 over scalars `start..start + count` of the MSM (read from the buffer at
    /// `scalar_base + start`): canonical form, digits counted.
    #[allow(clippy::too_many_arguments)]
    fn launch_prepare(
        &self,
        plan: &MsmPlan,
        scalars: &DeviceBuffer<'_, Scalar>,
        scalar_base: usize,
        prepared: &DeviceBuffer<'_, u32>,
        counts: &DeviceBuffer<'_, u32>,
        start: usize,
        count: usize,
    ) -> Result<(), MsmError> {
        let (c, windows) = (plan.window_bits, plan.windows);
        let count32 = count as u32;
        let (mont, pre, cnt) = (
            scalars.device_ptr_at(scalar_base + start)?,
            prepared.device_ptr_at(start * 8)?,
            counts.device_ptr(),
        );
        let mut b = self.dev.stream().launch_builder(&self.k.prepare);
        b.arg(&count32)
            .arg(&c)
            .arg(&windows)
            .arg(&mont)
            .arg(&pre)
            .arg(&cnt);
        // SAFETY: `mont` holds >= count scalars (8 words each) from `scalar_base + start`,
        // `pre` count * 8 words from `start * 8`, `cnt` keys + 1 zeroed words; digits index
        // keys < W * B.
        // Threads past `count` only take part in warp votes. All buffers live on this device,
        // ordered on its main stream.
        unsafe { b.launch(grid(count as u64, LIGHT_THREADS)?) }?;
        Ok(())
    }

    /// Copies `host` into `scalars` in chunks on the copy stream and queues step 1 of each
    /// chunk on the main stream as soon as it lands. From pageable memory each chunk goes
    /// through a page-locked staging buffer, filled on the CPU's cores while the copy engine
    /// drains the previous ones; from page-locked memory chunks are copied directly. Returns
    /// once every copy has been issued; the copy stream is synchronized before returning.
    fn upload_and_prepare(
        &self,
        plan: &MsmPlan,
        host: &[Scalar],
        scalars: &DeviceBuffer<'_, Scalar>,
        prepared: &DeviceBuffer<'_, u32>,
        counts: &DeviceBuffer<'_, u32>,
    ) -> Result<(), MsmError> {
        let result = (|| -> Result<(), MsmError> {
            // The copy stream may write `scalars` only after the main stream allocated it.
            self.copy.join(self.dev.stream())?;
            let mut staging = self.staging.lock().map_err(|_| {
                crate::error::Error::InvalidArgument("staging lock poisoned".into())
            })?;
            // SAFETY: `scalars` holds host.len() scalars (checked by the callers' plans) and
            // the copy stream waited for its allocation; `host` outlives the copies because the
            // copy stream is synchronized before this function returns.
            unsafe {
                staging.upload_async(
                    self.dev.device(),
                    &self.copy,
                    scalars.device_ptr(),
                    host,
                    |landed, start, len| {
                        self.dev.stream().wait(landed)?;
                        self.launch_prepare(plan, scalars, 0, prepared, counts, start, len)
                    },
                )
            }
        })();
        // Whatever happened, no copy may still read the caller's slice.
        let synced = self.copy.synchronize();
        result?;
        synced?;
        Ok(())
    }

    pub(super) fn run_inner(
        &self,
        bases: &Bases<'_, C>,
        scalars: &DeviceBuffer<'_, Scalar>,
        plan: &MsmPlan,
        phases: Option<&mut MsmPhases>,
        host: Option<&[Scalar]>,
        at: Window,
    ) -> Result<C::Projective, MsmError> {
        let n = plan.n;
        // Bases may live in another arena (a resident lease) but must be on this device.
        for on in [bases.device().info(), scalars.device().info()] {
            if on.ordinal != self.dev.info().ordinal {
                return Err(crate::error::Error::InvalidArgument(format!(
                    "MSM inputs on device {} for an engine on {}",
                    on.uuid,
                    self.dev.info().uuid
                ))
                .into());
            }
        }
        let (base_room, scalar_room) = (
            bases.len().saturating_sub(at.bases),
            scalars.len().saturating_sub(at.scalars),
        );
        if n > base_room || n > scalar_room {
            return Err(MsmError::TooManyScalars {
                scalars: n,
                bases: base_room.min(scalar_room),
            });
        }
        if n == 0 {
            return Ok(C::Projective::identity());
        }
        self.dev.bind()?;
        let profile = phases.is_some();
        let stream = self.dev.stream();
        let e0 = if profile { Some(self.event()?) } else { None };

        // 1-3. Sort: prepare + count, scan, scatter.
        let n32 = n as u32;
        let keys = plan.keys();
        let (c, windows) = (plan.window_bits, plan.windows);
        let offsets = self.zeroed(keys as usize + 1)?;
        let prepared = self.alloc::<u32>(n * 8)?;
        match host {
            Some(h) => self.upload_and_prepare(plan, &h[..n], scalars, &prepared, &offsets)?,
            None => self.launch_prepare(plan, scalars, at.scalars, &prepared, &offsets, 0, n)?,
        }
        let levels = plan.scan_levels();
        let scan_tmp: Vec<DeviceBuffer<'d, u32>> = levels
            .iter()
            .skip(1)
            .map(|&l| self.alloc::<u32>(l as usize))
            .collect::<Result<_, _>>()?;
        let mut level_ptrs = vec![offsets.device_ptr()];
        level_ptrs.extend(scan_tmp.iter().map(|b| b.device_ptr()));
        self.scan(&levels, &level_ptrs, plan.scan_chunk)?;
        let fill = self.zeroed(keys as usize)?;
        let entries = self.alloc::<u64>(plan.max_entries() as usize)?;
        {
            let (pre, off, fil, ent) = (
                prepared.device_ptr(),
                offsets.device_ptr(),
                fill.device_ptr(),
                entries.device_ptr(),
            );
            let mut b = stream.launch_builder(&self.k.scatter);
            b.arg(&n32)
                .arg(&c)
                .arg(&windows)
                .arg(&pre)
                .arg(&off)
                .arg(&fil)
                .arg(&ent);
            // SAFETY: `off` holds the exclusive scan of the counts (keys + 1 words), `fil` keys
            // zeroed words, `ent` n * W entries: each key receives exactly its count.
            unsafe { b.launch(grid(n as u64, LIGHT_THREADS)?) }?;
        }
        drop(prepared);
        let e1 = if profile { Some(self.event()?) } else { None };

        // 4. First accumulation pass.
        let buckets = self.alloc::<C::Xyzz>(keys as usize)?;
        let t1 = plan.first_pass_threads();
        let passes = plan.combine_passes();
        let slot_keys = [
            self.alloc::<u32>(2 * t1 as usize)?,
            self.alloc::<u32>(2 * passes.first().copied().unwrap_or(1) as usize)?,
        ];
        let slot_pts = [
            self.alloc::<C::Xyzz>(2 * t1 as usize)?,
            self.alloc::<C::Xyzz>(2 * passes.first().copied().unwrap_or(1) as usize)?,
        ];
        {
            let total = offsets.device_ptr_at(keys as usize)?;
            let (ent, bas, bkt) = (
                entries.device_ptr(),
                bases.points.device_ptr_at(at.bases)?,
                buckets.device_ptr(),
            );
            let (ok, op) = (slot_keys[0].device_ptr(), slot_pts[0].device_ptr());
            let seg = plan.segment;
            let mut b = stream.launch_builder(&self.k.accumulate);
            b.arg(&t1)
                .arg(&seg)
                .arg(&total)
                .arg(&ent)
                .arg(&bas)
                .arg(&bkt)
                .arg(&ok)
                .arg(&op);
            // SAFETY: `total` is offsets[keys] (entry count <= n * W = len of `ent`), entries
            // index bases < n, and `bas` starts `at.bases` into a buffer holding n more; `bkt` holds keys buckets, the slots 2 * t1 each.
            unsafe { b.launch(grid(u64::from(t1), HEAVY_THREADS)?) }?;
        }
        drop(entries);
        let e2 = if profile { Some(self.event()?) } else { None };

        // 5. Combining passes, ping-ponging between the two slot sets.
        let mut threads = t1;
        for (i, &next) in passes.iter().enumerate() {
            let (src, dst) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
            let count = 2 * threads;
            let (ik, ip) = (slot_keys[src].device_ptr(), slot_pts[src].device_ptr());
            let (ok, op) = (slot_keys[dst].device_ptr(), slot_pts[dst].device_ptr());
            let bkt = buckets.device_ptr();
            let seg = plan.combine_segment;
            let mut b = stream.launch_builder(&self.k.combine);
            b.arg(&next)
                .arg(&seg)
                .arg(&count)
                .arg(&ik)
                .arg(&ip)
                .arg(&bkt)
                .arg(&ok)
                .arg(&op);
            // SAFETY: the source slots hold `count` entries written by the previous pass; the
            // destination set holds at least 2 * next slots (set 0: 2 * t1, set 1: 2 * the
            // first pass's threads; passes shrink).
            unsafe { b.launch(grid(u64::from(next), HEAVY_THREADS)?) }?;
            threads = next;
        }
        drop(slot_keys);
        drop(slot_pts);
        let e3 = if profile { Some(self.event()?) } else { None };

        // 6. Bucket reduction and group sums.
        let groups = plan.group_passes();
        let mut red = self.alloc::<C::Xyzz>(plan.reduce_threads() as usize)?;
        {
            let (off, bkt, out) = (offsets.device_ptr(), buckets.device_ptr(), red.device_ptr());
            let (b_, m) = (plan.buckets, plan.reduce_chunk);
            let mut b = stream.launch_builder(&self.k.reduce);
            b.arg(&windows)
                .arg(&b_)
                .arg(&m)
                .arg(&off)
                .arg(&bkt)
                .arg(&out);
            // SAFETY: offsets has keys + 1 words, buckets keys points (written for every key
            // with a non-zero count), `out` W * (B / m) points.
            unsafe { b.launch(grid(u64::from(plan.reduce_threads()), HEAVY_THREADS)?) }?;
        }
        for w in groups.windows(2) {
            let (per, next) = (w[0], w[1]);
            let out_buf = self.alloc::<C::Xyzz>((windows * next) as usize)?;
            let (inp, out) = (red.device_ptr(), out_buf.device_ptr());
            let g = plan.group;
            let mut b = stream.launch_builder(&self.k.group_sum);
            b.arg(&windows).arg(&per).arg(&g).arg(&inp).arg(&out);
            // SAFETY: `inp` holds W * per points, `out` W * ceil(per / group).
            unsafe { b.launch(grid(u64::from(windows * next), HEAVY_THREADS)?) }?;
            red = out_buf;
        }
        let jac = self.alloc::<C::Jacobian>(windows as usize)?;
        {
            let (inp, out) = (red.device_ptr(), jac.device_ptr());
            let mut b = stream.launch_builder(&self.k.to_jacobian);
            b.arg(&windows).arg(&inp).arg(&out);
            // SAFETY: `inp` holds W window sums, `out` W Jacobian points.
            unsafe { b.launch(grid(u64::from(windows), HEAVY_THREADS)?) }?;
        }
        let e4 = if profile { Some(self.event()?) } else { None };
        let mut host = vec![C::jacobian_zeroed(); windows as usize];
        jac.copy_to_host(&mut host)?;
        drop((offsets, fill, buckets, red, jac, scan_tmp));

        if let (Some(out), Some(e0), Some(e1), Some(e2), Some(e3), Some(e4)) =
            (phases, e0, e1, e2, e3, e4)
        {
            out.sort_ms = e0.elapsed_ms(&e1)?;
            out.accumulate_ms = e1.elapsed_ms(&e2)?;
            out.combine_ms = e2.elapsed_ms(&e3)?;
            out.reduce_ms = e3.elapsed_ms(&e4)?;
        }
        Ok(combine_window_sums::<C>(&host, plan.window_bits))
    }

    /// Exclusive scan of `levels[0]` words at `ptrs[0]`, using the chunk-sum buffers of the
    /// deeper levels.
    fn scan(&self, levels: &[u32], ptrs: &[CUdeviceptr], chunk: u32) -> Result<(), MsmError> {
        let stream = self.dev.stream();
        let len = levels[0];
        let data = ptrs[0];
        if levels.len() == 1 {
            let zero: CUdeviceptr = 0;
            let mut b = stream.launch_builder(&self.k.scan_apply);
            b.arg(&len).arg(&chunk).arg(&data).arg(&zero);
            // SAFETY: `data` holds `len` <= chunk words; one thread, no bases.
            unsafe { b.launch(grid(1, LIGHT_THREADS)?) }?;
            return Ok(());
        }
        let sums = ptrs[1];
        let threads = levels[1];
        {
            let mut b = stream.launch_builder(&self.k.scan_sum);
            b.arg(&len).arg(&chunk).arg(&data).arg(&sums);
            // SAFETY: `data` holds `len` words, `sums` ceil(len / chunk) = threads words.
            unsafe { b.launch(grid(u64::from(threads), LIGHT_THREADS)?) }?;
        }
        self.scan(&levels[1..], &ptrs[1..], chunk)?;
        let mut b = stream.launch_builder(&self.k.scan_apply);
        b.arg(&len).arg(&chunk).arg(&data).arg(&sums);
        // SAFETY: as above; `sums` now holds each chunk's exclusive base.
        unsafe { b.launch(grid(u64::from(threads), LIGHT_THREADS)?) }?;
        Ok(())
    }
}
