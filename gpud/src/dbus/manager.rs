//! `org.gpud.Manager1`: an adapter that turns method calls into hub commands. It keeps no state
//! of its own beyond which bus name is which session.

// A signal's arguments are its wire signature: LeaseGranted has seven, and the macro generates
// a trait method for it outside the impl block.
#![allow(clippy::too_many_arguments)]

use std::collections::HashMap;
use std::sync::Arc;

use gpud_proto::{AcquireArgs, Class, LeaseId, LeaseInfo, Op, Outcome, Placement, Reply};
use tokio::sync::mpsc;
use tracing::debug;
use zbus::message::Header;
use zbus::names::BusName;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedVariant, fdo, interface};

use crate::hub::{Command, Inspect, inspect};

use super::PATH;
use super::addressed::{Addressed, CallerSignal};
use super::callers::Callers;
use super::dicts::{self, Options};
use super::error::BusError;
use super::rows::{self, DeviceRow, LeaseRow};

/// The object at `/org/gpud/Manager1`.
pub struct Manager {
    hub: mpsc::Sender<Command>,
    callers: Arc<Callers>,
}

impl Manager {
    /// An adapter over `hub`.
    pub fn new(hub: mpsc::Sender<Command>, callers: Arc<Callers>) -> Self {
        Self { hub, callers }
    }

    async fn snapshot(&self) -> Result<gpud_proto::StatusReport, BusError> {
        inspect(&self.hub, Inspect::Status)
            .await
            .ok_or_else(|| BusError::failed("gpud is stopping"))
    }

    /// Sends `op` on behalf of the caller and returns the successful reply.
    async fn call(&self, conn: &Connection, hdr: &Header<'_>, op: Op) -> Result<Reply, BusError> {
        self.call_named(conn, hdr, op, None).await
    }

    /// Like [`Manager::call`], with the caller's name for the request while it waits.
    async fn call_named(
        &self,
        conn: &Connection,
        hdr: &Header<'_>,
        op: Op,
        name: Option<&str>,
    ) -> Result<Reply, BusError> {
        match self
            .callers
            .call_named(conn, sender(hdr)?, op, name)
            .await?
        {
            Outcome::Ok(reply) => Ok(reply),
            Outcome::Error(e) => Err(e.into()),
        }
    }

    /// Asks for a lease and returns what its holder is told.
    async fn granted(
        &self,
        conn: &Connection,
        hdr: &Header<'_>,
        args: AcquireArgs,
        name: Option<&str>,
    ) -> Result<LeaseInfo, BusError> {
        match self.call_named(conn, hdr, Op::Acquire(args), name).await? {
            Reply::Granted(info) => Ok(info),
            _ => Err(BusError::failed("unexpected answer to acquire")),
        }
    }
}

/// The caller's unique name.
fn sender<'h>(hdr: &'h Header<'_>) -> Result<&'h zbus::names::UniqueName<'h>, BusError> {
    hdr.sender()
        .ok_or_else(|| BusError::access_denied("a call without a sender cannot hold leases"))
}

#[interface(name = "org.gpud.Manager1")]
impl Manager {
    /// The daemon's state as JSON: the document `gpudctl status --json` prints (docs/PROTOCOL.md).
    async fn status(&self) -> Result<String, BusError> {
        let status = self.snapshot().await?;
        serde_json::to_string(&status).map_err(|e| BusError::failed(e.to_string()))
    }

    /// Asks for a lease and returns when it is granted. `device`: "any", an index or a UUID;
    /// `vram`: bytes; `class`: critical, high, normal or background (empty: normal). The lease
    /// belongs to the caller's unique name and is freed when that name leaves the bus.
    #[zbus(out_args("lease", "device_uuid", "device_index", "cuda_visible_devices"))]
    async fn acquire(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] hdr: Header<'_>,
        device: &str,
        vram: u64,
        compute: bool,
        class: &str,
    ) -> Result<(LeaseId, String, u32, String), BusError> {
        let device: Placement = device
            .parse()
            .map_err(|e| BusError::invalid_args(format!("device: {e}")))?;
        let class: Class = if class.is_empty() {
            Class::default()
        } else {
            class
                .parse()
                .map_err(|e| BusError::invalid_args(format!("class: {e}")))?
        };
        let args = AcquireArgs {
            device,
            vram_bytes: vram,
            compute,
            class,
            ..AcquireArgs::default()
        };
        let info = self.granted(conn, &hdr, args, None).await?;
        Ok((
            info.lease,
            info.device_uuid,
            info.device_index,
            info.cuda_visible_devices,
        ))
    }

    /// Asks for a lease with options (docs/DBUS.md lists them: device, vram, compute, class,
    /// timeout_ms, label, evictable, budget, request, queued_events) and returns when it is
    /// granted: the lease's description, with the `token` that re-adopts it after a daemon
    /// restart. With `request`, the caller may `Cancel` it by that name while it waits.
    #[zbus(out_args("lease"))]
    async fn acquire_with(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] hdr: Header<'_>,
        options: Options,
    ) -> Result<HashMap<String, OwnedVariant>, BusError> {
        let asked = dicts::acquire(&options)?;
        let info = self
            .granted(conn, &hdr, asked.args, asked.request.as_deref())
            .await?;
        Ok(dicts::lease(info))
    }

    /// Changes a lease's bytes: shrinking is immediate, growing waits like an acquire of the
    /// lease's class (options: timeout_ms, request). Returns the bytes it reserves now.
    #[zbus(out_args("vram"))]
    async fn resize(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] hdr: Header<'_>,
        lease: LeaseId,
        vram: u64,
        options: Options,
    ) -> Result<u64, BusError> {
        let asked = dicts::resize(&options)?;
        let op = Op::Resize {
            lease,
            vram_bytes: vram,
            timeout_ms: asked.timeout_ms,
            host_mem_bytes: None,
        };
        match self
            .call_named(conn, &hdr, op, asked.request.as_deref())
            .await?
        {
            Reply::Resized { vram_bytes, .. } => Ok(vram_bytes),
            _ => Err(BusError::failed("unexpected answer to resize")),
        }
    }

    /// Withdraws the caller's waiting `AcquireWith` or `Resize` named `request`: that call
    /// fails with `org.gpud.Error.Cancelled`.
    async fn cancel(&self, #[zbus(header)] hdr: Header<'_>, request: &str) -> Result<(), BusError> {
        self.callers.cancel(sender(&hdr)?, request).await
    }

    /// After a daemon restart, takes back a lease restored from the journal, with the token
    /// `AcquireWith` returned: the same uid may, from any unique name, within readopt_grace.
    #[zbus(out_args("lease"))]
    async fn adopt(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] hdr: Header<'_>,
        lease: LeaseId,
        token: &str,
    ) -> Result<HashMap<String, OwnedVariant>, BusError> {
        let op = Op::Adopt {
            lease,
            token: token.to_string(),
        };
        match self.call(conn, &hdr, op).await? {
            Reply::Adopted(info) => Ok(dicts::lease(info)),
            _ => Err(BusError::failed("unexpected answer to adopt")),
        }
    }

    /// Releases a lease the caller holds.
    async fn release(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] hdr: Header<'_>,
        lease: LeaseId,
    ) -> Result<(), BusError> {
        self.call(conn, &hdr, Op::Release { lease }).await.map(drop)
    }

    /// Stops new grants on a device (root or an admin group).
    async fn drain(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] hdr: Header<'_>,
        device: &str,
    ) -> Result<(), BusError> {
        let device = placement(device)?;
        self.call(conn, &hdr, Op::Drain { device }).await.map(drop)
    }

    /// Grants on a drained device again (root or an admin group).
    async fn undrain(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] hdr: Header<'_>,
        device: &str,
    ) -> Result<(), BusError> {
        let device = placement(device)?;
        self.call(conn, &hdr, Op::Undrain { device })
            .await
            .map(drop)
    }

    /// Takes any lease away from its holder (root or an admin group).
    async fn revoke(
        &self,
        #[zbus(connection)] conn: &Connection,
        #[zbus(header)] hdr: Header<'_>,
        lease: LeaseId,
    ) -> Result<(), BusError> {
        self.call(conn, &hdr, Op::Revoke { lease }).await.map(drop)
    }

    /// Every device: index, uuid, name, total, capacity, reserved, free and unmanaged bytes,
    /// drained, compute slots, compute holders, queued requests.
    #[zbus(property(emits_changed_signal = "invalidates"))]
    async fn devices(&self) -> fdo::Result<Vec<DeviceRow>> {
        let status = self.snapshot().await.map_err(to_fdo)?;
        Ok(rows::devices(&status))
    }

    /// Every lease: id, device index, device uuid, bytes, compute, class, pid, uid, process,
    /// owner (unique bus name, empty for socket clients), held ms, yield requested, label.
    #[zbus(property(emits_changed_signal = "invalidates"))]
    async fn leases(&self) -> fdo::Result<Vec<LeaseRow>> {
        let status = self.snapshot().await.map_err(to_fdo)?;
        Ok(rows::leases(&status, &self.callers.owners()))
    }

    /// A lease was granted (to a socket or a bus client; `owner` is the bus name, or empty).
    #[zbus(signal)]
    pub async fn lease_granted(
        emitter: &SignalEmitter<'_>,
        lease: LeaseId,
        device: u32,
        device_uuid: &str,
        vram: u64,
        compute: bool,
        class: &str,
        owner: &str,
    ) -> zbus::Result<()>;

    /// A lease ended: `released`, `disconnected` or `revoked`.
    #[zbus(signal)]
    pub async fn lease_released(
        emitter: &SignalEmitter<'_>,
        lease: LeaseId,
        device: u32,
        reason: &str,
    ) -> zbus::Result<()>;

    /// A device's reservations, capacity, drain state or compute holders changed.
    #[zbus(signal)]
    pub async fn device_changed(emitter: &SignalEmitter<'_>, device: u32) -> zbus::Result<()>;

    /// Sent to the holder only: release the compute slot at the next safe point
    /// (`critical_waiting` or `max_hold`; `revoke_in_ms` 0 when no revocation follows).
    #[zbus(signal)]
    pub async fn yield_requested(
        emitter: &SignalEmitter<'_>,
        lease: LeaseId,
        reason: &str,
        revoke_in_ms: u64,
    ) -> zbus::Result<()>;

    /// Sent to the holder only: the lease was taken away (`admin`, `yield_ignored`,
    /// `reclaimed`, `over_use`, `budget_ended`, …).
    #[zbus(signal)]
    pub async fn lease_revoked(
        emitter: &SignalEmitter<'_>,
        lease: LeaseId,
        reason: &str,
    ) -> zbus::Result<()>;

    /// Sent to the holder only: give an evictable lease's memory back (`Resize` it smaller or
    /// `Release` it); it is revoked (`reclaimed`) after `revoke_in_ms` (0: never).
    #[zbus(signal)]
    pub async fn reclaim_requested(
        emitter: &SignalEmitter<'_>,
        lease: LeaseId,
        revoke_in_ms: u64,
    ) -> zbus::Result<()>;

    /// Sent to the caller only: the place of its waiting `AcquireWith` named `request` (asked
    /// with `queued_events`); 1 is the next to be served.
    #[zbus(signal)]
    pub async fn queued(
        emitter: &SignalEmitter<'_>,
        request: &str,
        position: u32,
    ) -> zbus::Result<()>;
}

fn placement(device: &str) -> Result<Placement, BusError> {
    match device.parse() {
        Ok(Placement::Any) | Err(_) => Err(BusError::invalid_args(format!(
            "{device:?} names no device: give an index or a UUID"
        ))),
        Ok(p) => Ok(p),
    }
}

fn to_fdo(e: BusError) -> fdo::Error {
    fdo::Error::Failed(e.to_string())
}

/// Sends each caller the signals meant for it ([`super::addressed`]), as unicast signals of
/// this interface.
pub async fn signal_callers(mut signals: mpsc::UnboundedReceiver<CallerSignal>, conn: Connection) {
    while let Some((name, signal)) = signals.recv().await {
        let Ok(emitter) = SignalEmitter::new(&conn, PATH) else {
            continue;
        };
        let emitter = emitter.set_destination(BusName::from(name.as_ref()));
        let sent = match signal {
            Addressed::Yield {
                lease,
                reason,
                revoke_in_ms,
            } => emitter.yield_requested(lease, &reason, revoke_in_ms).await,
            Addressed::Reclaim {
                lease,
                revoke_in_ms,
            } => emitter.reclaim_requested(lease, revoke_in_ms).await,
            Addressed::Revoked { lease, reason } => emitter.lease_revoked(lease, &reason).await,
            Addressed::Queued { request, position } => emitter.queued(&request, position).await,
        };
        if let Err(e) = sent {
            debug!(error = %e, "cannot signal a bus caller");
        }
    }
}
