//! The daemon: wires the device backend, the hub, and the adapters around it (the socket
//! [`server`](crate::server), the [`dbus`](crate::dbus) service, the metrics listener, systemd)
//! and runs until SIGTERM or SIGINT; SIGHUP reloads the config.

mod fd_budget;
mod services;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use crate::backend::Backend;
use crate::config::Config;
use crate::hub::{Command, Hub, SessionIds};
use crate::ledger::{DeviceSpec, Ledger};
use crate::server::{listener, session};

/// How long sessions get to flush their last frames at shutdown.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

/// Why the daemon could not run.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// The socket could not be set up.
    #[error(transparent)]
    Listen(#[from] listener::ListenError),
    /// The lease journal cannot be used.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    /// A signal handler could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// The socket passed by systemd cannot be used.
    #[error("socket activation: {0}")]
    Activation(#[from] crate::systemd::activation::ActivationError),
    /// The D-Bus service could not start on the bus that was asked for.
    #[error(transparent)]
    Dbus(crate::dbus::DbusError),
    /// The metrics listener could not be bound.
    #[error("cannot serve metrics on {listen}: {source}")]
    Metrics {
        /// Where.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
}

/// What the daemon needs to start.
pub struct Daemon {
    /// Validated configuration.
    pub config: Config,
    /// Where the configuration came from, for SIGHUP reloads.
    pub config_path: Option<PathBuf>,
    /// The socket path.
    pub socket: PathBuf,
    /// The device backend.
    pub backend: Box<dyn Backend>,
    /// Where the lease journal lives; no journal when `None`.
    pub state_dir: Option<PathBuf>,
}

impl Daemon {
    /// Runs until SIGTERM or SIGINT. Call inside a tokio runtime.
    pub async fn run(self) -> Result<(), DaemonError> {
        let Daemon {
            mut config,
            config_path,
            socket,
            backend,
            state_dir,
        } = self;
        // The file as it was at the start (read before anyone can connect and change it), to
        // tell which changed keys a reload cannot apply.
        let at_start = config_path.as_deref().and_then(|p| Config::load(p).ok());
        let nofile = fd_budget::raise_limit();
        fd_budget::fit(&mut config.limits, nofile);
        let probed = backend.devices();
        let specs: Vec<DeviceSpec> = probed
            .iter()
            .map(|d| DeviceSpec {
                kind: crate::ledger::PoolKind::Gpu,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                total_bytes: d.total_bytes,
                headroom_bytes: config.headroom_bytes.min(d.total_bytes),
                unmanaged_bytes: 0,
                compute_slots: config.compute_slots,
                critical_slots: config.critical_slots,
                topology: d.topology,
            })
            .collect();
        for (i, d) in specs.iter().enumerate() {
            info!(index = i, uuid = %d.uuid, name = %d.name, total = d.total_bytes, capacity = d.capacity(), "device");
            if let Some(why) = no_capacity(config.headroom_bytes, d.total_bytes) {
                warn!(index = i, uuid = %d.uuid, headroom = config.headroom_bytes, total = d.total_bytes, "device {i} can grant no memory: {why}");
            }
        }
        // Under socket activation the socket, its mode and group are the socket unit's.
        let activated = crate::systemd::activation::take_listener()?;
        let owns_socket = activated.is_none();
        // The path actually served: under activation the unit's, whatever --socket said.
        let served = match &activated {
            Some(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(std::path::Path::to_path_buf))
                .unwrap_or_else(|| PathBuf::from("(unnamed socket)")),
            None => socket.clone(),
        };
        let (listener, socket_lock) = match activated {
            Some(l) => {
                let l = tokio::net::UnixListener::from_std(l).map_err(|source| {
                    listener::ListenError::Io {
                        what: "cannot use the passed socket",
                        path: socket.clone(),
                        source,
                    }
                })?;
                (l, None)
            }
            None => {
                let (l, lock) =
                    listener::bind(&socket, config.socket_mode, config.socket_group.as_deref())?;
                (l, Some(lock))
            }
        };
        let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
        let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
        let mut hup = signal(SignalKind::hangup()).map_err(DaemonError::Signals)?;

        let kind = backend.kind();
        let names = probed.iter().map(|d| d.name.clone()).collect();
        // The host's pools come after the devices (docs/HOST.md).
        let host = host_layout(&config);
        let mut specs = specs;
        if let Some(layout) = &host {
            specs.extend(layout.pools());
        }
        let hub = Hub::new(
            Ledger::new(config.scheduler.clone(), specs),
            names,
            &config,
            kind,
        );
        let hub = match &host {
            // A configured capacity is the operator's: what the machine's other processes
            // use is not measured against it.
            Some(layout) => hub.with_host(layout, config.host.memory_bytes.is_none()),
            None => hub,
        };
        // Leases from before a restart are back before the first client is accepted.
        let hub = match &state_dir {
            Some(dir) => {
                let (journal, records) = crate::journal::Journal::open(dir)?;
                info!(state_dir = %dir.display(), journaled = records.len(), "lease journal opened");
                hub.with_journal(journal, records, config.readopt_grace)
            }
            None => hub,
        };
        let notices = hub.subscribe();
        let (commands, rx) = mpsc::channel(4096);
        let hub_task = tokio::spawn(hub.run(rx));

        if kind != "simulated" {
            spawn_poller(backend, commands.clone(), config.poll_interval);
        }
        // MPS comes up beside the clients: until it is up, the welcome does not offer it.
        let mps = crate::mps::Mps::start(&config.enforce, commands.clone());
        let offer = mps.offer();
        let ids = SessionIds::default();
        let mut services =
            services::Services::start(&config, &commands, notices, ids.clone()).await?;
        services.ready(&commands).await;
        info!(socket = %served.display(), backend = kind, activated = !owns_socket, "gpud ready");

        let mut sessions = JoinSet::new();
        let mut limits = config.limits;
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let id = ids.next();
                        sessions.spawn(session::serve(stream, id, commands.clone(), limits, offer.clone(), host.is_some()));
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: wait a little rather than spin.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => match &config_path {
                    Some(path) => match Config::load(path) {
                        Ok(mut new) => {
                            let ignored = at_start.as_ref().map(|old| old.start_only_changes(&new)).unwrap_or_default();
                            if !ignored.is_empty() {
                                warn!(keys = %ignored.join(", "), "config reload: these keys changed but take effect only when gpud restarts");
                            }
                            fd_budget::fit(&mut new.limits, nofile);
                            limits = new.limits;
                            let _ = commands.send(Command::Reload(Box::new(new))).await;
                        }
                        Err(e) => error!("config reload rejected, keeping the old one: {e}"),
                    },
                    None => info!("SIGHUP: no config file to reload"),
                },
            }
        }
        info!("stopping");
        services.stopping();
        drop(listener);
        mps.stop().await;
        let _ = commands.send(Command::Shutdown).await;
        let _ = hub_task.await;
        let deadline = Instant::now() + SHUTDOWN_FLUSH;
        while !sessions.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, sessions.join_next())
                .await
                .is_err()
            {
                break;
            }
        }
        drop(services);
        if owns_socket {
            let _ = std::fs::remove_file(&socket);
        }
        // Only now may another daemon take the name.
        drop(socket_lock);
        info!("stopped");
        Ok(())
    }
}

/// Why a device's headroom leaves it no memory to grant, if it does.
fn no_capacity(headroom: u64, total: u64) -> Option<String> {
    (headroom >= total).then(|| {
        format!(
            "the headroom ({}) is not less than its memory ({}); lower --headroom or devices.headroom",
            gpud_proto::Bytes(headroom),
            gpud_proto::Bytes(total)
        )
    })
}

/// Polls the backend on a thread of its own (NVML calls block) and reports to the hub.
fn spawn_poller(mut backend: Box<dyn Backend>, hub: mpsc::Sender<Command>, every: Duration) {
    std::thread::Builder::new()
        .name("gpud-devices".into())
        .spawn(move || {
            loop {
                match backend.usage() {
                    Ok(usage) => {
                        if hub.blocking_send(Command::Usage(usage)).is_err() {
                            return;
                        }
                    }
                    Err(e) => warn!("device poll failed: {e}"),
                }
                std::thread::sleep(every);
            }
        })
        .map(drop)
        .unwrap_or_else(|e| error!("cannot start the device poller: {e}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_headroom_that_takes_the_whole_device_is_named_with_its_numbers() {
        let why = no_capacity(20 << 30, 16 << 30).expect("no capacity");
        assert!(
            why.contains("20.0 GiB") && why.contains("16.0 GiB"),
            "{why}"
        );
        assert!(no_capacity(512 << 20, 16 << 30).is_none());
    }
}

/// The host as `[host]` books it, or `None` when host resources are off (or the host cannot
/// be read: then they are off, and the log says why).
fn host_layout(config: &Config) -> Option<crate::host::HostLayout> {
    if !config.host.enabled {
        info!("host resources are off ([host] enabled = false)");
        return None;
    }
    match crate::host::discover() {
        Ok(facts) => {
            let layout = crate::host::HostLayout::new(&facts, &config.host);
            let cpus: usize = layout.nodes.iter().map(|n| n.cpus.len()).sum();
            info!(
                memory = layout.memory_total,
                headroom = layout.memory_headroom,
                pinned = layout.pinned_total,
                nodes = layout.nodes.len(),
                cpus,
                "host resources"
            );
            Some(layout)
        }
        Err(e) => {
            warn!("host resources are off: {e}");
            None
        }
    }
}
