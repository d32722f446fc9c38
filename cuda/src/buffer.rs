//! Device memory charged against a lease: [`DeviceBuffer`].
//!
//! A buffer knows the device it lives on and the ledger it is charged to, not the arena that
//! made it ([`crate::Arena::alloc`]): this module sits between [`crate::device`] and
//! [`crate::arena`]. It borrows the arena's ledger, so it still cannot outlive the arena.

use std::marker::PhantomData;

use cudarc::driver::result;
use cudarc::driver::sys::{CUdeviceptr, CUstream};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::ledger::Ledger;

/// Plain data that can be copied to and from the device byte for byte.
///
/// # Safety
/// Implementors have no padding, no pointers and no drop glue, and every bit pattern the
/// device may write is a valid value (or the type documents which writes are allowed).
pub unsafe trait DeviceCopy: Copy + Send + Sync + 'static {}

// SAFETY: integers: no padding, every bit pattern valid.
unsafe impl DeviceCopy for u8 {}
// SAFETY: as above.
unsafe impl DeviceCopy for u32 {}
// SAFETY: as above.
unsafe impl DeviceCopy for u64 {}
// SAFETY: arrays of the above.
unsafe impl<const N: usize> DeviceCopy for [u32; N] {}
// SAFETY: arrays of the above.
unsafe impl<const N: usize> DeviceCopy for [u64; N] {}
// SAFETY: `Scalar` is `repr(transparent)` over `blst_fr` = `[u64; 4]` (Montgomery limbs). The
// kernels only write canonical field elements (< r), which are valid Scalars.
unsafe impl DeviceCopy for blstrs::Scalar {}

/// `len` elements of `T` in device memory from an [`crate::Arena`]'s pool. Borrows the arena, so every
/// buffer is gone before the arena can be closed; dropping it frees the memory on the device's
/// main stream and returns its charge to the arena's reservation.
#[derive(Debug)]
pub struct DeviceBuffer<'d, T: DeviceCopy> {
    dev: &'d Device,
    /// The arena's ledger, which the drop refunds.
    ledger: &'d Ledger,
    ptr: CUdeviceptr,
    len: usize,
    charged: u64,
    _t: PhantomData<T>,
}

impl<'d, T: DeviceCopy> DeviceBuffer<'d, T> {
    /// # Safety
    /// `ptr` is a live allocation of at least `len * size_of::<T>()` bytes on `dev` from the
    /// pool of the arena that owns `ledger`, ordered on the device's main stream, charged
    /// `charged` bytes on `ledger`, owned by no one else.
    pub(crate) unsafe fn from_raw(
        dev: &'d Device,
        ledger: &'d Ledger,
        ptr: CUdeviceptr,
        len: usize,
        charged: u64,
    ) -> Self {
        Self {
            dev,
            ledger,
            ptr,
            len,
            charged,
            _t: PhantomData,
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The device the memory lives on.
    pub fn device(&self) -> &'d Device {
        self.dev
    }

    /// The raw device address, for kernel arguments. Valid while the buffer lives.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The raw device address of element `index` (may be `len`, one past the end).
    pub fn device_ptr_at(&self, index: usize) -> Result<CUdeviceptr> {
        if index > self.len {
            return Err(Error::InvalidArgument(format!(
                "index {index} past a buffer of {}",
                self.len
            )));
        }
        Ok(self.ptr + (index * std::mem::size_of::<T>()) as u64)
    }

    fn check_range(&self, offset: usize, count: usize) -> Result<()> {
        match offset.checked_add(count) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "range {offset}..+{count} outside a buffer of {}",
                self.len
            ))),
        }
    }

    /// Copies `src` into elements `offset..offset + src.len()`, on the main stream, and waits.
    pub fn copy_from_host_at(&mut self, offset: usize, src: &[T]) -> Result<()> {
        self.check_range(offset, src.len())?;
        let stream = self.dev.stream();
        // SAFETY: the destination range lies in this allocation; the stream is synchronized
        // before `src` can go away.
        unsafe { self.copy_from_host_async(offset, src, stream.cu_stream()) }?;
        Ok(stream.synchronize()?)
    }

    /// Copies all of `src` (same length) into the buffer and waits.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        if src.len() != self.len {
            return Err(Error::InvalidArgument(format!(
                "{} elements into a buffer of {}",
                src.len(),
                self.len
            )));
        }
        self.copy_from_host_at(0, src)
    }

    /// Copies elements `offset..offset + dst.len()` into `dst`, on the main stream, and waits.
    pub fn copy_to_host_at(&self, offset: usize, dst: &mut [T]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        let stream = self.dev.stream();
        // SAFETY: the source range lies in this allocation; the stream is synchronized before
        // `dst` can be read or go away.
        unsafe { self.copy_to_host_async(offset, dst, stream.cu_stream()) }?;
        Ok(stream.synchronize()?)
    }

    /// Copies the whole buffer into `dst` (same length) and waits.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::InvalidArgument(format!(
                "a buffer of {} into {} elements",
                self.len,
                dst.len()
            )));
        }
        self.copy_to_host_at(0, dst)
    }

    /// Copies the whole buffer into a new vector and waits.
    pub fn to_vec(&self) -> Result<Vec<T>>
    where
        T: Default,
    {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Sets every byte to `byte` on the main stream (tests poison outputs with it).
    pub fn fill_bytes(&mut self, byte: u8) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: the range is exactly this allocation; ordered on the main stream.
        unsafe {
            result::memset_d8_async(
                self.ptr,
                byte,
                self.num_bytes(),
                self.dev.stream().cu_stream(),
            )
        }?;
        Ok(())
    }

    /// Stream-ordered host-to-device copy into elements `offset..`.
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until `stream` has executed the copy, and `stream`
    /// must be ordered after the allocation (the main stream, or one that waited on it).
    pub unsafe fn copy_from_host_async(
        &mut self,
        offset: usize,
        src: &[T],
        stream: CUstream,
    ) -> Result<()> {
        self.check_range(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        let dst = self.device_ptr_at(offset)?;
        // SAFETY: caller guarantees lifetime and ordering; the range was checked.
        unsafe { result::memcpy_htod_async(dst, src, stream) }?;
        Ok(())
    }

    /// Stream-ordered device-to-host copy of elements `offset..` into `dst`.
    ///
    /// # Safety
    /// `dst` must stay alive and untouched until `stream` has executed the copy, and `stream`
    /// must be ordered after the work that wrote the range.
    pub unsafe fn copy_to_host_async(
        &self,
        offset: usize,
        dst: &mut [T],
        stream: CUstream,
    ) -> Result<()> {
        self.check_range(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        let src = self.device_ptr_at(offset)?;
        // SAFETY: caller guarantees lifetime and ordering; the range was checked.
        unsafe { result::memcpy_dtoh_async(dst, src, stream) }?;
        Ok(())
    }
}

impl<T: DeviceCopy> Drop for DeviceBuffer<'_, T> {
    fn drop(&mut self) {
        if self.dev.bind().is_ok() {
            // SAFETY: the allocation is ours and freed once, ordered on the main stream after
            // all work queued there (other streams were joined into it by their users).
            let _ = unsafe { result::free_async(self.ptr, self.dev.stream().cu_stream()) };
        }
        self.ledger.refund(self.charged);
    }
}
