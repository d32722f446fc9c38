//! An MSM split into chunks of points, so that it fits a lease smaller than its whole working
//! set: each chunk is an MSM of its own (temporaries sized to the chunk) and the partial sums
//! are added, which is the same group element as the unsplit sum. Bases already on the device
//! are read in place; bases in host memory are streamed through two device buffers, the next
//! chunk copied on a stream of its own while the current one is computed (a direct DMA when
//! the host memory is page-locked).

use blstrs::Scalar;
use cudarc::driver::sys::CUevent_flags;
use group::Group;

use super::MsmError;
use super::curve::MsmCurve;
use super::gpu::{Bases, MsmEngine, UPLOAD_CHUNK, Window};
use crate::buffer::DeviceBuffer;
use crate::error::Error;

/// Where a chunked MSM's bases are.
#[derive(Debug, Clone, Copy)]
pub enum ChunkBases<'a, 'd, C: MsmCurve> {
    /// On the device (e.g. resident): each chunk reads its window of them.
    Device(&'a Bases<'d, C>),
    /// In host memory: streamed chunk by chunk (double-buffered).
    Host(&'a [C::Affine]),
}

/// Where a chunked MSM's scalars are.
#[derive(Debug, Clone, Copy)]
pub enum ChunkScalars<'a, 'd> {
    /// In host memory: each chunk's scalars are uploaded for it.
    Host(&'a [Scalar]),
    /// The first `n` scalars of a device buffer (e.g. the H polynomial's coefficients).
    Device(&'a DeviceBuffer<'d, Scalar>, usize),
}

impl ChunkScalars<'_, '_> {
    /// Scalars (points) of the MSM.
    pub fn len(&self) -> usize {
        match self {
            Self::Host(s) => s.len(),
            Self::Device(_, n) => *n,
        }
    }

    /// Whether the MSM is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a, 'd, C: MsmCurve> ChunkBases<'a, 'd, C> {
    /// The bases already on the device when there are some (e.g. resident), else the host
    /// copy, which is then streamed.
    pub fn device_or_host(device: Option<&'a Bases<'d, C>>, host: &'a [C::Affine]) -> Self {
        match device {
            Some(b) => Self::Device(b),
            None => Self::Host(host),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Device(b) => b.len(),
            Self::Host(h) => h.len(),
        }
    }
}

impl<'d, C: MsmCurve> MsmEngine<'d, C> {
    /// sum_i scalars[i] * bases[i] over `scalars.len()` points, in chunks of at most `chunk`
    /// points (the last one may be shorter). Each chunk allocates the temporaries of an MSM of
    /// its size ([`super::plan::MsmPlan::temp_bytes_of`]), its scalars when they come from the
    /// host, and, for bases in host memory, two buffers of `chunk` bases (one when a single
    /// chunk covers the MSM).
    pub fn msm_chunked(
        &self,
        bases: ChunkBases<'_, '_, C>,
        scalars: ChunkScalars<'_, '_>,
        chunk: usize,
    ) -> Result<C::Projective, MsmError> {
        let n = scalars.len();
        if chunk == 0 {
            return Err(Error::InvalidArgument("an MSM chunk of 0 points".into()).into());
        }
        if let ChunkScalars::Device(buf, n) = scalars
            && n > buf.len()
        {
            return Err(MsmError::TooManyScalars {
                scalars: n,
                bases: buf.len(),
            });
        }
        if n > bases.len() {
            return Err(MsmError::TooManyScalars {
                scalars: n,
                bases: bases.len(),
            });
        }
        if n == 0 {
            return Ok(C::Projective::identity());
        }
        match bases {
            ChunkBases::Device(b) => {
                let mut sum = C::Projective::identity();
                for start in (0..n).step_by(chunk) {
                    let len = chunk.min(n - start);
                    sum += self.one_chunk(b, start, scalars, start, len)?;
                }
                Ok(sum)
            }
            ChunkBases::Host(h) => self.streamed(&h[..n], scalars, chunk.min(n)),
        }
    }

    /// The MSM of points `start..start + len`, the bases read from `bases` at `base_at`.
    fn one_chunk(
        &self,
        bases: &Bases<'_, C>,
        base_at: usize,
        scalars: ChunkScalars<'_, '_>,
        start: usize,
        len: usize,
    ) -> Result<C::Projective, MsmError> {
        let plan = self.plan(len)?;
        match scalars {
            ChunkScalars::Device(buf, _) => self.run_inner(
                bases,
                buf,
                &plan,
                None,
                None,
                Window {
                    bases: base_at,
                    scalars: start,
                },
            ),
            ChunkScalars::Host(s) => {
                let part = &s[start..start + len];
                let mut buf = self.dev.alloc::<Scalar>(len)?;
                let at = Window {
                    bases: base_at,
                    scalars: 0,
                };
                if self.pipelined_upload && len > UPLOAD_CHUNK {
                    return self.run_inner(bases, &buf, &plan, None, Some(part), at);
                }
                buf.copy_from_host_at(0, part)?;
                self.run_inner(bases, &buf, &plan, None, None, at)
            }
        }
    }

    /// Bases from host memory through two device buffers of `chunk` bases: chunk `i + 1` is
    /// copied on a stream of its own while chunk `i` is computed on the main stream.
    fn streamed(
        &self,
        host: &[C::Affine],
        scalars: ChunkScalars<'_, '_>,
        chunk: usize,
    ) -> Result<C::Projective, MsmError> {
        let n = host.len();
        let chunks = n.div_ceil(chunk);
        let slots: Vec<Bases<'d, C>> = (0..chunks.min(2))
            .map(|_| {
                Ok(Bases {
                    points: self.dev.alloc::<C::Affine>(chunk)?,
                    len: chunk,
                })
            })
            .collect::<Result<_, MsmError>>()?;
        let stream = self.dev.context().new_stream()?;
        // The copies may write the slots only once the main stream has allocated them.
        stream.join(self.dev.stream())?;
        let events = (0..slots.len())
            .map(|_| {
                self.dev
                    .context()
                    .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let copy = |i: usize| -> Result<(), MsmError> {
            let start = i * chunk;
            let src = &host[start..n.min(start + chunk)];
            let slot = i % slots.len();
            self.dev.bind()?;
            // SAFETY: the slot holds `chunk` >= src.len() bases and its last reader (chunk
            // i - 2) has finished: every chunk's MSM returns only after the main stream ran
            // it. `src` borrows the caller's slice, which outlives the copy (the stream is
            // synchronized before this function returns).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    slots[slot].points.device_ptr(),
                    src,
                    stream.cu_stream(),
                )
            }?;
            events[slot].record(&stream)?;
            Ok(())
        };
        let result = (|| -> Result<C::Projective, MsmError> {
            copy(0)?;
            let mut sum = C::Projective::identity();
            for i in 0..chunks {
                if i + 1 < chunks {
                    copy(i + 1)?;
                }
                let slot = i % slots.len();
                self.dev.stream().wait(&events[slot])?;
                let start = i * chunk;
                let len = chunk.min(n - start);
                sum += self.one_chunk(&slots[slot], 0, scalars, start, len)?;
            }
            Ok(sum)
        })();
        // Whatever happened, no copy may still write a slot or read the caller's slice.
        let synced = stream.synchronize();
        let sum = result?;
        synced?;
        Ok(sum)
    }
}
