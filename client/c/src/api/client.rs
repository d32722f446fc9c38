//! `gpud_client`: a session with gpud, and the calls made on it (acquire, status, admin).

use std::ffi::c_char;
use std::time::Duration;

use gpud_client::blocking::Client;

use crate::api::lease::GpudLease;
use crate::api::request::{GpudRequest, placement};
use crate::code::GpudCode;
use crate::error::{Error, Result, boundary, boundary_void};
use crate::ptr;

/// A session with gpud: one connection, driven by a thread of its own, so that yield notices
/// and revocations arrive while the program computes. Usable from several threads at once
/// (calls from different threads proceed independently). If the daemon restarts, the
/// connection comes back by itself within 30 s and its leases are re-adopted; calls wait
/// meanwhile.
pub struct GpudClient {
    client: Client,
}

impl GpudClient {
    fn acquire(
        &self,
        request: &GpudRequest,
        timeout: Option<Duration>,
    ) -> Result<Option<GpudLease>> {
        let request = request.to_lease_request();
        let lease = match timeout {
            Some(t) => self.client.try_acquire(&request, t)?,
            None => Some(self.client.acquire(&request)?),
        };
        lease.map(GpudLease::new).transpose()
    }
}

/// Connects to gpud at `socket_path`; NULL means `$GPUD_SOCKET` when set, else
/// `/run/gpud/gpud.sock`. The client is stored in `*out` (freed with `gpud_close`).
/// `GPUD_E_CONNECT_FAILED` when no daemon answers; `GPUD_E_NOT_ALLOWED` or
/// `GPUD_E_LIMIT_EXCEEDED` when it refuses the session.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_connect(socket_path: *const c_char, out: *mut *mut GpudClient) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        let path = if socket_path.is_null() {
            gpud_client::default_socket_path()
        } else {
            ptr::text(socket_path, "socket_path")?.into()
        };
        let client = Client::connect(path)?;
        out.set(ptr::give(GpudClient { client }));
        Ok(())
    })
}

/// Frees a client. Its session ends once the client and every lease it granted are freed
/// (leases outlive it: free them in any order). NULL is allowed. The client must not be in
/// use by another thread.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_close(client: *mut GpudClient) {
    boundary_void(|| ptr::take_back(client));
}

/// Ends the session now, as if the process had exited: the daemon frees every lease of the
/// session and withdraws its waiting requests. Every lease of the client reports lost (its
/// notice descriptor becomes readable), calls waiting on the client or its leases fail with
/// `GPUD_E_CONNECTION_LOST`, and so do later ones. The handles must still be freed.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_disconnect(client: *const GpudClient) -> GpudCode {
    boundary(|| {
        ptr::handle(client, "client")?.client.close();
        Ok(())
    })
}

/// This session's id as `gpudctl status` shows it (it changes after a reconnect).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_session_id(client: *const GpudClient, out: *mut u64) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        out.set(ptr::handle(client, "client")?.client.session());
        Ok(())
    })
}

/// A round trip with no effect.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_ping(client: *const GpudClient) -> GpudCode {
    boundary(|| Ok(ptr::handle(client, "client")?.client.ping()?))
}

/// Blocks until the request is granted, and stores the lease in `*out` (freed with
/// `gpud_lease_free`). With a timeout set on the request, `GPUD_E_TIMED_OUT` when it passes.
/// Refusals come as the daemon's codes (`GPUD_E_NEVER_FITS`, `GPUD_E_UNKNOWN_DEVICE`,
/// `GPUD_E_INVALID_REQUEST`, `GPUD_E_NOT_ALLOWED`, `GPUD_E_LIMIT_EXCEEDED`, …).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_acquire(
    client: *const GpudClient,
    request: *const GpudRequest,
    out: *mut *mut GpudLease,
) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        let client = ptr::handle(client, "client")?;
        let request = ptr::handle(request, "request")?;
        let lease = client.acquire(request, None)?;
        out.set(lease.map_or(std::ptr::null_mut(), ptr::give));
        Ok(())
    })
}

/// Like `gpud_acquire`, but waits at most `timeout_ms` milliseconds (the request's own
/// timeout is replaced). Not granted in time is not an error: `GPUD_OK` with `*out` set to
/// NULL. Errors are as for `gpud_acquire`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_try_acquire(
    client: *const GpudClient,
    request: *const GpudRequest,
    timeout_ms: u64,
    out: *mut *mut GpudLease,
) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        let client = ptr::handle(client, "client")?;
        let request = ptr::handle(request, "request")?;
        let lease = client.acquire(request, Some(Duration::from_millis(timeout_ms)))?;
        out.set(lease.map_or(std::ptr::null_mut(), ptr::give));
        Ok(())
    })
}

/// The daemon's devices, leases and queues as JSON (the `status` object of docs/PROTOCOL.md,
/// as `gpudctl status --json` prints it), stored in `*out`; free it with `gpud_string_free`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_status_json(client: *const GpudClient, out: *mut *mut c_char) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        let status = ptr::handle(client, "client")?.client.status()?;
        let json = serde_json::to_string(&status)
            .map_err(|e| Error::Protocol(format!("status as JSON: {e}")))?;
        out.set(ptr::give_string(json)?);
        Ok(())
    })
}

/// The daemon's metrics in the Prometheus text format (docs/METRICS.md), stored in `*out`;
/// free it with `gpud_string_free`.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_metrics_text(client: *const GpudClient, out: *mut *mut c_char) -> GpudCode {
    boundary(|| {
        let out = ptr::out(out, "out")?;
        let text = ptr::handle(client, "client")?.client.metrics()?;
        out.set(ptr::give_string(text)?);
        Ok(())
    })
}

/// Stops new grants on a device, named by index (`"0"`) or UUID (admin:
/// `GPUD_E_PERMISSION_DENIED` otherwise). Leases there run on.
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_drain(client: *const GpudClient, device: *const c_char) -> GpudCode {
    boundary(|| {
        let client = ptr::handle(client, "client")?;
        let device = placement(ptr::text(device, "device")?)?;
        Ok(client.client.drain(device)?)
    })
}

/// Grants on a drained device again (admin).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_undrain(client: *const GpudClient, device: *const c_char) -> GpudCode {
    boundary(|| {
        let client = ptr::handle(client, "client")?;
        let device = placement(ptr::text(device, "device")?)?;
        Ok(client.client.undrain(device)?)
    })
}

/// Takes lease `lease_id` (any session's) away from its holder, who sees it lost (admin).
// SAFETY: the symbol's name is unique to this library (every export has the gpud_ prefix).
#[unsafe(no_mangle)]
pub extern "C" fn gpud_revoke(client: *const GpudClient, lease_id: u64) -> GpudCode {
    boundary(|| Ok(ptr::handle(client, "client")?.client.revoke(lease_id)?))
}
