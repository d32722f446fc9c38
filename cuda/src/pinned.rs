//! Page-locked host memory: the source and destination of transfers that overlap with compute.

use std::ffi::c_void;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use cudarc::driver::result;
use cudarc::driver::sys;

use crate::buffer::DeviceCopy;
use crate::device::Device;
use crate::error::{Error, Result};

/// `len` elements of `T` in page-locked host memory, zero-filled. Let the producer (e.g. the
/// prover's witness synthesis) write straight into it: transfers from it need no staging copy.
#[derive(Debug)]
pub struct PinnedBuffer<T: DeviceCopy> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: the buffer owns its memory like a Vec<T>; T is Send + Sync plain data.
unsafe impl<T: DeviceCopy> Send for PinnedBuffer<T> {}
// SAFETY: shared access only hands out &[T].
unsafe impl<T: DeviceCopy> Sync for PinnedBuffer<T> {}

impl<T: DeviceCopy> PinnedBuffer<T> {
    /// Allocates `len` zeroed elements of page-locked memory usable by every context.
    pub fn zeroed(dev: &Device, len: usize) -> Result<Self> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("{len} elements overflow usize")))?;
        dev.bind()?;
        // SAFETY: plain allocation; PORTABLE makes it pinned for every context.
        let p =
            unsafe { result::malloc_host(bytes.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) }? as *mut T;
        // SAFETY: `p` points to `bytes` writable bytes; all-zero bytes are a valid T
        // (DeviceCopy types are plain data for which zero is a value).
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, bytes) };
        Ok(Self { ptr: p, len })
    }
}

impl<T: DeviceCopy> Deref for PinnedBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialized elements for the buffer's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: DeviceCopy> DerefMut for PinnedBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: DeviceCopy> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc and freed once.
        let _ = unsafe { result::free_host(self.ptr as *mut c_void) };
    }
}

/// Host memory that already exists (a shared vector, e.g. a proving key's bases), page-locked in
/// place with cuMemHostRegister for as long as this value lives, so that every transfer from it is
/// a direct DMA instead of the driver's staged copy of ordinary memory. It keeps a clone of the
/// `Arc`: the vector can neither be freed nor reallocated while it is registered.
#[derive(Debug)]
pub struct RegisteredVec<T: DeviceCopy> {
    data: Arc<Vec<T>>,
}

impl<T: DeviceCopy> RegisteredVec<T> {
    /// Page-locks `data`'s elements for every context (PORTABLE). Fails (typed, nothing
    /// registered) when the driver refuses, e.g. when the range shares pages with memory
    /// registered before; transfers then work as from ordinary memory. An empty vector is
    /// refused too: there is nothing to lock.
    pub fn register(dev: &Device, data: Arc<Vec<T>>) -> Result<Self> {
        let bytes = std::mem::size_of_val(data.as_slice());
        if bytes == 0 {
            return Err(Error::InvalidArgument(
                "nothing to page-lock: the vector is empty".into(),
            ));
        }
        dev.bind()?;
        // SAFETY: the range is the vector's initialized elements, alive and never moved while
        // `data` (held by the returned value) lives; unregistered in Drop before it is released.
        let r = unsafe {
            sys::cuMemHostRegister_v2(
                data.as_ptr() as *mut c_void,
                bytes,
                sys::CU_MEMHOSTREGISTER_PORTABLE,
            )
        };
        r.result()?;
        Ok(Self { data })
    }

    /// Bytes page-locked.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(self.data.as_slice())
    }
}

impl<T: DeviceCopy> Deref for RegisteredVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T: DeviceCopy> Drop for RegisteredVec<T> {
    fn drop(&mut self) {
        // SAFETY: registered in `register` at this address, unregistered once, while `data` is
        // still alive.
        let _ = unsafe { sys::cuMemHostUnregister(self.data.as_ptr() as *mut c_void) };
    }
}

/// Whether `[ptr, ptr + bytes)` is page-locked host memory known to CUDA (allocated by
/// cuMemHostAlloc or registered), so that an async copy from it overlaps with compute.
pub fn is_pinned<T>(slice: &[T]) -> bool {
    if slice.is_empty() {
        return true;
    }
    let first = slice.as_ptr() as u64;
    let last = first + (std::mem::size_of_val(slice) - 1) as u64;
    let host = |addr: u64| {
        let mut kind: u32 = 0;
        // SAFETY: a query; the driver only reads the address' bookkeeping and writes `kind`.
        let r = unsafe {
            sys::cuPointerGetAttribute(
                &mut kind as *mut u32 as *mut c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                addr,
            )
        };
        r == sys::CUresult::CUDA_SUCCESS && kind == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
    };
    host(first) && host(last)
}
