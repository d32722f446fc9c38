//! The real CUDA driver, and the real `dlsym`, as seen from inside the interposer.
//!
//! The interposer does not link libcuda: it opens `libcuda.so.1` itself on first need and
//! looks every entry point up through glibc's own `dlsym` (found with `dlvsym(RTLD_NEXT, …)`,
//! since the exported `dlsym` of this library is the interposed one). This is one of the two
//! modules with `unsafe` code (the other is `exports`): each call into the driver goes through
//! a typed function pointer resolved by name from the driver's own library.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::ptr::null_mut;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

/// `CUresult`.
pub type CuResult = c_int;
/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CuResult = 0;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
/// `CUDA_ERROR_NOT_INITIALIZED`: returned when `libcuda.so.1` cannot be opened.
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
/// `CUDA_ERROR_NOT_FOUND`: returned when the driver lacks an entry point we were called for.
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
/// `CUdevice`.
pub type CuDevice = c_int;
/// `CUdeviceptr`.
pub type CuDevicePtr = u64;
/// Opaque driver handles (`CUcontext`, `CUstream`, `CUmemoryPool`).
pub type Opaque = *mut c_void;

/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`.
const MEMPOOL_ATTR_RESERVED_MEM_CURRENT: c_int = 5;
/// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT`.
const MEMPOOL_ATTR_USED_MEM_CURRENT: c_int = 7;

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// glibc's `dlsym`. Resolved with `dlvsym`, which this library does not interpose, so that
/// resolving it never comes back here (Rust's standard library and the loader call `dlsym`
/// too, through the interposed symbol).
pub fn real_dlsym() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym takes a pseudo-handle and two NUL-terminated strings; it returns a
            // pointer or null and has no other effect.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
        if p.is_null() {
            return None;
        }
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: p is glibc's dlsym, whose signature is DlsymFn.
    Some(unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) })
}

/// The driver entry points the interposer calls or wraps, by their exact symbol names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Sym {
    MemAlloc,
    MemAllocPitch,
    MemAllocManaged,
    MemFree,
    MemAllocAsync,
    MemAllocAsyncPtsz,
    MemAllocFromPoolAsync,
    MemAllocFromPoolAsyncPtsz,
    MemFreeAsync,
    MemFreeAsyncPtsz,
    MemCreate,
    MemRelease,
    MemGetInfo,
    DeviceTotalMem,
    DevicePrimaryCtxRetain,
    CtxCreate,
    CtxCreateV3,
    CtxCreateV4,
    LaunchKernel,
    LaunchKernelPtsz,
    LaunchKernelEx,
    LaunchKernelExPtsz,
    LaunchCooperativeKernel,
    LaunchCooperativeKernelPtsz,
    GraphLaunch,
    GraphLaunchPtsz,
    CtxSynchronize,
    MemPoolTrimTo,
    DevicePrimaryCtxReset,
    GetProcAddress,
    GetProcAddressV2,
    // Called, not wrapped.
    CtxGetDevice,
    DeviceGetUuidV2,
    DeviceGetUuid,
    DeviceGetMemPool,
    MemPoolGetAttribute,
    CtxGetCurrent,
    CtxSetCurrent,
}

impl Sym {
    /// Every entry point, in `repr` order.
    pub const ALL: [Sym; 38] = [
        Sym::MemAlloc,
        Sym::MemAllocPitch,
        Sym::MemAllocManaged,
        Sym::MemFree,
        Sym::MemAllocAsync,
        Sym::MemAllocAsyncPtsz,
        Sym::MemAllocFromPoolAsync,
        Sym::MemAllocFromPoolAsyncPtsz,
        Sym::MemFreeAsync,
        Sym::MemFreeAsyncPtsz,
        Sym::MemCreate,
        Sym::MemRelease,
        Sym::MemGetInfo,
        Sym::DeviceTotalMem,
        Sym::DevicePrimaryCtxRetain,
        Sym::CtxCreate,
        Sym::CtxCreateV3,
        Sym::CtxCreateV4,
        Sym::LaunchKernel,
        Sym::LaunchKernelPtsz,
        Sym::LaunchKernelEx,
        Sym::LaunchKernelExPtsz,
        Sym::LaunchCooperativeKernel,
        Sym::LaunchCooperativeKernelPtsz,
        Sym::GraphLaunch,
        Sym::GraphLaunchPtsz,
        Sym::CtxSynchronize,
        Sym::MemPoolTrimTo,
        Sym::DevicePrimaryCtxReset,
        Sym::GetProcAddress,
        Sym::GetProcAddressV2,
        Sym::CtxGetDevice,
        Sym::DeviceGetUuidV2,
        Sym::DeviceGetUuid,
        Sym::DeviceGetMemPool,
        Sym::MemPoolGetAttribute,
        Sym::CtxGetCurrent,
        Sym::CtxSetCurrent,
    ];

    /// The symbol's name in libcuda.
    pub fn name(self) -> &'static CStr {
        match self {
            Sym::MemAlloc => c"cuMemAlloc_v2",
            Sym::MemAllocPitch => c"cuMemAllocPitch_v2",
            Sym::MemAllocManaged => c"cuMemAllocManaged",
            Sym::MemFree => c"cuMemFree_v2",
            Sym::MemAllocAsync => c"cuMemAllocAsync",
            Sym::MemAllocAsyncPtsz => c"cuMemAllocAsync_ptsz",
            Sym::MemAllocFromPoolAsync => c"cuMemAllocFromPoolAsync",
            Sym::MemAllocFromPoolAsyncPtsz => c"cuMemAllocFromPoolAsync_ptsz",
            Sym::MemFreeAsync => c"cuMemFreeAsync",
            Sym::MemFreeAsyncPtsz => c"cuMemFreeAsync_ptsz",
            Sym::MemCreate => c"cuMemCreate",
            Sym::MemRelease => c"cuMemRelease",
            Sym::MemGetInfo => c"cuMemGetInfo_v2",
            Sym::DeviceTotalMem => c"cuDeviceTotalMem_v2",
            Sym::DevicePrimaryCtxRetain => c"cuDevicePrimaryCtxRetain",
            Sym::CtxCreate => c"cuCtxCreate_v2",
            Sym::CtxCreateV3 => c"cuCtxCreate_v3",
            Sym::CtxCreateV4 => c"cuCtxCreate_v4",
            Sym::LaunchKernel => c"cuLaunchKernel",
            Sym::LaunchKernelPtsz => c"cuLaunchKernel_ptsz",
            Sym::LaunchKernelEx => c"cuLaunchKernelEx",
            Sym::LaunchKernelExPtsz => c"cuLaunchKernelEx_ptsz",
            Sym::LaunchCooperativeKernel => c"cuLaunchCooperativeKernel",
            Sym::LaunchCooperativeKernelPtsz => c"cuLaunchCooperativeKernel_ptsz",
            Sym::GraphLaunch => c"cuGraphLaunch",
            Sym::GraphLaunchPtsz => c"cuGraphLaunch_ptsz",
            Sym::CtxSynchronize => c"cuCtxSynchronize",
            Sym::MemPoolTrimTo => c"cuMemPoolTrimTo",
            Sym::DevicePrimaryCtxReset => c"cuDevicePrimaryCtxReset_v2",
            Sym::GetProcAddress => c"cuGetProcAddress",
            Sym::GetProcAddressV2 => c"cuGetProcAddress_v2",
            Sym::CtxGetDevice => c"cuCtxGetDevice",
            Sym::DeviceGetUuidV2 => c"cuDeviceGetUuid_v2",
            Sym::DeviceGetUuid => c"cuDeviceGetUuid",
            Sym::DeviceGetMemPool => c"cuDeviceGetMemPool",
            Sym::MemPoolGetAttribute => c"cuMemPoolGetAttribute",
            Sym::CtxGetCurrent => c"cuCtxGetCurrent",
            Sym::CtxSetCurrent => c"cuCtxSetCurrent",
        }
    }

    /// Whether the interposer wraps it (exports it and hands out its own for it).
    pub fn wrapped(self) -> bool {
        (self as usize) <= (Sym::GetProcAddressV2 as usize)
    }

    /// Whether it is wrapped only for the compute lease (`GPUD_COMPUTE=auto`): kernel launches
    /// and the device-global calls. Without it the driver's own are handed out.
    pub fn for_compute(self) -> bool {
        (Sym::LaunchKernel as usize..=Sym::DevicePrimaryCtxReset as usize)
            .contains(&(self as usize))
    }

    /// The wrapped entry point named exactly `name`.
    pub fn wrapped_by_name(name: &[u8]) -> Option<Sym> {
        Sym::ALL
            .into_iter()
            .find(|s| s.wrapped() && s.name().to_bytes() == name)
    }
}

/// The real driver: `libcuda.so.1` and its entry points.
pub struct Driver {
    syms: [usize; Sym::ALL.len()],
}

static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();

/// The real driver, opened on first use; None when `libcuda.so.1` cannot be opened.
pub fn driver() -> Option<&'static Driver> {
    DRIVER.get_or_init(Driver::open).as_ref()
}

macro_rules! entry {
    ($self:ident, $sym:expr, $ty:ty) => {{
        let p = $self.syms[$sym as usize];
        if p == 0 {
            None
        } else {
            // SAFETY: p was resolved from libcuda by the symbol's exact name, whose C
            // signature is $ty (cuda.h); function pointers and usize have one size.
            Some(unsafe { std::mem::transmute::<usize, $ty>(p) })
        }
    }};
}

/// Calls a wrapped entry point with its caller's arguments, or fails as the driver would for
/// a missing one.
macro_rules! forward {
    ($self:ident, $sym:expr, $ty:ty, $($arg:expr),*) => {
        match entry!($self, $sym, $ty) {
            // SAFETY (for the callers): the arguments are the program's own, passed through
            // unchanged to the function it meant to call.
            Some(f) => unsafe { f($($arg),*) },
            None => CUDA_ERROR_NOT_FOUND,
        }
    };
}

type FnAlloc = unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult;
type FnAllocPitch =
    unsafe extern "C" fn(*mut CuDevicePtr, *mut usize, usize, usize, c_uint) -> CuResult;
type FnAllocManaged = unsafe extern "C" fn(*mut CuDevicePtr, usize, c_uint) -> CuResult;
type FnFree = unsafe extern "C" fn(CuDevicePtr) -> CuResult;
type FnAllocAsync = unsafe extern "C" fn(*mut CuDevicePtr, usize, Opaque) -> CuResult;
type FnAllocFromPool = unsafe extern "C" fn(*mut CuDevicePtr, usize, Opaque, Opaque) -> CuResult;
type FnFreeAsync = unsafe extern "C" fn(CuDevicePtr, Opaque) -> CuResult;
type FnMemCreate = unsafe extern "C" fn(*mut u64, usize, *const c_void, u64) -> CuResult;
type FnMemRelease = unsafe extern "C" fn(u64) -> CuResult;
type FnMemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult;
type FnTotalMem = unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult;
type FnPrimaryRetain = unsafe extern "C" fn(*mut Opaque, CuDevice) -> CuResult;
type FnCtxCreate = unsafe extern "C" fn(*mut Opaque, c_uint, CuDevice) -> CuResult;
type FnCtxCreateV3 =
    unsafe extern "C" fn(*mut Opaque, *mut c_void, c_int, c_uint, CuDevice) -> CuResult;
type FnCtxCreateV4 = unsafe extern "C" fn(*mut Opaque, *mut c_void, c_uint, CuDevice) -> CuResult;
type FnGetProc = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
type FnGetProcV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
type FnLaunch = unsafe extern "C" fn(
    Opaque,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    Opaque,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;
type FnLaunchEx =
    unsafe extern "C" fn(*const c_void, Opaque, *mut *mut c_void, *mut *mut c_void) -> CuResult;
type FnLaunchCooperative = unsafe extern "C" fn(
    Opaque,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    Opaque,
    *mut *mut c_void,
) -> CuResult;
type FnGraphLaunch = unsafe extern "C" fn(Opaque, Opaque) -> CuResult;
type FnCtxSynchronize = unsafe extern "C" fn() -> CuResult;
type FnPoolTrim = unsafe extern "C" fn(Opaque, usize) -> CuResult;
type FnPrimaryReset = unsafe extern "C" fn(CuDevice) -> CuResult;
type FnCtxGetCurrent = unsafe extern "C" fn(*mut Opaque) -> CuResult;
type FnCtxSetCurrent = unsafe extern "C" fn(Opaque) -> CuResult;
type FnCtxGetDevice = unsafe extern "C" fn(*mut CuDevice) -> CuResult;
type FnUuid = unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult;
type FnDevicePool = unsafe extern "C" fn(*mut Opaque, CuDevice) -> CuResult;
type FnPoolAttr = unsafe extern "C" fn(Opaque, c_int, *mut c_void) -> CuResult;

impl Driver {
    fn open() -> Option<Driver> {
        let dlsym = real_dlsym()?;
        // SAFETY: dlopen takes a NUL-terminated name and flags; loading the driver runs its
        // initialisers, as the program's own dlopen of it would.
        let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            crate::log::error("cannot open libcuda.so.1: CUDA calls fail as without a driver");
            return None;
        }
        let mut syms = [0usize; Sym::ALL.len()];
        for s in Sym::ALL {
            // SAFETY: a dlsym of a NUL-terminated name in a handle dlopen returned; a handle
            // lookup searches libcuda and its dependencies only, never this library.
            syms[s as usize] = unsafe { dlsym(handle, s.name().as_ptr()) } as usize;
        }
        Some(Driver { syms })
    }

    /// The real entry point's address (null when the driver lacks it).
    pub fn address(&self, s: Sym) -> *mut c_void {
        self.syms[s as usize] as *mut c_void
    }

    /// The device of the calling thread's current context.
    pub fn current_device(&self) -> Option<CuDevice> {
        let f = entry!(self, Sym::CtxGetDevice, FnCtxGetDevice)?;
        let mut dev: CuDevice = 0;
        // SAFETY: dev is a valid out-parameter for the call's duration.
        (unsafe { f(&mut dev) } == CUDA_SUCCESS).then_some(dev)
    }

    /// The device's UUID in NVML's form (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
    pub fn device_uuid(&self, dev: CuDevice) -> Option<String> {
        let f = entry!(self, Sym::DeviceGetUuidV2, FnUuid)
            .or_else(|| entry!(self, Sym::DeviceGetUuid, FnUuid))?;
        let mut bytes = [0u8; 16];
        // SAFETY: bytes is a valid 16-byte out-parameter (CUuuid is `char bytes[16]`).
        if unsafe { f(&mut bytes, dev) } != CUDA_SUCCESS {
            return None;
        }
        Some(format_uuid(&bytes))
    }

    /// The device's current stream-ordered memory pool.
    pub fn device_pool(&self, dev: CuDevice) -> Option<usize> {
        let f = entry!(self, Sym::DeviceGetMemPool, FnDevicePool)?;
        let mut pool: Opaque = null_mut();
        // SAFETY: pool is a valid out-parameter for the call's duration.
        (unsafe { f(&mut pool, dev) } == CUDA_SUCCESS && !pool.is_null()).then_some(pool as usize)
    }

    fn pool_attribute(&self, pool: usize, attribute: c_int) -> Option<u64> {
        let f = entry!(self, Sym::MemPoolGetAttribute, FnPoolAttr)?;
        let mut value: u64 = 0;
        // SAFETY: both attributes asked here are cuuint64_t-valued; value is a valid
        // out-parameter; pool is a handle the driver gave out.
        let r = unsafe { f(pool as Opaque, attribute, (&mut value as *mut u64).cast()) };
        (r == CUDA_SUCCESS).then_some(value)
    }

    /// Bytes the pool reserves from the device now.
    pub fn pool_reserved(&self, pool: usize) -> Option<u64> {
        self.pool_attribute(pool, MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// Bytes of the pool's reservation that live allocations use.
    pub fn pool_used(&self, pool: usize) -> Option<u64> {
        self.pool_attribute(pool, MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    /// # Safety
    /// The caller's arguments to `cuMemAlloc_v2`, unchanged.
    pub unsafe fn mem_alloc(&self, dptr: *mut CuDevicePtr, size: usize) -> CuResult {
        forward!(self, Sym::MemAlloc, FnAlloc, dptr, size)
    }

    /// # Safety
    /// The caller's arguments to `cuMemAllocPitch_v2`, unchanged.
    pub unsafe fn mem_alloc_pitch(
        &self,
        dptr: *mut CuDevicePtr,
        pitch: *mut usize,
        width: usize,
        height: usize,
        element: c_uint,
    ) -> CuResult {
        forward!(
            self,
            Sym::MemAllocPitch,
            FnAllocPitch,
            dptr,
            pitch,
            width,
            height,
            element
        )
    }

    /// # Safety
    /// The caller's arguments to `cuMemAllocManaged`, unchanged.
    pub unsafe fn mem_alloc_managed(
        &self,
        dptr: *mut CuDevicePtr,
        size: usize,
        flags: c_uint,
    ) -> CuResult {
        forward!(
            self,
            Sym::MemAllocManaged,
            FnAllocManaged,
            dptr,
            size,
            flags
        )
    }

    /// `cuMemFree_v2` (safe: a bad pointer is the driver's to refuse).
    pub fn mem_free(&self, dptr: CuDevicePtr) -> CuResult {
        forward!(self, Sym::MemFree, FnFree, dptr)
    }

    /// # Safety
    /// The caller's arguments to `cuMemAllocAsync` (or its `_ptsz` form, `sym`), unchanged.
    pub unsafe fn mem_alloc_async(
        &self,
        sym: Sym,
        dptr: *mut CuDevicePtr,
        size: usize,
        stream: Opaque,
    ) -> CuResult {
        forward!(self, sym, FnAllocAsync, dptr, size, stream)
    }

    /// # Safety
    /// The caller's arguments to `cuMemAllocFromPoolAsync` (or `_ptsz`, `sym`), unchanged.
    pub unsafe fn mem_alloc_from_pool(
        &self,
        sym: Sym,
        dptr: *mut CuDevicePtr,
        size: usize,
        pool: Opaque,
        stream: Opaque,
    ) -> CuResult {
        forward!(self, sym, FnAllocFromPool, dptr, size, pool, stream)
    }

    /// # Safety
    /// The caller's arguments to `cuMemFreeAsync` (or `_ptsz`, `sym`), unchanged.
    pub unsafe fn mem_free_async(&self, sym: Sym, dptr: CuDevicePtr, stream: Opaque) -> CuResult {
        forward!(self, sym, FnFreeAsync, dptr, stream)
    }

    /// # Safety
    /// The caller's arguments to `cuMemCreate`, unchanged.
    pub unsafe fn mem_create(
        &self,
        handle: *mut u64,
        size: usize,
        prop: *const c_void,
        flags: u64,
    ) -> CuResult {
        forward!(self, Sym::MemCreate, FnMemCreate, handle, size, prop, flags)
    }

    /// `cuMemRelease` (safe: a bad handle is the driver's to refuse).
    pub fn mem_release(&self, handle: u64) -> CuResult {
        forward!(self, Sym::MemRelease, FnMemRelease, handle)
    }

    /// # Safety
    /// The caller's arguments to `cuMemGetInfo_v2`, unchanged.
    pub unsafe fn mem_get_info_raw(&self, free: *mut usize, total: *mut usize) -> CuResult {
        forward!(self, Sym::MemGetInfo, FnMemGetInfo, free, total)
    }

    /// # Safety
    /// The caller's arguments to `cuDeviceTotalMem_v2`, unchanged.
    pub unsafe fn device_total_mem(&self, bytes: *mut usize, dev: CuDevice) -> CuResult {
        forward!(self, Sym::DeviceTotalMem, FnTotalMem, bytes, dev)
    }

    /// # Safety
    /// The caller's arguments to `cuDevicePrimaryCtxRetain`, unchanged.
    pub unsafe fn primary_ctx_retain(&self, ctx: *mut Opaque, dev: CuDevice) -> CuResult {
        forward!(self, Sym::DevicePrimaryCtxRetain, FnPrimaryRetain, ctx, dev)
    }

    /// # Safety
    /// The caller's arguments to `cuCtxCreate_v2`, unchanged.
    pub unsafe fn ctx_create(&self, ctx: *mut Opaque, flags: c_uint, dev: CuDevice) -> CuResult {
        forward!(self, Sym::CtxCreate, FnCtxCreate, ctx, flags, dev)
    }

    /// # Safety
    /// The caller's arguments to `cuCtxCreate_v3`, unchanged.
    pub unsafe fn ctx_create_v3(
        &self,
        ctx: *mut Opaque,
        params: *mut c_void,
        n: c_int,
        flags: c_uint,
        dev: CuDevice,
    ) -> CuResult {
        forward!(
            self,
            Sym::CtxCreateV3,
            FnCtxCreateV3,
            ctx,
            params,
            n,
            flags,
            dev
        )
    }

    /// # Safety
    /// The caller's arguments to `cuCtxCreate_v4`, unchanged.
    pub unsafe fn ctx_create_v4(
        &self,
        ctx: *mut Opaque,
        params: *mut c_void,
        flags: c_uint,
        dev: CuDevice,
    ) -> CuResult {
        forward!(
            self,
            Sym::CtxCreateV4,
            FnCtxCreateV4,
            ctx,
            params,
            flags,
            dev
        )
    }

    /// The calling thread's current context (its address; 0 for none).
    pub fn current_context(&self) -> usize {
        let Some(f) = entry!(self, Sym::CtxGetCurrent, FnCtxGetCurrent) else {
            return 0;
        };
        let mut ctx: Opaque = null_mut();
        // SAFETY: ctx is a valid out-parameter for the call's duration.
        if unsafe { f(&mut ctx) } == CUDA_SUCCESS {
            ctx as usize
        } else {
            0
        }
    }

    /// Makes `ctx` (a context the driver gave out) current on the calling thread and waits for
    /// its work: true when the synchronisation succeeded.
    pub fn synchronize_context(&self, ctx: usize) -> bool {
        let (Some(set), Some(sync)) = (
            entry!(self, Sym::CtxSetCurrent, FnCtxSetCurrent),
            entry!(self, Sym::CtxSynchronize, FnCtxSynchronize),
        ) else {
            return false;
        };
        // SAFETY: ctx came from cuCtxGetCurrent; a context destroyed since is refused by the
        // driver with an error code, which reads as a failed synchronisation.
        unsafe { set(ctx as Opaque) == CUDA_SUCCESS && sync() == CUDA_SUCCESS }
    }

    /// # Safety
    /// The caller's arguments to `cuLaunchKernel` (or `_ptsz`, `sym`), unchanged.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_kernel(
        &self,
        sym: Sym,
        f: Opaque,
        grid: [c_uint; 3],
        block: [c_uint; 3],
        shared: c_uint,
        stream: Opaque,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> CuResult {
        forward!(
            self, sym, FnLaunch, f, grid[0], grid[1], grid[2], block[0], block[1], block[2],
            shared, stream, params, extra
        )
    }

    /// # Safety
    /// The caller's arguments to `cuLaunchKernelEx` (or `_ptsz`, `sym`), unchanged.
    pub unsafe fn launch_kernel_ex(
        &self,
        sym: Sym,
        config: *const c_void,
        f: Opaque,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> CuResult {
        forward!(self, sym, FnLaunchEx, config, f, params, extra)
    }

    /// # Safety
    /// The caller's arguments to `cuLaunchCooperativeKernel` (or `_ptsz`, `sym`), unchanged.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_cooperative(
        &self,
        sym: Sym,
        f: Opaque,
        grid: [c_uint; 3],
        block: [c_uint; 3],
        shared: c_uint,
        stream: Opaque,
        params: *mut *mut c_void,
    ) -> CuResult {
        forward!(
            self,
            sym,
            FnLaunchCooperative,
            f,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared,
            stream,
            params
        )
    }

    /// `cuGraphLaunch` (or `_ptsz`, `sym`): safe, a bad handle is the driver's to refuse.
    pub fn graph_launch(&self, sym: Sym, exec: Opaque, stream: Opaque) -> CuResult {
        forward!(self, sym, FnGraphLaunch, exec, stream)
    }

    /// `cuCtxSynchronize`.
    pub fn ctx_synchronize(&self) -> CuResult {
        forward!(self, Sym::CtxSynchronize, FnCtxSynchronize,)
    }

    /// `cuMemPoolTrimTo`.
    pub fn mem_pool_trim_to(&self, pool: Opaque, keep: usize) -> CuResult {
        forward!(self, Sym::MemPoolTrimTo, FnPoolTrim, pool, keep)
    }

    /// `cuDevicePrimaryCtxReset_v2`.
    pub fn primary_ctx_reset(&self, dev: CuDevice) -> CuResult {
        forward!(self, Sym::DevicePrimaryCtxReset, FnPrimaryReset, dev)
    }

    /// # Safety
    /// The caller's arguments to `cuGetProcAddress`, unchanged.
    pub unsafe fn get_proc_address(
        &self,
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        flags: u64,
    ) -> CuResult {
        forward!(
            self,
            Sym::GetProcAddress,
            FnGetProc,
            symbol,
            pfn,
            version,
            flags
        )
    }

    /// # Safety
    /// The caller's arguments to `cuGetProcAddress_v2`, unchanged.
    pub unsafe fn get_proc_address_v2(
        &self,
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        flags: u64,
        status: *mut c_int,
    ) -> CuResult {
        forward!(
            self,
            Sym::GetProcAddressV2,
            FnGetProcV2,
            symbol,
            pfn,
            version,
            flags,
            status
        )
    }
}

/// A CUuuid in NVML's text form, as gpud names devices.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_read_as_nvml_writes_them() {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&[0x5e, 0x1a, 0, 0]);
        b[6] = 0x40;
        b[8] = 0x80;
        b[15] = 1;
        assert_eq!(format_uuid(&b), "GPU-5e1a0000-0000-4000-8000-000000000001");
    }

    #[test]
    fn only_the_wrapped_entry_points_are_found_by_name() {
        assert_eq!(Sym::wrapped_by_name(b"cuMemAlloc_v2"), Some(Sym::MemAlloc));
        assert_eq!(
            Sym::wrapped_by_name(b"cuGetProcAddress_v2"),
            Some(Sym::GetProcAddressV2)
        );
        assert_eq!(Sym::wrapped_by_name(b"cuMemAlloc"), None, "v1: not wrapped");
        assert_eq!(Sym::wrapped_by_name(b"cuCtxGetDevice"), None);
        for (i, s) in Sym::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i, "ALL is in repr order");
        }
    }

    #[test]
    fn glibc_s_dlsym_is_found_without_the_interposed_one() {
        let dlsym = real_dlsym().expect("glibc dlsym");
        // SAFETY: a lookup of a NUL-terminated name in the default scope.
        let p = unsafe { dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert!(!p.is_null());
    }
}
