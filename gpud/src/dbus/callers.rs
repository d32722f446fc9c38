//! Bus callers as hub sessions: one session per unique name, opened on its first call that
//! needs one, closed when the name leaves the bus (and with it, every lease it holds).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};

use gpud_proto::{Event, Op, Outcome, RequestId, ServerFrame};
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::debug;
use zbus::Connection;
use zbus::fdo::DBusProxy;
use zbus::names::{BusName, OwnedUniqueName, UniqueName};

use crate::hub::outbox::Inbox;
use crate::hub::{self, Command, Credentials, QueueRoom, Refused, SessionIds};
use crate::ledger::SessionId;

use super::error::BusError;

/// A lease event for one bus caller, for the service to turn into a signal to it.
pub type CallerEvent = (OwnedUniqueName, Event);

/// One bus caller's hub session.
#[derive(Debug)]
struct Caller {
    session: SessionId,
    next_request: AtomicU64,
    /// Method calls waiting for the hub's reply, by request id.
    pending: SyncMutex<HashMap<RequestId, oneshot::Sender<Outcome>>>,
}

/// Every bus caller that has a session.
#[derive(Debug)]
pub struct Callers {
    hub: mpsc::Sender<Command>,
    ids: SessionIds,
    queue: QueueRoom,
    /// Held across opening a session, so that one name never gets two.
    by_name: Mutex<HashMap<OwnedUniqueName, Arc<Caller>>>,
    /// Session → unique name, for signals and the `Leases` property.
    names: SyncMutex<HashMap<SessionId, String>>,
    /// Where the callers' lease events go (the service signals them).
    events: mpsc::UnboundedSender<CallerEvent>,
}

impl Callers {
    /// Callers whose sessions talk to `hub`, numbered from `ids`, with `queue` room for frames.
    /// Their lease events go to `events`.
    pub fn new(
        hub: mpsc::Sender<Command>,
        ids: SessionIds,
        queue: QueueRoom,
        events: mpsc::UnboundedSender<CallerEvent>,
    ) -> Self {
        Self {
            hub,
            ids,
            queue,
            by_name: Mutex::new(HashMap::new()),
            names: SyncMutex::new(HashMap::new()),
            events,
        }
    }

    /// Bus sessions by id, with their unique names.
    pub fn owners(&self) -> HashMap<SessionId, String> {
        self.names.lock().map(|n| n.clone()).unwrap_or_default()
    }

    /// Sends `op` as the caller's request and waits for the hub's answer.
    pub async fn call(
        self: &Arc<Self>,
        conn: &Connection,
        caller: &UniqueName<'_>,
        op: Op,
    ) -> Result<Outcome, BusError> {
        let c = self.session(conn, caller).await?;
        let id = c.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = c.pending.lock() {
            p.insert(id, tx);
        }
        let request = Command::Request {
            session: c.session,
            id,
            op,
        };
        if self.hub.send(request).await.is_err() {
            return Err(BusError::failed("gpud is stopping"));
        }
        rx.await
            .map_err(|_| BusError::failed("the session ended before gpud answered"))
    }

    /// The name left the bus: its session ends and its leases are freed.
    pub async fn gone(&self, name: &UniqueName<'_>) {
        let removed = self.by_name.lock().await.remove(name.as_str());
        if let Some(c) = removed {
            if let Ok(mut names) = self.names.lock() {
                names.remove(&c.session);
            }
            debug!(session = c.session, name = %name, "bus caller left");
            let _ = self.hub.send(Command::Close { session: c.session }).await;
        }
    }

    /// The caller's session, opened (with the hub's admission check) on first use.
    async fn session(
        self: &Arc<Self>,
        conn: &Connection,
        name: &UniqueName<'_>,
    ) -> Result<Arc<Caller>, BusError> {
        let mut by_name = self.by_name.lock().await;
        if let Some(c) = by_name.get(name.as_str()) {
            return Ok(c.clone());
        }
        let dbus = DBusProxy::new(conn).await?;
        let credentials = credentials_of(&dbus, name).await?;
        let session = self.ids.next();
        let queue = match hub::open(&self.hub, session, credentials, self.queue).await {
            Ok(queue) => queue,
            Err(Refused::Denied(body)) => return Err(body.into()),
            Err(Refused::Stopping) => return Err(BusError::failed("gpud is stopping")),
        };
        let caller = Arc::new(Caller {
            session,
            next_request: AtomicU64::new(1),
            pending: SyncMutex::new(HashMap::new()),
        });
        let owned = OwnedUniqueName::from(name.to_owned());
        by_name.insert(owned.clone(), caller.clone());
        if let Ok(mut names) = self.names.lock() {
            names.insert(session, name.to_string());
        }
        drop(by_name);
        debug!(session, name = %name, "bus caller opened a session");
        tokio::spawn(pump(self.clone(), caller.clone(), queue, owned.clone()));
        // The name may have left before this session was registered, and its
        // NameOwnerChanged with it: check once now that `gone` will see it.
        if !dbus
            .name_has_owner(BusName::from(name.to_owned()))
            .await
            .unwrap_or(false)
        {
            self.gone(name).await;
        }
        Ok(caller)
    }
}

/// Delivers what the hub sends a bus session: replies to waiting calls, and lease events as
/// signals addressed to the caller only.
async fn pump(callers: Arc<Callers>, caller: Arc<Caller>, mut queue: Inbox, name: OwnedUniqueName) {
    while let Some(frame) = queue.recv().await {
        match frame {
            ServerFrame::Reply { id, outcome } => {
                let waiting = caller.pending.lock().ok().and_then(|mut p| p.remove(&id));
                if let Some(tx) = waiting {
                    let _ = tx.send(outcome);
                }
            }
            ServerFrame::Event { event } => {
                // The service is gone only when gpud stops.
                let _ = callers.events.send((name.clone(), event));
            }
            ServerFrame::Welcome { .. } | ServerFrame::Error { .. } => {}
        }
    }
    // The hub closed the session (shutdown, or it did not keep up): pending calls fail.
    if let Ok(mut p) = caller.pending.lock() {
        p.clear();
    }
    let mut by_name = callers.by_name.lock().await;
    if by_name
        .get(&name)
        .is_some_and(|c| c.session == caller.session)
    {
        by_name.remove(&name);
    }
}

/// Who the caller is, from the bus's connection credentials (never from the message itself).
/// The bus read the groups when the caller connected; /proc is only a fallback.
async fn credentials_of(
    dbus: &DBusProxy<'_>,
    name: &UniqueName<'_>,
) -> Result<Credentials, BusError> {
    let creds = dbus
        .get_connection_credentials(BusName::from(name.to_owned()))
        .await?;
    let uid = creds
        .unix_user_id()
        .ok_or_else(|| BusError::access_denied("the bus did not tell the caller's uid"))?;
    let pid = creds.process_id().and_then(|p| i32::try_from(p).ok());
    Ok(Credentials {
        pid,
        uid,
        gid: None,
        groups: creds.into_unix_group_ids(),
    })
}
