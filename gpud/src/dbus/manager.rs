//! `org.gpud.Manager1`: an adapter that turns method calls into hub commands. It keeps no state
//! of its own beyond which bus name is which session.

// A signal's arguments are its wire signature: LeaseGranted has seven, and the macro generates
// a trait method for it outside the impl block.
#![allow(clippy::too_many_arguments)]

use std::sync::Arc;

use gpud_proto::LeaseId;
use gpud_proto::{AcquireArgs, Class, Op, Outcome, Placement, Reply};
use tokio::sync::mpsc;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, fdo, interface};

use crate::hub::{Command, Inspect, inspect};

use super::callers::Callers;
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
        let caller = hdr
            .sender()
            .ok_or_else(|| BusError::access_denied("a call without a sender cannot hold leases"))?;
        match self.callers.call(conn, caller, op).await? {
            Outcome::Ok(reply) => Ok(reply),
            Outcome::Error(e) => Err(e.into()),
        }
    }
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
            timeout_ms: None,
            label: None,
            budget: None,
            evictable: false,
            // A bus caller waits in one method call; there is nothing to tell it meanwhile.
            queued_events: false,
            parts: Vec::new(),
            placement: None,
        };
        match self.call(conn, &hdr, Op::Acquire(args)).await? {
            Reply::Granted(info) => Ok((
                info.lease,
                info.device_uuid,
                info.device_index,
                info.cuda_visible_devices,
            )),
            _ => Err(BusError::failed("unexpected answer to acquire")),
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

    /// Sent to the holder only: the lease was taken away (`admin` or `yield_ignored`).
    #[zbus(signal)]
    pub async fn lease_revoked(
        emitter: &SignalEmitter<'_>,
        lease: LeaseId,
        reason: &str,
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
