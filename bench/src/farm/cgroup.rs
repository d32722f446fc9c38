//! A cgroup v2 memory limit for the host runs: the farm makes one group per cell under a
//! cgroup root (`/sys/fs/cgroup`), with `memory.max` set and swap off, starts the cell's provers
//! in it, reads what the kernel counted (`memory.events`' `oom_kill`, `memory.peak`), and
//! removes it again, killing whatever is left in it, on every way out ([`Cgroup`]'s drop).
//! Groups of a farm whose process is gone (a run killed by a timeout) are removed at the next
//! run's start ([`remove_stale`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The prefix of the farm's groups: `gpud-farm-PID-CELL`.
pub const PREFIX: &str = "gpud-farm-";

/// Why a cgroup could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CgroupError(String);

fn err(msg: String) -> CgroupError {
    CgroupError(msg)
}

/// Checks that `root` is a writable cgroup v2 directory whose children get the memory
/// controller (enabling it in `cgroup.subtree_control` when it is available but off).
pub fn check_root(root: &Path) -> Result<(), CgroupError> {
    let controllers = root.join("cgroup.controllers");
    let have = std::fs::read_to_string(&controllers).map_err(|e| {
        err(format!(
            "{} is not a cgroup v2 hierarchy ({}: {e}); --host-limit needs cgroup v2 with the memory controller, writable (root)",
            root.display(),
            controllers.display()
        ))
    })?;
    if !have.split_whitespace().any(|c| c == "memory") {
        return Err(err(format!(
            "the memory controller is not available in {} (cgroup.controllers: {:?})",
            root.display(),
            have.trim()
        )));
    }
    let subtree = root.join("cgroup.subtree_control");
    let on = std::fs::read_to_string(&subtree).unwrap_or_default();
    if !on.split_whitespace().any(|c| c == "memory") {
        std::fs::write(&subtree, "+memory").map_err(|e| {
            err(format!(
                "cannot enable the memory controller for the groups under {} (writing +memory to {}: {e}); run as root on a host whose cgroup v2 tree is writable, or give --cgroup-root",
                root.display(),
                subtree.display()
            ))
        })?;
    }
    Ok(())
}

/// `key`'s count in a `memory.events` text.
pub fn event_count(events: &str, key: &str) -> Option<u64> {
    events.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// One group with a memory limit; removed (its processes killed first) when dropped.
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// Makes `root/name` with `memory.max = limit` and no swap.
    pub fn create(root: &Path, name: &str, limit: u64) -> Result<Self, CgroupError> {
        let dir = root.join(name);
        std::fs::create_dir(&dir)
            .map_err(|e| err(format!("creating the cgroup {}: {e}", dir.display())))?;
        let group = Self { dir };
        group.write("memory.max", &limit.to_string())?;
        // No swap: over the limit the kernel's OOM killer acts, as on a host without swap.
        if group.dir.join("memory.swap.max").exists() {
            group.write("memory.swap.max", "0")?;
        }
        Ok(group)
    }

    fn write(&self, file: &str, value: &str) -> Result<(), CgroupError> {
        let path = self.dir.join(file);
        std::fs::write(&path, value)
            .map_err(|e| err(format!("writing {value} to {}: {e}", path.display())))
    }

    /// The group's directory (a process joins by writing its pid to `cgroup.procs`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Processes the kernel's OOM killer ended in the group (`memory.events`' `oom_kill`).
    pub fn oom_kills(&self) -> Option<u64> {
        let events = std::fs::read_to_string(self.dir.join("memory.events")).ok()?;
        event_count(&events, "oom_kill")
    }

    /// The group's peak memory (`memory.peak`, kernels from 5.19).
    pub fn peak(&self) -> Option<u64> {
        std::fs::read_to_string(self.dir.join("memory.peak"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The processes in the group.
    pub fn pids(&self) -> Vec<i32> {
        pids_of(&self.dir)
    }
}

fn pids_of(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills every process in `dir` and removes it (waiting up to 5 s for them to go).
fn kill_and_remove(dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = pids_of(dir);
        if pids.is_empty() {
            break;
        }
        // cgroup.kill (kernels from 5.14) takes the whole group at once; else one by one.
        if std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
            for pid in &pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if Instant::now() > deadline {
            return Err(format!("{}: processes {pids:?} did not end", dir.display()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // A group just emptied can be busy for a moment.
    let mut last = None;
    while Instant::now() < deadline + Duration::from_secs(1) {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "removing {}: {}",
        dir.display(),
        last.map_or_else(|| "timed out".to_owned(), |e| e.to_string())
    ))
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = kill_and_remove(&self.dir) {
            eprintln!("farm: {e}");
        }
    }
}

/// Removes the groups under `root` left by farms whose process no longer runs; returns their
/// names.
pub fn remove_stale(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let owner = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = owner.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if owner.is_some() && !alive && kill_and_remove(&e.path()).is_ok() {
            removed.push(name);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_read_from_memory_events() {
        let events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(event_count(events, "oom_kill"), Some(2));
        assert_eq!(event_count(events, "oom"), Some(3));
        assert_eq!(event_count(events, "nothing"), None);
    }

    #[test]
    fn a_directory_that_is_no_cgroup_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_root(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a cgroup v2 hierarchy"), "{e}");
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu io\n").unwrap();
        let e = check_root(dir.path()).unwrap_err().to_string();
        assert!(e.contains("memory controller is not available"), "{e}");
    }

    #[test]
    fn stale_groups_of_dead_farms_are_removed_and_live_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        // A pid that is not running (pids are below 2^22 on Linux) and this process's own.
        let dead = root.path().join(format!("{PREFIX}4194303-cell"));
        let live = root
            .path()
            .join(format!("{PREFIX}{}-cell", std::process::id()));
        for d in [&dead, &live] {
            std::fs::create_dir(d).unwrap();
        }
        let removed = remove_stale(root.path());
        assert_eq!(removed, vec![format!("{PREFIX}4194303-cell")]);
        assert!(!dead.exists() && live.exists());
    }
}
