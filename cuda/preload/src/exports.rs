//! The C symbols the interposer exports: `dlsym` and `cuGetProcAddress(_v2)`, which hand out
//! the wrappers below for the entry points the interposer wraps, and the wrappers themselves,
//! which programs linked against libcuda reach directly. Each wrapper asks the enforcer, calls
//! the real entry point with the program's own arguments, and tells the enforcer what came of
//! it. The second of the two modules with `unsafe` code: raw pointers from the program.

#![allow(non_snake_case)] // The exported names are the driver's.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::ptr::null_mut;

use crate::account::round_up;
use crate::driver::{
    CUDA_ERROR_NOT_INITIALIZED, CUDA_SUCCESS, CuDevice, CuDevicePtr, CuResult, Driver, Opaque, Sym,
    driver, real_dlsym,
};
use crate::enforce::Enforcer;

/// Whether `sym`'s wrapper is handed out: the compute wrappers only under `GPUD_COMPUTE=auto`
/// (otherwise the program gets the driver's own launch functions, at no cost).
fn hands_out(sym: Sym) -> bool {
    !sym.for_compute() || Enforcer::get().compute_enabled()
}

/// The wrapper the interposer hands out for `sym`.
fn wrapper(sym: Sym) -> *mut c_void {
    let f: *const () = match sym {
        Sym::MemAlloc => cuMemAlloc_v2 as *const (),
        Sym::MemAllocPitch => cuMemAllocPitch_v2 as *const (),
        Sym::MemAllocManaged => cuMemAllocManaged as *const (),
        Sym::MemFree => cuMemFree_v2 as *const (),
        Sym::MemAllocAsync => cuMemAllocAsync as *const (),
        Sym::MemAllocAsyncPtsz => cuMemAllocAsync_ptsz as *const (),
        Sym::MemAllocFromPoolAsync => cuMemAllocFromPoolAsync as *const (),
        Sym::MemAllocFromPoolAsyncPtsz => cuMemAllocFromPoolAsync_ptsz as *const (),
        Sym::MemFreeAsync => cuMemFreeAsync as *const (),
        Sym::MemFreeAsyncPtsz => cuMemFreeAsync_ptsz as *const (),
        Sym::MemCreate => cuMemCreate as *const (),
        Sym::MemRelease => cuMemRelease as *const (),
        Sym::MemGetInfo => cuMemGetInfo_v2 as *const (),
        Sym::DeviceTotalMem => cuDeviceTotalMem_v2 as *const (),
        Sym::DevicePrimaryCtxRetain => cuDevicePrimaryCtxRetain as *const (),
        Sym::CtxCreate => cuCtxCreate_v2 as *const (),
        Sym::CtxCreateV3 => cuCtxCreate_v3 as *const (),
        Sym::CtxCreateV4 => cuCtxCreate_v4 as *const (),
        Sym::LaunchKernel => cuLaunchKernel as *const (),
        Sym::LaunchKernelPtsz => cuLaunchKernel_ptsz as *const (),
        Sym::LaunchKernelEx => cuLaunchKernelEx as *const (),
        Sym::LaunchKernelExPtsz => cuLaunchKernelEx_ptsz as *const (),
        Sym::LaunchCooperativeKernel => cuLaunchCooperativeKernel as *const (),
        Sym::LaunchCooperativeKernelPtsz => cuLaunchCooperativeKernel_ptsz as *const (),
        Sym::GraphLaunch => cuGraphLaunch as *const (),
        Sym::GraphLaunchPtsz => cuGraphLaunch_ptsz as *const (),
        Sym::CtxSynchronize => cuCtxSynchronize as *const (),
        Sym::MemPoolTrimTo => cuMemPoolTrimTo as *const (),
        Sym::DevicePrimaryCtxReset => cuDevicePrimaryCtxReset_v2 as *const (),
        Sym::GetProcAddress => cuGetProcAddress as *const (),
        Sym::GetProcAddressV2 => cuGetProcAddress_v2 as *const (),
        Sym::CtxGetDevice
        | Sym::DeviceGetUuidV2
        | Sym::DeviceGetUuid
        | Sym::DeviceGetMemPool
        | Sym::MemPoolGetAttribute
        | Sym::CtxGetCurrent
        | Sym::CtxSetCurrent => return null_mut(),
    };
    f as *mut c_void
}

/// An exported driver entry point and its per-thread default stream twin (`_ptsz`): one
/// body, which forwards to the driver symbol (`sym`) the function was exported as.
macro_rules! with_ptsz {
    ($name:ident, $ptsz:ident: $sym:ident = $plain:ident, $twin:ident;
     ($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        /// # Safety
        /// The driver's contract for these arguments.
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
            let $sym = Sym::$plain;
            $body
        }

        /// # Safety
        /// The driver's contract for these arguments.
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $ptsz($($arg: $ty),*) -> CuResult {
            let $sym = Sym::$twin;
            $body
        }
    };
}

/// The program's `dlsym`: glibc's answer, except that a wrapped entry point found there is
/// answered with its wrapper. (`RTLD_NEXT` asked by the program searches after this library
/// rather than after the caller: glibc sees the interposer as the caller.)
///
/// # Safety
/// dlsym's contract: `symbol` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = real_dlsym() else {
        return null_mut();
    };
    // SAFETY: the caller's arguments, passed on to glibc's dlsym.
    let found = unsafe { real(handle, symbol) };
    if found.is_null() || symbol.is_null() {
        return found;
    }
    // SAFETY: symbol is a NUL-terminated string (dlsym's contract, checked non-null above).
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if name.starts_with(b"cu")
        && let Some(sym) = Sym::wrapped_by_name(name)
        && hands_out(sym)
    {
        return wrapper(sym);
    }
    found
}

/// Replaces a real entry point the driver handed out with its wrapper. The driver chooses
/// the variant for the asked version (`cuMemAlloc` at 3020 is `cuMemAlloc_v2`); comparing
/// addresses wraps exactly the variants whose signatures the wrappers have.
///
/// # Safety
/// `pfn` is null or points to the driver's answer.
unsafe fn substitute(d: &Driver, pfn: *mut *mut c_void) {
    if pfn.is_null() {
        return;
    }
    // SAFETY: pfn points to a pointer the driver just wrote.
    let got = unsafe { *pfn };
    if got.is_null() {
        return;
    }
    if let Some(sym) = Sym::ALL
        .into_iter()
        .find(|&s| s.wrapped() && d.address(s) == got)
        && hands_out(sym)
    {
        // SAFETY: as above; the wrapper has the variant's signature.
        unsafe { *pfn = wrapper(sym) };
    }
}

/// `cuGetProcAddress` (CUDA 11.3–11.8's form, still exported).
///
/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { d.get_proc_address(symbol, pfn, version, flags) };
    if r == CUDA_SUCCESS {
        // SAFETY: pfn holds the driver's answer.
        unsafe { substitute(d, pfn) };
    }
    r
}

/// `cuGetProcAddress_v2` (CUDA 12 and later; what the runtime, static or not, uses to find
/// every other entry point).
///
/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { d.get_proc_address_v2(symbol, pfn, version, flags, status) };
    if r == CUDA_SUCCESS {
        // SAFETY: pfn holds the driver's answer.
        unsafe { substitute(d, pfn) };
    }
    r
}

/// The driver and the current context's device, or the call passes through unaccounted.
fn current() -> Option<(&'static Driver, CuDevice)> {
    let d = driver()?;
    Some((d, d.current_device()?))
}

/// Runs `alloc` (the real call, writing the new pointer to `dptr`) for `size` bytes on the
/// current device, admitted first and counted after.
///
/// # Safety
/// `dptr` is the program's out-parameter for the real call.
unsafe fn counted(
    dptr: *mut CuDevicePtr,
    size: u64,
    alloc: impl Fn(&Driver) -> CuResult,
) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let Some(dev) = d.current_device() else {
        return alloc(d);
    };
    let e = Enforcer::get();
    let admitted = match e.admit(dev, size) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let r = e.allocate(admitted, || alloc(d));
    if r == CUDA_SUCCESS && !dptr.is_null() {
        // SAFETY: the driver wrote the new pointer there.
        e.settle_block(dev, unsafe { *dptr }, size, size);
    } else {
        e.cancel(dev, size);
    }
    r
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CuDevicePtr, size: usize) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    unsafe { counted(dptr, size as u64, |d| d.mem_alloc(dptr, size)) }
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CuDevicePtr,
    size: usize,
    flags: c_uint,
) -> CuResult {
    // Managed memory is counted whole against the current device, as if it all lived there.
    // SAFETY: the caller's arguments, passed on.
    unsafe {
        counted(dptr, size as u64, |d| {
            d.mem_alloc_managed(dptr, size, flags)
        })
    }
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CuDevicePtr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: c_uint,
) -> CuResult {
    let Some((d, dev)) = current() else {
        // SAFETY: the caller's arguments, passed on.
        return driver().map_or(CUDA_ERROR_NOT_INITIALIZED, |d| unsafe {
            d.mem_alloc_pitch(dptr, pitch, width, height, element)
        });
    };
    // Admitted at a 512-byte row pitch (the driver's usual alignment), settled at the pitch
    // it chose.
    let estimate = round_up(width as u64, 512).saturating_mul(height as u64);
    let e = Enforcer::get();
    let admitted = match e.admit(dev, estimate) {
        Ok(a) => a,
        Err(r) => return r,
    };
    // SAFETY: the caller's arguments, passed on.
    let r = e.allocate(admitted, || unsafe {
        d.mem_alloc_pitch(dptr, pitch, width, height, element)
    });
    if r == CUDA_SUCCESS && !dptr.is_null() && !pitch.is_null() {
        // SAFETY: the driver wrote both out-parameters.
        let (ptr, actual) = unsafe { (*dptr, (*pitch as u64).saturating_mul(height as u64)) };
        e.settle_block(dev, ptr, estimate, actual);
    } else {
        e.cancel(dev, estimate);
    }
    r
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CuDevicePtr) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let r = d.mem_free(dptr);
    if r == CUDA_SUCCESS {
        Enforcer::get().freed_block(dptr);
    }
    r
}

/// A stream-ordered allocation from `pool` (the device's current pool when None): admitted
/// for what it may add to the pool's reservation, counted as the pool's reservation after.
///
/// # Safety
/// `dptr` is the program's out-parameter for the real call.
unsafe fn pooled(
    dptr: *mut CuDevicePtr,
    size: usize,
    pool: Option<usize>,
    alloc: impl Fn(&Driver) -> CuResult,
) -> CuResult {
    let Some((d, dev)) = current() else {
        return driver().map_or(CUDA_ERROR_NOT_INITIALIZED, alloc);
    };
    let Some(pool) = pool.or_else(|| d.device_pool(dev)) else {
        // No pool to ask: count the block alone.
        // SAFETY: the caller's out-parameter.
        return unsafe { counted(dptr, size as u64, alloc) };
    };
    let e = Enforcer::get();
    let growth = e.pool_growth(pool, size as u64);
    let admitted = match e.admit(dev, growth) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let r = e.allocate(admitted, || alloc(d));
    if r != CUDA_SUCCESS {
        e.cancel(dev, growth);
    } else if !e.settle_pool(dev, pool, growth) && !dptr.is_null() {
        // The driver does not report the pool's reservation: count the block alone (the
        // admitted bytes were taken back by settle_pool).
        // SAFETY: the driver wrote the new pointer there.
        let ptr = unsafe { *dptr };
        e.settle_block(dev, ptr, 0, size as u64);
    }
    r
}

with_ptsz! {
    cuMemAllocAsync, cuMemAllocAsync_ptsz: sym = MemAllocAsync, MemAllocAsyncPtsz;
    (dptr: *mut CuDevicePtr, size: usize, stream: Opaque) {
        // SAFETY: the caller's arguments, passed on.
        unsafe { pooled(dptr, size, None, |d| d.mem_alloc_async(sym, dptr, size, stream)) }
    }
}

with_ptsz! {
    cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz:
        sym = MemAllocFromPoolAsync, MemAllocFromPoolAsyncPtsz;
    (dptr: *mut CuDevicePtr, size: usize, pool: Opaque, stream: Opaque) {
        // SAFETY: the caller's arguments, passed on.
        unsafe {
            pooled(dptr, size, Some(pool as usize), |d| {
                d.mem_alloc_from_pool(sym, dptr, size, pool, stream)
            })
        }
    }
}

fn freed_async(r: CuResult, dptr: CuDevicePtr) -> CuResult {
    if r == CUDA_SUCCESS {
        let e = Enforcer::get();
        if e.has_block(dptr) {
            e.freed_block(dptr);
        } else {
            // The pool keeps the memory until the driver trims it; follow its reservation.
            e.refresh_pools();
        }
    }
    r
}

with_ptsz! {
    cuMemFreeAsync, cuMemFreeAsync_ptsz: sym = MemFreeAsync, MemFreeAsyncPtsz;
    (dptr: CuDevicePtr, stream: Opaque) {
        let Some(d) = driver() else {
            return CUDA_ERROR_NOT_INITIALIZED;
        };
        // SAFETY: the caller's arguments, passed on.
        freed_async(unsafe { d.mem_free_async(sym, dptr, stream) }, dptr)
    }
}

/// The leading fields of `CUmemAllocationProp` (cuda.h): type, requested handle types, and
/// the location (its type and id).
#[repr(C)]
struct AllocationPropHead {
    kind: c_int,
    handle_types: c_int,
    location_type: c_int,
    location_id: c_int,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: c_int = 1;

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const c_void,
    flags: u64,
) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let dev = if prop.is_null() {
        None
    } else {
        // SAFETY: prop points to a CUmemAllocationProp, which starts with these fields.
        let head = unsafe { &*(prop as *const AllocationPropHead) };
        (head.location_type == LOCATION_DEVICE).then_some(head.location_id)
    };
    let Some(dev) = dev.or_else(|| d.current_device()) else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { d.mem_create(handle, size, prop, flags) };
    };
    let e = Enforcer::get();
    let admitted = match e.admit(dev, size as u64) {
        Ok(a) => a,
        Err(r) => return r,
    };
    // SAFETY: the caller's arguments, passed on.
    let r = e.allocate(admitted, || unsafe {
        d.mem_create(handle, size, prop, flags)
    });
    if r == CUDA_SUCCESS && !handle.is_null() {
        // SAFETY: the driver wrote the handle there.
        e.settle_handle(dev, unsafe { *handle }, size as u64);
    } else {
        e.cancel(dev, size as u64);
    }
    r
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRelease(handle: u64) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let r = d.mem_release(handle);
    if r == CUDA_SUCCESS {
        Enforcer::get().released_handle(handle);
    }
    r
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { d.mem_get_info_raw(free, total) };
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() {
        return r;
    }
    let Some(dev) = d.current_device() else {
        return r;
    };
    // SAFETY: the driver wrote both.
    let (real_free, real_total) = unsafe { (*free as u64, *total as u64) };
    let (f, t) = Enforcer::get().mem_info(dev, real_free, real_total);
    // SAFETY: the caller's out-parameters, written by the driver a moment ago.
    unsafe {
        *free = f as usize;
        *total = t as usize;
    }
    r
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CuDevice) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { d.device_total_mem(bytes, dev) };
    if r == CUDA_SUCCESS && !bytes.is_null() {
        // SAFETY: the driver wrote it.
        let real = unsafe { *bytes } as u64;
        let reported = Enforcer::get().total_mem(dev, real);
        // SAFETY: as above.
        unsafe { *bytes = reported as usize };
    }
    r
}

/// A context was made on `dev`: its first use (the lease, the context's footprint).
fn context_made(r: CuResult, dev: CuDevice) -> CuResult {
    if r == CUDA_SUCCESS {
        Enforcer::get().first_use(dev);
    }
    r
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut Opaque, dev: CuDevice) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's arguments, passed on.
    context_made(unsafe { d.primary_ctx_retain(ctx, dev) }, dev)
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(
    ctx: *mut Opaque,
    flags: c_uint,
    dev: CuDevice,
) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's arguments, passed on.
    context_made(unsafe { d.ctx_create(ctx, flags, dev) }, dev)
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v3(
    ctx: *mut Opaque,
    params: *mut c_void,
    n: c_int,
    flags: c_uint,
    dev: CuDevice,
) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's arguments, passed on.
    context_made(unsafe { d.ctx_create_v3(ctx, params, n, flags, dev) }, dev)
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v4(
    ctx: *mut Opaque,
    params: *mut c_void,
    flags: c_uint,
    dev: CuDevice,
) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's arguments, passed on.
    context_made(unsafe { d.ctx_create_v4(ctx, params, flags, dev) }, dev)
}

/// Runs `call` under the current device's compute lease (`GPUD_COMPUTE=auto`).
fn computed(call: impl FnOnce(&Driver) -> CuResult) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    let e = Enforcer::get();
    if !e.compute_enabled() {
        return call(d);
    }
    match d.current_device() {
        Some(dev) => e.under_compute(dev, || call(d)),
        None => call(d),
    }
}

with_ptsz! {
    cuLaunchKernel, cuLaunchKernel_ptsz: sym = LaunchKernel, LaunchKernelPtsz;
    (
        f: Opaque,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared: c_uint,
        stream: Opaque,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        // SAFETY: the caller's arguments, passed on.
        computed(|d| unsafe {
            d.launch_kernel(sym, f, [gx, gy, gz], [bx, by, bz], shared, stream, params, extra)
        })
    }
}

with_ptsz! {
    cuLaunchKernelEx, cuLaunchKernelEx_ptsz: sym = LaunchKernelEx, LaunchKernelExPtsz;
    (config: *const c_void, f: Opaque, params: *mut *mut c_void, extra: *mut *mut c_void) {
        // SAFETY: the caller's arguments, passed on.
        computed(|d| unsafe { d.launch_kernel_ex(sym, config, f, params, extra) })
    }
}

with_ptsz! {
    cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz:
        sym = LaunchCooperativeKernel, LaunchCooperativeKernelPtsz;
    (
        f: Opaque,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared: c_uint,
        stream: Opaque,
        params: *mut *mut c_void,
    ) {
        // SAFETY: the caller's arguments, passed on.
        computed(|d| unsafe {
            d.launch_cooperative(sym, f, [gx, gy, gz], [bx, by, bz], shared, stream, params)
        })
    }
}

with_ptsz! {
    cuGraphLaunch, cuGraphLaunch_ptsz: sym = GraphLaunch, GraphLaunchPtsz;
    (exec: Opaque, stream: Opaque) {
        computed(|d| d.graph_launch(sym, exec, stream))
    }
}

/// A device-global call: under the compute lease; pools may have given memory back after it.
///
/// # Safety
/// Takes no arguments from the program.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSynchronize() -> CuResult {
    let r = computed(|d| d.ctx_synchronize());
    if r == CUDA_SUCCESS {
        Enforcer::get().refresh_pools();
    }
    r
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: Opaque, keep: usize) -> CuResult {
    let r = computed(|d| d.mem_pool_trim_to(pool, keep));
    if r == CUDA_SUCCESS {
        Enforcer::get().refresh_pools();
    }
    r
}

/// # Safety
/// The driver's contract for these arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CuDevice) -> CuResult {
    let Some(d) = driver() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    Enforcer::get().under_compute(dev, || d.primary_ctx_reset(dev))
}
