//! The control daemon as a process: started in the foreground (`-f`) in a process group of its
//! own, its output logged, asked to `quit` through a second run of the control program, and
//! killed with everything it started.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tracing::{debug, info, warn};

use super::Directories;

/// How long the output readers get, after the daemon ended, to hand over its last lines (the
/// servers it started may hold the pipes open longer).
const LAST_LINES: Duration = Duration::from_millis(200);

/// A running control daemon.
pub struct Daemon {
    child: Child,
    pid: u32,
    program: PathBuf,
    /// The last line it wrote, for the reason status gives when it ends.
    last_line: Arc<Mutex<Option<String>>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Daemon {
    /// Starts `program -f` with the directories in its environment.
    pub fn spawn(program: &Path, dirs: &Directories) -> Result<Self, String> {
        let mut command = Command::new(program);
        command
            .arg("-f")
            .env("CUDA_MPS_PIPE_DIRECTORY", &dirs.pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &dirs.log)
            // The daemon serves every device gpud leases; clients name theirs by UUID.
            .env_remove("CUDA_VISIBLE_DEVICES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: a terminal's Ctrl-C reaches gpud, which then stops it in order,
            // and a kill reaches the servers it started too.
            .process_group(0);
        prepare_child(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let pid = child
            .id()
            .ok_or_else(|| format!("{} ended before it could be watched", program.display()))?;
        let last_line = Arc::new(Mutex::new(None));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(log_lines(out, pid, last_line.clone())));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(log_lines(err, pid, last_line.clone())));
        }
        Ok(Self {
            child,
            pid,
            program: program.to_path_buf(),
            last_line,
            readers,
        })
    }

    /// Its pid (also its process group's id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The control program it runs.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Waits for it to end; says how, with its last line of output.
    pub async fn wait(&mut self) -> String {
        let how = match self.child.wait().await {
            Ok(status) => describe(status),
            Err(e) => format!("cannot wait for it: {e}"),
        };
        for reader in self.readers.drain(..) {
            let _ = tokio::time::timeout(LAST_LINES, reader).await;
        }
        let last = self.last_line.lock().ok().and_then(|l| l.clone());
        match last {
            Some(line) => format!("{how}; its last words: {line}"),
            None => how,
        }
    }

    /// Asks it to end: `echo quit | program` with the same pipe directory, in the background.
    /// The supervisor kills it if it is still there after the stop timeout.
    pub fn quit(&self, dirs: &Directories) {
        let mut command = Command::new(&self.program);
        command
            .env("CUDA_MPS_PIPE_DIRECTORY", &dirs.pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &dirs.log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let program = self.program.clone();
        tokio::spawn(async move {
            let mut child = match command.spawn() {
                Ok(c) => c,
                Err(e) => {
                    warn!(
                        "cannot run {} to quit the MPS daemon: {e}",
                        program.display()
                    );
                    return;
                }
            };
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(b"quit\n").await;
            }
            match tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await {
                Ok(Ok(out)) if !out.status.success() => warn!(
                    "`quit` to the MPS daemon failed ({}): {}",
                    describe(out.status),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                Ok(Err(e)) => warn!("`quit` to the MPS daemon: {e}"),
                _ => {}
            }
        });
    }

    /// Kills its process group (the daemon and the servers it started).
    pub fn kill(&self) {
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// "status 1", "killed by SIGKILL".
fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("status {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("killed by {s}"),
            Err(_) => format!("killed by signal {sig}"),
        },
        _ => "ended".into(),
    }
}

/// Logs each line the daemon writes, keeping the last.
async fn log_lines(stream: impl AsyncRead + Unpin, pid: u32, last: Arc<Mutex<Option<String>>>) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = line.trim().to_string();
        if line.is_empty() {
            continue;
        }
        info!(pid, "mps: {line}");
        if let Ok(mut l) = last.lock() {
            *l = Some(line);
        }
    }
    debug!(pid, "MPS daemon output closed");
}

/// What the child does between fork and exec: the umask a root shell has (the MPS
/// instructions assume one; gpud's own, 0077 under the unit, would make the pipes it creates
/// unusable by other users' clients), and SIGTERM when gpud dies, so that a daemon never
/// outlives the gpud that offered it.
fn prepare_child(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and calls only umask(2) and
    // prctl(2), which are async-signal-safe and touch no memory of the parent's.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0o022);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
