//! Our own stream-ordered memory pool on one device (not the device's default pool, which
//! other code in the process may share and trim behind our back).

use std::ffi::c_void;

use cudarc::driver::result::mem_pool;
use cudarc::driver::sys::{self, CUdeviceptr, CUmemPool_attribute as Attr, CUstream};

use crate::error::Result;

/// What the pool holds, read from its attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUsage {
    /// Bytes of device memory the pool has mapped (in use or cached).
    pub reserved: u64,
    /// Bytes handed out to live allocations.
    pub used: u64,
    /// Highest `reserved` since the pool was created.
    pub reserved_high: u64,
}

/// A CUDA memory pool. The owning `Device` keeps its context current around every call.
#[derive(Debug)]
pub(crate) struct MemPool {
    pool: sys::CUmemoryPool,
}

// SAFETY: a CUmemoryPool handle may be used from any thread of the process; the driver
// serializes access to the pool.
unsafe impl Send for MemPool {}
// SAFETY: as above; all methods take &self and only call thread-safe driver functions.
unsafe impl Sync for MemPool {}

impl MemPool {
    /// A pool of device memory on `ordinal` that keeps up to `release_threshold` bytes cached
    /// across synchronizations.
    pub(crate) fn create(ordinal: usize, release_threshold: u64) -> Result<Self> {
        // SAFETY: CUmemPoolProps is a plain C struct for which all-zero bytes are the
        // documented defaults; we then set the required fields.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal as i32,
        };
        // SAFETY: `props` is a valid, initialized CUmemPoolProps.
        let pool = unsafe { mem_pool::create(&props) }?;
        let p = Self { pool };
        p.set_release_threshold(release_threshold)?;
        Ok(p)
    }

    pub(crate) fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        let mut v: u64 = bytes;
        // SAFETY: the pool is live; RELEASE_THRESHOLD takes a cuuint64_t.
        unsafe {
            mem_pool::set_attribute(
                self.pool,
                Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut v as *mut u64 as *mut c_void,
            )
        }?;
        Ok(())
    }

    fn get_u64(&self, attr: Attr) -> Result<u64> {
        let mut v: u64 = 0;
        // SAFETY: the pool is live; the memory attributes read here are cuuint64_t.
        unsafe { mem_pool::get_attribute(self.pool, attr, &mut v as *mut u64 as *mut c_void) }?;
        Ok(v)
    }

    pub(crate) fn usage(&self) -> Result<PoolUsage> {
        Ok(PoolUsage {
            reserved: self.get_u64(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            used: self.get_u64(Attr::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            reserved_high: self.get_u64(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        })
    }

    /// Stream-ordered allocation of `bytes` on `stream`.
    pub(crate) fn alloc(&self, bytes: usize, stream: CUstream) -> Result<CUdeviceptr> {
        // SAFETY: pool and stream are live; the memory is uninitialized and typed by the caller.
        Ok(unsafe { mem_pool::alloc_async(self.pool, bytes.max(1), stream) }?)
    }

    /// Releases cached memory beyond `keep` bytes back to the device.
    pub(crate) fn trim_to(&self, keep: u64) -> Result<()> {
        // SAFETY: the pool is live.
        unsafe { mem_pool::trim_to(self.pool, keep as usize) }?;
        Ok(())
    }
}

impl Drop for MemPool {
    fn drop(&mut self) {
        // SAFETY: the pool is live and dropped once; the driver defers the release of memory
        // still in flight until its frees complete.
        let _ = unsafe { mem_pool::destroy(self.pool) };
    }
}
