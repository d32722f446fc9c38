//! The operator-facing services around the hub, each optional: systemd notifications and the
//! watchdog, the D-Bus service, the metrics listener.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpud_proto::{Bytes, StatusReport};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tracing::info;

use crate::config::{BusChoice, Config};
use crate::dbus;
use crate::hub::{Command, Inspect, Notice, QueueRoom, SessionIds, inspect};
use crate::server::scrape::{self, Scrape};
use crate::systemd::notify::Notifier;

use super::DaemonError;

/// Longest a `STATUS=` line may lag behind the daemon's state.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// The running services; they stop when dropped.
pub struct Services {
    notifier: Arc<Notifier>,
    // Held for their Drop: leaving the bus, closing the listener.
    _dbus: Option<dbus::Service>,
    _scrape: Option<Scrape>,
    heartbeat: Option<JoinHandle<()>>,
}

impl Drop for Services {
    fn drop(&mut self) {
        if let Some(h) = &self.heartbeat {
            h.abort();
        }
    }
}

impl Services {
    /// Starts D-Bus and metrics as configured. A bus chosen explicitly (`--dbus`, `[dbus]`)
    /// must work; the default, the system bus, is skipped with a log line when unreachable.
    pub async fn start(
        config: &Config,
        hub: &mpsc::Sender<Command>,
        notices: broadcast::Receiver<Notice>,
        ids: SessionIds,
    ) -> Result<Self, DaemonError> {
        let (bus, required) = match &config.dbus {
            Some(bus) => (bus.clone(), true),
            None => (BusChoice::System, false),
        };
        let queue = QueueRoom {
            frames: config.limits.event_queue,
            bytes: config.limits.session_buffer_bytes,
            total: config.limits.session_buffer_total_bytes,
        };
        let dbus = match dbus::start(&bus, hub.clone(), notices, ids, queue).await {
            Ok(service) => service,
            Err(e) if !required => {
                info!("{e}; going on without D-Bus (set --dbus or [dbus] bus to require it)");
                None
            }
            Err(e) => return Err(DaemonError::Dbus(e)),
        };
        let scrape = match &config.metrics {
            Some(listen) => Some(scrape::start(listen, hub.clone()).await.map_err(|source| {
                DaemonError::Metrics {
                    listen: listen.to_string(),
                    source,
                }
            })?),
            None => None,
        };
        Ok(Self {
            notifier: Arc::new(Notifier::from_env()),
            _dbus: dbus,
            _scrape: scrape,
            heartbeat: None,
        })
    }

    /// Tells the service manager gpud is ready, then keeps `STATUS=` current and, when the
    /// watchdog is on, sends `WATCHDOG=1` each time the hub answers — so a wedged hub, not
    /// just a live process, is what the watchdog sees.
    pub async fn ready(&mut self, hub: &mpsc::Sender<Command>) {
        if !self.notifier.enabled() {
            return;
        }
        let first = inspect(hub, Inspect::Status)
            .await
            .map(|s| summary(&s))
            .unwrap_or_default();
        self.notifier.ready(&first);
        self.heartbeat = Some(tokio::spawn(heartbeat(
            self.notifier.clone(),
            hub.clone(),
            first,
        )));
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) {
        if let Some(h) = &self.heartbeat {
            h.abort();
        }
        self.notifier.stopping();
    }
}

async fn heartbeat(notifier: Arc<Notifier>, hub: mpsc::Sender<Command>, mut last: String) {
    let watchdog = notifier.watchdog_interval();
    let every = watchdog.map_or(STATUS_EVERY, |w| w.min(STATUS_EVERY));
    let mut fed = Instant::now();
    notifier.watchdog();
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let Some(status) = inspect(&hub, Inspect::Status).await else {
            return;
        };
        if watchdog.is_some_and(|w| fed.elapsed() + every > w) {
            notifier.watchdog();
            fed = Instant::now();
        }
        let line = summary(&status);
        if line != last {
            notifier.status(&line);
            last = line;
        }
    }
}

/// The one-line `STATUS=`: `2 GPUs, 3 leases (24.0 GiB reserved), 1 waiting, 4 sessions`.
pub fn summary(s: &StatusReport) -> String {
    let reserved: u64 = s.devices.iter().map(|d| d.reserved_bytes).sum();
    let drained = s.devices.iter().filter(|d| d.drained).count();
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut line = format!(
        "{}, {} ({} reserved), {} waiting, {}",
        plural(s.devices.len(), "GPU", "GPUs"),
        plural(s.leases.len(), "lease", "leases"),
        Bytes(reserved),
        s.waiters.len(),
        plural(s.daemon.sessions as usize, "session", "sessions"),
    );
    if drained > 0 {
        line.push_str(&format!(", {drained} drained"));
    }
    line
}
