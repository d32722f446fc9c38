//! The MPS control daemon that gpud runs for the host (`[enforce] mps = true`): started in the
//! foreground as gpud's child, with its pipe and log directories under gpud's runtime
//! directory, started again (with a growing wait) when it ends, and ended at gpud's stop
//! (`quit` through the control program, a kill if it does not go in time).
//!
//! The decisions are [`supervisor`]'s; this shell starts and signals processes, prepares the
//! directories, and publishes what status and the welcome say: the hub hears every change as
//! [`Command::Enforcement`], the sessions read [`Offer`] when they greet a client.

pub mod process;
pub mod supervisor;

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use gpud_proto::{EnforcementStatus, MpsStatus};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::config::EnforceConfig;
use crate::config::enforce::MPS_CONTROL;
use crate::hub::Command;
use supervisor::{Action, Policy, Supervisor};

/// The runtime directory of a gpud run by root (the packaged service's `RuntimeDirectory`).
pub const SYSTEM_RUNTIME_DIR: &str = "/run/gpud";

/// Where the MPS directories go when `enforce.mps_directory` does not say: under the host's
/// runtime directory for root, under the user's own (`$XDG_RUNTIME_DIR/gpud`) otherwise;
/// `None` when a non-root user has no runtime directory.
pub fn default_directory(euid: u32, xdg_runtime_dir: Option<&str>) -> Option<PathBuf> {
    if euid == 0 {
        return Some(Path::new(SYSTEM_RUNTIME_DIR).join("mps"));
    }
    xdg_runtime_dir
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join("gpud/mps"))
}

/// The control program: the configured path, else [`MPS_CONTROL`] in the directories of
/// `path_var` (the `PATH` gpud was started with).
pub fn find_program(configured: Option<&Path>, path_var: Option<&str>) -> Result<PathBuf, String> {
    let executable =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0);
    if let Some(p) = configured {
        return if executable(p) {
            Ok(p.to_path_buf())
        } else if p.exists() {
            Err(format!(
                "{} (enforce.mps_control) is not executable",
                p.display()
            ))
        } else {
            Err(format!(
                "{} (enforce.mps_control) does not exist",
                p.display()
            ))
        };
    }
    path_var
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(MPS_CONTROL))
        .find(|p| executable(p))
        .ok_or_else(|| {
            format!(
                "{MPS_CONTROL} not found in PATH ({}): install the NVIDIA driver's compute utilities or set enforce.mps_control",
                path_var.unwrap_or("")
            )
        })
}

/// The daemon's pipe and log directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directories {
    /// The directory of both.
    pub root: PathBuf,
    /// `CUDA_MPS_PIPE_DIRECTORY`.
    pub pipe: PathBuf,
    /// `CUDA_MPS_LOG_DIRECTORY`.
    pub log: PathBuf,
}

impl Directories {
    /// `pipe/` and `log/` under `root`.
    pub fn under(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            pipe: root.join("pipe"),
            log: root.join("log"),
        }
    }

    /// Creates them, mode 0755 whatever gpud's umask (clients of every user reach the pipes),
    /// and refuses ones that another user could have planted: a symbolic link, or a directory
    /// not owned by gpud's user or root.
    pub fn prepare(&self) -> Result<(), String> {
        let me = nix::unistd::geteuid().as_raw();
        for dir in [&self.root, &self.pipe, &self.log] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let meta = std::fs::symlink_metadata(dir)
                .map_err(|e| format!("cannot stat {}: {e}", dir.display()))?;
            if meta.file_type().is_symlink() || !meta.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
            if meta.uid() != me && meta.uid() != 0 {
                return Err(format!(
                    "{} is owned by uid {}, not by gpud's user (uid {me}) or root",
                    dir.display(),
                    meta.uid()
                ));
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("cannot chmod {}: {e}", dir.display()))?;
        }
        Ok(())
    }
}

/// What the sessions read when they greet a client: whether MPS is up now.
#[derive(Debug, Clone)]
pub struct Offer(watch::Receiver<MpsStatus>);

impl Offer {
    /// MPS is up: the welcome lists [`gpud_proto::FEATURE_MPS`].
    pub fn up(&self) -> bool {
        self.0.borrow().available
    }

    /// An offer that never lists MPS (for daemons built without this part, and tests).
    pub fn never() -> Self {
        Self(watch::channel(MpsStatus::default()).1)
    }
}

/// The running supervision; [`Mps::stop`] ends it.
pub struct Mps {
    offer: Offer,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The longest gpud's stop waits for the daemon: the quit's timeout, then the kill.
    stop_limit: std::time::Duration,
}

/// How long a killed daemon may take to be gone before gpud stops without it.
const AFTER_KILL: std::time::Duration = std::time::Duration::from_secs(2);

impl Mps {
    /// Starts the supervision as `[enforce]` says (when MPS is off, only tells the hub so):
    /// the hub hears every change of state.
    pub fn start(config: &EnforceConfig, hub: mpsc::Sender<Command>) -> Self {
        let off = MpsStatus {
            enabled: false,
            reason: Some("off in the config ([enforce] mps = false)".into()),
            ..MpsStatus::default()
        };
        if !config.mps {
            let _ = hub.try_send(Command::Enforcement(EnforcementStatus { mps: off.clone() }));
            return Self {
                offer: Offer(watch::channel(off).1),
                stop: None,
                task: None,
                stop_limit: AFTER_KILL,
            };
        }
        let root = config.mps_directory.clone().or_else(|| {
            default_directory(
                nix::unistd::geteuid().as_raw(),
                std::env::var("XDG_RUNTIME_DIR").ok().as_deref(),
            )
        });
        let dirs = root.as_deref().map(Directories::under);
        let first = MpsStatus {
            enabled: true,
            reason: Some("starting".into()),
            pipe_directory: dirs.as_ref().map(|d| d.pipe.display().to_string()),
            log_directory: dirs.as_ref().map(|d| d.log.display().to_string()),
            ..MpsStatus::default()
        };
        let (publish, watched) = watch::channel(first);
        let (stop, stopped) = oneshot::channel();
        let shell = Shell {
            program: config.mps_control.clone(),
            dirs,
            policy: Policy {
                stop_timeout: config.mps_stop_timeout,
                ..Policy::default()
            },
            hub,
            publish,
        };
        Self {
            offer: Offer(watched),
            stop: Some(stop),
            task: Some(tokio::spawn(shell.run(stopped))),
            stop_limit: config.mps_stop_timeout + AFTER_KILL,
        }
    }

    /// What the sessions read.
    pub fn offer(&self) -> Offer {
        self.offer.clone()
    }

    /// Ends the daemon (quit, then kill after `enforce.mps_stop_timeout`) and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            // A daemon stuck past its kill (in the kernel, say) does not hold up gpud's stop.
            if tokio::time::timeout(self.stop_limit, task).await.is_err() {
                warn!("the MPS control daemon is still there after its kill; stopping without it");
            }
        }
    }
}

/// The task that carries out the supervisor's actions.
struct Shell {
    program: Option<PathBuf>,
    dirs: Option<Directories>,
    policy: Policy,
    hub: mpsc::Sender<Command>,
    publish: watch::Sender<MpsStatus>,
}

impl Shell {
    async fn run(self, mut stopped: oneshot::Receiver<()>) {
        let mut supervisor = Supervisor::new(self.policy);
        let mut child: Option<process::Daemon> = None;
        let mut stop_asked = false;
        let mut last: Option<MpsStatus> = None;
        loop {
            while let Some(action) = supervisor.poll_action() {
                match action {
                    Action::Spawn => match self.spawn() {
                        Ok(daemon) => {
                            info!(pid = daemon.pid(), program = %daemon.program().display(), "MPS control daemon started");
                            supervisor.handle_spawned(Instant::now(), daemon.pid());
                            child = Some(daemon);
                        }
                        Err(why) => supervisor.handle_spawn_failed(Instant::now(), why),
                    },
                    Action::Quit(pid) => {
                        if let (Some(daemon), Some(dirs)) = (&child, &self.dirs) {
                            info!(pid, "stopping the MPS control daemon (quit)");
                            daemon.quit(dirs);
                        }
                    }
                    Action::Kill(pid) => {
                        warn!(
                            pid,
                            "the MPS control daemon did not quit in time; killing it"
                        );
                        if let Some(daemon) = &child {
                            daemon.kill();
                        }
                    }
                }
            }
            self.publish_changes(&supervisor, &mut last).await;
            if supervisor.is_finished() {
                return;
            }
            let deadline = supervisor.next_timeout();
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                how = async { child.as_mut().expect("guarded").wait().await }, if child.is_some() => {
                    child = None;
                    supervisor.handle_exited(Instant::now(), how);
                }
                () = sleep => supervisor.handle_timeout(Instant::now()),
                _ = &mut stopped, if !stop_asked => {
                    stop_asked = true;
                    supervisor.handle_stop(Instant::now());
                }
            }
        }
    }

    fn spawn(&self) -> Result<process::Daemon, String> {
        let dirs = self.dirs.as_ref().ok_or_else(|| {
            "no runtime directory for the MPS pipes: not root and XDG_RUNTIME_DIR is not set; set enforce.mps_directory".to_string()
        })?;
        let program = find_program(
            self.program.as_deref(),
            std::env::var("PATH").ok().as_deref(),
        )?;
        dirs.prepare()?;
        process::Daemon::spawn(&program, dirs)
    }

    /// Tells the hub and the sessions when what status says has changed, and logs it.
    async fn publish_changes(&self, supervisor: &Supervisor, last: &mut Option<MpsStatus>) {
        let a = supervisor.availability();
        let now = MpsStatus {
            enabled: true,
            available: a.up,
            reason: a.reason,
            pipe_directory: self.dirs.as_ref().map(|d| d.pipe.display().to_string()),
            log_directory: self.dirs.as_ref().map(|d| d.log.display().to_string()),
            pid: a.pid,
            restarts: a.restarts,
        };
        if last.as_ref() == Some(&now) {
            return;
        }
        let was_up = last.as_ref().is_some_and(|l| l.available);
        match (&now.reason, now.available) {
            (_, true) => info!(
                pid = now.pid,
                pipe_directory = now.pipe_directory.as_deref().unwrap_or(""),
                "MPS is up: `gpudctl run --enforce mps` programs get their lease as a hard memory limit"
            ),
            (Some(why), false) if !why.starts_with("starting") && why != "gpud is stopping" => {
                warn!(
                    "MPS is not available: {why}; `gpudctl run --enforce mps` is refused until it is up (other leases are served as usual)"
                )
            }
            (Some(why), false) if was_up => info!("MPS is not available: {why}"),
            _ => {}
        }
        let _ = self.publish.send(now.clone());
        let _ = self
            .hub
            .send(Command::Enforcement(EnforcementStatus { mps: now.clone() }))
            .await;
        *last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_uses_the_host_runtime_directory_and_users_their_own() {
        assert_eq!(
            default_directory(0, Some("/run/user/0")),
            Some(PathBuf::from("/run/gpud/mps"))
        );
        assert_eq!(
            default_directory(1000, Some("/run/user/1000")),
            Some(PathBuf::from("/run/user/1000/gpud/mps"))
        );
        assert_eq!(default_directory(1000, Some("relative")), None);
        assert_eq!(default_directory(1000, None), None);
    }

    #[test]
    fn the_program_is_found_in_path_or_its_absence_is_explained() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let path_var = format!("/nonexistent:{}", bin.display());
        let e = find_program(None, Some(&path_var)).unwrap_err();
        assert!(
            e.contains("not found in PATH") && e.contains(&path_var),
            "{e}"
        );
        let program = bin.join(MPS_CONTROL);
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        let e = find_program(None, Some(&path_var)).unwrap_err();
        assert!(
            e.contains("not found"),
            "a file that cannot run is skipped: {e}"
        );
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_program(None, Some(&path_var)).unwrap(), program);
        let e = find_program(Some(&dir.path().join("none")), None).unwrap_err();
        assert!(
            e.contains("enforce.mps_control") && e.contains("does not exist"),
            "{e}"
        );
        assert_eq!(find_program(Some(&program), None).unwrap(), program);
    }

    #[test]
    fn directories_are_created_open_to_clients_and_planted_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = Directories::under(&dir.path().join("mps"));
        dirs.prepare().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for d in [&dirs.root, &dirs.pipe, &dirs.log] {
            assert_eq!(mode(d), 0o755, "{}", d.display());
        }
        // A private umask (the unit's UMask=0077) or a loose mode is corrected.
        std::fs::set_permissions(&dirs.pipe, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&dirs.log, std::fs::Permissions::from_mode(0o777)).unwrap();
        dirs.prepare().unwrap();
        assert_eq!((mode(&dirs.pipe), mode(&dirs.log)), (0o755, 0o755));
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let linked = dir.path().join("linked");
        std::fs::create_dir(&linked).unwrap();
        std::os::unix::fs::symlink(&real, linked.join("pipe")).unwrap();
        let e = Directories::under(&linked).prepare().unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
    }
}
