//! Bus callers as hub sessions: one session per unique name, opened on its first call that
//! needs one, closed when the name leaves the bus (and with it, every lease it holds).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};

use gpud_proto::{ErrorBody, ErrorCode, Op, Outcome, RequestId, ServerFrame};
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::debug;
use zbus::Connection;
use zbus::fdo::DBusProxy;
use zbus::names::{BusName, OwnedUniqueName, UniqueName};

use crate::hub::outbox::Inbox;
use crate::hub::{self, Command, Credentials, QueueRoom, Refused, SessionIds};
use crate::ledger::SessionId;

use super::addressed::{Addressed, CallerSignal};
use super::error::BusError;

/// One bus caller's hub session.
#[derive(Debug)]
struct Caller {
    session: SessionId,
    next_request: AtomicU64,
    /// Method calls waiting for the hub's reply, by request id.
    pending: SyncMutex<HashMap<RequestId, oneshot::Sender<Outcome>>>,
    /// The caller's names for its unanswered requests (the `request` option), for `Cancel`
    /// and the `Queued` signal.
    named: SyncMutex<HashMap<String, RequestId>>,
}

impl Caller {
    /// The caller's name of request `id`.
    fn name_of(&self, id: RequestId) -> Option<String> {
        let named = self.named.lock().ok()?;
        named
            .iter()
            .find(|&(_, &r)| r == id)
            .map(|(name, _)| name.clone())
    }
}

/// Forgets a request's name once its call is answered (or abandoned).
struct Naming<'c> {
    caller: &'c Caller,
    name: String,
}

impl Drop for Naming<'_> {
    fn drop(&mut self) {
        if let Ok(mut named) = self.caller.named.lock() {
            named.remove(&self.name);
        }
    }
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
    /// Where the signals for one caller go (the service sends them).
    signals: mpsc::UnboundedSender<CallerSignal>,
}

impl Callers {
    /// Callers whose sessions talk to `hub`, numbered from `ids`, with `queue` room for frames.
    /// The signals addressed to them go to `signals`.
    pub fn new(
        hub: mpsc::Sender<Command>,
        ids: SessionIds,
        queue: QueueRoom,
        signals: mpsc::UnboundedSender<CallerSignal>,
    ) -> Self {
        Self {
            hub,
            ids,
            queue,
            by_name: Mutex::new(HashMap::new()),
            names: SyncMutex::new(HashMap::new()),
            signals,
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
        self.send(&c, op).await
    }

    /// Like [`Callers::call`], with the caller's `name` for the request while it waits: the
    /// caller may `Cancel` it by that name, and `Queued` signals name it. A name is the
    /// caller's own (another caller may use the same), and one waiting request's at a time.
    pub async fn call_named(
        self: &Arc<Self>,
        conn: &Connection,
        caller: &UniqueName<'_>,
        op: Op,
        name: Option<&str>,
    ) -> Result<Outcome, BusError> {
        let Some(name) = name else {
            return self.call(conn, caller, op).await;
        };
        let c = self.session(conn, caller).await?;
        let id = c.next_request.fetch_add(1, Ordering::Relaxed);
        {
            let Ok(mut named) = c.named.lock() else {
                return Err(BusError::failed(
                    "a bus caller's request names are unreadable",
                ));
            };
            if named.contains_key(name) {
                return Err(ErrorBody::new(
                    ErrorCode::DuplicateRequest,
                    format!("request {name:?} is already in use by a waiting request"),
                )
                .into());
            }
            named.insert(name.to_string(), id);
        }
        let _naming = Naming {
            caller: &c,
            name: name.to_string(),
        };
        self.send_as(&c, id, op).await
    }

    /// Withdraws the caller's waiting request `name`: it is answered `Cancelled`, and this
    /// call returns once it has been. Only the caller that named it may.
    pub async fn cancel(&self, caller: &UniqueName<'_>, name: &str) -> Result<(), BusError> {
        let unknown = || {
            BusError::from(ErrorBody::new(
                ErrorCode::UnknownRequest,
                format!("no waiting request {name:?} in this session"),
            ))
        };
        let c = self
            .by_name
            .lock()
            .await
            .get(caller.as_str())
            .cloned()
            .ok_or_else(unknown)?;
        let id = c
            .named
            .lock()
            .ok()
            .and_then(|n| n.get(name).copied())
            .ok_or_else(unknown)?;
        match self.send(&c, Op::Cancel { request: id }).await? {
            Outcome::Ok(_) => Ok(()),
            // Answered meanwhile: the hub names the request by its number, the caller by name.
            Outcome::Error(e) if e.code == ErrorCode::UnknownRequest => Err(unknown()),
            Outcome::Error(e) => Err(e.into()),
        }
    }

    /// Sends `op` on the caller's session with a fresh request id, and waits for the answer.
    async fn send(&self, c: &Caller, op: Op) -> Result<Outcome, BusError> {
        let id = c.next_request.fetch_add(1, Ordering::Relaxed);
        self.send_as(c, id, op).await
    }

    /// Sends `op` as request `id` of the caller's session, and waits for the answer.
    async fn send_as(&self, c: &Caller, id: RequestId, op: Op) -> Result<Outcome, BusError> {
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
            named: SyncMutex::new(HashMap::new()),
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

/// Delivers what the hub sends a bus session: replies to waiting calls, and events as signals
/// addressed to the caller only.
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
                if let Some(signal) = Addressed::from_event(event, |id| caller.name_of(id)) {
                    // The service is gone only when gpud stops.
                    let _ = callers.signals.send((name.clone(), signal));
                }
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
