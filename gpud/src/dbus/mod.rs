//! The D-Bus service: `org.gpud.Manager1` at `/org/gpud/Manager1` (docs/DBUS.md).
//!
//! The object is an adapter: it turns calls into hub [`Command`]s, so bus clients and socket
//! clients share the one ledger and compete fairly. Each bus caller that asks for a lease (or
//! an admin operation) becomes a hub session tied to its unique name; when `NameOwnerChanged`
//! says the name left, the session ends and its leases are freed. What the hub tells a session
//! (yield, reclaim, revocation, queue place) goes to that name alone, as signals addressed to
//! it. Leases outlive the name only in the journal: after a restart, `Adopt` with the uid and
//! the lease's token hands one to whatever name its owner has now. Reading status is open to
//! every caller; the bus policy (systemd/org.gpud.Manager1.conf) and the hub's own access
//! checks guard the rest.

mod addressed;
mod callers;
mod dicts;
mod error;
mod manager;
mod rows;

use std::sync::Arc;

use futures_util::StreamExt;
use thiserror::Error;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};
use zbus::Connection;
use zbus::fdo::DBusProxy;
use zbus::names::UniqueName;
use zbus::object_server::InterfaceRef;

use crate::hub::{Command, Notice, QueueRoom, SessionIds};

use callers::Callers;

pub use crate::config::BusChoice;
pub use error::BusError;
pub use manager::{Manager, ManagerSignals};
pub use rows::{DeviceRow, LeaseRow};

/// The well-known name gpud owns.
pub const NAME: &str = "org.gpud.Manager1";
/// The object path of the manager.
pub const PATH: &str = "/org/gpud/Manager1";

/// Why the D-Bus service could not start.
#[derive(Debug, Error)]
#[error("cannot serve {NAME} on the {bus} bus: {source}")]
pub struct DbusError {
    bus: String,
    source: zbus::Error,
}

/// The running service; it leaves the bus when dropped.
pub struct Service {
    conn: Connection,
    tasks: Vec<JoinHandle<()>>,
}

impl Service {
    /// The bus connection.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Connects to `bus`, serves the manager and owns [`NAME`]. `None` for [`BusChoice::None`].
/// `queue` is the room for frames to each bus session.
pub async fn start(
    bus: &BusChoice,
    hub: mpsc::Sender<Command>,
    notices: broadcast::Receiver<Notice>,
    ids: SessionIds,
    queue: QueueRoom,
) -> Result<Option<Service>, DbusError> {
    let builder = match bus {
        BusChoice::None => return Ok(None),
        BusChoice::System => zbus::connection::Builder::system(),
        BusChoice::Session => zbus::connection::Builder::session(),
        BusChoice::Address(a) => zbus::connection::Builder::address(a.as_str()),
    };
    let err = |source| DbusError {
        bus: bus.to_string(),
        source,
    };
    let (signals, caller_signals) = mpsc::unbounded_channel();
    let callers = Arc::new(Callers::new(hub.clone(), ids, queue, signals));
    let conn = builder
        .serve_at(PATH, Manager::new(hub, callers.clone()))
        .name(NAME)
        .build()
        .await
        .map_err(err)?;
    let dbus = DBusProxy::new(&conn).await.map_err(err)?;
    let departures = dbus.receive_name_owner_changed().await.map_err(err)?;
    let iface: InterfaceRef<Manager> = conn.object_server().interface(PATH).await.map_err(err)?;
    let tasks = vec![
        tokio::spawn(watch_departures(departures, callers.clone())),
        tokio::spawn(relay_notices(notices, iface, callers)),
        tokio::spawn(manager::signal_callers(caller_signals, conn.clone())),
    ];
    info!(bus = %bus, name = NAME, "serving D-Bus");
    Ok(Some(Service { conn, tasks }))
}

/// Ends the session of every unique name that leaves the bus.
async fn watch_departures(mut changes: zbus::fdo::NameOwnerChangedStream, callers: Arc<Callers>) {
    while let Some(change) = changes.next().await {
        let Ok(args) = change.args() else { continue };
        let left = args.new_owner().is_none();
        if let (true, zbus::names::BusName::Unique(name)) = (left, args.name()) {
            let name: UniqueName<'_> = name.clone();
            callers.gone(&name).await;
        }
    }
    debug!("NameOwnerChanged stream ended");
}

/// Turns hub notices into signals, and invalidates the properties they change.
async fn relay_notices(
    mut notices: broadcast::Receiver<Notice>,
    iface: InterfaceRef<Manager>,
    callers: Arc<Callers>,
) {
    let emitter = iface.signal_emitter().clone();
    loop {
        let notice = match notices.recv().await {
            Ok(n) => n,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                warn!(missed = n, "D-Bus signals fell behind; some were skipped");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let manager = iface.get().await;
        let sent = match notice {
            Notice::LeaseGranted {
                lease,
                session,
                device,
                uuid,
                vram_bytes,
                compute,
                class,
            } => {
                let owner = callers.owners().get(&session).cloned().unwrap_or_default();
                let r = emitter
                    .lease_granted(
                        lease,
                        device,
                        &uuid,
                        vram_bytes,
                        compute,
                        class.as_str(),
                        &owner,
                    )
                    .await;
                r.and(manager.leases_invalidate(&emitter).await)
            }
            Notice::LeaseEnded {
                lease,
                device,
                reason,
                ..
            } => {
                let r = emitter.lease_released(lease, device, reason.as_str()).await;
                r.and(manager.leases_invalidate(&emitter).await)
            }
            // A host part is no device's lease: the lease set changed, no device signal.
            Notice::HostPartChanged { .. } => manager.leases_invalidate(&emitter).await,
            Notice::DeviceChanged { device } => {
                let r = emitter.device_changed(device).await;
                r.and(manager.devices_invalidate(&emitter).await)
            }
        };
        if let Err(e) = sent {
            debug!(error = %e, "cannot emit a signal");
        }
    }
}
