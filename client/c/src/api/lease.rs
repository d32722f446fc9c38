//! `gpud_lease`: a granted lease, its facts, its notices, and resize and release.

use std::ffi::{CString, c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use gpud_client::blocking::Lease;
use gpud_client::{Class, LeaseWatch};

use crate::api::misc::GPUD_NO_NUMA_NODE;
use crate::code::{GpudClass, GpudCode};
use crate::error::{Error, Result, boundary, boundary_void};
use crate::notice::NoticeFd;
use crate::ptr;

/// A granted lease, made by `gpud_acquire` or `gpud_try_acquire` and freed by
/// `gpud_lease_free` (which releases it if it is still held). Usable from several threads:
/// its facts, flags and notice descriptor never wait; resize and release on one lease are
/// one at a time (a release waits for a resize that another thread has waiting).
pub struct GpudLease {
    /// `None` once released through this handle.
    lease: Mutex<Option<Lease>>,
    watch: LeaseWatch,
    /// Made on the first `gpud_lease_notice_fd`: most programs never ask, and an eventfd per
    /// lease is two system calls on every acquire.
    notice: Mutex<Option<Arc<NoticeFd>>>,
    id: u64,
    device_index: u32,
    compute: bool,
    class: Class,
    vram_bytes: AtomicU64,
    device_uuid: CString,
    device_name: CString,
    cuda_visible_devices: CString,
    /// Host memory reserved now (after any resize); 0 without host resources.
    host_memory: AtomicU64,
    pinned: u64,
    cpus: Vec<u32>,
    numa_node: Option<u32>,
}

fn c_text(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Protocol(format!("the daemon sent a NUL byte in {s:?}")))
}

impl GpudLease {
    /// Wraps a granted lease: its facts as C strings.
    pub(crate) fn new(lease: Lease) -> Result<Self> {
        let watch = lease.watch();
        let info = lease.info();
        let host = info.host.as_deref().cloned().unwrap_or_default();
        Ok(Self {
            id: info.lease,
            device_index: info.device_index,
            compute: info.compute,
            class: info.class,
            vram_bytes: AtomicU64::new(info.vram_bytes),
            device_uuid: c_text(&info.device_uuid)?,
            device_name: c_text(&info.device_name)?,
            cuda_visible_devices: c_text(&info.cuda_visible_devices)?,
            host_memory: AtomicU64::new(host.mem_bytes),
            pinned: host.pinned_bytes,
            cpus: host.cpus,
            numa_node: host.numa_node,
            watch,
            notice: Mutex::new(None),
            lease: Mutex::new(Some(lease)),
        })
    }

    fn held(&self) -> MutexGuard<'_, Option<Lease>> {
        self.lease.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The notice descriptor, made on the first call. A notice that came before it is not
    /// lost: installing the hook runs it at once when a flag is already raised.
    fn notice(&self) -> Result<Arc<NoticeFd>> {
        let mut notice = self.notice.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(fd) = notice.as_ref() {
            return Ok(fd.clone());
        }
        let fd = Arc::new(
            NoticeFd::new()
                .map_err(|e| Error::System(format!("eventfd for the lease's notices: {e}")))?,
        );
        let signal = fd.clone();
        self.watch.on_notice(move || signal.signal());
        *notice = Some(fd.clone());
        Ok(fd)
    }
}

impl Drop for GpudLease {
    fn drop(&mut self) {
        // The descriptor closes now, whatever the connection's thread still holds.
        let notice = self
            .notice
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(fd) = notice.take() {
            fd.close();
        }
    }
}

/// Frees a lease, releasing it first if it is still held (without waiting for the daemon's
/// answer; `gpud_lease_release` waits). Its notice descriptor is closed. NULL is allowed.
/// The lease must not be in use by another thread.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_free(lease: *mut GpudLease) {
    boundary_void(|| ptr::take_back(lease));
}

/// Releases the lease and waits until the daemon has freed it. The handle stays valid (its
/// facts can still be read) until `gpud_lease_free`. A second release is
/// `GPUD_E_UNKNOWN_LEASE`, and so is the release of a lease that was revoked.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_release(lease: *const GpudLease) -> GpudCode {
    boundary(|| {
        let lease = ptr::handle(lease, "lease")?;
        let held = lease.held().take().ok_or(Error::Released(lease.id))?;
        Ok(held.release()?)
    })
}

/// Changes the lease's reserved VRAM to `vram_bytes`. Shrinking is immediate; growing waits
/// until the memory is free, for at most `timeout_ms` milliseconds (`GPUD_NO_TIMEOUT`, or any
/// negative number: for ever), and on `GPUD_E_TIMED_OUT` the lease keeps its size.
/// `GPUD_E_CANCELLED` when the lease ended while the grow waited.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_resize(
    lease: *const GpudLease,
    vram_bytes: u64,
    timeout_ms: i64,
) -> GpudCode {
    boundary(|| {
        resize_part(
            lease,
            timeout_ms,
            |lease| &lease.vram_bytes,
            |held, timeout| held.resize(vram_bytes, timeout),
        )
    })
}

/// A resize of one of the lease's sizes (`size`, the copy of it the accessors read): sent with
/// `resize`, the size the daemon answers stored. Called inside the export's `boundary`.
fn resize_part(
    lease: *const GpudLease,
    timeout_ms: i64,
    size: impl FnOnce(&GpudLease) -> &AtomicU64,
    resize: impl FnOnce(&mut Lease, Option<Duration>) -> gpud_client::Result<u64>,
) -> Result<()> {
    let lease = ptr::handle(lease, "lease")?;
    let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    let mut held = lease.held();
    let held = held.as_mut().ok_or(Error::Released(lease.id))?;
    let new_size = resize(held, timeout)?;
    size(lease).store(new_size, Ordering::Release);
    Ok(())
}

/// Changes the lease's reserved host memory to `bytes`, as `gpud_lease_resize` does its VRAM:
/// shrinking is immediate; growing waits until the memory is free, for at most `timeout_ms`
/// milliseconds (`GPUD_NO_TIMEOUT`, or any negative number: for ever), and on
/// `GPUD_E_TIMED_OUT` the lease keeps its size. Needs a daemon that books host resources.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_resize_host_memory(
    lease: *const GpudLease,
    bytes: u64,
    timeout_ms: i64,
) -> GpudCode {
    boundary(|| {
        resize_part(
            lease,
            timeout_ms,
            |lease| &lease.host_memory,
            |held, timeout| held.resize_host_memory(bytes, timeout),
        )
    })
}

/// The lease's id, as `gpudctl status` and `gpud_revoke` know it.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_id(lease: *const GpudLease, out: *mut u64) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.id);
        Ok(())
    })
}

/// The leased device's UUID (`GPU-…`), owned by the lease: valid until `gpud_lease_free`.
/// Empty for a lease of the host alone, and so are its name and `CUDA_VISIBLE_DEVICES`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_device_uuid(
    lease: *const GpudLease,
    out: *mut *const c_char,
) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.device_uuid.as_ptr());
        Ok(())
    })
}

/// The leased device's name (`NVIDIA H200`), owned by the lease.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_device_name(
    lease: *const GpudLease,
    out: *mut *const c_char,
) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.device_name.as_ptr());
        Ok(())
    })
}

/// The leased device's gpud index (a hint; the UUID is authoritative).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_device_index(lease: *const GpudLease, out: *mut u32) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.device_index);
        Ok(())
    })
}

/// The value to give `CUDA_VISIBLE_DEVICES` so that CUDA sees exactly the leased device,
/// owned by the lease.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_cuda_visible_devices(
    lease: *const GpudLease,
    out: *mut *const c_char,
) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.cuda_visible_devices.as_ptr());
        Ok(())
    })
}

/// The bytes the lease reserves now (after any resize).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_vram_bytes(lease: *const GpudLease, out: *mut u64) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(
            ptr::handle(lease, "lease")?
                .vram_bytes
                .load(Ordering::Acquire),
        );
        Ok(())
    })
}

/// The bytes of host memory the lease reserves now (after any resize); 0 when it asked for
/// no host resources.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_host_memory_bytes(lease: *const GpudLease, out: *mut u64) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(
            ptr::handle(lease, "lease")?
                .host_memory
                .load(Ordering::Acquire),
        );
        Ok(())
    })
}

/// The bytes of page-locked host memory the lease reserves; 0 when it asked for none.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_pinned_bytes(lease: *const GpudLease, out: *mut u64) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.pinned);
        Ok(())
    })
}

/// The CPUs granted, as the kernel numbers them, ascending (what `sched_setaffinity` pins
/// to): `*cpus` points to `*count` numbers owned by the lease, valid until `gpud_lease_free`.
/// Without CPUs, `*count` is 0 and `*cpus` NULL.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_cpus(
    lease: *const GpudLease,
    cpus: *mut *const u32,
    count: *mut usize,
) -> GpudCode {
    boundary(|| {
        let cpus_out = ptr::out(cpus, "cpus")?;
        let count_out = ptr::out(count, "count")?;
        let lease = ptr::handle(lease, "lease")?;
        count_out.set(lease.cpus.len());
        cpus_out.set(if lease.cpus.is_empty() {
            std::ptr::null()
        } else {
            lease.cpus.as_ptr()
        });
        Ok(())
    })
}

/// The NUMA node of the lease's CPUs; `GPUD_NO_NUMA_NODE` (-1) when it holds none.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_numa_node(lease: *const GpudLease, out: *mut i32) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        let node = ptr::handle(lease, "lease")?.numa_node;
        // Linux numbers at most a few thousand nodes; a number past i32 is a daemon's bug.
        let node = match node {
            None => GPUD_NO_NUMA_NODE,
            Some(n) => i32::try_from(n)
                .map_err(|_| Error::Protocol(format!("the daemon sent NUMA node {n}")))?,
        };
        out.set(node);
        Ok(())
    })
}

/// Whether the lease holds its device's compute slot.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_compute(lease: *const GpudLease, out: *mut bool) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.compute);
        Ok(())
    })
}

/// The class the lease was granted in, a `gpud_class` value.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_class(lease: *const GpudLease, out: *mut GpudClass) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(GpudClass::from(ptr::handle(lease, "lease")?.class));
        Ok(())
    })
}

/// Whether the daemon asked the lease to yield its compute slot (a critical request waits,
/// or the class's maximum hold passed): release it at the next safe point. Once raised it
/// stays raised.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_yield_requested(lease: *const GpudLease, out: *mut bool) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.watch.yield_requested());
        Ok(())
    })
}

/// Whether the lease is lost: revoked (by an admin, an ignored yield, over-use, a reclaim,
/// the end of its budget, or because its process was stopped) or gone with its connection.
/// A lost lease protects nothing: stop using the device.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_is_lost(lease: *const GpudLease, out: *mut bool) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.watch.is_lost());
        Ok(())
    })
}

/// A descriptor to `poll()` (or select, epoll) for `POLLIN`: it becomes readable when a yield
/// notice or a revocation (or loss) of the lease arrives, after the flags
/// (`gpud_lease_yield_requested`, `gpud_lease_is_lost`) show it. It is an eventfd: it stays
/// readable until the caller reads its 8-byte counter (which the library never does), so
/// a program that wants the next notice reads it, then checks the flags. The descriptor
/// belongs to the lease: do not close it; `gpud_lease_free` does. It is non-blocking and
/// close-on-exec. It is made on the first call, and is then readable at once if a notice
/// came before.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_lease_notice_fd(lease: *const GpudLease, out: *mut c_int) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(lease, "lease")?.notice()?.raw());
        Ok(())
    })
}
