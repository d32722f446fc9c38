//! Uploads from ordinary (pageable) host memory at DMA speed. The driver copies pageable memory
//! through a small bounce buffer of its own, on one thread, at a fraction of the bus's speed;
//! here the CPU's cores copy each chunk into one of a few page-locked staging buffers while the
//! copy engine drains the others. From memory that is already page-locked the chunks are copied
//! directly, with no staging.

use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUevent_flags};
use cudarc::driver::{CudaEvent, CudaStream};
use rayon::prelude::*;

use crate::buffer::DeviceCopy;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::pinned::{PinnedBuffer, is_pinned};

/// Elements each core copies at a time into a staging buffer (a few hundred KiB).
const COPY_GRAIN_BYTES: usize = 512 << 10;

/// A few page-locked buffers of `chunk` elements each, and the events of the copies that last
/// read them. Allocated on the first staged upload; reused by later ones.
#[derive(Debug)]
pub(crate) struct Staging<T: DeviceCopy> {
    count: usize,
    chunk: usize,
    buffers: Vec<PinnedBuffer<T>>,
    /// The event recorded after the copy that last read each buffer, if any.
    pending: Vec<Option<CudaEvent>>,
}

impl<T: DeviceCopy> Staging<T> {
    /// Room for `count` buffers of `chunk` elements (none allocated yet).
    pub fn new(count: usize, chunk: usize) -> Self {
        Self {
            count: count.max(1),
            chunk: chunk.max(1),
            buffers: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Copies `src` to device memory at `dst` on `stream`, chunk by chunk; after each chunk's
    /// copy is queued, calls `landed(event, start, len)` with an event that completes when
    /// elements `start..start + len` are on the device (to make another stream wait for them
    /// and queue work on them). Returns once every copy is queued.
    ///
    /// # Safety
    /// `dst` must hold `src.len()` elements of `T`, and `stream` must be ordered after its
    /// allocation. When `src` is page-locked it is read by the copies themselves: it must stay
    /// alive and unmodified until `stream` has executed them. (From ordinary memory `src` is
    /// only read before this returns.)
    pub unsafe fn upload_async<E: From<Error>>(
        &mut self,
        dev: &Device,
        stream: &Arc<CudaStream>,
        dst: CUdeviceptr,
        src: &[T],
        mut landed: impl FnMut(&CudaEvent, usize, usize) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let size = std::mem::size_of::<T>();
        if is_pinned(src) {
            let event = new_event(dev)?;
            for (i, part) in src.chunks(self.chunk).enumerate() {
                let at = dst + (i * self.chunk * size) as u64;
                dev.bind()?;
                // SAFETY: the caller guarantees `dst` holds the range, that `stream` follows
                // its allocation, and that `src` (page-locked) outlives the copy.
                unsafe { cudarc::driver::result::memcpy_htod_async(at, part, stream.cu_stream()) }
                    .map_err(Error::from)?;
                event.record(stream).map_err(Error::from)?;
                landed(&event, i * self.chunk, part.len())?;
            }
            return Ok(());
        }
        self.allocate(dev)?;
        let grain = (COPY_GRAIN_BYTES / size.max(1)).max(1);
        for (i, part) in src.chunks(self.chunk).enumerate() {
            let slot = i % self.count;
            // The copy that last read this buffer must be done before it is filled again.
            if let Some(e) = self.pending[slot].take() {
                e.synchronize().map_err(Error::from)?;
            }
            let buf = &mut self.buffers[slot][..part.len()];
            buf.par_chunks_mut(grain)
                .zip(part.par_chunks(grain))
                .for_each(|(d, s)| d.copy_from_slice(s));
            let at = dst + (i * self.chunk * size) as u64;
            dev.bind()?;
            // SAFETY: the staging buffer is page-locked, owned here and not written again
            // before this copy's event completes (waited for above, and in Drop); the caller
            // guarantees `dst` holds the range and that `stream` follows its allocation.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    at,
                    &self.buffers[slot][..part.len()],
                    stream.cu_stream(),
                )
            }
            .map_err(Error::from)?;
            let event = new_event(dev)?;
            event.record(stream).map_err(Error::from)?;
            landed(&event, i * self.chunk, part.len())?;
            self.pending[slot] = Some(event);
        }
        Ok(())
    }

    fn allocate(&mut self, dev: &Device) -> Result<()> {
        while self.buffers.len() < self.count {
            self.buffers.push(PinnedBuffer::zeroed(dev, self.chunk)?);
            self.pending.push(None);
        }
        Ok(())
    }
}

fn new_event(dev: &Device) -> Result<CudaEvent> {
    dev.context()
        .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .map_err(Error::from)
}

impl<T: DeviceCopy> Drop for Staging<T> {
    fn drop(&mut self) {
        // No copy may still read a buffer when it is freed.
        for e in self.pending.iter().flatten() {
            let _ = e.synchronize();
        }
    }
}
