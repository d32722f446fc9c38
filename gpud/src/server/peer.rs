//! Who is on the other end of a connection: SO_PEERCRED plus what /proc tells about the pid.

use std::fs;

/// A connected client process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Process id (0 when the kernel did not say).
    pub pid: u32,
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary groups, read from /proc (empty when unreadable).
    pub groups: Vec<u32>,
    /// Process name (`comm`), or `?`.
    pub process: String,
    /// Process start time (clock ticks since boot), to tell the process from a later one that
    /// reuses its pid.
    pub start: u64,
}

impl Peer {
    /// Builds a peer from socket credentials, reading the rest from /proc.
    pub fn from_credentials(pid: Option<i32>, uid: u32, gid: u32) -> Self {
        let pid = pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
        Self {
            pid,
            uid,
            gid,
            groups: supplementary_groups(pid),
            process: process_name(pid),
            start: crate::journal::process_start(pid).unwrap_or(0),
        }
    }

    /// Whether the peer is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// A process's `comm`, or `?`.
pub fn process_name(pid: u32) -> String {
    if pid == 0 {
        return "?".into();
    }
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn supplementary_groups(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The parent of a process, from /proc/PID/stat.
pub fn parent_pid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The nearest of `pid` and its ancestors (within 32 generations) that `wanted` accepts.
pub fn nearest_ancestor(mut pid: u32, wanted: impl Fn(u32) -> bool) -> Option<u32> {
    for _ in 0..32 {
        if wanted(pid) {
            return Some(pid);
        }
        match parent_pid(pid) {
            Some(p) if p != 0 && p != pid => pid = p,
            _ => return None,
        }
    }
    None
}

/// Whether `pid` is `ancestor` or descends from it (within 32 generations).
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    nearest_ancestor(pid, |p| p == ancestor).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let p = Peer::from_credentials(Some(me as i32), 0, 0);
        assert_ne!(p.process, "?");
        assert!(descends_from(me, me));
        let parent = parent_pid(me).expect("a parent");
        assert!(descends_from(me, parent));
        assert!(!descends_from(parent, me));
    }
}
